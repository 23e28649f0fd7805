"""``receiver=executors``: the tasks pull, record their slices in the stateDir, the driver commits.

Real Spark (``local[2]``) against the real emulator, with ``numPartitions`` 2 and 4 (more pullers
than cores). Sinks are ``BatchFileSink`` (batch N replaces file N), so a duplicate can only come
from the source. The driver SIGKILL scenario is in ``tests/faults/test_driver_sigkill.py``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import pull_ids
from faults._support import (
    BatchFileSink,
    report,
    row_body,
    scaled,
    settle,
    tally,
    until_everything_arrives,
)
from polling import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DEADLINE = 3
PARTITIONS = [2, 4]


def _reader(spark, host: str, sub: str, state: Path | str, partitions: int, **options):
    r = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", host)
        .option("receiver", "executors")
        .option("stateDir", str(state))
        .option("numPartitions", str(partitions))
        .option("ackDeadlineSeconds", str(DEADLINE))
    )
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _acknowledged(metrics: dict) -> bool:
    """The query's last batches were acknowledged."""
    return metrics.get("awaitingCommit", 1) == 0 and metrics.get("acknowledged", 0) > 0


def _settle(q) -> dict:
    """Wait until the query's last batches were acknowledged; its final metrics."""
    return settle(q, _acknowledged, "the query to acknowledge what it committed")


def _restart_until_all_arrive(run, ids: list[str], sink: BatchFileSink) -> tuple[dict, int, int, list[str]]:
    """Start the query again, wait until every id is in the sink and acknowledged; (last metrics,
    lost, duplicated, unexpected)."""
    q = run()
    try:
        last = until_everything_arrives(q, ids, sink.ids, settled=_acknowledged)
    finally:
        q.stop()
    return (last, *tally(ids, sink.ids()))


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_available_now_drains_the_backlog(spark, emulator_host, make_subscription, publish, tmp_path: Path, partitions):
    n = scaled(3000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=DEADLINE)
    ids = publish(topic, [row_body(i) for i in range(n)])
    sink = BatchFileSink(tmp_path / "sink")
    q = (
        _reader(spark, emulator_host, sub, tmp_path / "state", partitions, maxMessagesPerTrigger=n // 3)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    t0 = time.monotonic()
    q.awaitTermination(300)
    if q.isActive:
        q.stop()
        raise AssertionError("the AvailableNow run did not end within 300 s")
    assert q.exception() is None, q.exception()
    elapsed = time.monotonic() - t0
    got = sink.ids()
    lost, duplicated, unexpected = tally(ids, got)
    time.sleep(DEADLINE + 1)
    left = pull_ids(emulator_host, sub, timeout=1.5)
    report(
        f"executors-available-now-{partitions}",
        published=n,
        lost=lost,
        duplicated=duplicated,
        left_on_subscription=len(left),
        batches=len([c for c in sink.calls if c[1]]),
        seconds=round(elapsed, 1),
    )
    assert not unexpected
    assert lost == 0 and duplicated == 0
    assert left == [], "committed messages were not acknowledged"
    assert not list((tmp_path / "state" / "v3" / "slices").glob("*/*.arrow")), "acknowledged slices were kept"


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_failing_sink_then_restart_replays_the_slices(
    spark, emulator_host, make_subscription, publish, tmp_path: Path, partitions
):
    n = scaled(2000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=DEADLINE)
    ids = publish(topic, [row_body(i) for i in range(n)])
    failed: dict[str, object] = {}

    def fail_second(batch_id: int, got: list[str]) -> None:
        if got:
            failed["nonempty"] = int(failed.get("nonempty", 0)) + 1  # type: ignore[call-overload]
            if failed["nonempty"] == 2 and "ids" not in failed:
                failed["ids"], failed["batch"] = got, batch_id
                raise RuntimeError("sink fails on purpose")

    sink = BatchFileSink(tmp_path / "sink", before=fail_second)

    def run():
        return (
            _reader(spark, emulator_host, sub, tmp_path / "state", partitions, maxMessagesPerTrigger=400)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    q = run()
    with pytest.raises(Exception, match="sink fails on purpose"):
        q.awaitTermination(180)
    assert failed.get("ids"), "the failing batch had messages"
    # The failed batch's slices outlive the query; their leases lapse while no driver holds them.
    time.sleep(DEADLINE + 1)

    last, lost, duplicated, unexpected = _restart_until_all_arrive(run, ids, sink)
    report(
        f"executors-failing-sink-{partitions}",
        published=n,
        lost=lost,
        duplicated=duplicated,
        failed_batch=failed["batch"],
        failed_batch_rows=len(failed["ids"]),  # type: ignore[arg-type]
        replayed=last.get("batchesReplayed"),
        redeliveries_dropped=last.get("redeliveriesDropped"),
    )
    assert not unexpected
    assert lost == 0 and duplicated == 0
    replayed = [b for b, rows, _ in sink.calls if b == failed["batch"]]
    assert replayed, "the failed batch was not run again"
    # Its plan was recovered when the query started again: the replay counts as one.
    assert (last.get("batchesReplayed") or 0) >= 1, f"the replay went uncounted: {last}"


def _kill_a_task_mid_pull(state: Path | str, stop: threading.Event) -> list[int]:
    """SIGKILL the Python worker of the first task seen holding its claim with no slice recorded
    yet (its claim's lease names its pid): an executor lost mid-pull. The pids killed."""
    from crdb_pubsub.source.storage import open_storage

    storage = open_storage(str(state))
    while not stop.wait(0.01):
        for key in storage.list("v3/slices/"):
            if not key.endswith(".claim") or storage.stat(key[: -len(".claim")] + ".arrow") is not None:
                continue
            found = storage.read_versioned(key)
            record = json.loads(found[0]) if found else {}
            pid = (record.get("holder") or {}).get("pid")
            if record.get("released") or not isinstance(pid, int):
                continue
            os.kill(pid, signal.SIGKILL)
            return [pid]
    return []


@pytest.mark.parametrize("partitions, storage", [(2, "gcs"), (4, "posix")], ids=["2-gs", "4"])
def test_task_killed_mid_pull_loses_nothing(
    request, spark, emulator_host, make_subscription, publish, tmp_path: Path, partitions, storage
):
    n = scaled(2000, 10_000)
    topic, sub = make_subscription(ack_deadline_seconds=DEADLINE)
    ids = publish(topic, [row_body(i) for i in range(n)])
    state = request.getfixturevalue("gcs_state_url") if storage == "gcs" else tmp_path / "state"
    sink = BatchFileSink(tmp_path / "sink")

    def run():
        return (
            _reader(spark, emulator_host, sub, state, partitions, maxMessagesPerTrigger=500)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    stop = threading.Event()
    killed: list[int] = []
    killer = threading.Thread(target=lambda: killed.extend(_kill_a_task_mid_pull(state, stop)), daemon=True)
    killer.start()
    q = run()
    try:
        q.awaitTermination(120)
    except Exception:  # noqa: BLE001 - the task's death ends the query: checked below
        pass
    finally:
        stop.set()
        killer.join(5)
        died = not q.isActive
        if not died:
            q.stop()
    assert killed, "no task was caught pulling"
    assert died and q.exception() is not None, (
        "the query survived a task whose Python worker died (local mode does not retry)"
    )
    last, lost, duplicated, unexpected = _restart_until_all_arrive(run, ids, sink)
    report(
        f"executors-task-killed-{partitions}" + ("-gs" if storage == "gcs" else ""),
        published=n,
        lost=lost,
        duplicated=duplicated,
        redeliveries_dropped=last.get("redeliveriesDropped"),
    )
    assert not unexpected
    assert lost == 0 and duplicated == 0


def test_idle_subscription_runs_empty_batches_then_picks_up_traffic(
    spark, emulator_host, make_subscription, publish, tmp_path: Path
):
    """A processing-time trigger on an empty subscription: each batch's tasks find nothing and the
    stream keeps going (empty batches), and what is published later arrives, once."""
    topic, sub = make_subscription(ack_deadline_seconds=DEADLINE)
    sink = BatchFileSink(tmp_path / "sink")
    q = (
        _reader(spark, emulator_host, sub, tmp_path / "state", 2)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        wait_for(lambda: len(sink.calls) >= 3, 120, "three empty batches on the idle subscription", query=q)
        assert sink.ids() == []
        ids = publish(topic, [row_body(i) for i in range(200)])
        wait_for(lambda: set(ids) <= set(sink.ids()), 120, "the messages published later", query=q)
        last = _settle(q)
    finally:
        q.stop()
    lost, duplicated, unexpected = tally(ids, sink.ids())
    empty = len([c for c in sink.calls if not c[1]])
    report(
        "executors-idle-then-traffic",
        published=len(ids),
        lost=lost,
        duplicated=duplicated,
        empty_batches=empty,
        acknowledged=last.get("acknowledged"),
    )
    assert not unexpected
    assert lost == 0 and duplicated == 0
    assert empty >= 3
