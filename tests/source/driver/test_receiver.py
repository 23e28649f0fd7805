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


def _response(messages: list[dict]):
    """A raw ``PullResponse`` of ``messages`` (dicts of ack_id, message_id and optional fields)."""
    from google.pubsub_v1.types import pubsub

    pb = pubsub.PullResponse.pb()()
    for m in messages:
        rm = pb.received_messages.add()
        rm.ack_id = m["ack_id"]
        rm.message.message_id = m["message_id"]
        rm.message.data = m.get("data", b"body-" + m["message_id"].encode())
        rm.message.publish_time.seconds = m.get("seconds", 1_700_000_000)
        rm.message.publish_time.nanos = m.get("nanos", 0)
        for k, v in m.get("attributes", {}).items():
            rm.message.attributes[k] = v
        if m.get("ordering_key"):
            rm.message.ordering_key = m["ordering_key"]
    return type(pb).FromString(pb.SerializeToString())  # parsed, as gRPC hands it over


def test_pulled_batch_reads_every_field_of_every_message():
    from crdb_pubsub.source.wire import MESSAGE_SCHEMA, pulled_batch

    plain = [{"ack_id": f"a{i}", "message_id": str(i), "seconds": 1_700_000_000 + i, "nanos": 999_999 * i}
             for i in range(5)]
    mixed = [dict(m) for m in plain]
    mixed[1]["attributes"] = {"TABLE_NAME": "orders", "x": "1"}
    mixed[3]["ordering_key"] = "k3"
    for messages in (plain, mixed):
        ack_ids, mids, batch = pulled_batch(_response(messages))
        assert batch.schema == MESSAGE_SCHEMA
        assert ack_ids == [m["ack_id"] for m in messages] and mids == [m["message_id"] for m in messages]
        assert batch.column("data").to_pylist() == [b"body-" + m["message_id"].encode() for m in messages]
        assert batch.column("publish_us").to_pylist() == [
            m["seconds"] * 1_000_000 + m["nanos"] // 1000 for m in messages]
        assert [sorted(a) if a is not None else None for a in batch.column("attributes").to_pylist()] == [
            sorted(m["attributes"].items()) if m.get("attributes") else None for m in messages]  # a map's order is Pub/Sub's
        assert batch.column("ordering_key").to_pylist() == [m.get("ordering_key") for m in messages]
    ack_ids, mids, batch = pulled_batch(_response([]))
    assert (ack_ids, mids, batch.num_rows, batch.schema) == ([], [], 0, MESSAGE_SCHEMA)


class _AnsweringRpc(Rpc):
    """Confirms every acknowledgement and lease at once, records the acknowledged ids."""

    def __init__(self) -> None:
        super().__init__(object())
        self.acked: list[str] = []

    def acknowledge(self, subscription, ack_ids, *, total=None):
        from crdb_pubsub.source.transport import AckResult

        self.acked.extend(ack_ids)
        return AckResult(confirmed=list(ack_ids))

    def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
        from crdb_pubsub.source.transport import AckResult

        return AckResult(confirmed=list(ack_ids))


def test_accept_sorts_new_held_acknowledged_and_repeated_ids():
    from crdb_pubsub.source.receiver.flow import Reservation

    rpc = _AnsweringRpc()
    r = Receiver(rpc, ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    r._sub_deadline["s"] = 10
    r.acker.start()
    try:
        r.accept("s", _response([{"ack_id": f"a{i}", "message_id": str(i)} for i in range(4)]), Reservation(4, 0))
        r.ack(r.take(max_messages=1))  # "0" acknowledged; "1".."3" stay held
        assert r.acker.flush(5)
        assert rpc.acked == ["a0"]
        # A redelivery of "0" (acknowledged), of "2" (held: its new ack id replaces the old one),
        # "5" twice in one response (one message, the newer ack id), and "4", new.
        r.accept("s", _response([{"ack_id": "b0", "message_id": "0"}, {"ack_id": "b2", "message_id": "2"},
                                 {"ack_id": "b5", "message_id": "5"}, {"ack_id": "c5", "message_id": "5"},
                                 {"ack_id": "b4", "message_id": "4"}]), Reservation(5, 0))
        assert r.counters.get("received") == 6
        assert r.counters.get("redeliveredWhileHeld") == 2 and r.counters.get("redeliveriesDropped") == 1
        taken = r.take()
        assert [m for c in taken for m in c.message_ids] == ["1", "2", "3", "5", "4"]
        r.ack(taken)
        assert r.acker.flush(5)
        assert sorted(rpc.acked) == sorted(["a0", "b0", "a1", "b2", "a3", "c5", "b4"])
    finally:
        r.shutdown(hand_back=False, within=1)


def test_body_lengths_read_from_offsets_match_pyarrow():
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from crdb_pubsub.source.wire import body_lengths, largest_body

    bodies = pa.array([b"", b"abc", None, b"x" * 1000, b"12345"], pa.binary())
    cases = [bodies, bodies.slice(1), bodies.slice(2, 2), bodies.slice(5), pa.chunked_array([bodies, bodies.slice(3)]),
             pa.chunked_array([], pa.binary()), bodies.cast(pa.large_binary()).slice(1, 3)]
    for arr in cases:
        expected = pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False) if len(arr) else np.empty(0)
        assert body_lengths(arr).tolist() == expected.tolist()
    batch = messages_batch([b"a" * n for n in (5, 50, 7)], ["1", "2", "3"], [1, 2, 3], [None] * 3, [None] * 3)
    assert largest_body(batch) == 50 and largest_body(batch.slice(2)) == 7 and largest_body(batch.slice(3)) == 0
    assert sizes_of(batch.slice(1)) == (57, 50) and sizes_of(batch.slice(0, 0)) == (0, 0)
