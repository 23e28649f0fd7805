"""A failed query's reader process outlives its query; the user restarts the query at once.

Spark ends a query's driver-side reader process with SIGTERM and closes its socket; the reader
hands its messages back and releases the stateDir. CI saw it go otherwise: the reader of a query
whose sink had failed was still alive and sleeping 35 s later, holding the stateDir, and the
restart was refused after waiting 30 s for it (``test_failing_sink_then_restart_replays_the_slices``).

This makes that deterministic: the sink stops the reader process (SIGSTOP) just before it fails
the batch, so the process can answer neither Spark's SIGTERM nor its closed socket. The restart
must take the stateDir over from it (a reader of the same Spark driver serving the same query run
belongs to a run Spark has ended) and lose or duplicate nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import end_frozen, freeze_reader

from ._support import BatchFileSink, report, row_body, scaled, tally, until_everything_arrives

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

DEADLINE = 3


def _reader(spark, host: str, sub: str, state: Path | str, receiver: str):
    r = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", host)
        .option("stateDir", str(state))
        .option("ackDeadlineSeconds", str(DEADLINE))
        .option("maxMessagesPerTrigger", "400")
        .option("receiver", receiver)
    )
    if receiver == "executors":
        r = r.option("numPartitions", "2")
    return r.load()


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


@pytest.mark.parametrize(
    "receiver, storage",
    [("driver", "posix"), ("executors", "posix"), ("driver", "gcs")],
    ids=["driver", "executors", "driver-gs"],
)
def test_restart_takes_the_state_dir_from_a_stuck_reader(
    request, spark, emulator_host, make_subscription, publish, tmp_path: Path, receiver: str, storage: str
):
    """(With gs://: the stuck reader's lease outlives its query, as a holder frozen past its lease.)"""
    n = scaled(2000, 10_000)
    topic, sub = make_subscription(ack_deadline_seconds=DEADLINE)
    ids = publish(topic, [row_body(i) for i in range(n)])
    state = request.getfixturevalue("gcs_state_url") if storage == "gcs" else tmp_path / "state"
    stuck: dict[str, object] = {}

    def stop_reader_then_fail(batch_id: int, got: list[str]) -> None:
        if got and "pid" not in stuck:
            stuck.update(pid=freeze_reader(state), batch=batch_id, ids=got)
            raise RuntimeError("sink fails on purpose")

    sink = BatchFileSink(tmp_path / "sink", before=stop_reader_then_fail)

    def run():
        return (
            _reader(spark, emulator_host, sub, state, receiver)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    q = run()
    try:
        with pytest.raises(Exception, match="sink fails on purpose"):
            q.awaitTermination(180)
        pid = int(stuck["pid"])  # type: ignore[call-overload]
        time.sleep(2)
        assert _alive(pid), "the stopped reader process ended by itself: nothing left to test"

        t0 = time.monotonic()
        q = run()
        try:
            until_everything_arrives(q, ids, sink.ids)
            took = time.monotonic() - t0
        finally:
            q.stop()
        lost, duplicated, unexpected = tally(ids, sink.ids())
        report(
            f"stale-reader-{receiver}" + ("-gs" if storage == "gcs" else ""),
            published=n,
            lost=lost,
            duplicated=duplicated,
            failed_batch=stuck["batch"],
            seconds_to_everything=round(took, 1),
        )
        assert not _alive(pid), "the restart ran beside the stuck reader instead of ending it"
        assert not unexpected
        assert lost == 0 and duplicated == 0
        assert set(stuck["ids"]) <= set(sink.ids())  # type: ignore[arg-type]
    finally:
        if "pid" in stuck:
            end_frozen(int(stuck["pid"]))  # type: ignore[call-overload]
