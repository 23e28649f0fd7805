"""The careful, general decoder: one Pub/Sub message body in, change rows (or a reason) out.

This path handles every envelope and every oddity; :mod:`crdb_pubsub.decode.decoder` only sends here the
messages its fast path could not prove canonical. Sub-objects are kept as ``msgspec.Raw`` so row
values keep the exact text CockroachDB sent (``26.30`` stays ``26.30``).

Everything wrong with a message raises :class:`Bad` with a reason naming the field and the problem;
the caller turns it into a malformed row (or drops it, or fails, by mode).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Callable

import msgspec
from msgspec import Raw

from .hlc import HLC, MAX_MICROS, hlc_to_micros
from .vocabulary import ENVELOPES

__all__ = ["Bad", "Row", "decode_body", "table_from_topic", "hlc_to_micros"]


_OBJ = msgspec.json.Decoder(dict[str, Raw])
_LIST = msgspec.json.Decoder(list[Raw])
_ANY = msgspec.json.Decoder()
_WS = b" \t\n\r"
_WRAPPED_KEYS = frozenset(("after", "before", "key", "topic", "updated", "mvcc_timestamp"))
_ENRICHED_KEYS = frozenset(("after", "before", "key", "op", "source", "ts_ns", "updated", "mvcc_timestamp", "topic"))
_ENRICHED_OPS = frozenset(("c", "u", "d", "r"))
_DEBEZIUM_OPS = frozenset(("c", "u", "d", "r", "t", "m"))
_DEBEZIUM_KEYS = frozenset((
    "before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction", "message",
    "databaseName", "schemaName", "ddl", "tableChanges",
))  # fmt: skip
_V2_KEYS = frozenset(("Key", "Value", "Topic"))
_LEGACY_KEYS = frozenset(("key", "value", "topic"))


class Bad(Exception):
    """The message cannot be decoded; ``str(exc)`` says which field and why."""


class Row:
    """One decoded change row, before it becomes Arrow columns."""

    __slots__ = (
        "kind", "envelope", "topic", "table_name", "key", "op", "before", "after",
        "updated", "mvcc_timestamp", "commit_us", "resolved", "source",
    )  # fmt: skip

    def __init__(self, kind: str, envelope: str) -> None:
        self.kind = kind
        self.envelope = envelope
        self.topic: str | None = None
        self.table_name: str | None = None
        self.key: str | None = None
        self.op: str | None = None
        self.before: bytes | None = None  # exact JSON text; None is SQL NULL (absent or JSON null)
        self.after: bytes | None = None
        self.updated: str | None = None
        self.mvcc_timestamp: str | None = None
        self.commit_us: int | None = None
        self.resolved: str | None = None
        self.source: str | None = None


# -- small helpers ---------------------------------------------------------------------------------


def _kind(raw: bytes) -> str:
    c = raw[:1]
    return {b"{": "object", b"[": "array", b'"': "string", b"t": "boolean", b"f": "boolean", b"n": "null"}.get(
        c, "number"
    )


def _nonws(buf: bytes) -> int:
    return len(buf.translate(None, _WS))


def parse_object(buf: bytes, what: str) -> dict[str, bytes]:
    """Decode a JSON object into {key: exact value bytes}, rejecting duplicate keys.

    Duplicate keys are ambiguous (JSON parsers disagree on which wins), so at the envelope level
    they make the message malformed. msgspec keeps the last one silently; we detect the loss by
    counting non-whitespace bytes: the object's own bytes must equal its punctuation plus its keys
    (re-encoded minimally) plus its values. Escaped keys also differ, and get an exact re-check.
    """
    try:
        decoded = _OBJ.decode(buf)
    except RecursionError:
        raise Bad(f"{what}: JSON nested too deep") from None
    except msgspec.ValidationError:
        raise Bad(f"{what} must be a JSON object, got {_describe(buf)}") from None
    except (msgspec.DecodeError, ValueError) as exc:
        raise Bad(f"{what}: invalid JSON ({exc})") from None
    out = {k: bytes(v) for k, v in decoded.items()}
    expected = 2 + max(len(out) - 1, 0) + sum(
        _nonws(msgspec.json.encode(k)) + 1 + _nonws(v) for k, v in out.items()
    )
    if expected != _nonws(bytes(buf)):
        dup = _duplicate_key(bytes(buf))
        if dup is not None:
            raise Bad(f"{what}: duplicate key {dup!r} (ambiguous)")
    return out


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:]', re.S)


def _duplicate_key(buf: bytes) -> str | None:
    """Exact (slow) check: the first key that appears twice at the top level of ``buf``."""
    depth = 0
    seen: set[str] = set()
    previous: bytes | None = None
    for m in _TOKENS.finditer(buf):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
        elif tok == b":" and depth == 1 and previous is not None:
            key = msgspec.json.decode(previous, type=str)
            if key in seen:
                return key
            seen.add(key)
        previous = tok if tok[:1] == b'"' else None
    return None


def _describe(buf: bytes) -> str:
    stripped = bytes(buf).strip(_WS)
    if not stripped:
        return "nothing"
    try:
        _ANY.decode(stripped)
    except RecursionError:
        return "JSON nested too deep"
    except Exception:
        return "invalid JSON"
    return f"a JSON {_kind(stripped)}"


def _string(d: dict[str, bytes], name: str, where: str) -> str | None:
    raw = d.get(name)
    if raw is None:
        return None
    if raw[:1] != b'"':
        raise Bad(f"{where}`{name}` must be a string, got {_kind(raw)} {_short(raw)}")
    return msgspec.json.decode(raw, type=str)


def _short(raw: bytes, limit: int = 40) -> str:
    text = raw.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "..."


def _hlc(d: dict[str, bytes], name: str, where: str) -> str | None:
    value = _string(d, name, where)
    if value is not None and not HLC.match(value):
        raise Bad(f"{where}`{name}` must be an HLC timestamp like \"1701102296662969433.0000000000\", got {value!r}")
    return value


def _object_or_null(d: dict[str, bytes], name: str, where: str) -> bytes | None:
    raw = d.get(name)
    if raw is None or raw == b"null":
        return None
    if raw[:1] != b"{":
        raise Bad(f"{where}`{name}` must be an object or null, got {_kind(raw)} {_short(raw)}")
    return raw


def _key_text(raw: bytes | None, where: str) -> str | None:
    if raw is None or raw == b"null":
        return None
    if raw[:1] not in (b"[", b"{"):
        raise Bad(f"{where} must be a JSON array or object, got {_kind(raw)} {_short(raw)}")
    return raw.decode("utf-8")


def table_from_topic(topic: str | None) -> str | None:
    """The table a CockroachDB topic names.

    ``table`` -> table; ``table.family`` (column families) -> table; ``db.schema.table`` and
    ``db.schema.table.family`` (full_table_name) -> table. A custom ``topic_name`` is returned
    as is when it has no dot (we cannot know the table behind it).
    """
    if not topic:
        return topic or None
    parts = topic.split(".")
    if len(parts) == 1:
        return topic
    if len(parts) == 2:
        return parts[0]
    return parts[2]


def _int_field(d: dict[str, bytes], name: str) -> int | None:
    raw = d.get(name)
    if raw is None or not re.fullmatch(rb"-?[0-9]+", raw):
        return None
    return int(raw)


# -- the decoder -----------------------------------------------------------------------------------


class Context:
    """Per-call settings for the general decoder."""

    __slots__ = ("envelope", "convert", "csv_convert")

    def __init__(
        self,
        envelope: str,
        convert: Callable[[bytes], Any] | None = None,
        csv_convert: Callable[[list[str]], dict] | None = None,
    ) -> None:
        self.envelope = envelope
        self.convert = convert
        self.csv_convert = csv_convert


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
    except Exception as exc:  # a decoder bug must cost one message, not the stream
        raise Bad(f"could not decode message ({type(exc).__name__}: {exc})") from None


def _decode_body(body: bytes, ctx: Context) -> list[Row]:
    if not body.strip(_WS):
        if not body and ctx.envelope in ("auto", "debezium"):
            # Debezium's tombstone after a delete (a null Kafka value) reaches Pub/Sub as no data.
            return [Row("tombstone", "debezium")]
        raise Bad("empty message body")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Bad(f"invalid UTF-8 at byte {exc.start}") from None
    if ctx.envelope == "csv":
        return [_csv(text, ctx)]
    first = body.lstrip(_WS)[:1]
    if first == b"[":
        if ctx.envelope not in ("auto", "key_only"):
            raise Bad(f"envelope={ctx.envelope} expects a JSON object, got a JSON array")
        return [_key_only(body)]
    if first != b"{":
        what = _describe(body)
        hint = " (format=csv bodies need envelope='csv' and a row_schema)" if what == "invalid JSON" else ""
        raise Bad(f"message is {what}, not a changefeed envelope (a JSON object or key array){hint}")
    top = parse_object(body, "message")
    if ctx.envelope == "key_only":
        raise Bad("envelope=key_only expects a JSON array, got a JSON object")

    wrapper_key: bytes | None = None
    wrapper_topic: str | None = None
    value = top
    value_raw = body
    if not _V2_KEYS.isdisjoint(top):
        extra = sorted(set(top) - _V2_KEYS)
        if extra:
            raise Bad(f"Pub/Sub wrapper {{Key, Value, Topic}} has unexpected field(s) {', '.join(extra)}")
        if "Value" not in top:
            raise Bad("Pub/Sub wrapper {Key, Value, Topic} is missing `Value`")
        wrapper_topic = _string(top, "Topic", "Pub/Sub wrapper ")
        wrapper_key = top.get("Key")
        value_raw = top["Value"]
        if value_raw[:1] != b"{":
            raise Bad(f"Pub/Sub wrapper `Value` must be a JSON object, got {_kind(value_raw)} {_short(value_raw)}")
        value = parse_object(value_raw, "`Value`")
    elif (
        "value" in top
        and set(top) <= _LEGACY_KEYS
        and top["value"][:1] == b"{"
        and ctx.envelope not in ("row", "bare")
    ):
        wrapper_topic = _string(top, "topic", "legacy Pub/Sub wrapper ")
        wrapper_key = top.get("key")
        value_raw = top["value"]
        value = parse_object(value_raw, "`value`")
    elif set(top) == {"key", "table", "value"} and top["key"][:1] == b'"' and ctx.envelope not in ("row", "bare"):
        return _sinkless(top, ctx)

    if wrapper_key is not None:
        key = _key_text(wrapper_key, "Pub/Sub wrapper `Key`")
        # With enriched_properties=schema the key carries its own {payload, schema}.
        if key is not None and wrapper_key[:1] == b"{":
            kobj = parse_object(wrapper_key, "Pub/Sub wrapper `Key`")
            if set(kobj) == {"payload", "schema"}:
                key = _key_text(kobj["payload"], "Pub/Sub wrapper `Key.payload`")
    else:
        key = None
    rows = _value(value, value_raw, ctx, ctx.envelope)
    for row in rows:
        if key is not None:
            row.key = key
        if wrapper_topic is not None:
            row.topic = wrapper_topic
        if row.table_name is None:
            row.table_name = table_from_topic(row.topic)
    return rows


def _value(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    """Decode a CockroachDB (or Debezium) value object under envelope ``env`` (or auto)."""
    keys = set(d)
    if keys == {"resolved"} and env in ("auto", "wrapped", "enriched", "webhook"):
        return [_resolved(d, "wrapped" if env == "auto" else env, "")]
    if "__crdb__" in d and env in ("auto", "bare", "row"):
        meta = parse_object(d["__crdb__"], "`__crdb__`") if d["__crdb__"][:1] == b"{" else None
        if meta is None:
            raise Bad(f"`__crdb__` must be an object, got {_kind(d['__crdb__'])}")
        if "resolved" in meta:
            if len(d) != 1 or len(meta) != 1:
                raise Bad("`__crdb__.resolved` must come alone (a resolved message has no row)")
            return [_resolved(meta, "bare" if env == "auto" else env, "__crdb__.")]
        row = _bare(d, meta, "bare" if env == "auto" else env)
        row.after = _convert(row.after, ctx, "after")
        return [row]
    if "payload" in d and d["payload"][:1] == b"[" and env in ("auto", "webhook"):
        return _webhook(d, ctx)
    if "payload" in d and keys <= {"payload", "schema"} and env in ("auto", "enriched", "debezium"):
        payload_raw = d["payload"]
        if payload_raw == b"null" and d.get("schema", b"null") == b"null" and env != "enriched":
            return [Row("tombstone", "debezium")]
        if payload_raw[:1] != b"{":
            raise Bad(f"`payload` must be an object, got {_kind(payload_raw)} {_short(payload_raw)}")
        payload = parse_object(payload_raw, "`payload`")
        schema_name = None
        if "schema" in d and d["schema"][:1] == b"{":
            schema = parse_object(d["schema"], "`schema`")
            schema_name = _string(schema, "name", "`schema.`") if schema.get("name", b"")[:1] == b'"' else None
        if env != "enriched" and _is_transaction(payload):
            return [_transaction(payload, payload_raw)]
        if env == "enriched" or (env == "auto" and _is_enriched(payload, schema_name)):
            if set(payload) == {"resolved"}:
                return [_resolved(payload, "enriched", "payload.")]
            return [_enriched(payload, ctx)]
        return [_debezium(payload, payload_raw, ctx)]
    if env in ("auto", "debezium") and _is_transaction(d):
        return [_transaction(d, raw)]
    if env == "enriched" or (env == "auto" and "op" in d and keys <= _ENRICHED_KEYS and _is_enriched(d, None)):
        return [_enriched(d, ctx)]
    if env == "debezium" or (
        env == "auto"
        and keys <= _DEBEZIUM_KEYS
        and ("op" in d or "ddl" in d)
        and ("source" in d or "ts_ms" in d)
    ):
        return [_debezium(d, raw, ctx)]
    if env in ("auto", "wrapped") and "after" in d and keys <= _WRAPPED_KEYS:
        return [_wrapped(d, ctx)]
    if env == "wrapped":
        if "after" not in d:
            raise Bad("envelope=wrapped: the value has no `after` field")
        raise Bad(f"envelope=wrapped: unexpected field(s) {', '.join(sorted(keys - _WRAPPED_KEYS))}")
    if env == "webhook":
        raise Bad("envelope=webhook expects {\"payload\": [...], \"length\": n}")
    if env in ("auto", "row", "bare"):
        row = Row("row", "row" if env == "auto" else env)
        row.after = _convert(raw, ctx, "after")
        row.op = "u"
        return [row]
    raise Bad(f"envelope={env}: the message does not have that shape")


def _is_enriched(payload: dict[str, bytes], schema_name: str | None) -> bool:
    if schema_name is not None:
        return schema_name == "cockroachdb.envelope"
    src = payload.get("source")
    if src is not None and src[:1] == b"{":
        origin = parse_object(src, "`source`").get("origin")
        return origin == b'"cockroachdb"'
    # Debezium always names ts_ms; CockroachDB's enriched envelope has ts_ns and never ts_ms.
    return "ts_ms" not in payload and ("ts_ns" in payload or "op" in payload) and "ddl" not in payload


def _convert(raw: bytes | None, ctx: Context, where: str) -> Any:
    if raw is None or ctx.convert is None:
        return raw
    from .typed import TypedError

    try:
        return ctx.convert(raw)
    except TypedError as exc:
        raise Bad(f"{where}: {exc}") from None
    except RecursionError:
        raise Bad(f"{where}: JSON nested too deep") from None
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise Bad(f"{where}: {exc}") from None


def _resolved(d: dict[str, bytes], envelope: str, where: str) -> Row:
    value = _hlc(d, "resolved", where)
    if value is None:
        raise Bad(f"`{where}resolved` must be an HLC string, got null")
    row = Row("resolved", envelope)
    row.resolved = value
    row.commit_us = hlc_to_micros(value)
    return row


def _ops_from(after: bytes | None, before_present: bool, before: bytes | None) -> str:
    if after is None:
        return "d"
    if before_present:
        return "c" if before is None else "u"
    return "u"


def _with_commit_time(row: Row) -> Row:
    """commit_time from the row's HLC: ``updated`` when present, else ``mvcc_timestamp``."""
    stamp = row.updated or row.mvcc_timestamp
    row.commit_us = hlc_to_micros(stamp) if stamp else None
    return row


def _fill_images_and_meta(row: Row, d: dict[str, bytes], ctx: Context) -> tuple[bytes | None, bytes | None]:
    """The fields wrapped and enriched values share: row images, key, topic and HLC timestamps.

    Returns the raw ``after``/``before`` so the caller can derive the op from them.
    """
    after = _object_or_null(d, "after", "")
    before = _object_or_null(d, "before", "")
    row.after = _convert(after, ctx, "after")
    row.before = _convert(before, ctx, "before")
    row.key = _key_text(d.get("key"), "`key`")
    row.topic = _string(d, "topic", "")
    row.updated = _hlc(d, "updated", "")
    row.mvcc_timestamp = _hlc(d, "mvcc_timestamp", "")
    return after, before


def _wrapped(d: dict[str, bytes], ctx: Context) -> Row:
    row = Row("row", "wrapped")
    after, before = _fill_images_and_meta(row, d, ctx)
    row.op = _ops_from(after, "before" in d, before)
    return _with_commit_time(row)


def _bare(d: dict[str, bytes], meta: dict[str, bytes], envelope: str) -> Row:
    row = Row("row", envelope)
    # The row is the top-level object minus __crdb__: rebuilt with CockroachDB's own ", "/": "
    # separators around each value's exact text, so a CockroachDB message comes out byte-identical.
    parts = [f"{msgspec.json.encode(k).decode()}: {v.decode()}" for k, v in d.items() if k != "__crdb__"]
    row.after = ("{" + ", ".join(parts) + "}").encode()
    row.op = "u"
    row.key = _key_text(meta.get("key"), "`__crdb__.key`")
    row.topic = _string(meta, "topic", "__crdb__.")
    row.updated = _hlc(meta, "updated", "__crdb__.")
    row.mvcc_timestamp = _hlc(meta, "mvcc_timestamp", "__crdb__.")
    return _with_commit_time(row)


def _webhook(d: dict[str, bytes], ctx: Context) -> list[Row]:
    extra = set(d) - {"payload", "length"}
    if extra:
        raise Bad(f"webhook batch has unexpected field(s) {', '.join(sorted(extra))}")
    if "length" not in d:
        raise Bad("webhook batch is missing `length`")
    length = d["length"]
    if not re.fullmatch(rb"[0-9]+", length):
        raise Bad(f"webhook batch `length` must be a non-negative integer, got {_short(length)}")
    try:
        events = _LIST.decode(d["payload"])
    except RecursionError:
        raise Bad("webhook batch `payload`: JSON nested too deep") from None
    if int(length) != len(events):
        raise Bad(f"webhook batch `length` is {int(length)} but `payload` holds {len(events)} events")
    rows: list[Row] = []
    for i, event in enumerate(events):
        event = bytes(event)
        where = f"webhook event {i}"
        if event[:1] != b"{":
            raise Bad(f"{where} must be a JSON object, got {_kind(event)}")
        obj = parse_object(event, where)
        try:
            out = _value(obj, event, ctx, "auto")
        except Bad as exc:
            raise Bad(f"{where}: {exc}") from None
        for row in out:
            if row.kind == "row" and row.envelope == "wrapped":
                row.envelope = "webhook"
            if row.table_name is None:
                row.table_name = table_from_topic(row.topic)
        rows.extend(out)
    return rows


def _enriched(d: dict[str, bytes], ctx: Context) -> Row:
    extra = set(d) - _ENRICHED_KEYS
    if extra:
        raise Bad(f"enriched envelope has unexpected field(s) {', '.join(sorted(extra))}")
    row = Row("row", "enriched")
    op = _string(d, "op", "")
    if op is None:
        raise Bad("enriched envelope is missing `op`")
    if op not in _ENRICHED_OPS:
        raise Bad(f"enriched `op` must be one of c, u, d, r; got {op!r}")
    row.op = op
    _fill_images_and_meta(row, d, ctx)
    source_raw = _object_or_null(d, "source", "")
    source: dict[str, bytes] = {}
    if source_raw is not None:
        row.source = source_raw.decode()
        source = parse_object(source_raw, "`source`")
        row.table_name = _string(source, "table_name", "source.") or None
        row.updated = row.updated or _hlc(source, "ts_hlc", "source.")
        row.mvcc_timestamp = row.mvcc_timestamp or _hlc(source, "mvcc_timestamp", "source.")
    if "ts_ns" in d and _int_field(d, "ts_ns") is None:
        raise Bad(f"enriched `ts_ns` must be an integer, got {_short(d['ts_ns'])}")
    stamp = row.updated or row.mvcc_timestamp
    if stamp:
        row.commit_us = hlc_to_micros(stamp)
    else:
        # source.ts_ns is the commit time; a top-level ts_ns alone is when the changefeed emitted the row.
        ns = _int_field(source, "ts_ns") if source else None
        if ns is None:
            ns = _int_field(d, "ts_ns")
        row.commit_us = ns // 1000 if ns is not None and 0 <= ns // 1000 <= MAX_MICROS else None
    return row


_TRANSACTION_KEYS = frozenset(("status", "id", "event_count", "data_collections", "ts_ms", "ts_us", "ts_ns"))


def _is_transaction(d: dict[str, bytes]) -> bool:
    """Debezium's transaction metadata event (BEGIN/END of a source transaction)."""
    return ("status" in d and "id" in d and set(d) <= _TRANSACTION_KEYS
            and d["status"] in (b'"BEGIN"', b'"END"'))


def _event_us(d: dict[str, bytes]) -> int | None:
    """A Debezium event time: ``ts_us``, else ``ts_ms``; 0 (or absent) means none."""
    us = _int_field(d, "ts_us")
    if us is not None and us > 0:
        return us
    ms = _int_field(d, "ts_ms")
    return ms * 1000 if ms is not None and ms > 0 else None


def _transaction(d: dict[str, bytes], raw: bytes) -> Row:
    row = Row("transaction", "debezium")
    row.source = raw.decode()
    row.commit_us = _event_us(d)
    if row.commit_us is not None and not 0 <= row.commit_us <= MAX_MICROS:
        row.commit_us = None
    return row


def _debezium(p: dict[str, bytes], raw: bytes, ctx: Context) -> Row:
    source_raw = _object_or_null(p, "source", "payload.")
    source = parse_object(source_raw, "`source`") if source_raw is not None else {}
    op = p.get("op")
    op_text = None
    if op is not None and op != b"null":
        op_text = _string(p, "op", "payload.")
        if op_text not in _DEBEZIUM_OPS:
            raise Bad(f"Debezium `op` must be one of c, u, d, r, t, m; got {op_text!r}")
    commit_ts = _int_field(source, "commit_ts")
    row = Row("row", "debezium")
    row.source = source_raw.decode() if source_raw is not None else None
    table = source.get("table")
    if table is not None and table[:1] == b'"':
        row.table_name = msgspec.json.decode(table, type=str) or None
    # TiCDC's commit_ts is a TSO (physical ms << 18); otherwise the source's own event time when
    # the connector filled it in (0 means unknown), else when the connector processed the event.
    if commit_ts is not None and commit_ts >= 0:
        row.commit_us = (commit_ts >> 18) * 1000
    else:
        row.commit_us = _event_us(source)
        if row.commit_us is None and _int_field(source, "ts_us") is None and _int_field(source, "ts_ms") is None:
            ms = _int_field(p, "ts_ms")
            row.commit_us = ms * 1000 if ms is not None and ms >= 0 else None
        # else the source names its time as 0 (a snapshot read): unknown, not the processing time
    if row.commit_us is not None and not 0 <= row.commit_us <= MAX_MICROS:
        row.commit_us = None
    if "ddl" in p or "tableChanges" in p:
        row.kind = "ddl"
        row.after = None if ctx.convert is not None else raw
        return row
    if op_text == "m":
        row.op = "m"
        if "message" in p:
            row.kind = "message"
            msg = p["message"]
            row.after = None if ctx.convert is not None or msg == b"null" else msg
        else:
            row.kind = "watermark"
            if commit_ts is None:
                raise Bad("Debezium op m without `message` must be a TiCDC watermark with `source.commit_ts`")
            row.resolved = str(commit_ts)
        return row
    after = _object_or_null(p, "after", "payload.")
    before = _object_or_null(p, "before", "payload.")
    if op_text is None:
        if not ({"after", "before", "source"} & set(p)):
            # A Debezium *key* message: the payload holds only key columns.
            row.key = raw.decode()
            return row
        op_text = _ops_from(after, "before" in p, before)
    row.op = op_text
    row.after = _convert(after, ctx, "after")
    row.before = _convert(before, ctx, "before")
    return row


def _key_only(body: bytes) -> Row:
    try:
        items = _LIST.decode(body)
    except RecursionError:
        raise Bad("JSON nested too deep") from None
    except (msgspec.DecodeError, ValueError) as exc:
        raise Bad(f"invalid JSON ({exc})") from None
    if not items:
        raise Bad("an empty JSON array is not a primary key")
    for i, item in enumerate(items):
        kind = _kind(bytes(item))
        if kind in ("object", "array", "null"):
            raise Bad(f"a JSON array whose element {i} is {kind} is not a primary key (key_only holds scalars)")
    row = Row("row", "key_only")
    row.key = body.strip(_WS).decode()
    return row


def _sinkless(top: dict[str, bytes], ctx: Context) -> list[Row]:
    # The sinkless changefeed's SQL result row (table, key, value) rendered as JSON: key and value
    # are strings holding CockroachDB's JSON text.
    key_text = msgspec.json.decode(top["key"], type=str)
    table = _string(top, "table", "")
    value = top["value"]
    if value[:1] != b'"':
        raise Bad(f"sinkless row `value` must be a string, got {_kind(value)}")
    value_text = msgspec.json.decode(value, type=str)
    key_bytes = key_text.encode()
    if key_bytes.lstrip(_WS)[:1] != b"[":
        raise Bad(f"sinkless row `key` must hold a JSON array, got {key_text[:40]!r}")
    key_row = _key_only(key_bytes)
    if value_text == "":
        rows = [key_row]
    else:
        inner = value_text.encode()
        rows = _value(parse_object(inner, "sinkless row `value`"), inner, ctx, ctx.envelope)
    for row in rows:
        row.key = key_row.key
        row.topic = table
        row.table_name = table_from_topic(table)
    return rows


def _csv(text: str, ctx: Context) -> Row:
    assert ctx.csv_convert is not None
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as exc:
        raise Bad(f"invalid CSV ({exc})") from None
    if len(records) != 1:
        raise Bad(f"a CSV message must hold one record, got {len(records)}")
    from .typed import TypedError

    row = Row("row", "csv")
    try:
        row.after = ctx.csv_convert(records[0])
    except TypedError as exc:
        raise Bad(f"after: {exc}") from None
    row.op = "r"
    return row
