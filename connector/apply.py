"""CDC apply: fold micro-batches of decoded changefeed rows into a current-state table per source table.

    from crdb_pubsub.apply import foreach_batch_apply, read_state

    changes = spark.readStream.format("crdb_pubsub").option("subscription", subs).load()
    q = (changes.writeStream
         .foreachBatch(foreach_batch_apply("/lake/state", schemas={"users": "id STRING, balance DECIMAL(12,2)"}))
         .option("checkpointLocation", "/lake/checkpoints/cdc")
         .start())
    read_state(spark, "/lake/state", "users").show()

Contract
--------
* **Which change wins.** Per ``(table_name, key)`` the change with the greatest HLC commit timestamp
  wins. The HLC is ``updated`` (``WITH updated``; enriched: ``source.ts_hlc``), else
  ``mvcc_timestamp``; it is compared exactly as (wall nanoseconds, logical) integers, never as a
  float. Ties (the same HLC twice, e.g. a re-emitted duplicate): a delete beats an update beats an
  insert/snapshot read; among equal (HLC, op) a row already in the state wins over an incoming one
  (so re-applying a batch changes nothing); among incoming ones the greater ``after`` text, then the
  greater ``message_id``, wins. A change older than the state's version of its key is ignored.
* **Deletes** leave a tombstone (key + HLC) so a late, older update cannot resurrect the row.
  Tombstones are kept forever in ``tombstones/`` next to ``rows/`` of each version.
* **Idempotent and order-free.** The merge is a per-key maximum, so applying the same batch twice
  (``foreachBatch`` may re-run a batch id after a failure, and a Pub/Sub source may hand it back
  with different, redelivered content) or applying batches in another order gives the same state.
* **Storage** (any Hadoop file system: local, ``gs://``, ``hdfs://``)::

      <state_dir>/<table>/_versions/0000000007.json   pointer: {"version": 7, "path": "v0000000007-1a2b3c4d", ...}
      <state_dir>/<table>/v0000000007-1a2b3c4d/rows/        parquet: typed columns + _key, _hlc, _op, ...
      <state_dir>/<table>/v0000000007-1a2b3c4d/tombstones/  parquet: deleted keys and their HLC
      <state_dir>/<table>/_schema.ddl                       the schema used (given or inferred once)
      <state_dir>/_batches/<batch id>.json                 per-batch counts

  A new version is written to a fresh directory and becomes current only when its pointer file
  appears (written under a temporary name, then renamed), so readers never see a half-written
  state and a batch that dies midway leaves the previous version current. The last three versions
  are kept. A merge rewrites the whole state of each table the batch touches (fine up to a few
  million rows per table; beyond that use a table format with MERGE, e.g. Delta or Iceberg).
* **Typed columns.** ``after`` JSON text is parsed with :mod:`crdb_pubsub.decode.typed` against the
  table's schema: DECIMAL and BIGINT come from the exact digits CockroachDB sent (``26.30`` stays
  ``26.30``, ``9223372036854775807`` stays exact); JSONB/objects in a STRING column keep their
  exact JSON text; ``"NaN"``/``"Infinity"`` land in DOUBLE; ``\\x..`` hex in BINARY. A value that
  does not fit (too many digits, wrong type) makes that change *malformed*: it is counted and not
  applied (the previous state of that key stays). Without a schema for a table, one is inferred
  from the first batch that carries it (numbers as DECIMAL(38,s)/BIGINT, objects as STRING) and
  stored in ``_schema.ddl``; pass DDL for anything that matters.
* Not supported: ``envelope=bare`` deletes (CockroachDB sends them as rows of NULLs, which cannot be
  told apart from an update) and ``split_column_families`` (each family would be a partial row).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "ApplyResult",
    "TableCounts",
    "apply_batch",
    "foreach_batch_apply",
    "read_state",
    "state_tables",
    "current_version",
    "ddl_from_crdb_types",
    "parse_hlc",
    "META_COLUMNS",
    "simulator_schemas",
    "compare_to_ground_truth",
]

# Bookkeeping columns of every state row; user columns may not start with "_crdb".
META_COLUMNS = ("_key", "_hlc", "_hlc_wall", "_hlc_logical", "_op", "_message_id", "_batch_id")
_OP_RANK = {"d": 3, "u": 2, "c": 1, "r": 0}
_HLC_RE = re.compile(r"(\d{1,20})(?:\.(\d{1,10}))?\Z")
_KEEP_VERSIONS = 3
_TABLE_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TableCounts:
    """What one batch did to one table.

    ``changes``: row changes of this table in the batch; ``inserts``/``updates``/``deletes``: keys
    that became live / changed while live / stopped being live; ``tombstoned``: deletes of keys not
    live in the state (recorded, nothing to remove); ``superseded``: changes that lost to a newer
    or equal one (duplicates, older versions, stale late arrivals); ``malformed``: changes that
    could not be applied (bad typed value, missing HLC or key, or undecodable messages of this
    table); ``rows``/``tombstones``: sizes of the state after the batch; ``version``: its version.
    """

    changes: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    tombstoned: int = 0
    superseded: int = 0
    malformed: int = 0
    rows: int = 0
    tombstones: int = 0
    version: int = 0


@dataclasses.dataclass
class ApplyResult:
    """The outcome of :func:`apply_batch`. ``messages``: input rows of every kind (resolved
    included); ``rows_in``: row changes; ``malformed``: all malformed input of the batch (also
    messages with no table); ``errors``: up to five example reasons; ``elapsed_s``: wall time."""

    batch_id: int
    tables: dict[str, TableCounts]
    malformed: int
    rows_in: int
    elapsed_s: float
    messages: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------
# HLC and schema helpers
# --------------------------------------------------------------------------------------------


def parse_hlc(text: str | None) -> tuple[int, int] | None:
    """``"1745000000000000000.0000000001"`` -> ``(1745000000000000000, 1)``; None if not an HLC.

    Exact integer arithmetic: two HLCs compare as these tuples compare.
    """
    if not text:
        return None
    m = _HLC_RE.match(text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


_CRDB_TO_SPARK = {
    "UUID": "STRING", "STRING": "STRING", "TEXT": "STRING", "VARCHAR": "STRING", "CHAR": "STRING",
    "NAME": "STRING", "INET": "STRING", "TIME": "STRING", "TIMETZ": "STRING", "INTERVAL": "STRING",
    "BIT": "STRING", "VARBIT": "STRING", "ENUM": "STRING", "JSONB": "STRING", "JSON": "STRING",
    "INT8": "BIGINT", "INT": "BIGINT", "INTEGER": "BIGINT", "BIGINT": "BIGINT", "INT4": "INT",
    "INT2": "SMALLINT", "SMALLINT": "SMALLINT", "SERIAL": "BIGINT",
    "BOOL": "BOOLEAN", "BOOLEAN": "BOOLEAN", "FLOAT": "DOUBLE", "FLOAT8": "DOUBLE", "DOUBLE PRECISION": "DOUBLE",
    "REAL": "DOUBLE", "FLOAT4": "DOUBLE", "BYTES": "BINARY", "BYTEA": "BINARY", "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP", "TIMESTAMPTZ": "TIMESTAMP",
}


def ddl_from_crdb_types(columns: Mapping[str, str]) -> str:
    """Spark DDL for a table given its CockroachDB column types (as ``SHOW CREATE TABLE`` prints them).

    ``{"id": "UUID", "balance": "DECIMAL(12,2)", "tags": "STRING[]"}`` ->
    ``"id STRING, balance DECIMAL(12,2), tags ARRAY<STRING>"``. DECIMAL without precision becomes
    DECIMAL(38,9) (CockroachDB's unbounded DECIMAL has no Spark equivalent: say what you store);
    JSONB, UUID, INTERVAL, TIME, INET, ENUM... become STRING (JSONB keeps its exact JSON text);
    TIMESTAMP and TIMESTAMPTZ become TIMESTAMP (UTC). Raises ``ValueError`` for unknown types.
    """
    from .decode.ddl import _quote

    parts = []
    for name, sql in columns.items():
        parts.append(f"{_quote(name)} {_spark_type(sql.strip().upper(), name)}")
    return ", ".join(parts)


def _spark_type(sql: str, name: str) -> str:
    if sql.endswith("[]"):
        return f"ARRAY<{_spark_type(sql[:-2], name)}>"
    m = re.match(r"(DECIMAL|NUMERIC)\s*(?:\((\d+)\s*(?:,\s*(\d+))?\))?\Z", sql)
    if m:
        if m.group(2) is None:
            return "DECIMAL(38,9)"
        return f"DECIMAL({m.group(2)},{m.group(3) or 0})"
    base = re.sub(r"\(.*\)\Z", "", sql).strip()
    if base in _CRDB_TO_SPARK:
        return _CRDB_TO_SPARK[base]
    raise ValueError(f"column {name!r}: no Spark type for CockroachDB type {sql!r}")


def _as_struct(schema: "str | StructType") -> "StructType":
    from pyspark.sql.types import StructType

    from .decode.ddl import parse_ddl

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        return parse_ddl(schema)
    raise TypeError(f"a table schema must be a DDL string or a StructType, got {type(schema).__name__}")


def _nullable(struct: "StructType") -> "StructType":
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in struct.fields])


def _widen_inferred(struct: "StructType") -> "StructType":
    """Make an inferred schema safe for later rows: objects keep their JSON text, numbers get room."""
    from pyspark.sql.types import (
        ArrayType, DecimalType, DoubleType, LongType, NullType, StringType, StructField, StructType,
    )

    def widen(dt: Any) -> Any:
        if isinstance(dt, (StructType,)):
            return StringType()
        if isinstance(dt, ArrayType):
            inner = widen(dt.elementType)
            return StringType() if isinstance(inner, StringType) and isinstance(dt.elementType, StructType) else ArrayType(inner)
        if isinstance(dt, DecimalType):
            return DecimalType(38, min(dt.scale, 18))
        if isinstance(dt, (NullType,)):
            return StringType()
        if isinstance(dt, (LongType, DoubleType)):
            return dt
        return dt

    return StructType([StructField(f.name, widen(f.dataType), True) for f in struct.fields])


# --------------------------------------------------------------------------------------------
# File system (Hadoop's, so gs:// and hdfs:// work like local paths)
# --------------------------------------------------------------------------------------------


class _FS:
    def __init__(self, spark: "SparkSession", root: str) -> None:
        jvm = spark._jvm  # noqa: SLF001 - the Hadoop FS is only reachable through the JVM gateway
        self._jvm = jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.fs = self._Path(root).getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001

    def path(self, p: str) -> Any:
        return self._Path(p)

    def exists(self, p: str) -> bool:
        return bool(self.fs.exists(self._Path(p)))

    def list_names(self, p: str) -> list[str]:
        if not self.exists(p):
            return []
        return [s.getPath().getName() for s in self.fs.listStatus(self._Path(p))]

    def read_text(self, p: str) -> str:
        stream = self.fs.open(self._Path(p))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, p: str, text: str, *, overwrite: bool = True) -> None:
        out = self.fs.create(self._Path(p), overwrite)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def publish_text(self, p: str, text: str) -> None:
        """Make ``p`` appear with ``text`` all at once; FileExistsError if it already exists."""
        if self.exists(p):
            raise FileExistsError(p)
        parent = p.rsplit("/", 1)[0]
        tmp = f"{parent}/._tmp-{uuid.uuid4().hex}"
        self.write_text(tmp, text, overwrite=False)
        if not self.fs.rename(self._Path(tmp), self._Path(p)):
            self.fs.delete(self._Path(tmp), False)
            raise FileExistsError(p)

    def delete(self, p: str) -> None:
        self.fs.delete(self._Path(p), True)


def _join(*parts: str) -> str:
    return "/".join([parts[0].rstrip("/")] + [s.strip("/") for s in parts[1:]])


def _pointer(fs: _FS, table_dir: str) -> dict[str, Any] | None:
    """The newest readable pointer of a table, or None when the table has no state yet."""
    names = sorted((n for n in fs.list_names(_join(table_dir, "_versions")) if re.fullmatch(r"\d{10}\.json", n)),
                   reverse=True)
    for name in names:
        try:
            return json.loads(fs.read_text(_join(table_dir, "_versions", name)))
        except (ValueError, Exception):  # noqa: BLE001 - an unreadable pointer: fall back to the previous one
            continue
    return None


# --------------------------------------------------------------------------------------------
# Reading the state
# --------------------------------------------------------------------------------------------


def state_tables(spark: "SparkSession", state_dir: str) -> list[str]:
    """Names of the tables that have a state under ``state_dir``."""
    fs = _FS(spark, state_dir)
    return sorted(n for n in fs.list_names(state_dir)
                  if not n.startswith(("_", ".")) and fs.exists(_join(state_dir, n, "_versions")))


def current_version(spark: "SparkSession", state_dir: str, table: str) -> dict[str, Any] | None:
    """The current pointer of ``table`` (``version``, ``path``, ``rows``, ``schema``, ...) or None."""
    fs = _FS(spark, state_dir)
    return _pointer(fs, _join(state_dir, table))


def read_state(spark: "SparkSession", state_dir: str, table: str, *, include_deleted: bool = False,
               with_meta: bool = False) -> "DataFrame":
    """The current state of ``table`` as a DataFrame (typed columns; ``_key``... with ``with_meta``).

    ``include_deleted`` adds tombstones (typed columns null, ``_op = 'd'``). Raises ``LookupError``
    if the table has no state yet.
    """
    fs = _FS(spark, state_dir)
    ptr = _pointer(fs, _join(state_dir, table))
    if ptr is None:
        raise LookupError(f"no state for table {table!r} under {state_dir}")
    return _load_version(spark, state_dir, table, ptr, include_deleted=include_deleted, with_meta=with_meta)


def _load_version(spark: "SparkSession", state_dir: str, table: str, ptr: Mapping[str, Any], *,
                  include_deleted: bool, with_meta: bool) -> "DataFrame":
    from pyspark.sql import functions as F

    base = _join(state_dir, table, ptr["path"])
    rows = spark.read.parquet(_join(base, "rows"))
    if include_deleted:
        tomb = spark.read.parquet(_join(base, "tombstones"))
        rows = rows.withColumn("_deleted", F.lit(False)).unionByName(
            tomb.withColumn("_deleted", F.lit(True)), allowMissingColumns=True)
    if not with_meta:
        rows = rows.drop(*META_COLUMNS)
    return rows


# --------------------------------------------------------------------------------------------
# Applying a batch
# --------------------------------------------------------------------------------------------


def _prepare_fn(struct_json: str | None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function: typed columns from ``after``, exact HLC integers, op rank, error."""

    def prepare(batches: Iterator[Any]) -> Iterator[Any]:
        import msgspec
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        from crdb_pubsub.decode.typed import TypedError, json_row_converter

        struct = StructType.fromJson(json.loads(struct_json)) if struct_json else StructType([])
        conv = json_row_converter(struct) if struct_json else None
        out_schema = to_arrow_schema(_prepared_schema(_nullable(struct)), timezone="UTC")
        names = [f.name for f in struct.fields]
        for batch in batches:
            cols = batch.to_pydict()
            out: dict[str, list[Any]] = {n: [] for n in out_schema.names}
            for key, op, after, hlc, mid in zip(cols["key"], cols["op"], cols["after"], cols["hlc"],
                                                cols["message_id"]):
                err = None
                parsed = parse_hlc(hlc)
                values: dict[str, Any] = {}
                deleted = op == "d" or after is None
                if key is None:
                    err = "row change without a key"
                elif parsed is None:
                    err = (f"no usable HLC ({hlc!r}): create the changefeed WITH updated (or mvcc_timestamp)"
                           if not hlc else f"unparseable HLC {hlc!r}")
                elif not deleted and conv is not None:
                    try:
                        values = conv(after.encode("utf-8"))
                    except (TypedError, msgspec.DecodeError, ValueError) as exc:
                        err = str(exc)
                for n in names:
                    out[n].append(None if err or deleted else values.get(n))
                out["_key"].append(key)
                out["_hlc"].append(hlc)
                out["_hlc_wall"].append(parsed[0] if parsed and parsed[0] < 2**63 else None)
                out["_hlc_logical"].append(parsed[1] if parsed else None)
                out["_op"].append("d" if deleted else (op or "u"))
                out["_message_id"].append(mid)
                out["_rank"].append(_OP_RANK.get("d" if deleted else (op or "u"), 0))
                out["_after"].append(after)
                out["_error"].append(err)
            yield pa.RecordBatch.from_pydict(out, schema=out_schema)

    return prepare


def _prepared_schema(struct: "StructType") -> "StructType":
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(list(struct.fields) + [
        StructField("_key", StringType(), True),
        StructField("_hlc", StringType(), True),
        StructField("_hlc_wall", LongType(), True),
        StructField("_hlc_logical", LongType(), True),
        StructField("_op", StringType(), True),
        StructField("_message_id", StringType(), True),
        StructField("_rank", IntegerType(), True),
        StructField("_after", StringType(), True),
        StructField("_error", StringType(), True),
    ])


def _infer_schema(spark: "SparkSession", changes: "DataFrame") -> "StructType":
    from pyspark.sql.types import StructType

    sample = changes.where("after IS NOT NULL AND op <> 'd'").select("after").limit(1000)
    texts = [r.after for r in sample.collect()]
    if not texts:
        return StructType([])
    inferred = spark.read.option("prefersDecimal", "true").json(spark.sparkContext.parallelize(texts, 1)).schema
    inferred = StructType([f for f in inferred.fields if f.name != "_corrupt_record"])
    return _widen_inferred(inferred)


def _table_schema(spark: "SparkSession", fs: _FS, table_dir: str, table: str,
                  schemas: Mapping[str, Any] | None, changes: "DataFrame") -> "StructType":
    from .decode.ddl import parse_ddl, to_ddl

    given = (schemas or {}).get(table)
    path = _join(table_dir, "_schema.ddl")
    if given is not None:
        struct = _as_struct(given)
        text = to_ddl(struct)
        if not fs.exists(path) or fs.read_text(path) != text:
            fs.write_text(path, text)
        return struct
    if fs.exists(path):
        text = fs.read_text(path)
        return parse_ddl(text) if text.strip() else _as_struct_empty()
    struct = _infer_schema(spark, changes)
    if struct.fields:  # an all-deletes first batch says nothing about the columns yet
        fs.write_text(path, to_ddl(struct))
    return struct


def _as_struct_empty() -> "StructType":
    from pyspark.sql.types import StructType

    return StructType([])


def _check_table_name(table: str) -> None:
    if not _TABLE_NAME_RE.match(table) or table.startswith(("_", ".")):
        raise ValueError(f"table name {table!r} cannot be used as a state directory name")


def apply_batch(batch_df: "DataFrame", batch_id: int, *, state_dir: str,
                schemas: Mapping[str, "str | StructType"] | None = None) -> ApplyResult:
    """Merge one micro-batch of ``crdb_pubsub`` rows into the per-table state under ``state_dir``.

    ``batch_df`` has the source's columns (at least ``kind``, ``table_name``, ``key``, ``op``,
    ``after``, ``updated``/``mvcc_timestamp``, ``message_id``; ``after`` as JSON text, i.e. the
    source without ``rowSchema``). ``schemas`` maps table names to Spark DDL (or StructType);
    tables without one get a schema inferred once (see the module docstring). Rows of other kinds
    (resolved, ddl, ...) are ignored; ``malformed`` ones are counted. Safe to call again with the
    same or an overlapping batch. Returns the counts, also written to
    ``<state_dir>/_batches/<batch_id>.json``. Raises ``ValueError`` for an unusable table name.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    t0 = time.monotonic()
    spark = batch_df.sparkSession
    fs = _FS(spark, state_dir)
    after_is_text = not isinstance(batch_df.schema["after"].dataType, StructType)
    src = batch_df
    if not after_is_text:
        # rowSchema on the source: turn the struct back into JSON text so one exact path applies.
        src = src.withColumn("after", F.to_json("after"))
    src = src.select(
        "kind", "table_name", "key", "op", "after", "message_id",
        F.coalesce(F.col("updated"), F.col("mvcc_timestamp")).alias("hlc"),
    ).persist()
    try:
        per_kind = {(r.kind, r.table_name): r["count"] for r in src.groupBy("kind", "table_name").count().collect()}
        messages = sum(per_kind.values())
        malformed_total = sum(c for (k, _), c in per_kind.items() if k == "malformed")
        rows_in = sum(c for (k, _), c in per_kind.items() if k == "row")
        tables = sorted({t for (k, t) in per_kind if k == "row" and t})
        result = ApplyResult(batch_id=batch_id, tables={}, malformed=malformed_total, rows_in=rows_in, elapsed_s=0.0,
                             messages=messages)
        no_table = per_kind.get(("row", None), 0)
        if no_table:
            result.malformed += no_table
            result.errors.append(f"{no_table} row change(s) without a table name")
        for table in tables:
            _check_table_name(table)
            counts = _apply_table(spark, fs, src, table, batch_id, state_dir, schemas, result, Window, F)
            counts.malformed += per_kind.get(("malformed", table), 0)
            result.tables[table] = counts
        # Tables this batch did not touch still belong in the summary with their current size.
        for table in state_tables(spark, state_dir):
            if table not in result.tables:
                ptr = _pointer(fs, _join(state_dir, table)) or {}
                result.tables[table] = TableCounts(rows=ptr.get("rows", 0), tombstones=ptr.get("tombstones", 0),
                                                   version=ptr.get("version", 0))
    finally:
        src.unpersist()
    result.elapsed_s = round(time.monotonic() - t0, 3)
    fs.write_text(_join(state_dir, "_batches", f"{batch_id:012d}.json"), json.dumps(result.to_json()))
    return result


def _apply_table(spark: "SparkSession", fs: _FS, src: "DataFrame", table: str, batch_id: int, state_dir: str,
                 schemas: Mapping[str, Any] | None, result: ApplyResult, Window: Any, F: Any) -> TableCounts:
    table_dir = _join(state_dir, table)
    changes = src.where((F.col("kind") == "row") & (F.col("table_name") == table))
    struct = _nullable(_table_schema(spark, fs, table_dir, table, schemas, changes))
    prepared = changes.select("key", "op", "after", "hlc", "message_id").mapInArrow(
        _prepare_fn(struct.json() if struct.fields else None), _prepared_schema(struct)
    ).persist()
    try:
        return _merge(spark, fs, prepared, struct, table, table_dir, batch_id, result, Window, F)
    finally:
        prepared.unpersist()


def _merge(spark: "SparkSession", fs: _FS, prepared: "DataFrame", struct: "StructType", table: str, table_dir: str,
           batch_id: int, result: ApplyResult, Window: Any, F: Any) -> TableCounts:
    counts = TableCounts()
    user_cols = [f.name for f in struct.fields]
    # Bad rows ride along under a null key (their own window partition) so one job counts everything.
    is_bad = F.col("_error").isNotNull() | F.col("_hlc_wall").isNull()
    incoming = (prepared.withColumn("_bad", is_bad)
                .withColumn("_key", F.when(is_bad, F.lit(None)).otherwise(F.col("_key")))
                .withColumn("_src", F.lit(1)).withColumn("_batch_id", F.lit(batch_id).cast("long")))
    ptr = _pointer(fs, table_dir)
    incoming_cols = user_cols + ["_key", "_hlc", "_hlc_wall", "_hlc_logical", "_op", "_message_id", "_batch_id",
                                 "_rank", "_after", "_src", "_bad", "_error"]
    candidates = incoming.select(*incoming_cols)
    if ptr is not None:
        state = _load_version(spark, _parent(table_dir), table, ptr, include_deleted=True, with_meta=True)
        state = state.select(
            *[(F.col(c).cast(struct[c].dataType) if c in state.columns else F.lit(None).cast(struct[c].dataType)).alias(c)
              for c in user_cols],
            "_key", "_hlc", "_hlc_wall", "_hlc_logical", "_op", "_message_id", F.col("_batch_id").cast("long"),
            F.when(F.col("_deleted"), F.lit(3)).otherwise(F.coalesce(
                F.when(F.col("_op") == "u", 2).when(F.col("_op") == "c", 1).when(F.col("_op") == "r", 0), F.lit(2)
            )).cast("int").alias("_rank"),
            F.lit(None).cast("string").alias("_after"), F.lit(0).alias("_src"),
            F.lit(False).alias("_bad"), F.lit(None).cast("string").alias("_error"),
        )
        candidates = state.unionByName(candidates)
    by_key = Window.partitionBy("_key")
    order = Window.partitionBy("_key").orderBy(
        F.col("_hlc_wall").desc(), F.col("_hlc_logical").desc(), F.col("_rank").desc(), F.col("_src").asc(),
        F.col("_after").desc_nulls_last(), F.col("_message_id").desc_nulls_last(),
    )
    annotated = candidates.select(
        "*",
        F.row_number().over(order).alias("_rn"),
        # 0: key unknown to the state, 1: tombstone, 2: live row.
        F.max(F.when(F.col("_src") == 0, F.when(F.col("_op") == "d", 1).otherwise(2)).otherwise(0)).over(by_key)
        .alias("_prior"),
    ).withColumn("_rn", F.when(F.col("_bad"), F.lit(None)).otherwise(F.col("_rn"))).persist()
    try:
        agg = annotated.agg(
            F.sum(F.when(F.col("_bad"), 1).otherwise(0)).alias("bad"),
            F.slice(F.collect_list(F.when(F.col("_bad"), F.coalesce(F.col("_error"), F.lit("HLC out of range")))),
                    1, 5).alias("errors"),
            F.sum(F.when((F.col("_src") == 1) & ~F.col("_bad"), 1).otherwise(0)).alias("changes"),
            F.sum(F.when((F.col("_src") == 1) & (F.col("_rn") == 1) & (F.col("_op") != "d") & (F.col("_prior") != 2), 1)
                  .otherwise(0)).alias("inserts"),
            F.sum(F.when((F.col("_src") == 1) & (F.col("_rn") == 1) & (F.col("_op") != "d") & (F.col("_prior") == 2), 1)
                  .otherwise(0)).alias("updates"),
            F.sum(F.when((F.col("_src") == 1) & (F.col("_rn") == 1) & (F.col("_op") == "d") & (F.col("_prior") == 2), 1)
                  .otherwise(0)).alias("deletes"),
            F.sum(F.when((F.col("_src") == 1) & (F.col("_rn") == 1) & (F.col("_op") == "d") & (F.col("_prior") != 2), 1)
                  .otherwise(0)).alias("tombstoned"),
            F.sum(F.when((F.col("_rn") == 1) & (F.col("_op") != "d"), 1).otherwise(0)).alias("rows"),
            F.sum(F.when((F.col("_rn") == 1) & (F.col("_op") == "d"), 1).otherwise(0)).alias("tombstones"),
        ).collect()[0]
        counts.malformed = int(agg["bad"] or 0)
        result.malformed += counts.malformed
        for e in agg["errors"] or []:
            if len(result.errors) < 5:
                result.errors.append(f"{table}: {e}")
        changes = int(agg["changes"] or 0)
        counts.changes = changes + counts.malformed
        counts.inserts, counts.updates = int(agg["inserts"] or 0), int(agg["updates"] or 0)
        counts.deletes, counts.tombstoned = int(agg["deletes"] or 0), int(agg["tombstoned"] or 0)
        applied = counts.inserts + counts.updates + counts.deletes + counts.tombstoned
        counts.superseded = changes - applied
        counts.rows, counts.tombstones = int(agg["rows"] or 0), int(agg["tombstones"] or 0)
        if applied == 0 and ptr is not None:
            # Nothing newer than the state (e.g. a re-run of an applied batch): keep the version.
            counts.version = int(ptr["version"])
            return counts
        version = (int(ptr["version"]) if ptr else 0) + 1
        vdir = f"v{version:010d}-{uuid.uuid4().hex[:8]}"
        winners = annotated.where("_rn = 1")
        meta = ["_key", "_hlc", "_hlc_wall", "_hlc_logical", "_op", "_message_id", "_batch_id"]
        (winners.where("_op <> 'd'").select(*user_cols, *meta).coalesce(1)
         .write.mode("errorifexists").parquet(_join(table_dir, vdir, "rows")))
        (winners.where("_op = 'd'").select(*meta).coalesce(1)
         .write.mode("errorifexists").parquet(_join(table_dir, vdir, "tombstones")))
        from .decode.ddl import to_ddl

        pointer = {"version": version, "path": vdir, "batch_id": batch_id, "rows": counts.rows,
                   "tombstones": counts.tombstones, "schema": to_ddl(struct), "written_at": time.time()}
        fs.publish_text(_join(table_dir, "_versions", f"{version:010d}.json"), json.dumps(pointer))
        counts.version = version
        _cleanup(fs, table_dir, version)
        return counts
    finally:
        annotated.unpersist()


def _parent(table_dir: str) -> str:
    return table_dir.rsplit("/", 1)[0]


def _cleanup(fs: _FS, table_dir: str, version: int) -> None:
    """Drop versions older than the last few, and directories of attempts that never became current."""
    keep_from = version - _KEEP_VERSIONS + 1
    kept_paths = set()
    for name in fs.list_names(_join(table_dir, "_versions")):
        m = re.fullmatch(r"(\d{10})\.json", name)
        if not m:
            continue
        if int(m.group(1)) < keep_from:
            fs.delete(_join(table_dir, "_versions", name))
        else:
            try:
                kept_paths.add(json.loads(fs.read_text(_join(table_dir, "_versions", name)))["path"])
            except Exception:  # noqa: BLE001
                return  # unsure what is referenced: delete nothing
    for name in fs.list_names(table_dir):
        m = re.fullmatch(r"v(\d{10})-[0-9a-f]{8}", name)
        if m and name not in kept_paths and int(m.group(1)) <= version:
            fs.delete(_join(table_dir, name))


def foreach_batch_apply(state_dir: str, schemas: Mapping[str, "str | StructType"] | None = None, *,
                        on_result: Callable[[ApplyResult], None] | None = None
                        ) -> Callable[["DataFrame", int], None]:
    """``writeStream.foreachBatch(foreach_batch_apply(state_dir, schemas))``: :func:`apply_batch` per batch.

    ``on_result`` receives each :class:`ApplyResult` (e.g. to print progress); the returned
    function also keeps the latest one in its ``last_result`` attribute.
    """

    def apply_fn(batch_df: "DataFrame", batch_id: int) -> None:
        res = apply_batch(batch_df, batch_id, state_dir=state_dir, schemas=schemas)
        apply_fn.last_result = res  # type: ignore[attr-defined]
        if on_result is not None:
            on_result(res)

    apply_fn.last_result = None  # type: ignore[attr-defined]
    return apply_fn


# --------------------------------------------------------------------------------------------
# Verification against the simulator (tests, demo, examples)
# --------------------------------------------------------------------------------------------


def simulator_schemas(tables: "list[str] | None" = None) -> dict[str, str]:
    """Spark DDL for the simulator's movr tables, derived from their CockroachDB column types."""
    from .tools.simulator import TABLES

    out = {}
    for name, t in TABLES.items():
        if tables is not None and name not in tables:
            continue
        out[name] = ddl_from_crdb_types({
            c.name: (f"DECIMAL({c.precision},{c.scale})" if c.sql == "DECIMAL" else c.sql) for c in t.columns
        })
    return out


def _truth_micros(text: str) -> int:
    import datetime as _dt

    ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.timezone.utc)
    delta = ts - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _same(dtype: Any, state_value: Any, truth_value: Any) -> bool:
    import decimal
    import math

    from pyspark.sql.types import BinaryType, DecimalType, DoubleType, FloatType, StringType, TimestampType

    if truth_value is None or state_value is None:
        return truth_value is None and state_value is None
    if isinstance(dtype, DecimalType):
        # Equal value *and* the same digits: 26.30 must not come back as 26.3.
        return (isinstance(state_value, decimal.Decimal) and state_value == truth_value
                and str(state_value) == str(decimal.Decimal(truth_value).quantize(decimal.Decimal(1).scaleb(-dtype.scale))))
    if isinstance(dtype, TimestampType):
        return state_value == _truth_micros(truth_value)
    if isinstance(dtype, (DoubleType, FloatType)):
        if isinstance(truth_value, str):
            want = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[truth_value]
            return math.isnan(state_value) if math.isnan(want) else state_value == want
        return state_value == truth_value
    if isinstance(dtype, BinaryType):
        return bytes(state_value) == bytes.fromhex(truth_value[2:])
    if isinstance(dtype, StringType) and not isinstance(truth_value, str):
        return json.loads(state_value, parse_float=decimal.Decimal) == truth_value  # JSONB kept as text
    return state_value == truth_value and type(state_value) is type(truth_value)


def compare_to_ground_truth(spark: "SparkSession", state_dir: str, truth: Mapping[str, Mapping[str, Mapping[str, Any]]],
                            schemas: Mapping[str, Any], primary_keys: Mapping[str, "list[str]"] | None = None,
                            limit: int = 10) -> list[str]:
    """Differences between the state and ``ChangefeedSimulator.ground_truth()`` (empty list: equal).

    Keys are compared as primary-key value lists (an enriched feed's key objects are turned into
    lists with ``primary_keys``, default: the simulator's). Every column is compared exactly for
    its type (DECIMAL digits included, timestamps as epoch microseconds, JSONB as parsed JSON).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    from .tools.simulator import TABLES

    pks = dict(primary_keys or {t: list(v.pk) for t, v in TABLES.items()})
    problems: list[str] = []
    for table, rows in truth.items():
        struct = _as_struct(schemas[table])
        try:
            df = read_state(spark, state_dir, table, with_meta=True)
        except LookupError:
            if rows:
                problems.append(f"{table}: no state, expected {len(rows)} rows")
            continue
        cols = [F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, TimestampType) else F.col(f.name)
                for f in struct.fields]
        got: dict[str, Any] = {}
        for r in df.select("_key", *cols).collect():
            k = json.loads(r["_key"])
            k = [k[c] for c in pks[table]] if isinstance(k, dict) else k
            got[json.dumps(k)] = r
        want = {json.dumps(json.loads(k)): v for k, v in rows.items()}
        if set(got) != set(want):
            missing, extra = set(want) - set(got), set(got) - set(want)
            problems.append(f"{table}: {len(got)} rows in state, {len(want)} expected; "
                            f"missing {len(missing)} (e.g. {sorted(missing)[:2]}), extra {len(extra)} (e.g. {sorted(extra)[:2]})")
        for key in sorted(set(got) & set(want)):
            for f in struct.fields:
                if not _same(f.dataType, got[key][f.name], want[key].get(f.name)):
                    problems.append(f"{table} {key} {f.name}: state {got[key][f.name]!r} != truth {want[key].get(f.name)!r}")
                    if len(problems) >= limit:
                        return problems
    return problems
