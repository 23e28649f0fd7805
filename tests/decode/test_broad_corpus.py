"""The benchmark's broad corpus (``bench_decode.broad_corpus``): bodies shaped like other users' tables
(the simulator's movr traffic, the conformance bodies, wide rows, nested JSONB, long unicode text,
schema blocks), in every variant that has them, come out of the fast paths exactly as the general
path makes them; and the fast paths take them, so the comparison is not vacuous.
"""

from __future__ import annotations

import random

import pytest

from .fast_check import assert_same, bench_decode, fast_count

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
