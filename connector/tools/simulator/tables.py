"""The movr tables the simulator writes: columns, primary keys, column families."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence


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


_SQL_TYPES = (
    "UUID",
    "STRING",
    "DECIMAL",
    "TIMESTAMP",
    "TIMESTAMPTZ",
    "JSONB",
    "INT8",
    "STRING[]",
    "BOOL",
    "FLOAT",
    "BYTES",
)

_COLUMN = re.compile(r"(\w+) ([A-Z0-9\[\]]+)(?:\((\d+),(\d+)\))?( NOT NULL)?$")


def _table(
    name: str, columns: str, pk: tuple[str, ...], families: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> Table:
    """Build a table from its columns as CockroachDB declares them.

    For example ``"id UUID NOT NULL, balance DECIMAL(12,2)"``.
    """
    cols = []
    for spec in re.split(r",\s*(?![^()]*\))", columns.strip()):
        m = _COLUMN.match(spec.strip())
        if m is None or m.group(2) not in _SQL_TYPES:
            raise ValueError(f"table {name}: column {spec!r} is not NAME TYPE [NOT NULL] with a type of {_SQL_TYPES}")
        cols.append(
            Column(
                m.group(1),
                m.group(2),
                nullable=m.group(5) is None,
                precision=int(m.group(3) or 0),
                scale=int(m.group(4) or 0),
            )
        )
    return Table(name, tuple(cols), pk, families)


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        _table(
            "users",
            "id UUID NOT NULL, city STRING NOT NULL, name STRING, address STRING, credit_card STRING, "
            "balance DECIMAL(12,2), created_at TIMESTAMP",
            ("id",),
        ),
        _table(
            "vehicles",
            "city STRING NOT NULL, id UUID NOT NULL, type STRING, status STRING, ext JSONB, odometer INT8, "
            "last_service TIMESTAMPTZ, tags STRING[], is_electric BOOL NOT NULL",
            ("city", "id"),
            (
                ("primary", ("city", "id", "type", "status", "odometer", "last_service")),
                # is_electric is NOT NULL so the family always has a KV and an event on every insert.
                ("details", ("ext", "tags", "is_electric")),
            ),
        ),
        _table(
            "rides",
            "id UUID NOT NULL, city STRING NOT NULL, rider_id UUID, vehicle_id UUID, "
            "revenue DECIMAL(10,2), start_time TIMESTAMP, end_time TIMESTAMP, distance FLOAT, raw BYTES",
            ("id",),
        ),
    )
}


def spark_schemas(tables: Sequence[str] | None = None, producer: str = "cockroachdb") -> dict[str, str]:
    """Spark DDL of the movr tables as ``producer`` sends them (what apply types them with).

    From their CockroachDB column types; for Debezium and TiCDC a TIMESTAMP is a BIGINT of
    microseconds (MicroTimestamp) and, from MySQL and TiDB, an array a JSON text (STRING).
    """
    from ...apply import ddl_from_crdb_types
    from .debezium import debezium_spark_type

    def sql(c: Column) -> str:
        if producer != "cockroachdb" and (other := debezium_spark_type(producer, c)):
            return other
        return f"DECIMAL({c.precision},{c.scale})" if c.sql == "DECIMAL" else c.sql

    return {
        name: ddl_from_crdb_types({c.name: sql(c) for c in t.columns})
        for name, t in TABLES.items()
        if tables is None or name in tables
    }


def primary_keys() -> dict[str, list[str]]:
    """Primary-key columns of the movr tables, in key order."""
    return {name: list(t.pk) for name, t in TABLES.items()}


DATABASE = "movr"
SCHEMA = "public"
