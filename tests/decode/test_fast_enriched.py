"""The enriched family's fast path (``families/enriched.py``): enriched values in the v2 wrapper are
taken whole batches at a time and come out exactly as the general path makes them; whatever it
cannot prove (a foreign ``source``, repeated or escaped keys, a Key with a schema) falls back.
"""

from __future__ import annotations

from .fast_check import assert_same, bench_decode, fast_count, wrap


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
        wrap("[1]", value(op='"u"', before='{"id": 1, "price": 12.40}')),
        wrap('{"id": 1}', value(source=src.replace('"origin": "cockroachdb"', '"origin": "other"'))),
        wrap('{"id": 1}', value(source=src.replace(', "origin": "cockroachdb"', ""))),
        wrap(
            '{"id": 1}',
            value(source=src.replace('"node": 1', "").replace('"ts_ns": 1747', '"ts_ns": 1747, "ts_ns": 1747')),
        ),
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


def test_repeated_keys_behind_canonical_bodies_fall_back() -> None:
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
    assert fast_count(enriched * 3) == 9


def test_an_hlc_with_a_space_is_malformed_not_an_exception() -> None:
    bodies = bench_decode.make_bodies(3, seed=2, envelope="enriched")
    field = b'"ts_hlc": "'
    bad = bodies[1].replace(field, field + b" ")
    assert bad != bodies[1]
    batch = assert_same([bodies[0], bad, bodies[2]])
    assert batch.column("kind").to_pylist() == ["row", "malformed", "row"]


def test_invalid_utf8_anywhere_falls_back() -> None:
    """UTF-8 is checked on every value of a non-ASCII body (all ASCII: nothing to check)."""
    body = bench_decode.make_bodies(3, seed=12, envelope="enriched")[1]
    variants = [
        body.replace(b'"cluster_name": ""', b'"cluster_name": "\xff"'),
        body.replace(b'{"Key":{"city": "', b'{"Key":{"city": "\xc3(', 1),
        body.replace(b'"op": "u"', b'"op": "\xe9"'),
        body.replace(b'"cluster_name": ""', b'"cluster_name": "\xc3\xa9"'),
    ]
    assert all(v != body for v in variants)
    batch = assert_same([body] + variants + [body])
    assert batch.column("kind").to_pylist()[1:3] == ["malformed", "malformed"]


def _with_schema(body: bytes, name: str = '"cockroachdb.envelope"', key: str | None = None) -> bytes:
    """An enriched body of make_bodies with enriched_properties=schema (schema blocks abridged)."""
    head, value_topic = body.split(b',"Value":', 1)
    value, topic = value_topic.rsplit(b',"Topic":', 1)
    schema = (
        '{"fields": [{"field": "op", "optional": false, "type": "string"}], "name": ' + name + ', "type": "struct"}'
    )
    key_text = key if key is not None else head[len(b'{"Key":') :].decode()
    key_obj = '{"payload": ' + key_text + ', "schema": {"name": "k", "type": "struct"}}'
    return (
        '{"Key":'
        + key_obj
        + ',"Value":{"payload": '
        + value.decode()
        + ', "schema": '
        + schema
        + '},"Topic":'
        + topic.decode()
    ).encode()


def test_values_with_a_schema_block_take_the_fast_path_and_match() -> None:
    bodies = [_with_schema(b) for b in bench_decode.make_bodies(6, seed=15, envelope="enriched")]
    assert fast_count(bodies) == len(bodies) and fast_count(bodies, "enriched") == len(bodies)
    batch = assert_same(bodies)
    assert batch.column("key").to_pylist()[0].startswith('{"city": ')
    assert_same(bodies, envelope="enriched")
    assert_same(bodies, envelope="debezium")


def test_schema_block_variants_fall_back_exactly() -> None:
    body = bench_decode.make_bodies(3, seed=16, envelope="enriched")[1]
    variants = [
        _with_schema(body),
        _with_schema(body, '"other.envelope"'),  # another name: Debezium under auto, malformed
        _with_schema(body, '"cockroachdb.envelop\\u0065"'),
        _with_schema(body, "null"),  # no name: the payload decides (enriched)
        _with_schema(body, key="null"),
        _with_schema(body, key="[1, 2]"),
        _with_schema(body, key="7"),  # a key payload must be an array, an object or null
        _with_schema(body, key='"k"'),
        _with_schema(body).replace(b'"name": "cockroachdb.envelope"', b'"name": "x", "name": "cockroachdb.envelope"'),
        _with_schema(body).replace(b'{"Key":{"payload": ', b'{"Key":{"payload": 1, "payload": ', 1),
        _with_schema(body).replace(b'"Value":{"payload": ', b'"Value":{"payload":', 1),
        _with_schema(body),
    ]
    for envelope in ("auto", "enriched", "debezium"):
        assert_same(variants * 2, envelope=envelope)
    kinds = assert_same(variants).column("kind").to_pylist()
    assert kinds[0] == kinds[-1] == "row" and kinds[8] == "malformed"
    assert fast_count(variants) >= 5
