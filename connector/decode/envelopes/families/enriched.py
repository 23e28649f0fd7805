"""``envelope=enriched``: ``op``, ``after``/``before``, ``source`` and ``ts_ns`` at the top level."""

from __future__ import annotations

from ...hlc import MAX_MICROS, hlc_to_micros
from ..common import Bad, Context, Row, fill_images_and_meta, hlc_field, int_field, object_or_null, parse_object
from ..common import short, string_field
from ..registry import Family

_KEYS = frozenset(("after", "before", "key", "op", "source", "ts_ns", "updated", "mvcc_timestamp", "topic"))
_OPS = frozenset(("c", "u", "d", "r"))


def is_enriched(payload: dict[str, bytes], schema_name: str | None) -> bool:
    """Whether a value is CockroachDB's enriched envelope rather than a Debezium event."""
    if schema_name is not None:
        return schema_name == "cockroachdb.envelope"
    src = payload.get("source")
    if src is not None and src[:1] == b"{":
        origin = parse_object(src, "`source`").get("origin")
        return origin == b'"cockroachdb"'
    # Debezium always names ts_ms; CockroachDB's enriched envelope has ts_ns and never ts_ms.
    return "ts_ms" not in payload and ("ts_ns" in payload or "op" in payload) and "ddl" not in payload


def enriched_row(d: dict[str, bytes], ctx: Context) -> Row:
    extra = set(d) - _KEYS
    if extra:
        raise Bad(f"enriched envelope has unexpected field(s) {', '.join(sorted(extra))}")
    row = Row("row", "enriched")
    op = string_field(d, "op", "")
    if op is None:
        raise Bad("enriched envelope is missing `op`")
    if op not in _OPS:
        raise Bad(f"enriched `op` must be one of c, u, d, r; got {op!r}")
    row.op = op
    fill_images_and_meta(row, d, ctx)
    source_raw = object_or_null(d, "source", "")
    source: dict[str, bytes] = {}
    if source_raw is not None:
        row.source = source_raw.decode()
        source = parse_object(source_raw, "`source`")
        row.table_name = string_field(source, "table_name", "source.") or None
        row.updated = row.updated or hlc_field(source, "ts_hlc", "source.")
        row.mvcc_timestamp = row.mvcc_timestamp or hlc_field(source, "mvcc_timestamp", "source.")
    if "ts_ns" in d and int_field(d, "ts_ns") is None:
        raise Bad(f"enriched `ts_ns` must be an integer, got {short(d['ts_ns'])}")
    stamp = row.updated or row.mvcc_timestamp
    if stamp:
        row.commit_us = hlc_to_micros(stamp)
    else:
        # source.ts_ns is the commit time; a top-level ts_ns alone is when the changefeed emitted the row.
        ns = int_field(source, "ts_ns") if source else None
        if ns is None:
            ns = int_field(d, "ts_ns")
        row.commit_us = ns // 1000 if ns is not None and 0 <= ns // 1000 <= MAX_MICROS else None
    return row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return env == "enriched" or (env == "auto" and "op" in d and keys <= _KEYS and is_enriched(d, None))


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    return [enriched_row(d, ctx)]


FAMILY = Family(order=60, names=("enriched",), claims=_claims, decode=_decode)
