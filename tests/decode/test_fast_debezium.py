"""The Debezium family's fast path (``families/debezium.py``): change events as the JSON converter
writes them (compact, schemas disabled) are taken whole batches at a time and come out exactly as
the general path makes them; other ops, odd times or tables, repeated keys and spacing fall back.
"""

from __future__ import annotations

from .fast_check import assert_same, bench_decode, fast_count


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


def test_repeated_keys_behind_canonical_bodies_fall_back() -> None:
    """The spaceless proof (no repeated key) against bodies of the layout learned from the first."""
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
    assert fast_count(debezium * 3) == 9


def test_invalid_utf8_anywhere_falls_back() -> None:
    """UTF-8 is checked on the values taken out, and on every other value of a non-ASCII body."""
    body = bench_decode.make_bodies(3, seed=12, envelope="debezium")[1]
    variants = [
        body.replace(b'"transaction":null', b'"transaction":{"id":"\xff"}'),  # a value not read
        body.replace(b'"ts_us":', b'"ts_us":"\xc3(",', 1).replace(b',"ts_us":"\xc3(",', b',"ts_us":"\xc3(","x":', 1),
        body.replace(b'"snapshot":"false"', b'"snapshot":"f\xe9"'),  # inside source, a field not read
        body.replace(b'"op":"u"', b'"op":"\xff"'),
        body.replace(b'"snapshot":"false"', b'"snapshot":"f\xc3\xa9"'),  # valid non-ASCII
    ]
    batch = assert_same([body] + variants + [body])
    assert batch.column("kind").to_pylist()[1] == "malformed" and batch.column("kind").to_pylist()[5] == "row"


SCHEMA = '{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"srv.public.t.Envelope"}'


def test_events_with_a_schema_block_take_the_fast_path_and_match() -> None:
    body = bench_decode.make_bodies(4, seed=13, envelope="debezium")
    framed = [('{"schema":' + SCHEMA + ',"payload":' + b.decode() + "}").encode() for b in body]
    ticdc = [('{"payload":' + b.decode() + ',"schema":' + SCHEMA + "}").encode() for b in body]
    alone = [('{"payload":' + b.decode() + "}").encode() for b in body]
    for bodies in (framed, ticdc, alone):
        assert fast_count(bodies) == len(bodies) and fast_count(bodies, "debezium") == len(bodies)
        assert_same(bodies)
        assert_same(bodies, envelope="debezium")
        assert_same(bodies, envelope="enriched")


def test_schema_block_variants_fall_back_exactly() -> None:
    event = bench_decode.make_bodies(3, seed=14, envelope="debezium")[1].decode()

    def framed(schema: str, payload: str = event) -> bytes:
        return ('{"schema":' + schema + ',"payload":' + payload + "}").encode()

    variants = [
        framed(SCHEMA),
        framed(SCHEMA.replace('"optional":false,"name"', '"optional":false,"optional":true,"name"')),  # repeated key
        framed(SCHEMA.replace('"srv.public.t.Envelope"', '"cockroachdb.envelope"')),  # enriched's name
        framed(SCHEMA.replace('"srv.public.t.Envelope"', '"cockroachdb.envelop\\u0065"')),  # ... escaped
        framed(SCHEMA.replace('"srv.public.t.Envelope"', "7")),  # a name that is no string: the origin decides
        framed(SCHEMA.replace('"name":"srv.public.t.Envelope"', '"title":"x"')),
        framed("null"),
        framed("[1, 2]"),
        framed(
            '{"name":"x"}', event.replace('"connector":"postgresql"', '"origin":"cockroachdb","connector":"postgresql"')
        ),
        framed("null", event.replace('"connector":"postgresql"', '"origin":"cockroachdb","connector":"postgresql"')),
        framed(SCHEMA, event.replace('"op":"u"', '"op":"u","op":"u"')),  # repeated inside the payload
        framed(SCHEMA).replace(b'{"schema":', b'{"schema":' + SCHEMA.encode() + b',"schema":', 1),  # repeated schema
        framed(SCHEMA).replace(b',"payload":', b', "payload":', 1),  # whitespace
        b'{"schema":null,"payload":null}',
        framed(SCHEMA),
    ]
    for envelope in ("auto", "debezium", "enriched"):
        assert_same(variants * 2, envelope=envelope)
    kinds = assert_same(variants).column("kind").to_pylist()
    assert kinds[0] == kinds[-1] == "row" and kinds[1] == "malformed" and kinds[-2] == "tombstone"
    assert fast_count(variants) >= 4
