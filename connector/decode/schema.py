"""The output contract: column names, order and types of a decoded change event.

Everything that produces rows (``decode_messages`` and the streaming source) builds its Arrow
batches against :func:`arrow_schema`, and the data source declares :func:`spark_schema`; both come
from the single column list below so that they cannot drift apart. Spark checks the first Arrow
batch of every partition against the declared schema *exactly* (int64 vs int32, nullability,
order), which is why the Arrow schema is derived from the Spark one rather than written twice.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
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


def output_columns(names: Iterable[str] | None) -> tuple[str, ...]:
    """Return ``names`` checked as output columns (case-insensitive, in the order given); all of them for None.

    Raises ``ValueError`` saying what is wrong (no name, an empty or unknown name, one named
    twice); the caller adds which argument or option it was and :data:`COLUMN_NAMES`.
    """
    if names is None:
        return COLUMN_NAMES
    given = [str(name).strip() for name in names]
    if not any(given):
        raise ValueError("names no column")
    if not all(given):
        raise ValueError("has an empty entry in its comma-separated list")
    out: list[str] = []
    for name in given:
        low = name.lower()
        if low not in COLUMN_NAMES:
            close = difflib.get_close_matches(low, COLUMN_NAMES, n=1, cutoff=0.6)
            raise ValueError(f"unknown column {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if low in out:
            raise ValueError(f"names {low!r} twice")
        out.append(low)
    return tuple(out)


def spark_schema(row_schema: StructType | None = None, columns: Sequence[str] | None = None) -> StructType:
    """Return the Spark schema of the source's DataFrame.

    With ``row_schema`` the ``before`` and ``after`` columns become structs of that type. With
    ``columns`` (checked names, see :func:`output_columns`) only those, in that order.
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
    fields = {}
    for name, ddl, nullable in COLUMNS:
        dtype = simple[ddl]
        if row_schema is not None and name in ("before", "after"):
            dtype = row_schema
        fields[name] = StructField(name, dtype, nullable)
    return StructType([fields[name] for name in (COLUMN_NAMES if columns is None else columns)])


def arrow_schema(row_schema: StructType | None = None, columns: Sequence[str] | None = None) -> pa.Schema:
    """Return the Arrow schema every record batch must match (of ``columns`` only, in their order, when given).

    Spark's data source worker builds its expectation with ``to_arrow_schema`` and compares with
    ``pa.Schema.equals``; we call the very same function the way the running Spark's worker does.
    """
    return spark_to_arrow(spark_schema(row_schema, columns))


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
