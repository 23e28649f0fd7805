"""The resolved family's fast path (``families/resolved.py``): the compact resolved messages the
Pub/Sub sink publishes (``{"resolved":"<HLC>"}``, and ``{"__crdb__":{"resolved":"<HLC>"}}`` with
the bare envelope) are taken whole batches at a time, under every envelope option that reads them,
and come out exactly as the general path makes them; any other spelling falls back."""

from __future__ import annotations

import pytest

from .fast_check import assert_same, bench_decode, fast_count

PLAIN = b'{"resolved":"1747243394200039000.0000000002"}'
BARE = b'{"__crdb__":{"resolved":"1747243394200039000.0000000002"}}'


@pytest.mark.parametrize("envelope", ["auto", "wrapped", "enriched", "webhook", "bare", "debezium", "row"])
def test_both_forms_under_every_envelope(envelope: str) -> None:
    bodies = [PLAIN, BARE, PLAIN.replace(b"0002", b"0001"), BARE.replace(b"1747", b"1746")]
    batch = assert_same(bodies, envelope=envelope)
    taken = fast_count(bodies, envelope)
    if envelope in ("auto", "bare"):
        assert taken == (4 if envelope == "auto" else 2)
    if envelope == "auto":
        assert batch.column("envelope").to_pylist() == ["wrapped", "bare", "wrapped", "bare"]
        assert batch.column("resolved").to_pylist()[0] == "1747243394200039000.0000000002"


def test_variants_fall_back_exactly() -> None:
    variants = [
        PLAIN,
        b'{"resolved": "1747243394200039000.0000000002"}',  # spacing
        b'{"resolved":"1747243394200039000.000000002"}',  # nine logical digits
        b'{"resolved":"9223372036854775807.0000000000"}',  # a wall time beyond what the bulk cast takes
        b'{"resolved":"99999999999999999999.0000000000"}',
        b'{"resolved":"1747243394200039000.000000000\\u0032"}',  # an escaped digit
        b'{"resolved":null}',
        b'{"resolved":1.5}',
        b'{"resolved":"1.0000000002","resolved":"2.0000000002"}',
        b'{"resolved":"1.0000000002","x":1}',
        b'{"resolved":"1.0000000002"} ',
        b'{"__crdb__":{"resolved":"1.0000000002"},"a":1}',
        b'{"__crdb__":{"resolved":"1.0000000002","updated":"1.0000000002"}}',
        BARE,
    ]
    batch = assert_same(variants)
    assert fast_count(variants) == 2
    assert batch.column("kind").to_pylist()[0] == "resolved" and batch.column("kind").to_pylist()[8] == "malformed"


def test_resolved_messages_between_rows_keep_their_place() -> None:
    rows = bench_decode.make_bodies(30, seed=5, envelope="wrapped")
    bodies = [b for i, row in enumerate(rows) for b in ((row, PLAIN) if i % 7 == 0 else (row,))]
    assert fast_count(bodies) == len(bodies)
    assert_same(bodies)
    assert_same([PLAIN] + bodies)  # the first body a resolved message: its path runs first
