"""``envelope=key_only``: the body is the row's primary key, a JSON array of scalars."""

from __future__ import annotations

import msgspec

from ..common import LIST, WS, Bad, Context, Row, kind_of, parse_object
from ..registry import Family


def key_row(body: bytes) -> Row:
    """Decode the row of a key array (also the key of a sinkless result row)."""
    try:
        items = LIST.decode(body)
    except RecursionError:
        raise Bad("JSON nested too deep") from None
    except (msgspec.DecodeError, ValueError) as exc:
        raise Bad(f"invalid JSON ({exc})") from None
    if not items:
        raise Bad("an empty JSON array is not a primary key")
    for i, item in enumerate(items):
        kind = kind_of(bytes(item))
        if kind in ("object", "array", "null"):
            raise Bad(f"a JSON array whose element {i} is {kind} is not a primary key (key_only holds scalars)")
    row = Row("row", "key_only")
    row.key = body.strip(WS).decode()
    return row


def _body(body: bytes, env: str, ctx: Context) -> list[Row] | None:
    first = body.lstrip(WS)[:1]
    if first == b"[":
        if env not in ("auto", "key_only"):
            raise Bad(f"envelope={env} expects a JSON object, got a JSON array")
        return [key_row(body)]
    if env == "key_only" and first == b"{":
        parse_object(body, "message")  # invalid JSON is named as such first
        raise Bad("envelope=key_only expects a JSON array, got a JSON object")
    return None


FAMILY = Family(order=2, names=("key_only",), body=_body)
