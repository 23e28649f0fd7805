r"""CDC apply: keep a current-state Delta Lake table per source table, one MERGE per micro-batch.

    from crdb_pubsub.apply import foreach_batch_apply, read_state

    changes = spark.readStream.format("crdb_pubsub").option("subscription", subs).load()
    q = (changes.writeStream
         .foreachBatch(foreach_batch_apply("/lake/state", schemas={"users": "id STRING, balance DECIMAL(12,2)"}))
         .option("checkpointLocation", "/lake/checkpoints/cdc")
         .start())
    read_state("/lake/state", "users")          # a pyarrow Table of the live rows

Needs the ``apply`` extra (``pip install crdb-pubsub[apply]``: deltalake, i.e. delta-rs; no JVM).

Contract
--------
* **Which change wins.** Per ``(table_name, key)`` the change with the greatest HLC commit timestamp
  wins. The HLC is ``updated`` (``WITH updated``; enriched: ``source.ts_hlc``), else
  ``mvcc_timestamp``, compared exactly as (wall nanoseconds, logical) integers, never as a float.
  At equal HLC a delete beats an update beats an insert/snapshot read; at equal HLC and op the row
  already in the state wins (so re-applying a change changes nothing), and among a batch's own
  changes the greater ``after`` text, then the greater ``message_id``. An older change never
  overwrites a newer one. Each batch is first reduced to its latest change per key, then applied
  with **one MERGE per table** whose condition carries that rule (``_crdb_order``, a fixed-width
  text of HLC and op that sorts as they do, compared with ``>``).
* **Deletes** leave a tombstone (``_crdb_deleted = true``, key and HLC kept) so a late, older
  update cannot resurrect the row. :func:`read_state` and :func:`current_state_sql` exclude them.
* **Idempotent per micro-batch.** Each MERGE commits an application transaction (``app_id`` = the
  streaming query's id, ``version`` = the batch id) in the Delta log; a batch already there (Spark
  re-running it after a failure) is skipped and adds no version. And the MERGE itself is a per-key
  maximum, so applying changes twice or in another order gives the same state.
* **Storage.** ``<state_dir>/<table>`` is a Delta table (delta-rs; local paths, ``gs://``,
  ``s3://``, ``abfss://`` with ``storage_options``), readable by Spark with delta-spark,
  Databricks, DuckDB, Polars, BigQuery/BigLake. Its columns: the table's typed columns, then
  ``_crdb_key`` (primary key JSON, the MERGE key), ``_crdb_hlc``, ``_crdb_order``,
  ``_crdb_deleted``, ``_crdb_batch_id`` (and ``_crdb_order__<family>`` per column family).
* **Typed columns.** ``after`` JSON text is parsed against the table's schema: DECIMAL and BIGINT
  come from the exact digits CockroachDB sent (``26.30`` stays ``26.30``), JSONB keeps its JSON
  text in a STRING column, ``"NaN"`` lands in DOUBLE, ``\x..`` hex in BINARY. A value that does
  not fit makes that change *malformed*: counted, not applied (the previous state of the key
  stays). The schema is the DDL given per table (``schemas``), else the Delta table's own, else
  inferred from the first batch (numbers as BIGINT/DECIMAL(38,s), the rest STRING): pass DDL for
  anything that matters (:func:`ddl_from_crdb_types` turns ``SHOW CREATE TABLE`` types into DDL).
* **Schema changes.** A column the changefeed starts sending is added to the Delta table
  (nullable; typed from the given DDL, else from its values). A column the state has but the rows
  lack, a type that differs from the table's, fails the batch with :class:`SchemaChangeError`
  naming the table and the column.
* **Column families** (``split_column_families``: one message per family, topic
  ``table.family``): the families of a key are merged into one row, each family ordered by its own
  HLC (``_crdb_order__<family>``), so a family's change applies whatever order they arrive in.
* **Bare envelope.** CockroachDB sends a bare delete as the key with NULL columns, which looks like
  an update; such rows are refused (:class:`BareDeleteError`) unless the changefeed is a CDC query
  that selects ``event_op()`` as a column and ``bare_op_column`` names it.
* **Table routing.** Rows go to the table their ``table_name`` names: the ``TABLE_NAME`` attribute
  (``with_table_name_attribute=true``) first, else the topic. With ``topic_name=`` and no attribute
  every table would land in one state table named after the topic: add the attribute.
* **Debezium and TiCDC.** Their change events apply with the same promises, ordered by each
  producer's own log position instead of an HLC (PostgreSQL ``source.sequence``/``lsn``, MySQL
  binlog ``file``/``pos``/``row``, TiCDC ``commit_ts``; :mod:`~crdb_pubsub.apply.positions`), keyed
  by the record key from the ordering key, a ``key`` attribute or ``key_columns``
  (:mod:`~crdb_pubsub.apply.keys`); a truncate tombstones the rows older than it. Events without a
  position or a key are malformed with the reason (``ts_ms`` is never an order).
* **Where it runs.** ``foreachBatch`` runs on the driver: the batch is collected there as Arrow
  (bounded by ``maxMessagesPerTrigger``), reduced, and merged by delta-rs. :func:`foreach_batch_merge_into`
  instead runs the same MERGE through Spark SQL on a catalog table (Delta/Iceberg on Dataproc or
  Databricks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .delta import ApplyResult, DeltaStore, TableCounts, apply_arrow, table_path
from .delta import read_state as _read_state
from .hlc import parse_hlc
from .positions import PRODUCERS
from .reduce import (
    INPUT_COLUMNS,
    OPTIONAL_COLUMNS,
    BareDeleteError,
    ProducerMixError,
    needs_truncate_mark,
    settle_truncate,
    source_table,
    split_by_table,
)
from .schemas import KEY, META_COLUMNS, ORDER, TRUNCATE_KEY, SchemaChangeError, as_struct, ddl_from_crdb_types
from .sql import merge_into_sql
from .verify import compare_to_ground_truth

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from .reduce import TableBatch

__all__ = [
    "META_COLUMNS",
    "PRODUCERS",
    "ApplyResult",
    "BareDeleteError",
    "ProducerMixError",
    "SchemaChangeError",
    "TableCounts",
    "apply_batch",
    "compare_to_ground_truth",
    "current_state_sql",
    "ddl_from_crdb_types",
    "foreach_batch_apply",
    "foreach_batch_merge_into",
    "merge_into_sql",
    "parse_hlc",
    "read_state",
    "state_tables",
]


def _arrow_of(batch: DataFrame | pa.Table | pa.RecordBatch) -> pa.Table:
    """Collect the source columns the apply helper reads, as one Arrow table on the driver."""
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    if isinstance(batch, pa.Table):
        return batch.select([*INPUT_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in batch.column_names)])
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    df = batch
    optional = [c for c in OPTIONAL_COLUMNS if c in df.columns]
    for image in ("after", "before"):
        if image in df.columns and isinstance(df.schema[image].dataType, StructType):
            # rowSchema on the source: back to JSON text so one exact path applies.
            df = df.withColumn(image, F.to_json(image))
    return df.select(*INPUT_COLUMNS, *optional).toArrow()


def _query_id(batch_df: DataFrame) -> str | None:
    """Return the streaming query's id (stable across restarts from the same checkpoint), or None outside one."""
    try:
        return batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: the caller passes app_id
        return None


def apply_batch(
    batch: DataFrame | pa.Table | pa.RecordBatch,
    batch_id: int,
    *,
    state_dir: str,
    app_id: str,
    schemas: Mapping[str, str | StructType] | None = None,
    bare_op_column: str | None = None,
    key_columns: Mapping[str, Sequence[str]] | None = None,
    storage_options: Mapping[str, str] | None = None,
    store: DeltaStore | None = None,
) -> ApplyResult:
    """Merge one micro-batch of ``crdb_pubsub`` rows into the Delta tables under ``state_dir``.

    ``batch``: the source's rows (a Spark DataFrame, or an Arrow table with the same columns).
    ``app_id`` + ``batch_id`` identify the batch in each table's Delta log: the same pair again is
    skipped. ``schemas`` maps table names to Spark DDL (or StructType). ``key_columns`` maps table
    names to their key columns, for Debezium and TiCDC messages published without their record key
    (:mod:`crdb_pubsub.apply.keys`). Raises :class:`SchemaChangeError`, :class:`BareDeleteError`,
    :class:`ProducerMixError` or ``ValueError`` (unusable table name).
    """
    store = store or DeltaStore(state_dir, storage_options)
    return apply_arrow(
        _arrow_of(batch),
        batch_id,
        store=store,
        app_id=app_id,
        schemas=schemas,
        bare_op_column=bare_op_column,
        key_columns=key_columns,
    )


def foreach_batch_apply(
    state_dir: str,
    schemas: Mapping[str, str | StructType] | None = None,
    *,
    app_id: str | None = None,
    bare_op_column: str | None = None,
    key_columns: Mapping[str, Sequence[str]] | None = None,
    storage_options: Mapping[str, str] | None = None,
    on_result: Callable[[ApplyResult], None] | None = None,
) -> Callable[[DataFrame, int], None]:
    """``writeStream.foreachBatch(foreach_batch_apply(state_dir, schemas))``: :func:`apply_batch` per batch.

    ``app_id`` defaults to the streaming query's id (kept in the checkpoint, so a restarted query
    recognises its own batches); pass one under Spark Connect. ``on_result`` receives each
    :class:`ApplyResult`; the returned function also keeps the latest in ``last_result``.
    """
    store = DeltaStore(state_dir, storage_options)

    def apply_fn(batch_df: DataFrame, batch_id: int) -> None:
        qid = app_id or _query_id(batch_df)
        if not qid:
            raise ValueError("foreach_batch_apply: no streaming query id here (Spark Connect?); pass app_id=")
        res = apply_arrow(
            _arrow_of(batch_df),
            batch_id,
            store=store,
            app_id=f"crdb_pubsub.apply:{qid}",
            schemas=schemas,
            bare_op_column=bare_op_column,
            key_columns=key_columns,
        )
        apply_fn.last_result = res  # type: ignore[attr-defined]
        if on_result is not None:
            on_result(res)

    apply_fn.last_result = None  # type: ignore[attr-defined]
    return apply_fn


def read_state(
    state_dir: str,
    table: str,
    *,
    include_deleted: bool = False,
    with_meta: bool = False,
    storage_options: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
) -> pa.Table | DataFrame:
    """Read the live rows of ``table`` (tombstones excluded): an Arrow table, or a DataFrame with ``spark``.

    ``include_deleted`` keeps tombstones, ``with_meta`` the ``_crdb_*`` columns. ``LookupError``
    when the table has no state yet. (With delta-spark, ``spark.read.format("delta")`` and
    :func:`current_state_sql` read the same table.)
    """
    out = _read_state(
        state_dir, table, include_deleted=include_deleted, with_meta=with_meta, storage_options=storage_options
    )
    return out if spark is None else spark.createDataFrame(out)


def current_state_sql(table_ref: str) -> str:
    """Return SQL for the live rows of a state table in any engine: tombstones filtered out.

    The table is named as the engine names it: ``delta.`/lake/state/users```,
    ``delta_scan('/lake/state/users')`` in DuckDB, a catalog name.
    """
    return f"SELECT * FROM {table_ref} WHERE NOT _crdb_deleted"


def state_tables(state_dir: str, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """Names of the tables that have a Delta table under a local ``state_dir``."""
    import os

    from deltalake import DeltaTable

    if not os.path.isdir(state_dir):
        return []
    options = dict(storage_options) if storage_options is not None else None  # (deltalake takes only a dict)
    return sorted(
        n
        for n in os.listdir(state_dir)
        if DeltaTable.is_deltatable(os.path.join(state_dir, n), storage_options=options)
    )


def foreach_batch_merge_into(
    tables: Mapping[str, str],
    schemas: Mapping[str, str | StructType],
    *,
    bare_op_column: str | None = None,
    key_columns: Mapping[str, Sequence[str]] | None = None,
    on_statement: Callable[[str], None] | None = None,
) -> Callable[[DataFrame, int], None]:
    """``foreachBatch`` that applies each batch with Spark SQL ``MERGE INTO`` on catalog tables.

    ``tables`` maps source table names to catalog tables (``{"users": "lake.cdc.users"}``), which
    must exist with the ``schemas`` columns plus the bookkeeping columns (:func:`create_table_sql`
    prints the DDL). The batch is reduced on the driver as in :func:`foreach_batch_apply`, then
    handed back to Spark as a temporary view and merged by the catalog's table format (Delta Lake
    or Iceberg on Dataproc/Databricks). A re-run batch changes nothing (the MERGE condition) but,
    unlike the delta-rs path, may add an empty version. Rows of tables not in ``tables`` are ignored.
    """

    def merge_fn(batch_df: DataFrame, batch_id: int) -> None:
        spark = batch_df.sparkSession
        reduced, _, _, _ = split_by_table(_arrow_of(batch_df), bare_op_column=bare_op_column, key_columns=key_columns)
        for name, tb in sorted(reduced.items()):
            if name not in tables:
                continue
            truncate = _catalog_truncate(spark, tables[name], tb)
            if not tb.groups and truncate is None:
                continue
            source, families = source_table(tb, as_struct(schemas[name]), batch_id)
            if truncate is not None:
                from .delta import with_truncate_mark

                source = with_truncate_mark(source, truncate, batch_id)
            view = f"crdb_pubsub_apply_{batch_id}_{name}".replace(".", "_").replace("-", "_")
            spark.createDataFrame(source).createOrReplaceTempView(view)
            statement = merge_into_sql(
                tables[name],
                view,
                source.column_names,
                families or None,
                None if truncate is None else (*truncate, batch_id),
            )
            if on_statement is not None:
                on_statement(statement)
            spark.sql(statement)
            spark.catalog.dropTempView(view)

    return merge_fn


def _catalog_truncate(spark: SparkSession, target: str, tb: TableBatch) -> tuple[str, str] | None:
    """:func:`~crdb_pubsub.apply.reduce.settle_truncate` against a catalog table's truncate mark."""
    if not needs_truncate_mark(tb):
        return None
    row = spark.sql(f"SELECT max({ORDER}) AS m FROM {target} WHERE {KEY} = '{TRUNCATE_KEY}'").first()
    return settle_truncate(tb, row["m"] if row is not None else None)


def create_table_sql(target: str, schema: str | StructType, *, using: str = "delta") -> str:
    """``CREATE TABLE IF NOT EXISTS`` for a catalog state table: the columns and the bookkeeping ones."""
    from ..decode.ddl import to_ddl

    return (
        f"CREATE TABLE IF NOT EXISTS {target} ({to_ddl(as_struct(schema))}, _crdb_key STRING, "
        f"_crdb_hlc STRING, _crdb_order STRING, _crdb_deleted BOOLEAN, _crdb_batch_id BIGINT) USING {using}"
    )


__all__ += ["DeltaStore", "create_table_sql", "table_path"]
