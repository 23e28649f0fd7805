"""The wire layout: one Pull response read in one pass, body sizes and numbers from the Arrow buffers."""

from __future__ import annotations

import pyarrow as pa

from crdb_pubsub.source import wire
from crdb_pubsub.source.pubsub.chunks import sizes_of
from crdb_pubsub.source.wire import messages_batch


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

    plain = [
        {"ack_id": f"a{i}", "message_id": str(i), "seconds": 1_700_000_000 + i, "nanos": 999_999 * i} for i in range(5)
    ]
    mixed = [dict(m) for m in plain]
    mixed[1]["attributes"] = {"TABLE_NAME": "orders", "x": "1"}
    mixed[3]["ordering_key"] = "k3"
    for messages in (plain, mixed):
        ack_ids, mids, batch = pulled_batch(_response(messages))
        assert batch.schema == MESSAGE_SCHEMA
        assert ack_ids == [m["ack_id"] for m in messages] and mids == [m["message_id"] for m in messages]
        assert batch.column("data").to_pylist() == [b"body-" + m["message_id"].encode() for m in messages]
        assert batch.column("publish_us").to_pylist() == [
            m["seconds"] * 1_000_000 + m["nanos"] // 1000 for m in messages
        ]
        assert [sorted(a) if a is not None else None for a in batch.column("attributes").to_pylist()] == [
            sorted(m["attributes"].items()) if m.get("attributes") else None for m in messages
        ]  # a map's order is Pub/Sub's
        assert batch.column("ordering_key").to_pylist() == [m.get("ordering_key") for m in messages]
    ack_ids, mids, batch = pulled_batch(_response([]))
    assert (ack_ids, mids, batch.num_rows, batch.schema) == ([], [], 0, MESSAGE_SCHEMA)


def test_body_lengths_read_from_offsets_match_pyarrow():
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from crdb_pubsub.source.wire import body_lengths, largest_body

    bodies = pa.array([b"", b"abc", None, b"x" * 1000, b"12345"], pa.binary())
    cases = [
        bodies,
        bodies.slice(1),
        bodies.slice(2, 2),
        bodies.slice(5),
        pa.chunked_array([bodies, bodies.slice(3)]),
        pa.chunked_array([], pa.binary()),
        bodies.cast(pa.large_binary()).slice(1, 3),
    ]
    for arr in cases:
        expected = pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False) if len(arr) else np.empty(0)
        assert body_lengths(arr).tolist() == expected.tolist()
    batch = messages_batch([b"a" * n for n in (5, 50, 7)], ["1", "2", "3"], [1, 2, 3], [None] * 3, [None] * 3)
    assert largest_body(batch) == 50 and largest_body(batch.slice(2)) == 7 and largest_body(batch.slice(3)) == 0
    assert sizes_of(batch.slice(1)) == (57, 50) and sizes_of(batch.slice(0, 0)) == (0, 0)


def test_a_batch_is_cut_into_partitions_by_messages_and_by_bytes():
    from crdb_pubsub.source.wire import BYTES_PER_PART, MAX_PARTS, MESSAGES_PER_PART, slices

    def lengths(cut):
        assert [o for o, _ in cut] == [sum(n for _, n in cut[:i]) for i in range(len(cut))]  # contiguous
        return [n for _, n in cut]

    assert lengths(slices(100, None, 100 * 400)) == [100]
    assert lengths(slices(2 * MESSAGES_PER_PART, None, 0)) == [MESSAGES_PER_PART] * 2
    assert lengths(slices(2 * MESSAGES_PER_PART + 1, None, 0)) == [33_334, 33_334, 33_333]
    # Large bodies: the byte bound makes more partitions than the count would.
    assert lengths(slices(1000, None, 3 * BYTES_PER_PART)) == [334, 333, 333]
    assert len(slices(10**7, None, 10**12)) == MAX_PARTS
    assert lengths(slices(10, 4, 0)) == [3, 3, 2, 2]  # numPartitions wins
    assert lengths(slices(2, 4, 0)) == [1, 1] and slices(0, None, 0) == []


def test_numbers_reads_slices_and_chunked_columns_as_their_values():
    column = pa.array([5, -1, 7, 2**40, 0], pa.int64())
    assert wire.numbers(column).tolist() == [5, -1, 7, 2**40, 0]
    assert wire.numbers(column.slice(2, 2)).tolist() == [7, 2**40]
    assert wire.numbers(column.slice(5)).tolist() == []
    roles = pa.chunked_array([pa.array([0, 1], pa.int8()), pa.array([9, 2], pa.int8()).slice(1)], pa.int8())
    assert wire.numbers(roles).tolist() == [0, 1, 2]
    assert wire.numbers(pa.chunked_array([], pa.int8())).tolist() == []


def test_mask_is_the_boolean_array_of_its_values():
    import numpy as np
    import pyarrow as pa

    from crdb_pubsub.source.wire import mask

    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 1000):
        values = rng.random(n) < 0.5
        got = mask(values)
        assert got.equals(pa.array(values.tolist(), pa.bool_())), n
        table = pa.table({"i": list(range(n))})
        assert table.filter(got).column("i").to_pylist() == [i for i in range(n) if values[i]]
