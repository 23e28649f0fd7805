"""``envelope=row`` (and ``bare`` without ``__crdb__``): the body is the row itself, an upsert."""

from __future__ import annotations

from ..common import Context, Row, convert
from ..registry import Family


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return env in ("auto", "row", "bare")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    row = Row("row", "row" if env == "auto" else env)
    row.after = convert(raw, ctx, "after")
    row.op = "u"
    return [row]


FAMILY = Family(order=90, names=("row",), claims=_claims, decode=_decode)
