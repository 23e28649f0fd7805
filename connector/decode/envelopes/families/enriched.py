"""``envelope=enriched``: ``op``, ``after``/``before``, ``source`` and ``ts_ns`` at the top level.

The fast path takes enriched values in the v2 Pub/Sub wrapper, with or without ``enriched_properties=
schema`` (``{"payload": ..., "schema": ...}``), whole batches at a time (learned layouts, see
:mod:`crdb_pubsub.decode.passes`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...columns import ARR_START, OBJ_START, raw_column, table_names
from ...hlc import MAX_MICROS, hlc_to_micros
from ...layouts import CRDB_STYLE, V2_CRDB, V2_SCHEMA
from ...matching import Matched, nested
from ...passes import LearnedFast
from ...rowcolumns import NULL_STR, commit_from_hlc, image, micros_array, per_distinct, row_columns
from ..common import (
    Bad,
    Context,
    Row,
    fill_images_and_meta,
    hlc_field,
    int_field,
    object_or_null,
    parse_object,
    schema_name,
    short,
    string_field,
    table_from_topic,
)
from ..registry import Family

_KEYS = frozenset(("after", "before", "key", "op", "source", "ts_ns", "updated", "mvcc_timestamp", "topic"))
_OPS = frozenset(("c", "u", "d", "r"))


def is_enriched(payload: dict[str, bytes], schema_name: str | None) -> bool:
    """Whether a value is CockroachDB's enriched envelope rather than a Debezium event."""
    if schema_name is not None:
        return schema_name == "cockroachdb.envelope"
    src = payload.get("source")
    if src is not None and src[:1] == b"{":
        origin = parse_object(src, "`source`").get("origin")
        return origin == b'"cockroachdb"'
    # Debezium always names ts_ms; CockroachDB's enriched envelope has ts_ns and never ts_ms.
    return "ts_ms" not in payload and ("ts_ns" in payload or "op" in payload) and "ddl" not in payload


def enriched_row(d: dict[str, bytes], ctx: Context) -> Row:
    extra = set(d) - _KEYS
    if extra:
        raise Bad(f"enriched envelope has unexpected field(s) {', '.join(sorted(extra))}")
    row = Row("row", "enriched")
    op = string_field(d, "op", "")
    if op is None:
        raise Bad("enriched envelope is missing `op`")
    if op not in _OPS:
        raise Bad(f"enriched `op` must be one of c, u, d, r; got {op!r}")
    row.op = op
    fill_images_and_meta(row, d, ctx)
    source_raw = object_or_null(d, "source", "")
    source: dict[str, bytes] = {}
    if source_raw is not None:
        row.source = source_raw.decode()
        source = parse_object(source_raw, "`source`")
        row.table_name = string_field(source, "table_name", "source.") or None
        row.updated = row.updated or hlc_field(source, "ts_hlc", "source.")
        row.mvcc_timestamp = row.mvcc_timestamp or hlc_field(source, "mvcc_timestamp", "source.")
    if "ts_ns" in d and int_field(d, "ts_ns") is None:
        raise Bad(f"enriched `ts_ns` must be an integer, got {short(d['ts_ns'])}")
    stamp = row.updated or row.mvcc_timestamp
    if stamp:
        row.commit_us = hlc_to_micros(stamp)
    else:
        # source.ts_ns is the commit time; a top-level ts_ns alone is when the changefeed emitted the row.
        ns = int_field(source, "ts_ns") if source else None
        if ns is None:
            ns = int_field(d, "ts_ns")
        row.commit_us = ns // 1000 if ns is not None and 0 <= ns // 1000 <= MAX_MICROS else None
    return row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return env == "enriched" or (env == "auto" and "op" in d and keys <= _KEYS and is_enriched(d, None))


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    return [enriched_row(d, ctx)]


# -- the fast path -----------------------------------------------------------------------------------

_FAST_KEYS = frozenset(("after", "before", "key", "op", "source", "ts_ns"))
# Not pa.array, which imports pandas (see rowcolumns.NULL_STR).
_OP_TEXT = raw_column([b'"c"', b'"u"', b'"d"', b'"r"'])[0]
_KEY_SCHEMA = {"payload", "schema"}
_SCHEMA_NAME = "cockroachdb.envelope"


def _accept(keys: tuple[str, ...]) -> bool:
    return "op" in keys and _FAST_KEYS.issuperset(keys)


def _fast_rows(g: Matched, bodies: list[bytes]) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """(ok mask, output columns) of enriched bodies of one proven layout (see LearnedFast.build)."""
    m = len(g.idx)
    value = {k: g.col(k, m) for k in _FAST_KEYS}
    key = g.col("", m)
    key_out = key.arr
    bad = ~((key.first == ARR_START) | (key.first == OBJ_START))
    key_objects = key.first == OBJ_START
    if key_objects.any():
        assert g.key is not None  # the Key column has objects: the layout has a wrapper Key
        # A Key object is parsed by the general path (no repeated key); {payload, schema} (with
        # enriched_properties=schema) gives its payload (an array, an object or null) as the key.
        kok, _ = nested(g.key, key_objects, CRDB_STYLE, lambda keys: set(keys) != _KEY_SCHEMA, (), key)
        with_schema = key_objects & ~kok
        if with_schema.any():
            sok, kf = nested(g.key, with_schema, CRDB_STYLE, lambda keys: set(keys) == _KEY_SCHEMA, ("payload",))
            payload = kf["payload"]
            sok &= payload.present & payload.starts(b"[{n")
            key_out = pc.if_else(pa.array(with_schema & sok & ~payload.is_null()), payload.arr, key.arr)
            key_out = pc.if_else(pa.array(with_schema & payload.is_null()), NULL_STR, key_out)
            kok |= with_schema & sok
        bad |= key_objects & ~kok
    if g.frame is not None and g.frame.payload:
        # {"payload": <this>, "schema": S}: S must read (no repeated key), and under envelope=auto
        # a schema named otherwise than CockroachDB's makes the general path call it Debezium.
        sok, names = (np.ones(m, dtype=bool), [None] * m) if g.schema is None else per_distinct(g.schema, schema_name)
        bad |= ~sok
        if g.envelope == "auto":
            bad |= np.fromiter((n is not None and n != _SCHEMA_NAME for n in names), dtype=bool, count=m)
    op = value["op"]
    bad |= ~pc.is_in(op.arr, value_set=_OP_TEXT).to_numpy(zero_copy_only=False)
    after_ok, _, after = image(value["after"])
    before_ok, _, before = image(value["before"])
    bad |= ~after_ok | ~before_ok | ~value["key"].starts(b"[{n")
    src = value["source"]
    bad |= ~src.starts(b"{n")
    src_obj = src.present & (src.first == OBJ_START)
    src_names = ("origin", "table_name", "ts_hlc", "mvcc_timestamp", "ts_ns")
    src_ok, sf = nested(g.values["source"] if src.present.any() else [b""] * m, src_obj, CRDB_STYLE,
                        lambda keys: True, src_names, src)  # fmt: skip
    bad |= src_obj & ~src_ok
    # With a source object, only origin "cockroachdb" makes the general path call it enriched.
    origin_ok = pc.fill_null(pc.equal(sf["origin"].arr, '"cockroachdb"'), False).to_numpy(zero_copy_only=False)
    bad |= src_obj & ~origin_ok
    bad |= ~sf["table_name"].plain_string() | ~sf["ts_hlc"].hlc()
    bad |= ~sf["mvcc_timestamp"].hlc()
    src_ns, src_ns_has, _ = sf["ts_ns"].ints()
    bad |= sf["ts_ns"].present & ~src_ns_has
    top_ns, top_ns_has, _ = value["ts_ns"].ints()
    bad |= value["ts_ns"].present & ~top_ns_has
    bad |= g.utf8_bad()

    updated = sf["ts_hlc"].unquoted()
    mvcc = sf["mvcc_timestamp"].unquoted()
    ns = np.where(src_ns_has, src_ns, top_ns)
    ns_has = src_ns_has | top_ns_has
    from_ns = micros_array(ns // 1000, ns_has & (ns >= 0))
    commit = pc.coalesce(commit_from_hlc(updated, mvcc), from_ns)
    table = sf["table_name"].unquoted()
    table = pc.if_else(pc.equal(table, ""), NULL_STR, table)
    topic = pa.array(g.topic, pa.string())
    table = pc.coalesce(table, table_names(topic, table_from_topic))
    cols = row_columns(
        m,
        "enriched",
        src,
        src_obj,
        op=op.unquoted(),
        before=before,
        after=after,
        table=table,
        commit=commit,
        topic=topic,
        key=key_out,
        updated=updated,
        mvcc=mvcc,
    )
    return ~bad, cols


FAMILY = Family(
    order=60, names=("enriched",), claims=_claims, decode=_decode,
    fast=LearnedFast(envelopes=("auto", "enriched"), frames=(V2_CRDB, V2_SCHEMA), accept=_accept, build=_fast_rows),
)  # fmt: skip
