"""The state store: one Delta Lake table per source table, written with delta-rs (no JVM).

Each batch is one MERGE per touched table, committed with an application transaction
(``app_id`` = the streaming query's id, ``version`` = the batch id) so that a batch Spark runs
again after a failure is recognised in the table's own log and skipped.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .reduce import TableBatch, after_layouts, needs_truncate_mark, settle_truncate, source_table, split_by_table
from .schemas import (
    BATCH,
    DELETED,
    HLC_COL,
    KEY,
    META_COLUMNS,
    META_PREFIX,
    ORDER,
    TRUNCATE_KEY,
    SchemaChangeError,
    as_struct,
    infer_type,
    plain_arrow_type,
    struct_of_arrow,
)
from .sql import merge_clauses, quote_datafusion, truncate_clause

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["ApplyResult", "DeltaStore", "TableCounts", "apply_arrow", "read_state", "table_path"]

_TABLE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")


@dataclasses.dataclass
class TableCounts:
    """What one batch did to one table.

    ``changes``: row changes of the table in the batch (malformed included); ``upserts``/``deletes``:
    keys the batch wrote as live rows / as tombstones; ``superseded``: changes that lost to a newer
    or equal one (duplicates, older versions, late arrivals); ``malformed``: changes not applied
    (bad value, no HLC or key, undecodable); ``rows``/``tombstones``: sizes after the batch;
    ``version``: the Delta version after it; ``skipped``: the batch was already applied (a retry);
    ``added_columns``: columns schema evolution added; ``truncated``: live rows a truncate
    (Debezium op ``t``) turned into tombstones (counted in ``deletes`` too).
    """

    changes: int = 0
    upserts: int = 0
    deletes: int = 0
    superseded: int = 0
    malformed: int = 0
    rows: int = 0
    tombstones: int = 0
    version: int = -1
    skipped: bool = False
    added_columns: list[str] = dataclasses.field(default_factory=list)
    truncated: int = 0


@dataclasses.dataclass
class ApplyResult:
    """The outcome of one batch.

    ``messages`` (input rows of every kind), ``rows_in`` (row changes), ``malformed`` (all
    malformed input, also messages with no table), up to five example ``errors``.
    """

    batch_id: int
    tables: dict[str, TableCounts]
    malformed: int
    rows_in: int
    elapsed_s: float
    messages: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def table_path(state_dir: str, table: str) -> str:
    """Where ``table``'s Delta table lives under ``state_dir`` (a local path or an object-store URI)."""
    if not _TABLE_NAME_RE.match(table):
        raise ValueError(f"table name {table!r} cannot be used as a Delta table directory name")
    return state_dir.rstrip("/") + "/" + table


class DeltaStore:
    """The Delta tables under one ``state_dir``; keeps each table's log loaded between batches."""

    def __init__(self, state_dir: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.state_dir = state_dir
        self.storage_options = dict(storage_options) if storage_options else None
        self._tables: dict[str, Any] = {}

    def table(self, name: str) -> Any:
        """Return the table's DeltaTable (refreshed to its newest version), or None before its first batch."""
        from deltalake import DeltaTable

        dt = self._tables.get(name)
        if dt is not None:
            dt.update_incremental()
            return dt
        path = table_path(self.state_dir, name)
        if not DeltaTable.is_deltatable(path, storage_options=self.storage_options):
            return None
        dt = self._tables[name] = DeltaTable(path, storage_options=self.storage_options)
        return dt

    def struct(self, name: str, given: str | StructType | None) -> StructType | None:
        """Return the table's user columns: the Delta table's, plus columns the given DDL adds.

        A given column whose type differs from the table's raises :class:`SchemaChangeError`.
        """
        import pyarrow as pa
        from pyspark.sql.types import StructType

        dt = self.table(name)
        want = as_struct(given) if given is not None else None
        if dt is None:
            return want
        have = struct_of_arrow(pa.schema(dt.schema().to_arrow()))
        if want is None:
            return have
        names = {f.name: f for f in have.fields}
        fields = list(have.fields)
        for f in want.fields:
            old = names.get(f.name)
            if old is None:
                fields.append(f)
            elif old.dataType != f.dataType:
                raise SchemaChangeError(
                    f"table {name}: column {f.name} is {old.dataType.simpleString()} in the "
                    f"Delta table but {f.dataType.simpleString()} in the schema given; "
                    "a type change needs a new table (or an ALTER on the Delta table)"
                )
        return StructType(fields)

    def applied(self, name: str, app_id: str, batch_id: int) -> bool:
        dt = self.table(name)
        if dt is None:
            return False
        done = dt.transaction_version(app_id)
        return done is not None and done >= batch_id

    def write(
        self,
        name: str,
        source: pa.Table,
        family_columns: Mapping[str, list[str]],
        app_id: str,
        batch_id: int,
        truncate: tuple[str, str] | None = None,
    ) -> None:
        """One commit: the first batch creates the table, later ones MERGE (adding new columns).

        ``truncate`` (order, position): the rows older than it become tombstones in the same commit.
        """
        import pyarrow as pa
        from deltalake import CommitProperties, Transaction, write_deltalake

        commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
        dt = self.table(name)
        if dt is None:
            write_deltalake(
                table_path(self.state_dir, name),
                source,
                mode="append",
                name=name,
                storage_options=self.storage_options,
                commit_properties=commit,
            )
            return
        have = set(pa.schema(dt.schema().to_arrow()).names)
        evolve = any(c not in have for c in source.column_names)
        on, matched, sets, inserts = merge_clauses(source.column_names, family_columns or None, quote_datafusion)
        merger = dt.merge(source, on, source_alias="s", target_alias="t", merge_schema=evolve, commit_properties=commit)
        merger = (
            merger.when_matched_update_all(predicate=matched)
            if sets is None
            else merger.when_matched_update(sets, predicate=matched)
        )
        merger = merger.when_not_matched_insert(inserts)
        if truncate is not None:
            columns = [c for c in pa.schema(dt.schema().to_arrow()).names if c not in source.column_names]
            older, wipe = truncate_clause(
                [*source.column_names, *columns], truncate[0], truncate[1], batch_id, quote_datafusion
            )
            merger = merger.when_not_matched_by_source_update(wipe, predicate=older)
        merger.execute()

    def truncated_at(self, name: str) -> str | None:
        """Return the order of the table's latest truncate (its mark row), or None."""
        return self._one(name, f"SELECT max({quote_datafusion(ORDER)}) FROM state WHERE {self._is_mark}")

    def live_older_than(self, name: str, order: str) -> int:
        """Count the live rows a truncate at ``order`` wipes out."""
        o, d = quote_datafusion(ORDER), quote_datafusion(DELETED)
        return int(self._one(name, f"SELECT count(*) FROM state WHERE NOT {d} AND {o} < '{order}'") or 0)

    @property
    def _is_mark(self) -> str:
        return f"{quote_datafusion(KEY)} = '{TRUNCATE_KEY}'"

    def _one(self, name: str, sql: str) -> Any:
        import pyarrow as pa
        from deltalake import QueryBuilder

        dt = self.table(name)
        if dt is None:
            return None
        row = pa.table(QueryBuilder().register("state", dt).execute(sql).read_all()).to_pylist()
        return next(iter(row[0].values())) if row else None

    def counts(self, name: str, batch_id: int) -> tuple[int, int, int, int, int]:
        """(rows, tombstones, upserts and deletes written by ``batch_id``, version) of a table."""
        import pyarrow as pa
        from deltalake import QueryBuilder

        dt = self.table(name)
        if dt is None:
            return 0, 0, 0, 0, -1
        d, b = quote_datafusion(DELETED), quote_datafusion(BATCH)
        sql = (
            f"SELECT sum(CASE WHEN NOT {d} THEN 1 ELSE 0 END), sum(CASE WHEN {d} THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN {b} = {int(batch_id)} AND NOT {d} THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN {b} = {int(batch_id)} AND {d} THEN 1 ELSE 0 END) FROM state WHERE NOT ({self._is_mark})"
        )
        row = pa.table(QueryBuilder().register("state", dt).execute(sql).read_all()).to_pylist()[0]
        return (*[int(v or 0) for v in row.values()], dt.version())


def _resolve_struct(store: DeltaStore, tb: TableBatch, given: Any) -> tuple[StructType, list[str]]:
    """Return the schema this batch is typed with, after schema evolution; and the columns it adds.

    A column the rows carry that the table lacks is added (nullable; typed from the given DDL, else
    from its values). A column the table has but a row lacks (dropped or renamed upstream) stops the
    apply with :class:`SchemaChangeError` naming the table and the column.
    """
    import pyarrow as pa
    from pyspark.sql.types import StructField, StructType

    struct = store.struct(tb.table, given)
    first = [g[0] for g in tb.groups.values()]
    values, layouts = after_layouts(first)
    known = {f.name for f in struct.fields} if struct is not None else set()
    dt = store.table(tb.table)
    before = set(pa.schema(dt.schema().to_arrow()).names) if dt is not None else None
    fields = list(struct.fields) if struct is not None else []
    for name, raws in values.items():
        if name in known:
            continue
        if name.startswith(META_PREFIX):
            raise SchemaChangeError(
                f"table {tb.table}: column {name} clashes with the apply helper's "
                f"bookkeeping columns ({', '.join(META_COLUMNS)}); rename it in the changefeed"
            )
        fields.append(StructField(name, infer_type(raws), True))
        known.add(name)
    if not tb.families:
        for layout in layouts:
            missing = [f.name for f in fields if f.name not in layout]
            if missing:
                raise SchemaChangeError(
                    f"table {tb.table}: column {missing[0]} is in the state table but missing from the "
                    "changefeed's rows (dropped or renamed upstream?); the apply helper only adds "
                    "nullable columns: recreate the Delta table, or keep the column upstream"
                )
    added = [f.name for f in fields if before is not None and f.name not in before]
    return StructType(fields), added


def apply_arrow(
    batch: pa.Table,
    batch_id: int,
    *,
    store: DeltaStore,
    app_id: str,
    schemas: Mapping[str, Any] | None = None,
    bare_op_column: str | None = None,
    key_columns: Mapping[str, Sequence[str]] | None = None,
    count: bool = True,
) -> ApplyResult:
    """Apply one micro-batch (the source's columns as an Arrow table) to the Delta tables of ``store``."""
    t0 = time.monotonic()
    tables, messages, orphan, errors = split_by_table(batch, bare_op_column=bare_op_column, key_columns=key_columns)
    result = ApplyResult(
        batch_id=batch_id, tables={}, malformed=orphan, rows_in=0, elapsed_s=0.0, messages=messages, errors=list(errors)
    )
    for name in sorted(tables):
        tb = tables[name]
        table_path(store.state_dir, name)  # a name that cannot be a directory fails before any write
        counts = TableCounts(changes=tb.changes)
        result.tables[name] = counts
        result.rows_in += tb.changes
        if store.applied(name, app_id, batch_id):
            # A retry of a batch already in this table's log: nothing to do, no new version.
            counts.skipped = True
            counts.superseded = tb.changes
            counts.rows, counts.tombstones, _, _, counts.version = store.counts(name, -1) if count else (0, 0, 0, 0, -1)
            continue
        given = (schemas or {}).get(name)
        truncate = _new_truncate(store, tb)
        if truncate is not None:
            counts.truncated = store.live_older_than(name, truncate[0])
        if tb.groups or truncate is not None:
            struct, counts.added_columns = _resolve_struct(store, tb, given)
            source, family_columns = source_table(tb, struct, batch_id)
            if truncate is not None:
                source = with_truncate_mark(source, truncate, batch_id)
            if source.num_rows:
                store.write(name, source, family_columns, app_id, batch_id, truncate)
        counts.malformed = tb.malformed
        result.malformed += tb.malformed
        result.errors = (result.errors + tb.errors)[:5]
        if count:
            counts.rows, counts.tombstones, counts.upserts, counts.deletes, counts.version = store.counts(
                name, batch_id
            )
        applied = counts.upserts + counts.deletes - counts.truncated + (truncate is not None)
        counts.superseded = max(0, tb.changes - tb.malformed - applied)
    result.elapsed_s = round(time.monotonic() - t0, 3)
    return result


def _new_truncate(store: DeltaStore, tb: TableBatch) -> tuple[str, str] | None:
    """:func:`settle_truncate` against the table's truncate mark in its Delta table."""
    if not needs_truncate_mark(tb):
        return None
    return settle_truncate(tb, store.truncated_at(tb.table))


def with_truncate_mark(source: pa.Table, truncate: tuple[str, str], batch_id: int) -> pa.Table:
    """Return the MERGE source plus the table's truncate mark row (see ``schemas.TRUNCATE_KEY``)."""
    import pyarrow as pa

    mark = {KEY: TRUNCATE_KEY, ORDER: truncate[0], HLC_COL: truncate[1], DELETED: True, BATCH: batch_id}
    row = pa.Table.from_pylist([{c: mark.get(c) for c in source.column_names}], schema=source.schema)
    return pa.concat_tables([source, row])


def read_state(
    state_dir: str,
    table: str,
    *,
    include_deleted: bool = False,
    with_meta: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """Read the current state of ``table`` as an Arrow table: live rows only (tombstones excluded).

    ``include_deleted`` keeps tombstones; ``with_meta`` keeps the bookkeeping columns
    (``_crdb_key``, ``_crdb_hlc``, ...). Raises ``LookupError`` when the table has no state yet.
    """
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    path = table_path(state_dir, table)
    if not DeltaTable.is_deltatable(path, storage_options=dict(storage_options or {}) or None):
        raise LookupError(f"no state for table {table!r} under {state_dir}")
    dt = DeltaTable(path, storage_options=dict(storage_options or {}) or None)
    names = pa.schema(dt.schema().to_arrow()).names
    keep = [n for n in names if with_meta or not n.startswith(META_PREFIX)]
    where = "" if include_deleted else f" WHERE NOT {quote_datafusion(DELETED)}"
    sql = f"SELECT {', '.join(quote_datafusion(n) for n in keep)} FROM state{where}"
    # QueryBuilder (DataFusion inside delta-rs): pyarrow's dataset reader over delta-rs's file
    # system aborts the interpreter at exit in deltalake 1.x.
    out = pa.table(QueryBuilder().register("state", dt).execute(sql).read_all())
    return out.cast(pa.schema([pa.field(f.name, plain_arrow_type(f.type), f.nullable) for f in out.schema]))
