"""The Arrow layout of Pub/Sub messages on their way from the receiver to the executors.

A micro-batch travels to the executors inside Spark's input partitions as Arrow IPC streams with
:data:`MESSAGE_SCHEMA`: the body and the Pub/Sub metadata that decoding needs, nothing else (no
ack ids, no subscription). The receiver builds these columns once per Pull response; a batch is
serialised once when it is sealed, and the executors read it back without copying.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from . import pull_parse

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("data", pa.binary()),
        pa.field("message_id", pa.string()),
        pa.field("publish_us", pa.int64()),  # epoch microseconds
        pa.field("attributes", pa.map_(pa.string(), pa.string())),
        pa.field("ordering_key", pa.string()),
    ]
)

_ATTRIBUTES = MESSAGE_SCHEMA.field("attributes").type
OFFSET_LIMIT = 2**31 - 1  # the largest offset of a (not large_) binary or string column


def messages_batch(
    data: Sequence[bytes],
    message_ids: Sequence[str],
    publish_us: Sequence[int],
    attributes: Sequence[Sequence[tuple[str, str]] | None],
    ordering_keys: Sequence[str | None],
) -> pa.RecordBatch:
    """Columns of messages in :data:`MESSAGE_SCHEMA` (attributes as key/value pairs or None)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array(data, pa.binary()),
            pa.array(message_ids, pa.string()),
            pa.array(publish_us, pa.int64()),
            pa.array(attributes, pa.map_(pa.string(), pa.string())),
            pa.array(ordering_keys, pa.string()),
        ],
        schema=MESSAGE_SCHEMA,
    )


def pulled_batch(response: bytes | Any) -> tuple[list[str], list[str], pa.RecordBatch]:
    """``(ack ids, message ids, columns)`` of one Pull response's messages, in their order.

    ``response`` is a serialized ``PullResponse`` (what the receive path gets, see
    :mod:`.pull_parse`: read from its bytes, or parsed by upb where they are in another layout),
    or the message itself, raw protobuf or the generated client's proto-plus wrapper (unwrapped
    first: reading fields through the wrapper costs far more). A message's fields are read once
    in one pass (each read of a sub-message builds a Python wrapper); the columns are built from
    their buffers, and the attribute and ordering-key columns, empty on CockroachDB's messages,
    per message only when some message has one.
    """
    if isinstance(response, bytes):
        parsed = pull_parse.parse(response)
        if parsed is not None:
            return parsed.ack_ids, parsed.message_ids, _parsed_batch(parsed)
        response = _pull_response().FromString(response)  # upb's reading, or its error
    pb = type(response).pb(response) if hasattr(type(response), "pb") else response
    ack_ids: list[str] = []
    msgs = []
    mids: list[str] = []
    data: list[bytes] = []
    seconds: list[int] = []
    nanos: list[int] = []
    for rm in pb.received_messages:
        ack_ids.append(rm.ack_id)
        m = rm.message
        msgs.append(m)
        mids.append(m.message_id)
        data.append(m.data)
        t = m.publish_time
        seconds.append(t.seconds)
        nanos.append(t.nanos)
    n = len(msgs)
    publish_us = np.array(seconds, np.int64) * 1_000_000 + np.array(nanos, np.int64) // 1000
    if any(m.attributes for m in msgs):
        attributes = _attributes([m.attributes for m in msgs])
    else:
        attributes = pa.nulls(n, _ATTRIBUTES)
    if any(m.ordering_key for m in msgs):
        ordering_keys = _strings([m.ordering_key for m in msgs], empty_is_null=True)
    else:
        ordering_keys = pa.nulls(n, pa.string())
    batch = pa.RecordBatch.from_arrays(
        [
            _binary(data, pa.binary()),
            _strings(mids),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(publish_us)]),
            attributes,
            ordering_keys,
        ],
        schema=MESSAGE_SCHEMA,
    )
    return ack_ids, mids, batch


def _parsed_batch(parsed: pull_parse.Parsed) -> pa.RecordBatch:
    n = len(parsed.ack_ids)
    if parsed.attributes is None:
        attributes = pa.nulls(n, _ATTRIBUTES)
    else:
        has, keys, values = parsed.attributes
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(_offsets(has, n))])
        attributes = pa.MapArray.from_arrays(offsets, keys, values, type=_ATTRIBUTES, mask=mask(~has))
    return pa.RecordBatch.from_arrays(
        [
            parsed.data,
            parsed.message_id_column,
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(parsed.publish_us)]),
            attributes,
            pa.nulls(n, pa.string()) if parsed.ordering_keys is None else parsed.ordering_keys,
        ],
        schema=MESSAGE_SCHEMA,
    )


@functools.cache
def _pull_response() -> Any:
    from google.pubsub_v1.types import pubsub

    return pubsub.PullResponse.pb()


# Columns from their buffers. The receive path builds them for every Pull; ``pa.array`` of Python
# values costs about twice as much for bodies, and its first call imports pandas (pyarrow looks
# for it), some 0.3-0.5 s of every query's start in Spark's driver-side runner.


def _offsets(lengths: Any, n: int) -> np.ndarray:
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets.astype(np.int32)


def _binary(values: Sequence[bytes], type_: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    n = len(values)
    lengths = np.fromiter(map(len, values), np.int64, n)
    if int(lengths.sum()) > OFFSET_LIMIT:  # a 32-bit offset column can't hold them: pyarrow says so
        return pa.array([v if valid is None or valid[i] else None for i, v in enumerate(values)], type_)
    offsets = _offsets(lengths, n)
    if valid is None or valid.all():
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))])
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = n - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))], nulls)


def _strings(values: Sequence[str], *, empty_is_null: bool = False) -> pa.Array:
    valid = np.fromiter(map(bool, values), np.bool_, len(values)) if empty_is_null else None
    return _binary([v.encode() for v in values], pa.string(), valid)


def _attributes(maps: Sequence[Any]) -> pa.Array:
    """Build the ``attributes`` column: a map per message, null where a message has none."""
    n = len(maps)
    keys: list[str] = []
    values: list[str] = []
    for m in maps:
        for k, v in m.items():
            keys.append(k)
            values.append(v)
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(_offsets([len(m) for m in maps], n))])
    valid = np.fromiter(map(bool, maps), np.bool_, n)
    return pa.MapArray.from_arrays(offsets, _strings(keys), _strings(values), type=_ATTRIBUTES, mask=mask(~valid))


def body_lengths(bodies: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Return the byte length of each body, read from the binary column's offsets.

    The receive path asks for sizes of every Pull response; a pyarrow compute call costs
    10-40 us of Python dispatch each, several a Pull, against a few us for this. A null body
    (never sent by Pub/Sub) counts 0 bytes, as ``pc.binary_length`` + ``pc.sum`` counted it.
    """
    if isinstance(bodies, pa.ChunkedArray):
        return np.concatenate([body_lengths(c) for c in bodies.chunks] or [np.empty(0, np.int64)])
    n = len(bodies)
    if n == 0:
        return np.empty(0, np.int64)
    width = np.int64 if pa.types.is_large_binary(bodies.type) or pa.types.is_large_string(bodies.type) else np.int32
    offsets = np.frombuffer(bodies.buffers()[1], width, n + 1, bodies.offset * np.dtype(width).itemsize)
    return np.diff(offsets).astype(np.int64, copy=False)


_NUMPY: dict[pa.DataType, np.dtype] = {pa.int8(): np.dtype(np.int8), pa.int64(): np.dtype(np.int64)}


def numbers(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Return an ``int8`` or ``int64`` column without nulls as a numpy array (a view of its buffer).

    ``to_numpy`` and ``np.asarray`` do the same, but pyarrow imports pandas on their first call:
    0.3 s of CPU at each query's start in Spark's driver-side runner, in a puller's thread, whose
    first answer waited for it.
    """
    if isinstance(column, pa.ChunkedArray):
        return np.concatenate([numbers(c) for c in column.chunks] or [np.empty(0, _NUMPY[column.type])])
    dtype = _NUMPY[column.type]
    assert not column.null_count, "numbers() reads a column without nulls"
    if not len(column):
        return np.empty(0, dtype)
    return np.frombuffer(column.buffers()[1], dtype, len(column), column.offset * dtype.itemsize)


def mask(values: np.ndarray) -> pa.BooleanArray:
    """Return a numpy boolean array as Arrow's, from its bits (``pa.array`` imports pandas, see :func:`numbers`)."""
    bits = np.packbits(values.astype(bool, copy=False), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def largest_body(batch: pa.RecordBatch) -> int:
    """Return the size in bytes of the largest body in ``batch`` (0 when empty)."""
    lengths = body_lengths(batch.column(0))
    return int(lengths.max()) if len(lengths) else 0


def _write(sink: pa.NativeFile, table: pa.Table | pa.RecordBatch) -> None:
    with pa.ipc.new_stream(sink, MESSAGE_SCHEMA) as writer:
        if isinstance(table, pa.RecordBatch):
            writer.write_batch(table)
        else:
            writer.write_table(table)


def to_ipc(table: pa.Table | pa.RecordBatch) -> pa.Buffer:
    """One Arrow IPC stream holding ``table`` (the one copy a sealed batch keeps).

    Measured first and written into a buffer of exactly that size: a growing output stream
    doubles its capacity and would briefly hold up to twice the batch.
    """
    mock = pa.MockOutputStream()
    _write(mock, table)
    buf = pa.allocate_buffer(mock.size())
    _write(pa.FixedSizeBufferWriter(buf), table)
    return buf


def from_ipc(payload: pa.Buffer | bytes) -> pa.Table:
    """Read the messages of an IPC stream, without copying the bodies."""
    buf = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
    return pa.ipc.open_stream(buf).read_all()


# A Spark task costs tens of ms of fixed work on each side (the reader unpickled, Arrow streams set
# up, a projection generated): draining 200,000 messages in batches of 100,000 on two cores,
# numPartitions 2 made 35,300 msg/s, 4 32,700, 5 30,900, 8 27,900 (profile_stream.py, three rounds).
MESSAGES_PER_PART = 50_000
BYTES_PER_PART = 32 << 20
MAX_PARTS = 8


def slices(n: int, parts: int | None, nbytes: int = 0) -> list[tuple[int, int]]:
    """Cut ``n`` rows (``nbytes`` of bodies) into contiguous, near-equal ``(offset, length)`` slices.

    With ``parts=None``: one slice per :data:`MESSAGES_PER_PART` rows or :data:`BYTES_PER_PART`
    bytes, whichever makes more, at most :data:`MAX_PARTS`.
    """
    if n <= 0:
        return []
    if parts is None:
        parts = min(MAX_PARTS, max(1, -(-n // MESSAGES_PER_PART), -(-nbytes // BYTES_PER_PART)))
    parts = min(parts, n)
    size, extra = divmod(n, parts)
    out, offset = [], 0
    for p in range(parts):
        length = size + (1 if p < extra else 0)
        out.append((offset, length))
        offset += length
    return out
