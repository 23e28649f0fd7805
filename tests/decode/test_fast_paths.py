"""The fast paths (wrapped, typed rows, bare, enriched, Debezium) against the general path alone.

Every batch is decoded twice, with the fast paths on and off (``decoding._FAST_PATHS``), and the
two record batches must be equal: same rows, same values, same malformed reasons. The canonical
bodies must actually take a fast path (so these tests are not vacuous); everything else (duplicate
keys, whitespace or order variants, escapes, values the bulk typed conversion is unsure of) must
fall back and come out exactly as the general path makes it.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from crdb_pubsub import decode_messages
from crdb_pubsub.decode import decoder as decoding
from crdb_pubsub.decode import fast_learned

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import bench_decode  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / "shared"
if not (SHARED / "conformance").is_dir():
    SHARED = Path("/work/shared")
CONFORMANCE = [
    json.loads(line)["body"].encode()
    for name in ("crdb_examples.jsonl", "debezium_examples.jsonl")
    for line in (SHARED / "conformance" / name).read_text().splitlines()
]
FAMILIES = bench_decode.ENVELOPES
TYPED = bench_decode.TYPED_SCHEMA


def both(bodies: list[bytes], **kw) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    fast = decode_messages(bodies, **kw)
    decoding._FAST_PATHS = False
    try:
        general = decode_messages(bodies, **kw)
    finally:
        decoding._FAST_PATHS = True
    return fast, general


def _nan_free(value):
    """Python values with NaN made comparable (Arrow's equals, like ==, never matches NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    return value


def assert_same(bodies: list[bytes], **kw) -> pa.RecordBatch:
    fast, general = both(bodies, **kw)
    assert fast.schema.equals(general.schema)
    for name in fast.schema.names:
        f, g = fast.column(name), general.column(name)
        if not f.equals(g):  # only NaN may compare unequal
            fl, gl = _nan_free(f.to_pylist()), _nan_free(g.to_pylist())
            assert fl == gl, (name, [(i, a, b) for i, (a, b) in enumerate(zip(fl, gl)) if a != b][:3])
            assert f.is_valid().equals(g.is_valid())
    return fast


def fast_count(bodies: list[bytes], envelope: str = "auto") -> int:
    return sum(len(idx) for idx, _ in decoding._fast_parts(bodies, envelope))


def wrap(key: str, value: str, topic: str = "t") -> bytes:
    return ('{"Key":' + key + ',"Value":' + value + ',"Topic":"' + topic + '"}').encode()


# -- canonical bodies take the fast paths and match the general path -------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_bodies_take_the_fast_path_and_match(family: str) -> None:
    bodies = bench_decode.make_bodies(500, seed=3, envelope=family)
    assert fast_count(bodies) == len(bodies)
    kw = {"row_schema": TYPED} if family == "typed" else {}
    batch = assert_same(bodies, **kw)
    assert batch.num_rows == 500 and "malformed" not in batch.column("kind").to_pylist()


@pytest.mark.parametrize("family", ["wrapped", "bare", "enriched", "debezium"])
def test_generated_bodies_typed(family: str) -> None:
    bodies = bench_decode.make_bodies(300, seed=5, envelope=family)
    schema = "city STRING, creation_time TIMESTAMP, ext STRING, id STRING, price DECIMAL(10,2), type STRING"
    batch = assert_same(bodies, row_schema=schema)
    assert batch.column("kind").to_pylist().count("row") == 300


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


# -- non-canonical bodies fall back -----------------------------------------------------------------

META = '{"updated": "1701102296662969433.0000000002"}'


def test_bare_variants_fall_back_exactly() -> None:
    canonical = wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d": 26.30}}')
    variants = [
        canonical,
        wrap('[1]', '{"__crdb__": ' + META + ', "b": "x", "a": 1, "c": {"d": 26.30}}'),  # other key order
        wrap('[1]', '{"__crdb__": ' + META + ',"a": 1, "b": "x", "c": {"d": 26.30}}'),  # spacing
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x", "a": 2}'),  # duplicate column
        wrap('[1]', '{"__crdb__":' + META + ',"a":1,"b":"x","a":1,"c": {"d": 26.30}}'),  # duplicate, compacted
        wrap('[1]', '{"__crdb__": ' + META + ', "\\u0061": 1, "b": "x", "c": {"d": 26.30}}'),  # escaped key
        wrap('[1]', '{"__crdb__": {"updated": "1.0000000000", "updated": "2.0000000000"}, "a": 1}'),
        wrap('[1]', '{"__crdb__": {"resolved": "1.0000000000"}, "a": 1}'),
        wrap('[1]', '{"__crdb__": {"updated": "9999999999999999999.0000000000"}, "a": 1}'),  # beyond int64
        wrap('[1]', '{"__crdb__": {"updated": "12"}, "a": 1}'),  # not an HLC
        wrap('[1]', '{"__crdb__": {"key": 5}, "a": 1}'),  # meta key must be an array or object
        wrap('[1]', '{"__crdb__": {"topic": 5}, "a": 1}'),
        wrap('null', '{"__crdb__": {"key": [2], "topic": "m"}, "a": 1}'),
        wrap('"k"', '{"__crdb__": ' + META + ', "a": 1}'),
        wrap('[1]', '{"__crdb__": ' + META + ', "a": "\xff"}'.encode("latin-1").decode("latin-1")),
        wrap('[1]', '{"a": 1, "__crdb__": ' + META + '}'),  # __crdb__ not first
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1}', "t\\u00e9"),
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1}', "café"),
    ]
    variants.append(canonical.replace(b'"x"', b'"\xff"'))  # invalid UTF-8
    batch = assert_same(variants)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == "row" and kinds[3] == "malformed" and kinds[4] == "malformed"
    assert batch.column("after").to_pylist()[1] == '{"b": "x", "a": 1, "c": {"d": 26.30}}'
    # Another key order is canonical too (a layout is learned from it); other spacing is not.
    assert fast_count([canonical]) == 1 and fast_count(variants[1:2]) == 1 and fast_count(variants[2:3]) == 0


def test_enriched_variants_fall_back_exactly() -> None:
    src = ('{"changefeed_sink": "pubsub", "mvcc_timestamp": "1747243394200039000.0000000000", '
           '"origin": "cockroachdb", "table_name": "products", "ts_hlc": "1747243394200039000.0000000000", '
           '"ts_ns": 1747243394200039000}')  # fmt: skip
    def value(**kw: str) -> str:
        fields = {"after": '{"id": 1, "price": 12.50}', "op": '"c"', "source": src, "ts_ns": "1747243394886231000"}
        fields.update(kw)
        return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items() if v is not None) + "}"

    variants = [
        wrap('{"id": 1}', value()),
        wrap('[1]', value(op='"u"', before='{"id": 1, "price": 12.40}')),
        wrap('{"id": 1}', value(source=src.replace('"origin": "cockroachdb"', '"origin": "other"'))),
        wrap('{"id": 1}', value(source=src.replace(', "origin": "cockroachdb"', ""))),
        wrap('{"id": 1}', value(source=src.replace('"node": 1', "") .replace('"ts_ns": 1747', '"ts_ns": 1747, "ts_ns": 1747'))),
        wrap('{"id": 1}', value(source=src.replace('"products"', '"pro\\u0064ucts"'))),
        wrap('{"id": 1}', value(source=src.replace('"products"', '""'))),
        wrap('{"id": 1}', value(source=src.replace('"products"', "7"))),
        wrap('{"id": 1}', value(source=src.replace('"ts_hlc": "1747243394200039000.0000000000", ', ""))),
        wrap('{"id": 1}', value(source="null")),
        wrap('{"id": 1}', value(source=None, ts_ns='"soon"')),
        wrap('{"id": 1}', value(source=None, ts_ns="-5")),
        wrap('{"id": 1}', value(source=None)),
        wrap('{"id": 1}', value(op='"x"')),
        wrap('{"id": 1}', value(after="[1]")),
        wrap('{"id": 1, "id": 2}', value()),
        wrap('{"payload": {"id": 1}, "schema": {}}', value()),
        wrap('{"id": 1}', value(key='{"id": 1}')),
        wrap('{"id": 1}', value(key="7")),
        wrap('{"id": 1}', value().replace('"op": "c"', '"op": "c", "op": "d"')),
    ]
    batch = assert_same(variants)
    assert fast_count(variants[:2]) == 2
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == kinds[1] == "row" and kinds[-1] == "malformed"
    assert batch.column("envelope").to_pylist()[2] == "debezium"  # a foreign origin is not CockroachDB's


def test_debezium_variants_fall_back_exactly() -> None:
    src = ('{"version":"2.7.3.Final","connector":"postgresql","name":"movr","ts_ms":1747243394205,'
           '"snapshot":"false","db":"movr","ts_us":1747243394205125,"schema":"public","table":"vehicles"}')  # fmt: skip

    def body(**kw: str) -> bytes:
        fields = {"before": "null", "after": '{"id":1,"price":26.30}', "source": src, "op": '"c"',
                  "ts_ms": "1747243394212", "transaction": "null"}  # fmt: skip
        fields.update(kw)
        return ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items() if v is not None) + "}").encode()

    variants = [
        body(),
        body(op='"u"', before='{"id":1,"price":26.20}'),
        body(op='"d"', after="null", before='{"id":1}'),
        body(op='"t"', after=None, before=None),
        body(op='"m"'),
        body(op="null"),
        body(source=src.replace('"ts_us":1747243394205125', '"ts_us":0')),
        body(source=src.replace('"ts_us":1747243394205125', '"ts_us":"x"')),
        body(source=src.replace('"ts_us":1747243394205125', '"ts_us":99999999999999999999')),
        body(source=src.replace('"ts_us":1747243394205125,', '"commit_ts":446264831787532295,')),
        body(source=src.replace('"ts_us":1747243394205125,', '"commit_ts":-1,"ts_ms":0,')),
        body(source=src.replace('"vehicles"', '"veh\\u0069cles"')),
        body(source=src.replace('"vehicles"', "5")),
        body(source=src.replace('"vehicles"', '""')),
        body(source=src.replace('"db":"movr"', '"db":"movr","db":"x"')),
        body(source="null"),
        body(source=None),
        body(ts_ms="-1", source="null"),
        body(ts_ms="9223372036854775807", source="null"),
        body(ts_ms=None),
        body(ddl='"CREATE TABLE t ()"'),
        body().replace(b'"op":"c"', b'"op": "c"'),
        body().replace(b'"op":"c"', b'"op":"c","op":"c"'),
        body().replace(b"{", b" {", 1),
        body(after='{"id":"\xff"}'.encode("latin-1").decode("latin-1")),
    ]
    variants.append(body().replace(b'"movr"', b'"m\xffr"', 1))
    batch = assert_same(variants)
    assert fast_count(variants[:4]) == 4
    assert batch.column("op").to_pylist()[:4] == ["c", "u", "d", "t"]


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


# -- typed rows in bulk -----------------------------------------------------------------------------


def test_typed_values_the_bulk_conversion_must_leave_to_the_general_path() -> None:
    schema = "i BIGINT, s SMALLINT, d DECIMAL(6,2), f DOUBLE, r FLOAT, b BOOLEAN, t STRING, ts TIMESTAMP, a ARRAY<INT>, n INT NOT NULL"
    rows = [
        '{"i": 9223372036854775807, "s": 7, "d": 26.30, "f": 1.5, "r": 0.1, "b": true, "t": "x", "ts": "2025-05-09T21:20:29.203923Z", "a": [1, null], "n": 1}',
        '{"i": -9223372036854775808, "s": -32768, "d": -0.00, "f": "NaN", "r": "Infinity", "b": false, "t": 12.50, "ts": null, "a": null, "n": 0}',
        '{"i": 9223372036854775808, "n": 1}',  # beyond BIGINT
        '{"i": 1.0, "n": 1}',
        '{"i": "1", "n": 1}',
        '{"s": 32768, "n": 1}',
        '{"d": 1234.567, "n": 1}',  # too much scale
        '{"d": 12345.6, "n": 1}',  # too many integer digits
        '{"d": 26.300, "n": 1}',  # trailing zero beyond the scale: fits
        '{"d": 1e2, "n": 1}',
        '{"d": "1", "n": 1}',
        '{"f": 1e400, "n": 1}',
        '{"f": "nope", "n": 1}',
        '{"b": 1, "n": 1}',
        '{"t": "tab\\there \\"q\\" \\u00e9", "n": 1}',
        '{"t": {"nested": [1, 2]}, "n": 1}',
        '{"t": "a", "t": "b", "n": 1}',  # the last one wins, as with the converter's dict
        '{"ts": "2025-05-09 21:20:29+02:00", "n": 1}',
        '{"ts": "yesterday", "n": 1}',
        '{"a": [1, "x"], "n": 1}',
        '{"n": null}',
        '{}',
        '{"extra": 1, "n": 2}',
    ]
    bodies = [wrap("[1]", '{"after": ' + r + ', "before": ' + r + ', "updated": "1.0000000000"}') for r in rows]
    bodies.append(wrap("[1]", '{"after": null, "before": {"n": 1}}'))
    bodies.append(wrap("[1]", '{"after": null, "before": null}'))
    batch = assert_same(bodies, row_schema=schema)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == kinds[1] == "row" and kinds[2] == "malformed"
    after = batch.column("after").to_pylist()
    assert str(after[8]["d"]) == "26.30" and after[14]["t"] == 'tab\there "q" é' and after[15]["t"] == '{"nested": [1, 2]}'
    assert after[16]["t"] == "b"
    assert_same(bodies, row_schema=schema, mode="DROPMALFORMED")
    with pytest.raises(decoding.MalformedMessageError) as exc:
        decode_messages(bodies, row_schema=schema, mode="FAILFAST")
    decoding._FAST_PATHS = False
    try:
        with pytest.raises(decoding.MalformedMessageError) as exc_general:
            decode_messages(bodies, row_schema=schema, mode="FAILFAST")
    finally:
        decoding._FAST_PATHS = True
    assert str(exc.value) == str(exc_general.value)


def test_typed_random_values_match() -> None:
    rng = random.Random(4)
    schema = "a BIGINT, b DECIMAL(12,2), c DOUBLE, d STRING, e INT, f BOOLEAN"
    bodies = []
    for _ in range(400):
        vals = {
            "a": rng.choice([str(rng.randrange(-(2**64), 2**64)), "0", "-0", "null", "1e3", '"7"']),
            "b": rng.choice([f"{rng.randrange(-10**12, 10**12) / 100:.2f}", "0.5", "-0.001", "10000000000.00",
                             f"{rng.random():.5f}", "null", "1E+2"]),
            "c": rng.choice([repr(rng.uniform(-1e300, 1e300)), "0.1", "-0.0", '"-Infinity"', "5e-324", "1e309"]),
            "d": rng.choice(['"plain"', '"esc\\\\aped"', "12.50", "true", "null", '"\\ud83d\\ude00"']),
            "e": rng.choice([str(rng.randrange(-(2**32), 2**32)), "null"]),
            "f": rng.choice(["true", "false", "null", '"true"']),
        }
        keys = list(vals)
        rng.shuffle(keys)
        row = "{" + ", ".join(f'"{k}": {vals[k]}' for k in keys if rng.random() > 0.1) + "}"
        bodies.append(wrap("[1]", '{"after": ' + row + "}"))
    batch = assert_same(bodies, row_schema=schema)
    assert 0 < batch.column("kind").to_pylist().count("malformed") < 400


def test_bare_batch_variants_behind_a_canonical_first_body() -> None:
    """The whole-batch bare check (layout learned from the first body) takes only exact bodies."""
    row = '"a": 1, "b": "x", "c": {"d": 26.30}'
    canonical = wrap('[1]', '{"__crdb__": ' + META + ', ' + row + '}')
    variants = [
        canonical,
        wrap('[1]', '{"__crdb__": ' + META + ', "a":  1, "b":"x", "c": {"d": 26.30}}'),  # a space moved
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d":26.30}}'),  # compact inside a value
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d": 26.30} }'),  # space before }
        wrap('[1]', '{"__crdb__": ' + META + ',"a":1,"b":"x","a":1, "c": {"d": 26.30}}'),  # duplicate, compacted
        wrap('[1]', '{"__crdb__": ' + META + ', "\\u0061": 1, "b": "x", "c": {"d": 26.30}}'),  # escaped key
        wrap('[1]', '{"a": 1, "__crdb__": ' + META + ', "b": "x", "c": {"d": 26.30}}'),  # __crdb__ second
        wrap('[1]', '{"__crdb__": ' + META + ', "b": "x", "a": 1, "c": {"d": 26.30}}'),  # row key order
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x, \\"y\\": ", "c": {"d": 26.30}}'),
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x", "c": {"d": 26.30}, "e": null}'),
        wrap('[1]', '{"__crdb__": ' + META + ', "a": 1, "b": "x"}'),
        wrap('[1] ', '{"__crdb__": ' + META + ', ' + row + '}'),  # wrapper whitespace
        b'{"Key":[1],"Key":[2],"Value":{"__crdb__": ' + META.encode() + b', ' + row.encode() + b'},"Topic":"t"}',
        wrap('[1]', '{"__crdb__": {}, ' + row + '}'),
        wrap('[1]', '{"__crdb__": ' + META + ', ' + row + '}', "t\\u0074"),
        canonical.replace(b'"x"', b'"\xff"'),  # invalid UTF-8
        canonical,
    ]
    batch = assert_same(variants * 3)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == kinds[16] == "row"
    assert fast_count([canonical] * 4) == 4
    assert fast_learned._bare_quick([canonical] * 3, fast_learned._accept_bare) is not None
    quick = fast_learned._bare_quick(variants, fast_learned._accept_bare)
    # Layout proven: canonical ones, body key order of the row, a string holding ", \"y\": ", an empty
    # __crdb__ and invalid UTF-8 (these two are then left to the general path by _bare_part's checks).
    assert quick is not None and quick.idx.tolist() == [0, 7, 8, 13, 15, 16]


def test_enriched_and_debezium_repeated_keys_behind_canonical_bodies() -> None:
    """The spaceless proof (no repeated key) against bodies of the layout learned from the first."""
    enriched = bench_decode.make_bodies(3, seed=11, envelope="enriched")
    e = enriched[1]
    src_at = e.index(b'"source": {') + len(b'"source": {')
    variants = [
        e.replace(b'"op": "u", ', b'"op":"u","op":"u",'),  # repeated, paid for with spaces left out
        e.replace(b'"op": "u", ', b'"op":\t"u", '),  # a tab instead of a space
        e.replace(b'"op": "u", ', b'"op": "u",  '),  # one space more
        e.replace(b'"op": "u", ', b'"\\u006fp": "u", '),  # escaped key
        e[:src_at] + b'"origin":"x",' + e[src_at:].replace(b'", "', b'","', 2),  # source key repeated
        e.replace(b'{"Key":{"city": ', b'{"Key":{"city":"x","city": ', 1),  # Key object key repeated
        e.replace(b'"Topic":"vehicles"', b'"Topic":"veh\\u0069cles"'),
        e.replace(b'"Topic":"vehicles"', b'"Topic": "vehicles"'),
    ]
    assert all(v != e for v in variants)
    batch = assert_same(enriched + variants + enriched)
    assert batch.column("kind").to_pylist()[3] == "malformed"
    debezium = bench_decode.make_bodies(3, seed=11, envelope="debezium")
    d = debezium[1]
    variants = [
        d.replace(b'"op":"u",', b'"op":"u","op":"c",'),
        d.replace(b'"table":"vehicles",', b'"table":"x","table":"vehicles",'),
        d.replace(b'"table":"vehicles",', b'"table": "vehicles", '),
        d.replace(b'"ts_ms":', b'"ts_\\u006ds":', 1),
    ]
    assert all(v != d for v in variants)
    assert_same(debezium + variants + debezium)
    assert fast_count(enriched * 3) == 9 and fast_count(debezium * 3) == 9


@pytest.mark.parametrize("family", ["bare", "enriched"])
def test_an_hlc_with_a_space_is_malformed_not_an_exception(family: str) -> None:
    bodies = bench_decode.make_bodies(3, seed=2, envelope=family)
    field = b'"updated": "' if family == "bare" else b'"ts_hlc": "'
    bad = bodies[1].replace(field, field + b" ")
    assert bad != bodies[1]
    batch = assert_same([bodies[0], bad, bodies[2]])
    assert batch.column("kind").to_pylist() == ["row", "malformed", "row"]
