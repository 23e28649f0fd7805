"""A changefeed written by hand: Python rows in, the messages its producer would publish out.

    feed = Changefeed("users", key=["id"])                       # CockroachDB, wrapped, WITH updated
    feed.insert({"id": 1, "name": "Ann", "balance": Decimal("26.30")})
    feed.update({"id": 1, "name": "Ann B."})                      # the columns not given keep their value
    feed.delete({"id": 1})
    feed.resolved()
    feed.messages()     # SimMessage list: body, attributes, ordering key, as the producer lays them out

The bytes come from the simulator's encoders (:mod:`crdb_pubsub.tools.simulator`): CockroachDB's
sink in any envelope it has on Pub/Sub (``wrapped``, ``bare``, ``enriched``; ``diff``, ``updated``,
``mvcc_timestamp``, ``key_in_value``, ``enriched_properties``, the legacy sink's
``legacy_wrapper``, ``with_table_name_attribute``), Debezium Server's Pub/Sub sink
(``producer="debezium-postgres"`` or ``"debezium-mysql"``) and TiCDC's Debezium protocol
(``"ticdc"``). Each change gets the next commit timestamp (HLC; Debezium's log position, TiCDC's
``commit_ts``) in call order; :meth:`Changefeed.state` is what a correct consumer ends with.

Column types come from the values (first non-null one per column): ``int`` INT8, ``Decimal``
DECIMAL (precision and scale from the digits), ``float`` FLOAT, ``bool`` BOOL, ``str``/``uuid.UUID``
STRING/UUID, ``bytes`` BYTES, ``datetime`` TIMESTAMPTZ (aware) or TIMESTAMP (naive), ``dict`` JSONB,
a ``list`` of strings STRING[] (other lists JSONB); ``date`` is sent as its ISO text. ``types=``
names a column's CockroachDB type instead (``{"balance": "DECIMAL(12,2)"}``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from ..tools.simulator.clock import HLC, Clock
from ..tools.simulator.cockroach import CockroachEncoder
from ..tools.simulator.debezium import PRODUCERS, DebeziumEncoder
from ..tools.simulator.encoding import crdb_json
from ..tools.simulator.messages import SimMessage, validate
from ..tools.simulator.tables import Column, Table

__all__ = ["Changefeed"]

_TYPE = re.compile(
    r"(UUID|STRING|DECIMAL|TIMESTAMP|TIMESTAMPTZ|JSONB|INT8|STRING\[\]|BOOL|FLOAT|BYTES)(?:\((\d+),(\d+)\))?\Z"
)


@dataclasses.dataclass
class _Change:
    op: str  # c, u, d; "" for a resolved timestamp
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    hlc: HLC


def _sql_type(value: Any) -> Column:
    if isinstance(value, bool):
        return Column("", "BOOL")
    if isinstance(value, int):
        return Column("", "INT8")
    if isinstance(value, Decimal):
        _, digits, exp = value.as_tuple()
        scale = max(0, -exp) if isinstance(exp, int) else 0
        return Column("", "DECIMAL", precision=max(len(digits), scale, 1), scale=scale)
    if isinstance(value, float):
        return Column("", "FLOAT")
    if isinstance(value, uuid.UUID):
        return Column("", "UUID")
    if isinstance(value, (bytes, bytearray)):
        return Column("", "BYTES")
    if isinstance(value, _dt.datetime):
        return Column("", "TIMESTAMPTZ" if value.tzinfo is not None else "TIMESTAMP")
    if isinstance(value, Mapping):
        return Column("", "JSONB")
    if isinstance(value, (list, tuple)):
        return Column("", "STRING[]" if all(isinstance(v, str) for v in value) else "JSONB")
    return Column("", "STRING")


def _wire(value: Any) -> Any:
    """Return a Python value in the form the encoders take (CockroachDB's JSON-ready form)."""
    if value is None or isinstance(value, (bool, int, str, Decimal)):
        return value
    if isinstance(value, float):
        return (
            value
            if math.isfinite(value)
            else ("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"))
        )
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
            suffix = "Z"
        else:
            suffix = ""
        text = value.strftime("%Y-%m-%dT%H:%M:%S")
        if value.microsecond:
            text += ("." + "%06d" % value.microsecond).rstrip("0")
        return text + suffix
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wire(v) for v in value]
    raise TypeError(f"cannot send a {type(value).__name__} in a changefeed message: {value!r}")


class Changefeed:
    """One table's changes, as ``producer`` publishes them (see the module docstring).

    ``key``: the primary-key columns, in key order. CockroachDB options are keywords
    (``envelope``, ``diff``, ``updated`` (default True: the apply orders by it), ...); Debezium and
    TiCDC take none. ``seed`` fixes the timestamps' spacing.
    """

    def __init__(
        self,
        table: str,
        key: Sequence[str],
        *,
        producer: str = "cockroachdb",
        types: Mapping[str, str] | None = None,
        seed: int = 0,
        **options: Any,
    ) -> None:
        if not key or isinstance(key, str):
            raise ValueError(f"key: the primary-key columns as a list, got {key!r}")
        if producer not in ("cockroachdb", *PRODUCERS):
            raise ValueError(f"producer: expected one of {('cockroachdb', *PRODUCERS)}, got {producer!r}")
        self.table = table
        self.key = tuple(key)
        self.producer = producer
        self._types = dict(types or {})
        for name, sql in self._types.items():
            if not _TYPE.match(sql):
                raise ValueError(f"types: {name}: {sql!r} is not one of the types the encoders know ({_TYPE.pattern})")
        if producer == "cockroachdb":
            defaults: dict[str, Any] = {
                "envelope": "wrapped", "enriched_properties": None, "diff": False, "updated": True,
                "mvcc_timestamp": False, "key_in_value": False, "column_families": False,
                "full_table_name": False, "topic_name": None, "resolved_every": 0, "legacy_wrapper": False,
                "with_table_name_attribute": False, "tables": None, "mix": (1, 0, 0),
            }  # fmt: skip
            unknown = set(options) - set(defaults) - {"resolved_every", "tables", "mix"}
            if unknown:
                raise ValueError(f"{sorted(unknown)[0]}: not a changefeed option (known: {sorted(defaults)})")
            self._options = dataclasses.replace(validate(**{**defaults, **options}), tables=(table,))
        elif options:
            raise ValueError(f"{sorted(options)[0]}: a CockroachDB changefeed option, not for producer={producer!r}")
        self._clock = Clock(random.Random(f"crdb-pubsub-testing:{seed}"), 1_745_000_000_000_000_000)
        self._changes: list[_Change] = []
        self._rows: dict[tuple, dict[str, Any]] = {}
        self._columns: list[str] = []

    # ---- changes
    def _key_of(self, row: Mapping[str, Any]) -> tuple:
        missing = [c for c in self.key if c not in row]
        if missing:
            raise ValueError(f"table {self.table}: the row has no key column {missing[0]!r}: {dict(row)!r}")
        return tuple(row[c] for c in self.key)

    def _note_columns(self, row: Mapping[str, Any]) -> None:
        for c in row:
            if c not in self._columns:
                self._columns.append(c)

    def insert(self, row: Mapping[str, Any]) -> Changefeed:
        """Record an INSERT of ``row`` (its columns; a key already live raises ``ValueError``)."""
        k = self._key_of(row)
        if k in self._rows:
            raise ValueError(f"table {self.table}: insert of key {k!r}, which is live (use update or upsert)")
        self._note_columns(row)
        self._rows[k] = dict(row)
        self._changes.append(_Change("c", None, dict(row), self._clock.tick()))
        return self

    def update(self, row: Mapping[str, Any]) -> Changefeed:
        """Record an UPDATE of the live row with ``row``'s key: the columns given change, the others stay."""
        k = self._key_of(row)
        if k not in self._rows:
            raise ValueError(f"table {self.table}: update of key {k!r}, which is not live (insert it first)")
        self._note_columns(row)
        before = self._rows[k]
        after = {**before, **row}
        self._rows[k] = after
        self._changes.append(_Change("u", dict(before), dict(after), self._clock.tick()))
        return self

    def upsert(self, row: Mapping[str, Any]) -> Changefeed:
        """Record an UPSERT: an update when the key is live, else an insert."""
        return self.update(row) if self._key_of(row) in self._rows else self.insert(row)

    def delete(self, row: Mapping[str, Any]) -> Changefeed:
        """Record a DELETE of the live row with ``row``'s key (the key columns are enough)."""
        k = self._key_of(row)
        if k not in self._rows:
            raise ValueError(f"table {self.table}: delete of key {k!r}, which is not live")
        before = self._rows.pop(k)
        self._changes.append(_Change("d", dict(before), None, self._clock.tick()))
        return self

    def resolved(self) -> Changefeed:
        """Record a resolved timestamp (TiCDC: a watermark) at the latest commit: every change before it was sent."""
        if self.producer in ("debezium-postgres", "debezium-mysql"):
            raise ValueError(f"resolved: {self.producer} sends no resolved timestamps")
        self._changes.append(_Change("", None, None, self._clock.now))
        return self

    def state(self) -> dict[tuple, dict[str, Any]]:
        """Return the live rows after the changes so far, by key tuple: what a correct consumer ends with."""
        return {k: dict(v) for k, v in self._rows.items()}

    # ---- messages
    def _table(self) -> Table:
        seen: dict[str, Column] = {}
        for ch in self._changes:
            for image in (ch.before, ch.after):
                for name, value in (image or {}).items():
                    if name not in seen and value is not None:
                        seen[name] = _sql_type(value)
        cols = []
        for name in self._columns:
            if name in self._types:
                m = _TYPE.match(self._types[name])
                assert m is not None
                sql, p, s = m.group(1), int(m.group(2) or 0), int(m.group(3) or 0)
                cols.append(Column(name, sql, nullable=name not in self.key, precision=p, scale=s))
            else:
                c = seen.get(name, Column("", "STRING"))
                cols.append(Column(name, c.sql, nullable=name not in self.key, precision=c.precision, scale=c.scale))
        return Table(self.table, tuple(cols), self.key)

    def messages(self) -> list[SimMessage]:
        """Return every message so far, in commit order, as the producer lays it out (bytes, attributes, ordering key)."""
        t = self._table()
        names = t.column_names

        def full(row: dict[str, Any] | None) -> dict[str, Any] | None:
            return None if row is None else {c: _wire(row.get(c)) for c in names}

        out: list[SimMessage] = []
        if self.producer == "cockroachdb":
            crdb = CockroachEncoder(self._options, _SOURCE, {self.table: t})
            for ch in self._changes:
                if not ch.op:
                    out.extend(crdb.resolved(ch.hlc))
                    continue
                before, after = full(ch.before), full(ch.after)
                key_row = after if after is not None else before
                assert key_row is not None
                pk = crdb_json([key_row[c] for c in self.key])
                out.extend(crdb.row_messages(t, ch.op, pk, before, after, ch.hlc, ch.hlc.wall + 1_000_000))
            return out
        dbz = DebeziumEncoder(self.producer)
        for ch in self._changes:
            if not ch.op:
                out.append(dbz.watermark(dbz.topic(self.table), self.table, ch.hlc, ch.hlc.wall + 1_000_000))
                continue
            before, after = full(ch.before), full(ch.after)
            key_row = after if after is not None else before
            assert key_row is not None
            pk = crdb_json([key_row[c] for c in self.key])
            out.append(dbz.change(t, ch.op, before, after, ch.hlc, pk, ch.hlc.wall + 1_000_000))
        return out


# The enriched envelope's static source fields, as a single-node cluster would send them.
_SOURCE = {
    "changefeed_sink": "pubsub",
    "cluster_id": "8a5f2d3c-0b6e-4f38-9f1e-2c4d5e6f7a8b",
    "cluster_name": "",
    "database_name": "defaultdb",
    "db_version": "v25.4.0",
    "job_id": "1066452286961614849",
    "node_id": "1",
    "node_name": "localhost",
    "origin": "cockroachdb",
    "schema_name": "public",
    "source_node_locality": "",
}
