"""Matching: which bodies of a batch have which learned layout, proven, and their values taken out.

:func:`match_layouts` learns up to a few layouts from the bodies themselves (:mod:`.layouts`),
decodes the bodies into each, proves the ones that decoded (:mod:`.proofs`, the proof chosen by the
layout and the values' size) and hands back each layout's bodies as a :class:`Matched` group, whose
values the families' builders read (:mod:`.rowcolumns`). :func:`nested` does the same for objects
inside a value (``__crdb__``, ``source``, a Key object). What no layout takes is left to the general
path.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import msgspec
import numpy as np
import pyarrow as pa
from msgspec import Raw

from .columns import GET_KEY, GET_TOPIC, GET_VALUE, raw_column, utf8_bad
from .layouts import COMPACT_STYLE, SIMPLE_KEY, Accept, Frame, Layout, decode_or_none, layout_of, learn
from .proofs import Texts, encoded_equal, rebuilt_equal, same_length, spaceless_equal
from .rowcolumns import Col

_MAX_LAYOUTS = 4  # layouts learned and tried on the pending bodies, at most
_MAX_SKIPS = 32  # bodies skipped because no layout of theirs is taken (cheap: one small decode each)
_GET_SCHEMA, _GET_PAYLOAD = operator.attrgetter("schema"), operator.attrgetter("payload")
_LENGTH_KEYS = 4
_REBUILD_BYTES = 256  # mean bytes a value above which a spaced layout is proven by its rebuild


@dataclasses.dataclass(slots=True, kw_only=True)
class Matched:
    """Bodies that matched one learned layout.

    ``idx``: their positions in the bodies matched; ``keys``: the layout's keys, in order;
    ``schema``: in a ``{"schema", "payload"}`` frame, each body's raw ``schema`` (None: a frame
    without it, or no such key); ``frame`` and ``envelope``: where the layout sat and the envelope
    option (set by the pass that matched them);
    ``values``: the raw value of each key taken out (all, or the ones the caller reads, see
    match_layouts), one per body; ``key`` and ``topic``: the v2 wrapper's Key (raw) and Topic
    (decoded), None without a wrapper; ``parsed`` and ``getters``: the Structs the bodies decoded
    into and a getter per key, to take out other values later; ``ascii``: which bodies are ASCII
    (None: not known); ``after``: row images already cut from the bodies (bare, see its quick
    path); ``built``: the columns built so far (by key, "" for the wrapper Key, see col).
    """

    idx: np.ndarray
    keys: tuple[str, ...]
    values: dict[str, list[Raw]]
    key: list[Raw] | None = None
    topic: list[str] | None = None
    schema: list[Raw] | None = None
    frame: Frame | None = None
    envelope: str = "auto"
    parsed: list[Any] | None = None
    getters: dict[str, Callable[[Any], Raw]] = dataclasses.field(default_factory=dict)
    ascii: np.ndarray | None = None
    after: pa.Array | None = None
    built: dict[str, Col] = dataclasses.field(default_factory=dict)

    def raws(self, name: str) -> list[Raw] | None:
        """Return the raw values of key ``name`` ("" for the wrapper Key), None when the layout has none."""
        if name == "":
            return self.key
        found = self.values.get(name)
        if found is None and name in self.getters and self.parsed is not None:
            found = self.values[name] = list(map(self.getters[name], self.parsed))
        return found

    def col(self, name: str, m: int) -> Col:
        """Return the raw-text column of key ``name`` ("" for the wrapper Key), absent ones null."""
        col = self.built.get(name)
        if col is None:
            col = self.built[name] = Col(self.raws(name), m)
        return col

    def utf8_bad(self, covered: Iterable[str] = (), arrays: Sequence[pa.Array] = ()) -> np.ndarray:
        """Mask of the bodies that are not valid UTF-8 (the general path refuses them first).

        Outside its values, a body proven to have this layout is keys and punctuation, valid text;
        so the values decide: those of the columns built, the ``arrays`` (which hold the values of
        the keys ``covered``), and every other value of the layout, taken out here. Nothing is
        checked when all the bodies are ASCII.
        """
        m = len(self.idx)
        bad = np.zeros(m, dtype=bool)
        if self.ascii is not None and self.ascii.all():
            return bad
        for col in self.built.values():
            if col.present.any():
                found = utf8_bad(col.arr, None)
                if found is not None:
                    bad |= found
        for arr in arrays:
            found = utf8_bad(arr, None)
            if found is not None:
                bad |= found
        rows = None if self.ascii is None or not self.ascii.any() else np.flatnonzero(~self.ascii)
        rest = [k for k in self.keys if k not in self.built and k not in covered]
        if self.key is not None and "" not in self.built:
            rest.append("")
        if self.schema is not None:
            rest.append("\0schema")
        for name in rest:
            raws = self.schema if name == "\0schema" else self.raws(name)
            if raws is None:
                continue
            texts = raws if rows is None else [raws[i] for i in rows.tolist()]
            if b"".join(texts).isascii():  # (numbers, literals, ASCII strings: the common case)
                continue
            found = utf8_bad(raw_column(texts)[0], None)
            if found is not None:
                bad[slice(None) if rows is None else rows] |= found
        return bad


Wanted: TypeAlias = "tuple[str, ...] | frozenset[str] | None"
Stats: TypeAlias = "tuple[int, int | None] | None"  # total length and (None: not counted) spaces of texts
_REBUILT = ("length", "rebuild")  # the proofs that compare each body with its rebuild from every value


def match_layouts(raws: Texts, frame: Frame, accept: Accept,
                  wanted: Wanted | Callable[[tuple[str, ...]], Wanted] = None, stats: Stats = None) -> list[Matched]:  # fmt: skip
    """Learn up to _MAX_LAYOUTS layouts from ``raws`` (whose keys ``accept`` likes) and match them.

    Each layout is learned from the first body no layout took, in ``frame``; the bodies that decode
    into it and are proven canonical make one group. ``wanted``: the only keys whose values the
    caller reads (or a function of the layout's keys giving them); the others' values are then not
    even taken out of the Structs (Matched.raws takes them later), when no proof needs them.
    ``stats``: the total length and spaces of all ``raws``, when the caller has them. In a payload
    ``frame``, each ``schema`` beside the layout is kept raw (Matched.schema).
    """
    out: list[Matched] = []
    pending = np.arange(len(raws))
    tried: set[tuple[tuple[str, ...], tuple[str, ...] | None]] = set()
    attempts = skipped = 0
    while len(pending) and attempts < _MAX_LAYOUTS and skipped < _MAX_SKIPS:
        keys, outer = learn(raws[pending[0]], frame)
        simple = keys is not None and all(map(SIMPLE_KEY.match, keys))
        if not keys or (keys, outer) in tried or not accept(keys) or (frame.payload and not simple):
            pending = pending[1:]  # (a body of no layout taken: skipped, the next one teaches)
            skipped += 1
            continue
        attempts += 1
        tried.add((keys, outer))
        layout = layout_of(keys, frame.style, frame.wrapper, outer)
        reads = wanted(keys) if callable(wanted) else wanted
        subset = raws if len(pending) == len(raws) else [raws[i] for i in pending.tolist()]
        got, subset, parsed = _decoded(layout, pending, subset)
        if not parsed:
            pending = pending[1:]
            continue
        known = stats if subset is raws else None
        proof = _proof(layout, frame, simple, reads, subset, known)
        col_keys = keys if proof in _REBUILT or reads is None else tuple(k for k in keys if k in reads)
        group = _taken(layout, got, parsed, col_keys)
        ok = _proven(proof, layout, subset, parsed, group, known)
        if ok.any():
            out.append(_kept(group, ok))
        done = np.zeros(len(raws), dtype=bool)
        done[got[ok]] = True
        done[pending[0]] = True
        pending = pending[~done[pending]]
    return out


def _decoded(layout: Layout, at: np.ndarray, bodies: Texts) -> tuple[np.ndarray, Texts, list[Any]]:
    """(positions, bodies, Structs) of the ``bodies`` (at positions ``at``) that decode into ``layout``."""
    try:
        return at, bodies, list(map(layout.decode, bodies))
    except Exception:  # noqa: BLE001 - one body of another layout: sort them one by one
        parsed = [decode_or_none(layout.decode, b) for b in bodies]
        keep = [p is not None for p in parsed]
        return (
            at[np.array(keep, dtype=bool)],
            list(itertools.compress(bodies, keep)),
            list(itertools.compress(parsed, keep)),
        )


def _proof(layout: Layout, frame: Frame, simple: bool, reads: Wanted, bodies: Texts, stats: Stats) -> str:
    """Choose the proof of the ``bodies`` of ``layout``: "encoded", "spaceless", "length" or "rebuild".

    Values read by key, output as their raw text: only a repeated key (malformed for the general
    path) would make a difference. Compact objects: their encoded length rules it out; spaced ones:
    spaceless_equal, unless few keys make the length check airtight (it needs every value's length:
    cheaper for few keys, not for big objects) or long values make the byte-for-byte rebuild
    cheaper. Bare rows are rebuilt (the general path rebuilds them: proven byte for byte).
    """
    keys = layout.keys
    if simple and not frame.wrapper and frame.style == COMPACT_STYLE:
        return "encoded"
    if layout.outer is not None:
        return "spaceless"  # (payload frames: keys simple, seen when learned)
    if (not layout.by_length or (reads is not None and len(keys) > _LENGTH_KEYS)) and "__crdb__" not in keys and simple:
        total = stats[0] if stats is not None else sum(map(len, bodies))
        if total > _REBUILD_BYTES * len(bodies) * (len(keys) + 2 * frame.wrapper):
            # Long values (text, documents): the rebuild compares each byte once, where the
            # spaceless proof counts them twice and encodes them (~1.5 ns a byte here).
            return "rebuild"
        return "spaceless"
    return "length" if layout.by_length else "rebuild"


def _taken(layout: Layout, at: np.ndarray, parsed: list[Any], keys: Sequence[str]) -> Matched:
    """Take the values of ``keys`` out of the Structs ``parsed`` of the bodies at ``at``, as their group.

    The wrapper's Key and Topic and a payload frame's schemas are taken out too.
    """
    inner = list(map(GET_VALUE, parsed)) if layout.wrapper else parsed
    schema = None
    if layout.outer is not None:
        schema = list(map(_GET_SCHEMA, inner)) if "schema" in layout.outer else None
        inner = list(map(_GET_PAYLOAD, inner))
    # (inside the wrapper, a dotted attrgetter per column costs 4x one getter for Value, then plain ones)
    getters: dict[str, Callable[[Any], Raw]] = dict(zip(layout.keys, layout.getters))
    return Matched(
        idx=at,
        keys=layout.keys,
        values={k: list(map(getters[k], inner)) for k in keys},
        key=list(map(GET_KEY, parsed)) if layout.wrapper else None,
        topic=list(map(GET_TOPIC, parsed)) if layout.wrapper else None,
        schema=schema,
        parsed=inner,
        getters=getters,
    )


def _proven(proof: str, layout: Layout, bodies: Texts, parsed: list[Any], group: Matched, stats: Stats) -> np.ndarray:
    """Mask of the ``bodies`` (decoded into ``parsed``, their values taken out into ``group``) ``proof`` proves."""
    if proof == "encoded":
        return encoded_equal(bodies, parsed, stats[0] if stats is not None else None)
    if proof == "spaceless":
        return spaceless_equal(bodies, parsed, stats)
    values: list[Texts] = [group.values[k] for k in layout.keys]
    if layout.wrapper:  # Topic decodes to str; the layout holds its JSON text
        assert group.key is not None and group.topic is not None
        encoded = {t: msgspec.json.encode(t) for t in set(group.topic)}
        values = [group.key, *values, list(map(encoded.__getitem__, group.topic))]
    if proof == "length":
        return same_length(bodies, layout.prefixes, values, layout.end)
    return rebuilt_equal(bodies, layout.prefixes, values, layout.end)


def _kept(group: Matched, ok: np.ndarray) -> Matched:
    """``group`` with only its bodies ``ok``."""
    if not ok.all():
        keep = ok.tolist()
        group.values = {k: list(itertools.compress(v, keep)) for k, v in group.values.items()}
        for name in ("key", "topic", "schema", "parsed"):
            taken = getattr(group, name)
            if taken is not None:
                setattr(group, name, list(itertools.compress(taken, keep)))
    group.idx = group.idx[ok]
    return group


def nested(raws: Texts, present: np.ndarray, style: tuple[bytes, bytes], accept: Accept,
           names: tuple[str, ...], col: Col | None = None) -> tuple[np.ndarray, dict[str, Col]]:  # fmt: skip
    """Learned-layout match of the objects ``raws[i]`` (where ``present``): (matched mask, fields).

    ``col``: the same texts as a column already built (its bytes are then counted, not joined again).
    """
    m = len(raws)
    idx = np.flatnonzero(present)
    sub = raws if len(idx) == m else [raws[i] for i in idx.tolist()]
    stats = col.stats(spaces=style != COMPACT_STYLE) if col is not None and len(idx) == m else None
    groups = match_layouts(sub, Frame(wrapper=False, style=style), accept, names, stats)
    ok = np.zeros(m, dtype=bool)
    pieces: dict[str, list[pa.Array]] = {name: [] for name in names}
    order = []
    for g in groups:
        order.append(idx[g.idx])
        for name in names:
            vals = g.raws(name)
            if vals is None:
                pieces[name].append(pa.nulls(len(g.idx), pa.string()))
            else:
                pieces[name].append(raw_column(vals)[0])
    fields: dict[str, Col] = {}
    if order:
        rows = np.concatenate(order)
        ok[rows] = True
        pos = np.full(m, -1, dtype=np.int64)
        pos[rows] = np.arange(len(rows))
        taker = None if len(rows) == m and (pos == np.arange(m)).all() else pa.array(pos, mask=pos < 0)
        for name in names:
            arr = pa.concat_arrays(pieces[name]) if len(pieces[name]) > 1 else pieces[name][0]
            fields[name] = Col.of(arr if taker is None else arr.take(taker))
    else:
        for name in names:
            fields[name] = Col(None, m)
    return ok, fields
