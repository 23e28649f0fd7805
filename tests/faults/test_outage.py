"""A Pub/Sub outage longer than the subscription's ack deadline, in both receiver modes.

The query reaches the emulator through a proxy (``_proxy.TcpProxy``); mid-stream, while messages
are held (pulled, recorded, in a batch awaiting its commit), the proxy refuses every connection for
three ack deadlines, then lets them through again. The emulator keeps its state, so every lease
that lapsed during the outage makes Pub/Sub deliver the message again. With a stateDir the query
must read every message exactly once, and it must not die (a hiccup is not a failure).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import PROJECT
from polling import wait_for

from ._proxy import TcpProxy
from ._support import BatchFileSink, MetricsSampler, publish_many, report, row_body, scaled, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

DEADLINE = 3
OUTAGE_SECONDS = 3 * DEADLINE


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_outage_longer_than_the_ack_deadline(spark, emulator_host, tmp_path: Path, receiver):
    from crdb_pubsub.emulator import create_topic_and_subscription

    n = scaled(3000, 30_000)
    topic, sub = create_topic_and_subscription(
        emulator_host, PROJECT, f"topic-hiccup-{receiver}", f"sub-hiccup-{receiver}", ack_deadline_seconds=DEADLINE
    )
    host, port = emulator_host.rsplit(":", 1)
    proxy = TcpProxy((host, int(port)))
    sink = BatchFileSink(tmp_path / "sink", before=lambda bid, ids: time.sleep(0.5) if ids else None)
    r = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", proxy.host_port)
        .option("ackDeadlineSeconds", str(DEADLINE))
        .option("maxMessagesPerTrigger", "300")
        .option("stateDir", str(tmp_path / "state"))
        .option("receiver", receiver)
    )
    if receiver == "executors":
        r = r.option("numPartitions", "2")
    q = r.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk")).start()
    ids = publish_many(emulator_host, topic, (row_body(i) for i in range(n)))
    try:
        with MetricsSampler(q, interval=0.2) as sampler:
            wait_for(
                lambda: len(sink.ids()) >= n // 5, 180, "a fifth of the messages in the sink", query=q, interval=0.1
            )
            in_sink_at_cut = len(sink.ids())
            proxy.cut()
            time.sleep(OUTAGE_SECONDS)
            proxy.resume()
            assert q.isActive and q.exception() is None, f"the query died during the outage: {q.exception()}"
            wait_for(lambda: set(ids) <= set(sink.ids()), 300, "every message in the sink", query=q, interval=0.5)
            wait_for(lambda: sampler.last().get("awaitingCommit", 1) == 0, 60, "the last batch acknowledged", query=q)
    finally:
        q.stop()
        proxy.close()
    lost, duplicated, unexpected = tally(ids, sink.ids())
    last = sampler.last()
    report(
        f"outage-{receiver}",
        published=n,
        lost=lost,
        duplicated=duplicated,
        in_sink_at_cut=in_sink_at_cut,
        outage_seconds=OUTAGE_SECONDS,
        ack_deadline=DEADLINE,
        pull_errors=sampler.max_of("pullErrors"),
        redeliveries_dropped=last.get("redeliveriesDropped"),
        ack_failed=last.get("ackFailed"),
    )
    assert in_sink_at_cut < n, "the sink had everything before the outage: nothing was in flight"
    assert not unexpected and lost == 0 and duplicated == 0
