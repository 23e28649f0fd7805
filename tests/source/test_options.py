"""Options are validated up front: hostile and absurd values fail at load() naming the option."""

from __future__ import annotations

import traceback

import pytest

from crdb_pubsub.source.options import OptionError, parse_options

SUB = "projects/p/subscriptions/sub-x"


def _clean_env(monkeypatch) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


@pytest.mark.parametrize(
    "option, value",
    [
        ("subscription", "projects/p/subscriptions/sub-x\n"),
        ("subscription", "sub-x\x00"),
        ("projectId", "proj\r\nX-Injected: 1"),
        ("emulatorHost", "127.0.0.1:8085\t"),
        ("stateDir", "/tmp/state\x1b[31m"),
        ("topic", "topic-x\x7f"),
        ("rowSchema", "a INT\x00"),
    ],
)
def test_control_characters_are_rejected(option, value):
    raw = {"subscription": SUB, "projectId": "p", option: value}
    with pytest.raises(OptionError, match="control characters"):
        parse_options(raw)


@pytest.mark.parametrize(
    "option, value",
    [
        ("maxOutstandingMessages", "-1"),
        ("maxOutstandingMessages", "0"),
        ("maxOutstandingBytes", "-1"),
        ("maxOutstandingBytes", "1024"),  # below 64 KiB: could not hold one ordinary pull
        ("maxMessagesPerTrigger", "0"),
        ("maxMessagesPerTrigger", "-5"),
        ("maxBytesPerTrigger", "-1"),
        ("numPartitions", "0"),
        ("numPartitions", "-1"),
        ("numPartitions", "1000000"),
        ("maxLeaseDurationSeconds", "-1"),
        ("ackDeadlineSeconds", "0"),
        ("ackDeadlineSeconds", "-10"),
        ("ackDeadlineSeconds", "601"),
        ("ackDeadlineSeconds", "9"),  # real service: 10-600
        ("ackDeadlineSeconds", "1"),
        ("maxOutstandingMessages", "1e3"),
        ("maxOutstandingMessages", "99999999999999999999"),
    ],
)
def test_absurd_values_are_rejected_against_the_real_service(monkeypatch, option, value):
    _clean_env(monkeypatch)
    with pytest.raises(OptionError, match=option):
        parse_options({"subscription": SUB, option: value})


@pytest.mark.parametrize("value", ["10", "60", "600"])
def test_real_service_ack_deadlines_accepted(monkeypatch, value):
    _clean_env(monkeypatch)
    assert parse_options({"subscription": SUB, "ackDeadlineSeconds": value}).ackDeadlineSeconds == int(value)


def test_emulator_accepts_short_ack_deadlines_but_not_beyond_600(monkeypatch):
    _clean_env(monkeypatch)
    assert (
        parse_options(
            {"subscription": SUB, "emulatorHost": "127.0.0.1:8085", "ackDeadlineSeconds": "1"}
        ).ackDeadlineSeconds
        == 1
    )
    for bad in ("0", "601"):
        with pytest.raises(OptionError, match="ackDeadlineSeconds"):
            parse_options({"subscription": SUB, "emulatorHost": "127.0.0.1:8085", "ackDeadlineSeconds": bad})
    with pytest.raises(OptionError, match="maxLeaseDurationSeconds"):
        parse_options(
            {
                "subscription": SUB,
                "emulatorHost": "127.0.0.1:8085",
                "ackDeadlineSeconds": "60",
                "maxLeaseDurationSeconds": "30",
            }
        )


def test_executors_receiver_needs_a_state_dir(monkeypatch):
    _clean_env(monkeypatch)
    with pytest.raises(OptionError, match="receiver=executors needs stateDir"):
        parse_options({"subscription": SUB, "receiver": "executors"})
    opts = parse_options({"subscription": SUB, "receiver": "Executors", "stateDir": "/tmp/s"})
    assert opts.receiver == "executors"


def test_unknown_receiver_names_the_accepted_values(monkeypatch):
    _clean_env(monkeypatch)
    with pytest.raises(OptionError, match=r"receiver.*driver.*executors"):
        parse_options({"subscription": SUB, "receiver": "workers"})


@pytest.mark.parametrize("receiver", ["driver", "executors"])
@pytest.mark.parametrize("url", ["hdfs:///user/x/state", "s3a://b/state", "gs://", "gs:///no-bucket"])
def test_state_dir_urls_other_than_gs_fail_fast(monkeypatch, receiver, url):
    """A URL the source can't keep its state in must not silently become a local directory named
    after its scheme: it fails at load(), naming the option and the accepted forms."""
    _clean_env(monkeypatch)
    with pytest.raises(OptionError, match=r"stateDir.*gs://bucket"):
        parse_options({"subscription": SUB, "receiver": receiver, "stateDir": url})


@pytest.mark.parametrize("value", ["gs://bucket/state/query-1", "file:///tmp/state", "/mnt/nfs/state"])
def test_state_dir_takes_gs_urls_and_paths(monkeypatch, value):
    _clean_env(monkeypatch)
    assert parse_options({"subscription": SUB, "receiver": "executors", "stateDir": value}).stateDir == value


# ---- refuse what is ambiguous (issue 31) ---------------------------------------------------------


@pytest.mark.parametrize("value", ["state", "./state", "data/state", "~/state", "file://state"])
@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_a_relative_state_dir_is_refused(monkeypatch, receiver, value):
    """On a cluster a relative path means another directory on every node (each process's working
    directory): refused at load(), naming the option and what is accepted."""
    _clean_env(monkeypatch)
    with pytest.raises(OptionError, match=r"stateDir.*absolute.*gs://bucket/prefix") as info:
        parse_options({"subscription": SUB, "receiver": receiver, "stateDir": value})
    assert len(str(info.value).splitlines()) == 1


def test_batch_transfer_with_executors_is_refused(monkeypatch):
    """batchTransfer says how the driver hands a batch to the tasks: with receiver=executors the
    tasks pull, so it would do nothing; given anyway, it is refused rather than ignored."""
    _clean_env(monkeypatch)
    for transfer in ("fetch", "tasks"):
        with pytest.raises(OptionError, match=r"batchTransfer.*receiver=driver.*receiver=executors"):
            parse_options({"subscription": SUB, "receiver": "executors", "stateDir": "/s", "batchTransfer": transfer})
    assert parse_options({"subscription": SUB, "receiver": "executors", "stateDir": "/s"}).receiver == "executors"
    assert parse_options({"subscription": SUB, "batchTransfer": "tasks"}).batchTransfer == "tasks"


@pytest.mark.parametrize(
    "value",
    ["not json SECRET-KEY-MATERIAL", '{"private_key": "SECRET-KEY-MATERIAL"', '["SECRET-KEY-MATERIAL"]', ""],
)
def test_credentials_json_that_is_not_a_json_object_is_refused_without_its_content(monkeypatch, value):
    _clean_env(monkeypatch)
    with pytest.raises(OptionError, match=r"credentialsJson.*JSON object.*value not shown") as info:
        parse_options({"subscription": SUB, "credentialsJson": value})
    text = "".join(traceback.format_exception(info.value)) + repr(info.value)
    assert "SECRET" not in text and "private_key" not in text
