"""The movr changes as Debezium (PostgreSQL, MySQL) and TiCDC publish them, with their ground truth.

The same row changes as the CockroachDB feed (``ChangefeedSimulator``'s sequence), laid out as

* **debezium-postgres** / **debezium-mysql**: Debezium Server's Pub/Sub sink (``debezium.sink.type=pubsub``,
  its defaults: JSON with schemas, ordering enabled): one message per change, its body the Kafka
  Connect JSON converter's ``{"schema":...,"payload":...}`` (compact, fields in schema order), its
  ordering key the record key's JSON (``{"schema":...,"payload":{"id":...}}``), topic
  ``<prefix>.<schema>.<table>`` (PostgreSQL) or ``<prefix>.<database>.<table>`` (MySQL);
  connector options ``decimal.handling.mode=string`` (a DECIMAL's digits, exact) and the other
  defaults (``time.precision.mode=adaptive``: a TIMESTAMP is a MicroTimestamp, microseconds
  since the epoch; a TIMESTAMPTZ a ZonedTimestamp text; bytes as base64; JSON as its text).
* **ticdc**: TiCDC's Debezium protocol (``protocol=debezium``, schemas on) as its codec writes
  it, carried to Pub/Sub by Google's Pub/Sub Kafka connector: the Kafka key in the ``key``
  attribute (TiCDC has no Pub/Sub sink). DECIMAL is a float64 there (TiCDC's rule), BOOL a
  TINYINT(1); with ``resolved_every`` its WATERMARK events go to every topic.

Positions are each producer's own and increase with the commit order: PostgreSQL ``lsn`` and
``sequence`` ``[last commit LSN, LSN]`` (one transaction per change), MySQL binlog
``file``/``pos``/``row`` (the file rotating), TiCDC ``commit_ts`` (a TSO from the commit's wall
time). ``snapshot_rows`` starts a Debezium feed with a snapshot: the first changes are not
streamed, the rows live after them are read (``op: "r"``) at the snapshot's position.

MySQL and TiDB store neither arrays nor non-finite DOUBLEs: there ``tags`` is a JSON column and
``NaN``/``Infinity`` are NULL, in the messages and in the ground truth alike.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from .clock import HLC
from .messages import SimMessage
from .tables import DATABASE, SCHEMA, Column, Table

__all__ = ["PRODUCERS", "DebeziumEncoder", "debezium_spark_type", "delivered_value"]

PRODUCERS = ("debezium-postgres", "debezium-mysql", "ticdc")
VERSION = "3.0.8.Final"
TICDC_VERSION = "2.4.0.Final"
SERVER = "movr"  # topic.prefix (Debezium), the cluster id (TiCDC)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MYSQL_FILE_EVENTS = 500  # changes per binlog file before it rotates


def _compact(value: Any) -> str:
    """Jackson's compact JSON (Kafka Connect's JSON converter): insertion order, raw UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _Raw(str):
    """A JSON number written as is (a Java or Go double's text)."""


def _dumps(value: Any) -> str:
    """Compact JSON with :class:`_Raw` numbers kept as their text."""
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    return _compact(value)


def java_double(f: float) -> str:
    """``Double.toString`` (what Jackson writes): shortest digits, E notation outside [1e-3, 1e7)."""
    if f == 0:
        return "0.0"
    if 1e-3 <= abs(f) < 1e7:
        text = repr(f)
        return text if "." in text or "e" in text else text + ".0"
    digits, _, exp = f"{Decimal(repr(f)):E}".partition("E")
    mantissa = Decimal(digits).normalize()
    m = f"{mantissa:f}"
    return (m if "." in m else m + ".0") + "E" + str(int(exp))


def go_double(f: float) -> str:
    """Go's ``encoding/json`` float64 (TiCDC's writer): shortest digits, no ``.0``."""
    text = repr(f)
    if text.endswith(".0"):
        text = text[:-2]
    if "e" in text and 1e-6 <= abs(f) < 1e21:
        return format(Decimal(repr(f)), "f")
    mantissa, e, exp = text.partition("e")
    return mantissa + e + exp[0] + exp[1:].lstrip("0") if e else text  # Go writes e-7, not e-07


def _micros(text: str) -> int:
    ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.UTC)
    delta = ts - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _mysql_family(producer: str) -> bool:
    return producer in ("debezium-mysql", "ticdc")


def _jsonb_text(value: Any) -> str:
    """JSON as PostgreSQL's jsonb (and MySQL's JSON) print it: keys by length then name, ``", "``/``": "``."""
    if isinstance(value, Mapping):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_jsonb_text(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_jsonb_text(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def delivered_value(producer: str, col: Column, value: Any) -> Any:
    """Return the value the ground truth holds for ``col`` under ``producer`` (see the module's last paragraph)."""
    if value is None:
        return None
    if col.sql == "TIMESTAMP":
        return _micros(value)  # MicroTimestamp: a BIGINT of microseconds
    if col.sql == "FLOAT" and isinstance(value, str) and _mysql_family(producer):
        return None  # no NaN/Infinity in MySQL or TiDB
    return value


def debezium_spark_type(producer: str, col: Column) -> str:
    """Spark DDL type a state table gives ``col`` as ``producer`` sends it."""
    if col.sql == "TIMESTAMP":
        return "BIGINT"
    if col.sql == "STRING[]" and _mysql_family(producer):
        return "STRING"
    return ""  # as for CockroachDB


class DebeziumEncoder:
    """Lays out one producer's messages; keeps its log position."""

    def __init__(self, producer: str) -> None:
        if producer not in PRODUCERS:
            raise ValueError(f"producer: expected one of {('cockroachdb', *PRODUCERS)}, got {producer!r}")
        self.producer = producer
        self._lsn = 0x1_6000_0000  # PostgreSQL: LSN of the next change
        self._last_commit: int | None = None
        self._tx = 740
        self._binlog = (1, 4)  # MySQL: file index, next position
        self._events = 0
        self._ticdc_logical = 0
        self._last_ts: int | None = None

    # ---- topics
    def topic(self, table: str) -> str:
        if self.producer == "debezium-postgres":
            return f"{SERVER}.{SCHEMA}.{table}"
        if self.producer == "debezium-mysql":
            return f"{SERVER}.{DATABASE}.{table}"
        return f"{DATABASE}_{table}"  # a TiCDC dispatcher topic="{schema}_{table}"

    # ---- values
    def _value(self, col: Column, value: Any) -> Any:
        if value is None:
            return None
        sql = col.sql
        if sql == "DECIMAL":
            return _Raw(go_double(float(value))) if self.producer == "ticdc" else str(value)
        if sql == "TIMESTAMP":
            return _micros(value)
        if sql == "TIMESTAMPTZ":
            return value  # ZonedTimestamp: ISO 8601 text, UTC as Z
        if sql == "JSONB":
            return _jsonb_text(value)
        if sql == "STRING[]":
            return _jsonb_text(value) if _mysql_family(self.producer) else list(value)
        if sql == "BOOL":
            return int(value) if _mysql_family(self.producer) else value
        if sql == "FLOAT":
            if isinstance(value, str):
                return None if _mysql_family(self.producer) else value  # Jackson quotes NaN/Infinity
            return _Raw(go_double(value) if self.producer == "ticdc" else java_double(value))
        if sql == "BYTES":
            return base64.b64encode(bytes.fromhex(value[2:])).decode()
        return value

    def _row(self, t: Table, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {c.name: self._value(c, row[c.name]) for c in t.columns}

    # ---- schemas (Kafka Connect's JSON schema of each part)
    def _field_schema(self, col: Column) -> dict[str, Any]:
        mysql = _mysql_family(self.producer)
        kinds: dict[str, dict[str, Any]] = {
            "UUID": {"type": "string"} if mysql else {"type": "string", "name": "io.debezium.data.Uuid", "version": 1},
            "STRING": {"type": "string"},
            "DECIMAL": {"type": "double"} if self.producer == "ticdc" else {"type": "string"},
            "TIMESTAMP": {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1},
            "TIMESTAMPTZ": {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1},
            "JSONB": {"type": "string", "name": "io.debezium.data.Json", "version": 1},
            "INT8": {"type": "int64"},
            "STRING[]": (
                {"type": "string", "name": "io.debezium.data.Json", "version": 1}
                if mysql
                else {"type": "array", "items": {"type": "string", "optional": True}}
            ),
            "BOOL": {"type": "int16"} if mysql else {"type": "boolean"},
            "FLOAT": {"type": "double"},
            "BYTES": {"type": "bytes"},
        }
        return {**kinds[col.sql], "optional": col.nullable, "field": col.name}

    def _struct(self, t: Table, field: str | None, name: str, cols: tuple[Column, ...], optional: bool) -> dict:
        out: dict[str, Any] = {"type": "struct", "fields": [self._field_schema(c) for c in cols]}
        out.update({"optional": optional, "name": name})
        if field:
            out["field"] = field
        return out

    def _source_schema(self) -> dict[str, Any]:
        def f(name: str, typ: str, optional: bool = False) -> dict[str, Any]:
            return {"type": typ, "optional": optional, "field": name}

        common = [f("version", "string"), f("connector", "string"), f("name", "string"), f("ts_ms", "int64"),
                  {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                   "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
                   "default": "false", "field": "snapshot"},
                  f("db", "string"), f("sequence", "string", True), f("ts_us", "int64", True),
                  f("ts_ns", "int64", True)]  # fmt: skip
        if self.producer == "debezium-postgres":
            rest = [f("schema", "string"), f("table", "string"), f("txId", "int64", True), f("lsn", "int64", True),
                    f("xmin", "int64", True)]  # fmt: skip
            name = "io.debezium.connector.postgresql.Source"
        else:
            rest = [f("table", "string", True), f("server_id", "int64"), f("gtid", "string", True), f("file", "string"),
                    f("pos", "int64"), f("row", "int32"), f("thread", "int64", True), f("query", "string", True)]  # fmt: skip
            name = "io.debezium.connector.mysql.Source"
        return {"type": "struct", "fields": common + rest, "optional": False, "name": name, "field": "source"}

    def _envelope_schema(self, t: Table, prefix: str) -> dict[str, Any]:
        def f(name: str, typ: str, optional: bool = True) -> dict[str, Any]:
            return {"type": typ, "optional": optional, "field": name}

        block = {"type": "struct", "fields": [f("id", "string", False), f("total_order", "int64", False),
                 f("data_collection_order", "int64", False)], "optional": True, "name": "event.block",
                 "version": 1, "field": "transaction"}  # fmt: skip
        return {
            "type": "struct",
            "fields": [
                self._struct(t, "before", f"{prefix}.Value", t.columns, True),
                self._struct(t, "after", f"{prefix}.Value", t.columns, True),
                self._source_schema(),
                block,
                f("op", "string", False),
                f("ts_ms", "int64"),
                f("ts_us", "int64"),
                f("ts_ns", "int64"),
            ],
            "optional": False,
            "name": f"{prefix}.Envelope",
            "version": 2,
        }

    # ---- positions
    def _advance(self, wall_ns: int) -> dict[str, Any]:
        """Return the source fields that place the next change (each change its own transaction)."""
        if self.producer == "debezium-postgres":
            lsn = self._lsn
            seq = [None if self._last_commit is None else str(self._last_commit), str(lsn)]
            self._last_commit = lsn + 0x68  # the transaction's commit record, after its change
            self._lsn = self._last_commit + 0x30
            self._tx += 1
            return {"sequence": _compact(seq), "txId": self._tx, "lsn": lsn}
        if self.producer == "debezium-mysql":
            index, pos = self._binlog
            self._events += 1
            self._binlog = (index + 1, 4) if self._events % _MYSQL_FILE_EVENTS == 0 else (index, pos + 417)
            return {"file": "mysql-bin.%06d" % index, "pos": pos, "row": 0}
        physical = wall_ns // 1_000_000
        ts = physical << 18
        if self._last_ts is not None and ts <= self._last_ts:
            ts = self._last_ts + 1
        self._last_ts = ts
        return {"commit_ts": ts}

    def _source(self, table: str, wall_ns: int, place: Mapping[str, Any], snapshot: str) -> dict[str, Any]:
        ms = wall_ns // 1_000_000
        if self.producer == "ticdc":
            return {"version": TICDC_VERSION, "connector": "TiCDC", "name": SERVER, "ts_ms": ms, "snapshot": "false",
                    "db": DATABASE, "table": table, "server_id": 0, "gtid": None, "file": "", "pos": 0, "row": 0,
                    "thread": 0, "query": None, "commit_ts": place["commit_ts"], "cluster_id": SERVER}  # fmt: skip
        head = {"version": VERSION, "connector": "postgresql" if self.producer == "debezium-postgres" else "mysql",
                "name": SERVER, "ts_ms": ms, "snapshot": snapshot, "db": DATABASE,
                "sequence": place.get("sequence"), "ts_us": wall_ns // 1000, "ts_ns": wall_ns}  # fmt: skip
        if self.producer == "debezium-postgres":
            return {**head, "schema": SCHEMA, "table": table, "txId": place["txId"], "lsn": place["lsn"], "xmin": None}
        return {**head, "table": table, "server_id": 223344, "gtid": None, "file": place["file"], "pos": place["pos"],
                "row": place["row"], "thread": 11, "query": None}  # fmt: skip

    # ---- messages
    def _before(self, t: Table, op: str, before: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Return the ``before`` image.

        MySQL and TiDB log whole rows; PostgreSQL's default REPLICA IDENTITY gives a delete its key
        columns only, an update none.
        """
        if op in ("c", "r") or before is None:
            return None
        if self.producer != "debezium-postgres":
            return self._row(t, before)
        if op == "u":
            return None
        return {c.name: (self._value(c, before[c.name]) if c.name in t.pk else None) for c in t.columns}

    def _key(self, t: Table, row: Mapping[str, Any]) -> str:
        cols = tuple(t.column(c) for c in t.pk)
        payload = {c.name: self._value(c, row[c.name]) for c in cols}
        if self.producer == "ticdc":
            schema = {"type": "struct", "fields": [self._field_schema(c) for c in cols],
                      "optional": False, "name": f"{SERVER}.{DATABASE}.{t.name}.Key"}  # fmt: skip
            return _dumps({"payload": payload, "schema": schema})
        prefix = self.topic(t.name)
        return _dumps({"schema": self._struct(t, None, f"{prefix}.Key", cols, False), "payload": payload})

    def change(
        self,
        t: Table,
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        hlc: HLC,
        pk: str,
        processed_ns: int,
        snapshot: str = "false",
        place: Mapping[str, Any] | None = None,
    ) -> SimMessage:
        """Return one change (``op``: c, u, d, or r at the snapshot's ``place``) as the producer publishes it."""
        table = t.name
        place = place if place is not None else self._advance(hlc.wall)
        source = self._source(table, hlc.wall, place, snapshot)
        ts_ms = processed_ns // 1_000_000
        key_row = after if after is not None else before
        assert key_row is not None
        key = self._key(t, key_row)
        before_image = self._before(t, op, before)
        if self.producer == "ticdc":
            payload = {"source": source, "ts_ms": ts_ms, "transaction": None, "op": op,
                       "before": before_image, "after": self._row(t, after)}  # fmt: skip
            schema = self._envelope_schema(t, f"{SERVER}.{DATABASE}.{table}")
            body = _dumps({"payload": payload, "schema": schema})
            attrs = {"key": key}
            ordering = ""
        else:
            payload = {"before": before_image, "after": self._row(t, after), "source": source, "transaction": None,
                       "op": op, "ts_ms": ts_ms, "ts_us": processed_ns // 1000, "ts_ns": processed_ns}  # fmt: skip
            body = _dumps({"schema": self._envelope_schema(t, self.topic(table)), "payload": payload})
            attrs = {}
            ordering = key
        return SimMessage(self.topic(table), table, body.encode("utf-8"), attrs, ordering, "row", op, key,
                          _position_text(place), pk)  # fmt: skip

    def snapshot(
        self, rows: Mapping[Table, Mapping[str, Mapping[str, Any]]], hlc: HLC, processed_ns: int
    ) -> Iterator[SimMessage]:
        """Yield a snapshot of ``rows`` (``{table: {pk: row}}``) at one position: ``op: "r"`` events."""
        place = self._advance(hlc.wall)
        if self.producer == "debezium-postgres":
            place = {**place, "sequence": _compact([None, str(place["lsn"])])}
        items = [(t, pk, row) for t, by_pk in rows.items() for pk, row in by_pk.items()]
        for i, (t, pk, row) in enumerate(items):
            mark = "last" if i == len(items) - 1 else ("first" if i == 0 else "true")
            yield self.change(t, "r", None, row, hlc, pk, processed_ns, snapshot=mark, place=place)

    def watermark(self, topic: str, table: str, hlc: HLC, processed_ns: int) -> SimMessage:
        """Return TiCDC's WATERMARK event (``op: "m"``) at ``hlc``, to ``topic`` (``table``'s)."""
        ts = (hlc.wall // 1_000_000) << 18
        source = {"version": TICDC_VERSION, "connector": "TiCDC", "name": SERVER, "ts_ms": 0, "snapshot": "false",
                  "db": "", "table": "", "server_id": 0, "gtid": None, "file": "", "pos": 0, "row": 0, "thread": 0,
                  "query": None, "commit_ts": ts, "cluster_id": SERVER}  # fmt: skip
        body = _dumps(
            {"payload": {"source": source, "op": "m", "ts_ms": processed_ns // 1_000_000, "transaction": None}}
        )
        key = _dumps({"payload": {}, "schema": {"fields": [], "optional": False, "name": f"{SERVER}.watermark.Key",
                                                "type": "struct"}})  # fmt: skip
        return SimMessage(topic, table, body.encode(), {"key": key}, "", "resolved", "", "", str(ts), "")


def _position_text(place: Mapping[str, Any]) -> str:
    if "lsn" in place:
        return f"lsn {place['lsn']}"
    if "file" in place:
        return f"{place['file']}:{place['pos']}:{place['row']}"
    return f"commit_ts {place['commit_ts']}"
