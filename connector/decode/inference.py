"""Schema inference: a ``rowSchema`` DDL from an enriched message's own Kafka Connect ``schema`` block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["schema_from_enriched"]

_CONNECT_TYPES = {
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
    "bytes": "BINARY",
}


def _connect_type(field: Mapping[str, Any], where: str) -> str:
    from .ddl import quote_identifier  # pyspark's types: imported only when a schema is inferred

    name = field.get("name")
    ftype = str(field.get("type", "")).lower()
    if name == "decimal":
        params = field.get("parameters") or {}
        try:
            precision, scale = int(params["precision"]), int(params.get("scale", 0))
        except (KeyError, TypeError, ValueError):
            # An unconstrained CockroachDB DECIMAL has no Spark type that holds every value exactly.
            return "STRING"
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            return "STRING"
        return f"DECIMAL({precision},{scale})"
    if name == "timestamp":
        return "TIMESTAMP"
    if name == "date":
        return "DATE"
    if ftype == "struct":
        inner = ", ".join(
            f"{quote_identifier(str(f.get('field')))}: {_connect_type(f, where)}" for f in field.get("fields") or []
        )
        return f"STRUCT<{inner}>"
    if ftype == "array":
        return f"ARRAY<{_connect_type(field.get('items') or {}, where)}>"
    if ftype == "map":
        return f"MAP<STRING, {_connect_type(field.get('values') or {}, where)}>"
    # JSONB and types we do not know arrive as JSON; STRING keeps their exact text.
    return _CONNECT_TYPES.get(ftype, "STRING")


def schema_from_enriched(body: bytes) -> str:
    """Derive a row schema DDL string from an enriched message's own ``schema`` block.

    ``body`` is an ``envelope=enriched, enriched_properties='schema'`` message (the value, or the
    Pub/Sub v2 ``{"Key","Value","Topic"}`` body around it). The ``after`` (else ``before``) field's
    Kafka Connect types map to Spark: int8..int64 -> TINYINT..BIGINT, float32/float64 -> FLOAT/DOUBLE,
    ``name: decimal`` with precision/scale -> DECIMAL(p,s) (without them -> STRING), boolean, string,
    bytes -> BINARY, ``name: timestamp`` -> TIMESTAMP, ``name: date`` -> DATE, struct, array, map.
    Raises ValueError when the message carries no usable schema.
    """
    try:
        doc = msgspec.json.decode(bytes(body))
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"schema_from_enriched: the body is not valid JSON ({exc})") from None
    if isinstance(doc, dict) and "Value" in doc and isinstance(doc["Value"], dict):
        doc = doc["Value"]
    if not isinstance(doc, dict) or not isinstance(doc.get("schema"), dict):
        raise ValueError("schema_from_enriched: the message has no `schema` block (use enriched_properties='schema')")
    fields = doc["schema"].get("fields") or []
    by_name = {f.get("field"): f for f in fields if isinstance(f, dict)}
    row = by_name.get("after") or by_name.get("before")
    if not row or not isinstance(row.get("fields"), list):
        raise ValueError("schema_from_enriched: the schema has no `after` (or `before`) struct")
    from .ddl import parse_ddl, quote_identifier

    ddl = ", ".join(f"{quote_identifier(str(f.get('field')))} {_connect_type(f, 'after')}" for f in row["fields"])
    parse_ddl(ddl)  # what we hand out must be readable by our own parser
    return ddl
