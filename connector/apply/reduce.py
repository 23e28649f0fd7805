"""One micro-batch reduced to the latest change per key (per key and column family), typed.

Pure Python and Arrow: no Spark, no Delta. :mod:`crdb_pubsub.apply.delta` merges the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..decode.envelopes import table_from_topic
from .hlc import DELETE_RANK, order_key, parse_hlc
from .keys import debezium_key
from .positions import Refused, debezium_position
from .schemas import BATCH, DELETED, HLC_COL, KEY, META_PREFIX, ORDER, SchemaChangeError, family_order_column

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["INPUT_COLUMNS", "OPTIONAL_COLUMNS", "BareDeleteError", "ProducerMixError", "TableBatch", "split_by_table"]

# What the apply helper reads of the source's columns (``data`` only for an enriched schema).
INPUT_COLUMNS = (
    "kind",
    "envelope",
    "topic",
    "table_name",
    "key",
    "op",
    "after",
    "updated",
    "mvcc_timestamp",
    "message_id",
)
# Read when the batch has them: Debezium's and TiCDC's position (``source``), key (the ordering
# key, a ``key`` attribute), a delete's key columns (``before``) and why a message is malformed. A query that leaves them out of
# ``columns`` applies CockroachDB rows only.
OPTIONAL_COLUMNS = ("source", "before", "ordering_key", "attributes", "error")
_ROWS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_STR = msgspec.json.Decoder(str)
_BARE_OPS = {"insert": "c", "update": "u", "delete": "d", "upsert": "u"}


class BareDeleteError(ValueError):
    """Bare-envelope rows without an op column: a delete looks like an update with NULL columns."""


class ProducerMixError(ValueError):
    """One table's changes from two producers (CockroachDB, Debezium PostgreSQL, ...): their orders don't compare."""


@dataclasses.dataclass
class _Change:
    order: str
    after: str | None  # None for a delete
    message_id: str
    hlc: str
    debezium: bool = False  # its image is Debezium's JSON (see images.image_adapter)

    def rank(self) -> tuple[str, str, str]:
        # At equal (HLC, op) the greater after text, then the greater message id: any arrival
        # order of the same changes picks the same one.
        return (self.order, self.after or "", self.message_id or "")


@dataclasses.dataclass
class TableBatch:
    """One table's changes in a micro-batch, reduced.

    ``groups`` maps (key, family) to its candidates, best first (a candidate whose values do not
    fit the schema is skipped for the next).
    """

    table: str
    changes: int = 0
    malformed: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    families: bool = False
    groups: dict[tuple[str, str], list[_Change]] = dataclasses.field(default_factory=dict)
    producer: str | None = None
    truncate: _Change | None = None  # the latest truncate of the table in the batch (Debezium op t)

    def produced_by(self, producer: str) -> None:
        if self.producer is None:
            self.producer = producer
        elif self.producer != producer:
            raise ProducerMixError(
                f"table {self.table}: changes from {self.producer} and from {producer} in one table; their "
                "positions do not compare: one producer per table (route them to different table names)"
            )

    def add(self, key: str, family: str, change: _Change) -> None:
        group = self.groups.get((key, family))
        if group is None:
            self.groups[(key, family)] = [change]
        else:
            group.append(change)

    def bad(self, reason: str) -> None:
        self.malformed += 1
        if len(self.errors) < 5:
            self.errors.append(f"{self.table}: {reason}")


def _family(topic: str | None, table: str) -> str:
    """Return the column family a message belongs to ("" for none), read from its topic.

    ``split_column_families`` names topics ``table.family`` (``db.schema.table.family`` with
    ``full_table_name``). A topic that does not derive from the table (``topic_name=``) says nothing.
    """
    if not topic or table_from_topic(topic) != table:
        return ""
    parts = topic.split(".")
    if len(parts) == 2:
        return parts[1]
    if len(parts) == 4:
        return parts[3]
    return ""


def _bare_op(after: str, column: str) -> tuple[str | None, str | None]:
    """(op, after without the op column) of a bare row carrying ``event_op()`` as ``column``."""
    try:
        row = msgspec.json.decode(after, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        return None, f"after is not a JSON object ({exc})"
    raw = row.pop(column, None)
    if raw is None:
        return None, f"bare row has no `{column}` column (bare_op_column)"
    try:
        op = _BARE_OPS.get(_STR.decode(bytes(raw)).lower())
    except msgspec.DecodeError:
        op = None
    if op is None:
        return None, f"`{column}` is {bytes(raw).decode(errors='replace')}, not insert/update/delete"
    if op == "d":
        return "d", None
    return op, "{" + ", ".join(f"{msgspec.json.encode(k).decode()}: {bytes(v).decode()}" for k, v in row.items()) + "}"


def _column(batch: pa.Table, name: str) -> list[Any]:
    """Return a column as a Python list; an optional column the batch lacks reads as nulls."""
    if name in batch.column_names:
        return batch.column(name).to_pylist()
    return [None] * batch.num_rows


def _attributes(value: Any) -> dict[str, str] | None:
    """Return a Pub/Sub attributes map, as Arrow hands it to Python (a list of pairs) or as a dict."""
    if value is None or isinstance(value, dict):
        return value
    return dict(value)


def split_by_table(
    batch: pa.Table,
    *,
    bare_op_column: str | None = None,
    key_columns: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[str, TableBatch], int, int, list[str]]:
    """Reduce a batch of source rows: ``({table: TableBatch}, messages, malformed without a table, errors)``.

    Row changes without a usable HLC (Debezium, TiCDC: position) or key count as malformed for
    their table. Rows of the bare envelope need ``bare_op_column`` (see :class:`BareDeleteError`).
    ``key_columns`` names a table's key columns where the messages carry no key of their own
    (Debezium, TiCDC; see :mod:`crdb_pubsub.apply.keys`).
    """
    cols = {name: _column(batch, name) for name in (*INPUT_COLUMNS, *OPTIONAL_COLUMNS)}
    tables: dict[str, TableBatch] = {}
    orphan = 0
    errors: list[str] = []
    kinds, names = cols["kind"], cols["table_name"]
    for i, kind in enumerate(kinds):
        if kind not in ("row", "malformed"):
            continue  # resolved, ddl, watermark, message, transaction, tombstone: not changes
        table = names[i]
        if not table:
            orphan += 1
            if len(errors) < 5:
                errors.append(_no_table(kind, cols, i))
            continue
        tb = tables.get(table)
        if tb is None:
            tb = tables[table] = TableBatch(table)
        tb.changes += 1
        if kind == "malformed":
            tb.bad("a message that could not be decoded" + _why(cols, i))
            continue
        if cols["envelope"][i] == "debezium":
            _debezium_change(tb, cols, i, (key_columns or {}).get(table))
            continue
        tb.produced_by("cockroachdb")
        key = cols["key"][i]
        if key is None:
            tb.bad("a row change without a key")
            continue
        hlc_text = cols["updated"][i] or cols["mvcc_timestamp"][i]
        hlc = parse_hlc(hlc_text)
        if hlc is None:
            tb.bad(
                f"no usable HLC ({hlc_text!r}): create the changefeed WITH updated (or mvcc_timestamp)"
                if not hlc_text
                else f"unparseable HLC {hlc_text!r}"
            )
            continue
        after, op = cols["after"][i], cols["op"][i] or "u"
        if cols["envelope"][i] == "bare" and after is not None:
            if bare_op_column is None:
                raise BareDeleteError(
                    f"table {table}: rows in the bare envelope cannot tell a delete from an update (CockroachDB "
                    "sends a delete as the key with NULL columns). Create the changefeed with envelope=wrapped "
                    "(or enriched), or as a CDC query that selects event_op() as a column and pass that "
                    "column's name as bare_op_column="
                )
            op, after_or_err = _bare_op(after, bare_op_column)
            if op is None:
                tb.bad(after_or_err or "bad bare row")
                continue
            after = after_or_err
        if op == "d" or after is None:
            op, after = "d", None
        order = order_key(hlc, op)
        if order is None:
            tb.bad(f"HLC out of range {hlc_text!r}")
            continue
        family = _family(cols["topic"][i], table)
        if family:
            tb.families = True
        tb.add(key, family, _Change(order, after, cols["message_id"][i] or "", hlc_text))
    for tb in tables.values():
        if tb.families and any(f == "" for _, f in tb.groups):
            raise SchemaChangeError(
                f"table {tb.table}: some messages come from column-family topics "
                f"({tb.table}.<family>) and some not; one changefeed per table, please"
            )
        if tb.truncate is not None:
            drop_before(tb, tb.truncate.order)
        for group in tb.groups.values():
            if len(group) > 1:
                group.sort(key=_Change.rank, reverse=True)
    return tables, len(kinds), orphan, errors


def _no_table(kind: str, cols: Mapping[str, list[Any]], i: int) -> str:
    if kind == "malformed":
        return "a malformed message" + _why(cols, i)
    if cols["envelope"][i] == "debezium" and cols["op"][i] is None and cols["key"][i] is not None:
        return (
            "a Debezium key message (only key columns), not a change event: the record key belongs in the "
            "ordering key or a `key` attribute of its value's message"
        )
    return "a row change without a table name"


def _why(cols: Mapping[str, list[Any]], i: int) -> str:
    error = cols["error"][i]
    return f": {error}" if error else ""


def _debezium_change(tb: TableBatch, cols: Mapping[str, list[Any]], i: int, key_columns: Sequence[str] | None) -> None:
    """Add one Debezium or TiCDC change event (c, u, r, d; t truncates) to its table's batch."""
    op = cols["op"][i]
    try:
        position = debezium_position(cols["source"][i], op or "u")
        tb.produced_by(position.producer)
        change = _Change(position.order, None, cols["message_id"][i] or "", position.text, debezium=True)
        if op == "t":
            if tb.truncate is None or change.order > tb.truncate.order:
                tb.truncate = change
            return
        if op not in ("c", "u", "r", "d"):
            raise Refused(f"a Debezium change event must have op c, u, r, d or t, got {op!r}")
        after = None if op == "d" else cols["after"][i]
        if op != "d" and after is None:
            raise Refused(f"op {op} without `after`")
        image = after if after is not None else cols["before"][i]
        key = debezium_key(image, key_columns, _attributes(cols["attributes"][i]), cols["ordering_key"][i])
    except Refused as exc:
        tb.bad(str(exc))
        return
    change.after = after
    tb.add(key, "", change)


def settle_truncate(tb: TableBatch, mark: str | None) -> tuple[str, str] | None:
    """Weigh the batch against the state's latest truncate (``mark``, its order; None: none).

    The changes older than it are dropped (they lost to it); returns the (order, position) of the
    batch's own truncate when it is newer than the mark, the one the MERGE must apply.
    """
    if mark is not None:
        drop_before(tb, mark)
    if tb.truncate is None or (mark is not None and tb.truncate.order <= mark):
        return None
    return tb.truncate.order, tb.truncate.hlc


def needs_truncate_mark(tb: TableBatch) -> bool:
    """Whether the state's truncate mark matters: only Debezium and TiCDC send truncates."""
    return tb.producer not in (None, "cockroachdb")


def drop_before(tb: TableBatch, order: str) -> None:
    """Drop the changes a truncate at ``order`` wiped out (they lost to it: superseded)."""
    for k in list(tb.groups):
        kept = [c for c in tb.groups[k] if c.order > order]
        if kept:
            tb.groups[k] = kept
        else:
            del tb.groups[k]


# -- typing the winners ----------------------------------------------------------------------------


def typed_rows(tb: TableBatch, struct: StructType, keys: list[tuple[str, str]]) -> tuple[list[_Change], pa.StructArray]:
    """Pick the winner of each group in ``keys`` and its typed values (a struct array aligned with them).

    A winner whose values do not fit ``struct`` (too many digits, wrong JSON type) is malformed:
    counted, and the group's next candidate is tried, so a bad change never replaces good state.
    Groups whose every candidate is bad are dropped from ``keys`` (in place).
    """
    import pyarrow as pa

    from ..decode.typed import TypedError, json_row_converter, struct_column
    from .images import image_adapter
    from .schemas import arrow_schema_of

    arrow_type = pa.struct(list(arrow_schema_of(struct)))
    pick = [0] * len(keys)
    convert = None
    adapt = None
    while True:
        winners = [tb.groups[k][p] for k, p in zip(keys, pick)]
        if any(w.debezium and w.after is not None for w in winners):
            # Debezium's ways of saying a DECIMAL, BINARY, BOOLEAN, as the typed columns read them.
            adapt = adapt or image_adapter(struct)
            failed = []
            for j, w in enumerate(winners):
                if w.debezium and w.after is not None:
                    try:
                        w.after, w.debezium = adapt(w.after), False
                    except TypedError as exc:
                        tb.bad(str(exc))
                        failed.append(j)
            if failed:
                for j in reversed(failed):
                    pick[j] += 1
                    if pick[j] >= len(tb.groups[keys[j]]):
                        del keys[j], pick[j]
                continue
        images = pa.array([w.after for w in winners], pa.string())
        typed, bad = struct_column(images, struct, arrow_type) if len(struct.fields) else (None, None)
        if typed is None and len(struct.fields) == 0:
            return winners, pa.array([{}] * len(winners), pa.struct([]))
        assert bad is not None  # struct_column ran: a struct without fields returned above
        if not bad.any():
            return winners, typed
        # The bulk path declined some rows: convert them one by one to find the real failures.
        convert = convert or json_row_converter(struct)
        values: list[Any] = typed.to_pylist() if typed is not None else [None] * len(winners)
        retry = False
        drop = []
        for j in bad.nonzero()[0].tolist():
            w = winners[j]
            if w.after is None:
                values[j] = None
                continue
            try:
                values[j] = convert(w.after.encode())
            except (TypedError, msgspec.DecodeError, ValueError) as exc:
                tb.bad(str(exc))
                pick[j] += 1
                if pick[j] >= len(tb.groups[keys[j]]):
                    drop.append(j)
                retry = True
        if not retry:
            return winners, pa.array(values, arrow_type)
        for j in reversed(drop):
            del keys[j], pick[j]


def after_layouts(winners: list[_Change]) -> tuple[dict[str, list[bytes]], set[tuple[str, ...]]]:
    """Per column, the raw JSON values the live winners carry; and the distinct column lists of their rows."""
    texts = [w.after for w in winners if w.after is not None]
    if not texts:
        return {}, set()
    rows = _ROWS.decode(("[" + ",".join(texts) + "]").encode())
    values: dict[str, list[bytes]] = {}
    layouts: set[tuple[str, ...]] = set()
    for row in rows:
        layouts.add(tuple(row))
        for name, raw in row.items():
            values.setdefault(name, []).append(bytes(raw))
    return values, layouts


def source_table(tb: TableBatch, struct: StructType, batch_id: int) -> tuple[pa.Table, dict[str, list[str]]]:
    """Build the MERGE source: one row per key with typed columns and the bookkeeping columns.

    Returns the table and, for a family-split table, which columns each family of this batch set.
    """
    import pyarrow as pa

    from .schemas import arrow_schema_of

    user = arrow_schema_of(struct)
    if not tb.families:
        keys = list(tb.groups)
        winners, typed = typed_rows(tb, struct, keys)
        arrays = [typed.field(i) for i in range(len(user))] if len(user) else []
        deleted = [w.after is None for w in winners]
        cols = dict(zip(user.names, arrays))
        cols.update(_meta([k for k, _ in keys], winners, deleted, batch_id))
        return _table(cols, user), {}
    # Column families: each (key, family) reduced on its own, then the families of a key side by side.
    by_family: dict[str, list[tuple[str, str]]] = {}
    for k in tb.groups:
        by_family.setdefault(k[1], []).append(k)
    row_of: dict[str, int] = {}
    for key, _ in tb.groups:
        row_of.setdefault(key, len(row_of))
    n = len(row_of)
    columns: dict[str, pa.Array] = {}
    family_columns: dict[str, list[str]] = {}
    best: list[_Change | None] = [None] * n
    extra: dict[str, pa.Array] = {}
    for family, keys in sorted(by_family.items()):
        winners, typed = typed_rows(tb, struct, keys)
        present, _ = after_layouts(winners)
        idx: list[int | None] = [None] * n
        orders: list[str | None] = [None] * n
        for j, ((key, _), w) in enumerate(zip(keys, winners)):
            r = row_of[key]
            idx[r] = j
            orders[r] = w.order
            prev = best[r]
            if prev is None or w.order > prev.order:
                best[r] = w
        take = pa.array(idx, pa.int64())
        mine = [c for c in user.names if c in present and c not in columns]
        family_columns[family] = mine
        for c in mine:
            columns[c] = typed.field(user.names.index(c)).take(take)
        extra[family_order_column(family)] = pa.array(orders, pa.string())
    for c, f in zip(user.names, user):
        if c not in columns:
            columns[c] = pa.nulls(n, f.type)
    keep = [r for r in range(n) if best[r] is not None]  # keys whose every candidate was malformed drop out
    keys_of = list(row_of)
    winners = [w for w in best if w is not None]  # (best[r] for r in keep)
    cols = {c: columns[c] for c in user.names}
    if len(keep) != n:
        taker = pa.array(keep, pa.int64())
        cols = {c: a.take(taker) for c, a in cols.items()}
        extra = {c: a.take(taker) for c, a in extra.items()}
    cols.update(
        _meta([keys_of[r] for r in keep], winners, [w.order[-1] == str(DELETE_RANK) for w in winners], batch_id)
    )
    cols.update(extra)
    return _table(cols, user), family_columns


def _meta(keys: list[str], winners: list[_Change], deleted: list[bool], batch_id: int) -> dict[str, Any]:
    import pyarrow as pa

    return {
        KEY: pa.array(keys, pa.string()),
        HLC_COL: pa.array([w.hlc for w in winners], pa.string()),
        ORDER: pa.array([w.order for w in winners], pa.string()),
        DELETED: pa.array(deleted, pa.bool_()),
        BATCH: pa.array([batch_id] * len(winners), pa.int64()),
    }


def _table(cols: Mapping[str, Any], user: pa.Schema) -> pa.Table:
    import pyarrow as pa

    fields = list(user) + [
        pa.field(KEY, pa.string()),
        pa.field(HLC_COL, pa.string()),
        pa.field(ORDER, pa.string()),
        pa.field(DELETED, pa.bool_()),
        pa.field(BATCH, pa.int64()),
    ]
    fields += [
        pa.field(c, pa.string())
        for c in cols
        if c.startswith(META_PREFIX) and c not in (KEY, HLC_COL, ORDER, DELETED, BATCH)
    ]
    schema = pa.schema(fields)
    return pa.table([cols[f.name] for f in schema], schema=schema)
