"""``envelope=debezium``: Debezium change events (PostgreSQL, TiCDC, ...), their transaction
metadata events, schema-change (DDL) events, logical messages, TiCDC watermarks and tombstones."""

from __future__ import annotations

import msgspec

from ...hlc import MAX_MICROS
from ..common import Bad, Context, Row, convert, int_field, object_or_null, op_from_images, parse_object
from ..common import string_field
from ..registry import Family

_OPS = frozenset(("c", "u", "d", "r", "t", "m"))
_KEYS = frozenset((
    "before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction", "message",
    "databaseName", "schemaName", "ddl", "tableChanges",
))  # fmt: skip
_TRANSACTION_KEYS = frozenset(("status", "id", "event_count", "data_collections", "ts_ms", "ts_us", "ts_ns"))


def tombstone_row() -> Row:
    """Debezium's tombstone after a delete (a null Kafka value)."""
    return Row("tombstone", "debezium")


def is_transaction(d: dict[str, bytes]) -> bool:
    """Debezium's transaction metadata event (BEGIN/END of a source transaction)."""
    return ("status" in d and "id" in d and set(d) <= _TRANSACTION_KEYS
            and d["status"] in (b'"BEGIN"', b'"END"'))


def _event_us(d: dict[str, bytes]) -> int | None:
    """A Debezium event time: ``ts_us``, else ``ts_ms``; 0 (or absent) means none."""
    us = int_field(d, "ts_us")
    if us is not None and us > 0:
        return us
    ms = int_field(d, "ts_ms")
    return ms * 1000 if ms is not None and ms > 0 else None


def transaction_row(d: dict[str, bytes], raw: bytes) -> Row:
    row = Row("transaction", "debezium")
    row.source = raw.decode()
    row.commit_us = _event_us(d)
    if row.commit_us is not None and not 0 <= row.commit_us <= MAX_MICROS:
        row.commit_us = None
    return row


def debezium_row(p: dict[str, bytes], raw: bytes, ctx: Context) -> Row:
    source_raw = object_or_null(p, "source", "payload.")
    source = parse_object(source_raw, "`source`") if source_raw is not None else {}
    op = p.get("op")
    op_text = None
    if op is not None and op != b"null":
        op_text = string_field(p, "op", "payload.")
        if op_text not in _OPS:
            raise Bad(f"Debezium `op` must be one of c, u, d, r, t, m; got {op_text!r}")
    commit_ts = int_field(source, "commit_ts")
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
        if row.commit_us is None and int_field(source, "ts_us") is None and int_field(source, "ts_ms") is None:
            ms = int_field(p, "ts_ms")
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
    after = object_or_null(p, "after", "payload.")
    before = object_or_null(p, "before", "payload.")
    if op_text is None:
        if not ({"after", "before", "source"} & set(p)):
            # A Debezium *key* message: the payload holds only key columns.
            row.key = raw.decode()
            return row
        op_text = op_from_images(after, "before" in p, before)
    row.op = op_text
    row.after = convert(after, ctx, "after")
    row.before = convert(before, ctx, "before")
    return row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    if env == "debezium":
        return True
    return env == "auto" and (
        is_transaction(d) or (keys <= _KEYS and ("op" in d or "ddl" in d) and ("source" in d or "ts_ms" in d))
    )


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    if is_transaction(d):
        return [transaction_row(d, raw)]
    return [debezium_row(d, raw, ctx)]


FAMILY = Family(order=70, names=("debezium",), claims=_claims, decode=_decode)
