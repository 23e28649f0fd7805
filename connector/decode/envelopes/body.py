"""One message body in, change rows out: the outer layers, then the registry's families.

The layers, outermost first: the body's bytes (empty, not UTF-8, a CSV record or a key array: the
families' ``body`` hooks); the Pub/Sub sink's wrapper (``{"Key", "Value", "Topic"}``, or the legacy
lowercase one) or a sinkless changefeed's result row (:mod:`.wrappers`); then the value itself,
decoded by the first family of :mod:`.registry` that claims it.
"""

from __future__ import annotations

from .common import WS, Bad, Context, Row, describe, parse_object, table_from_topic
from .registry import BODY_HOOKS, decode_value
from .wrappers import unwrap


def decode_body(body: bytes, ctx: Context) -> list[Row]:
    """Decode one message body. Raises :class:`Bad`; never anything else for any bytes."""
    try:
        return _decode_body(body, ctx)
    except Bad:
        raise
    except RecursionError:
        raise Bad("JSON nested too deep") from None
    except MemoryError:
        raise Bad("message too large to decode") from None
    except Exception as exc:  # noqa: BLE001 - a decoder bug must cost one message, not the stream
        raise Bad(f"could not decode message ({type(exc).__name__}: {exc})") from None


def _decode_body(body: bytes, ctx: Context) -> list[Row]:
    if not body.strip(WS):
        if not body and ctx.envelope in ("auto", "debezium"):
            # Debezium's tombstone after a delete (a null Kafka value) reaches Pub/Sub as no data.
            return [Row("tombstone", "debezium")]
        raise Bad("empty message body")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Bad(f"invalid UTF-8 at byte {exc.start}") from None
    for hook in BODY_HOOKS:
        rows = hook(body, ctx.envelope, ctx)
        if rows is not None:
            return rows
    if body.lstrip(WS)[:1] != b"{":
        what = describe(body)
        hint = " (format=csv bodies need envelope='csv' and a row_schema)" if what == "invalid JSON" else ""
        raise Bad(f"message is {what}, not a changefeed envelope (a JSON object or key array){hint}")
    top = parse_object(body, "message")
    unwrapped = unwrap(top, body, ctx)
    if isinstance(unwrapped, list):
        return unwrapped
    rows = decode_value(unwrapped.value, unwrapped.raw, ctx, ctx.envelope)
    for row in rows:
        if unwrapped.key is not None:
            row.key = unwrapped.key
        if unwrapped.topic is not None:
            row.topic = unwrapped.topic
        if row.table_name is None:
            row.table_name = table_from_topic(row.topic)
    return rows
