"""Security checks: credentials never leak (option validation: tests/source/test_options.py).

A throwaway service-account key (a fresh RSA key, never valid anywhere) is built per test. Its
secrets (PEM body, ``private_key_id``, the key file's path) must not appear in logs of the
``crdb_pubsub`` loggers, exception messages or tracebacks, ``repr``/``str`` of the options, Spark's
plan strings, or anything a Spark driver process writes to stdout/stderr. The token URI points at
a closed local port, so nothing ever leaves the machine.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import traceback
import uuid
from pathlib import Path

import pytest

from crdb_pubsub.source.options import OptionError, parse_options

SUB = "projects/p/subscriptions/sub-x"


def _throwaway_key(tmp_path: Path) -> tuple[dict, Path, list[str]]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key_id = uuid.uuid4().hex
    info = {
        "type": "service_account",
        "project_id": "leak-test",
        "private_key_id": key_id,
        "private_key": pem,
        "client_email": "leak-test@leak-test.iam.gserviceaccount.com",
        "client_id": "123456789012345678901",
        "auth_uri": "http://127.0.0.1:9/auth",
        "token_uri": "http://127.0.0.1:9/token",
        "auth_provider_x509_cert_url": "http://127.0.0.1:9/certs",
        "client_x509_cert_url": "http://127.0.0.1:9/x509",
    }
    path = tmp_path / f"sa-{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(info))
    body = "".join(pem.strip().splitlines()[1:-1])
    # Several slices of the key body (any one of them in output is a leak), the key id, the
    # file name (the path is treated as secret too), and the JSON as it would be escaped.
    needles = [body[i : i + 32] for i in range(64, len(body) - 32, 300)]
    needles += [key_id, path.name, "BEGIN PRIVATE KEY", json.dumps(pem)[1:40]]
    return info, path, needles


def _assert_clean(text: str, needles: list[str], where: str) -> None:
    for n in needles:
        assert n not in text, f"key material {n[:12]}... found in {where}"


def _clean_env(monkeypatch) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


@pytest.mark.parametrize("how", ["credentialsJson", "credentialsFile"])
def test_options_repr_and_errors_hide_credentials(tmp_path, monkeypatch, how):
    _clean_env(monkeypatch)
    info, path, needles = _throwaway_key(tmp_path)
    value = json.dumps(info) if how == "credentialsJson" else str(path)
    opts = parse_options({"subscription": SUB, how: value})
    for text in (repr(opts), str(opts), repr(opts.model_dump()), str(opts.model_dump_json())):
        _assert_clean(text, needles, f"repr of options ({how})")
    # A bad option next to the credentials: the error names the bad option, not the secret.
    with pytest.raises(OptionError) as info_exc:
        parse_options({"subscription": SUB, how: value, "numPartitions": "-1"})
    _assert_clean(str(info_exc.value) + "".join(traceback.format_exception(info_exc.value)), needles, "OptionError")
    # Both given: refused, value not shown.
    with pytest.raises(OptionError) as both:
        parse_options({"subscription": SUB, "credentialsJson": json.dumps(info), "credentialsFile": str(path)})
    _assert_clean(str(both.value) + "".join(traceback.format_exception(both.value)), needles, "OptionError")
    # The reader pickled to executors carries no credentials at all.
    import pickle

    from crdb_pubsub.decode.schema import spark_schema
    from crdb_pubsub.source.datasource import CrdbPubSubStreamReader

    blob = pickle.dumps(CrdbPubSubStreamReader(opts, spark_schema(None)))
    _assert_clean(blob.decode("latin-1"), needles, "the pickled reader")


@pytest.mark.parametrize("how", ["credentialsJson", "credentialsFile"])
def test_credentials_loading_failures_hide_key_material(tmp_path, monkeypatch, caplog, how):
    from crdb_pubsub.source.transport import CredentialsError, load_credentials

    _clean_env(monkeypatch)
    caplog.set_level(logging.DEBUG)
    info, path, needles = _throwaway_key(tmp_path)
    # A well-formed key loads (offline: no token is fetched yet).
    value = json.dumps(info) if how == "credentialsJson" else str(path)
    assert load_credentials(**parse_options({"subscription": SUB, how: value}).credential_kwargs()) is not None
    # A corrupted key (truncated PEM) fails, and the failure shows none of it.
    broken = dict(info, private_key=info["private_key"][: len(info["private_key"]) // 2])
    bad_path = tmp_path / f"broken-{uuid.uuid4().hex}.json"
    bad_path.write_text(json.dumps(broken))
    needles = needles + [bad_path.name]
    bad_value = json.dumps(broken) if how == "credentialsJson" else str(bad_path)
    missing = str(tmp_path / f"missing-{uuid.uuid4().hex}.json")
    cases = [bad_value, json.dumps(broken)[:-3]] if how == "credentialsJson" else [bad_value, missing]
    needles.append(Path(missing).name)
    for v in cases:
        # Truncated JSON fails earlier, in parse_options (OptionError, at load()); a key that is
        # JSON but broken fails when it is loaded.
        with pytest.raises((CredentialsError, OptionError)) as exc:
            load_credentials(**parse_options({"subscription": SUB, how: v}).credential_kwargs())
        _assert_clean("".join(traceback.format_exception(exc.value)), needles, f"CredentialsError ({how})")
    _assert_clean(caplog.text, needles, "crdb_pubsub logs")


@pytest.mark.integration  # waits out the client's real connection timeout
def test_receiver_start_failure_with_real_key_hides_it(tmp_path, monkeypatch, caplog):
    """The whole driver path (options -> credentials -> client -> first RPC) with a key whose
    token exchange fails: the ReceiverError and the logs carry no key material."""
    from crdb_pubsub.source.driver import ReceiverError
    from crdb_pubsub.source.driver import make_receiver as _make_receiver
    from crdb_pubsub.source.metrics import Counters

    _clean_env(monkeypatch)
    caplog.set_level(logging.DEBUG)
    info, _path, needles = _throwaway_key(tmp_path)
    # (One variant: each start waits out the receiver's 15 s start timeout; credentialsFile
    # shares everything after loading, which the test above covers.)
    for opts in (parse_options({"subscription": SUB, "credentialsJson": json.dumps(info)}),):
        receiver = _make_receiver(opts, Counters())
        with pytest.raises(Exception) as exc:
            receiver.start()
        assert isinstance(exc.value, ReceiverError), repr(exc.value)
        _assert_clean("".join(traceback.format_exception(exc.value)), needles, "ReceiverError")
    _assert_clean(caplog.text, needles, "logs")


@pytest.mark.spark
@pytest.mark.parametrize(
    # each way of giving a key, and each receiver, once (a Spark driver per case costs ~40 s)
    "how, receiver",
    [("credentialsJson", "driver"), ("credentialsFile", "executors")],
)
def test_spark_driver_output_and_plans_hide_credentials(tmp_path, how, receiver):
    """A real Spark driver (own process, INFO logs): plan strings, the failed query's exception
    and everything on its stdout/stderr are free of key material."""
    _info, path, needles = _throwaway_key(tmp_path)
    job = Path(__file__).with_name("leak_job.py")
    cmd = [
        sys.executable,
        str(job),
        "--subscription",
        SUB,
        "--checkpoint",
        str(tmp_path / "chk"),
        "--receiver",
        receiver,
    ]
    cmd += ["--credentials-json-file", str(path)] if how == "credentialsJson" else ["--credentials-file", str(path)]
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if k not in ("PUBSUB_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    }
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    text = out.stdout + out.stderr
    assert "PLAN" in out.stdout and "QUERY FAILED" in out.stdout, text[-3000:]
    _assert_clean(text, needles, f"the Spark driver's output ({how}, receiver={receiver})")


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_serialised_tasks_carry_credentials_only_when_tasks_pull(tmp_path, receiver):
    """What Spark ships to executors: with receiver=driver no credentials at all; with
    receiver=executors the tasks pull, so the reader carries them, but the partitions, the slice
    orders and every repr stay free of key material."""
    from pyspark import cloudpickle

    from crdb_pubsub.source.datasource import CrdbPubSubStreamReader, SlicePartition
    from crdb_pubsub.source.executors.orders import SliceOrder

    info, _, needles = _throwaway_key(tmp_path)
    opts = parse_options(
        {
            "subscription": SUB,
            "credentialsJson": json.dumps(info),
            "receiver": receiver,
            "stateDir": str(tmp_path / "state"),
        }
    )
    reader = CrdbPubSubStreamReader(opts, None)  # type: ignore[arg-type]
    shipped = cloudpickle.loads(cloudpickle.dumps(reader))
    carries = shipped._options.credential_kwargs()["credentials_json"] is not None
    assert carries == (receiver == "executors")
    order = SliceOrder(
        batch_id=1,
        index=0,
        parts=1,
        subscriptions=(SUB,),
        max_messages=10,
        max_bytes=1 << 20,
        seconds=1.0,
        deadlines={SUB: 10},
        lease_seconds=10,
    )
    part = SlicePartition(1, 0, order, None)
    for what, text in [
        ("options", repr(shipped._options) + str(shipped._options)),
        ("partition", repr(part)),
        ("order", repr(order)),
        ("pickled order", repr(cloudpickle.dumps(part))),
    ]:
        _assert_clean(text, needles, what)


# ----------------------------------------------------------------------------- option validation
