"""The output contract: column names, order and types of a decoded change event.

Everything that produces rows (``decode_messages`` and the streaming source) builds its Arrow
batches against :func:`arrow_schema`, and the data source declares :func:`spark_schema`; both come
from the single column list below so that they cannot drift apart. Spark checks the first Arrow
batch of every partition against the declared schema *exactly* (int64 vs int32, nullability,
order), which is why the Arrow schema is derived from the Spark one rather than written twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

# (name, Spark DDL type, nullable). ``before``/``after`` are JSON text unless a row schema is given.
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("message_id", "STRING", True),
    ("publish_time", "TIMESTAMP", True),
    ("attributes", "MAP<STRING, STRING>", True),
    ("ordering_key", "STRING", True),
    ("kind", "STRING", False),
    ("envelope", "STRING", True),
    ("topic", "STRING", True),
    ("table_name", "STRING", True),
    ("key", "STRING", True),
    ("op", "STRING", True),
    ("before", "STRING", True),
    ("after", "STRING", True),
    ("updated", "STRING", True),
    ("mvcc_timestamp", "STRING", True),
    ("commit_time", "TIMESTAMP", True),
    ("resolved", "STRING", True),
    ("source", "STRING", True),
    ("error", "STRING", True),
    ("data", "BINARY", True),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c[0] for c in COLUMNS)


def spark_schema(row_schema: StructType | None = None) -> StructType:
    """Return the Spark schema of the source's DataFrame.

    With ``row_schema`` the ``before`` and ``after`` columns become structs of that type.
    """
    from pyspark.sql.types import (
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    simple = {
        "STRING": StringType(),
        "TIMESTAMP": TimestampType(),
        "BINARY": BinaryType(),
        "MAP<STRING, STRING>": MapType(StringType(), StringType(), True),
    }
    fields = []
    for name, ddl, nullable in COLUMNS:
        dtype = simple[ddl]
        if row_schema is not None and name in ("before", "after"):
            dtype = row_schema
        fields.append(StructField(name, dtype, nullable))
    return StructType(fields)


def arrow_schema(row_schema: StructType | None = None) -> pa.Schema:
    """Return the Arrow schema every record batch must match.

    Spark's data source worker builds its expectation with ``to_arrow_schema`` and compares with
    ``pa.Schema.equals``; we call the very same function the way the running Spark's worker does.
    """
    return spark_to_arrow(spark_schema(row_schema))


def spark_to_arrow(struct: StructType) -> pa.Schema:
    """Call ``to_arrow_schema`` as the running pyspark's data source worker calls it.

    4.2+ pass ``timezone="UTC"``; 4.0/4.1 have no such argument (their default,
    ``timestamp_utc=True``, is the same UTC timestamps).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(struct, timezone="UTC")
    except TypeError as exc:
        if "timezone" not in str(exc):
            raise
        return to_arrow_schema(struct)
