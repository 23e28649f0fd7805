"""The benchmark's broad corpus (``bench_decode.broad_corpus``): bodies shaped like other users' tables
(the simulator's movr traffic, the conformance bodies, wide rows, nested JSONB, long unicode text,
schema blocks), in every variant that has them, come out of the fast paths exactly as the general
path makes them; and the fast paths take them, so the comparison is not vacuous.
"""

from __future__ import annotations

import random

import pytest

from .fast_check import assert_same, bench_decode, fast_count, wrap

CELLS = [
    (variant, shape)
    for variant in bench_decode.ENVELOPES
    for shape in bench_decode.SHAPES
    if not (shape == "schema" and variant not in ("enriched", "debezium"))
    and not (shape == "conformance" and variant == "enriched")
]


@pytest.mark.parametrize(("variant", "shape"), CELLS)
def test_broad_corpus_matches(variant: str, shape: str) -> None:
    made = bench_decode.broad_corpus(shape, variant, 160, seed=5)
    assert made is not None
    bodies, kw = made
    batch = assert_same(bodies, **kw)
    assert batch.num_rows == len(bodies)
    if shape != "conformance":  # (the conformance files hold bodies no fast path takes, on purpose)
        assert fast_count(bodies) == len(bodies)


@pytest.mark.parametrize("shape", ["movr", "wide", "unicode"])
def test_broad_bodies_shuffled_with_others_keep_their_order(shape: str) -> None:
    """One family's batch with a few messages of other kinds between (as a movr stream with its
    resolved messages): the parts interleave back into message order."""
    bodies = bench_decode.broad_corpus(shape, "wrapped", 200, seed=6)[0]  # type: ignore[index]
    others = [b'{"resolved":"1.0000000002"}', b"junk", b"", b'{"__crdb__":{"resolved":"2.0000000000"}}']
    rng = random.Random(shape)
    for body in others * 5:
        bodies.insert(rng.randrange(len(bodies) + 1), body)
    assert_same(bodies, message_ids=[str(i) for i in range(len(bodies))])
    assert_same(bodies, row_schema=bench_decode._spark_ddl(shape) if shape != "movr" else None)


_ALPHABET = list('aé東😀"\\/\b\f\n\r\t\x00\x1f\u2028\ufffd ')


def _escaped(rng: random.Random, text: str) -> str:
    """``text`` as a JSON string, each character escaped at random in one of the ways JSON allows."""
    out = ['"']
    for ch in text:
        cp, r = ord(ch), rng.random()
        if ch in '"\\' or cp < 0x20 or r < 0.2:
            short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                     "\t": "\\t"}.get(ch)  # fmt: skip
            if short is not None and r < 0.5:
                out.append(short)
            elif cp >= 0x10000:
                v = cp - 0x10000
                out.append("\\u%04x\\u%04X" % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)))
            else:
                out.append(("\\u%04x" if r < 0.75 else "\\u%04X") % cp)
        else:
            out.append(ch)
    return "".join(out) + '"'


def test_typed_strings_with_every_escape_match() -> None:
    """STRING columns unescaped in bulk: every escape JSON has, surrogate pairs, NUL and non-ASCII."""
    rng = random.Random(2511)
    bodies = []
    for i in range(400):
        cells = []
        for name in ("s", "t"):
            kind = rng.random()
            if kind < 0.1:
                cells.append(f'"{name}": null')
            elif kind < 0.2:
                cells.append(f'"{name}": ' + rng.choice(['{"k": "x\\"y"}', "12.50", '["\\\\", "\\u00e9"]', "true"]))
            elif kind < 0.9 or name == "t":
                text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(0, 30)))
                cells.append(f'"{name}": ' + _escaped(rng, text))
        row = "{" + ", ".join(cells) + "}"
        bodies.append(wrap(f"[{i}]", '{"after": ' + row + ', "updated": "1.0000000000"}'))
    batch = assert_same(bodies, row_schema="s STRING, t STRING NOT NULL")
    assert fast_count(bodies) == len(bodies)
    assert batch.column("kind").to_pylist().count("row") > 300
