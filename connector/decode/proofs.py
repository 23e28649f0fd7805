"""Byte proofs: which bodies of a learned layout are exactly in their producer's canonical bytes.

A body that decoded into a learned layout's Struct (:mod:`.layouts`) holds its keys, each at least
once; the general path would read the last value of each. It takes the fast path only if it is
provably in the producer's canonical layout (CockroachDB's ``{"a": 1, "b": 2}`` or the compact
``{"a":1,"b":2}`` of Debezium's JSON converter): then it has exactly those keys, once each, in that
order, with nothing between them: no duplicate (which the general path rejects), no whitespace or
escape variant, so the fields the general path would read are these values. Anything else goes to
the general path.

The proofs, each a mask over a batch's bodies, for the whole batch at once (which one runs is
chosen by :func:`.matching.match_layouts`):

* :func:`rebuilt_equal`: equal, byte for byte, to the layout rebuilt from the body's own values,
  with one ``join`` and one comparison for a slice of the batch;
* :func:`same_length`: of the canonical length, where that is airtight (few keys, see
  :attr:`.layouts.Layout.by_length`);
* :func:`encoded_equal`: as long as msgspec's compact re-encoding (compact objects);
* :func:`spaceless_equal`: as long without spaces as that re-encoding (values only read by key).

Bare rows, which are cut from the body, have a proof of their own (the ``msgspec.json.format``
fixed point of the whole ``Value``, in the bare family's module).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
from msgspec import Raw

Texts = Sequence["bytes | Raw"]  # raw JSON texts, one per body

AT_ONCE = 512  # mean bytes a text below which a batch's texts are encoded (or formatted) in one call
ENCODE = msgspec.json.Encoder().encode
_SLICE_BYTES = 1 << 21  # bytes of bodies a rebuild compares at a time
_SPACE = ord(" ")
_COUNT_SPACES = operator.methodcaller("count", b" ")


def interleave(prefixes: list[bytes], columns: Sequence[Texts], end: bytes, m: int) -> bytes:
    """``prefixes[0] col0[i] prefixes[1] col1[i] ... end`` for every i, as one byte string."""
    stride = 2 * len(columns)
    pieces: list = [b""] * (stride * m)
    for j, (prefix, column) in enumerate(zip(prefixes, columns)):
        pieces[2 * j :: stride] = [prefix] * m if j else [end + prefix] * m
        pieces[2 * j + 1 :: stride] = column
    if m:
        pieces[0] = prefixes[0]
    return b"".join(pieces) + (end if m else b"")


def same_length(raws: Texts, prefixes: list[bytes], columns: Sequence[Texts], end: bytes) -> np.ndarray:
    """Mask of the ``raws`` as long as their canonical rebuild (see Layout.by_length)."""
    m = len(raws)
    want = np.full(m, sum(map(len, prefixes)) + len(end), dtype=np.int64)
    for column in columns:
        want += np.fromiter(map(len, column), dtype=np.int64, count=m)
    return np.fromiter(map(len, raws), dtype=np.int64, count=m) == want


def rebuilt_equal(raws: Texts, prefixes: list[bytes], columns: Sequence[Texts], end: bytes) -> np.ndarray:
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
            ok[sub] = rebuilt_equal(
                list(itertools.compress(raws, keep)),
                prefixes,
                [list(itertools.compress(c, keep)) for c in columns],
                end,
            )
        return ok
    # In slices of about _SLICE_BYTES: two temporaries of the whole batch would be fresh memory
    # each time (~2.4 us a 4 KB page here); slices this size reuse the same.
    if not m:
        return ok
    ends = np.cumsum(have)
    cuts = [0, *np.searchsorted(ends, np.arange(_SLICE_BYTES, int(ends[-1]), _SLICE_BYTES), side="right").tolist(), m]
    for a, b in itertools.pairwise(cuts):
        if a >= b:
            continue
        rebuilt = interleave(prefixes, [c[a:b] for c in columns], end, b - a)
        actual = b"".join(raws[a:b])
        if rebuilt == actual:
            continue
        diff = np.frombuffer(rebuilt, dtype=np.uint8) != np.frombuffer(actual, dtype=np.uint8)
        starts = np.zeros(b - a, dtype=np.int64)
        np.cumsum(have[a : b - 1], out=starts[1:])
        ok[a:b] = np.add.reduceat(diff, starts) == 0
    return ok


def _spaces(texts: Texts) -> int:
    """Spaces in all the ``texts`` (bytes are counted in place; Raw ones, without a count, joined)."""
    if texts and isinstance(texts[0], bytes):
        try:
            return sum(map(_COUNT_SPACES, texts))
        except TypeError:
            pass
    return int(np.count_nonzero(np.frombuffer(b"".join(texts), dtype=np.uint8) == _SPACE))


def _spaceless_len(texts: Texts) -> np.ndarray:
    m = len(texts)
    texts = [t if isinstance(t, bytes) else bytes(t) for t in texts]
    return np.fromiter(map(len, texts), dtype=np.int64, count=m) - np.fromiter(
        map(_COUNT_SPACES, texts), dtype=np.int64, count=m
    )


def spaceless_equal(raws: Texts, parsed: list[Any], stats: tuple[int, int | None] | None = None) -> np.ndarray:
    """Mask of the ``raws`` holding no repeated key, at any level the Structs ``parsed`` from them have.

    ``msgspec.json.encode`` of a Struct writes each of its keys once (shortest JSON: the keys are
    plain), no whitespace, and the raw values verbatim. Without spaces, a raw is never shorter than
    that: its values are the same bytes, its keys (and a wrapper's Topic) at least as long, and any
    other whitespace or repeated member only adds. So the two are equal exactly when no key repeats,
    no key is escaped and only spaces separate the tokens; as each raw is never shorter, equal totals
    over the batch prove every one (the common case: four bulk counts, no per-message comparison).
    """
    m = len(raws)
    if stats is not None and stats[1] is not None:
        total, spaces = stats[0], stats[1]
    else:
        total, spaces = sum(map(len, raws)), _spaces(raws)
    if total < AT_ONCE * m:
        both = ENCODE(parsed)  # one call: "[" e1 "," e2 ... "]", no spaces of its own
        nonspace = len(both) - (m + 1) - int(np.count_nonzero(np.frombuffer(both, dtype=np.uint8) == _SPACE))
        if total - spaces == nonspace:
            return np.ones(m, dtype=bool)
        encoded = list(map(ENCODE, parsed))
    else:  # (long ones one by one: one huge output, grown by reallocation, costs more than the calls)
        encoded = list(map(ENCODE, parsed))
        if total - spaces == sum(map(len, encoded)) - sum(map(_COUNT_SPACES, encoded)):
            return np.ones(m, dtype=bool)
    return _spaceless_len(raws) == _spaceless_len(encoded)


def encoded_equal(raws: Texts, parsed: list[Any], total: int | None = None) -> np.ndarray:
    """Mask of the compact ``raws`` exactly as long as the compact encoding of their Structs.

    As in spaceless_equal, a raw is never shorter than that encoding; when there are no spaces to
    set aside (the producer writes no whitespace), equal lengths mean no key repeats, no key is
    escaped and there is no whitespace at all: one length per message, no byte counted.
    """
    m = len(raws)
    total = total if total is not None else sum(map(len, raws))
    if total < AT_ONCE * m:
        if len(ENCODE(parsed)) - (m + 1) == total:  # one call: "[" e1 "," e2 ... "]"
            return np.ones(m, dtype=bool)
        encoded = np.fromiter(map(len, map(ENCODE, parsed)), dtype=np.int64, count=m)
    else:  # (long ones one by one: one huge output, grown by reallocation, costs more than the calls)
        encoded = np.fromiter(map(len, map(ENCODE, parsed)), dtype=np.int64, count=m)
        if int(encoded.sum()) == total:
            return np.ones(m, dtype=bool)
    return np.fromiter(map(len, raws), dtype=np.int64, count=m) == encoded
