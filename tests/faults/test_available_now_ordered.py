"""Trigger.AvailableNow on an ordered subscription, in both receiver modes.

CockroachDB's legacy Pub/Sub sink and Debezium Server publish with ordering keys. On a subscription
with message ordering, Pub/Sub (and the emulator) hold a key's next messages back while one of its
messages is delivered and not acknowledged, and this source acknowledges only after Spark commits:
each commit-and-acknowledge round trip releases the next messages of each key. The run must read
every message published before it began, in as many batches as that takes, and keep each key's
order; an empty Pull while messages are held proves nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import PROJECT

from ._support import BatchFileSink, report, row_body, scaled, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_available_now_reads_an_ordered_subscription_completely(spark, emulator_host, tmp_path: Path, receiver):
    from google.cloud.pubsub_v1.types import BatchSettings, PublisherOptions

    from crdb_pubsub.emulator import create_topic_and_subscription, publisher_client

    keys, per_key = scaled(20, 100), scaled(30, 100)
    topic, sub = create_topic_and_subscription(
        emulator_host,
        PROJECT,
        f"topic-ordered-{receiver}",
        f"sub-ordered-{receiver}",
        ack_deadline_seconds=10,
        enable_message_ordering=True,
    )
    publisher = publisher_client(
        emulator_host,
        publisher_options=PublisherOptions(enable_message_ordering=True),
        batch_settings=BatchSettings(max_messages=500, max_latency=0.01),
    )
    position: dict[str, tuple[int, int]] = {}
    try:
        for i in range(per_key):
            futures = [
                (k, publisher.publish(topic, row_body(k * 100_000 + i), ordering_key=f"key-{k}")) for k in range(keys)
            ]
            for k, f in futures:
                position[f.result(timeout=60)] = (k, i)
    finally:
        publisher.stop()
        publisher.transport.close()
    sink = BatchFileSink(tmp_path / "sink")
    r = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", emulator_host)
        .option("ackDeadlineSeconds", "10")
        .option("stateDir", str(tmp_path / "state"))
        .option("receiver", receiver)
    )
    if receiver == "executors":
        r = r.option("numPartitions", "2")
    q = (
        r.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    t0 = time.monotonic()
    ended = q.awaitTermination(600)
    if not ended:
        q.stop()
    assert ended, "the AvailableNow run did not end"
    assert q.exception() is None, q.exception()
    took = time.monotonic() - t0
    got = sink.ids()
    lost, duplicated, unexpected = tally(list(position), got)
    out_of_order = 0
    last: dict[int, int] = {}
    for m in got:
        k, i = position[m]
        out_of_order += i < last.get(k, -1)
        last[k] = i
    report(
        f"available-now-ordered-{receiver}",
        published=len(position),
        keys=keys,
        lost=lost,
        duplicated=duplicated,
        out_of_order=out_of_order,
        batches=len([c for c in sink.calls if c[1]]),
        seconds=round(took, 1),
    )
    assert not unexpected
    assert (lost, duplicated) == (0, 0), f"the run read {len(position) - lost} of {len(position)}"
    assert out_of_order == 0
