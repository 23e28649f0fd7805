"""Throughput of ``crdb_pubsub.decode_messages`` beside a plain ``orjson.loads`` loop, same bodies.

    python examples/bench_decode.py [--corpus own|broad|both] [--envelope wrapped|typed|bare|enriched|debezium|all]
                                    [--shape movr|conformance|wide|nested|unicode|schema|all]
                                    [--messages N] [--repeat 3] [--show]

Two corpora. The **own** one (``make_bodies``) is the shape the fast paths were first written for;
each envelope gets its own bodies, laid out byte for byte as their producer writes them:

* ``wrapped``: CockroachDB's Pub/Sub v2 sink (``{"Key":...,"Value":...,"Topic":...}``, the compact
  wrapper around the JSON encoder's ``", "``/``": "`` layout, keys sorted, DECIMAL digits kept
  (``26.30``)) for a movr ``vehicles`` changefeed with ``updated``;
* ``typed``: the same wrapped layout with a BIGINT column, decoded with a ``row_schema``
  (STRINGs, ``BIGINT``, ``DECIMAL(12,2)``), so ``before``/``after`` become Arrow structs;
* ``bare``: ``envelope=bare`` through the v2 sink (``__crdb__`` holding ``updated`` inside the row);
* ``enriched``: ``envelope=enriched, enriched_properties='source'`` through the v2 sink (Key as an
  object, ``op``, ``source``, ``ts_ns``);
* ``debezium``: Debezium's JSON converter with schemas disabled (``before``/``after``/``source``/
  ``op``/``ts_ms``/``transaction``, compact), as Debezium Server publishes it.

The **broad** one (``broad_corpus``, see ``SHAPES``) holds bodies shaped like other users' tables:
the simulator's movr traffic, the conformance bodies, wide rows, nested JSONB, long unicode text and
values with schema blocks, each in every variant that has it; it prints a ratio per variant and
shape, and over all shapes (total orjson time over total decode time).

``decode_messages`` gets the Pub/Sub metadata too (ids, publish times, empty attributes, no ordering
key) and its figure includes building the Arrow record batch. The baseline only parses
(``[orjson.loads(b) for b in bodies]``) and is measured in the same run, right before; the ratio
(decode msg/s over baseline msg/s) is what to compare across machines.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import random
import re
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

import crdb_pubsub
from crdb_pubsub.tools.simulator import crdb_json

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "conformance"  # real bodies with their sources (its README.md)

CITIES = ["amsterdam", "boston", "los angeles", "new york", "paris", "rome", "san francisco", "seattle"]
COLORS = ["black", "blue", "green", "red", "yellow"]
TYPES = ["bike", "scooter", "skateboard"]
ENVELOPES = ("wrapped", "typed", "bare", "enriched", "debezium")
TYPED_SCHEMA = (
    "city STRING, creation_time STRING, ext STRING, id STRING, odometer BIGINT, price DECIMAL(12,2), type STRING"
)


def _q(text: str) -> str:
    return orjson.dumps(text).decode()


def _vehicle(rng: random.Random, odometer: bool = False) -> tuple[str, str, list[tuple[str, str]]]:
    """(city, id, [(column, JSON text)]) of a movr-like ``vehicles`` row, columns sorted."""
    city = rng.choice(CITIES)
    vid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    created = dt.datetime(2025, 1, 1) + dt.timedelta(seconds=rng.randrange(10_000_000))
    price = f"{rng.randrange(0, 100000) / 100:.2f}"  # DECIMAL(10,2): the trailing zero is kept
    cols = [
        ("city", _q(city)),
        ("creation_time", f'"{created.isoformat()}"'),
        ("ext", f'{{"color": {_q(rng.choice(COLORS))}}}'),
        ("id", f'"{vid}"'),
    ]
    if odometer:
        cols.append(("odometer", str(rng.randrange(0, 2**62))))
    cols += [("price", price), ("type", _q(rng.choice(TYPES)))]
    return city, vid, cols


def _crdb_object(cols: list[tuple[str, str]]) -> str:
    """CockroachDB's JSON encoder layout: ``{"a": 1, "b": 2}``."""
    return "{" + ", ".join(f"{_q(k)}: {v}" for k, v in cols) + "}"


def make_bodies(count: int, seed: int = 7, envelope: str = "wrapped") -> list[bytes]:
    """``count`` message bodies of ``envelope`` (see the module docstring), ~300-700 bytes each."""
    rng = random.Random(seed)
    out = []
    wall = 1_747_243_394_200_039_000
    for i in range(count):
        city, vid, cols = _vehicle(rng, odometer=envelope == "typed")
        wall += rng.randrange(1, 5_000_000)
        hlc = f"{wall}.{rng.randrange(3):010d}"
        key = f'[{_q(city)}, "{vid}"]'
        if envelope in ("wrapped", "typed"):
            value = f'{{"after": {_crdb_object(cols)}, "updated": "{hlc}"}}'
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"vehicles"}}'.encode())
        elif envelope == "bare":
            value = _crdb_object([("__crdb__", f'{{"updated": "{hlc}"}}')] + cols)
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"vehicles"}}'.encode())
        elif envelope == "enriched":
            source = _crdb_object([
                ("changefeed_sink", '"pubsub"'),
                ("cluster_id", '"585e6512-ea54-490a-8f1d-50c8d182a2e6"'),
                ("cluster_name", '""'),
                ("database_name", '"movr"'),
                ("db_version", '"v25.2.0"'),
                ("job_id", '"1072079179268751361"'),
                ("mvcc_timestamp", f'"{hlc}"'),
                ("node_id", '"1"'),
                ("node_name", '"localhost"'),
                ("origin", '"cockroachdb"'),
                ("primary_keys", '["city", "id"]'),
                ("schema_name", '"public"'),
                ("source_node_locality", '""'),
                ("table_name", '"vehicles"'),
                ("ts_hlc", f'"{hlc}"'),
                ("ts_ns", str(wall)),
            ])  # fmt: skip
            op = "c" if i % 3 == 0 else "u"
            value = _crdb_object([("after", _crdb_object(cols)), ("op", f'"{op}"'), ("source", source),
                                  ("ts_ns", str(wall + 686_192_000))])  # fmt: skip
            key = _crdb_object([("city", _q(city)), ("id", f'"{vid}"')])
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"vehicles"}}'.encode())
        elif envelope == "debezium":
            ms = wall // 1_000_000
            lsn = 24_023_128 + i * 64
            row = "{" + ",".join(f"{_q(k)}:{v.replace(', ', ',').replace(': ', ':')}" for k, v in cols) + "}"
            source = (
                '{"version":"2.7.3.Final","connector":"postgresql","name":"movr","ts_ms":%d,"snapshot":"false",'
                '"db":"movr","sequence":"[\\"24023000\\",\\"%d\\"]","ts_us":%d,"ts_ns":%d,"schema":"public",'
                '"table":"vehicles","txId":%d,"lsn":%d,"xmin":null}' % (ms, lsn, wall // 1000, wall, 780 + i, lsn)
            )
            op = "c" if i % 3 == 0 else "u"
            before = "null" if op == "c" else row
            out.append((
                f'{{"before":{before},"after":{row},"source":{source},"op":"{op}","ts_ms":{ms + 7},'
                f'"ts_us":{(ms + 7) * 1000},"ts_ns":{(ms + 7) * 1_000_000},"transaction":null}}'
            ).encode())  # fmt: skip
        else:
            raise ValueError(f"unknown envelope {envelope!r}")
    return out


# -- the broad corpus: shapes the fast paths were not written for ---------------------------------
#
# Bodies shaped like other users' tables, each laid out as its producer writes it. Per shape:
#
# * ``movr``: the simulator's movr traffic (users, vehicles, rides interleaved in one batch, with
#   ``updated``, ``diff`` where the envelope has it, resolved messages to every topic), as
#   CockroachDB's Pub/Sub sink publishes it; Debezium: the same changes as PostgreSQL-connector
#   events. Typed rows: the ``rides`` table alone with its Spark schema (one row schema per call);
# * ``conformance``: the real bodies of ``tests/data/conformance`` of that envelope, cycled; Pub/Sub
#   bodies as they are, Kafka values that name their key and topic wrapped as the v2 sink does,
#   Debezium fixtures compacted as the JSON converter writes them; docs illustrations with
#   placeholders (not JSON), CSV bodies and values without a key are skipped (counted by reason);
# * ``wide``: a 36-column table (INT8 beyond 2^53, DECIMALs with trailing zeros, FLOATs, BOOLs,
#   TIMESTAMPs, UUIDs, BYTES, arrays, JSONB, some NULLs);
# * ``nested``: JSONB documents 3-5 levels deep (arrays of objects, unicode keys and values);
# * ``unicode``: long text (0.2-1.5 K characters a column) in many scripts, with emoji, quotes, escapes;
# * ``schema`` (enriched, Debezium): the value with its schema block (``enriched_properties=
#   'source,schema'``; Debezium's JSON converter with ``schemas.enable=true``).

SHAPES = ("movr", "conformance", "wide", "nested", "unicode", "schema")
_SCRIPTS = (
    "Grüße aus München, où l'été est très chaud. ",
    "東京都渋谷区の天気は晴れです。",
    "Привет, как дела? Всё хорошо. ",
    "مرحبا بالعالم، كيف حالك؟ ",
    "नमस्ते दुनिया, आप कैसे हैं? ",
    "🚲🛴🚗 emoji 👩‍💻 ok 🎉 ",
    'He said "stop" \\ then\tleft.\n',
    "Ελληνικά γράμματα και αριθμοί 123. ",
    "한국어 문장입니다. ",
)
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "lambda", "zeta")


def _rand_text(rng: random.Random, lo: int, hi: int) -> str:
    size = rng.randrange(lo, hi)
    out, length = [], 0
    while length < size:
        out.append(rng.choice(_SCRIPTS))
        length += len(out[-1])
    return "".join(out)[:size]


def _nested_doc(rng: random.Random, depth: int, top: bool = False) -> Any:
    if depth == 0 or (not top and rng.random() < 0.15):
        return rng.choice(
            [
                rng.randrange(-(10**6), 10**6),
                Decimal(rng.randrange(10**6)).scaleb(-2),
                True,
                None,
                rng.choice(_WORDS),
                _rand_text(rng, 5, 30),
            ]
        )
    if not top and rng.random() < 0.4:
        return [_nested_doc(rng, depth - 1) for _ in range(rng.randrange(1, 4))]
    keys = rng.sample(_WORDS + ("größe", "名前", "prix_€"), rng.randrange(2, 5))
    return {k: _nested_doc(rng, depth - 1) for k in keys}


# (column, SQL type, Spark type) of the synthetic tables; values are drawn by SQL type.
_WIDE_TYPES = (
    "INT8",
    "DECIMAL(12,2)",
    "FLOAT",
    "BOOL",
    "STRING",
    "TIMESTAMPTZ",
    "UUID",
    "INT8BIG",
    "BYTES",
    "STRING[]",
    "JSONB",
    "TIMESTAMP",
)
_SPARK = {
    "INT8": "BIGINT",
    "INT8BIG": "BIGINT",
    "DECIMAL(12,2)": "DECIMAL(12,2)",
    "FLOAT": "DOUBLE",
    "BOOL": "BOOLEAN",
    "STRING": "STRING",
    "TIMESTAMPTZ": "TIMESTAMP",
    "TIMESTAMP": "TIMESTAMP",
    "UUID": "STRING",
    "BYTES": "BINARY",
    "STRING[]": "ARRAY<STRING>",
    "JSONB": "STRING",
    "TEXT": "STRING",
    "DOC": "STRING",
}
_TABLES: dict[str, list[tuple[str, str]]] = {
    "wide": [("id", "UUID")]
    + [
        (f"{_WORDS[i % 10]}_{kind.split('(')[0].lower().replace('[]', '_list')}_{i}", kind)
        for i, kind in enumerate(_WIDE_TYPES * 3)
    ][:35],
    "nested": [
        ("id", "UUID"),
        ("tenant", "STRING"),
        ("doc", "DOC"),
        ("settings", "DOC"),
        ("labels", "STRING[]"),
        ("version", "INT8"),
    ],
    "unicode": [
        ("id", "UUID"),
        ("lang", "STRING"),
        ("title", "TEXT"),
        ("body", "TEXT"),
        ("summary", "TEXT"),
        ("views", "INT8"),
    ],
}


def _value(rng: random.Random, kind: str) -> Any:
    """A column value as the simulator's ``crdb_json`` takes it."""
    base = dt.datetime(2019, 1, 1) + dt.timedelta(seconds=rng.randrange(200_000_000), microseconds=rng.randrange(10**6))
    return {
        "UUID": lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "INT8": lambda: rng.randrange(-(10**6), 10**6),
        "INT8BIG": lambda: rng.randrange(2**53, 2**63),
        "DECIMAL(12,2)": lambda: Decimal(rng.randrange(10**8)).scaleb(-2),
        "FLOAT": lambda: rng.uniform(-1e6, 1e6),
        "BOOL": lambda: rng.random() < 0.5,
        "STRING": lambda: rng.choice(_WORDS) + " " + rng.choice(("x", "München", "東京", 'a "q"')),
        "TEXT": lambda: _rand_text(rng, 200, 1500),
        "TIMESTAMPTZ": lambda: base.isoformat() + "Z",
        "TIMESTAMP": lambda: base.isoformat(),
        "BYTES": lambda: "\\x" + rng.randbytes(8).hex(),
        "STRING[]": lambda: [rng.choice(_WORDS) for _ in range(rng.randrange(0, 4))],
        "JSONB": lambda: {"k": rng.choice(_WORDS), "n": rng.randrange(100)},
        "DOC": lambda: _nested_doc(rng, rng.randrange(3, 6), top=True),
    }[kind]()


Cell = tuple[str, str]  # a column value as CockroachDB's encoder and as Debezium's JSON converter write it
_NULL: Cell = ("null", "null")
_POOLED = ("TEXT", "DOC")  # slow to draw and encode: each table draws 256 and reuses them


def _cell(rng: random.Random, kind: str, pools: dict[str, list[Cell]]) -> Cell:
    """A value of SQL type ``kind`` (8% NULL, except UUIDs), encoded for both producers."""
    if kind != "UUID" and rng.random() < 0.08:
        return _NULL
    if kind in _POOLED:
        pool = pools.get(kind)
        if pool is None:
            pool = pools[kind] = [_encode(v, kind) for v in (_value(rng, kind) for _ in range(256))]
        return rng.choice(pool)
    return _encode(_value(rng, kind), kind)


def _encode(value: Any, kind: str) -> Cell:
    return crdb_json(value), _dbz_text(value, kind)


def _crdb_row(row: dict[str, Cell], extra: tuple[tuple[str, str], ...] = ()) -> str:
    """CockroachDB's encoding of a row (keys sorted, ``", "``/``": "``), with ``extra`` (key, JSON) members."""
    items = sorted([(k, v[0]) for k, v in row.items()] + list(extra))
    return "{" + ", ".join(f"{_q(k)}: {v}" for k, v in items) + "}"


def _dbz_row(row: dict[str, Cell] | None, columns: list[tuple[str, str]]) -> str:
    """Debezium's encoding of a row image (columns in table order, compact)."""
    return "null" if row is None else "{" + ",".join(f'"{name}":{row[name][1]}' for name, _ in columns) + "}"


def _spark_ddl(table: str) -> str:
    return ", ".join(f"{name} {_SPARK[kind]}" for name, kind in _TABLES[table])


def _dbz_text(value: Any, kind: str) -> str:
    """A column as Debezium's PostgreSQL connector writes it (JSON converter, compact)."""
    if value is None:
        return "null"
    if kind in ("JSONB", "DOC"):  # io.debezium.data.Json: the document as a string
        return orjson.dumps(crdb_json(value)).decode()
    if kind == "DECIMAL(12,2)":  # decimal.handling.mode=string
        return f'"{value}"'
    if kind == "TIMESTAMP":  # io.debezium.time.MicroTimestamp
        ts = dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
        return str(int(ts.timestamp()) * 1_000_000 + ts.microsecond)
    if kind == "BYTES":  # binary.handling.mode=base64
        return orjson.dumps(base64.b64encode(bytes.fromhex(value[2:])).decode()).decode()
    return crdb_json(value, compact=True)


def _dbz_schema(table: str, columns: list[tuple[str, str]], source_fields: list[str]) -> str:
    types = {"INT8": "int64", "INT8BIG": "int64", "FLOAT": "double", "BOOL": "boolean", "STRING[]": "array"}
    cols = []
    for name, kind in columns:
        f: dict[str, Any] = {"type": types.get(kind, "string"), "optional": name != "id"}
        if kind == "STRING[]":
            f["items"] = {"type": "string", "optional": True}
        if kind in ("JSONB", "DOC"):
            f.update(name="io.debezium.data.Json", version=1)
        if kind == "TIMESTAMP":
            f.update(type="int64", name="io.debezium.time.MicroTimestamp", version=1)
        if kind == "TIMESTAMPTZ":
            f.update(name="io.debezium.time.ZonedTimestamp", version=1)
        if kind == "UUID":
            f.update(name="io.debezium.data.Uuid", version=1)
        f["field"] = name
        cols.append(f)
    value = f"movr.public.{table}.Value"
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "fields": cols, "optional": True, "name": value, "field": "before"},
            {"type": "struct", "fields": cols, "optional": True, "name": value, "field": "after"},
            {"type": "struct", "fields": [
                {"type": "int64" if f in ("ts_ms", "ts_us", "ts_ns", "txId", "lsn", "xmin") else "string",
                 "optional": f not in ("version", "connector", "name", "ts_ms", "db", "schema", "table"), "field": f}
                for f in source_fields], "optional": False, "name": "io.debezium.connector.postgresql.Source",
             "field": "source"},
            {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "id"},
                                          {"type": "int64", "optional": False, "field": "total_order"},
                                          {"type": "int64", "optional": False, "field": "data_collection_order"}],
             "optional": True, "name": "event.block", "version": 1, "field": "transaction"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
        ],
        "optional": False, "name": f"movr.public.{table}.Envelope", "version": 2,
    }  # fmt: skip
    return orjson.dumps(schema).decode()


_PG_SOURCE = (
    "version",
    "connector",
    "name",
    "ts_ms",
    "snapshot",
    "db",
    "sequence",
    "ts_us",
    "ts_ns",
    "schema",
    "table",
    "txId",
    "lsn",
    "xmin",
)


def _debezium_event(table: str, op: str, before: str, after: str, wall: int, i: int, schema: str | None) -> bytes:
    """A PostgreSQL-connector change event with the row images ``before``/``after`` (JSON text)."""
    ms, lsn = wall // 1_000_000, 24_023_128 + i * 64
    source = (
        '{"version":"2.7.3.Final","connector":"postgresql","name":"movr","ts_ms":%d,"snapshot":"false",'
        '"db":"movr","sequence":"[\\"24023000\\",\\"%d\\"]","ts_us":%d,"ts_ns":%d,"schema":"public",'
        '"table":"%s","txId":%d,"lsn":%d,"xmin":null}' % (ms, lsn, wall // 1000, wall, table, 780 + i, lsn)
    )
    payload = (
        f'{{"before":{before},"after":{after},"source":{source},"transaction":null,'
        f'"op":"{op}","ts_ms":{ms + 7},"ts_us":{(ms + 7) * 1000},"ts_ns":{(ms + 7) * 1_000_000}}}'
    )
    return (payload if schema is None else f'{{"schema":{schema},"payload":{payload}}}').encode()


_ENRICHED_SOURCE = {
    "changefeed_sink": "pubsub", "cluster_id": "9c1d2e5b-73f4-4b6a-9d0e-2f7a8b3c4d5e", "cluster_name": "",
    "database_name": "shop", "db_version": "v25.4.0", "job_id": "1066452948509662973", "node_id": "3",
    "node_name": "crdb-2.internal", "origin": "cockroachdb", "schema_name": "public", "source_node_locality": "region=eu",
}  # fmt: skip


def _synthetic(table: str, count: int, variant: str, seed: int) -> list[bytes]:
    """``count`` change events of a synthetic ``table`` in ``variant``'s layout (60% updates, 10% deletes)."""
    rng = random.Random(f"{seed}:{table}:{variant}")
    columns = _TABLES[table]
    pools: dict[str, list[Cell]] = {}
    live: list[dict[str, Cell]] = []
    wall = 1_747_243_394_200_039_000
    out = []
    for i in range(count):
        wall += rng.randrange(1, 5_000_000)
        hlc = f"{wall}.{rng.randrange(3):010d}"
        roll = rng.random()
        before: dict[str, Cell] | None
        after: dict[str, Cell] | None
        if live and roll < 0.6:
            at = rng.randrange(len(live))
            before = live[at]
            after = dict(before)
            for name, kind in rng.sample(columns[1:], 3):
                after[name] = _cell(rng, kind, pools)
            live[at] = after
            op = "u"
        elif live and roll < 0.7:
            before, after, op = live.pop(rng.randrange(len(live))), None, "d"
        else:
            before, after, op = None, {name: _cell(rng, kind, pools) for name, kind in columns}, "c"
            live.append(after)
        row = after if after is not None else before
        assert row is not None
        key = "[" + row["id"][0] + "]"
        crdb_after = "null" if after is None else _crdb_row(after)
        crdb_before = "null" if before is None else _crdb_row(before)
        if variant == "debezium":
            out.append(_debezium_event(table, op, _dbz_row(before, columns), _dbz_row(after, columns), wall, i, None))
        elif variant in ("wrapped", "typed"):
            diff = f', "before": {crdb_before}' if variant == "wrapped" else ""  # typed: no diff
            value = f'{{"after": {crdb_after}{diff}, "updated": "{hlc}"}}'
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"{table}"}}'.encode())
        elif variant == "bare":  # a delete names every column: the key keeps its value, the rest null
            image = after if after is not None else {name: _NULL for name, _ in columns} | {"id": row["id"]}
            value = _crdb_row(image, (("__crdb__", f'{{"updated": "{hlc}"}}'),))
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"{table}"}}'.encode())
        elif variant == "enriched":
            source = crdb_json(
                dict(
                    _ENRICHED_SOURCE, primary_keys=["id"], table_name=table, ts_hlc=hlc, ts_ns=wall, mvcc_timestamp=hlc
                )
            )
            value = (
                f'{{"after": {crdb_after}, "before": {crdb_before}, "op": "{op}", "source": {source}, '
                f'"ts_ns": {wall + 686_192_000}}}'
            )
            out.append(f'{{"Key":{{"id": {row["id"][0]}}},"Value":{value},"Topic":"{table}"}}'.encode())
        else:
            raise ValueError(variant)
    return out


def _movr(count: int, variant: str, seed: int, schema: bool = False) -> list[bytes]:
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    if variant == "debezium":  # the simulator's changes (wrapped, diff) as PostgreSQL-connector events
        sim = ChangefeedSimulator(seed=seed, envelope="wrapped", diff=True, updated=True)
        columns = {
            t.name: [
                (c.name, {"DECIMAL": "DECIMAL(12,2)", "TIMESTAMPTZ": "TIMESTAMPTZ"}.get(c.sql, c.sql))
                for c in t.columns
            ]
            for t in _sim_tables()
        }
        schemas = {t: _dbz_schema(t, cols, list(_PG_SOURCE)) for t, cols in columns.items()} if schema else {}
        out = []
        for i, msg in enumerate(sim.events(count)):
            value = orjson.loads(msg.data)["Value"]
            wall = int(msg.hlc.split(".")[0])
            cols = columns[msg.table]
            before, after = (
                "null" if img is None else "{" + ",".join(f'"{n}":{_dbz_text(img[n], k)}' for n, k in cols) + "}"
                for img in (value["before"], value["after"])
            )
            out.append(_debezium_event(msg.table, msg.op, before, after, wall, i, schemas.get(msg.table)))
        return out[:count]
    options: dict[str, Any] = {
        "wrapped": {"diff": True, "updated": True},
        "typed": {"updated": True, "tables": ["rides"]},
        "bare": {"updated": True},
        "enriched": {
            "enriched_properties": ["source", "schema"] if schema else ["source"],
            "updated": True,
            "mvcc_timestamp": True,
        },
    }[variant]
    envelope = "wrapped" if variant == "typed" else variant
    sim = ChangefeedSimulator(seed=seed, envelope=envelope, resolved_every=50, **options)
    bodies = [m.data for m in sim.events(count)]
    return bodies[:count]


def _sim_tables() -> list:
    from crdb_pubsub.tools.simulator import TABLES

    return list(TABLES.values())


def _minify(text: str) -> str:
    """JSON text without whitespace between tokens (strings untouched): a JSON converter's output."""
    return "".join(t for t in re.findall(r'"(?:[^"\\]|\\.)*"|\s+|[^\s"]+', text) if not t.isspace())


def conformance_bodies(corpus: Path = CORPUS) -> tuple[dict[str, list[bytes]], dict[str, int]]:
    """The conformance bodies by the envelope ``decode_messages`` finds in them, as Pub/Sub delivers
    them; and how many entries were skipped, by reason."""
    by_env: dict[str, list[bytes]] = {}
    skipped: dict[str, int] = {}
    for name in ("crdb_examples.jsonl", "debezium_examples.jsonl"):
        for line in (corpus / name).read_text().splitlines():
            entry = json.loads(line)
            body = entry["body"]
            if name.startswith("debezium"):
                try:
                    json.loads(body)
                except ValueError:
                    skipped["placeholder (not JSON)"] = skipped.get("placeholder (not JSON)", 0) + 1
                    continue
                body = _minify(body)
            elif not entry.get("pubsub_wire"):
                if "key" not in entry or not body.startswith("{"):
                    skipped["not a Pub/Sub body, no key/topic to wrap"] = (
                        skipped.get("not a Pub/Sub body, no key/topic to wrap", 0) + 1
                    )
                    continue
                # encoder_test.go's TestEncoders name no topic: their table is ``foo``, as in its other tests.
                topic = orjson.dumps(entry.get("topic") or "foo").decode()
                body = '{"Key":' + (entry["key"] or "null") + ',"Value":' + body + ',"Topic":' + topic + "}"
            data = body.encode()
            batch = crdb_pubsub.decode_messages([data])
            env = batch.column(batch.schema.get_field_index("envelope"))[0].as_py()
            kind = batch.column(batch.schema.get_field_index("kind"))[0].as_py()
            if kind == "malformed":
                skipped["CSV (needs envelope=csv)"] = skipped.get("CSV (needs envelope=csv)", 0) + 1
                continue
            by_env.setdefault(env or "other", []).append(data)
    return by_env, skipped


def _string_schema(bodies: list[bytes]) -> str:
    """A row schema of STRING columns (they take any JSON value) named as the bodies' rows name them."""
    names: dict[str, None] = {}
    for body in set(bodies):
        value = orjson.loads(body).get("Value") or {}
        for image in (value.get("after"), value.get("before")):
            names.update(dict.fromkeys(image or {}))
    return ", ".join(f"`{n}` STRING" for n in names)


def broad_corpus(shape: str, variant: str, count: int, seed: int = 7) -> tuple[list[bytes], dict[str, Any]] | None:
    """(bodies, decode_messages keyword arguments) of one shape for one variant; None where the shape
    does not exist for it (wrapped, bare and typed rows carry no schema block)."""
    if shape == "schema" and variant not in ("enriched", "debezium"):
        return None
    kw: dict[str, Any] = {}
    if shape in ("movr", "schema"):
        bodies = _movr(count, variant, seed, schema=shape == "schema")
        if variant == "typed":
            from crdb_pubsub.tools.simulator import spark_schemas

            kw["row_schema"] = spark_schemas(["rides"])["rides"]
    elif shape == "conformance":
        by_env, _ = conformance_bodies()
        distinct = by_env.get("wrapped" if variant == "typed" else variant, [])
        if not distinct:
            return None
        bodies = [distinct[i % len(distinct)] for i in range(count)]
        if variant == "typed":
            kw["row_schema"] = _string_schema(distinct)
    else:
        bodies = _synthetic(shape, count, variant, seed)
        if variant == "typed":
            kw["row_schema"] = _spark_ddl(shape)
    return bodies, kw


def bench_bodies(bodies: list[bytes], repeat: int, strict: bool = True, **kw: Any) -> tuple[float, float, int]:
    """(baseline msg/s, decode msg/s, malformed rows) on ``bodies``, both measured here, best of ``repeat``."""
    n = len(bodies)
    ids = [str(10_000_000 + i) for i in range(n)]
    t0 = int(dt.datetime(2025, 6, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
    publish = [t0 + i for i in range(n)]
    attrs: list[dict[str, str]] = [{} for _ in range(n)]
    ordering = [""] * n
    crdb_pubsub.decode_messages(bodies[:100], **kw)  # warm caches (pyspark schema conversion)
    malformed = 0

    def run_baseline() -> None:
        [orjson.loads(b) for b in bodies]

    def run_decode() -> None:
        nonlocal malformed
        batch = crdb_pubsub.decode_messages(
            bodies, message_ids=ids, publish_times=publish, attributes=attrs, ordering_keys=ordering, **kw
        )
        kinds = batch.column(batch.schema.get_field_index("kind"))
        assert kinds.null_count == 0
        malformed = kinds.to_pylist().count("malformed")
        assert not strict or (batch.num_rows == n and malformed == 0)

    def best(fn: Callable[[], None]) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    base = best(run_baseline)
    ours = best(run_decode)
    return n / base, n / ours, malformed


def bench(envelope: str, messages: int, repeat: int) -> tuple[float, float]:
    """(baseline msg/s, decode msg/s) for one envelope of the own corpus (``make_bodies``)."""
    kw = {"row_schema": TYPED_SCHEMA} if envelope == "typed" else {}
    base, ours, _ = bench_bodies(make_bodies(messages, envelope=envelope), repeat, **kw)
    return base, ours


def bench_broad(variants: tuple[str, ...], messages: int, repeat: int, shapes: tuple[str, ...] = SHAPES) -> None:
    """The broad corpus: a ratio to orjson per variant and shape, and over all its shapes."""
    _, skipped = conformance_bodies()
    print(
        f"broad corpus: {messages} bodies per shape, best of {repeat}; ratio = decode msg/s / orjson msg/s "
        f"(same bodies, same run); conformance entries skipped: {skipped}"
    )
    sizes: dict[str, list[float]] = {}
    print(f"{'variant':<10} " + " ".join(f"{s:>11}" for s in shapes) + f" {'all':>7}")
    for variant in variants:
        cells, base_time, our_time = [], 0.0, 0.0
        for shape in shapes:
            made = broad_corpus(shape, variant, messages)
            if made is None:
                cells.append(f"{'-':>11}")
                continue
            bodies, kw = made
            sizes.setdefault(shape, []).append(sum(map(len, bodies)) / len(bodies))
            base, ours, malformed = bench_bodies(bodies, repeat, strict=False, **kw)
            base_time += len(bodies) / base
            our_time += len(bodies) / ours
            cells.append(f"{ours / base:>10.2f}x" if not malformed else f"{ours / base:>5.2f}x({malformed}!)")
        print(f"{variant:<10} " + " ".join(cells) + f" {base_time / our_time:>6.2f}x", flush=True)
    print("mean body bytes: " + ", ".join(f"{s} {sum(v) / len(v):.0f}" for s, v in sizes.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        choices=("own", "broad", "both"),
        default="both",
        help="own: make_bodies (the fast paths' shapes); broad: other tables' shapes (SHAPES)",
    )
    parser.add_argument("--envelope", choices=ENVELOPES + ("all",), default="all")
    parser.add_argument("--shape", choices=SHAPES + ("all",), default="all", help="broad corpus: one shape only")
    parser.add_argument("--messages", type=int, default=None, help="per envelope (own: 100000) or shape (broad: 20000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    parser.add_argument("--show", action="store_true", help="print one body of each envelope")
    args = parser.parse_args()

    envelopes = ENVELOPES if args.envelope == "all" else (args.envelope,)
    if args.corpus in ("own", "both"):
        messages = args.messages or 100_000
        print(
            f"own corpus: {messages} bodies per envelope, best of {args.repeat}; "
            "baseline = [orjson.loads(b) for b in bodies]"
        )
        print(f"{'envelope':<10} {'bytes':>6} {'baseline msg/s':>15} {'decode msg/s':>13} {'ratio':>6}")
        for env in envelopes:
            sample = make_bodies(200, envelope=env)
            if args.show:
                print(sample[1].decode())
            mean = sum(map(len, sample)) / len(sample)
            base, ours = bench(env, messages, args.repeat)
            print(f"{env:<10} {mean:6.0f} {base:15,.0f} {ours:13,.0f} {ours / base:5.2f}x", flush=True)
    if args.corpus in ("broad", "both"):
        shapes = SHAPES if args.shape == "all" else (args.shape,)
        if args.show:
            for env in envelopes:
                for shape in shapes:
                    made = broad_corpus(shape, env, 3)
                    if made is not None:
                        print(f"{env}/{shape}: {made[0][1].decode()}")
        bench_broad(envelopes, args.messages or 20_000, args.repeat, shapes)


if __name__ == "__main__":
    main()
