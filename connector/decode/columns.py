"""Bulk Arrow helpers the fast paths share.

String columns straight from raw JSON bytes, first bytes of each value, UTF-8 checks, constant
columns and HLC text to timestamps.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# First bytes of a JSON value, compared on whole columns.
OBJ_START, ARR_START, NULL_START = ord("{"), ord("["), ord("n")
# The v2 wrapper's parts, from a msgspec Struct of it.
GET_KEY, GET_VALUE, GET_TOPIC = (operator.attrgetter(a) for a in ("Key", "Value", "Topic"))

OFFSET_LIMIT = 2**31 - 1

Part = tuple[np.ndarray, dict[str, pa.Array]]  # a fast path's result: (positions in its bodies, output columns)


class TooLarge(ValueError):
    pass


def raw_column(
    raws: Sequence, valid: np.ndarray | None = None, lengths: np.ndarray | None = None
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Build a string array whose values are the given byte strings, without per-item Python work.

    Returns the array, the offsets and the data bytes as a uint8 view (for first-byte checks).
    Null slots (``valid`` False) keep their bytes in the data buffer, which Arrow allows.
    """
    n = len(raws)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if lengths is None:
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > OFFSET_LIMIT:
        raise TooLarge("a string column of this batch exceeds 2 GiB; decode fewer messages per call")
    data = b"".join(raws)
    bitmap = None
    null_count = 0
    if valid is not None:
        null_count = int(n - np.count_nonzero(valid))
        if null_count:
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.StringArray.from_buffers(
        n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), bitmap, null_count if bitmap else 0
    )
    return arr, offsets, np.frombuffer(data, dtype=np.uint8)


def ranges_column(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Return the byte ranges ``data[starts[i]:ends[i]]`` as a string array, in one gather.

    The ranges and the gaps between them are the values of one binary array over ``data``'s
    buffer (no copy), of which every other value is taken.
    """
    m = len(starts)
    if not m:
        return pa.nulls(0, pa.string())
    offsets = np.empty(2 * m, dtype=np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    pieces = pa.BinaryArray.from_buffers(pa.binary(), 2 * m - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pieces.take(pa.array(np.arange(0, 2 * m, 2))).view(pa.string())


def spread(arr: pa.Array, at: np.ndarray, n: int) -> pa.Array:
    """Return the string array ``arr`` placed at the increasing positions ``at`` of ``n`` rows, null elsewhere.

    The result shares ``arr``'s data buffer: only offsets and validity are made, where a ``take``
    would copy every value (the rows of a batch's other parts, few and null here, interleave).
    """
    m = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + m + 1]
    out = np.zeros(n + 1, dtype=np.int32)
    out[0] = offsets[0]
    out[at + 1] = offsets[1:]
    np.maximum.accumulate(out, out=out)  # a null row repeats the offset before it
    valid = np.zeros(n, dtype=bool)
    valid[at] = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else True
    null_count = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    data = arr.buffers()[2]
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(out), data if data is not None else pa.py_buffer(b""), bitmap, null_count
    )


def const(value: str, n: int) -> pa.Array:
    width = len(value.encode())
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(value.encode() * n))


def first_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Return each value's first byte (0 for an empty value)."""
    starts = offsets[:-1]
    if not len(data):
        return np.zeros(len(starts), dtype=np.uint8)
    out = data[np.minimum(starts, len(data) - 1)]
    out[offsets[1:] == starts] = 0
    return out


def utf8_bad(arr: pa.Array, raws: Sequence | None = None) -> np.ndarray | None:
    """Mask the values that are not valid UTF-8 (None when all are), in one bulk check.

    Details on failure come from ``raws``, the values' texts, or else from the array's own buffers.
    """
    try:
        arr.validate(full=True)
        return None
    except pa.ArrowInvalid:
        if raws is None:
            raws = arr.view(pa.binary()).to_pylist()
        bad = np.zeros(len(raws), dtype=bool)
        for i, raw in enumerate(raws):
            try:
                if raw is not None:
                    bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                bad[i] = True
        return bad


def table_names(topic: pa.Array, name_of: Callable[[str | None], str | None]) -> pa.Array:
    """``name_of`` (the table a topic names) over a column, once per distinct topic."""
    encoded = pc.dictionary_encode(topic)
    tables = pa.array([name_of(t) for t in encoded.dictionary.to_pylist()], pa.string())
    return tables.take(encoded.indices)


def hlc_ok(arr: pa.Array, quoted: bool = False) -> np.ndarray:
    """Mask of the HLC strings of ``arr`` that match :data:`~.hlc.HLC_TEXT` (``HLC_QUOTED`` when ``quoted``); nulls pass.

    One changefeed's HLCs are nearly always all of one length (a 19-digit wall time): then the
    grammar is checked on the values side by side, one row of bytes each; else with the regex.
    """
    from .hlc import HLC_QUOTED, HLC_TEXT

    m = len(arr)
    q = int(quoted)
    if m and not arr.null_count:
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + m + 1]
        width = int(offsets[1] - offsets[0])
        if 12 + 2 * q <= width <= 30 + 2 * q and bool((np.diff(offsets) == width).all()):
            rows = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(m, width)
            digits = (rows - ord("0")) < 10
            dot = width - 11 - q
            ok = digits[:, q:dot].all(axis=1) & (rows[:, dot] == ord(".")) & digits[:, dot + 1 : width - q].all(axis=1)
            if quoted:
                ok &= (rows[:, 0] == ord('"')) & (rows[:, -1] == ord('"'))
            if dot - q == 19:  # a 19-digit wall time fits an int64 of nanoseconds below 9e18
                ok &= (rows[:, q] >= ord("1")) & (rows[:, q] <= ord("8"))
            return ok
    matched = pc.match_substring_regex(arr, HLC_QUOTED if quoted else HLC_TEXT)
    return pc.fill_null(matched, True).to_numpy(zero_copy_only=False)


def hlc_micros_array(arr: pa.Array) -> pa.Array:
    """Commit time (timestamp[us, UTC]) from an array of validated HLC strings, vectorised."""
    wall = pc.cast(pc.utf8_slice_codeunits(arr, 0, -11), pa.int64())
    return pc.cast(pc.divide(wall, 1000), pa.timestamp("us", tz="UTC"))
