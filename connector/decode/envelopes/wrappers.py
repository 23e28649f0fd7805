"""The layers around a changefeed value: the Pub/Sub sink's message and a sinkless result row.

CockroachDB's Pub/Sub sink publishes ``{"Key": ..., "Value": {...}, "Topic": "..."}`` (older
versions the same in lowercase); a sinkless changefeed's SQL rows (``table``, ``key``, ``value``)
rendered as JSON hold the key and value as strings of JSON text.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from .common import WS, Bad, Context, Row, key_text, kind_of, parse_object, short, string_field, table_from_topic

_V2_KEYS = frozenset(("Key", "Value", "Topic"))
_LEGACY_KEYS = frozenset(("key", "value", "topic"))


@dataclass
class Unwrapped:
    """The value inside the wrapper, with the key and topic the wrapper gave (``None``: none)."""

    value: dict[str, bytes]
    raw: bytes
    key: str | None = None
    topic: str | None = None


def unwrap(top: dict[str, bytes], body: bytes, ctx: Context) -> Unwrapped | list[Row]:
    """Return the value of a message body, or the rows of a sinkless result row (decoded here)."""
    if not _V2_KEYS.isdisjoint(top):
        extra = sorted(set(top) - _V2_KEYS)
        if extra:
            raise Bad(f"Pub/Sub wrapper {{Key, Value, Topic}} has unexpected field(s) {', '.join(extra)}")
        if "Value" not in top:
            raise Bad("Pub/Sub wrapper {Key, Value, Topic} is missing `Value`")
        topic = string_field(top, "Topic", "Pub/Sub wrapper ")
        value_raw = top["Value"]
        if value_raw[:1] != b"{":
            raise Bad(f"Pub/Sub wrapper `Value` must be a JSON object, got {kind_of(value_raw)} {short(value_raw)}")
        return Unwrapped(parse_object(value_raw, "`Value`"), value_raw, _key(top.get("Key")), topic)
    if "value" in top and set(top) <= _LEGACY_KEYS and top["value"][:1] == b"{" and ctx.envelope not in ("row", "bare"):
        topic = string_field(top, "topic", "legacy Pub/Sub wrapper ")
        value_raw = top["value"]
        return Unwrapped(parse_object(value_raw, "`value`"), value_raw, _key(top.get("key")), topic)
    if set(top) == {"key", "table", "value"} and top["key"][:1] == b'"' and ctx.envelope not in ("row", "bare"):
        return _sinkless(top, ctx)
    return Unwrapped(top, body)


def _key(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    key = key_text(raw, "Pub/Sub wrapper `Key`")
    # With enriched_properties=schema the key carries its own {payload, schema}.
    if key is not None and raw[:1] == b"{":
        kobj = parse_object(raw, "Pub/Sub wrapper `Key`")
        if set(kobj) == {"payload", "schema"}:
            key = key_text(kobj["payload"], "Pub/Sub wrapper `Key.payload`")
    return key


def _sinkless(top: dict[str, bytes], ctx: Context) -> list[Row]:
    from .families.key_only import key_row
    from .registry import decode_value

    key_text_ = msgspec.json.decode(top["key"], type=str)
    table = string_field(top, "table", "")
    value = top["value"]
    if value[:1] != b'"':
        raise Bad(f"sinkless row `value` must be a string, got {kind_of(value)}")
    value_text = msgspec.json.decode(value, type=str)
    key_bytes = key_text_.encode()
    if key_bytes.lstrip(WS)[:1] != b"[":
        raise Bad(f"sinkless row `key` must hold a JSON array, got {key_text_[:40]!r}")
    key = key_row(key_bytes)
    if value_text == "":
        rows = [key]
    else:
        inner = value_text.encode()
        rows = decode_value(parse_object(inner, "sinkless row `value`"), inner, ctx, ctx.envelope)
    for row in rows:
        row.key = key.key
        row.topic = table
        row.table_name = table_from_topic(table)
    return rows
