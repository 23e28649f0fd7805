"""Resolved timestamps: ``{"resolved": "<HLC>"}`` (wrapped, enriched and webhook changefeeds)."""

from __future__ import annotations

from ...hlc import hlc_to_micros
from ..common import Bad, Context, Row, hlc_field
from ..registry import Family


def resolved_row(d: dict[str, bytes], envelope: str, where: str) -> Row:
    """The row of a resolved message (``where`` prefixes the field in errors)."""
    value = hlc_field(d, "resolved", where)
    if value is None:
        raise Bad(f"`{where}resolved` must be an HLC string, got null")
    row = Row("resolved", envelope)
    row.resolved = value
    row.commit_us = hlc_to_micros(value)
    return row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return keys == {"resolved"} and env in ("auto", "wrapped", "enriched", "webhook")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    return [resolved_row(d, "wrapped" if env == "auto" else env, "")]


FAMILY = Family(order=10, names=(), claims=_claims, decode=_decode)
