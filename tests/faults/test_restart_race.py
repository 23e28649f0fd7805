"""Scenario 5 of issue 9: a query with a stateDir stopped and started again at once.

Spark stops a query by terminating its driver-side reader process, which hands its held messages
back while it dies; the JVM does not wait for it. A query started again at once (same checkpoint,
same stateDir) must start, not fail because the dying process still holds the stateDir, and
deliver every message exactly once. To make the race certain, each run reaches Pub/Sub through its
own proxy, which refuses connections from the moment its query is stopped: the old process's
hand-back can't reach Pub/Sub and takes its whole time bound while the next run starts.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import wait_for

from ._proxy import TcpProxy
from ._support import BatchFileSink, report, row_body, scaled, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_query_restarted_at_once_with_state_dir(spark, emulator_host, make_subscription, publish, tmp_path: Path):
    n = scaled(2000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(topic, [row_body(i) for i in range(n)])
    host, port = emulator_host.split(":")
    proxies: list[TcpProxy] = []
    sink = BatchFileSink(tmp_path / "sink", before=lambda bid, got: time.sleep(0.2) if got else None)

    def start():
        proxies.append(TcpProxy((host, int(port))))
        return (spark.readStream.format("crdb_pubsub").option("subscription", sub)
                .option("emulatorHost", proxies[-1].host_port).option("stateDir", str(tmp_path / "state"))
                .option("ackDeadlineSeconds", "10").option("maxMessagesPerTrigger", "200").load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk")).start())

    restarts = 2
    try:
        for i in range(restarts):
            q = start()
            wait_for(q, lambda: len(sink.ids()) >= (i + 1) * n // (restarts + 1), 120, f"progress before stop #{i + 1}")
            proxies[-1].cut()  # the old process's hand-back can't reach Pub/Sub: it takes its whole bound
            q.stop()
        t0 = time.monotonic()
        q = start()  # at once
        try:
            wait_for(q, lambda: set(ids) <= set(sink.ids()), 180, "every message in the sink")
        finally:
            q.stop()
        took = time.monotonic() - t0
    finally:
        for p in proxies:
            p.close()
    lost, duplicated, unexpected = tally(ids, sink.ids())
    report("restart-at-once-stateDir", published=len(ids), lost=lost, duplicated=duplicated, restarts=restarts,
           seconds_after_last_restart=round(took, 1))
    assert not unexpected and lost == 0 and duplicated == 0
