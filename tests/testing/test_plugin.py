"""The pytest plugin as a user's pytest sees it, and run_available_now against a real query."""

from __future__ import annotations

from decimal import Decimal

import pytest

from crdb_pubsub.apply import foreach_batch_apply, read_state
from crdb_pubsub.testing import run_available_now

KIT_FIXTURES = ("changefeed", "crdb_spark", "pubsub_emulator", "pubsub_subscription")


def test_a_plain_pytest_lists_the_kits_fixtures(pytester: pytest.Pytester):
    """Found through the package's pytest11 entry point: no conftest, no import."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "fixtures defined from crdb_pubsub.testing.plugin" in out
    for name in KIT_FIXTURES:
        assert f"\n{name}" in out, name


@pytest.mark.parametrize(("flag", "outcome"), [((), "skipped"), (("--crdb-pubsub-require-emulator",), "errors")])
def test_without_an_emulator_a_test_is_skipped_saying_what_to_install(pytester: pytest.Pytester, flag, outcome):
    pytester.makepyfile("def test_uses_it(pubsub_emulator):\n    pass\n")
    env = {"CRDB_PUBSUB_EMULATOR_BACKEND": "sdk", "CLOUDSDK_ROOT_DIR": str(pytester.path / "no-sdk")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("PUBSUB_EMULATOR_HOST", raising=False)
        mp.delenv("CRDB_PUBSUB_REQUIRE_EMULATOR", raising=False)
        result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider", *flag)
    result.assert_outcomes(**{outcome: 1})
    assert "no Pub/Sub emulator could start" in result.stdout.str()
    assert "google-cloud-cli-pubsub-emulator" in result.stdout.str()


def test_changefeed_published_and_applied_with_duplicates_and_disorder(crdb_spark, changefeed, tmp_path):
    feed = changefeed("accounts", key=["id"], producer="ticdc")
    for i in range(20):
        feed.insert({"id": i, "balance": Decimal(i).scaleb(-2)})
    for i in range(0, 20, 3):
        feed.delete({"id": i})
    feed.resolved()
    ids = feed.publish(duplicates=0.3, shuffle=True, seed=3)
    assert len(ids) == len(feed.messages()) + round(0.3 * len(feed.messages()))
    state = str(tmp_path / "state")
    changes = (
        crdb_spark.readStream.format("crdb_pubsub")
        .option("subscription", feed.subscription)
        .option("emulatorHost", feed.emulator.host_port)
        .load()
    )
    run = run_available_now(
        changes.writeStream.foreachBatch(foreach_batch_apply(state, {"accounts": "id BIGINT, balance DECIMAL(12,2)"}))
    )
    assert run.batches >= 1 and run.rows is None
    got = {r["id"]: r["balance"] for r in read_state(state, "accounts").to_pylist()}
    assert got == {k: row["balance"] for (k,), row in feed.state().items()}


def test_a_query_that_dies_fails_with_its_own_exception(crdb_spark, pubsub_subscription, pubsub_emulator):
    from crdb_pubsub.testing import publish_messages
    from crdb_pubsub.tools.simulator.messages import SimMessage

    topic, subscription = pubsub_subscription()
    publish_messages(
        pubsub_emulator.host_port, topic, [SimMessage("x", "x", b"not json", {}, "", "row", "c", "", "", "")]
    )
    changes = (
        crdb_spark.readStream.format("crdb_pubsub")
        .option("subscription", subscription)
        .option("emulatorHost", pubsub_emulator.host_port)
        .option("mode", "FAILFAST")
        .load()
    )
    with pytest.raises(Exception, match="malformed") as caught:
        run_available_now(changes, timeout=120)
    assert type(caught.value).__name__ == "StreamingQueryException"


def test_run_available_now_returns_what_the_query_wrote(crdb_spark, changefeed):
    feed = changefeed("t", key=["id"])
    feed.insert({"id": 1, "v": "a"}).insert({"id": 2, "v": "b"})
    feed.publish()
    changes = (
        crdb_spark.readStream.format("crdb_pubsub")
        .option("subscription", feed.subscription)
        .option("emulatorHost", feed.emulator.host_port)
        .load()
    )
    run = run_available_now(changes.select("key", "after"))
    assert sorted(r["key"] for r in run.to_pylist()) == ["[1]", "[2]"]
    with pytest.raises(TypeError, match="a streaming DataFrame"):
        run_available_now(crdb_spark.range(1))
