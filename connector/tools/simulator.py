"""A deterministic CockroachDB changefeed simulator that publishes to Google Cloud Pub/Sub.

It generates movr-like traffic (``users``, ``vehicles``, ``rides``) and lays every message out
byte for byte as CockroachDB's Pub/Sub sink does:

* row messages: ``{"Key":<key json>,"Value":<value json>,"Topic":"<topic>"}`` built by hand (no
  spaces in the wrapper) around CockroachDB's own JSON encoding (``", "`` / ``": "`` separators,
  sorted object keys, raw UTF-8, exact DECIMAL and INT8 digits);
* resolved messages to every topic, unwrapped and compact: ``{"resolved":"<hlc>"}`` or, with the
  bare envelope, ``{"__crdb__":{"resolved":"<hlc>"}}``;
* optionally the legacy (pre-v25.2) sink: compact lowercase ``{"key":..,"value":..,"topic":..}``
  with the key JSON as ordering key.

The simulator also keeps the ground truth (the final state of every table), so tests can compare
what a consumer rebuilt from the stream with what was really written.

    sim = ChangefeedSimulator(seed=7, envelope="wrapped", diff=True, resolved_every=50)
    for msg in sim.events(1000):
        ...
    truth = sim.ground_truth()

Everything is a pure function of ``seed`` and the options: the data, the HLC timestamps, the
delivery shuffle and the choice of duplicates. The sequence of row changes (and therefore the
ground truth) depends only on ``seed``, ``tables`` and ``mix``, not on envelope options.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime as _dt
import json
import math
import os
import random
import re
import sys
import time
import uuid
from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping, Sequence

__all__ = [
    "ChangefeedSimulator",
    "SimMessage",
    "PublishReport",
    "TABLES",
    "spark_schemas",
    "primary_keys",
    "crdb_json",
    "make_publisher",
    "make_subscriber",
    "build_arg_parser",
    "main",
]

# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Column:
    """A column: ``sql`` is one of the SQL types the simulator knows (see ``_SQL_TYPES``)."""

    name: str
    sql: str
    nullable: bool = True
    precision: int = 0
    scale: int = 0


@dataclasses.dataclass(frozen=True)
class Table:
    """A table: columns in declaration order, primary key in pk order, optional families.

    ``families`` maps a family name to its columns; primary-key columns sit in the first family,
    as CockroachDB puts them, so messages of the other families do not carry them.
    """

    name: str
    columns: tuple[Column, ...]
    pk: tuple[str, ...]
    families: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


_SQL_TYPES = ("UUID", "STRING", "DECIMAL", "TIMESTAMP", "TIMESTAMPTZ", "JSONB", "INT8", "STRING[]",
              "BOOL", "FLOAT", "BYTES")

_COLUMN = re.compile(r"(\w+) ([A-Z0-9\[\]]+)(?:\((\d+),(\d+)\))?( NOT NULL)?$")


def _table(name: str, columns: str, pk: tuple[str, ...],
           families: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> Table:
    """A table from its columns as CockroachDB declares them: ``"id UUID NOT NULL, balance DECIMAL(12,2)"``."""
    cols = []
    for spec in re.split(r",\s*(?![^()]*\))", columns.strip()):
        m = _COLUMN.match(spec.strip())
        if m is None or m.group(2) not in _SQL_TYPES:
            raise ValueError(f"table {name}: column {spec!r} is not NAME TYPE [NOT NULL] with a type of {_SQL_TYPES}")
        cols.append(Column(m.group(1), m.group(2), nullable=m.group(5) is None,
                           precision=int(m.group(3) or 0), scale=int(m.group(4) or 0)))
    return Table(name, tuple(cols), pk, families)


TABLES: dict[str, Table] = {t.name: t for t in (
    _table("users", "id UUID NOT NULL, city STRING NOT NULL, name STRING, address STRING, credit_card STRING, "
                    "balance DECIMAL(12,2), created_at TIMESTAMP", ("id",)),
    _table("vehicles", "city STRING NOT NULL, id UUID NOT NULL, type STRING, status STRING, ext JSONB, odometer INT8, "
                       "last_service TIMESTAMPTZ, tags STRING[], is_electric BOOL NOT NULL", ("city", "id"),
           (("primary", ("city", "id", "type", "status", "odometer", "last_service")),
            # is_electric is NOT NULL so the family always has a KV and an event on every insert.
            ("details", ("ext", "tags", "is_electric")))),
    _table("rides", "id UUID NOT NULL, city STRING NOT NULL, rider_id UUID, vehicle_id UUID, "
                    "revenue DECIMAL(10,2), start_time TIMESTAMP, end_time TIMESTAMP, distance FLOAT, raw BYTES",
           ("id",)),
)}


def spark_schemas(tables: Sequence[str] | None = None) -> dict[str, str]:
    """Spark DDL of the movr tables, from their CockroachDB column types (what apply types them with)."""
    from ..apply import ddl_from_crdb_types

    return {
        name: ddl_from_crdb_types({c.name: (f"DECIMAL({c.precision},{c.scale})" if c.sql == "DECIMAL" else c.sql)
                                   for c in t.columns})
        for name, t in TABLES.items() if tables is None or name in tables
    }


def primary_keys() -> dict[str, list[str]]:
    """Primary-key columns of the movr tables, in key order."""
    return {name: list(t.pk) for name, t in TABLES.items()}


DATABASE = "movr"
SCHEMA = "public"

# --------------------------------------------------------------------------------------------
# CockroachDB's JSON encoding
# --------------------------------------------------------------------------------------------

# CockroachDB's encoder (pkg/util/json) is Go's string escaper without HTML escaping: quote,
# backslash, \n \r \t, other control bytes as \u00xx (lowercase hex), and U+2028/U+2029.
_ESCAPE_RE = re.compile('[\x00-\x1f"\\\\\u2028\u2029]')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Go's json.Marshal (legacy sink wrapper) additionally escapes these when compacting RawMessage.
_HTML_RE = re.compile("[<>&]")


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group(0)
    return _ESCAPES.get(ch) or "\\u%04x" % ord(ch)


def _json_string(s: str, escape_html: bool) -> str:
    out = _ESCAPE_RE.sub(_escape_char, s)
    if escape_html:
        out = _HTML_RE.sub(lambda m: "\\u%04x" % ord(m.group(0)), out)
    return '"' + out + '"'


def _float_text(f: float) -> str:
    # CockroachDB goes float64 -> apd.Decimal (shortest digits) -> to-sci-string; Python's
    # repr gives the same shortest digits and Decimal.normalize the same exponent.
    if f == 0:
        return "0"
    return str(Decimal(repr(f)).normalize())


def crdb_json(value: Any, *, compact: bool = False, escape_html: bool = False) -> str:
    """Encode ``value`` exactly as CockroachDB's changefeed JSON encoder does.

    Contract: dict keys are sorted (by code point, which is UTF-8 byte order) at every level;
    separators are ``", "`` and ``": "`` unless ``compact`` (Go ``json.Compact`` style, as the
    legacy sink produces); strings stay raw UTF-8; ``escape_html`` escapes ``<>&`` like Go's
    ``json.Marshal``. ``Decimal`` is written with its exact digits (``26.30`` stays ``26.30``),
    ``int`` with all digits, ``float`` as CockroachDB prints a FLOAT (shortest digits), ``None``
    as ``null``. Non-finite floats are rejected: CockroachDB sends them as strings, so store the
    string (``"NaN"``) instead.
    """
    item_sep, key_sep = (",", ":") if compact else (", ", ": ")
    parts: list[str] = []

    def emit(v: Any) -> None:
        if v is None:
            parts.append("null")
        elif v is True:
            parts.append("true")
        elif v is False:
            parts.append("false")
        elif isinstance(v, str):
            parts.append(_json_string(v, escape_html))
        elif isinstance(v, int):
            parts.append(str(v))
        elif isinstance(v, Decimal):
            if not v.is_finite():
                raise ValueError(f"non-finite Decimal {v!r} has no JSON form")
            parts.append(str(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError(f"non-finite float {v!r}: CockroachDB sends it as a string")
            parts.append(_float_text(v))
        elif isinstance(v, Mapping):
            parts.append("{")
            for i, k in enumerate(sorted(v)):
                if i:
                    parts.append(item_sep)
                parts.append(_json_string(k, escape_html))
                parts.append(key_sep)
                emit(v[k])
            parts.append("}")
        elif isinstance(v, (list, tuple)):
            parts.append("[")
            for i, item in enumerate(v):
                if i:
                    parts.append(item_sep)
                emit(item)
            parts.append("]")
        else:
            raise TypeError(f"cannot encode {type(v).__name__} as changefeed JSON")

    emit(value)
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# Hybrid logical clock
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, order=True)
class HLC:
    """A CockroachDB HLC timestamp; ``str()`` is the changefeed form ``<wall ns>.<10-digit logical>``."""

    wall: int
    logical: int = 0

    def __str__(self) -> str:
        return "%d.%010d" % (self.wall, self.logical)


class _Clock:
    """Commit timestamps in strictly increasing order, sometimes with the same wall time."""

    def __init__(self, rng: random.Random, start_wall: int) -> None:
        self._rng = rng
        self._now = HLC(start_wall, 0)

    def tick(self) -> HLC:
        if self._rng.random() < 0.15:
            self._now = HLC(self._now.wall, self._now.logical + 1)
        else:
            self._now = HLC(self._now.wall + self._rng.randint(1_000, 3_000_000), 0)
        return self._now

    @property
    def now(self) -> HLC:
        return self._now


# --------------------------------------------------------------------------------------------
# Data generation (values are stored already in their changefeed-JSON form)
# --------------------------------------------------------------------------------------------

_CITIES = ("amsterdam", "boston", "los angeles", "new york", "paris", "rome", "san francisco",
           "seattle", "washington dc", "münchen", "東京")
_FIRST = ("Timothy", "Susan", "Brad", "Zoë", "Jürgen", "東京", "Chloé", "Ngozi", "Søren", "Ana")
_LAST = ("Jackson", "Harrington", "Hill", "Müller", "O'Brien", "García", "太郎", "Nguyen")
_STREETS = ("Peter Divide", "Andrew Roads", "Stephen Gardens", "Gentry Plains", "Rue de l'Été",
            "Chelsey Tunnel")
# Awkward but legal contents: quotes, backslashes, HTML characters, a tab, a 4-byte emoji.
_ODD_ADDRESSES = ('12 "Quoted" Lane', "Café & Bar <2>", "Unit 4\\5 Back St", "Tab\tRoad 7",
                  "Bike 🚲 Way 1")
_TAGS = ("red", "fast", "électrique", "🚲", "new", "needs-repair", "東京")
_BRANDS = ("Schwinn", "Fuji", "Merida", "Trek", "Xiaomi")
_COLORS = ("red", "yellow", "black", "green", "blue")
INT8_MAX = 9223372036854775807
INT8_MIN = -9223372036854775808
_EPOCH_2019 = _dt.datetime(2019, 1, 1)


class _Generator:
    """Draws rows and changes for the movr tables from one ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def decimal(self, precision: int, scale: int) -> Decimal:
        # scaleb keeps the exponent, so 2630 -> Decimal("26.30") with its trailing zero.
        digits = self.rng.choice((4, 6, precision))
        return Decimal(self.rng.randrange(10 ** digits)).scaleb(-scale)

    def timestamp(self, tz: bool) -> str:
        offset = _dt.timedelta(seconds=self.rng.randrange(7 * 365 * 86400))
        micros = self.rng.choice((0, 123456, 100000, self.rng.randrange(1_000_000)))
        ts = _EPOCH_2019 + offset + _dt.timedelta(microseconds=micros)
        return _format_timestamp(ts, tz)

    def maybe(self, value: Any, p_null: float = 0.1) -> Any:
        return None if self.rng.random() < p_null else value

    # ---- users
    def user(self) -> dict[str, Any]:
        r = self.rng
        return {
            "id": self.uuid(),
            "city": r.choice(_CITIES),
            "name": self.maybe(f"{r.choice(_FIRST)} {r.choice(_LAST)}", 0.05),
            "address": self.maybe(self.address()),
            "credit_card": self.maybe("%010d" % r.randrange(10 ** 10)),
            "balance": self.maybe(self.decimal(12, 2)),
            "created_at": self.maybe(self.timestamp(tz=False), 0.05),
        }

    def address(self) -> str:
        r = self.rng
        if r.random() < 0.15:
            return r.choice(_ODD_ADDRESSES)
        return f"{r.randint(1, 99999)} {r.choice(_STREETS)}" + r.choice(("", " Apt. 47", " Suite 94"))

    def user_update(self, row: dict[str, Any]) -> dict[str, Any]:
        fields = {
            "name": lambda: f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}",
            "address": self.address,
            "credit_card": lambda: "%010d" % self.rng.randrange(10 ** 10),
            "balance": lambda: self.decimal(12, 2),
        }
        return self._change_some(row, fields)

    # ---- vehicles
    def vehicle(self) -> dict[str, Any]:
        r = self.rng
        return {
            "city": r.choice(_CITIES),
            "id": self.uuid(),
            "type": r.choice(("bike", "scooter", "skateboard")),
            "status": r.choice(("available", "in_use", "lost")),
            "ext": self.ext(),
            "odometer": self.maybe(self.odometer(), 0.05),
            "last_service": self.maybe(self.timestamp(tz=True)),
            "tags": self.maybe(self.tags()),
            "is_electric": r.random() < 0.5,
        }

    def odometer(self) -> int:
        r = self.rng
        kind = r.random()
        if kind < 0.1:
            return INT8_MAX
        if kind < 0.12:
            return INT8_MIN
        if kind < 0.5:
            return r.randint(2 ** 53 + 1, INT8_MAX)
        return r.randrange(1_000_000)

    def tags(self) -> list[str]:
        return self.rng.sample(_TAGS, self.rng.randint(0, 3))

    def ext(self) -> Any:
        r = self.rng
        if r.random() < 0.08:
            return None  # JSON null (or SQL NULL): both are encoded as plain `null`.
        ext: dict[str, Any] = {"brand": r.choice(_BRANDS), "color": r.choice(_COLORS)}
        if r.random() < 0.6:
            ext["specs"] = {
                "battery": {"capacity_wh": r.randint(200, 900),
                            "cells": [r.randint(1, 99) for _ in range(r.randint(0, 4))]},
                "weight_kg": Decimal(r.randint(50, 400)).scaleb(-1),
                "big": r.randint(2 ** 53, INT8_MAX),
            }
        if r.random() < 0.4:
            ext["history"] = [{"km": r.randint(0, 5000), "note": self.maybe("ok", 0.5)}
                              for _ in range(r.randint(1, 3))]
        return ext

    def vehicle_update(self, row: dict[str, Any]) -> dict[str, Any]:
        fields = {
            "status": lambda: self.rng.choice(("available", "in_use", "lost")),
            "odometer": self.odometer,
            "last_service": lambda: self.timestamp(tz=True),
            "ext": self.ext,
            "tags": self.tags,
            "is_electric": lambda: not row["is_electric"],
        }
        return self._change_some(row, fields)

    # ---- rides
    def ride(self, rider_id: str | None, vehicle_id: str | None) -> dict[str, Any]:
        r = self.rng
        return {
            "id": self.uuid(),
            "city": r.choice(_CITIES),
            "rider_id": rider_id or self.uuid(),
            "vehicle_id": vehicle_id or self.uuid(),
            "revenue": self.maybe(self.decimal(10, 2)),
            "start_time": self.timestamp(tz=False),
            "end_time": self.maybe(self.timestamp(tz=False), 0.5),
            "distance": self.maybe(self.distance()),
            "raw": self.maybe(self.raw_bytes()),
        }

    def distance(self) -> float | str:
        r = self.rng
        if r.random() < 0.08:
            # CockroachDB encodes non-finite FLOATs as these JSON strings.
            return r.choice(("NaN", "Infinity", "-Infinity"))
        return r.choice((round(r.uniform(0, 50), 3), float(r.randint(0, 40)), 1e-7 * r.randint(1, 9)))

    def raw_bytes(self) -> str:
        return "\\x" + self.rng.randbytes(self.rng.randint(0, 8)).hex()

    def ride_update(self, row: dict[str, Any]) -> dict[str, Any]:
        fields = {
            "end_time": lambda: self.timestamp(tz=False),
            "revenue": lambda: self.decimal(10, 2),
            "distance": self.distance,
            "raw": self.raw_bytes,
        }
        return self._change_some(row, fields)

    def _change_some(self, row: dict[str, Any], fields: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        # Redraw until something really changes: every update then yields at least one message
        # (an unchanged column family emits nothing, so a no-op update would vanish).
        for _ in range(20):
            new = dict(row)
            for name in self.rng.sample(sorted(fields), self.rng.randint(1, 2)):
                new[name] = fields[name]()
            if new != row:
                return new
        raise AssertionError("could not draw a changed row")  # pragma: no cover


def _format_timestamp(ts: _dt.datetime, tz: bool) -> str:
    # CockroachDB trims trailing zeros of the fraction and drops it when it is zero.
    text = ts.strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        text += ("." + "%06d" % ts.microsecond).rstrip("0")
    return text + ("Z" if tz else "")


class _LiveRows:
    """Live primary keys of one table with O(1) insert, delete and random choice."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str) -> None:
        self._pos[key] = len(self._keys)
        self._keys.append(key)

    def remove(self, key: str) -> None:
        i = self._pos.pop(key)
        last = self._keys.pop()
        if i < len(self._keys):
            self._keys[i] = last
            self._pos[last] = i

    def choice(self, rng: random.Random) -> str:
        return self._keys[rng.randrange(len(self._keys))]


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SimMessage:
    """One Pub/Sub message as CockroachDB would publish it.

    ``topic``: Pub/Sub topic id; ``table``: source table ("" for a resolved message on a shared
    ``topic_name`` topic); ``data``: the exact message body; ``attributes``: Pub/Sub attributes
    (empty unless ``with_table_name_attribute``); ``ordering_key``: "" unless ``legacy_wrapper``;
    ``kind``: "row" or "resolved"; ``op``: "c", "u" or "d" ("" for resolved); ``key``: the key
    JSON text exactly as embedded in ``data`` (an array, or an object for ``enriched``; "" for
    resolved); ``hlc``: the commit (or resolved) HLC timestamp; ``pk``: the primary-key JSON
    array text, which is the key of :meth:`ChangefeedSimulator.ground_truth` ("" for resolved).
    """

    topic: str
    table: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    kind: str
    op: str
    key: str
    hlc: str
    pk: str = ""


_ENVELOPES = ("wrapped", "bare", "enriched")
_ENRICHED_PROPERTIES = frozenset({"source", "schema"})
_OPS = ("insert", "update", "delete")
_TOPIC_RE = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$")

_SOURCE_SCHEMA_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("mvcc_timestamp", "string", True), ("ts_ns", "int64", True), ("ts_hlc", "string", True),
    ("table_name", "string", False), ("origin", "string", False), ("cluster_id", "string", False),
    ("node_id", "string", False), ("changefeed_sink", "string", False),
    ("schema_name", "string", False), ("node_name", "string", False),
    ("database_name", "string", False), ("source_node_locality", "string", False),
    ("primary_keys", "array", False), ("job_id", "string", False), ("db_version", "string", False),
    ("cluster_name", "string", False),
)


def _column_schema(col: Column) -> dict[str, Any]:
    """Kafka-Connect JSON schema of a column, as CockroachDB's kcjsonschema builds it."""
    base: dict[str, Any] = {
        "UUID": {"type": "string"},
        "STRING": {"type": "string"},
        "BYTES": {"type": "bytes"},
        "DECIMAL": {"type": "float64", "name": "decimal",
                    "parameters": {"precision": str(col.precision), "scale": str(col.scale)}},
        "TIMESTAMP": {"type": "string", "name": "timestamp"},
        "TIMESTAMPTZ": {"type": "string", "name": "timestamp"},
        "JSONB": {"type": "json"},
        "INT8": {"type": "int64"},
        "STRING[]": {"type": "array", "items": {"optional": False, "type": "string"}},
        "BOOL": {"type": "boolean"},
        "FLOAT": {"type": "float64"},
    }[col.sql]
    return {"field": col.name, "optional": col.nullable, **base}


def _struct_schema(field: str | None, name: str, cols: Sequence[Column], optional: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"fields": [_column_schema(c) for c in cols], "name": name,
                           "optional": optional, "type": "struct"}
    if field:
        out["field"] = field
    return out


def _source_schema() -> dict[str, Any]:
    fields = []
    for name, typ, optional in _SOURCE_SCHEMA_FIELDS:
        f: dict[str, Any] = {"field": name, "optional": optional, "type": typ}
        if typ == "array":
            f["items"] = {"optional": False, "type": "string"}
        fields.append(f)
    return {"field": "source", "fields": fields, "name": "cockroachdb.source", "optional": True,
            "type": "struct"}


@dataclasses.dataclass(frozen=True)
class _Options:
    envelope: str
    enriched_properties: frozenset[str]
    diff: bool
    updated: bool
    mvcc_timestamp: bool
    key_in_value: bool
    column_families: bool
    full_table_name: bool
    topic_name: str | None
    resolved_every: int
    legacy_wrapper: bool
    with_table_name_attribute: bool
    tables: tuple[str, ...]
    mix: tuple[float, float, float]


def _validate(**kw: Any) -> _Options:
    """Check every option; raise ``ValueError`` naming the offending one."""
    for name in ("diff", "updated", "mvcc_timestamp", "key_in_value", "column_families",
                 "full_table_name", "legacy_wrapper", "with_table_name_attribute"):
        if not isinstance(kw[name], bool):
            raise ValueError(f"{name}: expected a bool, got {kw[name]!r}")
    envelope = kw["envelope"]
    if envelope not in _ENVELOPES:
        raise ValueError(f"envelope: expected one of {_ENVELOPES}, got {envelope!r}")
    props = kw["enriched_properties"]
    if isinstance(props, str):
        props = [p.strip() for p in props.split(",") if p.strip()]
    props = frozenset(props or ())
    if not props <= _ENRICHED_PROPERTIES:
        raise ValueError(f"enriched_properties: unknown {sorted(props - _ENRICHED_PROPERTIES)}; "
                         f"allowed {sorted(_ENRICHED_PROPERTIES)}")
    if props and envelope != "enriched":
        raise ValueError("enriched_properties: only usable with envelope='enriched'")
    if kw["diff"] and envelope == "bare":
        raise ValueError("diff: not supported with envelope='bare' (CockroachDB has no 'before' there)")
    if kw["legacy_wrapper"] and envelope == "enriched":
        raise ValueError("legacy_wrapper: the legacy sink was removed in v25.2, before envelope='enriched'")
    every = kw["resolved_every"]
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(f"resolved_every: expected an int >= 0, got {every!r}")
    topic_name = kw["topic_name"]
    if topic_name is not None and (not isinstance(topic_name, str) or not _TOPIC_RE.match(topic_name)
                                   or topic_name.startswith("goog")):
        raise ValueError(f"topic_name: not a valid Pub/Sub topic id: {topic_name!r}")
    tables = kw["tables"]
    tables = tuple(TABLES) if tables is None else ((tables,) if isinstance(tables, str) else tuple(tables))
    unknown = [t for t in tables if t not in TABLES]
    if not tables or unknown or len(set(tables)) != len(tables):
        raise ValueError(f"tables: expected a non-empty subset of {tuple(TABLES)} without repeats, "
                         f"got {kw['tables']!r}")
    return _Options(envelope, props, kw["diff"], kw["updated"], kw["mvcc_timestamp"], kw["key_in_value"],
                    kw["column_families"], kw["full_table_name"], topic_name, every,
                    kw["legacy_wrapper"], kw["with_table_name_attribute"], tables, _validate_mix(kw["mix"]))


def _validate_mix(mix: Any) -> tuple[float, float, float]:
    if isinstance(mix, Mapping):
        extra = set(mix) - set(_OPS)
        if extra:
            raise ValueError(f"mix: unknown operations {sorted(extra)}; allowed {_OPS}")
        mix = tuple(mix.get(op, 0.0) for op in _OPS)
    try:
        weights = tuple(float(w) for w in mix)
    except (TypeError, ValueError):
        raise ValueError(f"mix: expected (insert, update, delete) weights, got {mix!r}") from None
    if len(weights) != 3 or any(not math.isfinite(w) or w < 0 for w in weights) or weights[0] <= 0:
        raise ValueError(f"mix: need 3 finite weights >= 0 with insert > 0, got {mix!r}")
    return weights  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------


class ChangefeedSimulator:
    """Deterministic CockroachDB changefeed traffic for the movr tables, with its ground truth.

    Options mirror ``CREATE CHANGEFEED ... WITH``: ``envelope`` ("wrapped", "bare", "enriched"),
    ``enriched_properties`` (subset of {"source", "schema"}, enriched only), ``diff`` (not with
    bare), ``updated``, ``mvcc_timestamp``, ``key_in_value``, ``column_families`` (vehicles is
    split into families ``primary`` and ``details``: topics ``vehicles.primary`` and
    ``vehicles.details``), ``full_table_name`` (topic ``movr.public.<table>``), ``topic_name``
    (one topic for everything), ``resolved_every`` (a resolved message to every topic after every
    N row changes; 0 = never), ``legacy_wrapper`` (pre-v25.2 sink layout, ordering key = key),
    ``with_table_name_attribute`` (Pub/Sub attribute ``TABLE_NAME``), ``tables`` (subset of
    ``TABLES``), ``mix`` ((insert, update, delete) weights or a dict of them) and ``seed``.

    Invalid options raise ``ValueError`` naming the option. In the enriched envelope ``updated``
    and ``mvcc_timestamp`` only show inside ``source`` (as CockroachDB does), so without the
    ``source`` property they add nothing.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        envelope: str = "wrapped",
        enriched_properties: Sequence[str] | str | None = None,
        diff: bool = False,
        updated: bool = False,
        mvcc_timestamp: bool = False,
        key_in_value: bool = False,
        column_families: bool = False,
        full_table_name: bool = False,
        topic_name: str | None = None,
        resolved_every: int = 0,
        legacy_wrapper: bool = False,
        with_table_name_attribute: bool = False,
        tables: Sequence[str] | None = None,
        mix: Sequence[float] | Mapping[str, float] = (0.6, 0.3, 0.1),
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed: expected an int, got {seed!r}")
        self.seed = seed
        self.options = _validate(
            envelope=envelope, enriched_properties=enriched_properties, diff=diff, updated=updated,
            mvcc_timestamp=mvcc_timestamp, key_in_value=key_in_value, column_families=column_families,
            full_table_name=full_table_name, topic_name=topic_name, resolved_every=resolved_every,
            legacy_wrapper=legacy_wrapper, with_table_name_attribute=with_table_name_attribute,
            tables=tables, mix=mix)
        # Separate streams: the row changes must not depend on envelope options or delivery.
        self._gen = _Generator(random.Random(f"crdb-sim:data:{seed}"))
        self._op_rng = random.Random(f"crdb-sim:ops:{seed}")
        self._clock = _Clock(random.Random(f"crdb-sim:clock:{seed}"), 1_745_000_000_000_000_000)
        self._meta_rng = random.Random(f"crdb-sim:meta:{seed}")
        meta = random.Random(f"crdb-sim:source:{seed}")
        self._source_static = {
            "changefeed_sink": "pubsub",
            "cluster_id": str(uuid.UUID(int=meta.getrandbits(128), version=4)),
            "cluster_name": "",
            "database_name": DATABASE,
            "db_version": "v25.4.0",
            "job_id": str(1066452286961614849 + meta.randrange(10 ** 12)),
            "node_id": "1",
            "node_name": "localhost",
            "origin": "cockroachdb",
            "schema_name": SCHEMA,
            "source_node_locality": "",
        }
        self._rows: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in self.options.tables}
        self._live: dict[str, _LiveRows] = {t: _LiveRows() for t in self.options.tables}
        self._stats = {t: {"inserts": 0, "updates": 0, "deletes": 0, "row_messages": 0, "resolved": 0}
                       for t in self.options.tables}
        self._changes_since_resolved = 0

    # ---- topics
    def _base_topic(self, table: str) -> str:
        return f"{DATABASE}.{SCHEMA}.{table}" if self.options.full_table_name else table

    def _families(self, table: str) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
        t = TABLES[table]
        if self.options.column_families and t.families:
            return tuple((name, cols) for name, cols in t.families)
        return ((None, t.column_names),)

    def _topic(self, table: str, family: str | None) -> str:
        if self.options.topic_name:
            return self.options.topic_name
        base = self._base_topic(table)
        return f"{base}.{family}" if family else base

    def topics(self) -> list[str]:
        """The Pub/Sub topic ids this feed publishes to, in table order, without repeats."""
        out: list[str] = []
        for table in self.options.tables:
            for family, _ in self._families(table):
                topic = self._topic(table, family)
                if topic not in out:
                    out.append(topic)
        return out

    def _topic_tables(self) -> list[tuple[str, str]]:
        """(topic, table) pairs for resolved messages; table is "" on a shared topic."""
        if self.options.topic_name:
            return [(self.options.topic_name, "")]
        return [(self._topic(t, f), t) for t in self.options.tables for f, _ in self._families(t)]

    # ---- generation
    def events(self, n_rows: int) -> Iterator[SimMessage]:
        """Yield the messages of ``n_rows`` more row changes, in commit order.

        Each change gets a strictly greater HLC than the previous one and yields one message
        (one per changed column family with ``column_families``). After every
        ``resolved_every`` changes, a resolved message carrying the last commit HLC goes to every
        topic. Generation continues where the previous call stopped; the ground truth follows
        the generator lazily (it covers the changes yielded so far).
        """
        if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 0:
            raise ValueError(f"n_rows: expected an int >= 0, got {n_rows!r}")
        for _ in range(n_rows):
            yield from self._one_change()
            self._changes_since_resolved += 1
            every = self.options.resolved_every
            if every and self._changes_since_resolved >= every:
                self._changes_since_resolved = 0
                yield from self._resolved(self._clock.now)

    def _pick_op(self, table: str) -> str:
        w_ins, w_upd, w_del = self.options.mix
        if not len(self._live[table]):
            return "insert"
        return self._op_rng.choices(_OPS, weights=(w_ins, w_upd, w_del))[0]

    def _one_change(self) -> Iterator[SimMessage]:
        table = self._op_rng.choice(self.options.tables)
        op = self._pick_op(table)
        rows, live = self._rows[table], self._live[table]
        before: dict[str, Any] | None = None
        if op == "insert":
            after: dict[str, Any] | None = self._new_row(table)
            pk = self._pk_text(table, after)
            if pk in rows:  # a 122-bit UUID collision: treat as an update to keep the truth exact.
                op, before = "update", rows[pk]
            else:
                live.add(pk)
        else:
            pk = live.choice(self._op_rng)
            before = rows[pk]
            after = self._updated_row(table, before) if op == "update" else None
            if after is None:
                live.remove(pk)
        if after is None:
            del rows[pk]
        else:
            rows[pk] = after
        stat = {"insert": "inserts", "update": "updates", "delete": "deletes"}[op]
        self._stats[table][stat] += 1
        hlc = self._clock.tick()
        yield from self._row_messages(table, op, pk, before, after, hlc)

    def _new_row(self, table: str) -> dict[str, Any]:
        if table == "users":
            return self._gen.user()
        if table == "vehicles":
            return self._gen.vehicle()
        return self._gen.ride(self._some_key("users", "id"), self._some_key("vehicles", "id"))

    def _some_key(self, table: str, column: str) -> str | None:
        live = self._live.get(table)
        if not live:
            return None
        return self._rows[table][live.choice(self._gen.rng)][column]

    def _updated_row(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        return {"users": self._gen.user_update, "vehicles": self._gen.vehicle_update,
                "rides": self._gen.ride_update}[table](row)

    @staticmethod
    def _pk_text(table: str, row: Mapping[str, Any]) -> str:
        return crdb_json([row[c] for c in TABLES[table].pk])

    # ---- encoding
    def _row_messages(self, table: str, op: str, pk: str, before: dict[str, Any] | None,
                      after: dict[str, Any] | None, hlc: HLC) -> Iterator[SimMessage]:
        t = TABLES[table]
        key_row = after if after is not None else before
        assert key_row is not None
        ts_ns = hlc.wall + self._meta_rng.randint(5_000_000, 400_000_000)
        for family, cols in self._families(table):
            if op == "update" and all(before[c] == after[c] for c in cols):  # type: ignore[index]
                continue  # CockroachDB only sees the column families whose KV changed.
            fam_after = None if after is None else {c: after[c] for c in cols}
            fam_before = None if before is None else {c: before[c] for c in cols}
            value, key_text = self._encode_value(t, op, key_row, fam_before, fam_after, cols, hlc, ts_ns)
            topic = self._topic(table, family)
            data, ordering_key = self._wrap(key_text, value, topic)
            attrs = {"TABLE_NAME": table} if self.options.with_table_name_attribute else {}
            self._stats[table]["row_messages"] += 1
            yield SimMessage(topic, table, data, attrs, ordering_key, "row",
                             {"insert": "c", "update": "u", "delete": "d"}[op], key_text, str(hlc), pk)

    def _encode_value(self, t: Table, op: str, key_row: Mapping[str, Any], before: dict | None,
                      after: dict | None, cols: tuple[str, ...], hlc: HLC, ts_ns: int) -> tuple[Any, str]:
        o = self.options
        pk_list = [key_row[c] for c in t.pk]
        if o.envelope == "wrapped":
            value: dict[str, Any] = {"after": after}
            if o.diff:
                value["before"] = before
            if o.key_in_value:
                value["key"] = pk_list
            if o.updated:
                value["updated"] = str(hlc)
            if o.mvcc_timestamp:
                value["mvcc_timestamp"] = str(hlc)
            return value, crdb_json(pk_list)
        if o.envelope == "bare":
            # A bare delete still names every column: key columns keep their value, the rest null.
            value = dict(after) if after is not None else {c: (key_row[c] if c in t.pk else None) for c in cols}
            meta: dict[str, Any] = {}
            if o.updated:
                meta["updated"] = str(hlc)
            if o.mvcc_timestamp:
                meta["mvcc_timestamp"] = str(hlc)
            if o.key_in_value:
                meta["key"] = pk_list
            if meta:
                value["__crdb__"] = meta
            return value, crdb_json(pk_list)
        return self._encode_enriched(t, op, key_row, before, after, cols, hlc, ts_ns)

    def _encode_enriched(self, t: Table, op: str, key_row: Mapping[str, Any], before: dict | None,
                         after: dict | None, cols: tuple[str, ...], hlc: HLC, ts_ns: int) -> tuple[Any, str]:
        o = self.options
        key_obj = {c: key_row[c] for c in t.pk}
        payload: dict[str, Any] = {"after": after, "op": {"insert": "c", "update": "u", "delete": "d"}[op],
                                   "ts_ns": ts_ns}
        if o.diff:
            payload["before"] = before
        if o.key_in_value:
            payload["key"] = key_obj
        if "source" in o.enriched_properties:
            source = dict(self._source_static, primary_keys=list(t.pk), table_name=t.name)
            if o.updated:
                source["ts_hlc"] = str(hlc)
                source["ts_ns"] = hlc.wall
            if o.mvcc_timestamp:
                source["mvcc_timestamp"] = str(hlc)
            payload["source"] = source
        if "schema" not in o.enriched_properties:
            return payload, crdb_json(key_obj)
        col_defs = [t.column(c) for c in cols]
        key_cols = [t.column(c) for c in t.pk]
        fields: list[dict[str, Any]] = []
        if o.diff:
            fields.append(_struct_schema("before", f"{t.name}.before.value", col_defs, True))
        fields.append(_struct_schema("after", f"{t.name}.after.value", col_defs, False))
        if "source" in o.enriched_properties:
            fields.append(_source_schema())
        if o.key_in_value:
            fields.append(_struct_schema("key", f"{t.name}.key", key_cols, False))
        fields += [{"field": "ts_ns", "optional": False, "type": "int64"},
                   {"field": "op", "optional": False, "type": "string"}]
        schema = {"fields": fields, "name": "cockroachdb.envelope", "optional": False, "type": "struct"}
        key = {"payload": key_obj, "schema": _struct_schema(None, f"{t.name}.key", key_cols, False)}
        return {"payload": payload, "schema": schema}, crdb_json(key)

    def _wrap(self, key_text: str, value: Any, topic: str) -> tuple[bytes, str]:
        """The Pub/Sub body and ordering key; both sink generations are built here."""
        if self.options.legacy_wrapper:
            # Go's json.Marshal of json.RawMessage fields: compacted, HTML characters escaped.
            key_c = crdb_json(json.loads(key_text, parse_float=Decimal), compact=True, escape_html=True)
            body = ('{"key":' + key_c + ',"value":' + crdb_json(value, compact=True, escape_html=True)
                    + ',"topic":' + _json_string(topic, True) + "}")
            return body.encode("utf-8"), key_text
        body = '{"Key":' + key_text + ',"Value":' + crdb_json(value) + ',"Topic":' + _json_string(topic, True) + "}"
        return body.encode("utf-8"), ""

    def _resolved(self, hlc: HLC) -> Iterator[SimMessage]:
        if self.options.envelope == "bare":
            data = ('{"__crdb__":{"resolved":"%s"}}' % hlc).encode()
        else:
            data = ('{"resolved":"%s"}' % hlc).encode()
        for topic, table in self._topic_tables():
            for t in ([table] if table else self.options.tables):
                self._stats[t]["resolved"] += 1
            yield SimMessage(topic, table, data, {}, "", "resolved", "", "", str(hlc), "")

    # ---- results
    def ground_truth(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Final state of every table after the changes generated so far.

        ``{table: {pk_json_text: {column: value}}}`` where ``pk_json_text`` is the primary-key
        array in CockroachDB's formatting (``SimMessage.pk``, e.g. ``["seattle", "6f0c..."]``),
        and values are exact: ``Decimal`` for DECIMAL, ``int`` for INT8, ``bool`` for BOOL,
        ``str`` for STRING/UUID/TIMESTAMP/TIMESTAMPTZ/BYTES (as sent, e.g. ``"\\x0a0b"``),
        ``float`` for finite FLOATs and the sent string ("NaN", "Infinity", "-Infinity") for the
        others, parsed JSON for JSONB and arrays (JSON numbers: ``int`` or ``Decimal``), ``None``
        for NULL (JSON null in a JSONB column too). With column families the row is whole. Deleted
        rows are absent. The result is a deep copy.
        """
        return _deep_copy(self._rows)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per table: ``inserts``, ``updates``, ``deletes`` (row changes), ``row_messages`` and
        ``resolved`` (resolved messages sent to the topics the table publishes to)."""
        return {t: dict(s) for t, s in self._stats.items()}

    # ---- publishing
    def publish(
        self,
        publisher: Any,
        project: str,
        n_rows: int,
        *,
        rate: float | None = None,
        create_topics: bool = True,
        shuffle_window: int = 0,
        duplicate_fraction: float = 0.0,
        on_progress: Callable[[int, int], None] | None = None,
        timeout: float = 120.0,
    ) -> "PublishReport":
        """Publish the messages of ``events(n_rows)`` with a google-cloud-pubsub ``PublisherClient``.

        Creates missing topics first (``create_topics``). Delivery order is the commit order,
        shuffled inside consecutive windows of ``shuffle_window`` messages when > 1; a
        ``duplicate_fraction`` of the messages is published a second time, a few messages later,
        with the same bytes (a new message id), like CockroachDB re-emitting after a restart. At
        most ``rate`` messages per second when given. ``on_progress(published, total)`` is called
        after each batch of submissions and at the end. Waits for every publish future (up to
        ``timeout`` seconds overall) and raises ``RuntimeError`` naming the failures, if any.
        Legacy ordering keys need a publisher created with message ordering enabled.
        """
        if rate is not None and (not isinstance(rate, (int, float)) or not rate > 0):
            raise ValueError(f"rate: expected a number > 0 or None, got {rate!r}")
        if isinstance(shuffle_window, bool) or not isinstance(shuffle_window, int) or shuffle_window < 0:
            raise ValueError(f"shuffle_window: expected an int >= 0, got {shuffle_window!r}")
        if not isinstance(duplicate_fraction, (int, float)) or not 0.0 <= duplicate_fraction <= 1.0:
            raise ValueError(f"duplicate_fraction: expected 0.0..1.0, got {duplicate_fraction!r}")
        if self.options.legacy_wrapper and not _ordering_enabled(publisher):
            raise ValueError("legacy_wrapper: the publisher must enable message ordering "
                             "(make_publisher(host, ordering=True))")
        if create_topics:
            _ensure_topics(publisher, project, self.topics())
        messages = list(self.events(n_rows))
        plan, n_dups = _delivery_plan(messages, shuffle_window, duplicate_fraction,
                                      random.Random(f"crdb-sim:delivery:{self.seed}:{self._stats_total()}"))
        report = _publish_plan(publisher, project, plan, rate, on_progress, timeout)
        report.row_messages = sum(1 for m in messages if m.kind == "row")
        report.resolved_messages = len(messages) - report.row_messages
        report.duplicates = n_dups
        report.stats = self.stats()
        return report

    def _stats_total(self) -> int:
        return sum(s["row_messages"] + s["resolved"] for s in self._stats.values())


def _deep_copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _deep_copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_deep_copy(x) for x in v]
    return v  # str, int, Decimal, float, bool and None are immutable


# --------------------------------------------------------------------------------------------
# Publishing
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PublishReport:
    """What :meth:`ChangefeedSimulator.publish` sent.

    ``published``: messages accepted by Pub/Sub, duplicates included; ``row_messages`` and
    ``resolved_messages``: distinct messages by kind; ``duplicates``: extra copies;
    ``per_topic``: accepted messages per topic; ``message_ids``: the ids per topic in submission
    order; ``elapsed_s`` from first submission to last acknowledgement; ``stats``: the
    simulator's :meth:`~ChangefeedSimulator.stats` afterwards.
    """

    published: int
    row_messages: int
    resolved_messages: int
    duplicates: int
    per_topic: dict[str, int]
    message_ids: dict[str, list[str]]
    elapsed_s: float
    stats: dict[str, dict[str, int]]

    @property
    def messages_per_s(self) -> float:
        return self.published / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def _ordering_enabled(publisher: Any) -> bool:
    opts = getattr(publisher, "publisher_options", None)
    return bool(getattr(opts, "enable_message_ordering", False))


def _ensure_topics(publisher: Any, project: str, topics: Sequence[str]) -> None:
    from google.api_core import exceptions as gexc

    for topic in topics:
        try:
            publisher.create_topic(name=publisher.topic_path(project, topic))
        except gexc.AlreadyExists:
            pass


def _delivery_plan(messages: list[SimMessage], window: int, dup_fraction: float,
                   rng: random.Random) -> tuple[list[SimMessage], int]:
    """Shuffle inside windows, then splice duplicates in a little after their originals."""
    plan = list(messages)
    if window > 1:
        for start in range(0, len(plan), window):
            chunk = plan[start:start + window]
            rng.shuffle(chunk)
            plan[start:start + window] = chunk
    n_dups = round(dup_fraction * len(plan))
    if not n_dups:
        return plan, 0
    later: dict[int, list[SimMessage]] = {}
    reach = max(window, 20)
    for i in sorted(rng.sample(range(len(plan)), n_dups)):
        later.setdefault(i + rng.randint(1, reach), []).append(plan[i])
    out: list[SimMessage] = []
    for i, msg in enumerate(plan):
        out.append(msg)
        out.extend(later.pop(i, ()))
    for pos in sorted(later):
        out.extend(later[pos])
    return out, n_dups


def _publish_plan(publisher: Any, project: str, plan: list[SimMessage], rate: float | None,
                  on_progress: Callable[[int, int], None] | None, timeout: float) -> PublishReport:
    """Submit ``plan`` in order, wait for every future; counts by kind are the caller's to fill."""
    paths: dict[str, str] = {}
    submitted: list[tuple[str, Any]] = []
    start = time.monotonic()
    for i, msg in enumerate(plan):
        if rate:
            # Pace against the start time rather than per message, so sleep jitter does not add up.
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        path = paths.get(msg.topic) or paths.setdefault(msg.topic, publisher.topic_path(project, msg.topic))
        kwargs: dict[str, Any] = dict(msg.attributes)
        if msg.ordering_key:
            kwargs["ordering_key"] = msg.ordering_key
        submitted.append((msg.topic, publisher.publish(path, msg.data, **kwargs)))
        if on_progress and (i + 1) % 1000 == 0:
            on_progress(i + 1, len(plan))
    done, not_done = concurrent.futures.wait([f for _, f in submitted], timeout=timeout)
    elapsed = time.monotonic() - start
    ids: dict[str, list[str]] = {}
    errors: list[str] = []
    for topic, fut in submitted:
        if fut in not_done:
            errors.append(f"{topic}: not acknowledged within {timeout}s")
            continue
        exc = fut.exception()
        if exc is not None:
            errors.append(f"{topic}: {type(exc).__name__}: {exc}")
        else:
            ids.setdefault(topic, []).append(fut.result())
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(plan)} publishes failed; first: {errors[0]}")
    if on_progress:
        on_progress(len(plan), len(plan))
    return PublishReport(published=len(plan), row_messages=0, resolved_messages=0, duplicates=0,
                         per_topic={t: len(v) for t, v in ids.items()}, message_ids=ids,
                         elapsed_s=elapsed, stats={})


def make_publisher(host_port: str, *, ordering: bool = False, max_messages: int = 1000,
                   max_bytes: int = 4 * 1024 * 1024, max_latency: float = 0.02) -> Any:
    """A ``PublisherClient`` for the Pub/Sub emulator at ``host_port``, tuned for throughput.

    Built by :func:`crdb_pubsub.emulator.publisher_client` (insecure channel, anonymous
    credentials; ``PUBSUB_EMULATOR_HOST`` is neither read nor set). Batches hold up to
    ``max_messages``/``max_bytes`` or wait ``max_latency`` seconds; ``ordering`` enables ordering
    keys, which ``legacy_wrapper`` needs. Call ``stop()`` then ``transport.close()`` when done.
    """
    from google.cloud import pubsub_v1

    from crdb_pubsub.emulator import publisher_client

    return publisher_client(
        host_port,
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=ordering),
        batch_settings=pubsub_v1.types.BatchSettings(max_bytes=max_bytes, max_latency=max_latency,
                                                     max_messages=max_messages),
    )


def make_subscriber(host_port: str) -> Any:
    """A ``SubscriberClient`` for the emulator at ``host_port`` (see :func:`make_publisher`)."""
    from crdb_pubsub.emulator import subscriber_client

    return subscriber_client(host_port)


# --------------------------------------------------------------------------------------------
# Command line (examples/simulate.py and the future `crdb-pubsub simulate` share it)
# --------------------------------------------------------------------------------------------


def build_arg_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """Arguments of the ``simulate`` command; :func:`main` turns them into a simulator run."""
    p = argparse.ArgumentParser(prog=prog, description="Publish simulated CockroachDB changefeed "
                                "messages (movr tables) to a Pub/Sub emulator.")
    p.add_argument("--emulator-host", default=os.environ.get("PUBSUB_EMULATOR_HOST"),
                   help="host:port of the emulator (default: $PUBSUB_EMULATOR_HOST)")
    p.add_argument("--project", default="crdb-sim", help="Pub/Sub project id")
    p.add_argument("--rows", type=int, default=1000, help="row changes to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--envelope", choices=_ENVELOPES, default="wrapped")
    p.add_argument("--enriched-properties", default="", help="comma list of source,schema")
    p.add_argument("--tables", default=",".join(TABLES), help="comma list of tables")
    p.add_argument("--mix", default="0.6,0.3,0.1", help="insert,update,delete weights")
    p.add_argument("--topic-name", default=None, help="publish everything to this one topic")
    p.add_argument("--resolved-every", type=int, default=0, help="resolved after every N changes")
    for flag in ("diff", "updated", "mvcc-timestamp", "key-in-value", "column-families",
                 "full-table-name", "legacy-wrapper", "with-table-name-attribute"):
        p.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--rate", type=float, default=None, help="max messages per second")
    p.add_argument("--shuffle-window", type=int, default=0)
    p.add_argument("--duplicate-fraction", type=float, default=0.0)
    p.add_argument("--no-create-topics", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print the message bodies, publish nothing")
    return p


def simulator_from_args(args: argparse.Namespace) -> ChangefeedSimulator:
    """Build the simulator an argument namespace of :func:`build_arg_parser` describes."""
    try:
        mix = tuple(float(x) for x in args.mix.split(","))
    except ValueError:
        raise ValueError(f"mix: expected comma-separated numbers, got {args.mix!r}") from None
    return ChangefeedSimulator(
        seed=args.seed, envelope=args.envelope, enriched_properties=args.enriched_properties or None,
        diff=args.diff, updated=args.updated, mvcc_timestamp=args.mvcc_timestamp,
        key_in_value=args.key_in_value, column_families=args.column_families,
        full_table_name=args.full_table_name, topic_name=args.topic_name,
        resolved_every=args.resolved_every, legacy_wrapper=args.legacy_wrapper,
        with_table_name_attribute=args.with_table_name_attribute,
        tables=[t.strip() for t in args.tables.split(",") if t.strip()], mix=mix)


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the ``simulate`` command; returns the process exit code (2 on bad arguments)."""
    parser = build_arg_parser(prog)
    args = parser.parse_args(argv)
    try:
        sim = simulator_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.dry_run:
        for msg in sim.events(args.rows):
            sys.stdout.write(f"{msg.topic}\t{msg.data.decode('utf-8')}\n")
        print(json.dumps(sim.stats(), indent=2), file=sys.stderr)
        return 0
    if not args.emulator_host:
        parser.error("--emulator-host is required (or set PUBSUB_EMULATOR_HOST)")
    publisher = make_publisher(args.emulator_host, ordering=args.legacy_wrapper)
    try:
        report = sim.publish(publisher, args.project, args.rows, rate=args.rate,
                             create_topics=not args.no_create_topics, shuffle_window=args.shuffle_window,
                             duplicate_fraction=args.duplicate_fraction,
                             on_progress=lambda done, total: print(f"published {done}/{total}",
                                                                   file=sys.stderr))
    except ValueError as exc:
        parser.error(str(exc))
    finally:
        publisher.stop()
        publisher.transport.close()
    print(json.dumps({
        "topics": sim.topics(),
        "published": report.published,
        "row_messages": report.row_messages,
        "resolved_messages": report.resolved_messages,
        "duplicates": report.duplicates,
        "per_topic": report.per_topic,
        "elapsed_s": round(report.elapsed_s, 3),
        "messages_per_s": round(report.messages_per_s, 1),
        "stats": report.stats,
    }, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
