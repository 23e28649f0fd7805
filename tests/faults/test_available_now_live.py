"""Issue 9 scenario 3, end to end: a scheduled Trigger.AvailableNow run on a live topic.

A publisher keeps publishing during the run, so a Pull of that subscription is never empty. The
run must still end, having read what was published before it started; what was published after
is handed back once and read by the next run. The subscription has a dead-letter policy (5
delivery attempts): a source that lets leases lapse again and again, or hands messages back in a
loop, sends them there, so the dead-letter subscription must stay empty. Across the two runs
(with a stateDir) every message reaches the sink exactly once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import PROJECT, pull_ids

from ._support import dead_letter_subscription, publish_many, report, row_body, scaled, sink_column, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_available_now_on_a_live_topic(spark, emulator_host, tmp_path: Path, receiver):
    backlog = scaled(3000, 30_000)
    topic, sub, dead_sub = dead_letter_subscription(emulator_host, PROJECT, f"live-avnow-{receiver}", ack_deadline=10)
    published = publish_many(emulator_host, topic, (row_body(i) for i in range(backlog)))
    stop = threading.Event()
    live: list[str] = []

    def publisher() -> None:
        i = 1_000_000
        while not stop.is_set():
            live.extend(publish_many(emulator_host, topic, (row_body(i + k) for k in range(50))))
            i += 50
            time.sleep(0.1)  # ~500 msg/s, well below what the run drains

    def run() -> tuple[float, dict]:
        q = (
            spark.readStream.format("crdb_pubsub")
            .option("subscription", sub)
            .option("emulatorHost", emulator_host)
            .option("stateDir", str(tmp_path / "state"))
            .option("ackDeadlineSeconds", "10")
            .option("maxMessagesPerTrigger", "1000")
            .option("maxOutstandingMessages", "5000")
            .option("receiver", receiver)
            .option("numPartitions", "2")
            .load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        t0 = time.monotonic()
        ended = q.awaitTermination(300)
        took = time.monotonic() - t0
        if not ended:
            q.stop()
        assert ended, "the AvailableNow run did not end on a live topic"
        assert q.exception() is None, q.exception()
        last = q.lastProgress or {}
        import json

        raw = (last.get("sources") or [{}])[0].get("latestOffset")
        return took, (json.loads(raw) if raw else {})

    publishing = threading.Thread(target=publisher, daemon=True)
    publishing.start()
    try:
        first_seconds, first = run()
        got_first = set(sink_column(tmp_path / "out")["message_id"].to_pylist())
    finally:
        stop.set()
        publishing.join()
    second_seconds, _ = run()  # the publisher has stopped: this run reads everything left
    got = sink_column(tmp_path / "out")["message_id"].to_pylist()
    everything = published + live
    lost, duplicated, unexpected = tally(everything, got)
    time.sleep(11)
    dead = pull_ids(emulator_host, dead_sub, timeout=2.0)
    report(
        f"available-now-live-topic-{receiver}",
        published=len(everything),
        backlog=backlog,
        live=len(live),
        lost=lost,
        duplicated=duplicated,
        first_run_seconds=round(first_seconds, 1),
        first_run_read=len(got_first),
        backlog_missed_by_first_run=len(set(published) - got_first),
        handed_back=first.get("handedBack"),
        second_run_seconds=round(second_seconds, 1),
        dead_lettered=len(dead),
    )
    assert set(published) <= got_first, "the first run ended before reading the backlog published before it"
    assert not unexpected and lost == 0 and duplicated == 0
    assert dead == [], f"{len(dead)} messages reached the dead-letter topic"
