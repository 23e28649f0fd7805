"""The bare family's fast path (``families/bare.py``): bare bodies in CockroachDB's own layout in the
v2 wrapper are taken whole batches at a time and come out exactly as the general path makes them;
every variant it cannot prove (other spacing, repeated or escaped keys, bad metadata) falls back.
"""

from __future__ import annotations

from crdb_pubsub.decode.envelopes.families import bare

from .fast_check import assert_same, bench_decode, fast_count, wrap

META = '{"updated": "1701102296662969433.0000000002"}'


def test_bare_variants_fall_back_exactly() -> None:
    canonical = wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d": 26.30}}')
    variants = [
        canonical,
        wrap("[1]", '{"__crdb__": ' + META + ', "b": "x", "a": 1, "c": {"d": 26.30}}'),  # other key order
        wrap("[1]", '{"__crdb__": ' + META + ',"a": 1, "b": "x", "c": {"d": 26.30}}'),  # spacing
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x", "a": 2}'),  # duplicate column
        wrap("[1]", '{"__crdb__":' + META + ',"a":1,"b":"x","a":1,"c": {"d": 26.30}}'),  # duplicate, compacted
        wrap("[1]", '{"__crdb__": ' + META + ', "\\u0061": 1, "b": "x", "c": {"d": 26.30}}'),  # escaped key
        wrap("[1]", '{"__crdb__": {"updated": "1.0000000000", "updated": "2.0000000000"}, "a": 1}'),
        wrap("[1]", '{"__crdb__": {"resolved": "1.0000000000"}, "a": 1}'),
        wrap("[1]", '{"__crdb__": {"updated": "9999999999999999999.0000000000"}, "a": 1}'),  # beyond int64
        wrap("[1]", '{"__crdb__": {"updated": "12"}, "a": 1}'),  # not an HLC
        wrap("[1]", '{"__crdb__": {"key": 5}, "a": 1}'),  # meta key must be an array or object
        wrap("[1]", '{"__crdb__": {"topic": 5}, "a": 1}'),
        wrap("null", '{"__crdb__": {"key": [2], "topic": "m"}, "a": 1}'),
        wrap('"k"', '{"__crdb__": ' + META + ', "a": 1}'),
        wrap("[1]", '{"__crdb__": ' + META + ', "a": "\xff"}'.encode("latin-1").decode("latin-1")),
        wrap("[1]", '{"a": 1, "__crdb__": ' + META + "}"),  # __crdb__ not first
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1}', "t\\u00e9"),
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1}', "café"),
    ]
    variants.append(canonical.replace(b'"x"', b'"\xff"'))  # invalid UTF-8
    batch = assert_same(variants)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == "row" and kinds[3] == "malformed" and kinds[4] == "malformed"
    assert batch.column("after").to_pylist()[1] == '{"b": "x", "a": 1, "c": {"d": 26.30}}'
    # Another key order is canonical too (a layout is learned from it); other spacing is not.
    assert fast_count([canonical]) == 1 and fast_count(variants[1:2]) == 1 and fast_count(variants[2:3]) == 0


def test_bare_batch_variants_behind_a_canonical_first_body() -> None:
    """The whole-batch bare check (layout learned from the first body) takes only exact bodies."""
    row = '"a": 1, "b": "x", "c": {"d": 26.30}'
    canonical = wrap("[1]", '{"__crdb__": ' + META + ", " + row + "}")
    variants = [
        canonical,
        wrap("[1]", '{"__crdb__": ' + META + ', "a":  1, "b":"x", "c": {"d": 26.30}}'),  # a space moved
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d":26.30}}'),  # compact inside a value
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d": 26.30} }'),  # space before }
        wrap("[1]", '{"__crdb__": ' + META + ',"a":1,"b":"x","a":1, "c": {"d": 26.30}}'),  # duplicate, compacted
        wrap("[1]", '{"__crdb__": ' + META + ', "\\u0061": 1, "b": "x", "c": {"d": 26.30}}'),  # escaped key
        wrap("[1]", '{"a": 1, "__crdb__": ' + META + ', "b": "x", "c": {"d": 26.30}}'),  # __crdb__ second
        wrap("[1]", '{"__crdb__": ' + META + ', "b": "x", "a": 1, "c": {"d": 26.30}}'),  # row key order
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x, \\"y\\": ", "c": {"d": 26.30}}'),
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d": 26.30}, "e": null}'),
        wrap("[1]", '{"__crdb__": ' + META + ', "a": 1, "b": "x"}'),
        wrap("[1] ", '{"__crdb__": ' + META + ", " + row + "}"),  # wrapper whitespace
        b'{"Key":[1],"Key":[2],"Value":{"__crdb__": ' + META.encode() + b", " + row.encode() + b'},"Topic":"t"}',
        wrap("[1]", '{"__crdb__": {}, ' + row + "}"),
        wrap("[1]", '{"__crdb__": ' + META + ", " + row + "}", "t\\u0074"),
        canonical.replace(b'"x"', b'"\xff"'),  # invalid UTF-8
        canonical,
    ]
    batch = assert_same(variants * 3)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == kinds[16] == "row"
    assert fast_count([canonical] * 4) == 4
    assert bare._bare_quick([canonical] * 3, bare._accept) is not None
    quick = bare._bare_quick(variants, bare._accept)
    # Layout proven: canonical ones, body key order of the row, a string holding ", \"y\": ", an empty
    # __crdb__ and invalid UTF-8 (these two are then left to the general path by _fast_rows' checks).
    assert quick is not None and quick.idx.tolist() == [0, 7, 8, 13, 15, 16]


def test_an_hlc_with_a_space_is_malformed_not_an_exception() -> None:
    bodies = bench_decode.make_bodies(3, seed=2, envelope="bare")
    field = b'"updated": "'
    bad = bodies[1].replace(field, field + b" ")
    assert bad != bodies[1]
    batch = assert_same([bodies[0], bad, bodies[2]])
    assert batch.column("kind").to_pylist() == ["row", "malformed", "row"]


def test_invalid_utf8_anywhere_falls_back() -> None:
    body = wrap("[1]", '{"__crdb__": {"topic": "t", "updated": "1.0000000002"}, "a": 1, "b": "x"}')
    variants = [
        body.replace(b'"topic": "t"', b'"topic": "\xff"'),
        body.replace(b'"x"', b'"\xc3("'),
        body.replace(b"[1]", b'["\xe9"]'),
        body.replace(b'"x"', b'"\xc3\xa9"'),
    ]
    batch = assert_same([body] + variants + [body])
    assert batch.column("kind").to_pylist() == ["row", "malformed", "malformed", "malformed", "row", "row"]
