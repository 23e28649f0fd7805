"""A Pull response's messages read straight from its wire bytes, every message at once.

Reading a parsed ``PullResponse`` costs 0.8-1.4 us a message of Python (a wrapper object for each
sub-message and field read), against ~0.1 us for upb's parse itself: at tens of thousands of
messages a second that walk was most of a receiver's CPU. Here the bytes are read column-wise:
upb only splits the response into its messages (or a walk in Python, where they are large), then
each field of every message is found at once with numpy (tags, varints and lengths read for all
the messages in one step), and the columns are gathered by Arrow from offsets into the one
buffer. No Python runs per field; per message, only the ack id and message id, which the
receiver needs as ``str``. Those steps cost a fixed ~0.15 ms an answer: an answer of fewer than
:data:`FEWEST` messages is left to upb, which reads it for less.

Only the layout the service sends is read this way, and it is proven, not assumed: every field in
field-number order, each at most once, no field this module does not know, each length and varint
well formed and inside its enclosing message, strings valid UTF-8, at most one attribute a
message. Anything else (unknown or reordered fields, two attributes, truncated bytes) makes
:func:`parse` answer ``None``, and the caller parses with upb instead: the answer is upb's or
none. (One attribute is what CockroachDB's ``with_table_name_attribute`` sends; of more, upb's map
decides their order and which of a repeated key is kept.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

_LIMIT = 2**31 - 1  # Arrow's 32-bit offsets address the buffer
# Fewer messages are left to upb: reading them column-wise costs ~0.15 ms of numpy and Arrow calls
# a response, whatever its size, which upb's parse and the walk beat below some 400 messages
# (250 with an attribute each; examples/bench_pull_parse.py --messages).
FEWEST = 400

# Tags (field number << 3 | wire type), each one byte here.
_RM_ACK_ID, _RM_MESSAGE, _RM_DELIVERY_ATTEMPT = 0x0A, 0x12, 0x18
_PM_DATA, _PM_ATTRIBUTES, _PM_MESSAGE_ID, _PM_PUBLISH_TIME, _PM_ORDERING_KEY = 0x0A, 0x12, 0x1A, 0x22, 0x2A
_TS_SECONDS, _TS_NANOS = 0x08, 0x10
_ENTRY_KEY, _ENTRY_VALUE = 0x0A, 0x12  # an attribute: a map entry, a message of its own


class _NotProven(Exception):
    """The bytes are not in the layout this module reads: upb reads them."""


@dataclass(frozen=True)
class Parsed:
    """A Pull response's messages, in their order."""

    ack_ids: list[str]
    message_ids: list[str]
    data: pa.Array  # binary
    message_id_column: pa.Array  # string
    publish_us: np.ndarray  # int64, epoch microseconds
    ordering_keys: pa.Array | None  # string, null where empty; None when no message has one
    # Which messages have an attribute (one each), and the keys and values of those, in order;
    # None when no message has one.
    attributes: tuple[np.ndarray, pa.Array, pa.Array] | None


def parse(raw: bytes) -> Parsed | None:
    """Read a serialized ``PullResponse``.

    ``None`` when its layout is not the one proven here, or it holds fewer than :data:`FEWEST`
    messages: upb reads those.
    """
    if len(raw) > _LIMIT:
        return None
    try:
        return _parse(raw)
    except _NotProven:
        return None


def _parse(raw: bytes) -> Parsed | None:
    if not raw or raw[0] != 0x0A:
        return None
    first, after = _varint(raw, 1)  # the first message's length, and where it starts
    if len(raw) < FEWEST * (after + first):
        return None  # room for fewer than FEWEST messages of the first one's size: not even counted
    starts, ends = _walk(raw) if first >= _LARGE else _split(raw)
    if len(starts) < FEWEST:
        return None
    buf = np.frombuffer(raw, np.uint8)
    pos, end = starts.copy(), ends
    ack = _field_bytes(buf, pos, end, _RM_ACK_ID)
    m_start, m_end = _field_bytes(buf, pos, end, _RM_MESSAGE)
    _field_varint(buf, pos, end, _RM_DELIVERY_ATTEMPT)  # not kept, but proven
    _at_end(pos, end)
    mpos = m_start.copy()
    data = _field_bytes(buf, mpos, m_end, _PM_DATA)
    has_entry = _has(buf, mpos, m_end, _PM_ATTRIBUTES)
    entry = _field_bytes(buf, mpos, m_end, _PM_ATTRIBUTES)  # a second one is left over: not proven
    mid = _field_bytes(buf, mpos, m_end, _PM_MESSAGE_ID)
    t_start, t_end = _field_bytes(buf, mpos, m_end, _PM_PUBLISH_TIME)
    key = _field_bytes(buf, mpos, m_end, _PM_ORDERING_KEY)
    _at_end(mpos, m_end)
    tpos = t_start.copy()
    seconds = _field_varint(buf, tpos, t_end, _TS_SECONDS).view(np.int64)
    # An int32 is the varint's low 32 bits (upb's reading, negative values sign-extended to 10 bytes).
    nanos = _field_varint(buf, tpos, t_end, _TS_NANOS).astype(np.uint32).view(np.int32).astype(np.int64)
    _at_end(tpos, t_end)

    publish_us = seconds * 1_000_000 + nanos // 1000
    values = pa.py_buffer(raw)
    message_id_column = _gather(values, *mid, pa.string())
    ack_ids = _python_strings(_gather(values, *ack, pa.string()), *ack)
    message_ids = _python_strings(message_id_column, *mid)  # the column is valid UTF-8 if these decode
    key_lengths = key[1] - key[0]
    ordering_keys = None
    if key_lengths.any():
        ordering_keys = _utf8(_gather(values, *key, pa.string(), valid=key_lengths > 0))
    attributes = None
    if has_entry.any():
        at = np.flatnonzero(has_entry)
        epos, e_end = entry[0][at], entry[1][at]
        k = _field_bytes(buf, epos, e_end, _ENTRY_KEY)  # either left out when empty
        v = _field_bytes(buf, epos, e_end, _ENTRY_VALUE)
        _at_end(epos, e_end)
        attributes = has_entry, _utf8(_gather(values, *k, pa.string())), _utf8(_gather(values, *v, pa.string()))
    return Parsed(
        ack_ids,
        message_ids,
        _gather(values, *data, pa.binary()),
        message_id_column,
        publish_us,
        ordering_keys,
        attributes,
    )


def _utf8(column: pa.Array) -> pa.Array:
    try:
        column.validate(full=True)  # UTF-8, as upb requires of a string
    except pa.ArrowInvalid:
        raise _NotProven from None
    return column


# From this size of the first message on, the messages are found by a walk in Python (~0.4 us a
# message) rather than by upb (~0.05 us a message, but two copies of them, ~0.1 us a KB).
_LARGE = 2048


def _split(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each ReceivedMessage (field 1, the response's only field) starts and ends.

    Each message's place follows from the length of the one before: a walk that costs ~0.4 us a
    message in Python, made here by upb, parsing the response as a list of byte strings. Their
    lengths place them if the response is nothing but those fields, each as ``0x0A``, the
    shortest varint of its length and the message: then and only then do the sizes add up to the
    response's.
    """
    try:
        split = _split_class().FromString(raw)
    except DecodeError:
        raise _NotProven from None
    lengths = np.fromiter(map(len, split.received_messages), np.int64, len(split.received_messages))
    header = 2 + (lengths >= 1 << 7) + (lengths >= 1 << 14) + (lengths >= 1 << 21) + (lengths >= 1 << 28)
    ends = np.cumsum(header + lengths)
    if (ends[-1] if len(ends) else 0) != len(raw):
        raise _NotProven
    return ends - lengths, ends


def _walk(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each ReceivedMessage starts and ends, found one after the other."""
    starts: list[int] = []
    ends: list[int] = []
    p, size = 0, len(raw)
    while p < size:
        if raw[p] != 0x0A:
            raise _NotProven
        length, p = _varint(raw, p + 1)
        if p + length > size:  # past the response: Arrow would gather from there unchecked
            raise _NotProven
        starts.append(p)
        p += length
        ends.append(p)
    return np.array(starts, np.int64), np.array(ends, np.int64)


def _varint(raw: bytes, p: int) -> tuple[int, int]:
    """Read the length at ``p``: it, and where it ends (at most 5 bytes, as upb reads a length)."""
    value = shift = 0
    for i in range(p, min(p + 5, len(raw))):
        b = raw[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    raise _NotProven


@functools.cache
def _split_class() -> Any:
    """``message Split { repeated bytes received_messages = 1; }``: a PullResponse, its messages unread."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="crdb_pubsub_split.proto", package="crdb_pubsub", syntax="proto3")
    proto.message_type.add(name="Split").field.add(
        name="received_messages",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()  # its own: nothing shared with the process's protos
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("crdb_pubsub.Split"))


def _byte(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Read the bytes at ``at``, the last one where ``at`` is past the end.

    Read there only when a field runs past its message, which the callers then find (a copy of the
    response padded at its end would cost more, on answers of large messages).
    """
    return buf.take(at, mode="clip")


def _has(buf: np.ndarray, pos: np.ndarray, end: np.ndarray, tag: int) -> np.ndarray:
    """Where field ``tag`` comes next."""
    return (pos < end) & (_byte(buf, pos) == tag)


def _varints(buf: np.ndarray, at: np.ndarray, longest: int = 10) -> tuple[np.ndarray, np.ndarray | int]:
    """Read the varints starting at ``at``: their values and sizes.

    A tenth byte's bits past the 64th are dropped, as upb drops them (values mod 2**64).

    Longer than ``longest`` bytes is not proven: upb takes a length of at most 5 and a value of
    at most 10 (more is malformed).
    """
    b = _byte(buf, at)
    value = b.astype(np.uint64)
    going = np.flatnonzero(b >= 0x80)
    if not len(going):
        return value, 1
    value &= np.uint64(0x7F)
    size = np.ones(len(at), np.int64)
    for k in range(1, longest):
        b = _byte(buf, at[going] + k)
        value[going] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[going] += 1
        going = going[b >= 0x80]
        if not len(going):
            return value, size
    raise _NotProven


def _field_varint(buf: np.ndarray, pos: np.ndarray, end: np.ndarray, tag: int) -> np.ndarray:
    """Read the varint field ``tag`` where it comes next (0 where absent); ``pos`` moved past it."""
    has = _has(buf, pos, end, tag)
    if has.all():
        value, size = _varints(buf, pos + 1)
        pos += 1 + size
    elif has.any():
        at = np.flatnonzero(has)
        value = np.zeros(len(pos), np.uint64)
        value[at], size = _varints(buf, pos[at] + 1)
        pos[at] += 1 + size
    else:
        return np.zeros(len(pos), np.uint64)
    if (pos > end).any():
        raise _NotProven
    return value


def _field_bytes(buf: np.ndarray, pos: np.ndarray, end: np.ndarray, tag: int) -> tuple[np.ndarray, np.ndarray]:
    """Where the length-delimited field ``tag`` starts and stops (empty where absent); ``pos`` moved past it."""
    has = _has(buf, pos, end, tag)
    if has.all():
        length, size = _varints(buf, pos + 1, 5)
        if len(length) and length.max() > _LIMIT:
            raise _NotProven
        start = pos + 1 + size
        pos[:] = start + length.astype(np.int64)
    elif has.any():
        at = np.flatnonzero(has)
        length, size = _varints(buf, pos[at] + 1, 5)
        if length.max() > _LIMIT:
            raise _NotProven
        start = pos.copy()
        start[at] += 1 + size
        pos[at] = start[at] + length.astype(np.int64)
    else:
        return pos.copy(), pos.copy()
    if (pos > end).any():
        raise _NotProven
    return start, pos.copy()


def _at_end(pos: np.ndarray, end: np.ndarray) -> None:
    """Every message read to its end: no field left over (unknown, repeated or out of order)."""
    if not np.array_equal(pos, end):
        raise _NotProven


def _python_strings(column: pa.Array, start: np.ndarray, stop: np.ndarray) -> list[str]:
    """Return the strings of a gathered string column as Python ``str``.

    Sliced from its bytes read as Latin-1 (one decode for all of them, one object each), right
    where they are ASCII (ack and message ids are); decoded as UTF-8 one by one otherwise.
    """
    bounds = np.zeros(len(start) + 1, np.int64)
    np.cumsum(stop - start, out=bounds[1:])
    blob = bytes(memoryview(column.buffers()[2])[: bounds[-1]])
    firsts, lasts = bounds[:-1].tolist(), bounds[1:].tolist()
    text = blob.decode("latin-1")
    out = [text[a:b] for a, b in zip(firsts, lasts)]
    if all(map(str.isascii, out)):
        return out
    try:
        return [blob[a:b].decode() for a, b in zip(firsts, lasts)]
    except UnicodeDecodeError:
        raise _NotProven from None


def _gather(
    values: pa.Buffer, start: np.ndarray, stop: np.ndarray, type_: pa.DataType, valid: np.ndarray | None = None
) -> pa.Array:
    """Gather the byte ranges ``start:stop`` of ``values`` into one column (Arrow copies them).

    The ranges come one after another in the buffer: as offsets they make an array of every range
    and the gaps between them, of which Arrow takes every other element.
    """
    n = len(start)
    if not n:
        return pa.Array.from_buffers(type_, 0, [None, pa.py_buffer(np.zeros(1, np.int32)), pa.py_buffer(b"")])
    offsets = np.empty(2 * n, np.int32)
    offsets[0::2] = start
    offsets[1::2] = stop
    bitmap = None
    if valid is not None:
        both = np.zeros(2 * n - 1, np.bool_)
        both[0::2] = valid
        bitmap = pa.py_buffer(np.packbits(both, bitorder="little"))
    ranges = pa.Array.from_buffers(type_, 2 * n - 1, [bitmap, pa.py_buffer(offsets), values])
    return ranges.take(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.arange(0, 2 * n, 2))]))
