"""Scenarios 3 and 4: a sink slower than 5x the ack deadline, and a sink that fails a batch.

3. Each of several batches takes more than five ack deadlines in the sink: the receiver's leaser
   keeps extending the leases, so Pub/Sub redelivers nothing (``redeliveredWhileHeld`` = 0,
   ``leasesExpired`` = 0, ``leasesExtended`` > 0), every message reaches the sink exactly once and
   nothing is left on the subscription afterwards.
4. The sink raises on a batch; the query dies; it is started again on the same checkpoint: nothing
   is lost (with ``stateDir`` the failed batch is replayed with the same content, without it the
   messages come back from Pub/Sub once their leases lapse).

Sinks are ``BatchFileSink``: batch N replaces file N, so duplicates can only come from the source.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import pull_ids
from polling import wait_for

from ._support import BatchFileSink, MetricsSampler, report, row_body, scaled, tally, until_everything_arrives

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def _reader(spark, host: str, sub: str, **options):
    r = spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", host)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def test_slow_sink_beyond_five_ack_deadlines(spark, emulator_host, make_subscription, publish, tmp_path: Path):
    deadline = 3
    slow_batches = scaled(3, 5)
    per_batch = 100
    sleep_s = 5 * deadline + 0.5
    topic, sub = make_subscription(ack_deadline_seconds=deadline)
    ids = publish(topic, [row_body(i) for i in range(slow_batches * per_batch)])
    slow_seen: list[int] = []

    def slow(batch_id: int, got: list[str]) -> None:
        if got and len(slow_seen) < slow_batches:
            slow_seen.append(batch_id)
            time.sleep(sleep_s)

    sink = BatchFileSink(tmp_path / "sink", before=slow)
    df = _reader(spark, emulator_host, sub, ackDeadlineSeconds=deadline, maxMessagesPerTrigger=per_batch)
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk")).start()
    t0 = time.monotonic()
    try:
        with MetricsSampler(q) as sampler:
            # Every acknowledgement answered. An OK that came after a lease could have lapsed
            # (``ackLate``: a renewal answered more than a second late, with a 3 s deadline, on a
            # loaded machine) proves nothing, but the message has left all the same when nothing
            # is left on the subscription below.
            def answered() -> bool:
                m = sampler.last()
                return m.get("ackConfirmed", 0) + m.get("ackLate", 0) >= len(ids)

            wait_for(
                answered,
                60 + slow_batches * sleep_s * 3,
                "every message's acknowledgement answered",
                query=q,
            )
            time.sleep(1)
    finally:
        q.stop()
    elapsed = time.monotonic() - t0
    last = sampler.last()
    lost, duplicated, unexpected = tally(ids, sink.ids())
    time.sleep(deadline + 1)
    left = pull_ids(emulator_host, sub, timeout=1.5)
    report(
        "slow-sink",
        published=len(ids),
        lost=lost,
        duplicated=duplicated,
        slow_batches=len(slow_seen),
        sink_seconds_per_batch=sleep_s,
        ack_deadline=deadline,
        leases_extended=last.get("leasesExtended"),
        redelivered_while_held=last.get("redeliveredWhileHeld"),
        leases_expired=last.get("leasesExpired"),
        ack_late=last.get("ackLate"),
        left_on_subscription=len(left),
        seconds=round(elapsed, 1),
    )
    assert len(slow_seen) == slow_batches
    assert not unexpected and lost == 0 and duplicated == 0
    assert last["redeliveredWhileHeld"] == 0, "Pub/Sub redelivered a message whose lease should have been extended"
    assert last.get("leasesExpired", 0) == 0
    assert last["ackFailed"] == 0 and last["ackStale"] == 0, last
    assert last["leasesExtended"] >= len(ids), "held messages' leases were not extended"
    assert left == [], "acknowledged messages are still on the subscription"


@pytest.mark.parametrize(
    "receiver, state, partitions",
    [
        ("driver", True, None),
        ("driver", False, None),
        ("executors", True, 2),
        ("driver", "gcs", (4, 2)),
        ("executors", "gcs", (4, 2)),
    ],
    ids=["driver-stateDir", "driver-no-stateDir", "executors", "driver-resized-gs", "executors-resized-gs"],
)
def test_failing_sink_then_restart_loses_nothing(
    request, spark, emulator_host, make_subscription, publish, tmp_path: Path, receiver, state, partitions
):
    """A batch fails in the sink; the query is started again on its checkpoint, with the same
    options or (``resized``) with half the partitions, as a user does after resizing a cluster
    (those with the stateDir on gs://)."""
    deadline = 3
    n = scaled(2000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=deadline)
    ids = publish(topic, [row_body(i) for i in range(n)])
    failed: dict[str, object] = {}

    def fail_second(batch_id: int, got: list[str]) -> None:
        if got:
            failed.setdefault("nonempty", 0)
            failed["nonempty"] += 1  # type: ignore[operator]
            if failed["nonempty"] == 2 and "ids" not in failed:
                failed["ids"], failed["batch"] = got, batch_id
                raise RuntimeError("sink fails on purpose")

    sink = BatchFileSink(tmp_path / "sink", before=fail_second)
    opts: dict[str, object] = {"ackDeadlineSeconds": deadline, "maxMessagesPerTrigger": 250, "receiver": receiver}
    if state:
        opts["stateDir"] = request.getfixturevalue("gcs_state_url") if state == "gcs" else str(tmp_path / "state")
    before, after = partitions if isinstance(partitions, tuple) else (partitions, partitions)

    def run(parts: int | None):
        extra = {"numPartitions": parts} if parts else {}
        return (
            _reader(spark, emulator_host, sub, **opts, **extra)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    q = run(before)
    with pytest.raises(Exception, match="sink fails on purpose"):
        q.awaitTermination(180)
    assert failed.get("ids"), "the failing batch had messages"

    q = run(after)
    try:
        until_everything_arrives(
            q, ids, sink.ids, settled=lambda m: m.get("awaitingCommit", 1) == 0 and m.get("buffered", 1) == 0
        )
    finally:
        q.stop()
    got = sink.ids()
    lost, duplicated, unexpected = tally(ids, got)
    report(
        f"failing-sink-{receiver}"
        + ("-stateDir-gs" if state == "gcs" else "-stateDir" if state else "-no-stateDir")
        + (f"-partitions-{before}-to-{after}" if before != after else ""),
        published=len(ids),
        lost=lost,
        duplicated=duplicated,
        failed_batch=failed["batch"],
        failed_batch_rows=len(failed["ids"]),  # type: ignore[arg-type]
    )
    assert not unexpected
    assert lost == 0
    assert set(failed["ids"]) <= set(got), "messages of the failed batch were acknowledged without reaching the sink"  # type: ignore[arg-type]
    if state:
        assert duplicated == 0
