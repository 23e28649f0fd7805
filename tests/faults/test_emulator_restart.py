"""Scenario 2: the Pub/Sub emulator killed (SIGKILL) and restarted mid-stream.

What the emulator can and cannot do: it keeps topics, subscriptions and messages in memory only.
Its launcher (``cloud-pubsub-emulator``) takes ``--host``, ``--port``, ``--iam_host``,
``--iam_port`` and ``--projects`` and nothing else; ``gcloud beta emulators pubsub start
--data-dir`` only decides where gcloud writes ``env.yaml`` and is never passed to the emulator. So
no persistence exists, and a restart loses every unacknowledged message it held. The scenario is
therefore defined as a Pub/Sub *outage* the query must ride out, not as a durability test of the
emulator:

* half A is published and pulled by the receiver (some of it is already in the sink, the rest is
  held in sealed or buffered batches, unacknowledged) when the emulator is SIGKILLed;
* the query keeps running through the outage (pulls, lease extensions and acks fail and are
  retried); the emulator is restarted on the same port, topic and subscription recreated;
* half B is published after the restart.

Required: the same query (never restarted) delivers every message of A and B to the sink exactly
once, its receiver reports the outage (``pullErrors``) and it is healthy afterwards.

The query reaches the emulator through a proxy (``_proxy.TcpProxy``) that refuses connections
from the kill until the new emulator is ready and the subscription recreated.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import PROJECT
from polling import wait_for

from ._proxy import TcpProxy
from ._support import BatchFileSink, MetricsSampler, publish_many, report, row_body, scaled, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

OUTAGE_SECONDS = 6.0


def _setup(host: str) -> tuple[str, str]:
    from crdb_pubsub.emulator import create_topic_and_subscription

    return create_topic_and_subscription(host, PROJECT, "topic-outage", "sub-outage", ack_deadline_seconds=10)


def test_emulator_killed_and_restarted_mid_stream(spark, emulator_host, tmp_path: Path):
    from crdb_pubsub.emulator import start_emulator
    from crdb_pubsub.emulator.launcher import free_port

    n = scaled(2000, 20_000)
    port = free_port()
    emu = start_emulator(port=port, backend="sdk", project=PROJECT)
    proxy = TcpProxy(("127.0.0.1", port))
    topic, sub = _setup(emu.host_port)
    sink = BatchFileSink(tmp_path / "sink", before=lambda bid, ids: time.sleep(0.3) if ids else None)
    q = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", proxy.host_port)
        .option("ackDeadlineSeconds", "10")
        .option("maxMessagesPerTrigger", "200")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    try:
        with MetricsSampler(q, interval=0.2) as sampler:
            first = publish_many(emu.host_port, topic, (row_body(i) for i in range(n)))
            # Kill once the receiver holds all of A and the sink is still working through it.
            wait_for(
                lambda: sampler.last().get("received", 0) >= n and len(sink.ids()) > 0,
                120,
                "the receiver to hold the first half",
                query=q,
                interval=0.1,
            )
            in_sink_at_kill = len(sink.ids())
            proxy.cut()
            os.killpg(emu.pgid, signal.SIGKILL)
            emu.stop()
            t_kill = time.monotonic()
            time.sleep(OUTAGE_SECONDS)
            emu = start_emulator(port=port, backend="sdk", project=PROJECT)
            topic, sub2 = _setup(emu.host_port)
            assert sub2 == sub
            proxy.resume()
            outage = time.monotonic() - t_kill
            assert q.isActive and q.exception() is None, "the query died during the outage"
            second = publish_many(emu.host_port, topic, (row_body(i) for i in range(n, 2 * n)))
            published = first + second
            wait_for(lambda: set(published) <= set(sink.ids()), 300, "every message in the sink", query=q, interval=0.5)
            wait_for(lambda: sampler.last().get("awaitingCommit", 1) == 0, 60, "the last batch acknowledged", query=q)
            assert q.isActive and q.exception() is None
    finally:
        q.stop()
        proxy.close()
        emu.stop()
    got = sink.ids()
    lost, duplicated, unexpected = tally(published, got)
    errors = sampler.max_of("pullErrors")
    report(
        "emulator-restart",
        published=len(published),
        lost=lost,
        duplicated=duplicated,
        before_kill=len(first),
        after_restart=len(second),
        in_sink_at_kill=in_sink_at_kill,
        outage_seconds=round(outage, 1),
        pull_errors=errors,
        max_unavailable_seconds=sampler.max_of("unavailableForSeconds"),
        query_restarts=0,
    )
    assert in_sink_at_kill < n, "the sink had finished the first half before the kill: no work was in flight"
    assert not unexpected and lost == 0 and duplicated == 0
    assert errors > 0, "the receiver never noticed the outage"
