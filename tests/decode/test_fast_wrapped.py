"""The wrapped family's fast path (``families/wrapped.py``): CockroachDB's canonical Pub/Sub v2 bodies
are taken whole batches at a time and come out exactly as the general path makes them; any body
whose layout the length arithmetic cannot prove (spacing, repeated, escaped or unknown keys, values
of the wrong kind, invalid UTF-8) falls back.
"""

from __future__ import annotations

from .fast_check import assert_same, bench_decode, fast_count, wrap

HLC = '"1701102296662969433.0000000002"'
ROW = '{"a": 1, "b": "x", "c": {"d": 26.30}}'


def test_canonical_bodies_of_every_option_take_the_fast_path() -> None:
    bodies = [
        wrap("[1]", '{"after": ' + ROW + "}"),
        wrap("[1]", '{"after": null}'),
        wrap("[1]", '{"after": ' + ROW + ', "before": null}'),
        wrap("[1]", '{"after": ' + ROW + ', "before": ' + ROW + ', "updated": ' + HLC + "}"),
        wrap("[1]", '{"after": null, "before": ' + ROW + ', "mvcc_timestamp": ' + HLC + ', "updated": ' + HLC + "}"),
        wrap('["k", 2]', '{"after": ' + ROW + ', "mvcc_timestamp": ' + HLC + "}", "db.public.t.fam"),
    ]
    assert fast_count(bodies) == len(bodies)
    batch = assert_same(bodies)
    assert batch.column("op").to_pylist() == ["u", "d", "c", "u", "d", "u"]
    assert batch.column("table_name").to_pylist()[-1] == "t"


def test_variants_fall_back_exactly() -> None:
    canonical = wrap("[1]", '{"after": ' + ROW + ', "updated": ' + HLC + "}")
    variants = [
        canonical,
        wrap("[1]", '{"after":' + ROW + ', "updated": ' + HLC + "}"),  # spacing
        wrap("[1]", '{"after": ' + ROW + ',"updated": ' + HLC + "}"),
        wrap("[1]", '{"after": ' + ROW + ', "after": null}'),  # repeated
        wrap("[1]", '{"after": ' + ROW + ', "updated": ' + HLC + ', "updated": ' + HLC + "}"),
        wrap("[1]", '{"\\u0061fter": ' + ROW + "}"),  # escaped key
        wrap("[1]", '{"after": ' + ROW + ', "extra": 1}'),  # unknown key
        wrap("[1]", '{"after": [1]}'),  # after not an object
        wrap("[1]", '{"after": ' + ROW + ', "before": 5}'),
        wrap('{"a": 1}', '{"after": ' + ROW + "}"),  # a Key object is not the wrapped layout
        wrap('"k"', '{"after": ' + ROW + "}"),
        wrap("[1]", '{"after": ' + ROW + ', "updated": "12"}'),  # not an HLC
        wrap("[1]", '{"after": ' + ROW + ', "updated": " 1.0000000000"}'),
        wrap("[1]", '{"after": ' + ROW + "}", "t\\u00e9"),  # escaped topic
        wrap("[1] ", '{"after": ' + ROW + "}"),  # wrapper whitespace
        b'{"Key":[1],"Key":[2],"Value":{"after": ' + ROW.encode() + b'},"Topic":"t"}',
        canonical.replace(b'"x"', b'"\xff"'),  # invalid UTF-8 in after
        canonical.replace(b"[1]", b'["\xff"]'),  # ... in the key
        wrap("[1]", '{"after": {"a":1,  "b":"x"}}'),  # the row's own text is kept as it is: canonical
        canonical,
    ]
    batch = assert_same(variants * 2)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == kinds[len(variants) - 1] == "row" and kinds[3] == "malformed"
    assert fast_count(variants) == 3  # the two canonical bodies and the one with its own spacing inside the row


def test_own_benchmark_bodies_take_the_fast_path() -> None:
    bodies = bench_decode.make_bodies(200, seed=4, envelope="wrapped")
    assert fast_count(bodies) == 200 and fast_count(bodies, "wrapped") == 200 and fast_count(bodies, "bare") == 0
    assert_same(bodies)


def test_the_legacy_sink_layout_takes_the_fast_path_and_matches() -> None:
    """The sink before v25.2: Go's json.Marshal, lowercase and compact throughout."""
    legacy = [
        b'{"key":[1],"value":{"after":{"a":1,"b":"x"}},"topic":"t"}',
        b'{"key":["k",2],"value":{"after":null,"before":{"a":1},"updated":"1.0000000002"},"topic":"db.public.t"}',
        b'{"key":[1],"value":{"after":{"a":1},"before":null,"mvcc_timestamp":"5.0000000000","updated":"6.0000000001"},"topic":"t"}',
    ]
    variants = legacy + [
        b'{"key":[1],"value":{"after": {"a":1}},"topic":"t"}',  # a space: not the legacy layout
        b'{"key":[1],"value":{"after":{"a":1},"after":null},"topic":"t"}',
        b'{"key":[1],"value":{"after":{"a":1}},"topic":"t\\u003c"}',  # Go escapes <>&: falls back, same result
        b'{"key":[1],"value":{"after":{"a":1}},"topic":"t","topic":"u"}',
        b'{"key":{"a":1},"value":{"after":{"a":1}},"topic":"t"}',
        b'{"value":{"after":{"a":1}},"topic":"t"}',
        b'{"key":[1],"value":{"after":{"a":1},"updated":"12"},"topic":"t"}',
        b'{"key":[1],"value":{"after":{"a":"\xff"}},"topic":"t"}',
    ]
    assert fast_count(legacy) == len(legacy) and fast_count(legacy, "wrapped") == len(legacy)
    for envelope in ("auto", "wrapped", "bare", "row"):
        assert_same(variants * 2, envelope=envelope)
    mixed = bench_decode.make_bodies(20, seed=4, envelope="wrapped") + legacy
    assert fast_count(mixed) == len(mixed)
    assert_same(mixed, row_schema="a BIGINT, b STRING, city STRING")


def test_key_and_topic_inside_the_value_take_the_fast_path_exactly() -> None:
    """key_in_value / topic_in_value: the wrapper's Key and Topic are the output; the value's own
    are checked as the general path checks them, and only CockroachDB's exact layout is taken."""
    canonical = [
        wrap("[1]", '{"after": ' + ROW + ', "key": [1]}'),
        wrap("[1]", '{"after": ' + ROW + ', "key": [1], "topic": "t"}'),
        wrap(
            "[1]",
            '{"after": null, "before": ' + ROW + ', "key": [1], "mvcc_timestamp": ' + HLC + ', "topic": "t", '
            '"updated": ' + HLC + "}",
        ),
        wrap('["k", 2]', '{"after": ' + ROW + ', "key": {"a": 1}, "updated": ' + HLC + "}", "db.public.t"),
        wrap("[1]", '{"after": ' + ROW + ', "key": null, "topic": "other"}'),
    ]
    variants = canonical + [
        wrap("[1]", '{"after": ' + ROW + ', "key": [1], "key": [2]}'),  # repeated
        wrap("[1]", '{"after": ' + ROW + ',"key": [1],"topic": "t", "topic": "u"}'),  # repeated, spaces left out
        wrap("[1]", '{"after": ' + ROW + ', "topic": "t", "key": [1]}'),  # not sorted: the general path's
        wrap("[1]", '{"after": ' + ROW + ',  "key": [1]}'),  # spacing
        wrap("[1]", '{"after": ' + ROW + ', "key": 5}'),  # not a key
        wrap("[1]", '{"after": ' + ROW + ', "key": "k"}'),
        wrap("[1]", '{"after": ' + ROW + ', "topic": 5}'),  # not a topic
        wrap("[1]", '{"after": ' + ROW + ', "topic": null}'),
        wrap("[1]", '{"after": ' + ROW + ', "key": ["Q"]}').replace(b"Q", b"\xff"),  # invalid UTF-8
        wrap("[1]", '{"after": ' + ROW + ', "topic": "Q"}').replace(b"Q", b"\xff"),
    ]
    assert fast_count(canonical) == len(canonical)
    assert fast_count(variants) == len(canonical)
    batch = assert_same(variants * 2)
    assert batch.column("topic").to_pylist()[:5] == ["t", "t", "t", "db.public.t", "t"]
    assert_same(variants, envelope="wrapped")
    assert_same(variants, row_schema="a BIGINT, b STRING")
