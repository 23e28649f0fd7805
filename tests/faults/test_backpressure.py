"""Scenario 7: a publisher faster than the sink.

A background publisher pushes messages at full speed (thousands per second) while a deliberately
slow ``foreachBatch`` sink takes a few hundred per second. Flow control must keep what the
receiver holds (buffered + in flight, i.e. pulled and not yet acknowledged) within
``maxOutstandingMessages`` and ``heldBytes`` within ``maxOutstandingBytes`` at every planning step
(every progress report is sampled), and nothing may be dropped: every message reaches the sink once.

The byte bound must hold without handing messages back for lack of room (issue 9 scenario 4): each
hand-back is a delivery attempt, so the subscription has a dead-letter policy (5 attempts) and
the dead-letter subscription must stay empty, with ``handedBack`` 0.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import PROJECT, pull_ids
from polling import wait_for

from ._support import (
    BatchFileSink,
    MetricsSampler,
    dead_letter_subscription,
    publish_many,
    report,
    row_body,
    scaled,
    tally,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

CASES = {
    # name: (maxOutstandingMessages, maxOutstandingBytes, body padding, messages)
    "messages-bound": (300, 64 * 1024 * 1024, 0, scaled(3000, 30_000)),
    "bytes-bound": (100_000, 64 * 1024, 900, scaled(1500, 20_000)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_publisher_slow_sink_stays_within_flow_control(
    spark, emulator_host, make_subscription, tmp_path: Path, case
):
    max_msgs, max_bytes, pad, n = CASES[case]
    topic, sub, dead_sub = dead_letter_subscription(emulator_host, PROJECT, f"backpressure-{case}", ack_deadline=10)
    published: list[str] = []
    pub_done = threading.Event()
    pub_error: list[BaseException] = []
    pub_seconds: list[float] = []

    def publisher() -> None:
        t0 = time.monotonic()
        try:
            for start in range(0, n, 500):
                published.extend(
                    publish_many(
                        emulator_host, topic, (row_body(i, pad=pad) for i in range(start, min(n, start + 500)))
                    )
                )
        except BaseException as exc:  # noqa: BLE001
            pub_error.append(exc)
        finally:
            pub_seconds.append(time.monotonic() - t0)
            pub_done.set()

    sink = BatchFileSink(tmp_path / "sink", before=lambda bid, ids: time.sleep(0.3) if ids else None)
    q = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", emulator_host)
        .option("maxOutstandingMessages", str(max_msgs))
        .option("maxOutstandingBytes", str(max_bytes))
        .option("maxMessagesPerTrigger", "100")
        .option("ackDeadlineSeconds", "10")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    t0 = time.monotonic()
    try:
        with MetricsSampler(q, interval=0.2) as sampler:
            threading.Thread(target=publisher, daemon=True).start()
            assert pub_done.wait(300), "publisher did not finish"
            assert not pub_error, pub_error
            wait_for(lambda: len(sink.ids()) >= n, 600, "every message in the sink", query=q, interval=0.5)
            time.sleep(1)
    finally:
        q.stop()
    elapsed = time.monotonic() - t0
    max_held = sampler.max_held()
    max_held_bytes = sampler.max_of("heldBytes")
    lost, duplicated, unexpected = tally(published, sink.ids())
    dead = pull_ids(emulator_host, dead_sub, timeout=2.0)
    report(
        f"backpressure-{case}",
        published=len(published),
        lost=lost,
        duplicated=duplicated,
        maxOutstandingMessages=max_msgs,
        maxOutstandingBytes=max_bytes,
        max_held=max_held,
        max_held_bytes=max_held_bytes,
        samples=len(sampler.samples),
        publish_seconds=round(pub_seconds[0], 1),
        drain_seconds=round(elapsed, 1),
        max_buffered=sampler.max_of("buffered"),
        handed_back=sampler.max_of("handedBack"),
        dead_lettered=len(dead),
    )
    assert len(sampler.samples) >= 10, "too few progress samples to judge flow control"
    assert not unexpected and lost == 0 and duplicated == 0
    assert pub_seconds[0] < elapsed / 2, "the publisher was not faster than the sink: the scenario proves nothing"
    assert max_held <= max_msgs, f"held {max_held} messages > maxOutstandingMessages={max_msgs}"
    assert max_held_bytes <= max_bytes, f"held {max_held_bytes} bytes > maxOutstandingBytes={max_bytes}"
    assert sampler.max_of("handedBack") == 0, "messages were handed back for lack of room"
    assert dead == [], f"{len(dead)} messages reached the dead-letter topic"
