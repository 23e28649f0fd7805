"""Table schemas for the apply helper.

Spark DDL from CockroachDB types, Arrow/Spark conversion, the bookkeeping columns, and the types a
new column gets when the changefeed grows one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "BATCH",
    "DELETED",
    "FAMILY_ORDER_PREFIX",
    "HLC_COL",
    "KEY",
    "META_COLUMNS",
    "META_PREFIX",
    "ORDER",
    "TRUNCATE_KEY",
    "SchemaChangeError",
    "arrow_schema_of",
    "as_struct",
    "ddl_from_crdb_types",
    "family_order_column",
    "infer_type",
    "struct_of_arrow",
]

# Bookkeeping columns of every state table; user columns may not start with META_PREFIX.
META_PREFIX = "_crdb_"
KEY = "_crdb_key"  # the primary key as CockroachDB's JSON text: the MERGE join key
HLC_COL = "_crdb_hlc"  # HLC of the change that wrote the row, as sent
ORDER = "_crdb_order"  # order key of that change (see hlc.order_key): what the MERGE compares
DELETED = "_crdb_deleted"  # tombstone: the key was deleted at _crdb_hlc (kept so older changes lose)
BATCH = "_crdb_batch_id"  # the micro-batch that last wrote the row
META_COLUMNS = (KEY, HLC_COL, ORDER, DELETED, BATCH)
# The state row that remembers a table's latest truncate (Debezium op t): a tombstone under a key no
# row has (keys are JSON arrays or objects), so every reader that skips tombstones skips it, and
# its order is the truncate's, which changes older than it lose to.
TRUNCATE_KEY = "<truncate>"
FAMILY_ORDER_PREFIX = "_crdb_order__"  # per column family: order key of the family's latest change


class SchemaChangeError(ValueError):
    """A schema change the apply helper will not make silently; the message names table and column."""


def family_order_column(family: str) -> str:
    return FAMILY_ORDER_PREFIX + family


_CRDB_TO_SPARK = {
    "UUID": "STRING",
    "STRING": "STRING",
    "TEXT": "STRING",
    "VARCHAR": "STRING",
    "CHAR": "STRING",
    "NAME": "STRING",
    "INET": "STRING",
    "TIME": "STRING",
    "TIMETZ": "STRING",
    "INTERVAL": "STRING",
    "BIT": "STRING",
    "VARBIT": "STRING",
    "ENUM": "STRING",
    "JSONB": "STRING",
    "JSON": "STRING",
    "INT8": "BIGINT",
    "INT": "BIGINT",
    "INTEGER": "BIGINT",
    "BIGINT": "BIGINT",
    "INT4": "INT",
    "INT2": "SMALLINT",
    "SMALLINT": "SMALLINT",
    "SERIAL": "BIGINT",
    "BOOL": "BOOLEAN",
    "BOOLEAN": "BOOLEAN",
    "FLOAT": "DOUBLE",
    "FLOAT8": "DOUBLE",
    "DOUBLE PRECISION": "DOUBLE",
    "REAL": "DOUBLE",
    "FLOAT4": "DOUBLE",
    "BYTES": "BINARY",
    "BYTEA": "BINARY",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMP",
}


def ddl_from_crdb_types(columns: Mapping[str, str]) -> str:
    """Spark DDL for a table given its CockroachDB column types (as ``SHOW CREATE TABLE`` prints them).

    ``{"id": "UUID", "balance": "DECIMAL(12,2)", "tags": "STRING[]"}`` ->
    ``"id STRING, balance DECIMAL(12,2), tags ARRAY<STRING>"``. DECIMAL without precision becomes
    DECIMAL(38,9) (CockroachDB's unbounded DECIMAL has no Spark equivalent: say what you store);
    JSONB, UUID, INTERVAL, TIME, INET, ENUM... become STRING (JSONB keeps its exact JSON text);
    TIMESTAMP and TIMESTAMPTZ become TIMESTAMP (UTC). Raises ``ValueError`` for unknown types.
    """
    from ..decode.ddl import quote_identifier

    return ", ".join(
        f"{quote_identifier(name)} {_spark_type(sql.strip().upper(), name)}" for name, sql in columns.items()
    )


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


def as_struct(schema: str | StructType) -> StructType:
    """Return a table schema given as Spark DDL or StructType as a StructType, every column nullable.

    Every column is nullable because a tombstone has no values.
    """
    from pyspark.sql.types import StructField, StructType

    from ..decode.ddl import parse_ddl

    if isinstance(schema, str):
        struct = parse_ddl(schema)
    elif isinstance(schema, StructType):
        struct = schema
    else:
        raise TypeError(f"a table schema must be a DDL string or a StructType, got {type(schema).__name__}")
    return StructType([StructField(f.name, f.dataType, True) for f in struct.fields])


def arrow_schema_of(struct: StructType) -> pa.Schema:
    """Return the Arrow schema of a table's user columns (UTC microsecond timestamps, as Delta stores them)."""
    from ..decode.schema import spark_to_arrow

    return spark_to_arrow(struct)


def plain_arrow_type(t: pa.DataType) -> pa.DataType:
    """Turn string_view/large types into the plain ones Spark's type mapping and pandas know.

    delta-rs and DataFusion hand them back.
    """
    import pyarrow as pa

    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_list(t):
        return pa.list_(plain_arrow_type(t.value_type))
    return t


def struct_of_arrow(schema: pa.Schema) -> StructType:
    """Return the Spark schema of a Delta table's user columns (its Arrow schema minus the bookkeeping)."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = []
    for f in schema:
        if f.name.startswith(META_PREFIX):
            continue
        t = plain_arrow_type(f.type)
        fields.append(StructField(f.name, from_arrow_type(t), True))
    return StructType(fields)


def infer_type(raws: list[bytes]) -> DataType:
    """Return the type a new column gets from the JSON values the changefeed sent for it (nulls skipped).

    Integers -> BIGINT (DECIMAL(38,0) past int64), other numbers -> DECIMAL(38, largest scale seen)
    (DOUBLE with an exponent), true/false -> BOOLEAN, strings/objects/arrays -> STRING (JSON text).
    Pass DDL for anything that matters (a TIMESTAMP arrives as a string and stays one).
    """
    from pyspark.sql.types import BooleanType, DecimalType, DoubleType, LongType, StringType

    kinds: set[str] = set()
    scale = 0
    for raw in raws:
        if raw is None or raw == b"null":
            continue
        c = raw[:1]
        if c in b"-0123456789" and c:
            text = raw.decode()
            if re.fullmatch(r"-?\d+", text):
                kinds.add("int" if -(2**63) <= int(text) < 2**63 else "bigdec")
            elif re.fullmatch(r"-?\d+\.\d+", text):
                kinds.add("dec")
                scale = max(scale, len(text.split(".")[1]))
            else:
                try:
                    Decimal(text)
                    kinds.add("double")
                except InvalidOperation:
                    kinds.add("string")
        elif raw in (b"true", b"false"):
            kinds.add("bool")
        else:
            kinds.add("string")
    if not kinds or "string" in kinds or ("bool" in kinds and len(kinds) > 1):
        return StringType()
    if kinds == {"bool"}:
        return BooleanType()
    if "double" in kinds:
        return DoubleType()
    if kinds == {"int"}:
        return LongType()
    return DecimalType(38, min(scale, 18))
