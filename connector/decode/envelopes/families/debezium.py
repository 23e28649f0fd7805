"""``envelope=debezium``: Debezium change events and the other events of a Debezium topic.

Those are change events (PostgreSQL, TiCDC, ...), their transaction metadata events, schema-change
(DDL) events, logical messages, TiCDC watermarks and tombstones.

The fast path takes change events as Debezium's JSON converter writes them (compact), with schemas
off or on (``{"schema": ..., "payload": ...}``, also TiCDC's ``{"payload": ...}``), whole batches at a
time (learned layouts, see :mod:`crdb_pubsub.decode.passes`).
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...columns import OBJ_START, raw_column
from ...hlc import MAX_MICROS
from ...layouts import COMPACT, COMPACT_SCHEMA, COMPACT_STYLE
from ...matching import Matched, nested
from ...passes import LearnedFast
from ...rowcolumns import NULL_STR, image, micros_array, per_distinct, row_columns
from ..common import (
    Bad,
    Context,
    Row,
    convert,
    int_field,
    object_or_null,
    op_from_images,
    parse_object,
    schema_name,
    string_field,
)
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
    return "status" in d and "id" in d and set(d) <= _TRANSACTION_KEYS and d["status"] in (b'"BEGIN"', b'"END"')


def _event_us(d: dict[str, bytes]) -> int | None:
    """Return a Debezium event time: ``ts_us``, else ``ts_ms``; 0 (or absent) means none."""
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


# -- the fast path -----------------------------------------------------------------------------------

_FAST_KEYS = frozenset(("before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"))
_READS = frozenset(("before", "after", "source", "op", "ts_ms"))  # ts_us, ts_ns and transaction: not read
# Not pa.array, which imports pandas (see rowcolumns.NULL_STR).
_OP_TEXT = raw_column([b'"c"', b'"u"', b'"d"', b'"r"', b'"t"'])[0]


def _accept(keys: tuple[str, ...]) -> bool:
    return "op" in keys and "ts_ms" in keys and _FAST_KEYS.issuperset(keys)


def _fast_rows(g: Matched, bodies: list[bytes]) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """(ok mask, output columns) of Debezium events of one proven layout (see LearnedFast.build)."""
    m = len(g.idx)
    value = {k: g.col(k, m) for k in _READS}
    op = value["op"]
    bad = ~pc.is_in(op.arr, value_set=_OP_TEXT).to_numpy(zero_copy_only=False)
    after_ok, _, after = image(value["after"])
    before_ok, _, before = image(value["before"])
    bad |= ~after_ok | ~before_ok
    src = value["source"]
    bad |= ~src.starts(b"{n")
    src_obj = src.present & (src.first == OBJ_START)
    src_ok, sf = nested(g.values["source"] if src.present.any() else [b""] * m, src_obj, COMPACT_STYLE,
                        lambda keys: True, ("table", "commit_ts", "ts_us", "ts_ms", "origin"), src)  # fmt: skip
    bad |= src_obj & ~src_ok
    table_col = sf["table"]
    table_str = table_col.present & (table_col.first == ord('"'))
    plain = table_col.plain_string()
    bad |= table_str & ~plain
    table = pc.if_else(pa.array(table_str & plain), table_col.unquoted(), NULL_STR)
    table = pc.if_else(pc.equal(table, ""), NULL_STR, table)
    if g.frame is not None and g.frame.payload:
        # {"schema": S, "payload": <this>}: S must read (no repeated key); under envelope=auto the
        # general path calls the payload enriched when S is named "cockroachdb.envelope", or when S
        # has no name and the source's origin is "cockroachdb".
        sok, names = (np.ones(m, dtype=bool), [None] * m) if g.schema is None else per_distinct(g.schema, schema_name)
        bad |= ~sok
        if g.envelope == "auto":
            origin = pc.fill_null(pc.equal(sf["origin"].arr, '"cockroachdb"'), False).to_numpy(zero_copy_only=False)
            named = np.fromiter((n is not None for n in names), dtype=bool, count=m)
            crdb = np.fromiter((n == "cockroachdb.envelope" for n in names), dtype=bool, count=m)
            bad |= crdb | (~named & src_obj & origin)

    # commit_time exactly as the general path: TiCDC commit_ts, else source ts_us / ts_ms, else ts_ms
    # when the source has no time at all.
    commit_ts, has_cts, u1 = sf["commit_ts"].ints()
    us, has_us, u2 = sf["ts_us"].ints()
    ms, has_ms, u3 = sf["ts_ms"].ints()
    top_ms, has_top, u4 = value["ts_ms"].ints()
    bad |= u1 | u2 | u3 | u4
    micros = np.zeros(m, dtype=np.int64)
    known = np.zeros(m, dtype=bool)
    use_cts = has_cts & (commit_ts >= 0)
    micros = np.where(use_cts, (commit_ts >> 18) * 1000, micros)
    known |= use_cts
    rest = ~use_cts
    use_us = rest & has_us & (us > 0)
    micros = np.where(use_us, us, micros)
    known |= use_us
    rest &= ~use_us
    ms_fits = ms <= MAX_MICROS // 1000
    use_ms = rest & has_ms & (ms > 0)
    micros = np.where(use_ms & ms_fits, ms * np.where(ms_fits, 1000, 0), micros)
    known |= use_ms & ms_fits
    rest &= ~use_ms
    top_fits = top_ms <= MAX_MICROS // 1000
    # A source that names its time as 0 (a snapshot read) has none: not the processing time.
    use_top = rest & ~has_us & ~has_ms & has_top & (top_ms >= 0)
    micros = np.where(use_top & top_fits, top_ms * np.where(top_fits, 1000, 0), micros)
    known |= use_top & top_fits
    bad |= g.utf8_bad()
    cols = row_columns(
        m,
        "debezium",
        src,
        src_obj,
        op=op.unquoted(),
        before=before,
        after=after,
        table=table,
        commit=micros_array(micros, known),
    )
    return ~bad, cols


FAMILY = Family(
    order=70, names=("debezium",), claims=_claims, decode=_decode,
    fast=LearnedFast(envelopes=("auto", "debezium"), frames=(COMPACT, COMPACT_SCHEMA), accept=_accept,
                     build=_fast_rows, reads=_READS),
)  # fmt: skip
