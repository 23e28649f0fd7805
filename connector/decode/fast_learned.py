"""Fast paths for bare, enriched (both in the v2 wrapper) and Debezium bodies, whose objects' keys
are learned from the batch itself (see "learned layouts" below). What they cannot prove is left to
the general path."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
import re
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec import Raw

from .columns import (
    ARR_START, GET_KEY, GET_TOPIC, GET_VALUE, NULL_START, OBJ_START, OFFSET_LIMIT, TooLarge, const, first_bytes,
    hlc_micros_array, raw_column, utf8_bad,
)
from .envelopes import table_from_topic
from .hlc import HLC_QUOTED, HLC_TEXT, MAX_MICROS


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
            inner = list(map(GET_VALUE, parsed))
            columns = (
                [list(map(GET_KEY, parsed))] + [list(map(g, inner)) for g in layout.inner_getters]
                + [list(map(GET_TOPIC, parsed))]
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
    values = list(map(GET_VALUE, parsed))
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
    key = list(map(GET_KEY, parsed))
    topic = list(map(GET_TOPIC, parsed))
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
    if len(v_data) > OFFSET_LIMIT:
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
    data[cut] = OBJ_START
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
            self.arr, offsets, data = raw_column(raws)
            self.first = first_bytes(offsets, data)
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
            col.first = first_bytes(offsets, np.frombuffer(data_buf, dtype=np.uint8))
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
        return ~self.present | (self.first == NULL_START)

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
                pieces[name].append(g.arrays[name] if name in g.arrays else raw_column(vals)[0])
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
            micros = hlc_micros_array(pc.if_else(valid, pc.fill_null(arr, "0.0000000000"), "0.0000000000"))
            commit = pc.if_else(pc.is_null(arr), commit, micros)
    return commit


def _micros_array(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    return pa.array(values, pa.int64(), mask=~valid).cast(pa.timestamp("us", tz="UTC"))


def _table_names(topic: pa.Array) -> pa.Array:
    """table_from_topic over a column, once per distinct topic (as the wrapped fast path does)."""
    encoded = pc.dictionary_encode(topic)
    tables = pa.array([table_from_topic(t) for t in encoded.dictionary.to_pylist()], pa.string())
    return tables.take(encoded.indices)


def _body_utf8_bad(bodies: list) -> np.ndarray:
    arr, _, _ = raw_column(bodies)
    bad = utf8_bad(arr, bodies)
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
        return raw_column([_interleave(prefixes, [[v] for v in row], b"}", 1) for row in zip(*values)])[0]
    body_len = np.fromiter(map(len, bodies), dtype=np.int64, count=m)
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(body_len[:-1], out=starts[1:])
    key_len = np.fromiter(map(len, g.key), dtype=np.int64, count=m)
    meta_len = np.fromiter(map(len, g.values["__crdb__"]), dtype=np.int64, count=m)
    topic_len = {t: len(msgspec.json.encode(t)) for t in set(g.topic)}
    topic_json = np.fromiter(map(topic_len.__getitem__, g.topic), dtype=np.int64, count=m)
    space = starts + len(b'{"Key":') + key_len + len(b',"Value":{"__crdb__": ') + meta_len + 1
    end = starts + body_len - len(b',"Topic":}') - topic_json
    if int(end[-1]) > OFFSET_LIMIT:
        raise TooLarge("a string column of this batch exceeds 2 GiB; decode fewer messages per call")
    data = np.frombuffer(b"".join(bodies), dtype=np.uint8).copy()
    data[space] = OBJ_START
    offsets = np.empty(2 * m, dtype=np.int32)
    offsets[0::2] = space
    offsets[1::2] = end
    pieces = pa.BinaryArray.from_buffers(pa.binary(), 2 * m - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pieces.take(pa.array(np.arange(0, 2 * m, 2))).view(pa.string())


def _bare_part(g: _Matched, bodies: list) -> tuple[np.ndarray, dict[str, pa.Array]]:
    m = len(g.idx)
    key = g.col("", m)
    bad = key.first != ARR_START
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
        "kind": const("row", m),
        "envelope": const("bare", m),
        "topic": topic,
        "table_name": _table_names(topic),
        "key": key.arr,
        "op": const("u", m),
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


def _enriched_part(g: _Matched, bodies: list) -> tuple[np.ndarray, dict[str, pa.Array]]:
    m = len(g.idx)
    value = {k: g.col(k, m) for k in _ENRICHED_FAST}
    key = g.col("", m)
    bad = ~((key.first == ARR_START) | (key.first == OBJ_START))
    key_objects = key.first == OBJ_START
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
    src_obj = src.present & (src.first == OBJ_START)
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
    src_obj = src.present & (src.first == OBJ_START)
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


def learned_paths(bodies: list[bytes], envelope: str) -> list[tuple[np.ndarray, dict[str, pa.Array]]]:
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
