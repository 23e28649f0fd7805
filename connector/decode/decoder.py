"""``decode_messages``: Pub/Sub message bodies in, one Arrow record batch of change rows out.

This is the single decoder: the streaming source calls it on executors with the message columns it
shipped there, and users can call it on bodies they fetched themselves.

Three kinds of path, one result:

* the envelope families' **fast paths** (``Family.fast`` in :mod:`.envelopes.registry`, each in its
  family's module), whole batches at a time: the wrapped one proves CockroachDB's canonical Pub/Sub
  v2 bytes with arithmetic on whole columns; bare, enriched and Debezium bodies are matched against
  layouts learned from the batch itself (shared machinery in :mod:`.passes`); typed rows
  (``row_schema``) of their results are built column by column
  (:func:`crdb_pubsub.decode.typed.struct_column`);
* the **general path** (:mod:`.envelopes`), message by message, for whatever a fast path could not
  prove: it handles every envelope and every oddity and produces malformed rows with a reason.

This module validates the arguments, runs the paths, puts their rows back in message order and
adds the Pub/Sub metadata columns.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import spread
from .envelopes import Bad, Context, Row, decode_body, registry
from .inference import schema_from_enriched
from .passes import merged
from .schema import COLUMN_NAMES, arrow_schema, output_columns
from .vocabulary import ENVELOPES, MODES

__all__ = ["ENVELOPES", "MODES", "DecodeStats", "MalformedMessageError", "decode_messages", "schema_from_enriched"]


class DecodeStats:
    """Counters that :func:`decode_messages` adds to (pass the same object to many calls).

    ``messages``: bodies seen; ``rows``: rows returned; ``malformed``: messages that could not be
    decoded (in every mode); ``dropped``: malformed messages left out (DROPMALFORMED).
    """

    __slots__ = ("dropped", "malformed", "messages", "rows")

    def __init__(self, messages: int = 0, rows: int = 0, malformed: int = 0, dropped: int = 0) -> None:
        self.messages = messages
        self.rows = rows
        self.malformed = malformed
        self.dropped = dropped

    def __repr__(self) -> str:
        return (
            f"DecodeStats(messages={self.messages}, rows={self.rows}, "
            f"malformed={self.malformed}, dropped={self.dropped})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DecodeStats):
            return NotImplemented
        return (self.messages, self.rows, self.malformed, self.dropped) == (
            other.messages, other.rows, other.malformed, other.dropped,
        )  # fmt: skip


class MalformedMessageError(ValueError):
    """Raised in FAILFAST mode for the first message that cannot be decoded.

    ``message_id`` (None when no ids were given), ``index`` (position in ``bodies``) and ``reason``.
    """

    def __init__(self, message_id: str | None, index: int, reason: str) -> None:
        self.message_id = message_id
        self.index = index
        self.reason = reason
        where = f"message {message_id!r} (index {index})" if message_id is not None else f"message at index {index}"
        super().__init__(f"malformed {where}: {reason}")


# -- argument handling -----------------------------------------------------------------------------


def _choice(name: str, value: Any, accepted: Sequence[str], upper: bool) -> str:
    if isinstance(value, str):
        norm = value.upper() if upper else value.lower()
        if norm in accepted:
            return norm
    raise ValueError(f"{name}={value!r} is not valid; accepted values: {', '.join(accepted)}")


@functools.lru_cache(maxsize=64)
def _schema_bundle(key: str | None, row_schema_json: str | None) -> tuple[Any, pa.Schema]:
    """(StructType or None, Arrow schema) for a row schema, cached because pyspark's conversion is slow."""
    if key is None:
        return None, arrow_schema(None)
    from pyspark.sql.types import StructType

    from .ddl import parse_ddl

    struct = StructType.fromJson(msgspec.json.decode(row_schema_json)) if row_schema_json else parse_ddl(key)
    return struct, arrow_schema(struct)


def _resolve_schema(row_schema: Any) -> tuple[Any, pa.Schema]:
    if row_schema is None:
        return _schema_bundle(None, None)
    if isinstance(row_schema, str):
        return _schema_bundle(row_schema, None)
    from pyspark.sql.types import StructType

    if isinstance(row_schema, StructType):
        text = row_schema.json()
        return _schema_bundle("json:" + text, text)
    raise TypeError(f"row_schema must be a DDL string or a pyspark StructType, got {type(row_schema).__name__}")


@functools.lru_cache(maxsize=64)
def _converters(struct_json: str) -> tuple[Any, Any]:
    from pyspark.sql.types import StructType

    from .typed import csv_row_converter, json_row_converter

    struct = StructType.fromJson(msgspec.json.decode(struct_json))
    try:
        csv_conv = csv_row_converter(struct)
    except TypeError:
        csv_conv = None
    return json_row_converter(struct), csv_conv


def _as_list(name: str, values: Any, n: int) -> list | pa.Array | None:
    """Align metadata with the bodies: a list, or an Arrow array kept as it is.

    No Python objects per message: the streaming source passes its columns straight through.
    """
    if values is None:
        return None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = list(values)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries but bodies has {n}; they must align")
    return values


def _bodies_list(bodies: Any) -> list[bytes]:
    if isinstance(bodies, (pa.Array, pa.ChunkedArray)):
        binary = pa.types.is_binary(bodies.type) or pa.types.is_large_binary(bodies.type)
        no_nulls = not bodies.null_count
        bodies = bodies.to_pylist()
        if binary and no_nulls:  # (the streaming source's bodies: bytes, each, no check needed)
            return bodies
    out = bodies if isinstance(bodies, list) else list(bodies)
    if set(map(type, out)) <= {bytes}:
        return out
    fixed = []
    for i, b in enumerate(out):
        if type(b) is bytes:
            fixed.append(b)
        elif b is None:
            fixed.append(b"")
        elif isinstance(b, (bytearray, memoryview)):
            fixed.append(bytes(b))
        else:
            raise TypeError(f"bodies[{i}] must be bytes, got {type(b).__name__}")
    return fixed


# -- the general path ------------------------------------------------------------------------------


def _rows_columns(rows: list[Row], schema: pa.Schema, typed: bool) -> dict[str, pa.Array]:
    def strings(attr: str) -> pa.Array:
        return pa.array([getattr(r, attr) for r in rows], pa.string())

    out = {name: strings(name) for name in ("kind", "envelope", "topic", "table_name", "key", "op", "updated",
                                            "mvcc_timestamp", "resolved", "source")}  # fmt: skip
    for name in ("before", "after"):
        values = [getattr(r, name) for r in rows]
        if typed:
            out[name] = pa.array(values, schema.field(name).type)
        else:
            out[name] = pa.array(values, pa.binary()).cast(pa.string())
    out["commit_time"] = pa.array([r.commit_us for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return out


def _typed_bad(rows: list[Row], schema: pa.Schema) -> bool:
    """Whether the typed before/after values of these rows convert to Arrow."""
    try:
        for name in ("before", "after"):
            pa.array([getattr(r, name) for r in rows], schema.field(name).type)
        return False
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        return str(exc) or type(exc).__name__  # type: ignore[return-value]


def _table_name_attribute(
    table_name: pa.Array, attributes: list | pa.Array | None, msg_taker: pa.Array | None
) -> pa.Array:
    """Prefer the ``TABLE_NAME`` Pub/Sub attribute, where a message has one, over the body's table name.

    A changefeed created ``WITH topic_name=X, with_table_name_attribute=true`` sends every table to
    topic X, so the topic no longer names the table; the attribute is the only reliable name.
    """
    if attributes is None:
        return table_name
    if isinstance(attributes, pa.Array):
        named = pc.map_lookup(attributes, pa.scalar("TABLE_NAME"), "first")
        if named.null_count == len(named):
            return table_name  # CockroachDB's default: no attributes
    else:
        if not any(attributes) or not any(a and "TABLE_NAME" in a for a in attributes):
            return table_name
        named = pa.array([a.get("TABLE_NAME") if a else None for a in attributes], pa.string())
    if msg_taker is not None:
        named = named.take(msg_taker)
    return pc.coalesce(named, table_name)


# -- metadata columns ------------------------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _micros(value: Any, i: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"publish_times[{i}] must be a datetime or int microseconds, got bool")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)  # naive: taken as UTC
        delta = value - _EPOCH
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    raise TypeError(f"publish_times[{i}] must be a datetime or int microseconds, got {type(value).__name__}")


_TS = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())


def _message_id(n: int, message_ids: Any) -> pa.Array:
    if message_ids is None:
        return pa.nulls(n, pa.string())
    if isinstance(message_ids, pa.Array):
        return message_ids.cast(pa.string())
    return pa.array(message_ids, pa.string())


def _publish_time(n: int, publish_times: Any) -> pa.Array:
    if publish_times is None:
        return pa.nulls(n, _TS)
    if isinstance(publish_times, pa.Array) and pa.types.is_integer(publish_times.type):
        return publish_times.cast(pa.int64()).cast(_TS)  # epoch microseconds
    if isinstance(publish_times, pa.Array) and pa.types.is_timestamp(publish_times.type):
        return publish_times.cast(_TS)
    publish_times = publish_times.to_pylist() if isinstance(publish_times, pa.Array) else publish_times
    try:  # the streaming source passes int microseconds: convert them in one call
        micros = pa.array(publish_times, pa.int64())
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        micros = pa.array([_micros(v, i) for i, v in enumerate(publish_times)], pa.int64())
    return micros.cast(_TS)


def _attributes(n: int, attributes: Any) -> pa.Array:
    if attributes is None:
        return pa.nulls(n, _MAP)
    if isinstance(attributes, pa.Array):
        return attributes.cast(_MAP)
    if not any(attributes):
        # CockroachDB sets no attributes by default: build the empty maps without per-item work.
        mask = None
        if attributes.count(None):
            mask = pa.array(np.fromiter((a is None for a in attributes), dtype=bool, count=n))
        return pa.MapArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()), pa.array([], pa.string()),
            mask=mask,
        )  # fmt: skip
    return pa.array([None if a is None else list(a.items()) for a in attributes], _MAP)


def _ordering_key(n: int, ordering_keys: Any) -> pa.Array:
    if ordering_keys is None or (
        isinstance(ordering_keys, list) and ordering_keys.count("") + ordering_keys.count(None) == n
    ):
        return pa.nulls(n, pa.string())  # (CockroachDB sets none: "" and None are both null)
    arr = (
        ordering_keys.cast(pa.string()) if isinstance(ordering_keys, pa.Array) else pa.array(ordering_keys, pa.string())
    )
    return pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)


_META = {"message_id": _message_id, "publish_time": _publish_time, "attributes": _attributes,
         "ordering_key": _ordering_key}  # fmt: skip


def _metadata(n: int, given: Mapping[str, Any], names: Iterable[str]) -> dict[str, pa.Array]:
    """Return the Pub/Sub metadata columns among ``names``, from the ``given`` values (by column name)."""
    return {name: make(n, given[name]) for name, make in _META.items() if name in names}


# -- the fast paths --------------------------------------------------------------------------------

_FILL = ("resolved", "source", "error")


def _fast_parts(bodies: list[bytes], envelope: str) -> list[tuple[np.ndarray, dict[str, pa.Array]]]:
    """Run the families' fast paths for ``envelope``, the most likely first: [(message indices, columns)].

    The most likely is judged by the first body; each path runs on what the previous ones left.
    """
    paths = merged(f.fast for f in registry.FAMILIES if f.fast is not None and envelope in f.fast.envelopes)
    if not paths or not bodies:
        return []
    first = bodies[0]
    paths.sort(key=lambda path: -path.likely(first))
    n = len(bodies)
    parts: list[tuple[np.ndarray, dict[str, pa.Array]]] = []
    remaining = np.arange(n)
    for path in paths:
        if not len(remaining):
            break
        subset = bodies if len(remaining) == n else [bodies[i] for i in remaining.tolist()]
        taken = np.zeros(n, dtype=bool)
        for idx, cols in path.run(subset, envelope):
            rows = remaining[idx]
            taken[rows] = True
            m = len(rows)
            for name in _FILL:
                cols.setdefault(name, pa.nulls(m, pa.string()))
            parts.append((rows.astype(np.int64), cols))
        remaining = remaining[~taken[remaining]]
    return parts


def _typed_parts(parts: list, struct: Any, schema: pa.Schema) -> list:
    """Row images as structs of the row schema; messages the bulk conversion is unsure of drop out."""
    from .typed import struct_column

    out = []
    for idx, cols in parts:
        bad = np.zeros(len(idx), dtype=bool)
        for name in ("before", "after"):
            arr, not_done = struct_column(cols[name], struct, schema.field(name).type)
            if arr is None:
                bad[:] = True
                break
            cols[name] = arr
            bad |= not_done
        if bad.all():
            continue
        if bad.any():
            keep = pa.array(~bad)
            cols = {k: v.filter(keep) for k, v in cols.items()}
            idx = idx[~bad]
        out.append((idx, cols))
    return out


# -- the public function ---------------------------------------------------------------------------


def _general_part(
    body_list: list,
    slow_indices: Iterable[int],
    ctx: Context,
    typed: bool,
    schema: pa.Schema,
    mode: str,
    message_ids: Sequence[str] | None,
    parts: list,
) -> tuple[list[Row], list[str | None], list[tuple[int, str]]]:
    """Run the general path over every message the fast paths did not take.

    Appends its rows (and the malformed rows, by mode) to ``parts``. Returns the rows, their errors
    and the malformed.
    """
    results: list[tuple[int, list[Row] | None, str | None]] = []
    for i in slow_indices:
        try:
            results.append((i, decode_body(body_list[i], ctx), None))
        except Bad as exc:
            results.append((i, None, str(exc)))
    if typed and results:
        good_rows = [r for _, rows, _ in results if rows for r in rows]
        if _typed_bad(good_rows, schema):
            fixed = []
            for i, rows, err in results:
                if rows:
                    reason = _typed_bad(rows, schema)
                    if reason:
                        rows, err = None, f"row does not convert to the row schema ({reason})"
                fixed.append((i, rows, err))
            results = fixed

    malformed: list[tuple[int, str]] = []
    for i, rows, err in results:
        if rows is None:
            assert err is not None  # a message has rows or an error, never neither (see above)
            malformed.append((i, err))
    if malformed and mode == "FAILFAST":
        i, err = malformed[0]
        raise MalformedMessageError(_item(message_ids, i), i, err)

    slow_rows: list[Row] = []
    slow_msg: list[int] = []
    slow_err: list[str | None] = []
    for i, rows, err in results:
        if rows is None:
            if mode == "DROPMALFORMED":
                continue
            bad = Row("malformed", ctx.envelope if ctx.envelope != "auto" else None)  # type: ignore[arg-type]
            slow_rows.append(bad)
            slow_msg.append(i)
            slow_err.append(err)
        else:
            for row in rows:
                slow_rows.append(row)
                slow_msg.append(i)
                slow_err.append(None)

    if slow_rows:
        cols = _rows_columns(slow_rows, schema, typed)
        cols["error"] = pa.array(slow_err, pa.string())
        parts.append((np.array(slow_msg, dtype=np.int64), cols))
    return slow_rows, slow_err, malformed


def _item(values: list | pa.Array | None, i: int) -> Any:
    if values is None:
        return None
    return values[i].as_py() if isinstance(values, pa.Array) else values[i]


# The columns the paths make from the bodies (the rest are the metadata and ``data``).
_BODY_COLUMNS = ("kind", "envelope", "topic", "table_name", "key", "op", "before", "after", "updated", "mvcc_timestamp",
                 "commit_time", "resolved", "source", "error")  # fmt: skip


def _assemble(parts: list, schema: pa.Schema, names: Sequence[str]) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """Return the parts' columns ``names`` as one set, rows in message order, and each row's message index."""
    row_msg = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    if len(parts) <= 1:
        return row_msg, {name: parts[0][1][name] if parts else pa.array([], schema.field(name).type) for name in names}
    # Rows come out in message order: the parts' rows are interleaved back with a stable sort.
    order = np.argsort(row_msg, kind="stable")
    total = len(order)
    at = np.empty(total, dtype=np.int64)
    at[order] = np.arange(total)  # where each row of the concatenated parts goes
    bounds = np.cumsum([0] + [len(p[0]) for p in parts])
    taker = None
    columns: dict[str, pa.Array] = {}
    for name in names:
        chunks = [p[1][name] for p in parts]
        filled = [k for k, c in enumerate(chunks) if c.null_count < len(c)]
        if not filled:
            columns[name] = pa.nulls(total, schema.field(name).type)
            continue
        if len(filled) == 1 and pa.types.is_string(chunks[filled[0]].type):
            # The common mix: one big part and a few rows of another kind (resolved messages, a
            # malformed body) that have no such value: their nulls go in between, nothing is copied.
            k = filled[0]
            where = at[bounds[k] : bounds[k + 1]]
            if len(where) < 2 or bool((where[1:] > where[:-1]).all()):
                columns[name] = spread(chunks[k], where, total)
                continue
        if taker is None:
            taker = pa.array(order)
        columns[name] = pa.concat_arrays(chunks).take(taker)
    return row_msg[order], columns


def decode_messages(
    bodies: Sequence[bytes],
    *,
    envelope: str = "auto",
    mode: str = "PERMISSIVE",
    row_schema: Any = None,
    include_raw: bool = False,
    message_ids: Sequence[str] | None = None,
    publish_times: Sequence[_dt.datetime | int | None] | None = None,
    attributes: Sequence[Mapping[str, str] | None] | None = None,
    ordering_keys: Sequence[str] | None = None,
    stats: DecodeStats | None = None,
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """Decode Pub/Sub message bodies of CockroachDB (or Debezium) changefeeds into change rows.

    Parameters
    ----------
    bodies : sequence of bytes
        Pub/Sub message data (a pyarrow binary array works too). ``None`` counts as an empty body.
    envelope : str
        ``"auto"`` (default) detects each message's envelope; ``wrapped``, ``bare``, ``key_only``,
        ``row``, ``enriched``, ``webhook``, ``debezium`` force one (messages of another shape become
        malformed); ``csv`` reads ``format=csv`` bodies and needs ``row_schema``.
    mode : str
        ``PERMISSIVE`` (default): bad messages become ``kind="malformed"`` rows with ``error`` and
        ``data``. ``DROPMALFORMED``: they are left out and counted in ``stats.dropped``.
        ``FAILFAST``: the first one raises :class:`MalformedMessageError`.
    row_schema : str or pyspark StructType, optional
        Spark DDL (``"id STRING, price DECIMAL(10,2)"``). ``before``/``after`` then become structs of
        that type; a value that does not fit makes its message malformed.
    include_raw : bool
        Fill ``data`` with the body on every row (malformed rows always carry it).
    message_ids, publish_times, attributes, ordering_keys : sequences aligned with ``bodies``
        Pub/Sub metadata copied to every row of the message. ``publish_times`` are tz-aware
        datetimes or int epoch microseconds; an ``ordering_key`` of ``""`` becomes null.
    stats : DecodeStats, optional
        Counters this call adds to.
    columns : sequence of str, optional
        The output columns, in this order (default: all 19). Only these are built: the metadata,
        ``data`` and the row images' assembly cost nothing when left out. Which messages are
        malformed does not change (every value a path reads is still checked).

    Returns
    -------
    pyarrow.RecordBatch
        Rows in message order (a webhook batch gives one row per event), with exactly
        ``arrow_schema(row_schema, columns)`` as its schema.

    Raises
    ------
    ValueError
        Bad ``envelope``/``mode``/``row_schema``/``columns``, misaligned metadata,
        ``envelope="csv"`` without ``row_schema``, or (FAILFAST) :class:`MalformedMessageError`.
        Never for any message bytes in the other modes.
    """
    envelope = _choice("envelope", envelope, ENVELOPES, upper=False)
    mode = _choice("mode", mode, MODES, upper=True)
    try:
        names = output_columns(columns)
    except ValueError as exc:
        raise ValueError(f"columns {exc}; accepted: {', '.join(COLUMN_NAMES)}") from None
    struct, schema = _resolve_schema(row_schema)
    if envelope == "csv" and struct is None:
        raise ValueError('envelope="csv" needs row_schema: CSV bodies carry no column names')
    typed = struct is not None
    body_list = _bodies_list(bodies)
    n = len(body_list)
    message_ids = _as_list("message_ids", message_ids, n)
    publish_times = _as_list("publish_times", publish_times, n)
    attributes = _as_list("attributes", attributes, n)
    ordering_keys = _as_list("ordering_keys", ordering_keys, n)

    convert = csv_convert = None
    if typed:
        convert, csv_convert = _converters(struct.json())
        if envelope == "csv" and csv_convert is None:
            raise ValueError("row_schema has nested types (ARRAY/MAP/STRUCT) that format=csv cannot carry")
    ctx = Context(envelope, convert, csv_convert)

    parts: list[tuple[np.ndarray, dict[str, pa.Array]]] = []
    if n:
        parts = _fast_parts(body_list, envelope)
        if typed and parts:
            parts = _typed_parts(parts, struct, schema)
    fast_count = sum(len(idx) for idx, _ in parts)
    if fast_count == n:
        slow_indices: Iterable[int] = ()
    else:
        handled = np.zeros(n, dtype=bool)
        for idx, _ in parts:
            handled[idx] = True
        slow_indices = np.flatnonzero(~handled).tolist()

    slow_rows, slow_err, malformed = _general_part(
        body_list, slow_indices, ctx, typed, schema, mode, message_ids, parts
    )
    # What the named columns are made from: a tombstone's key comes from its metadata, and
    # ``data`` is filled on the malformed rows, found by their kind.
    need = set(names)
    tombstones = "key" in need and any(r.kind == "tombstone" for r in slow_rows)
    if tombstones:
        need |= {"kind", "attributes", "ordering_key"}
    any_malformed = any(e is not None for e in slow_err)
    if "data" in need and any_malformed:
        need.add("kind")
    row_msg, out = _assemble(parts, schema, [name for name in _BODY_COLUMNS if name in need])
    row_count = len(row_msg)

    given = {"message_id": message_ids, "publish_time": publish_times, "attributes": attributes,
             "ordering_key": ordering_keys}  # fmt: skip
    meta = _metadata(n, given, need)
    identity = row_count == n and (n == 0 or (row_msg[0] == 0 and row_msg[-1] == n - 1))
    msg_taker = None if identity else pa.array(row_msg)
    if "table_name" in need:
        out["table_name"] = _table_name_attribute(out["table_name"], attributes, msg_taker)
    for name, arr in meta.items():
        out[name] = arr if msg_taker is None else arr.take(msg_taker)

    if tombstones:
        out["key"] = _tombstone_keys(out)

    if "data" in need:
        if include_raw or any_malformed:
            data = pa.array(body_list, pa.binary())
            data = data if msg_taker is None else data.take(msg_taker)
            if not include_raw:
                data = pc.if_else(pc.equal(out["kind"], "malformed"), data, pa.scalar(None, pa.binary()))
            out["data"] = data
        else:
            out["data"] = pa.nulls(row_count, pa.binary())

    if names != COLUMN_NAMES:
        # The fields of the full schema, as Spark's worker converts a pruned one: field by field.
        schema = pa.schema([schema.field(name) for name in names])
    batch = pa.RecordBatch.from_arrays([out[name] for name in names], schema=schema)
    if stats is not None:
        stats.messages += n
        stats.rows += row_count
        stats.malformed += len(malformed)
        if mode == "DROPMALFORMED":
            stats.dropped += len(malformed)
    return batch


def _tombstone_keys(columns: dict[str, pa.Array]) -> pa.Array:
    """Give Debezium tombstones a key: the Pub/Sub message's ordering key, else its ``key`` attribute.

    A tombstone's body carries no key; the ``key`` attribute is where the producer put the record
    key.
    """
    tomb = pc.equal(columns["kind"], "tombstone")
    from_attr = pc.map_lookup(columns["attributes"], pa.scalar("key"), "first")
    fallback = pc.coalesce(columns["ordering_key"], from_attr)
    return pc.if_else(pc.and_(tomb, pc.is_null(columns["key"])), fallback, columns["key"])
