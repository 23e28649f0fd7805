"""``envelope=bare``: the row's columns at the top level, CockroachDB's metadata under ``__crdb__``.

The fast path takes bare bodies in the v2 Pub/Sub wrapper, in CockroachDB's own layout, whole
batches at a time (learned layouts, see :mod:`crdb_pubsub.decode.passes`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any, cast

import msgspec
import numpy as np
import pyarrow as pa
from msgspec import Raw

from ...columns import (
    ARR_START,
    GET_KEY,
    GET_TOPIC,
    GET_VALUE,
    OBJ_START,
    OFFSET_LIMIT,
    TooLarge,
    const,
    ranges_column,
    raw_column,
    table_names,
)
from ...layouts import CRDB_STYLE, SIMPLE_KEY, V2_CRDB, Accept, decode_or_none, layout_of, learn_keys
from ...matching import Matched, nested
from ...passes import LearnedFast
from ...proofs import AT_ONCE, ENCODE, interleave
from ...rowcolumns import commit_from_hlc
from ..common import (
    Bad,
    Context,
    Row,
    convert,
    hlc_field,
    key_text,
    kind_of,
    parse_object,
    string_field,
    table_from_topic,
    with_commit_time,
)
from ..registry import Family
from .resolved import resolved_row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return "__crdb__" in d and env in ("auto", "bare", "row")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    envelope = "bare" if env == "auto" else env
    meta = parse_object(d["__crdb__"], "`__crdb__`") if d["__crdb__"][:1] == b"{" else None
    if meta is None:
        raise Bad(f"`__crdb__` must be an object, got {kind_of(d['__crdb__'])}")
    if "resolved" in meta:
        if len(d) != 1 or len(meta) != 1:
            raise Bad("`__crdb__.resolved` must come alone (a resolved message has no row)")
        return [resolved_row(meta, envelope, "__crdb__.")]
    row = Row("row", envelope)
    # The row is the top-level object minus __crdb__: rebuilt with CockroachDB's own ", "/": "
    # separators around each value's exact text, so a CockroachDB message comes out byte-identical.
    parts = [f"{msgspec.json.encode(k).decode()}: {v.decode()}" for k, v in d.items() if k != "__crdb__"]
    row.after = ("{" + ", ".join(parts) + "}").encode()
    row.op = "u"
    row.key = key_text(meta.get("key"), "`__crdb__.key`")
    row.topic = string_field(meta, "topic", "__crdb__.")
    row.updated = hlc_field(meta, "updated", "__crdb__.")
    row.mvcc_timestamp = hlc_field(meta, "mvcc_timestamp", "__crdb__.")
    with_commit_time(row)
    row.after = convert(row.after, ctx, "after")
    return [row]


# -- the fast path -----------------------------------------------------------------------------------

_META = frozenset(("key", "mvcc_timestamp", "topic", "updated"))


def _accept(keys: tuple[str, ...]) -> bool:
    return "__crdb__" in keys and len(keys) > 1


class _BareWrap(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    Key: Raw
    Value: Raw
    Topic: str


_BARE_WRAP_DECODE = msgspec.json.Decoder(_BareWrap).decode
_BARE_WRAP_FIXED = len(b'{"Key":') + len(b',"Value":') + len(b',"Topic":') + len(b"}")
_BARE_HEAD = b'{"__crdb__": '


# (a partial: no Python frame per body)
_format_spaced = cast("Callable[[Any], bytes]", functools.partial(msgspec.json.format, indent=0))


def _same_text(raw: Raw, text: bytes) -> bool:
    return bytes(raw) == text


def _bare_quick(raws: list[bytes], accept: Accept) -> Matched | None:
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
    first = decode_or_none(_BARE_WRAP_DECODE, raws[0]) if raws else None
    keys = learn_keys(first.Value) if first is not None else None
    if not keys or keys[0] != "__crdb__" or not _accept(keys) or not accept(keys):
        return None  # (the layout is learned from the first body: not bare, not this path)
    idx = np.arange(len(raws))
    try:
        parsed = list(map(_BARE_WRAP_DECODE, raws))
    except Exception:  # noqa: BLE001 - some are not {Key, Value, Topic}: the others still may be
        parsed = [decode_or_none(_BARE_WRAP_DECODE, b) for b in raws]
        keep = [p is not None for p in parsed]
        idx, parsed, raws = (
            idx[np.array(keep, dtype=bool)],
            list(itertools.compress(parsed, keep)),
            list(itertools.compress(raws, keep)),
        )
        if not parsed:
            return None
    values = list(map(GET_VALUE, parsed))
    if not all(map(SIMPLE_KEY.match, keys)):
        return None
    layout = layout_of(keys, CRDB_STYLE, False)
    try:
        inner = list(map(layout.decode, values))
    except Exception:  # noqa: BLE001 - other keys in some: keep the ones of this layout
        inner = [decode_or_none(layout.decode, v) for v in values]
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
    # Short values (the per-call cost dominates): the values side by side as one JSON array,
    # "[V1, V2, ...]", and one format call proves them all fixed points (an array's elements are
    # formatted each on its own, joined by ", "); all fixed points, a value is never shorter than
    # its compact encoding plus its 2k - 1 spaces, so equal totals prove each one. Long values
    # (one huge output, grown by reallocation, costs more than the calls): one by one.
    if int(v_len.sum()) + 2 * m > OFFSET_LIMIT:
        return None
    if int(v_len.sum()) < AT_ONCE * m:
        joined = b", ".join(values)
        text = bytearray(len(joined) + 2)  # (mutable: the rows are cut from it below)
        text[0], text[1:-1], text[-1] = ord("["), joined, ord("]")
        del joined
        fixed = _format_spaced(text) == text
        if not (fixed and len(ENCODE(inner)) - (m + 1) + m * (2 * n_keys - 1) == int(v_len.sum())):
            compact = np.fromiter(map(len, map(ENCODE, inner)), dtype=np.int64, count=m)
            ok &= v_len == compact + 2 * n_keys - 1
            if not fixed:
                ok &= np.fromiter(map(_same_text, values, map(_format_spaced, values)), dtype=bool, count=m)
        v_bytes = np.frombuffer(text, dtype=np.uint8)
        v_start = np.ones(m, dtype=np.int64)
        np.cumsum(v_len[:-1] + 2, out=v_start[1:])
        v_start[1:] += 1
    else:
        compact = np.fromiter(map(len, map(ENCODE, inner)), dtype=np.int64, count=m)
        ok &= v_len == compact + 2 * n_keys - 1
        formatted = list(map(_format_spaced, values))
        v_data = b"".join(values)
        if b"".join(formatted) != v_data:  # (one comparison when all are; message by message otherwise)
            ok &= np.fromiter(map(_same_text, values, formatted), dtype=bool, count=m)
        del formatted
        v_bytes = np.frombuffer(v_data, dtype=np.uint8).copy()  # (numpy's: big ones get huge pages)
        v_start = np.zeros(m, dtype=np.int64)
        np.cumsum(v_len[:-1], out=v_start[1:])
    del inner
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
    v_bytes[cut] = OBJ_START
    after = ranges_column(v_bytes, cut, end)
    return Matched(idx=idx[ok], keys=keys, values={"__crdb__": meta}, key=key, topic=topic, after=after)


def _bare_rows(g: Matched, bodies: list[bytes]) -> pa.Array:
    """Return the rows of bare bodies proven canonical: CockroachDB's own layout of the columns.

    That layout is exactly what the general path rebuilds. The rows are in the bodies already:
    ``{"Key":K,"Value":{"__crdb__": M, <row>},"Topic":T}``, so each row is cut from the joined bodies
    (the space before ``<row>`` becomes its ``{``), without touching its values.
    """
    m = len(g.idx)
    if g.keys[0] != "__crdb__":
        columns = [k for k in g.keys if k != "__crdb__"]
        prefixes = [(b"{" if i == 0 else b", ") + msgspec.json.encode(k) + b": " for i, k in enumerate(columns)]
        values = [g.values[k] for k in columns]
        return raw_column([interleave(prefixes, [[v] for v in row], b"}", 1) for row in zip(*values)])[0]
    assert g.key is not None and g.topic is not None  # bare layouts sit in the v2 wrapper (V2_CRDB)
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
    return ranges_column(data, space, end)


def _fast_rows(g: Matched, bodies: list[bytes]) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """(ok mask, output columns) of bare bodies of one proven layout (see LearnedFast.build)."""
    m = len(g.idx)
    key = g.col("", m)
    bad = key.first != ARR_START
    after = g.after if g.after is not None else _bare_rows(g, bodies)
    meta_ok, meta = nested(g.values["__crdb__"], np.ones(m, dtype=bool), CRDB_STYLE,
                           _META.issuperset, ("key", "topic", "updated", "mvcc_timestamp"))  # fmt: skip
    bad |= ~meta_ok
    bad |= ~meta["key"].starts(b"[{n") | ~meta["topic"].starts(b'"')
    bad |= ~meta["updated"].hlc() | ~meta["mvcc_timestamp"].hlc()
    bad |= g.utf8_bad(covered=[k for k in g.keys if k != "__crdb__"], arrays=[after])
    updated = meta["updated"].unquoted()
    mvcc = meta["mvcc_timestamp"].unquoted()
    topic = pa.array(g.topic, pa.string())
    cols = {
        "kind": const("row", m),
        "envelope": const("bare", m),
        "topic": topic,
        "table_name": table_names(topic, table_from_topic),
        "key": key.arr,
        "op": const("u", m),
        "before": pa.nulls(m, pa.string()),
        "after": after,
        "updated": updated,
        "mvcc_timestamp": mvcc,
        "commit_time": commit_from_hlc(updated, mvcc),
        "source": pa.nulls(m, pa.string()),
    }
    return ~bad, cols


FAMILY = Family(
    order=20, names=("bare",), claims=_claims, decode=_decode,
    fast=LearnedFast(envelopes=("auto", "bare"), frames=(V2_CRDB,), accept=_accept, build=_fast_rows,
                     quick=_bare_quick),
)  # fmt: skip
