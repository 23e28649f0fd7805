"""One Pub/Sub message as CockroachDB would publish it, in every envelope the simulator writes."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .tables import TABLES, Column


@dataclasses.dataclass(frozen=True)
class SimMessage:
    """One Pub/Sub message as CockroachDB would publish it.

    ``topic``: Pub/Sub topic id; ``table``: source table ("" for a resolved message on a shared
    ``topic_name`` topic); ``data``: the exact message body; ``attributes``: Pub/Sub attributes
    (empty unless ``with_table_name_attribute``); ``ordering_key``: "" unless ``legacy_wrapper``;
    ``kind``: "row" or "resolved"; ``op``: "c", "u" or "d" ("" for resolved); ``key``: the key
    JSON text exactly as embedded in ``data`` (an array, or an object for ``enriched``; "" for
    resolved); ``hlc``: the commit (or resolved) HLC timestamp; ``pk``: the primary-key JSON
    array text, which is the key of :meth:`ChangefeedSimulator.ground_truth` ("" for resolved).
    """

    topic: str
    table: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    kind: str
    op: str
    key: str
    hlc: str
    pk: str = ""


ENVELOPES = ("wrapped", "bare", "enriched")
_ENRICHED_PROPERTIES = frozenset({"source", "schema"})
OPS = ("insert", "update", "delete")
_TOPIC_RE = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$")

_SOURCE_SCHEMA_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("mvcc_timestamp", "string", True),
    ("ts_ns", "int64", True),
    ("ts_hlc", "string", True),
    ("table_name", "string", False),
    ("origin", "string", False),
    ("cluster_id", "string", False),
    ("node_id", "string", False),
    ("changefeed_sink", "string", False),
    ("schema_name", "string", False),
    ("node_name", "string", False),
    ("database_name", "string", False),
    ("source_node_locality", "string", False),
    ("primary_keys", "array", False),
    ("job_id", "string", False),
    ("db_version", "string", False),
    ("cluster_name", "string", False),
)


def _column_schema(col: Column) -> dict[str, Any]:
    """Kafka-Connect JSON schema of a column, as CockroachDB's kcjsonschema builds it."""
    schemas: dict[str, dict[str, Any]] = {
        "UUID": {"type": "string"},
        "STRING": {"type": "string"},
        "BYTES": {"type": "bytes"},
        "DECIMAL": {
            "type": "float64",
            "name": "decimal",
            "parameters": {"precision": str(col.precision), "scale": str(col.scale)},
        },
        "TIMESTAMP": {"type": "string", "name": "timestamp"},
        "TIMESTAMPTZ": {"type": "string", "name": "timestamp"},
        "JSONB": {"type": "json"},
        "INT8": {"type": "int64"},
        "STRING[]": {"type": "array", "items": {"optional": False, "type": "string"}},
        "BOOL": {"type": "boolean"},
        "FLOAT": {"type": "float64"},
    }
    base = schemas[col.sql]
    return {"field": col.name, "optional": col.nullable, **base}


def struct_schema(field: str | None, name: str, cols: Sequence[Column], optional: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "fields": [_column_schema(c) for c in cols],
        "name": name,
        "optional": optional,
        "type": "struct",
    }
    if field:
        out["field"] = field
    return out


def source_schema() -> dict[str, Any]:
    fields = []
    for name, typ, optional in _SOURCE_SCHEMA_FIELDS:
        f: dict[str, Any] = {"field": name, "optional": optional, "type": typ}
        if typ == "array":
            f["items"] = {"optional": False, "type": "string"}
        fields.append(f)
    return {"field": "source", "fields": fields, "name": "cockroachdb.source", "optional": True, "type": "struct"}


@dataclasses.dataclass(frozen=True)
class _Options:
    envelope: str
    enriched_properties: frozenset[str]
    diff: bool
    updated: bool
    mvcc_timestamp: bool
    key_in_value: bool
    column_families: bool
    full_table_name: bool
    topic_name: str | None
    resolved_every: int
    legacy_wrapper: bool
    with_table_name_attribute: bool
    tables: tuple[str, ...]
    mix: tuple[float, float, float]


def validate(**kw: Any) -> _Options:
    """Check every option; raise ``ValueError`` naming the offending one."""
    for name in (
        "diff",
        "updated",
        "mvcc_timestamp",
        "key_in_value",
        "column_families",
        "full_table_name",
        "legacy_wrapper",
        "with_table_name_attribute",
    ):
        if not isinstance(kw[name], bool):
            raise ValueError(f"{name}: expected a bool, got {kw[name]!r}")
    envelope = kw["envelope"]
    if envelope not in ENVELOPES:
        raise ValueError(f"envelope: expected one of {ENVELOPES}, got {envelope!r}")
    props = kw["enriched_properties"]
    if isinstance(props, str):
        props = [p.strip() for p in props.split(",") if p.strip()]
    props = frozenset(props or ())
    if not props <= _ENRICHED_PROPERTIES:
        raise ValueError(
            f"enriched_properties: unknown {sorted(props - _ENRICHED_PROPERTIES)}; "
            f"allowed {sorted(_ENRICHED_PROPERTIES)}"
        )
    if props and envelope != "enriched":
        raise ValueError("enriched_properties: only usable with envelope='enriched'")
    if kw["diff"] and envelope == "bare":
        raise ValueError("diff: not supported with envelope='bare' (CockroachDB has no 'before' there)")
    if kw["legacy_wrapper"] and envelope == "enriched":
        raise ValueError("legacy_wrapper: the legacy sink was removed in v25.2, before envelope='enriched'")
    every = kw["resolved_every"]
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(f"resolved_every: expected an int >= 0, got {every!r}")
    topic_name = kw["topic_name"]
    if topic_name is not None and (
        not isinstance(topic_name, str) or not _TOPIC_RE.match(topic_name) or topic_name.startswith("goog")
    ):
        raise ValueError(f"topic_name: not a valid Pub/Sub topic id: {topic_name!r}")
    tables = kw["tables"]
    tables = tuple(TABLES) if tables is None else ((tables,) if isinstance(tables, str) else tuple(tables))
    unknown = [t for t in tables if t not in TABLES]
    if not tables or unknown or len(set(tables)) != len(tables):
        raise ValueError(
            f"tables: expected a non-empty subset of {tuple(TABLES)} without repeats, got {kw['tables']!r}"
        )
    return _Options(
        envelope,
        props,
        kw["diff"],
        kw["updated"],
        kw["mvcc_timestamp"],
        kw["key_in_value"],
        kw["column_families"],
        kw["full_table_name"],
        topic_name,
        every,
        kw["legacy_wrapper"],
        kw["with_table_name_attribute"],
        tables,
        _validate_mix(kw["mix"]),
    )


def _validate_mix(mix: Any) -> tuple[float, float, float]:
    if isinstance(mix, Mapping):
        extra = set(mix) - set(OPS)
        if extra:
            raise ValueError(f"mix: unknown operations {sorted(extra)}; allowed {OPS}")
        mix = tuple(mix.get(op, 0.0) for op in OPS)
    try:
        weights = tuple(float(w) for w in mix)
    except (TypeError, ValueError):
        raise ValueError(f"mix: expected (insert, update, delete) weights, got {mix!r}") from None
    if len(weights) != 3 or any(not math.isfinite(w) or w < 0 for w in weights) or weights[0] <= 0:
        raise ValueError(f"mix: need 3 finite weights >= 0 with insert > 0, got {mix!r}")
    return weights
