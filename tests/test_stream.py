"""The streaming source end to end: real Spark (local mode) against the real emulator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import pull_ids
from crdb_pubsub.tools.simulator import ChangefeedSimulator
from polling import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _mixed_bodies(n: int, seed: int = 7) -> list[bytes]:
    """Realistic changefeed traffic (rows of three tables, resolved messages) plus a few bad bodies."""
    sim = ChangefeedSimulator(seed=seed, updated=True, diff=True, resolved_every=50)
    bodies = [m.data for m in sim.events(n)]
    bad = [b" \n", b"{not json", b'[1, {"a": 1}]', b"\xff\xfe", b'{"Key":[1],"Topic":"t"}']
    # (a blank body, not an empty one: an empty body is a Debezium tombstone since issue 14)
    for i, b in enumerate(bad):
        bodies[(i + 1) * (len(bodies) // (len(bad) + 1))] = b
    return bodies[:n]


def _reader(spark, emulator_host: str, sub: str, **options):
    r = spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", emulator_host)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _poll_metrics(query, done, *, timeout: float) -> dict:
    """The source's progress metrics, polled until ``done(metrics)``; fails with the query's own
    error if it died, or names what was awaited when ``timeout`` runs out."""
    metrics: dict = {}

    def check() -> bool:
        nonlocal metrics
        progress = query.lastProgress
        if progress and progress["sources"][0]["latestOffset"]:
            metrics = json.loads(progress["sources"][0]["latestOffset"])
        return done(metrics)

    wait_for(
        check, timeout, f"the source's metrics to satisfy the test (last seen: {metrics})", query=query, interval=0.5
    )
    return metrics


@pytest.mark.parametrize("transfer", ["fetch", "tasks"])
def test_available_now_drains_backlog_into_parquet_and_acks_everything(
    spark, emulator_host, make_subscription, publish, tmp_path: Path, transfer
):
    """Both ways a batch reaches the executors: fetched from the driver-side reader, or inside the tasks."""
    topic, sub = make_subscription(ack_deadline_seconds=5)
    bodies = _mixed_bodies(5000)
    ids = publish(
        topic, bodies, attributes={"origin": "test"}
    )  # Pub/Sub rejects a message with no data and no attributes
    assert len(ids) == 5000

    df = _reader(spark, emulator_host, sub, ackDeadlineSeconds=5, maxMessagesPerTrigger=2000, batchTransfer=transfer)
    q = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(300), "AvailableNow query did not finish"
    assert q.exception() is None

    out = spark.read.parquet(str(tmp_path / "out"))
    rows = out.select("message_id", "kind").collect()
    assert len(rows) == 5000
    assert {r.message_id for r in rows} == set(ids)
    kinds = {}
    for r in rows:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    assert kinds["malformed"] == 5 and kinds["resolved"] > 0 and kinds["row"] > 4000
    progress = q.recentProgress
    assert sum(p.numInputRows for p in progress) == 5000
    # Acked only what Spark committed, and all of it: nothing is left after the ack deadline.
    time.sleep(6)
    assert pull_ids(emulator_host, sub, timeout=2.0) == []


def test_failing_batch_is_not_acknowledged_and_is_redelivered(
    spark, emulator_host, make_subscription, publish, tmp_path: Path
):
    topic, sub = make_subscription(ack_deadline_seconds=3)
    ids = publish(
        topic, [json.dumps({"Key": [i], "Value": {"after": {"id": i}}, "Topic": "t"}).encode() for i in range(600)]
    )
    seen_file = tmp_path / "seen.jsonl"
    failed_file = tmp_path / "failed.json"

    def sink(batch_df, batch_id):
        got = [r.message_id for r in batch_df.select("message_id").collect()]
        if got and not failed_file.exists():
            failed_file.write_text(json.dumps(got))
            raise RuntimeError("sink fails on purpose")
        with seen_file.open("a") as fh:
            for mid in got:
                fh.write(mid + "\n")

    def run():
        df = _reader(spark, emulator_host, sub, ackDeadlineSeconds=3, maxMessagesPerTrigger=200)
        return df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk")).start()

    q = run()
    with pytest.raises(Exception, match="sink fails on purpose"):
        q.awaitTermination(120)
    failed = json.loads(failed_file.read_text())
    assert failed, "the failing batch had messages"

    q = run()
    try:
        wait_for(
            lambda: seen_file.exists() and set(ids) <= set(seen_file.read_text().split()),
            120,
            "every message in the sink after the restart",
            query=q,
            interval=1.0,
        )
    finally:
        q.stop()
    seen = set(seen_file.read_text().split())
    assert set(failed) <= seen, "messages of the failed batch were acknowledged before being processed"
    assert set(ids) <= seen


def test_progress_reports_receiver_metrics(spark, emulator_host, make_subscription, publish, tmp_path: Path):
    topic, sub = make_subscription()
    publish(topic, [b'{"resolved":"1.0000000002"}', b"bad"])
    df = _reader(spark, emulator_host, sub)
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk")).start()
    # Spark asks for the report when it plans a batch, just before it commits the previous one,
    # so counters trail by one planning step; an idle query keeps reporting.
    try:
        last = _poll_metrics(q, lambda m: (m.get("ackConfirmed"), m.get("malformed")) == (2, 1), timeout=60)
    finally:
        q.stop()
    for key in (
        "received",
        "inFlight",
        "acknowledged",
        "ackConfirmed",
        "ackFailed",
        "leasesExtended",
        "redeliveriesDropped",
        "malformed",
        "oldestUnackedAgeSeconds",
    ):
        assert key in last, key
    assert last["received"] == 2 and last["acknowledged"] == 2 and last["malformed"] == 1 and last["inFlight"] == 0


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"maxMesagesPerTrigger": "10"}, "Did you mean 'maxMessagesPerTrigger'"),
        ({"mode": "LENIENT"}, "PERMISSIVE, DROPMALFORMED, FAILFAST"),
        ({"numPartitions": "0"}, "numPartitions"),
        ({"envelope": "wraped"}, "wrapped"),
    ],
)
def test_bad_options_fail_at_load(spark, options, expected):
    r = spark.readStream.format("crdb_pubsub").option("subscription", "projects/p/subscriptions/sub-x")
    for k, v in options.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=expected):
        r.load()


def test_credentials_do_not_leak_into_errors_or_plans(spark):
    secret = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----SECRETSECRET"}'
    r = spark.readStream.format("crdb_pubsub").option("subscription", "projects/p/subscriptions/sub-x")
    r = r.option("credentialsJson", secret).option("numPartitions", "-1")
    with pytest.raises(Exception) as info:
        r.load()
    assert "SECRETSECRET" not in str(info.value)
    df = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", "projects/p/subscriptions/sub-x")
        .option("credentialsJson", secret)
        .load()
    )
    assert "SECRETSECRET" not in df._jdf.queryExecution().toString()


def test_unreachable_emulator_fails_the_query_quickly(spark, tmp_path: Path):
    df = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", "projects/p/subscriptions/sub-x")
        .option("emulatorHost", "127.0.0.1:9")
        .load()
    )
    t0 = time.monotonic()
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk")).start()
    with pytest.raises(Exception, match="cannot reach Pub/Sub"):
        q.awaitTermination(90)
    assert time.monotonic() - t0 < 60


def test_stopped_query_hands_held_messages_back_at_once(
    spark, emulator_host, make_subscription, publish, tmp_path: Path
):
    # A 60 s lease: without the hand-back the messages would stay invisible for a minute.
    topic, sub = make_subscription(ack_deadline_seconds=60)
    ids = publish(topic, [f'{{"resolved":"{i}.0000000000"}}'.encode() for i in range(50)])
    started = tmp_path / "started"

    def stuck_sink(batch_df, batch_id):
        if batch_df.count():
            started.write_text("x")
            time.sleep(20)  # stop() waits for this (a foreachBatch can't be interrupted), 40 s before the lease ends

    df = _reader(spark, emulator_host, sub, ackDeadlineSeconds=60)
    q = df.writeStream.foreachBatch(stuck_sink).option("checkpointLocation", str(tmp_path / "chk")).start()
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started.exists()
    q.stop()
    got: set[str] = set()
    deadline = time.monotonic() + 15
    while got != set(ids) and time.monotonic() < deadline:
        got |= set(pull_ids(emulator_host, sub, timeout=1.0))
    assert got == set(ids), f"{len(set(ids) - got)} messages still leased by the stopped query"
