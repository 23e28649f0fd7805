"""The driver's memory is bounded by the options, not by throughput (scenario 8)."""

from __future__ import annotations

import time
import tracemalloc

import pyarrow as pa
import pytest

from polling import wait_for
from spark_calls import Logs, SparkCalls

SUB = "projects/p/subscriptions/memory"
# Proxy memory pools outlive their tests: buffers allocated from one (a planned batch the reader
# holds) are freed later, when the reader is collected, and freeing into a destroyed pool crashes.
_POOLS: list = []
# The driver-side source's own allocations. The harness also runs the executors' decode in this
# process; its caches and last output arrays are executor memory, not what the driver keeps per id.
SOURCE = "*/connector/source/*"


def body(i: int, pad: int = 0) -> bytes:
    filler = f', "pad": "{"p" * pad}"' if pad else ""
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}{filler}}}}},"Topic":"t"}}'.encode()


def _drain(reader, timeout: float = 120) -> SparkCalls:
    s = SparkCalls(reader, Logs(), "4.3")
    s.start()
    reader.prepareForTriggerAvailableNow()
    t0 = time.monotonic()
    while s.trigger():
        assert time.monotonic() - t0 < timeout
    return s


@pytest.mark.integration  # drains 30,000 messages under tracemalloc
def test_dedupe_window_is_compact(fake, make_reader):
    """Remembering acknowledged message ids for the dedupe window costs a few bytes per id, not a
    Python object per id (at 10,000 msg/s the 600 s window holds 6 million ids)."""
    n = 30_000
    fake.create_subscription(SUB, ack_deadline=30)
    fake.publish(SUB, [b'{"resolved":"1.0000000000"}'] * n)
    # A small flow-control bound keeps what is *held* (bounded by the options) out of the figure:
    # what remains after the drain is the memory of the acknowledged ids.
    reader = make_reader(SUB, maxMessagesPerTrigger=1000, maxOutstandingMessages=2000)
    tracemalloc.start()
    try:
        s = _drain(reader)
        assert len(s.ids()) == n
        time.sleep(0.5)
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, SOURCE)])
    finally:
        tracemalloc.stop()
    held = sum(stat.size for stat in snap.statistics("filename"))
    per_id = held / n
    assert per_id <= 24, f"the source keeps {per_id:.0f} B per acknowledged message ({held / 1e6:.1f} MB for {n})"


def test_driver_does_not_decode_committed_batches(fake, make_reader, monkeypatch):
    """Decoding happens once, in ``read()`` on the executors; the driver never decodes a batch again
    (today's ``malformed`` metric must come from the executors' decode)."""
    import crdb_pubsub.decode.decoder as decoding

    calls = {"read": 0, "decode": 0}
    real = decoding.decode_messages

    def counting(*a, **kw):
        calls["decode"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(decoding, "decode_messages", counting)
    fake.create_subscription(SUB, ack_deadline=30)
    fake.publish(SUB, [b'{"resolved":"1.0000000000"}', b"not json"] * 500)
    reader = make_reader(SUB, maxMessagesPerTrigger=200, numPartitions=1)
    cls = type(reader)
    real_read = cls.read

    def counting_read(self, partition):
        calls["read"] += 1
        return real_read(self, partition)

    monkeypatch.setattr(cls, "read", counting_read)
    s = _drain(reader)
    assert len(s.ids()) == 1000
    time.sleep(1.0)  # anything the driver would do beside the stream
    assert calls["decode"] <= calls["read"], f"{calls['decode']} decodes for {calls['read']} partitions read"


def test_planning_a_batch_does_not_copy_it_several_times(fake, make_reader):
    """Sealing a batch and handing it to Spark costs at most one extra copy of its bodies."""
    fake.create_subscription(SUB, ack_deadline=30)
    n, pad = 2000, 10_000
    fake.publish(SUB, [body(i, pad) for i in range(n)])
    body_bytes = n * len(body(0, pad))
    reader = make_reader(SUB, maxOutstandingBytes="1GiB")
    s = SparkCalls(reader, Logs(), "4.3")
    s.start()
    start = reader.initialOffset()
    wait_for(
        lambda: (reader.reportLatestOffset() or {}).get("buffered", 0) >= n,
        60,
        "the backlog buffered",
        step=lambda: time.sleep(0.1),
    )
    pool = pa.proxy_memory_pool(pa.default_memory_pool())
    _POOLS.append(pool)
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    tracemalloc.start()
    try:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        parts = reader.partitions(start, end)
        _, py_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(previous)
    assert parts
    extra = py_peak + pool.max_memory()
    assert extra <= 1.5 * body_bytes, f"planning a {body_bytes / 1e6:.0f} MB batch allocated {extra / 1e6:.0f} MB"
