"""``decode_messages``: Pub/Sub message bodies in, one Arrow record batch of change rows out.

This is the single decoder: the streaming source calls it on executors with the message columns it
shipped there, and users can call it on bodies they fetched themselves.

Two paths, one result:

* a **fast path** for the canonical bytes of CockroachDB's Pub/Sub v2 sink with the wrapped envelope
  (``{"Key":[...],"Value":{"after": {...}, "updated": "..."},"Topic":"t"}``). Each body is decoded
  by msgspec into a Struct whose sub-objects stay ``msgspec.Raw``; the layout is then proven with
  arithmetic on whole columns (body length == sum of the parts + fixed punctuation, which also rules
  out duplicate or unknown keys and any whitespace variation), and the Arrow columns are built in
  bulk from the raw bytes. Anything the fast path cannot prove goes, message by message, to
* fast paths for **bare**, **enriched** (both in the v2 wrapper) and **Debezium** bodies, whose
  objects' keys are learned from the batch itself (see "learned layouts" below), and for **typed
  rows** (``row_schema``), whose struct columns are built column by column
  (:func:`crdb_pubsub.decode.typed.struct_column`). Anything a fast path cannot prove goes, message by
  message, to
* the **general path** (:mod:`crdb_pubsub.decode.envelopes`), which handles every envelope and every
  oddity and produces malformed rows with a reason.
"""

from __future__ import annotations

import dataclasses

import datetime as _dt
import functools
import itertools
import operator
import re
from typing import Any, Iterable, Mapping, Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec import UNSET, Raw, UnsetType

from .envelopes import Bad, Context, Row, decode_body, table_from_topic
from .inference import schema_from_enriched
from .hlc import HLC_QUOTED, HLC_TEXT, MAX_MICROS
from .schema import COLUMN_NAMES, arrow_schema
from .vocabulary import ENVELOPES, MODES

__all__ = ["DecodeStats", "MalformedMessageError", "decode_messages", "schema_from_enriched", "MODES", "ENVELOPES"]



class DecodeStats:
    """Counters that :func:`decode_messages` adds to (pass the same object to many calls).

    ``messages``: bodies seen; ``rows``: rows returned; ``malformed``: messages that could not be
    decoded (in every mode); ``dropped``: malformed messages left out (DROPMALFORMED).
    """

    __slots__ = ("messages", "rows", "malformed", "dropped")

    def __init__(self, messages: int = 0, rows: int = 0, malformed: int = 0, dropped: int = 0) -> None:
        self.messages = messages
        self.rows = rows
        self.malformed = malformed
        self.dropped = dropped

    def __repr__(self) -> str:
        return (
            f"DecodeStats(messages={self.messages}, rows={self.rows}, "
            f"malformed={self.malformed}, dropped={self.dropped})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DecodeStats):
            return NotImplemented
        return (self.messages, self.rows, self.malformed, self.dropped) == (
            other.messages, other.rows, other.malformed, other.dropped,
        )  # fmt: skip


class MalformedMessageError(ValueError):
    """Raised in FAILFAST mode for the first message that cannot be decoded.

    ``message_id`` (None when no ids were given), ``index`` (position in ``bodies``) and ``reason``.
    """

    def __init__(self, message_id: str | None, index: int, reason: str) -> None:
        self.message_id = message_id
        self.index = index
        self.reason = reason
        where = f"message {message_id!r} (index {index})" if message_id is not None else f"message at index {index}"
        super().__init__(f"malformed {where}: {reason}")


# -- argument handling -----------------------------------------------------------------------------


def _choice(name: str, value: Any, accepted: Sequence[str], upper: bool) -> str:
    if isinstance(value, str):
        norm = value.upper() if upper else value.lower()
        if norm in accepted:
            return norm
    raise ValueError(f"{name}={value!r} is not valid; accepted values: {', '.join(accepted)}")


@functools.lru_cache(maxsize=64)
def _schema_bundle(key: str | None, row_schema_json: str | None) -> tuple[Any, pa.Schema]:
    """(StructType or None, Arrow schema) for a row schema, cached because pyspark's conversion is slow."""
    if key is None:
        return None, arrow_schema(None)
    from pyspark.sql.types import StructType

    from .ddl import parse_ddl

    struct = StructType.fromJson(msgspec.json.decode(row_schema_json)) if row_schema_json else parse_ddl(key)
    return struct, arrow_schema(struct)


def _resolve_schema(row_schema: Any) -> tuple[Any, pa.Schema]:
    if row_schema is None:
        return _schema_bundle(None, None)
    if isinstance(row_schema, str):
        return _schema_bundle(row_schema, None)
    from pyspark.sql.types import StructType

    if isinstance(row_schema, StructType):
        text = row_schema.json()
        return _schema_bundle("json:" + text, text)
    raise TypeError(f"row_schema must be a DDL string or a pyspark StructType, got {type(row_schema).__name__}")


@functools.lru_cache(maxsize=64)
def _converters(struct_json: str) -> tuple[Any, Any]:
    from pyspark.sql.types import StructType

    from .typed import csv_row_converter, json_row_converter

    struct = StructType.fromJson(msgspec.json.decode(struct_json))
    try:
        csv_conv = csv_row_converter(struct)
    except TypeError:
        csv_conv = None
    return json_row_converter(struct), csv_conv


def _as_list(name: str, values: Any, n: int) -> list | None:
    if values is None:
        return None
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_pylist()
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries but bodies has {n}; they must align")
    return values


def _bodies_list(bodies: Any) -> list[bytes]:
    if isinstance(bodies, (pa.Array, pa.ChunkedArray)):
        bodies = bodies.to_pylist()
    out = bodies if isinstance(bodies, list) else list(bodies)
    if set(map(type, out)) <= {bytes}:
        return out
    fixed = []
    for i, b in enumerate(out):
        if type(b) is bytes:
            fixed.append(b)
        elif b is None:
            fixed.append(b"")
        elif isinstance(b, (bytearray, memoryview)):
            fixed.append(bytes(b))
        else:
            raise TypeError(f"bodies[{i}] must be bytes, got {type(b).__name__}")
    return fixed


# -- bulk Arrow helpers ----------------------------------------------------------------------------

_OFFSET_LIMIT = 2**31 - 1


class _TooLarge(ValueError):
    pass


def _raw_column(
    raws: list, valid: np.ndarray | None = None, lengths: np.ndarray | None = None
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """A string array whose values are the given byte strings, built without per-item Python work.

    Returns the array, the offsets and the data bytes as a uint8 view (for first-byte checks).
    Null slots (``valid`` False) keep their bytes in the data buffer, which Arrow allows.
    """
    n = len(raws)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if lengths is None:
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _OFFSET_LIMIT:
        raise _TooLarge("a string column of this batch exceeds 2 GiB; decode fewer messages per call")
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


def _const(value: str, n: int) -> pa.Array:
    width = len(value.encode())
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(value.encode() * n))


def _first_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    starts = offsets[:-1]
    out = np.zeros(len(starts), dtype=np.uint8)
    nonempty = offsets[1:] > starts
    out[nonempty] = data[starts[nonempty]]
    return out


def _utf8_bad(arr: pa.Array, raws: list) -> np.ndarray | None:
    """Mask of values that are not valid UTF-8 (None when all are): one bulk check, details on failure."""
    try:
        arr.validate(full=True)
        return None
    except pa.ArrowInvalid:
        bad = np.zeros(len(raws), dtype=bool)
        for i, raw in enumerate(raws):
            try:
                bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                bad[i] = True
        return bad




def _hlc_micros(arr: pa.Array) -> pa.Array:
    """commit time (timestamp[us, UTC]) from an array of validated HLC strings, vectorised."""
    wall = pc.cast(pc.utf8_slice_codeunits(arr, 0, -11), pa.int64())
    return pc.cast(pc.divide(wall, 1000), pa.timestamp("us", tz="UTC"))


# -- the fast path ---------------------------------------------------------------------------------


# gc=False: these hold no containers, and 200k GC-tracked objects per call cost more than the parse.
class _FValue(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    after: Raw
    before: Raw | UnsetType = UNSET
    mvcc_timestamp: str | UnsetType = UNSET
    updated: str | UnsetType = UNSET


class _FWrap(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    Key: Raw
    Value: _FValue
    Topic: str


_FAST_DECODE = msgspec.json.Decoder(_FWrap).decode
_GET_KEY, _GET_VALUE, _GET_TOPIC = (operator.attrgetter(a) for a in ("Key", "Value", "Topic"))
_GET_AFTER, _GET_BEFORE, _GET_MVCC, _GET_UPDATED = (
    operator.attrgetter(a) for a in ("after", "before", "mvcc_timestamp", "updated")
)
# Punctuation of the canonical layout: the sink's compact wrapper around the encoder's ", "/": ".
_WRAP_FIXED = len(b'{"Key":') + len(b',"Value":') + len(b',"Topic":"') + len(b'"}')
_VALUE_FIXED = len(b'{"after": ') + len(b"}")
_OPTIONAL_FIXED = {
    "before": len(b', "before": '),
    "mvcc_timestamp": len(b', "mvcc_timestamp": "') + 1,
    "updated": len(b', "updated": "') + 1,
}
_OBJ_START, _ARR_START, _NULL_START = ord("{"), ord("["), ord("n")


def _try_fast(body: bytes) -> _FWrap | None:
    try:
        return _FAST_DECODE(body)
    except Exception:  # anything unusual is the general path's business
        return None


def _optional_lengths(values: list, fixed: int) -> tuple[np.ndarray | int, np.ndarray | None]:
    """(length contribution, presence mask or None when all present/all absent) of an optional field."""
    n = len(values)
    absent = values.count(UNSET)
    if absent == n:
        return 0, np.zeros(n, dtype=bool)
    if absent == 0:
        return np.fromiter(map(len, values), dtype=np.int64, count=n) + fixed, None
    present = np.fromiter((v is not UNSET for v in values), dtype=bool, count=n)
    lengths = np.fromiter((len(v) + fixed if v is not UNSET else 0 for v in values), dtype=np.int64, count=n)
    return lengths, present


def _before_column(raws: list, m: int) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """The ``before`` images of canonical wrapped bodies: (column, null mask, which bodies had
    the field at all, which are not canonical)."""
    bad = np.zeros(m, dtype=bool)
    _, before_present = _optional_lengths(raws, 0)
    before_all = before_present is None
    if not (before_all or before_present.any()):
        return pa.nulls(m, pa.string()), np.ones(m, dtype=bool), np.zeros(m, dtype=bool), bad
    if not before_all:
        raws = [b if b is not UNSET else b"null" for b in raws]
    before_arr, before_off, before_data = _raw_column(raws)
    before_first = _first_bytes(before_off, before_data)
    before_null = before_first == _NULL_START
    bad |= ~((before_first == _OBJ_START) | before_null)
    utf8 = _utf8_bad(before_arr, raws)
    if utf8 is not None:
        bad |= utf8
    if not before_all:
        before_null |= ~before_present
    before_arr = pa.StringArray.from_buffers(
        m, before_arr.buffers()[1], before_arr.buffers()[2],
        pa.py_buffer(np.packbits(~before_null, bitorder="little")),
    )  # fmt: skip
    had_before = np.ones(m, dtype=bool) if before_all else before_present
    return before_arr, before_null, had_before, bad


def _wrapped_columns(m: int, topics: list, key_arr: pa.Array, after_arr: pa.Array, after_null: np.ndarray,
                     before_arr: pa.Array, before_null: np.ndarray, had_before: np.ndarray,
                     hlc: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """The output columns of ``m`` canonical wrapped bodies, from their proven raw columns."""
    # op: after null -> d; with before: before null -> c else u; an upsert without before -> u.
    op_code = np.where(after_null, 2, np.where(had_before & before_null, 0, 1)).astype(np.int8)
    op = pa.array(["c", "u", "d"], pa.string()).take(pa.array(op_code))
    after_arr = pa.StringArray.from_buffers(
        m, after_arr.buffers()[1], after_arr.buffers()[2], pa.py_buffer(np.packbits(~after_null, bitorder="little"))
    )
    topic = pa.array(topics, pa.string())
    encoded = pc.dictionary_encode(topic)
    tables = pa.array([table_from_topic(t) for t in encoded.dictionary.to_pylist()], pa.string())
    table_name = tables.take(encoded.indices)
    commit = _hlc_micros(pc.fill_null(hlc["updated"], "0.0000000000"))
    commit = pc.if_else(pc.is_null(hlc["updated"]), pa.scalar(None, commit.type), commit)
    if hlc["mvcc_timestamp"].null_count < m:
        mvcc_commit = _hlc_micros(pc.fill_null(hlc["mvcc_timestamp"], "0.0000000000"))
        mvcc_commit = pc.if_else(pc.is_null(hlc["mvcc_timestamp"]), pa.scalar(None, commit.type), mvcc_commit)
        commit = pc.coalesce(commit, mvcc_commit)
    return {
        "kind": _const("row", m),
        "envelope": _const("wrapped", m),
        "topic": topic,
        "table_name": table_name,
        "key": key_arr,
        "op": op,
        "before": before_arr,
        "after": after_arr,
        "updated": hlc["updated"],
        "mvcc_timestamp": hlc["mvcc_timestamp"],
        "commit_time": commit,
    }


def _fast_path(bodies: list[bytes]) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """Decode what can be proven canonical. Returns (message indices handled, columns for them)."""
    n = len(bodies)
    try:
        parsed = [_FAST_DECODE(b) for b in bodies]
        idx = np.arange(n)
    except Exception:
        parsed = [_try_fast(b) for b in bodies]
        keep = [p is not None for p in parsed]
        idx = np.flatnonzero(np.array(keep, dtype=bool))
        parsed = list(itertools.compress(parsed, keep))
        bodies = list(itertools.compress(bodies, keep))
    if not parsed:
        return idx, {}

    values = list(map(_GET_VALUE, parsed))
    cols: dict[str, list] = {
        "key": list(map(_GET_KEY, parsed)),
        "topic": list(map(_GET_TOPIC, parsed)),
        "after": list(map(_GET_AFTER, values)),
        "before": list(map(_GET_BEFORE, values)),
        "mvcc_timestamp": list(map(_GET_MVCC, values)),
        "updated": list(map(_GET_UPDATED, values)),
    }
    del values, parsed
    m = len(idx)
    lengths = {name: np.fromiter(map(len, cols[name]), dtype=np.int64, count=m) for name in ("key", "topic", "after")}
    expected = lengths["key"] + lengths["topic"] + lengths["after"] + (_WRAP_FIXED + _VALUE_FIXED)
    for name, fixed in _OPTIONAL_FIXED.items():
        expected += _optional_lengths(cols[name], fixed)[0]
    good = np.fromiter(map(len, bodies), dtype=np.int64, count=m) == expected

    while True:
        if not good.all():
            keep_list = good.tolist()
            idx = idx[good]
            cols = {k: list(itertools.compress(v, keep_list)) for k, v in cols.items()}
            lengths = {k: v[good] for k, v in lengths.items()}
            m = len(idx)
        if m == 0:
            return idx, {}
        bad = np.zeros(m, dtype=bool)
        key_arr, key_off, key_data = _raw_column(cols["key"], lengths=lengths["key"])
        bad |= _first_bytes(key_off, key_data) != _ARR_START
        after_arr, after_off, after_data = _raw_column(cols["after"], lengths=lengths["after"])
        after_first = _first_bytes(after_off, after_data)
        after_null = after_first == _NULL_START
        bad |= ~((after_first == _OBJ_START) | after_null)
        for raws, arr in ((cols["key"], key_arr), (cols["after"], after_arr)):
            utf8 = _utf8_bad(arr, raws)
            if utf8 is not None:
                bad |= utf8
        before_arr, before_null, had_before, before_bad = _before_column(cols["before"], m)
        bad |= before_bad
        hlc: dict[str, pa.Array] = {}
        for name in ("updated", "mvcc_timestamp"):
            vals = cols[name]
            absent = vals.count(UNSET)
            if absent == m:
                hlc[name] = pa.nulls(m, pa.string())
                continue
            arr = pa.array(vals if absent == 0 else [None if v is UNSET else v for v in vals], pa.string())
            ok = pc.fill_null(pc.match_substring_regex(arr, HLC_TEXT), True)
            bad |= ~ok.to_numpy(zero_copy_only=False)
            hlc[name] = arr
        if not bad.any():
            break
        good = ~bad

    return idx, _wrapped_columns(m, cols["topic"], key_arr, after_arr, after_null, before_arr, before_null,
                                 had_before, hlc)


# -- learned layouts: bare, enriched and Debezium bodies -----------------------------------------
#
# These bodies carry objects whose keys the decoder cannot know in advance (the row's columns, the
# ``source`` block of each connector). A *layout* is learned from one body (its keys, in order) and
# becomes a msgspec Struct of ``Raw`` fields (all required, unknown keys refused). Every body that
# decodes into it is then checked byte for byte against the layout rebuilt from its own values in
# the producer's canonical form (CockroachDB's ``{"a": 1, "b": 2}`` or the compact ``{"a":1,"b":2}``
# of Debezium's JSON converter), with one ``join`` and one comparison for the whole batch. A body
# that equals its rebuild has exactly those keys, once each, in that order, with nothing between
# them: no duplicate (which the general path rejects), no whitespace or escape variant, so the
# fields the general path would read are these values. Anything else goes to the general path.
# Cheaper proofs stand in for the rebuild where they are airtight: the canonical length (few keys,
# _Layout.by_length), the spaceless length against msgspec's compact re-encoding where values are
# only read by key (_spaceless_equal), and for bare rows, which are cut from the body, the
# ``msgspec.json.format`` fixed point of the whole ``Value`` (_bare_quick).

_CRDB_STYLE = (b", ", b": ")
_COMPACT_STYLE = (b",", b":")
_MAX_LAYOUTS = 4
_LENGTH_KEYS = 4


class _Layout:
    """One learned object layout (optionally inside the v2 ``{"Key","Value","Topic"}`` wrapper)."""

    __slots__ = ("keys", "wrapper", "decode", "getters", "inner_getters", "prefixes", "end", "by_length")

    def __init__(self, keys: tuple[str, ...], style: tuple[bytes, bytes], wrapper: bool) -> None:
        sep, colon = style
        # When may the byte-for-byte rebuild be skipped for a length check? A body that decodes
        # into this Struct holds only these keys, each at least once (values: the last occurrence).
        # Its length is the canonical length, plus what each repeated member adds (at least its
        # key, colon, comma and a one-byte value), plus escape and whitespace variants (never
        # shorter), minus the canonical spaces it leaves out. If every possible repeated member is
        # longer than all the canonical spaces together, "same length" means no key repeats (the
        # general path's duplicate check) and the values read are the only ones. The compact
        # layout has no spaces, so it always qualifies; CockroachDB's ", "/": " layout qualifies
        # for few keys. Bare rows never skip: the general path rebuilds them in body key order.
        spaces = (len(sep) - 1) * max(len(keys) - 1, 0) + (len(colon) - 1) * len(keys)
        smallest = min((len(msgspec.json.encode(k)) + 3 for k in keys), default=0)
        if wrapper:
            smallest = min(smallest, len(b'"Key":1,'))
        self.by_length = smallest > spaces and "__crdb__" not in keys
        # Otherwise, when the values are only read by key (not bare), _spaceless_equal proves that
        # no key repeats; bare rows get the byte-for-byte rebuild (or _bare_quick's proof).
        names = [f"f{i}" for i in range(len(keys))]
        inner = msgspec.defstruct(
            "_Learned", [(n, Raw) for n in names], rename=dict(zip(names, keys)), forbid_unknown_fields=True, gc=False
        )
        encoded = [msgspec.json.encode(k) for k in keys]
        prefixes = [(b"{" if i == 0 else sep) + e + colon for i, e in enumerate(encoded)]
        self.keys = keys
        self.wrapper = wrapper
        self.inner_getters = [operator.attrgetter(n) for n in names]
        if wrapper:
            outer = msgspec.defstruct(
                "_LearnedWrap", [("Key", Raw), ("Value", inner), ("Topic", str)], forbid_unknown_fields=True, gc=False
            )
            self.decode = msgspec.json.Decoder(outer).decode
            self.getters = (
                [operator.attrgetter("Key")] + [operator.attrgetter("Value." + n) for n in names]
                + [operator.attrgetter("Topic")]
            )  # fmt: skip
            self.prefixes = [b'{"Key":', b',"Value":' + prefixes[0]] + prefixes[1:] + [b'},"Topic":']
        else:
            self.decode = msgspec.json.Decoder(inner).decode
            self.getters = [operator.attrgetter(n) for n in names]
            self.prefixes = prefixes
        self.end = b"}"


@functools.lru_cache(maxsize=256)
def _layout(keys: tuple[str, ...], style: tuple[bytes, bytes], wrapper: bool) -> _Layout:
    return _Layout(keys, style, wrapper)


def _decode_or_none(decode: Any, body: Any) -> Any:
    try:
        return decode(body)
    except Exception:  # not this layout: the next one, or the general path
        return None


def _interleave(prefixes: list[bytes], columns: list[list], end: bytes, m: int) -> bytes:
    """``prefixes[0] col0[i] prefixes[1] col1[i] ... end`` for every i, as one byte string."""
    stride = 2 * len(columns)
    pieces: list = [b""] * (stride * m)
    for j, (prefix, column) in enumerate(zip(prefixes, columns)):
        pieces[2 * j :: stride] = [prefix] * m if j else [end + prefix] * m
        pieces[2 * j + 1 :: stride] = column
    if m:
        pieces[0] = prefixes[0]
    return b"".join(pieces) + (end if m else b"")


def _same_length(raws: list, prefixes: list[bytes], columns: list[list], end: bytes) -> np.ndarray:
    """Mask of the ``raws`` as long as their canonical rebuild (see _Layout.by_length)."""
    m = len(raws)
    want = np.full(m, sum(map(len, prefixes)) + len(end), dtype=np.int64)
    for column in columns:
        want += np.fromiter(map(len, column), dtype=np.int64, count=m)
    return np.fromiter(map(len, raws), dtype=np.int64, count=m) == want


def _rebuilt_equal(raws: list, prefixes: list[bytes], columns: list[list], end: bytes) -> np.ndarray:
    """Mask of the ``raws`` that equal their rebuild from ``columns`` (byte for byte)."""
    m = len(raws)
    const = sum(map(len, prefixes)) + len(end)
    want = np.full(m, const, dtype=np.int64)
    for column in columns:
        want += np.fromiter(map(len, column), dtype=np.int64, count=m)
    have = np.fromiter(map(len, raws), dtype=np.int64, count=m)
    ok = have == want
    if not ok.all():
        keep = ok.tolist()
        sub = np.flatnonzero(ok)
        if len(sub):
            ok[sub] = _rebuilt_equal(
                list(itertools.compress(raws, keep)), prefixes, [list(itertools.compress(c, keep)) for c in columns], end
            )
        return ok
    rebuilt = _interleave(prefixes, columns, end, m)
    actual = b"".join(raws)
    if rebuilt == actual:
        return ok
    diff = np.frombuffer(rebuilt, dtype=np.uint8) != np.frombuffer(actual, dtype=np.uint8)
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(have[:-1], out=starts[1:])
    return np.add.reduceat(diff, starts) == 0


_OBJ_DECODE = msgspec.json.Decoder(dict[str, Raw]).decode


def _learn_keys(raw: Any, wrapper: bool) -> tuple[str, ...] | None:
    try:
        obj = _OBJ_DECODE(raw)
        if wrapper:
            if list(obj) != ["Key", "Value", "Topic"]:
                return None
            obj = _OBJ_DECODE(obj["Value"])
    except Exception:
        return None
    return tuple(obj)


@dataclasses.dataclass(slots=True)
class _Matched:
    """Bodies that matched one learned layout: their positions, values by key, wrapper Key/Topic,
    and the raw-text columns already built while proving them (by key; "" is the wrapper Key)."""

    idx: np.ndarray
    keys: tuple[str, ...]
    values: dict[str, list]
    key: list | None
    topic: list | None
    arrays: dict[str, pa.Array]
    after: pa.Array | None = None  # bare rows already cut (see _bare_quick)

    def col(self, name: str, m: int) -> "_Col":
        """The raw-text column of key ``name`` ("" for the wrapper Key), absent ones null."""
        arr = self.arrays.get(name)
        if arr is not None:
            return _Col.of(arr)
        return _Col(self.key if name == "" else self.values.get(name), m)


_SIMPLE_KEY = re.compile(r'[^\x00-\x20"\\\x7f]+\Z')


_SPACE = ord(" ")
_COUNT_SPACES = operator.methodcaller("count", b" ")
_ENCODE = msgspec.json.Encoder().encode


def _spaces(texts: list) -> int:
    """Spaces in all the ``texts`` (bytes are counted in place; Raw ones, without a count, joined)."""
    if texts and isinstance(texts[0], bytes):
        try:
            return sum(map(_COUNT_SPACES, texts))
        except TypeError:
            pass
    return int(np.count_nonzero(np.frombuffer(b"".join(texts), dtype=np.uint8) == _SPACE))


def _spaceless_len(texts: list) -> np.ndarray:
    m = len(texts)
    texts = [t if isinstance(t, bytes) else bytes(t) for t in texts]
    return np.fromiter(map(len, texts), dtype=np.int64, count=m) - np.fromiter(
        map(_COUNT_SPACES, texts), dtype=np.int64, count=m
    )


def _spaceless_equal(raws: list, parsed: list, stats: tuple[int, int] | None = None) -> np.ndarray:
    """Mask of the ``raws`` holding no repeated key, at any level the Structs ``parsed`` from them have.

    ``msgspec.json.encode`` of a Struct writes each of its keys once (shortest JSON: the keys are
    plain), no whitespace, and the raw values verbatim. Without spaces, a raw is never shorter than
    that: its values are the same bytes, its keys (and a wrapper's Topic) at least as long, and any
    other whitespace or repeated member only adds. So the two are equal exactly when no key repeats,
    no key is escaped and only spaces separate the tokens; as each raw is never shorter, equal totals
    over the batch prove every one (the common case: four bulk counts, no per-message comparison).
    """
    encoded = list(map(_ENCODE, parsed))
    total, spaces = stats if stats is not None else (sum(map(len, raws)), _spaces(raws))
    have = total - spaces
    want = sum(map(len, encoded)) - _spaces(encoded)
    if have == want:
        return np.ones(len(raws), dtype=bool)
    return _spaceless_len(raws) == _spaceless_len(encoded)


def _match_layouts(raws: list, style: tuple[bytes, bytes], wrapper: bool, accept: Any,
                   wanted: tuple[str, ...] | None = None,
                   stats: tuple[int, int] | None = None) -> list[_Matched]:  # fmt: skip
    """Learn up to _MAX_LAYOUTS layouts from ``raws`` (whose keys ``accept`` likes) and match them.

    ``wanted``: the only keys whose values the caller reads (objects inside a value); the others'
    values are then not even taken out of the Structs, when no rebuild needs them. ``stats``: the
    total length and spaces of all ``raws``, when the caller has them."""
    out: list[_Matched] = []
    pending = np.arange(len(raws))
    tried: set[tuple[str, ...]] = set()
    attempts = 0
    while len(pending) and attempts < _MAX_LAYOUTS:
        attempts += 1
        keys = _learn_keys(raws[pending[0]], wrapper)
        if keys is None or keys in tried or not keys or not accept(keys):
            pending = pending[1:]
            continue
        tried.add(keys)
        layout = _layout(keys, style, wrapper)
        subset = raws if len(pending) == len(raws) else [raws[i] for i in pending.tolist()]
        try:
            parsed = list(map(layout.decode, subset))
            got = pending
        except Exception:
            parsed = [_decode_or_none(layout.decode, b) for b in subset]
            keep = [p is not None for p in parsed]
            got = pending[np.array(keep, dtype=bool)]
            parsed = list(itertools.compress(parsed, keep))
            subset = list(itertools.compress(subset, keep))
        if not parsed:
            pending = pending[1:]
            continue
        # Values read by key, output as their raw text: only a repeated key (malformed for the general
        # path) would make a difference, and _spaceless_equal rules it out without a rebuild.
        # (the length check needs every value's length: cheaper for few keys, not for big objects)
        spaceless = (
            (not layout.by_length or (wanted is not None and len(keys) > _LENGTH_KEYS)) and "__crdb__" not in keys
            and all(map(_SIMPLE_KEY.match, keys))
        )  # fmt: skip
        col_keys = keys
        if spaceless:
            ok = _spaceless_equal(subset, parsed, stats if subset is raws else None)
        if wrapper:  # a dotted attrgetter per column costs 4x one getter for Value, then plain ones
            inner = list(map(_GET_VALUE, parsed))
            columns = (
                [list(map(_GET_KEY, parsed))] + [list(map(g, inner)) for g in layout.inner_getters]
                + [list(map(_GET_TOPIC, parsed))]
            )  # fmt: skip
            del inner
        elif spaceless and wanted is not None:
            col_keys = tuple(k for k in keys if k in wanted)
            columns = [list(map(layout.getters[keys.index(k)], parsed)) for k in col_keys]
        else:
            columns = [list(map(g, parsed)) for g in layout.getters]
        del parsed
        arrays: dict[str, pa.Array] = {}
        if spaceless:
            pass
        else:
            rebuild = columns
            if wrapper:  # Topic decodes to str; the layout holds its JSON text
                topics = columns[-1]
                encoded = {t: msgspec.json.encode(t) for t in set(topics)}
                rebuild = columns[:-1] + [list(map(encoded.__getitem__, topics))]
            if layout.by_length:
                ok = _same_length(subset, layout.prefixes, rebuild, layout.end)
            else:  # bare rows are rebuilt by the general path: prove them byte for byte
                ok = _rebuilt_equal(subset, layout.prefixes, rebuild, layout.end)
        if ok.any():
            if not ok.all():
                keep = ok.tolist()
                columns = [list(itertools.compress(col, keep)) for col in columns]
                arrays = {k: v.filter(pa.array(ok)) for k, v in arrays.items()}
            if wrapper:
                key, columns, topic = columns[0], columns[1:-1], columns[-1]
            else:
                key = topic = None
            out.append(_Matched(got[ok], keys, dict(zip(col_keys, columns)), key, topic, arrays))
        done = np.zeros(len(raws), dtype=bool)
        done[got[ok]] = True
        done[pending[0]] = True
        pending = pending[~done[pending]]
    return out


class _BareWrap(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    Key: Raw
    Value: Raw
    Topic: str


_BARE_WRAP_DECODE = msgspec.json.Decoder(_BareWrap).decode
_BARE_WRAP_FIXED = len(b'{"Key":') + len(b',"Value":') + len(b',"Topic":') + len(b"}")
_BARE_HEAD = b'{"__crdb__": '


def _format_spaced(raw: Any) -> bytes:
    return msgspec.json.format(raw, indent=0)


def _same_text(raw: Any, text: bytes) -> bool:
    return bytes(raw) == text


def _bare_quick(raws: list, accept: Any) -> _Matched | None:
    """Bare bodies in CockroachDB's layout, proven without touching the row's values one by one.

    ``{"Key":K,"Value":V,"Topic":T}`` is decoded with ``V`` kept raw, then ``V`` into the learned
    Struct of its keys (exactly these keys, each at least once). A body is taken when:

    * its length is the wrapper's punctuation plus ``K``, ``V`` and ``T``'s JSON: no whitespace, no
      repeated member (one costs at least ``"Key":1,``) and no escaped wrapper key;
    * ``V`` is a fixed point of ``msgspec.json.format(indent=0)``, whose output has exactly one space
      after each ``,`` and ``:`` outside strings and no other whitespace, at every depth;
    * ``len(V)`` is its compact re-encoding (the Struct: canonical keys, the last value of each) plus
      those spaces at the top level: a repeated member or an escaped key would make ``V`` longer
      (keys are plain: no quote, backslash, space or control character, so their JSON is shortest);
    * ``V`` starts with ``{"__crdb__": ``.

    ``V`` is then byte for byte what the general path rebuilds around ``__crdb__``'s value ``M``,
    and the row is ``V`` from the ``, `` after ``M`` on, that space becoming ``{``.
    Returns None when the batch is not of one such layout (the learned layouts take it then).
    """
    first = _decode_or_none(_BARE_WRAP_DECODE, raws[0]) if raws else None
    keys = _learn_keys(first.Value, False) if first is not None else None
    if not keys or keys[0] != "__crdb__" or not _accept_bare(keys) or not accept(keys):
        return None  # (the layout is learned from the first body: not bare, not this path)
    idx = np.arange(len(raws))
    try:
        parsed = list(map(_BARE_WRAP_DECODE, raws))
    except Exception:  # some are not {Key, Value, Topic}: the others still may be
        parsed = [_decode_or_none(_BARE_WRAP_DECODE, b) for b in raws]
        keep = [p is not None for p in parsed]
        idx, parsed, raws = idx[np.array(keep, dtype=bool)], list(itertools.compress(parsed, keep)), list(
            itertools.compress(raws, keep)
        )
        if not parsed:
            return None
    values = list(map(_GET_VALUE, parsed))
    if not all(map(_SIMPLE_KEY.match, keys)):
        return None
    layout = _layout(keys, _CRDB_STYLE, False)
    try:
        inner = list(map(layout.decode, values))
    except Exception:  # other keys in some: keep the ones of this layout
        inner = [_decode_or_none(layout.decode, v) for v in values]
        keep = [p is not None for p in inner]
        idx = idx[np.array(keep, dtype=bool)]
        inner, parsed, values, raws = (list(itertools.compress(c, keep)) for c in (inner, parsed, values, raws))
    m = len(raws)
    key = list(map(_GET_KEY, parsed))
    topic = list(map(_GET_TOPIC, parsed))
    del parsed
    meta = list(map(layout.getters[0], inner))
    n_keys = len(keys)
    v_len = np.fromiter(map(len, values), dtype=np.int64, count=m)
    k_len = np.fromiter(map(len, key), dtype=np.int64, count=m)
    t_json = {t: len(msgspec.json.encode(t)) for t in set(topic)}
    t_len = np.fromiter(map(t_json.__getitem__, topic), dtype=np.int64, count=m)
    b_len = np.fromiter(map(len, raws), dtype=np.int64, count=m)
    ok = b_len == _BARE_WRAP_FIXED + k_len + v_len + t_len
    compact = np.fromiter(map(len, map(_ENCODE, inner)), dtype=np.int64, count=m)
    del inner
    ok &= v_len == compact + 2 * n_keys - 1
    formatted = list(map(_format_spaced, values))
    v_data = b"".join(values)
    if b"".join(formatted) != v_data:  # (one comparison when all are; message by message otherwise)
        ok &= np.fromiter(map(_same_text, values, formatted), dtype=bool, count=m)
    del formatted
    if len(v_data) > _OFFSET_LIMIT:
        return None
    v_start = np.zeros(m, dtype=np.int64)
    np.cumsum(v_len[:-1], out=v_start[1:])
    v_bytes = np.frombuffer(v_data, dtype=np.uint8)
    head = np.frombuffer(_BARE_HEAD, dtype=np.uint8)
    big = v_len >= len(_BARE_HEAD) + 3
    ok &= big
    if big.any():
        at = v_start[big][:, None] + np.arange(len(_BARE_HEAD))
        ok[big] &= (v_bytes[at] == head).all(axis=1)
    if not ok.any():
        return None
    m_len = np.fromiter(map(len, meta), dtype=np.int64, count=m)
    cut = v_start + len(_BARE_HEAD) + m_len + 1  # the space after ``M,``
    end = v_start + v_len
    ok &= cut < end - 1
    if not ok.all():
        keep = ok.tolist()
        key, topic, meta = (list(itertools.compress(c, keep)) for c in (key, topic, meta))
        cut, end = cut[ok], end[ok]
    k = len(cut)
    data = v_bytes.copy()
    data[cut] = _OBJ_START
    offsets = np.empty(2 * k, dtype=np.int32)
    offsets[0::2] = cut
    offsets[1::2] = end
    pieces = pa.BinaryArray.from_buffers(pa.binary(), 2 * k - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    after = pieces.take(pa.array(np.arange(0, 2 * k, 2))).view(pa.string())
    return _Matched(idx[ok], keys, {"__crdb__": meta}, key, topic, {}, after)


# Raw-JSON-text columns: validated and converted with Arrow kernels, never value by value.
_PLAIN_STRING = r'^"[^"\\]*"$'
_INT_ANY = r"^-?[0-9]+$"  # what the general path's _int_field reads as an integer
_INT_SAFE = r"^(?:-?[0-9]{1,18}|[1-8][0-9]{18})$"  # ... and what surely fits an int64
_NULL_STR = pa.scalar(None, pa.string())


class _Col:
    """A column of raw JSON texts (null where the key is absent) with its first bytes."""

    __slots__ = ("arr", "first", "present")

    def __init__(self, raws: list | None, m: int) -> None:
        if raws is None:
            self.arr = pa.nulls(m, pa.string())
            self.first = np.zeros(m, dtype=np.uint8)
            self.present = np.zeros(m, dtype=bool)
        else:
            self.arr, offsets, data = _raw_column(raws)
            self.first = _first_bytes(offsets, data)
            self.present = np.ones(m, dtype=bool)

    @classmethod
    def of(cls, arr: pa.Array) -> "_Col":
        col = cls.__new__(cls)
        col.arr = arr
        m = len(arr)
        col.present = arr.is_valid().to_numpy(zero_copy_only=False)
        col.first = np.zeros(m, dtype=np.uint8)
        data_buf = arr.buffers()[2]
        if m and col.present.any() and data_buf is not None and data_buf.size:
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + m + 1]
            col.first = _first_bytes(offsets, np.frombuffer(data_buf, dtype=np.uint8))
            col.first[~col.present] = 0
        return col

    def stats(self) -> tuple[int, int] | None:
        """(total length, spaces) of the present values' text, when all are present."""
        if not self.present.all() or not len(self.arr):
            return None
        arr = self.arr
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        return len(data), int(np.count_nonzero(data == _SPACE))

    def matches(self, pattern: str) -> np.ndarray:
        """Present and matching ``pattern`` (absent values count as matching)."""
        if not self.present.any():
            return np.ones(len(self.present), dtype=bool)
        return pc.fill_null(pc.match_substring_regex(self.arr, pattern), True).to_numpy(zero_copy_only=False)

    def starts(self, chars: bytes) -> np.ndarray:
        """Absent, or the first byte is one of ``chars``."""
        ok = ~self.present
        for c in chars:
            ok |= self.first == c
        return ok

    def is_null(self) -> np.ndarray:
        """Absent or JSON null (valid JSON starting with ``n``)."""
        return ~self.present | (self.first == _NULL_START)

    def unquoted(self) -> pa.Array:
        """The text inside the quotes (for values already proven to be plain JSON strings)."""
        return pc.utf8_slice_codeunits(self.arr, 1, -1)

    def ints(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(int64 values, has-an-int mask, not-sure mask) as the general path's _int_field reads them."""
        m = len(self.present)
        if not self.present.any():
            return np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool), np.zeros(m, dtype=bool)
        is_int = self.matches(_INT_ANY) & self.present
        safe = self.matches(_INT_SAFE) & self.present
        unsure = is_int & ~safe
        src = pc.if_else(pa.array(safe), self.arr, _NULL_STR) if not safe.all() else self.arr
        values = pc.fill_null(pc.cast(src, pa.int64()), 0).to_numpy(zero_copy_only=False)
        return values, safe, unsure


def _nested(raws: list, present: np.ndarray, style: tuple[bytes, bytes], accept: Any,
            names: tuple[str, ...], col: "_Col | None" = None) -> tuple[np.ndarray, dict[str, _Col]]:  # fmt: skip
    """Learned-layout match of the objects ``raws[i]`` (where ``present``): (matched mask, fields).

    ``col``: the same texts as a column already built (its bytes are then counted, not joined again)."""
    m = len(raws)
    idx = np.flatnonzero(present)
    sub = raws if len(idx) == m else [raws[i] for i in idx.tolist()]
    stats = col.stats() if col is not None and len(idx) == m else None
    groups = _match_layouts(sub, style, False, accept, names, stats)
    ok = np.zeros(m, dtype=bool)
    pieces: dict[str, list[pa.Array]] = {name: [] for name in names}
    order = []
    for g in groups:
        order.append(idx[g.idx])
        for name in names:
            vals = g.values.get(name)
            if vals is None:
                pieces[name].append(pa.nulls(len(g.idx), pa.string()))
            else:
                pieces[name].append(g.arrays[name] if name in g.arrays else _raw_column(vals)[0])
    fields: dict[str, _Col] = {}
    if order:
        rows = np.concatenate(order)
        ok[rows] = True
        pos = np.full(m, -1, dtype=np.int64)
        pos[rows] = np.arange(len(rows))
        taker = None if len(rows) == m and (pos == np.arange(m)).all() else pa.array(pos, mask=pos < 0)
        for name in names:
            arr = pa.concat_arrays(pieces[name]) if len(pieces[name]) > 1 else pieces[name][0]
            fields[name] = _Col.of(arr if taker is None else arr.take(taker))
    else:
        for name in names:
            fields[name] = _Col(None, m)
    return ok, fields


def _commit_from_hlc(updated: pa.Array, mvcc: pa.Array) -> pa.Array:
    """commit_time from HLC strings: ``updated`` when present, else ``mvcc_timestamp``.

    The callers reject the messages whose HLCs are not valid, after this: such a value (``" 1.0"``)
    gets a placeholder here, so that the bulk cast cannot fail on it."""
    m = len(updated)
    commit = pa.nulls(m, pa.timestamp("us", tz="UTC"))
    for arr in (mvcc, updated):
        if arr.null_count < m:
            valid = pc.fill_null(pc.match_substring_regex(arr, HLC_TEXT), True)
            micros = _hlc_micros(pc.if_else(valid, pc.fill_null(arr, "0.0000000000"), "0.0000000000"))
            commit = pc.if_else(pc.is_null(arr), commit, micros)
    return commit


def _micros_array(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    return pa.array(values, pa.int64(), mask=~valid).cast(pa.timestamp("us", tz="UTC"))


def _table_names(topic: pa.Array) -> pa.Array:
    """table_from_topic over a column, once per distinct topic (as the wrapped fast path does)."""
    encoded = pc.dictionary_encode(topic)
    tables = pa.array([table_from_topic(t) for t in encoded.dictionary.to_pylist()], pa.string())
    return tables.take(encoded.indices)


def _table_name_attribute(table_name: pa.Array, attributes: list | None, msg_taker: pa.Array | None) -> pa.Array:
    """The ``TABLE_NAME`` Pub/Sub attribute, where a message has one, over the body's table name.

    A changefeed created ``WITH topic_name=X, with_table_name_attribute=true`` sends every table to
    topic X, so the topic no longer names the table; the attribute is the only reliable name.
    """
    if not attributes or not any(a and "TABLE_NAME" in a for a in attributes):
        return table_name  # CockroachDB's default: no attributes, nothing to do per row
    named = pa.array([a.get("TABLE_NAME") if a else None for a in attributes], pa.string())
    if msg_taker is not None:
        named = named.take(msg_taker)
    return pc.coalesce(named, table_name)


def _body_utf8_bad(bodies: list) -> np.ndarray:
    arr, _, _ = _raw_column(bodies)
    bad = _utf8_bad(arr, bodies)
    return np.zeros(len(bodies), dtype=bool) if bad is None else bad


def _image(col: _Col) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(ok, null mask, string array) of a row image that must be an object or null."""
    ok = col.starts(b"{n")
    null = col.is_null()
    arr = col.arr
    if null.any():
        arr = pc.if_else(pa.array(null), _NULL_STR, arr) if col.present.any() else arr
    return ok, null, arr


_BARE_META = frozenset(("key", "mvcc_timestamp", "topic", "updated"))
_ENRICHED_FAST = frozenset(("after", "before", "key", "op", "source", "ts_ns"))
_DEBEZIUM_FAST = frozenset(("before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"))
_ENRICHED_OP_TEXT = pa.array(['"c"', '"u"', '"d"', '"r"'])
_DEBEZIUM_OP_TEXT = pa.array(['"c"', '"u"', '"d"', '"r"', '"t"'])


def _accept_bare(keys: tuple[str, ...]) -> bool:
    return "__crdb__" in keys and len(keys) > 1


def _accept_enriched(keys: tuple[str, ...]) -> bool:
    return "op" in keys and _ENRICHED_FAST.issuperset(keys)


def _accept_debezium(keys: tuple[str, ...]) -> bool:
    return "op" in keys and "ts_ms" in keys and _DEBEZIUM_FAST.issuperset(keys)


def _bare_rows(g: _Matched, bodies: list) -> pa.Array:
    """The rows of bare bodies proven canonical: CockroachDB's own layout of the columns, exactly
    what the general path rebuilds. They are in the bodies already: ``{"Key":K,"Value":{"__crdb__":
    M, <row>},"Topic":T}``, so each row is cut from the joined bodies (the space before ``<row>``
    becomes its ``{``), without touching its values."""
    m = len(g.idx)
    if g.keys[0] != "__crdb__":
        columns = [k for k in g.keys if k != "__crdb__"]
        prefixes = [(b"{" if i == 0 else b", ") + msgspec.json.encode(k) + b": " for i, k in enumerate(columns)]
        values = [g.values[k] for k in columns]
        return _raw_column([_interleave(prefixes, [[v] for v in row], b"}", 1) for row in zip(*values)])[0]
    body_len = np.fromiter(map(len, bodies), dtype=np.int64, count=m)
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(body_len[:-1], out=starts[1:])
    key_len = np.fromiter(map(len, g.key), dtype=np.int64, count=m)
    meta_len = np.fromiter(map(len, g.values["__crdb__"]), dtype=np.int64, count=m)
    topic_len = {t: len(msgspec.json.encode(t)) for t in set(g.topic)}
    topic_json = np.fromiter(map(topic_len.__getitem__, g.topic), dtype=np.int64, count=m)
    space = starts + len(b'{"Key":') + key_len + len(b',"Value":{"__crdb__": ') + meta_len + 1
    end = starts + body_len - len(b',"Topic":}') - topic_json
    if int(end[-1]) > _OFFSET_LIMIT:
        raise _TooLarge("a string column of this batch exceeds 2 GiB; decode fewer messages per call")
    data = np.frombuffer(b"".join(bodies), dtype=np.uint8).copy()
    data[space] = _OBJ_START
    offsets = np.empty(2 * m, dtype=np.int32)
    offsets[0::2] = space
    offsets[1::2] = end
    pieces = pa.BinaryArray.from_buffers(pa.binary(), 2 * m - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pieces.take(pa.array(np.arange(0, 2 * m, 2))).view(pa.string())


def _bare_part(g: _Matched, bodies: list) -> tuple[np.ndarray, dict[str, pa.Array]]:
    m = len(g.idx)
    key = g.col("", m)
    bad = key.first != _ARR_START
    after = g.after if g.after is not None else _bare_rows(g, bodies)
    meta_ok, meta = _nested(g.values["__crdb__"], np.ones(m, dtype=bool), _CRDB_STYLE,
                            _BARE_META.issuperset, ("key", "topic", "updated", "mvcc_timestamp"))  # fmt: skip
    bad |= ~meta_ok
    bad |= ~meta["key"].starts(b"[{n") | ~meta["topic"].starts(b'"')
    bad |= ~meta["updated"].matches(HLC_QUOTED) | ~meta["mvcc_timestamp"].matches(HLC_QUOTED)
    bad |= _body_utf8_bad(bodies)
    updated = meta["updated"].unquoted()
    mvcc = meta["mvcc_timestamp"].unquoted()
    topic = pa.array(g.topic, pa.string())
    cols = {
        "kind": _const("row", m),
        "envelope": _const("bare", m),
        "topic": topic,
        "table_name": _table_names(topic),
        "key": key.arr,
        "op": _const("u", m),
        "before": pa.nulls(m, pa.string()),
        "after": after,
        "updated": updated,
        "mvcc_timestamp": mvcc,
        "commit_time": _commit_from_hlc(updated, mvcc),
        "source": pa.nulls(m, pa.string()),
    }
    return ~bad, cols


def _row_columns(m: int, envelope: str, src: "_Col", src_obj: np.ndarray, *, op: pa.Array, before: pa.Array,
                 after: pa.Array, table: pa.Array, commit: pa.Array, topic: pa.Array | None = None,
                 key: pa.Array | None = None, updated: pa.Array | None = None,
                 mvcc: pa.Array | None = None) -> dict[str, pa.Array]:
    """The columns of ``m`` change rows of one envelope; ``source`` is the block's text where it is
    an object (null where absent or JSON null), what the envelope lacks is null."""
    source = src.arr
    if src.present.any() and not src_obj.all():
        source = pc.if_else(pa.array(src_obj), source, _NULL_STR)
    none = pa.nulls(m, pa.string())
    return {
        "kind": _const("row", m),
        "envelope": _const(envelope, m),
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


def _enriched_part(g: _Matched, bodies: list) -> tuple[np.ndarray, dict[str, pa.Array]]:
    m = len(g.idx)
    value = {k: g.col(k, m) for k in _ENRICHED_FAST}
    key = g.col("", m)
    bad = ~((key.first == _ARR_START) | (key.first == _OBJ_START))
    key_objects = key.first == _OBJ_START
    if key_objects.any():
        # A Key object is parsed by the general path (duplicates, {payload, schema}): prove it plain.
        kok, _ = _nested(g.key, key_objects, _CRDB_STYLE, lambda keys: set(keys) != {"payload", "schema"}, (), key)
        bad |= key_objects & ~kok
    op = value["op"]
    bad |= ~pc.is_in(op.arr, value_set=_ENRICHED_OP_TEXT).to_numpy(zero_copy_only=False)
    after_ok, _, after = _image(value["after"])
    before_ok, _, before = _image(value["before"])
    bad |= ~after_ok | ~before_ok | ~value["key"].starts(b"[{n")
    src = value["source"]
    bad |= ~src.starts(b"{n")
    src_obj = src.present & (src.first == _OBJ_START)
    src_ok, sf = _nested(g.values["source"] if src.present.any() else [b""] * m, src_obj, _CRDB_STYLE,
                         lambda keys: True, ("origin", "table_name", "ts_hlc", "mvcc_timestamp", "ts_ns"), src)  # fmt: skip
    bad |= src_obj & ~src_ok
    # With a source object, only origin "cockroachdb" makes the general path call it enriched.
    origin_ok = pc.fill_null(pc.equal(sf["origin"].arr, '"cockroachdb"'), False).to_numpy(zero_copy_only=False)
    bad |= src_obj & ~origin_ok
    bad |= ~sf["table_name"].matches(_PLAIN_STRING) | ~sf["ts_hlc"].matches(HLC_QUOTED)
    bad |= ~sf["mvcc_timestamp"].matches(HLC_QUOTED)
    src_ns, src_ns_has, _ = sf["ts_ns"].ints()
    bad |= sf["ts_ns"].present & ~src_ns_has
    top_ns, top_ns_has, _ = value["ts_ns"].ints()
    bad |= value["ts_ns"].present & ~top_ns_has
    bad |= _body_utf8_bad(bodies)

    updated = sf["ts_hlc"].unquoted()
    mvcc = sf["mvcc_timestamp"].unquoted()
    ns = np.where(src_ns_has, src_ns, top_ns)
    ns_has = src_ns_has | top_ns_has
    from_ns = _micros_array(ns // 1000, ns_has & (ns >= 0))
    commit = pc.coalesce(_commit_from_hlc(updated, mvcc), from_ns)
    table = sf["table_name"].unquoted()
    table = pc.if_else(pc.equal(table, ""), _NULL_STR, table)
    topic = pa.array(g.topic, pa.string())
    table = pc.coalesce(table, _table_names(topic))
    cols = _row_columns(m, "enriched", src, src_obj, op=op.unquoted(), before=before, after=after, table=table,
                        commit=commit, topic=topic, key=key.arr, updated=updated, mvcc=mvcc)
    return ~bad, cols


def _debezium_part(g: _Matched, bodies: list) -> tuple[np.ndarray, dict[str, pa.Array]]:
    m = len(g.idx)
    value = {k: g.col(k, m) for k in _DEBEZIUM_FAST}
    op = value["op"]
    bad = ~pc.is_in(op.arr, value_set=_DEBEZIUM_OP_TEXT).to_numpy(zero_copy_only=False)
    after_ok, _, after = _image(value["after"])
    before_ok, _, before = _image(value["before"])
    bad |= ~after_ok | ~before_ok
    src = value["source"]
    bad |= ~src.starts(b"{n")
    src_obj = src.present & (src.first == _OBJ_START)
    src_ok, sf = _nested(g.values["source"] if src.present.any() else [b""] * m, src_obj, _COMPACT_STYLE,
                         lambda keys: True, ("table", "commit_ts", "ts_us", "ts_ms"), src)  # fmt: skip
    bad |= src_obj & ~src_ok
    table_col = sf["table"]
    table_str = table_col.present & (table_col.first == ord('"'))
    plain = table_col.matches(_PLAIN_STRING)
    bad |= table_str & ~plain
    table = pc.if_else(pa.array(table_str & plain), table_col.unquoted(), _NULL_STR)
    table = pc.if_else(pc.equal(table, ""), _NULL_STR, table)

    # commit_time exactly as the general path: TiCDC commit_ts, else source ts_us / ts_ms, else ts_ms
    # when the source has no time at all.
    commit_ts, has_cts, u1 = sf["commit_ts"].ints()
    us, has_us, u2 = sf["ts_us"].ints()
    ms, has_ms, u3 = sf["ts_ms"].ints()
    top_ms, has_top, u4 = value["ts_ms"].ints()
    bad |= u1 | u2 | u3 | u4
    micros = np.zeros(m, dtype=np.int64)
    known = np.zeros(m, dtype=bool)
    use_cts = has_cts & (commit_ts >= 0)
    micros = np.where(use_cts, (commit_ts >> 18) * 1000, micros)
    known |= use_cts
    rest = ~use_cts
    use_us = rest & has_us & (us > 0)
    micros = np.where(use_us, us, micros)
    known |= use_us
    rest &= ~use_us
    ms_fits = ms <= MAX_MICROS // 1000
    use_ms = rest & has_ms & (ms > 0)
    micros = np.where(use_ms & ms_fits, ms * np.where(ms_fits, 1000, 0), micros)
    known |= use_ms & ms_fits
    rest &= ~use_ms
    top_fits = top_ms <= MAX_MICROS // 1000
    # A source that names its time as 0 (a snapshot read) has none: not the processing time.
    use_top = rest & ~has_us & ~has_ms & has_top & (top_ms >= 0)
    micros = np.where(use_top & top_fits, top_ms * np.where(top_fits, 1000, 0), micros)
    known |= use_top & top_fits
    bad |= _body_utf8_bad(bodies)
    cols = _row_columns(m, "debezium", src, src_obj, op=op.unquoted(), before=before, after=after, table=table,
                        commit=_micros_array(micros, known))
    return ~bad, cols


def _learned_paths(bodies: list[bytes], envelope: str) -> list[tuple[np.ndarray, dict[str, pa.Array]]]:
    """Fast paths for bare and enriched (v2 wrapper) and Debezium bodies: [(indices, columns)]."""
    parts = []
    remaining = np.arange(len(bodies))
    plans = []
    if envelope in ("auto", "bare", "enriched"):
        def accept(keys: tuple[str, ...], env: str = envelope) -> bool:
            if env == "bare":
                return _accept_bare(keys)
            if env == "enriched":
                return _accept_enriched(keys)
            return _accept_bare(keys) or _accept_enriched(keys)

        plans.append((True, _CRDB_STYLE, accept))
    if envelope in ("auto", "debezium"):
        plans.append((False, _COMPACT_STYLE, _accept_debezium))
    first = bodies[0] if bodies else b""
    if not first.startswith(b'{"Key":'):
        plans.reverse()
    for wrapper, style, accept in plans:
        if not len(remaining):
            break
        subset = bodies if len(remaining) == len(bodies) else [bodies[i] for i in remaining.tolist()]
        taken = np.zeros(len(bodies), dtype=bool)
        groups = []
        quick = _bare_quick(subset, accept) if wrapper else None
        if quick is not None:
            groups.append(quick)
            rest = np.ones(len(subset), dtype=bool)
            rest[quick.idx] = False
            rest_idx = np.flatnonzero(rest)
            if len(rest_idx):
                for g in _match_layouts([subset[i] for i in rest_idx.tolist()], style, wrapper, accept):
                    g.idx = rest_idx[g.idx]
                    groups.append(g)
        else:
            groups = _match_layouts(subset, style, wrapper, accept)
        for g in groups:
            group_bodies = [subset[i] for i in g.idx.tolist()]
            if not wrapper:
                build = _debezium_part
            elif "__crdb__" in g.keys:
                build = _bare_part
            else:
                build = _enriched_part
            ok, cols = build(g, group_bodies)
            if not ok.any():
                continue
            rows = remaining[g.idx]
            if not ok.all():
                mask = pa.array(ok)
                cols = {k: v.filter(mask) for k, v in cols.items()}
                rows = rows[ok]
            taken[rows] = True
            parts.append((rows, cols))
        remaining = remaining[~taken[remaining]]
    return parts


# -- the general path ------------------------------------------------------------------------------


def _rows_columns(rows: list[Row], schema: pa.Schema, typed: bool) -> dict[str, pa.Array]:
    def strings(attr: str) -> pa.Array:
        return pa.array([getattr(r, attr) for r in rows], pa.string())

    out = {name: strings(name) for name in ("kind", "envelope", "topic", "table_name", "key", "op", "updated",
                                            "mvcc_timestamp", "resolved", "source")}  # fmt: skip
    for name in ("before", "after"):
        values = [getattr(r, name) for r in rows]
        if typed:
            out[name] = pa.array(values, schema.field(name).type)
        else:
            out[name] = pa.array(values, pa.binary()).cast(pa.string())
    out["commit_time"] = pa.array([r.commit_us for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return out


def _typed_bad(rows: list[Row], schema: pa.Schema) -> bool:
    """Whether the typed before/after values of these rows convert to Arrow."""
    try:
        for name in ("before", "after"):
            pa.array([getattr(r, name) for r in rows], schema.field(name).type)
        return False
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        return str(exc) or type(exc).__name__  # type: ignore[return-value]


# -- metadata columns ------------------------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _micros(value: Any, i: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"publish_times[{i}] must be a datetime or int microseconds, got bool")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)  # naive: taken as UTC
        delta = value - _EPOCH
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    raise TypeError(f"publish_times[{i}] must be a datetime or int microseconds, got {type(value).__name__}")


def _metadata(n: int, message_ids: list | None, publish_times: list | None, attributes: list | None,
              ordering_keys: list | None) -> dict[str, pa.Array]:  # fmt: skip
    ts_type = pa.timestamp("us", tz="UTC")
    map_type = pa.map_(pa.string(), pa.string())
    out: dict[str, pa.Array] = {}
    out["message_id"] = pa.nulls(n, pa.string()) if message_ids is None else pa.array(message_ids, pa.string())
    if publish_times is None:
        out["publish_time"] = pa.nulls(n, ts_type)
    else:
        try:  # the streaming source passes int microseconds: convert them in one call
            micros = pa.array(publish_times, pa.int64())
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            micros = pa.array([_micros(v, i) for i, v in enumerate(publish_times)], pa.int64())
        out["publish_time"] = micros.cast(ts_type)
    if attributes is None:
        out["attributes"] = pa.nulls(n, map_type)
    elif not any(attributes):
        # CockroachDB sets no attributes by default: build the empty maps without per-item work.
        mask = None
        if attributes.count(None):
            mask = pa.array(np.fromiter((a is None for a in attributes), dtype=bool, count=n))
        out["attributes"] = pa.MapArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()), pa.array([], pa.string()),
            mask=mask,
        )  # fmt: skip
    else:
        out["attributes"] = pa.array([None if a is None else list(a.items()) for a in attributes], map_type)
    if ordering_keys is None:
        out["ordering_key"] = pa.nulls(n, pa.string())
    else:
        arr = pa.array(ordering_keys, pa.string())
        out["ordering_key"] = pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)
    return out



# -- choosing the fast paths -----------------------------------------------------------------------

_FAST_PATHS = True  # tests switch this off to compare with the general path alone
_FAST_ENVELOPES = ("auto", "wrapped", "bare", "enriched", "debezium")
_FILL = ("resolved", "source", "error")


def _looks_wrapped(body: bytes) -> bool:
    return body.startswith(b'{"Key":') and b',"Value":{"after": ' in body and b'"op": ' not in body


def _wrapped_part(bodies: list[bytes], rows: np.ndarray) -> list[tuple[np.ndarray, dict[str, pa.Array]]]:
    subset = bodies if len(rows) == len(bodies) else [bodies[i] for i in rows.tolist()]
    idx, cols = _fast_path(subset)
    return [(rows[idx], cols)] if len(idx) else []


def _fast_parts(bodies: list[bytes], envelope: str) -> list[tuple[np.ndarray, dict[str, pa.Array]]]:
    """Every fast path that applies, most likely first; each takes what the previous ones left."""
    n = len(bodies)
    steps = []
    if envelope in ("auto", "wrapped"):
        steps.append("wrapped")
    if envelope != "wrapped":
        steps.append("learned")
    if len(steps) == 2 and not _looks_wrapped(bodies[0]):
        steps.reverse()
    parts: list[tuple[np.ndarray, dict[str, pa.Array]]] = []
    remaining = np.arange(n)
    for step in steps:
        if not len(remaining):
            break
        if step == "wrapped":
            found = _wrapped_part(bodies, remaining)
        else:
            subset = bodies if len(remaining) == n else [bodies[i] for i in remaining.tolist()]
            found = [(remaining[idx], cols) for idx, cols in _learned_paths(subset, envelope)]
        taken = np.zeros(n, dtype=bool)
        for idx, cols in found:
            taken[idx] = True
            m = len(idx)
            for name in _FILL:
                cols.setdefault(name, pa.nulls(m, pa.string()))
            parts.append((idx.astype(np.int64), cols))
        remaining = remaining[~taken[remaining]]
    return parts


def _typed_parts(parts: list, struct: Any, schema: pa.Schema) -> list:
    """Row images as structs of the row schema; messages the bulk conversion is unsure of drop out."""
    from .typed import struct_column

    out = []
    for idx, cols in parts:
        bad = np.zeros(len(idx), dtype=bool)
        for name in ("before", "after"):
            arr, not_done = struct_column(cols[name], struct, schema.field(name).type)
            if arr is None:
                bad[:] = True
                break
            cols[name] = arr
            bad |= not_done
        if bad.all():
            continue
        if bad.any():
            keep = pa.array(~bad)
            cols = {k: v.filter(keep) for k, v in cols.items()}
            idx = idx[~bad]
        out.append((idx, cols))
    return out


# -- the public function ---------------------------------------------------------------------------


def _general_part(body_list: list, slow_indices: Iterable[int], ctx: Context, typed: bool, schema: pa.Schema,
                  mode: str, message_ids: Sequence[str] | None,
                  parts: list) -> tuple[list[Row], list[str | None], list[tuple[int, str]]]:
    """The general path over every message the fast paths did not take; appends its rows (and
    the malformed rows, by mode) to ``parts``. Returns the rows, their errors and the malformed."""
    results: list[tuple[int, list[Row] | None, str | None]] = []
    for i in slow_indices:
        try:
            results.append((i, decode_body(body_list[i], ctx), None))
        except Bad as exc:
            results.append((i, None, str(exc)))
    if typed and results:
        good_rows = [r for _, rows, _ in results if rows for r in rows]
        if _typed_bad(good_rows, schema):
            fixed = []
            for i, rows, err in results:
                if rows:
                    reason = _typed_bad(rows, schema)
                    if reason:
                        rows, err = None, f"row does not convert to the row schema ({reason})"
                fixed.append((i, rows, err))
            results = fixed

    malformed = [(i, err) for i, rows, err in results if rows is None]
    if malformed and mode == "FAILFAST":
        i, err = malformed[0]
        raise MalformedMessageError(message_ids[i] if message_ids is not None else None, i, err)

    slow_rows: list[Row] = []
    slow_msg: list[int] = []
    slow_err: list[str | None] = []
    for i, rows, err in results:
        if rows is None:
            if mode == "DROPMALFORMED":
                continue
            bad = Row("malformed", ctx.envelope if ctx.envelope != "auto" else None)  # type: ignore[arg-type]
            slow_rows.append(bad)
            slow_msg.append(i)
            slow_err.append(err)
        else:
            for row in rows:
                slow_rows.append(row)
                slow_msg.append(i)
                slow_err.append(None)

    if slow_rows:
        cols = _rows_columns(slow_rows, schema, typed)
        cols["error"] = pa.array(slow_err, pa.string())
        parts.append((np.array(slow_msg, dtype=np.int64), cols))
    return slow_rows, slow_err, malformed


def _assemble(parts: list, schema: pa.Schema) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """The parts' columns as one set, rows in message order; and each row's message index."""
    row_msg = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    columns: dict[str, pa.Array] = {}
    for name in ("kind", "envelope", "topic", "table_name", "key", "op", "before", "after", "updated",
                 "mvcc_timestamp", "commit_time", "resolved", "source", "error"):  # fmt: skip
        field_type = schema.field(name).type
        chunks = [p[1][name] for p in parts]
        columns[name] = pa.concat_arrays(chunks) if chunks else pa.array([], field_type)
    # Rows come out in message order: the two paths' rows are interleaved back with a stable sort.
    if len(parts) > 1:
        order = np.argsort(row_msg, kind="stable")
        row_msg = row_msg[order]
        taker = pa.array(order)
        columns = {k: v.take(taker) for k, v in columns.items()}
    return row_msg, columns


def decode_messages(
    bodies: Sequence[bytes],
    *,
    envelope: str = "auto",
    mode: str = "PERMISSIVE",
    row_schema: Any = None,
    include_raw: bool = False,
    message_ids: Sequence[str] | None = None,
    publish_times: Sequence[_dt.datetime | int | None] | None = None,
    attributes: Sequence[Mapping[str, str] | None] | None = None,
    ordering_keys: Sequence[str] | None = None,
    stats: DecodeStats | None = None,
) -> pa.RecordBatch:
    """Decode Pub/Sub message bodies of CockroachDB (or Debezium) changefeeds into change rows.

    Parameters
    ----------
    bodies : sequence of bytes
        Pub/Sub message data (a pyarrow binary array works too). ``None`` counts as an empty body.
    envelope : str
        ``"auto"`` (default) detects each message's envelope; ``wrapped``, ``bare``, ``key_only``,
        ``row``, ``enriched``, ``webhook``, ``debezium`` force one (messages of another shape become
        malformed); ``csv`` reads ``format=csv`` bodies and needs ``row_schema``.
    mode : str
        ``PERMISSIVE`` (default): bad messages become ``kind="malformed"`` rows with ``error`` and
        ``data``. ``DROPMALFORMED``: they are left out and counted in ``stats.dropped``.
        ``FAILFAST``: the first one raises :class:`MalformedMessageError`.
    row_schema : str or pyspark StructType, optional
        Spark DDL (``"id STRING, price DECIMAL(10,2)"``). ``before``/``after`` then become structs of
        that type; a value that does not fit makes its message malformed.
    include_raw : bool
        Fill ``data`` with the body on every row (malformed rows always carry it).
    message_ids, publish_times, attributes, ordering_keys : sequences aligned with ``bodies``
        Pub/Sub metadata copied to every row of the message. ``publish_times`` are tz-aware
        datetimes or int epoch microseconds; an ``ordering_key`` of ``""`` becomes null.
    stats : DecodeStats, optional
        Counters this call adds to.

    Returns
    -------
    pyarrow.RecordBatch
        Rows in message order (a webhook batch gives one row per event), with exactly
        ``arrow_schema(row_schema)`` as its schema.

    Raises
    ------
    ValueError
        Bad ``envelope``/``mode``/``row_schema``, misaligned metadata, ``envelope="csv"`` without
        ``row_schema``, or (FAILFAST) :class:`MalformedMessageError`. Never for any message bytes
        in the other modes.
    """
    envelope = _choice("envelope", envelope, ENVELOPES, upper=False)
    mode = _choice("mode", mode, MODES, upper=True)
    struct, schema = _resolve_schema(row_schema)
    if envelope == "csv" and struct is None:
        raise ValueError('envelope="csv" needs row_schema: CSV bodies carry no column names')
    typed = struct is not None
    body_list = _bodies_list(bodies)
    n = len(body_list)
    message_ids = _as_list("message_ids", message_ids, n)
    publish_times = _as_list("publish_times", publish_times, n)
    attributes = _as_list("attributes", attributes, n)
    ordering_keys = _as_list("ordering_keys", ordering_keys, n)

    convert = csv_convert = None
    if typed:
        convert, csv_convert = _converters(struct.json())
        if envelope == "csv" and csv_convert is None:
            raise ValueError("row_schema has nested types (ARRAY/MAP/STRUCT) that format=csv cannot carry")
    ctx = Context(envelope, convert, csv_convert)

    parts: list[tuple[np.ndarray, dict[str, pa.Array]]] = []
    if n and _FAST_PATHS and envelope in _FAST_ENVELOPES:
        parts = _fast_parts(body_list, envelope)
        if typed and parts:
            parts = _typed_parts(parts, struct, schema)
    fast_count = sum(len(idx) for idx, _ in parts)
    if fast_count == n:
        slow_indices: Iterable[int] = ()
    else:
        handled = np.zeros(n, dtype=bool)
        for idx, _ in parts:
            handled[idx] = True
        slow_indices = np.flatnonzero(~handled).tolist()

    slow_rows, slow_err, malformed = _general_part(body_list, slow_indices, ctx, typed, schema, mode, message_ids,
                                                   parts)
    row_msg, columns = _assemble(parts, schema)
    row_count = len(row_msg)

    meta = _metadata(n, message_ids, publish_times, attributes, ordering_keys)
    identity = row_count == n and (n == 0 or (row_msg[0] == 0 and row_msg[-1] == n - 1))
    msg_taker = None if identity else pa.array(row_msg)
    columns["table_name"] = _table_name_attribute(columns["table_name"], attributes, msg_taker)
    for name, arr in meta.items():
        columns[name] = arr if msg_taker is None else arr.take(msg_taker)

    if slow_rows and any(r.kind == "tombstone" for r in slow_rows):
        columns["key"] = _tombstone_keys(columns)

    is_malformed = None
    if slow_rows and any(e is not None for e in slow_err):
        is_malformed = pc.equal(columns["kind"], "malformed")
    if include_raw or is_malformed is not None:
        data = pa.array(body_list, pa.binary())
        data = data if msg_taker is None else data.take(msg_taker)
        if not include_raw:
            data = pc.if_else(is_malformed, data, pa.scalar(None, pa.binary()))
        columns["data"] = data
    else:
        columns["data"] = pa.nulls(row_count, pa.binary())

    batch = pa.RecordBatch.from_arrays([columns[name] for name in COLUMN_NAMES], schema=schema)
    if stats is not None:
        stats.messages += n
        stats.rows += row_count
        stats.malformed += len(malformed)
        if mode == "DROPMALFORMED":
            stats.dropped += len(malformed)
    return batch


def _tombstone_keys(columns: dict[str, pa.Array]) -> pa.Array:
    """A Debezium tombstone's body carries no key: take the Pub/Sub message's ordering key, else its
    ``key`` attribute (where the producer put the record key)."""
    tomb = pc.equal(columns["kind"], "tombstone")
    from_attr = pc.map_lookup(columns["attributes"], pa.scalar("key"), "first")
    fallback = pc.coalesce(columns["ordering_key"], from_attr)
    return pc.if_else(pc.and_(tomb, pc.is_null(columns["key"])), fallback, columns["key"])
