r"""Columns of JSON value texts, read in bulk: which bytes they hold, and JSON strings decoded.

The texts are values a msgspec decode has already validated (``msgspec.Raw`` fields of a Struct):
each is one complete, well-formed JSON value, so a number has no byte but ``-+.0-9eE``, a string's
escapes are well formed and its ``\u`` surrogates come in pairs (msgspec refuses the others). The
checks here lean on that; they are numpy passes over the column's bytes, one per question, never a
Python object per value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import OFFSET_LIMIT, ranges_column

_QUOTE, _BACKSLASH, _U = ord('"'), ord("\\"), ord("u")

# The byte each one-character escape stands for (``\\"`` ``\\\\`` ``\\/`` ``\\b`` ``\\f`` ``\\n`` ``\\r`` ``\\t``).
_SIMPLE = np.zeros(256, dtype=np.uint8)
_SIMPLE[np.frombuffer(b'"\\/bfnrt', dtype=np.uint8)] = np.frombuffer(b'"\\/\b\f\n\r\t', dtype=np.uint8)
# The value of a hex digit (16: not one).
_HEX = np.full(256, 16, dtype=np.uint32)
_HEX[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


class Texts:
    """A column of JSON value texts.

    ``arr``: a string array of them; ``data``: its bytes (uint8); ``offsets`` (int64, ``m + 1``)
    and ``lengths``; ``first``: each text's first byte; ``null``: the texts that are JSON null.
    """

    __slots__ = ("arr", "data", "first", "lengths", "null", "offsets")

    def __init__(self, arr: pa.Array, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> None:
        self.arr = arr
        self.data = data
        self.offsets = offsets
        self.lengths = lengths
        m = len(lengths)
        self.first = np.zeros(m, dtype=np.uint8)
        nonempty = lengths > 0
        self.first[nonempty] = data[offsets[:-1][nonempty]]
        self.null = (self.first == ord("n")) & (lengths == 4)  # valid JSON starting with n is null

    def having(self, chars: bytes) -> np.ndarray:
        """Mask of the texts holding any of the bytes ``chars``."""
        m = len(self.lengths)
        hit = np.zeros(len(self.data), dtype=bool)
        for c in chars:
            hit |= self.data == c
        at = np.flatnonzero(hit)
        out = np.zeros(m, dtype=bool)
        if len(at):
            out[np.searchsorted(self.offsets, at, side="right") - 1] = True
        return out

    def unquoted(self, strings: np.ndarray, valid: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """Return (string array, unsure mask) of the texts as a STRING column reads them.

        JSON strings (``strings``) become their decoded text; any other JSON value keeps its text;
        null where not ``valid``. A text is unsure when its escapes do not read as expected (never,
        for validated JSON); its value is then left null.
        """
        m = len(self.lengths)
        starts, ends = self.offsets[:-1], self.offsets[1:]
        escapes = np.flatnonzero(self.data == _BACKSLASH)
        all_strings = bool(strings[valid].all())
        owner = None
        if len(escapes):
            owner = np.searchsorted(self.offsets, escapes, side="right") - 1
            if not all_strings:
                inside = strings[owner]  # (backslashes in an object's strings stay as they are)
                escapes, owner = escapes[inside], owner[inside]
        unsure = np.zeros(m, dtype=bool)
        if not len(escapes) and all_strings:
            # Plain strings only: each value is its text less the quotes.
            cut = pc.binary_slice(self.arr.view(pa.binary()), 1, -1)
            return _with_validity(cut, valid), unsure
        keep = np.ones(len(self.data), dtype=bool)
        keep[starts[strings]] = False
        keep[ends[strings] - 1] = False
        dropped = 2 * strings.astype(np.int64)
        data = self.data
        if owner is not None and len(escapes):
            data = self.data.copy()
            taken, u_dropped, bad_at = _unescape(self.data, data, keep, escapes)
            if len(bad_at):
                unsure[np.searchsorted(self.offsets, bad_at, side="right") - 1] = True
            dropped += np.bincount(owner[taken], weights=u_dropped, minlength=m).astype(np.int64)
        new_offsets = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(self.lengths - dropped, out=new_offsets[1:])
        out = data[keep]
        bitmap = valid & ~unsure
        null_count = m - int(np.count_nonzero(bitmap))
        arr = pa.StringArray.from_buffers(
            m, pa.py_buffer(new_offsets.astype(np.int32)), pa.py_buffer(out),
            pa.py_buffer(np.packbits(bitmap, bitorder="little")) if null_count else None, null_count,
        )  # fmt: skip
        return arr, unsure

    def without_zone(self) -> pa.Array:
        """Return each text less its quotes and a ``Z``/``z`` before the closing one (timestamps' UTC mark)."""
        m = len(self.lengths)
        starts, ends = self.offsets[:-1], self.offsets[1:]
        last = max(len(self.data) - 1, 0)
        before = self.data[np.clip(ends - 2, 0, last)] if len(self.data) else np.zeros(m, np.uint8)
        zulu = (self.lengths >= 3) & ((before == ord("Z")) | (before == ord("z")))
        first = np.minimum(starts + 1, ends)
        return ranges_column(self.data, first, np.maximum(ends - 1 - zulu, first))


def _with_validity(arr: pa.Array, valid: np.ndarray) -> pa.Array:
    """``arr``'s values as a string array, null where not ``valid`` (its buffers shared)."""
    m = len(arr)
    null_count = m - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.StringArray.from_buffers(m, arr.buffers()[1], arr.buffers()[2], bitmap, null_count, arr.offset)


def _unescape(src: np.ndarray, out: np.ndarray, keep: np.ndarray,
              backslashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Decode the escapes among ``backslashes`` (positions in ``src``) into ``out`` and ``keep``.

    Each escape's bytes are dropped from ``keep`` but for the bytes of what it stands for, written
    to ``out``. Returns (which of ``backslashes`` start an escape, the bytes each drops, positions
    of escapes that did not read: never, for validated JSON).
    """
    # An escape starts at the first backslash of each run of them, and at every other one after it.
    run_start = np.ones(len(backslashes), dtype=bool)
    run_start[1:] = backslashes[1:] != backslashes[:-1] + 1
    first = np.maximum.accumulate(np.where(run_start, backslashes, 0))
    taken = np.flatnonzero(((backslashes - first) & 1) == 0)
    esc = backslashes[taken]
    last = len(src) - 1
    bad: list[np.ndarray] = [esc[esc >= last]]
    taken, esc = taken[esc < last], esc[esc < last]
    kind = src[esc + 1]
    simple = esc[kind != _U]
    keep[simple] = False
    out[simple + 1] = _SIMPLE[src[simple + 1]]
    bad.append(simple[out[simple + 1] == 0])  # (every byte an escape stands for is not 0)
    drops = np.ones(len(esc), dtype=np.int64)
    is_u = kind == _U
    u = esc[is_u]
    if len(u):
        digits = _HEX[src[np.minimum(u[:, None] + np.arange(2, 6), last)]]
        bad.append(u[(digits > 15).any(axis=1)])
        unit = (digits[:, 0] << 12) | (digits[:, 1] << 8) | (digits[:, 2] << 4) | digits[:, 3]
        high = (unit >= 0xD800) & (unit < 0xDC00)
        low = (unit >= 0xDC00) & (unit < 0xE000)
        # A high surrogate's escape is followed right away by its low one's: one code point, 12 bytes.
        paired = np.zeros(len(u), dtype=bool)
        paired[:-1] = high[:-1] & low[1:] & (u[1:] == u[:-1] + 6)
        second = np.zeros(len(u), dtype=bool)
        second[1:] = paired[:-1]
        bad.append(u[(high & ~paired) | (low & ~second)])
        point = unit.copy()
        point[:-1] = np.where(paired[:-1], 0x10000 + ((unit[:-1] - 0xD800) << 10) + (unit[1:] - 0xDC00), unit[:-1])
        lead = ~second
        at, point, span = u[lead], point[lead], np.where(paired[lead], 12, 6)
        width = np.where(point < 0x80, 1, np.where(point < 0x800, 2, np.where(point < 0x10000, 3, 4)))
        keep[(at[:, None] + np.arange(12))[np.arange(12) < span[:, None]]] = False
        utf8 = np.stack([
            np.select([width == 1, width == 2, width == 3], [point, 0xC0 | (point >> 6), 0xE0 | (point >> 12)],
                      0xF0 | (point >> 18)),
            np.where(width == 2, 0x80 | (point & 0x3F), np.where(width == 3, 0x80 | ((point >> 6) & 0x3F),
                                                                 0x80 | ((point >> 12) & 0x3F))),
            np.where(width == 3, 0x80 | (point & 0x3F), 0x80 | ((point >> 6) & 0x3F)),
            0x80 | (point & 0x3F),
        ], axis=1).astype(np.uint8)  # fmt: skip
        written = np.arange(4) < width[:, None]
        where = at[:, None] + np.arange(4)
        out[where[written]] = utf8[written]
        keep[where[written]] = True
        u_drops = np.zeros(len(u), dtype=np.int64)
        u_drops[lead] = span - width
        drops[is_u] = u_drops
    return taken, drops, np.concatenate(bad)


def texts_of(values: Sequence, m: int) -> Texts | None:
    """Return the :class:`Texts` of ``m`` raw JSON values (None: more than a string array holds)."""
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=m)
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > OFFSET_LIMIT:
        return None
    data = b"".join(values)
    arr = pa.StringArray.from_buffers(m, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))
    return Texts(arr, np.frombuffer(data, dtype=np.uint8), offsets, lengths)
