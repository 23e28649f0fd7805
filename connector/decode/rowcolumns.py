"""The change rows' columns, built in bulk from the raw JSON texts of matched bodies.

A learned layout's values are taken out of their bodies as raw JSON text (``msgspec.Raw``), which
msgspec has validated: each is one complete JSON value. :class:`Col` holds the texts of one key for
a group of bodies (null where the key is absent) with their first bytes, and answers the questions
the families ask of them with Arrow kernels and numpy passes over their bytes, never value by
value: present, JSON null, an object, a plain string, an HLC, an integer that fits an int64. The
rest builds the output columns of change rows from them: row images, commit times from HLCs or
epoch microseconds, all the columns of one envelope's rows, and values read once per distinct text
(the schema blocks of one table's messages). A value the bulk reading is unsure of sends its
message to the general path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec import Raw

from .columns import NULL_START, const, first_bytes, hlc_micros_array, hlc_ok, raw_column

if TYPE_CHECKING:  # pragma: no cover
    from .proofs import Texts

# The grammars, read from the bytes of texts msgspec validated (Col.plain_string, Col.ints):
PLAIN_STRING = r'^"[^"\\]*"$'  # a JSON string without escapes
_INT_ANY = r"^-?[0-9]+$"  # what the general path's _int_field reads as an integer
_INT_SAFE = r"^(?:-?[0-9]{1,18}|[1-8][0-9]{18})$"  # ... and what surely fits an int64
# Not pa.scalar(None, ...): pyarrow's first conversion of Python values imports pandas (0.3-0.5 s), and
# the families are imported wherever the envelope names are needed, Spark's driver-side runner too.
NULL_STR = pa.nulls(1, pa.string())[0]
_SPACE = ord(" ")


class Col:
    """A column of raw JSON texts (null where the key is absent) with its first bytes."""

    __slots__ = ("arr", "first", "present")

    def __init__(self, raws: Texts | None, m: int) -> None:
        if raws is None:
            self.arr = pa.nulls(m, pa.string())
            self.first = np.zeros(m, dtype=np.uint8)
            self.present = np.zeros(m, dtype=bool)
        else:
            self.arr, offsets, data = raw_column(raws)
            self.first = first_bytes(offsets, data)
            self.present = np.ones(m, dtype=bool)

    @classmethod
    def of(cls, arr: pa.Array) -> Col:
        col = cls.__new__(cls)
        col.arr = arr
        m = len(arr)
        col.present = arr.is_valid().to_numpy(zero_copy_only=False)
        col.first = np.zeros(m, dtype=np.uint8)
        data_buf = arr.buffers()[2]
        if m and col.present.any() and data_buf is not None and data_buf.size:
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + m + 1]
            col.first = first_bytes(offsets, np.frombuffer(data_buf, dtype=np.uint8))
            col.first[~col.present] = 0
        return col

    def stats(self, spaces: bool) -> tuple[int, int | None] | None:
        """(total length, spaces if asked) of the present values' text, when all are present."""
        if not self.present.all() or not len(self.arr):
            return None
        arr = self.arr
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
        if not spaces:
            return int(offsets[-1] - offsets[0]), None
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        return len(data), int(np.count_nonzero(data == _SPACE))

    def holding(self, chars: bytes) -> np.ndarray:
        """Present and holding any of the bytes ``chars``."""
        arr = self.arr
        m = len(arr)
        out = np.zeros(m, dtype=bool)
        data_buf = arr.buffers()[2]
        if not m or not self.present.any() or data_buf is None:
            return out
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + m + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
        hit = np.zeros(len(data), dtype=bool)
        for c in chars:
            hit |= data == c
        at = np.flatnonzero(hit)
        if len(at):
            out[np.searchsorted(offsets - offsets[0], at, side="right") - 1] = True
        return out & self.present

    def plain_string(self) -> np.ndarray:
        """Absent, or a JSON string without escapes (:data:`PLAIN_STRING`: it has no backslash)."""
        return ~self.present | ((self.first == ord('"')) & ~self.holding(b"\\"))

    def hlc(self) -> np.ndarray:
        """Absent, or an HLC string (:data:`~.hlc.HLC_QUOTED`)."""
        if not self.present.any():
            return np.ones(len(self.present), dtype=bool)
        return hlc_ok(self.arr, quoted=True)

    def starts(self, chars: bytes) -> np.ndarray:
        """Absent, or the first byte is one of ``chars``."""
        ok = ~self.present
        for c in chars:
            ok |= self.first == c
        return ok

    def is_null(self) -> np.ndarray:
        """Absent or JSON null (valid JSON starting with ``n``)."""
        return ~self.present | (self.first == NULL_START)

    def unquoted(self) -> pa.Array:
        """Return the text inside the quotes (for values already proven to be plain JSON strings).

        Sliced as bytes: a value that is not valid UTF-8 (its message refused) must not fail the batch.
        """
        return pc.binary_slice(self.arr.view(pa.binary()), 1, -1).view(pa.string())

    def ints(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(int64 values, has-an-int mask, not-sure mask) as the general path's _int_field reads them."""
        m = len(self.present)
        if not self.present.any():
            return np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool), np.zeros(m, dtype=bool)
        # The texts are valid JSON (msgspec read them): an integer is a number without . e E
        # (_INT_ANY); it surely fits an int64 with at most 18 digits, or 19 below 9e18 (_INT_SAFE).
        minus = self.first == ord("-")
        is_int = self.present & (minus | ((self.first - ord("0")) < 10)) & ~self.holding(b".eE")
        offsets = np.frombuffer(self.arr.buffers()[1], dtype=np.int32)[self.arr.offset : self.arr.offset + m + 1]
        digits = np.diff(offsets) - minus
        safe = is_int & (
            (digits <= 18) | ((digits == 19) & ~minus & (self.first >= ord("1")) & (self.first <= ord("8")))
        )
        unsure = is_int & ~safe
        src = pc.if_else(pa.array(safe), self.arr, NULL_STR) if not safe.all() else self.arr
        values = pc.fill_null(pc.cast(src, pa.int64()), 0).to_numpy(zero_copy_only=False)
        return values, safe, unsure


def per_distinct(texts: Sequence[Raw], read: Callable[[bytes], Any]) -> tuple[np.ndarray, list[Any]]:
    """Return (ok mask, ``read(text)``) for each of ``texts``, read once per distinct text.

    The schema blocks of one table's messages are one text; ok is False where ``read`` raised.
    """
    seen: dict[int, list[tuple[Raw, bool, Any]]] = {}
    ok = np.ones(len(texts), dtype=bool)
    out: list[Any] = []
    for i, text in enumerate(texts):
        same = seen.setdefault(len(text), [])
        for known, fine, value in same:  # noqa: B007 - the match's fine and value are used after the loop
            if known == text:
                break
        else:
            try:
                fine, value = True, read(bytes(text))
            except Exception:  # noqa: BLE001 - Bad, or a decode error the general path meets as well
                fine, value = False, None
            same.append((text, fine, value))
        ok[i] = fine
        out.append(value)
    return ok, out


def commit_from_hlc(updated: pa.Array, mvcc: pa.Array) -> pa.Array:
    """commit_time from HLC strings: ``updated`` when present, else ``mvcc_timestamp``.

    The callers reject the messages whose HLCs are not valid, after this: such a value (``" 1.0"``)
    gets a placeholder here, so that the bulk cast cannot fail on it.
    """
    m = len(updated)
    commit = pa.nulls(m, pa.timestamp("us", tz="UTC"))
    for arr in (mvcc, updated):
        if arr.null_count < m:
            valid = pa.array(hlc_ok(arr))
            micros = hlc_micros_array(pc.if_else(valid, pc.fill_null(arr, "0.0000000000"), "0.0000000000"))
            commit = pc.if_else(pc.is_null(arr), commit, micros)
    return commit


def micros_array(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    """commit_time from int64 microseconds, null where not ``valid``."""
    return pa.array(values, pa.int64(), mask=~valid).cast(pa.timestamp("us", tz="UTC"))


def image(col: Col) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(ok, null mask, string array) of a row image that must be an object or null."""
    ok = col.starts(b"{n")
    null = col.is_null()
    arr = col.arr
    if null.any():
        arr = pc.if_else(pa.array(null), NULL_STR, arr) if col.present.any() else arr
    return ok, null, arr


def row_columns(
    m: int,
    envelope: str,
    src: Col,
    src_obj: np.ndarray,
    *,
    op: pa.Array,
    before: pa.Array,
    after: pa.Array,
    table: pa.Array,
    commit: pa.Array,
    topic: pa.Array | None = None,
    key: pa.Array | None = None,
    updated: pa.Array | None = None,
    mvcc: pa.Array | None = None,
) -> dict[str, pa.Array]:
    """Build the columns of ``m`` change rows of one envelope; what the envelope lacks is null.

    ``source`` is the block's text where it is an object (null where absent or JSON null).
    """
    source = src.arr
    if src.present.any() and not src_obj.all():
        source = pc.if_else(pa.array(src_obj), source, NULL_STR)
    none = pa.nulls(m, pa.string())
    return {
        "kind": const("row", m),
        "envelope": const(envelope, m),
        "topic": none if topic is None else topic,
        "table_name": table,
        "key": none if key is None else key,
        "op": op,
        "before": before,
        "after": after,
        "updated": none if updated is None else updated,
        "mvcc_timestamp": none if mvcc is None else mvcc,
        "commit_time": commit,
        "source": source,
    }
