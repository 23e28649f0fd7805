"""The families' fast paths together, as the decoder runs them (most likely first, each on what the
others left): every batch comes out exactly as the general path alone makes it, in message order.

Each batch is decoded twice, with the fast paths and without them (``fast_check``); the canonical
bodies must actually take a fast path, so these tests are not vacuous.
"""

from __future__ import annotations

import random

import pytest

from .fast_check import CONFORMANCE, FAMILIES, TYPED, assert_same, bench_decode, fast_count, wrap


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_bodies_take_the_fast_path_and_match(family: str) -> None:
    bodies = bench_decode.make_bodies(500, seed=3, envelope=family)
    assert fast_count(bodies) == len(bodies)
    kw = {"row_schema": TYPED} if family == "typed" else {}
    batch = assert_same(bodies, **kw)
    assert batch.num_rows == 500 and "malformed" not in batch.column("kind").to_pylist()


@pytest.mark.parametrize("envelope", ["auto", "wrapped", "bare", "enriched", "debezium", "row", "webhook"])
def test_forced_envelopes_match(envelope: str) -> None:
    bodies = [b for family in FAMILIES for b in bench_decode.make_bodies(40, seed=11, envelope=family)]
    random.Random(1).shuffle(bodies)
    assert_same(bodies, envelope=envelope)
    assert_same(bodies, envelope=envelope, mode="DROPMALFORMED")


def test_mixed_families_keep_message_order() -> None:
    bodies = [b for family in FAMILIES for b in bench_decode.make_bodies(30, seed=2, envelope=family)]
    bodies += [b"junk", b"", b'{"resolved":"1.0000000002"}', b'{"__crdb__":{"resolved":"1.0000000002"}}']
    random.Random(9).shuffle(bodies)
    ids = [f"m{i}" for i in range(len(bodies))]
    batch = assert_same(bodies, message_ids=ids, include_raw=True)
    assert batch.column("message_id").to_pylist() == ids


def test_conformance_bodies_match() -> None:
    assert_same(CONFORMANCE)
    for envelope in ("bare", "enriched", "debezium"):
        assert_same(CONFORMANCE, envelope=envelope)
    assert_same(CONFORMANCE, row_schema="a BIGINT, b STRING, id BIGINT, tiny INT, price DECIMAL(10,2)")


def test_conformance_values_in_the_v2_wrapper_match() -> None:
    bodies = []
    for body in CONFORMANCE:
        text = body.decode().strip()
        if text.startswith("{"):
            bodies.append(wrap('["k", 1]', text, "tbl"))
            bodies.append(wrap('{"id": 1}', text, "db.public.tbl"))
    assert_same(bodies)
    assert_same(bodies, row_schema="a BIGINT, b STRING, id BIGINT, price DECIMAL(10,2)")


def test_random_mutations_of_canonical_bodies_match() -> None:
    rng = random.Random(20261123)
    bodies = []
    for family in FAMILIES:
        for body in bench_decode.make_bodies(60, seed=8, envelope=family):
            text = bytearray(body)
            for _ in range(rng.randrange(1, 4)):
                op = rng.randrange(5)
                pos = rng.randrange(len(text))
                if op == 0 and b" " in text:  # drop a space
                    spaces = [i for i, c in enumerate(text) if c == 32]
                    del text[rng.choice(spaces)]
                elif op == 1:  # add a space
                    text.insert(pos, 32)
                elif op == 2:  # repeat a member ("...": value) that is already there
                    start = text.find(b', "', pos)
                    end = text.find(b", ", start + 1) if start >= 0 else -1
                    if start >= 0 and end > start:
                        text[end:end] = text[start:end]
                elif op == 3:  # repeat a compact member
                    start = text.find(b',"', pos)
                    end = text.find(b",", start + 1) if start >= 0 else -1
                    if start >= 0 and end > start:
                        text[end:end] = text[start:end]
                else:  # change a byte
                    text[pos] = rng.choice(b' ",:{}[]0a\\\xff')
            bodies.append(bytes(text))
    assert_same(bodies)
    assert_same(bodies, row_schema=TYPED)
