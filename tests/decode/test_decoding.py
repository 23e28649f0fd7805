"""decode_messages: envelopes, op derivation, modes, typed rows, bad inputs, metadata, schema.

Expected values are written from CockroachDB's documented changefeed formats (the envelopes, each SQL
type's JSON encoding, HLC timestamps as ``"<wall time in ns>.<10-digit logical>"`` strings), not taken
from the decoder's output.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

import crdb_pubsub
from crdb_pubsub import DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched
from crdb_pubsub.decode.ddl import DDLError, parse_ddl, to_ddl
from crdb_pubsub.decode.envelopes import Context, decode_body
from crdb_pubsub.decode.schema import COLUMN_NAMES, arrow_schema

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def ns(nanos: int) -> dt.datetime:
    """Wall-clock nanoseconds as a microsecond timestamp (truncated), computed independently."""
    return EPOCH + dt.timedelta(microseconds=nanos // 1000)


def v2(key: str, value: str, topic: str) -> bytes:
    """The Pub/Sub v2 sink's hand-built wrapper: compact, Value embedded as JSON."""
    return ('{"Key":' + key + ',"Value":' + value + ',"Topic":"' + topic + '"}').encode()


def rows(batch: pa.RecordBatch) -> list[dict]:
    return batch.to_pylist()


def one(body: bytes, **kw) -> dict:
    out = rows(decode_messages([body], **kw))
    assert len(out) == 1, out
    return out[0]


# -- schema and API --------------------------------------------------------------------------------


def test_exports() -> None:
    assert crdb_pubsub.decode_messages is decode_messages
    assert crdb_pubsub.schema_from_enriched is schema_from_enriched
    assert issubclass(MalformedMessageError, ValueError)


def test_schema_equals_contract_untyped_and_typed() -> None:
    body = v2("[1]", '{"after": {"a": 1}}', "t")
    assert decode_messages([body]).schema.equals(arrow_schema())
    assert decode_messages([]).schema.equals(arrow_schema())
    assert decode_messages([b"junk"]).schema.equals(arrow_schema())
    struct = parse_ddl("a BIGINT, b STRING")
    batch = decode_messages([body], row_schema="a BIGINT, b STRING")
    assert batch.schema.equals(arrow_schema(struct))
    assert decode_messages([body], row_schema=struct).schema.equals(arrow_schema(struct))
    assert batch.schema.names == list(COLUMN_NAMES)


@pytest.mark.parametrize("bad", ["nope", "", None, 3, "WRAPPED_X"])
def test_bad_envelope_argument(bad) -> None:
    with pytest.raises(ValueError) as exc:
        decode_messages([b"{}"], envelope=bad)
    text = str(exc.value)
    assert "envelope" in text and repr(bad) in text and "wrapped" in text and "debezium" in text


def test_bad_mode_argument() -> None:
    with pytest.raises(ValueError) as exc:
        decode_messages([b"{}"], mode="LENIENT")
    assert "mode" in str(exc.value) and "'LENIENT'" in str(exc.value) and "FAILFAST" in str(exc.value)
    # Spark's mode names are case-insensitive; so are ours.
    assert decode_messages([b"{}"], mode="failfast").num_rows == 1


def test_csv_needs_row_schema() -> None:
    with pytest.raises(ValueError, match="row_schema"):
        decode_messages([b"1,Alice"], envelope="csv")


def test_metadata_must_align() -> None:
    with pytest.raises(ValueError, match="message_ids"):
        decode_messages([b"{}", b"{}"], message_ids=["a"])


# -- envelopes -------------------------------------------------------------------------------------


def test_v2_wrapped_fast_path_fields() -> None:
    body = v2(
        '["amsterdam", "09ee2856-5856-40c4-85d3-7d65bed978f0"]',
        '{"after": {"city": "amsterdam", "revenue": 26.30}, "updated": "1701102296662969433.0000000002"}',
        "rides",
    )
    r = one(body)
    assert r["kind"] == "row" and r["envelope"] == "wrapped"
    assert r["topic"] == "rides" and r["table_name"] == "rides"
    assert r["key"] == '["amsterdam", "09ee2856-5856-40c4-85d3-7d65bed978f0"]'
    assert r["op"] == "u" and r["before"] is None
    assert r["after"] == '{"city": "amsterdam", "revenue": 26.30}'
    assert r["updated"] == "1701102296662969433.0000000002"
    assert r["commit_time"] == ns(1701102296662969433)  # truncated to microseconds
    assert r["error"] is None and r["data"] is None and r["resolved"] is None


def test_fast_and_general_paths_agree() -> None:
    bodies = [
        v2(
            "[1]",
            '{"after": {"a": 1}, "before": null, "mvcc_timestamp": "5000.0000000000", "updated": "6000.0000000001"}',
            "foo",
        ),
        v2("[2]", '{"after": null, "before": {"a": 2}}', "foo.fam"),
        v2("[3]", '{"after": {"a": 3}, "before": {"a": 2}, "updated": "7000.0000000000"}', "d.public.foo"),
    ]
    fast = rows(decode_messages(bodies))
    general = []
    for b in bodies:
        (row,) = decode_body(b, Context("auto"))
        general.append(row)
    for f, g in zip(fast, general):
        for name in ("kind", "envelope", "topic", "table_name", "key", "op", "updated", "mvcc_timestamp"):
            assert f[name] == getattr(g, name), name
        assert f["after"] == (g.after.decode() if g.after is not None else None)
        assert f["before"] == (g.before.decode() if g.before is not None else None)
    assert [r["op"] for r in fast] == ["c", "d", "u"]
    assert [r["table_name"] for r in fast] == ["foo", "foo", "foo"]
    # updated wins over mvcc_timestamp for commit_time: 6000 ns -> 6 us.
    assert fast[0]["commit_time"] == dt.datetime(1970, 1, 1, 0, 0, 0, 6, tzinfo=UTC)


def test_mixed_batch_keeps_message_order() -> None:
    webhook = (
        b'{"payload":[{"after":{"a":1},"key":[1],"topic":"foo"},{"after":{"a":2},"key":[2],"topic":"foo"}],"length":2}'
    )
    bodies = [v2("[0]", '{"after": {"a": 0}}', "foo"), webhook, b"bad", v2("[9]", '{"after": {"a": 9}}', "foo")]
    out = rows(decode_messages(bodies, message_ids=["m0", "m1", "m2", "m3"]))
    assert [(r["message_id"], r["kind"], r["key"]) for r in out] == [
        ("m0", "row", "[0]"),
        ("m1", "row", "[1]"),
        ("m1", "row", "[2]"),
        ("m2", "malformed", None),
        ("m3", "row", "[9]"),
    ]


def test_legacy_lowercase_wrapper() -> None:
    r = one(b'{"key":[1],"value":{"after":{"a":1}},"topic":"foo"}')
    assert (r["envelope"], r["key"], r["topic"], r["after"], r["op"]) == ("wrapped", "[1]", "foo", '{"a":1}', "u")


def test_wrapped_op_derivation() -> None:
    cases = {
        '{"after": {"a": 1}}': "u",
        '{"after": null}': "d",
        '{"after": {"a": 1}, "before": null}': "c",
        '{"after": {"a": 1}, "before": {"a": 0}}': "u",
        '{"after": null, "before": {"a": 0}}': "d",
    }
    for value, op in cases.items():
        assert one(value.encode())["op"] == op, value
        assert one(v2("[1]", value, "t"))["op"] == op, value


def test_bare_envelope_rebuilds_row_exactly() -> None:
    body = b'{"__crdb__": {"key": [1], "mvcc_timestamp": "2000.0000000000", "topic": "foo", "updated": "3000.0000000000"}, "a": 1, "b": "bar", "d": 26.30}'
    r = one(body)
    assert r["envelope"] == "bare" and r["kind"] == "row" and r["op"] == "u"
    # CockroachDB's own ", " / ": " separators: the row comes out byte-identical to its encoder.
    assert r["after"] == '{"a": 1, "b": "bar", "d": 26.30}'
    assert (r["key"], r["topic"], r["updated"], r["mvcc_timestamp"]) == (
        "[1]",
        "foo",
        "3000.0000000000",
        "2000.0000000000",
    )
    assert one(body, envelope="row")["envelope"] == "row"


def test_key_only_and_row_envelopes() -> None:
    r = one(b'["boston", "22222222-2222-4200-8000-000000000002"]')
    assert (r["envelope"], r["kind"], r["op"], r["after"]) == ("key_only", "row", None, None)
    assert r["key"] == '["boston", "22222222-2222-4200-8000-000000000002"]'
    r = one(b'{"a": 1, "b": "x"}')
    assert (r["envelope"], r["op"], r["after"]) == ("row", "u", '{"a": 1, "b": "x"}')
    r = one(v2("[1]", '{"a": 1}', "foo"))
    assert (r["envelope"], r["key"], r["topic"], r["after"]) == ("row", "[1]", "foo", '{"a": 1}')


def test_resolved_forms() -> None:
    r = one(b'{"resolved":"1.0000000002"}')
    assert (r["kind"], r["envelope"], r["resolved"], r["op"]) == ("resolved", "wrapped", "1.0000000002", None)
    r = one(b'{"__crdb__":{"resolved":"1681240120058450985.0000000000"}}')
    assert (r["kind"], r["envelope"], r["resolved"]) == ("resolved", "bare", "1681240120058450985.0000000000")
    assert r["commit_time"] == ns(1681240120058450985)
    assert one(b'{"resolved":1}')["kind"] == "malformed"


def test_enriched_plain_and_with_wrapper_object_key() -> None:
    value = '{"after": {"id": 1, "price": 12.50}, "op": "c", "ts_ns": 1745525261013511000}'
    r = one(v2('{"id": 1}', value, "products"))
    assert (r["envelope"], r["op"], r["key"], r["after"]) == ("enriched", "c", '{"id": 1}', '{"id": 1, "price": 12.50}')
    assert r["commit_time"] == ns(1745525261013511000)
    src = (
        '{"mvcc_timestamp": "1747243394200039000.0000000000", "origin": "cockroachdb", "table_name": "products", '
        '"ts_hlc": "1747243394200039000.0000000001", "ts_ns": 1747243394200039000}'
    )
    r = one(
        (
            '{"after": null, "before": {"id": 1}, "op": "d", "source": ' + src + ', "ts_ns": 1747243394886231000}'
        ).encode()
    )
    assert (r["op"], r["table_name"], r["updated"], r["mvcc_timestamp"]) == (
        "d", "products", "1747243394200039000.0000000001", "1747243394200039000.0000000000",
    )  # fmt: skip
    assert r["source"] == src
    assert r["commit_time"] == ns(1747243394200039000)  # source.ts_hlc


def test_enriched_schema_form_vs_debezium() -> None:
    enriched = b'{"payload": {"after": {"a": 1}, "op": "c", "ts_ns": 10}, "schema": {"name": "cockroachdb.envelope", "type": "struct", "fields": []}}'
    r = one(enriched)
    assert (r["envelope"], r["op"], r["after"]) == ("enriched", "c", '{"a": 1}')
    debezium = (
        b'{"payload": {"after": {"a": 1}, "before": null, "op": "c", "ts_ms": 10, '
        b'"source": {"connector": "postgresql", "table": "t", "ts_ms": 0}}, "schema": {"name": "srv.public.t.Envelope"}}'
    )
    r = one(debezium)
    assert (r["envelope"], r["op"], r["table_name"]) == ("debezium", "c", "t")
    assert r["commit_time"] is None  # source.ts_ms 0: unknown, not the processing time (issue 14, item 5)


def test_wrapper_key_with_schema_uses_payload() -> None:
    key = '{"payload": {"id": "x"}, "schema": {"type": "struct"}}'
    r = one(
        v2(
            key,
            '{"payload": {"after": {"id": "x"}, "op": "c", "ts_ns": 1}, "schema": {"name": "cockroachdb.envelope"}}',
            "p",
        )
    )
    assert r["key"] == '{"id": "x"}' and r["envelope"] == "enriched"


def test_webhook_batch_and_wrong_length() -> None:
    ok = b'{"payload":[{"after":{"a":1},"key":[1],"topic":"foo","updated":"5.0000000000"},{"after":null,"key":[2],"topic":"foo.fam"}],"length":2}'
    out = rows(decode_messages([ok], include_raw=True))
    assert [(r["envelope"], r["key"], r["op"], r["table_name"]) for r in out] == [
        ("webhook", "[1]", "u", "foo"), ("webhook", "[2]", "d", "foo"),
    ]  # fmt: skip
    assert all(r["data"] == ok for r in out)
    bad = ok.replace(b'"length":2', b'"length":3')
    r = one(bad)
    assert r["kind"] == "malformed" and "length" in r["error"] and "3" in r["error"] and "2" in r["error"]


def test_debezium_ops_and_kinds() -> None:
    src = '{"connector": "postgresql", "db": "postgres", "schema": "public", "table": "customers", "ts_ms": 1559033904863, "ts_us": 1559033904863769}'
    for op in ("c", "u", "d", "r", "t"):
        after = "null" if op in ("d", "t") else '{"id": 1}'
        r = one(
            ('{"before": null, "after": ' + after + ', "source": ' + src + ', "op": "' + op + '", "ts_ms": 1}').encode()
        )
        assert (r["kind"], r["envelope"], r["op"], r["table_name"]) == ("row", "debezium", op, "customers")
        assert r["commit_time"] == EPOCH + dt.timedelta(microseconds=1559033904863769)  # source.ts_us
        assert r["source"] == src
    msg = '{"source": ' + src + ', "op": "m", "ts_ms": 1, "message": {"prefix": "foo", "content": "Ymfy"}}'
    r = one(msg.encode())
    assert (r["kind"], r["op"], r["after"]) == ("message", "m", '{"prefix": "foo", "content": "Ymfy"}')
    bad_op = one(('{"source": ' + src + ', "op": "x", "ts_ms": 1}').encode())
    assert bad_op["kind"] == "malformed" and "op" in bad_op["error"]


def test_ticdc_watermark_ddl_and_commit_ts() -> None:
    # TSO: physical ms << 18. 1701326309000 ms = 2023-11-30T06:38:29Z.
    tso = 1701326309000 << 18 | 5
    wm = (
        '{"payload": {"source": {"connector": "TiCDC", "commit_ts": '
        + str(tso)
        + ', "ts_ms": 0}, "op": "m", "ts_ms": 1}}'
    )
    r = one(wm.encode())
    assert (r["kind"], r["resolved"]) == ("watermark", str(tso))
    assert r["commit_time"] == EPOCH + dt.timedelta(milliseconds=1701326309000)
    ddl = '{"payload": {"source": {"connector": "TiCDC", "commit_ts": 1, "table": "t2"}, "ts_ms": 5, "ddl": "DROP TABLE t2", "tableChanges": []}}'
    r = one(ddl.encode())
    assert (r["kind"], r["op"], r["table_name"]) == ("ddl", None, "t2")
    assert json.loads(r["after"])["ddl"] == "DROP TABLE t2"


def test_debezium_key_message() -> None:
    r = one(b'{"payload": {"pk": 1}, "schema": {"name": "dbserver1.test.foo.Key", "type": "struct"}}')
    assert (r["kind"], r["envelope"], r["key"], r["op"], r["after"]) == ("row", "debezium", '{"pk": 1}', None, None)


def test_sinkless_key_only_rendering() -> None:
    r = one(b'{"key":"[\\"seattle\\", \\"fff726cc\\"]","table":"users","value":""}')
    assert (r["envelope"], r["key"], r["topic"], r["table_name"], r["op"]) == (
        "key_only", '["seattle", "fff726cc"]', "users", "users", None,
    )  # fmt: skip


def test_forced_envelope_mismatch_is_malformed() -> None:
    r = one(b'["a"]', envelope="wrapped")
    assert r["kind"] == "malformed" and "array" in r["error"]
    r = one(b'{"a": 1}', envelope="wrapped")
    assert r["kind"] == "malformed" and "after" in r["error"]
    assert one(b'{"after": {"a": 1}}', envelope="row")["after"] == '{"after": {"a": 1}}'


def test_table_name_rules() -> None:
    for topic, table in [("foo", "foo"), ("foo.fam", "foo"), ("d.public.MyTable", "MyTable"), ("d.public.t.fam", "t")]:
        assert one(v2("[1]", '{"after": {"a": 1}}', topic))["table_name"] == table


def test_table_name_attribute_comes_first() -> None:
    """topic_name= puts every table on one topic; with_table_name_attribute=true names the table
    in a TABLE_NAME attribute, which wins over the topic (and over the body) on every path."""
    bodies = [
        v2("[1]", '{"after": {"a": 1}}', "cdc_all"),  # fast path
        v2("[2]", '{"after": {"b": 1}, "updated": "1.0000000001"}', "cdc_all"),
        b'{"key":[3],"value":{"after":{"c":1}},"topic":"cdc_all"}',  # general path (legacy)
        v2("[4]", '{"after": {"a": 1}}', "cdc_all"),  # no attribute: the topic
        b'{"resolved":"1.0000000000"}',  # resolved: no attributes
        b"bad",
    ]
    attrs = [
        {"TABLE_NAME": "users"},
        {"TABLE_NAME": "rides", "x": "y"},
        {"TABLE_NAME": "vehicles"},
        {},
        None,
        {"TABLE_NAME": "users"},
    ]
    out = rows(decode_messages(bodies, attributes=attrs))
    assert [r["table_name"] for r in out] == ["users", "rides", "vehicles", "cdc_all", None, "users"]
    assert [r["kind"] for r in out] == ["row", "row", "row", "row", "resolved", "malformed"]
    # Without attributes nothing changes.
    assert [r["table_name"] for r in rows(decode_messages(bodies[:4]))] == ["cdc_all"] * 4


def test_csv_envelope_typed() -> None:
    out = rows(decode_messages([b"1,Alice", "2,d\u00e9sol\u00e9e".encode(), b'3,"x,y"', b"4"], envelope="csv",
                               row_schema="id BIGINT, name STRING"))  # fmt: skip
    assert [r["after"] for r in out[:3]] == [
        {"id": 1, "name": "Alice"},
        {"id": 2, "name": "d\u00e9sol\u00e9e"},
        {"id": 3, "name": "x,y"},
    ]
    assert all(r["envelope"] == "csv" and r["op"] == "r" for r in out[:3])
    assert out[3]["kind"] == "malformed" and "fields" in out[3]["error"]


# -- lossless text ---------------------------------------------------------------------------------


def test_lossless_numbers_strings_unicode() -> None:
    value = '{"after": {"big": 9223372036854775807, "d": 26.30, "e": 1E+2, "f": "NaN", "s": "d\u00e9sol\u00e9e \U0001f600"}}'
    for body in (value.encode(), v2("[1]", value, "t")):
        r = one(body)
        assert (
            r["after"]
            == '{"big": 9223372036854775807, "d": 26.30, "e": 1E+2, "f": "NaN", "s": "d\u00e9sol\u00e9e \U0001f600"}'
        )


# -- modes and stats -------------------------------------------------------------------------------


def test_modes_and_stats() -> None:
    bodies = [v2("[1]", '{"after": {"a": 1}}', "t"), b"{not json", b'{"resolved":"1.0000000000"}']
    stats = DecodeStats()
    out = rows(decode_messages(bodies, stats=stats))
    assert [r["kind"] for r in out] == ["row", "malformed", "resolved"]
    assert out[1]["data"] == b"{not json" and "invalid JSON" in out[1]["error"]
    assert stats == DecodeStats(messages=3, rows=3, malformed=1, dropped=0)
    out = rows(decode_messages(bodies, mode="DROPMALFORMED", stats=stats))
    assert [r["kind"] for r in out] == ["row", "resolved"]
    assert stats == DecodeStats(messages=6, rows=5, malformed=2, dropped=1)
    with pytest.raises(MalformedMessageError) as exc:
        decode_messages(bodies, mode="FAILFAST", message_ids=["a", "b", "c"])
    assert "'b'" in str(exc.value) and "invalid JSON" in str(exc.value) and exc.value.index == 1
    with pytest.raises(MalformedMessageError, match="index 1"):
        decode_messages(bodies, mode="FAILFAST")


# -- bad inputs ------------------------------------------------------------------------------------

BAD = {
    "invalid json": (b"{nope}", "invalid JSON"),
    "truncated": (v2("[1]", '{"after": {"a": 1}}', "t")[:-5], "invalid JSON"),
    "whitespace": (b"  \n", "empty"),
    "scalar number": (b"42", "JSON number"),
    "scalar string": (b'"hello"', "JSON string"),
    "null": (b"null", "JSON null"),
    "array of objects": (b'[{"a": 1}]', "element 0 is object"),
    "empty array": (b"[]", "empty JSON array"),
    "wrapper without Value": (b'{"Key":[1],"Topic":"t"}', "missing `Value`"),
    "wrapper Value string": (b'{"Key":[1],"Value":"x","Topic":"t"}', "`Value` must be a JSON object"),
    "Topic number": (b'{"Key":[1],"Value":{"after": {"a": 1}},"Topic":5}', "`Topic` must be a string"),
    "after string": (v2("[1]", '{"after": "x"}', "t"), "`after` must be an object"),
    "before number": (v2("[1]", '{"after": null, "before": 3}', "t"), "`before` must be an object"),
    "updated number": (v2("[1]", '{"after": {"a": 1}, "updated": 5}', "t"), "`updated` must be a string"),
    "updated not hlc": (v2("[1]", '{"after": {"a": 1}, "updated": "yesterday"}', "t"), "HLC"),
    "key scalar": (v2("5", '{"after": {"a": 1}}', "t"), "`Key` must be a JSON array or object"),
    "dup top-level": (b'{"after": {"a": 1}, "after": null}', "duplicate key 'after'"),
    "dup wrapper": (
        b'{"Key":[1],"Value":{"after": {"a": 1}},"Value":{"after": null},"Topic":"t"}',
        "duplicate key 'Value'",
    ),
    "dup in Value (fast shape)": (v2("[1]", '{"after": {"a": 1}, "after": null}', "t"), "duplicate key 'after'"),
    "dup escaped key": (b'{"after": {"a": 1}, "\\u0061fter": null}', "duplicate key 'after'"),
    "invalid utf8 top": (b'{"after": {"a": "\xff"}}', "UTF-8"),
    "invalid utf8 in after (fast shape)": (
        v2("[1]", '{"after": {"a": "x"}}', "t").replace(b'"x"', b'"\xc3("'),
        "UTF-8",
    ),
    "invalid utf8 in key (fast shape)": (b'{"Key":["\xe2\x82"],"Value":{"after": {"a": 1}},"Topic":"t"}', "UTF-8"),
    "invalid utf8 in topic": (b'{"Key":[1],"Value":{"after": {"a": 1}},"Topic":"\xff"}', "UTF-8"),
    "webhook length type": (b'{"payload":[],"length":"0"}', "length"),
    "unknown wrapper field": (b'{"Key":[1],"Value":{"after": null},"Topic":"t","Extra":1}', "Extra"),
    "nested 1000": (b'{"after": {"a": ' + b"[" * 1000 + b"]" * 1000 + b"}}", "nested too deep"),
    "nested 100000": (b'{"after": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}", "nested too deep"),
    "nested 100000 bare": (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    "nested 100000 fast shape": (
        v2("[1]", '{"after": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}", "t"),
        "nested too deep",
    ),
    "unterminated deep": (b"{" * 100_000, "JSON"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_inputs_become_malformed(name: str) -> None:
    body, needle = BAD[name]
    r = one(body, message_ids=["id-1"])
    assert r["kind"] == "malformed", r
    assert needle in r["error"], r["error"]
    assert r["data"] == body and r["message_id"] == "id-1"
    for col in ("key", "after", "before", "op", "topic"):
        assert r[col] is None


def test_bad_inputs_all_at_once_do_not_disturb_good_ones() -> None:
    good = v2("[1]", '{"after": {"a": 1}}', "t")
    bodies = [good] + [b for b, _ in BAD.values()] + [good]
    out = rows(decode_messages(bodies))
    assert [r["kind"] for r in out] == ["row"] + ["malformed"] * len(BAD) + ["row"]
    assert decode_messages(bodies, mode="DROPMALFORMED").num_rows == 2


def test_ten_megabyte_body() -> None:
    big = "x" * (10 * 1024 * 1024)
    body = v2("[1]", '{"after": {"blob": "' + big + '"}}', "t")
    r = one(body)
    assert r["kind"] == "row" and len(r["after"]) == len(big) + 12
    junk = b"{" + b"x" * (10 * 1024 * 1024)
    assert one(junk)["kind"] == "malformed"


def test_non_bytes_bodies() -> None:
    out = rows(decode_messages([None, bytearray(b'{"resolved":"1.0000000000"}'), memoryview(b"[1]")]))
    assert [r["kind"] for r in out] == ["tombstone", "resolved", "row"]  # None is an empty body: a tombstone
    with pytest.raises(TypeError):
        decode_messages(["not bytes"])


# -- metadata and include_raw ----------------------------------------------------------------------


def test_metadata_columns() -> None:
    bodies = [v2("[1]", '{"after": {"a": 1}}', "t"), b'{"resolved":"1.0000000000"}', b"bad"]
    when = dt.datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    out = rows(decode_messages(
        bodies,
        message_ids=["a", "b", "c"],
        publish_times=[when, 1_700_000_000_000_001, None],
        attributes=[{"TABLE_NAME": "t"}, {}, None],
        ordering_keys=["", "k", ""],
    ))  # fmt: skip
    assert [r["message_id"] for r in out] == ["a", "b", "c"]
    assert out[0]["publish_time"] == dt.datetime(2025, 6, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert out[1]["publish_time"] == EPOCH + dt.timedelta(microseconds=1_700_000_000_000_001)
    assert out[2]["publish_time"] is None
    assert out[0]["attributes"] == [("TABLE_NAME", "t")] and out[1]["attributes"] == [] and out[2]["attributes"] is None
    assert [r["ordering_key"] for r in out] == [None, "k", None]


def test_metadata_fast_path_bulk_forms() -> None:
    bodies = [v2("[1]", '{"after": {"a": 1}}', "t")] * 3
    out = rows(decode_messages(bodies, publish_times=[0, 1, 2], attributes=[{}, None, {}], ordering_keys=["", "", "x"]))
    assert [r["attributes"] for r in out] == [[], None, []]
    assert [r["ordering_key"] for r in out] == [None, None, "x"]
    assert out[2]["publish_time"] == dt.datetime(1970, 1, 1, 0, 0, 0, 2, tzinfo=UTC)


def test_include_raw() -> None:
    bodies = [v2("[1]", '{"after": {"a": 1}}', "t"), b'{"a": 1}']
    assert [r["data"] for r in rows(decode_messages(bodies))] == [None, None]
    assert [r["data"] for r in rows(decode_messages(bodies, include_raw=True))] == bodies


# -- typed rows ------------------------------------------------------------------------------------

TYPED = (
    "id STRING, price DECIMAL(10,2), qty BIGINT, ok BOOLEAN, f DOUBLE, at TIMESTAMP, day DATE, raw BINARY, "
    "tags ARRAY<STRING>, m MAP<STRING, INT>, s STRUCT<x: INT, y: STRING>, j STRING"
)


def test_typed_row_values() -> None:
    after = (
        '{"at": "2019-01-02T03:04:05.123456", "day": "2024-02-29", "f": "NaN", "id": "a", "j": {"k": [1, 2]}, '
        '"m": {"p": 1}, "ok": true, "price": 26.30, "qty": 9223372036854775807, "raw": "\\\\x0001ff", '
        '"s": {"x": 1, "y": "z"}, "tags": ["a", null], "extra": 1}'
    )
    r = one(v2('["a"]', '{"after": ' + after + ', "before": null}', "t"), row_schema=TYPED)
    a = r["after"]
    assert a["price"] == decimal.Decimal("26.30") and a["qty"] == 9223372036854775807
    assert a["ok"] is True and a["f"] != a["f"]  # NaN
    assert a["at"] == dt.datetime(2019, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert a["day"] == dt.date(2024, 2, 29) and a["raw"] == b"\x00\x01\xff"
    assert a["tags"] == ["a", None] and a["m"] == [("p", 1)] and a["s"] == {"x": 1, "y": "z"}
    assert a["j"] == '{"k": [1, 2]}' and a["id"] == "a"
    assert r["before"] is None and r["op"] == "c"


def test_typed_missing_columns_and_timestamps_with_zone() -> None:
    r = one(b'{"after": {"at": "2025-05-09T21:20:29.203923+02:00"}}', row_schema="at TIMESTAMP, qty BIGINT")
    assert r["after"] == {"at": dt.datetime(2025, 5, 9, 19, 20, 29, 203923, tzinfo=UTC), "qty": None}
    r = one(b'{"after": {"at": "2025-05-09T21:20:29Z"}}', row_schema="at TIMESTAMP")
    assert r["after"]["at"] == dt.datetime(2025, 5, 9, 21, 20, 29, tzinfo=UTC)


@pytest.mark.parametrize(
    "schema, value, needle",
    [
        ("v DECIMAL(4,2)", "123.45", "integer digits"),
        ("v DECIMAL(10,2)", "1.234", "fractional digits"),
        ("v DECIMAL(10,2)", '"NaN"', "expected a number"),
        ("v BIGINT", "9223372036854775808", "out of range"),
        ("v INT", "2147483648", "out of range"),
        ("v BIGINT", "1.5", "integer"),
        ("v BIGINT", '"12"', "integer"),
        ("v BOOLEAN", "1", "true or false"),
        ("v TIMESTAMP", '"yesterday"', "not a timestamp"),
        ("v DATE", '"2024-02-30"', "not a date"),
        ("v BINARY", '"abc"', "hex"),
        ("v ARRAY<INT>", "{}", "array"),
        ("v STRUCT<x: INT>", "[1]", "object"),
        ("v STRING NOT NULL", "null", "NOT NULL"),
    ],
)
def test_typed_values_that_do_not_fit_are_malformed(schema: str, value: str, needle: str) -> None:
    body = ('{"after": {"v": ' + value + "}}").encode()
    r = one(body, row_schema=schema)
    assert r["kind"] == "malformed" and needle in r["error"] and "`v`" in r["error"], r["error"]
    assert value.strip('"') in r["error"] or needle == "NOT NULL"


def test_decimal_trailing_zero_beyond_scale_is_lossless() -> None:
    r = one(b'{"after": {"v": 26.30}}', row_schema="v DECIMAL(10,1)")
    assert r["after"]["v"] == decimal.Decimal("26.3")
    r = one(b'{"after": {"v": 1E+2}}', row_schema="v DECIMAL(3,0)")
    assert r["after"]["v"] == decimal.Decimal("100")


def test_typed_failfast_and_drop() -> None:
    bodies = [b'{"after": {"v": 1}}', b'{"after": {"v": 99999999999999999999}}']
    assert decode_messages(bodies, row_schema="v BIGINT", mode="DROPMALFORMED").num_rows == 1
    with pytest.raises(MalformedMessageError, match="out of range for BIGINT"):
        decode_messages(bodies, row_schema="v BIGINT", mode="FAILFAST")


def test_typed_bare_and_webhook() -> None:
    r = one(b'{"__crdb__": {"key": [1]}, "a": 7, "b": "x"}', row_schema="a INT, b STRING")
    assert r["after"] == {"a": 7, "b": "x"}
    out = rows(
        decode_messages([b'{"payload":[{"after":{"a":1},"key":[1],"topic":"t"}],"length":1}'], row_schema="a INT")
    )
    assert out[0]["after"] == {"a": 1}


# -- DDL parser ------------------------------------------------------------------------------------


def test_ddl_parser_types_and_round_trip() -> None:
    s = parse_ddl("`my col` string, p Decimal, q numeric(38, 38), n long, a array<map<string, struct<x: int>>>")
    assert [f.name for f in s.fields] == ["my col", "p", "q", "n", "a"]
    assert s.fields[1].dataType.simpleString() == "decimal(10,0)"
    assert s.fields[2].dataType.simpleString() == "decimal(38,38)"
    assert parse_ddl(to_ddl(s)) == s


@pytest.mark.parametrize(
    "ddl, needle",
    [
        ("", "empty"),
        ("a", "expected a type at end"),
        ("a WIDGET", "position 2"),
        ("a INT,, b INT", "position 6"),
        ("a DECIMAL(39,0)", "invalid"),
        ("a MAP<INT, STRING>", "MAP keys must be STRING"),
        ("a INT, a INT", "duplicate"),
        ("a ARRAY<INT", "'>'"),
        ("a INT; DROP", "position 5"),
    ],
)
def test_ddl_errors(ddl: str, needle: str) -> None:
    with pytest.raises(DDLError) as exc:
        parse_ddl(ddl)
    assert needle in str(exc.value)
    with pytest.raises(ValueError):
        decode_messages([b"{}"], row_schema=ddl)


# -- schema_from_enriched --------------------------------------------------------------------------


def test_schema_from_enriched() -> None:
    body = json.dumps({
        "payload": {"after": {}, "op": "c", "ts_ns": 1},
        "schema": {"name": "cockroachdb.envelope", "type": "struct", "fields": [
            {"field": "after", "type": "struct", "fields": [
                {"field": "id", "type": "string"},
                {"field": "n", "type": "int64"},
                {"field": "s", "type": "int16"},
                {"field": "price", "type": "float64", "name": "decimal", "parameters": {"precision": "10", "scale": "2"}},
                {"field": "any_dec", "type": "float64", "name": "decimal"},
                {"field": "ok", "type": "boolean"},
                {"field": "at", "type": "string", "name": "timestamp"},
                {"field": "f", "type": "float32"},
                {"field": "tags", "type": "array", "items": {"type": "string"}},
                {"field": "odd name", "type": "struct", "fields": [{"field": "x", "type": "int32"}]},
            ]},
        ]},
    }).encode()  # fmt: skip
    ddl = schema_from_enriched(body)
    assert ddl == (
        "id STRING, n BIGINT, s SMALLINT, price DECIMAL(10,2), any_dec STRING, ok BOOLEAN, at TIMESTAMP, "
        "f FLOAT, tags ARRAY<STRING>, `odd name` STRUCT<x: INT>"
    )
    wrapped = v2('{"id": "x"}', body.decode(), "products")
    assert schema_from_enriched(wrapped) == ddl
    with pytest.raises(ValueError, match="schema"):
        schema_from_enriched(b'{"after": {"a": 1}}')


def test_mutated_bodies_never_escape_as_exceptions() -> None:
    """Deterministic fuzz: corrupted real bodies give rows or malformed rows, valid Arrow, no crash."""
    corpus = Path(__file__).resolve().parents[1] / "data" / "conformance"
    seeds = [
        v2('["rome", "d7b18299"]', '{"after": {"a": 26.30, "b": "x"}, "before": null, "updated": "5.0000000000"}', "t")
    ]
    for name in ("crdb_examples.jsonl", "debezium_examples.jsonl"):
        seeds += [json.loads(line)["body"].encode() for line in (corpus / name).read_text().splitlines()]
    rng = random.Random(20240601)
    cases = []
    for _ in range(3000):
        s = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            if not s:
                break
            i = rng.randrange(len(s))
            op = rng.randrange(4)
            if op == 0:
                s[i] = rng.randrange(256)
            elif op == 1:
                del s[i : i + rng.randrange(1, 20)]
            elif op == 2:
                s[i:i] = rng.choice([b'"', b"{", b"}", b"[", b"]", b",", b":", b"null", b"\\", b"\xff", b" ", b"1e400"])
            else:
                del s[i:]
        cases.append(bytes(s))
    for schema in (None, "a DECIMAL(10,2), b STRING"):
        out = decode_messages(cases, row_schema=schema, include_raw=True)
        out.validate(full=True)  # includes UTF-8 validation of every string column
        assert out.num_rows >= len(cases)
        errors = [e for e in out.column("error").to_pylist() if e]
        assert not [e for e in errors if e.startswith("could not decode message")]


def test_arrow_metadata_columns_give_the_same_rows_as_lists():
    """The streaming source passes its Arrow columns straight through (no per-message objects);
    the rows must be those that Python lists give, sliced arrays included."""
    bodies = [
        b'{"Key":[1],"Value":{"after": {"id": 1}},"Topic":"orders"}',
        b'{"not": "a changefeed"',
        b'{"Key":[2],"Value":{"after": null},"Topic":"orders"}',
        b"",
        b'{"resolved":"1700000000000000000.0000000000"}',
    ] * 3
    n = len(bodies)
    ids = [str(100 + i) for i in range(n)]
    times = [1_700_000_000_000_000 + i for i in range(n)]
    attrs = [None, {"TABLE_NAME": "users"}, {}, {"key": "[9]"}, None] * 3
    keys = ["", "k1", None, "", "k4"] * 3
    expected = decode_messages(
        bodies, message_ids=ids, publish_times=times, attributes=attrs, ordering_keys=keys, envelope="auto"
    )
    map_type = pa.map_(pa.string(), pa.string())
    got = decode_messages(
        pa.array([b"pad"] + bodies, pa.binary()).slice(1),
        message_ids=pa.array(["x"] + ids, pa.string()).slice(1),
        publish_times=pa.chunked_array([pa.array(times[:4], pa.int64()), pa.array(times[4:], pa.int64())]),
        attributes=pa.array(
            [[("TABLE_NAME", "pad")]] + [None if a is None else list(a.items()) for a in attrs], map_type
        ).slice(1),
        ordering_keys=pa.array(keys, pa.string()),
    )
    assert got.to_pylist() == expected.to_pylist()
    assert "users" in got.column("table_name").to_pylist()


def test_failfast_names_the_message_id_from_an_arrow_column():
    with pytest.raises(ValueError, match="m-2"):
        decode_messages(
            [b'{"Key":[1],"Value":{"after": {}},"Topic":"t"}', b"{bad"],
            mode="FAILFAST",
            message_ids=pa.array(["m-1", "m-2"]),
        )
