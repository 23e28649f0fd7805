"""The receiver's parts on their own: history, flow control, taking batches by count and bytes."""

from __future__ import annotations

import threading

from crdb_pubsub.source.receiver import Receiver
from crdb_pubsub.source.receiver.chunks import Chunk, sizes_of
from crdb_pubsub.source.receiver.flow import FIRST_PULL_MESSAGES, FlowControl
from crdb_pubsub.source.receiver.history import MAX_GENERATIONS, AckHistory
from crdb_pubsub.source.transport import Rpc
from crdb_pubsub.source.wire import messages_batch


def test_history_remembers_each_id_until_its_own_expiry():
    h = AckHistory()
    h.add("s", ["1", "2", "3"], expires_at=10.0)
    h.add("s", ["4", "0"], expires_at=20.0)
    h.add("other", ["5"], expires_at=20.0)
    assert h.seen("s", ["1", "4", "5", "0", "9"], now=5.0) == [True, True, False, True, False]
    assert h.seen("s", ["1", "4"], now=15.0) == [False, True]
    h.prune(15.0)
    assert h.count() == 3


def test_history_keeps_ids_that_are_not_plain_numbers():
    h = AckHistory()
    h.add("s", ["007", "abc", "12345678901234567890", "42"], expires_at=10.0)
    assert h.seen("s", ["7", "007", "abc", "12345678901234567890", "42", "43"], now=1.0) == [
        False, True, True, True, True, False]


def test_history_merges_generations_without_forgetting_early():
    h = AckHistory()
    for g in range(MAX_GENERATIONS * 3):
        h.add("s", [str(g * 10 + i) for i in range(10)], expires_at=100.0 + g)
    assert len(h._subs["s"].generations) <= MAX_GENERATIONS
    n = MAX_GENERATIONS * 3
    assert all(h.seen("s", [str(i) for i in range(n * 10)], now=99.0))  # nothing expired yet
    for g in range(n):  # each id is remembered at least until its own expiry
        assert all(h.seen("s", [str(g * 10 + i) for i in range(10)], now=100.0 + g - 0.5))
    assert h.nbytes() <= 8 * n * 10


def test_flow_sizes_pulls_by_count_and_by_bytes():
    stop = threading.Event()
    f = FlowControl(max_messages=100, max_bytes=64 * 1024)
    first = f.reserve(stop)
    assert first.messages == FIRST_PULL_MESSAGES  # no size known yet
    f.settle(first, 10, 10 * 1024, largest=1024)
    second = f.reserve(stop)
    assert second.messages == (64 * 1024 - 10 * 1024) // 1024  # the byte room, not the count room
    f.settle(second, second.messages, second.messages * 1024, largest=1024)
    assert f.full()
    f.release(10, 10 * 1024)
    assert f.reserve(stop).messages == 10


def test_first_pulls_of_several_pullers_count_once_sizes_are_known():
    """Two pullers' first Pulls go out before any size is known; the one still in flight must
    count at the learned size, or together they overshoot maxOutstandingBytes (seen end to end:
    77 messages of ~970 B held against a 64 KiB budget)."""
    stop = threading.Event()
    f = FlowControl(max_messages=100_000, max_bytes=64 * 1024)
    a, b = f.reserve(stop), f.reserve(stop)
    f.settle(a, 10, 10 * 1000, largest=1000)
    c = f.reserve(stop)
    f.settle(b, 10, 10 * 1000, largest=1000)  # b's answer arrives after c was sized
    f.settle(c, c.messages, c.messages * 1000, largest=1000)
    assert f.held_bytes <= 64 * 1024


def test_flow_lets_a_lone_message_larger_than_the_budget_through():
    stop = threading.Event()
    f = FlowControl(max_messages=100, max_bytes=64 * 1024)
    r = f.reserve(stop)
    f.settle(r, 0, 0, largest=1 << 20)  # a Pull showed a 1 MiB message, kept none
    assert f.reserve(stop).messages == 1


def _chunk(sizes: list[int], start: int = 0) -> Chunk:
    mids = [str(start + i) for i in range(len(sizes))]
    batch = messages_batch([b"x" * n for n in sizes], mids, [1] * len(sizes), [None] * len(sizes), [None] * len(sizes))
    nbytes, largest = sizes_of(batch)
    return Chunk("s", mids, [f"a{m}" for m in mids], batch, nbytes, largest, 0.0)


def _receiver_with(chunks: list[Chunk]) -> Receiver:
    r = Receiver(Rpc(object()), ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    for c in chunks:
        r._buffer.append(c)
        r._live.add(c)
        for m in c.message_ids:
            r._held["s"][m] = c
    return r


def test_take_splits_chunks_at_the_count_and_byte_limits():
    r = _receiver_with([_chunk([100] * 10), _chunk([100] * 10, start=10)])
    got = r.take(max_messages=15)
    assert [m for c in got for m in c.message_ids] == [str(i) for i in range(15)]
    got = r.take(max_bytes=250)
    assert [m for c in got for m in c.message_ids] == ["15", "16"]
    assert r._held["s"]["17"].message_ids[0] == "17"  # the rest is held by the new chunk


def test_take_always_moves_at_least_one_message():
    r = _receiver_with([_chunk([5000, 10])])
    got = r.take(max_bytes=1024)
    assert [m for c in got for m in c.message_ids] == ["0"]
