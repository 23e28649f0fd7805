"""``{"schema": ..., "payload": ...}``: the enriched and Debezium envelopes with their schema.

That is the enriched envelope with ``enriched_properties=schema``, and Debezium's JSON converter
with schemas on (PostgreSQL, TiCDC).
"""

from __future__ import annotations

from ..common import Bad, Context, Row, kind_of, parse_object, schema_name, short
from ..registry import Family
from .debezium import debezium_row, is_transaction, tombstone_row, transaction_row
from .enriched import enriched_row, is_enriched
from .resolved import resolved_row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return "payload" in d and keys <= {"payload", "schema"} and env in ("auto", "enriched", "debezium")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    payload_raw = d["payload"]
    if payload_raw == b"null" and d.get("schema", b"null") == b"null" and env != "enriched":
        return [tombstone_row()]
    if payload_raw[:1] != b"{":
        raise Bad(f"`payload` must be an object, got {kind_of(payload_raw)} {short(payload_raw)}")
    payload = parse_object(payload_raw, "`payload`")
    name = schema_name(d["schema"]) if "schema" in d else None
    if env != "enriched" and is_transaction(payload):
        return [transaction_row(payload, payload_raw)]
    if env == "enriched" or (env == "auto" and is_enriched(payload, name)):
        if set(payload) == {"resolved"}:
            return [resolved_row(payload, "enriched", "payload.")]
        return [enriched_row(payload, ctx)]
    return [debezium_row(payload, payload_raw, ctx)]


FAMILY = Family(order=40, names=(), claims=_claims, decode=_decode)
