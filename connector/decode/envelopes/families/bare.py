"""``envelope=bare``: the row's columns at the top level, CockroachDB's metadata under ``__crdb__``."""

from __future__ import annotations

import msgspec

from ..common import Bad, Context, Row, convert, hlc_field, key_text, kind_of, parse_object, string_field
from ..common import with_commit_time
from ..registry import Family
from .resolved import resolved_row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return "__crdb__" in d and env in ("auto", "bare", "row")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    envelope = "bare" if env == "auto" else env
    meta = parse_object(d["__crdb__"], "`__crdb__`") if d["__crdb__"][:1] == b"{" else None
    if meta is None:
        raise Bad(f"`__crdb__` must be an object, got {kind_of(d['__crdb__'])}")
    if "resolved" in meta:
        if len(d) != 1 or len(meta) != 1:
            raise Bad("`__crdb__.resolved` must come alone (a resolved message has no row)")
        return [resolved_row(meta, envelope, "__crdb__.")]
    row = Row("row", envelope)
    # The row is the top-level object minus __crdb__: rebuilt with CockroachDB's own ", "/": "
    # separators around each value's exact text, so a CockroachDB message comes out byte-identical.
    parts = [f"{msgspec.json.encode(k).decode()}: {v.decode()}" for k, v in d.items() if k != "__crdb__"]
    row.after = ("{" + ", ".join(parts) + "}").encode()
    row.op = "u"
    row.key = key_text(meta.get("key"), "`__crdb__.key`")
    row.topic = string_field(meta, "topic", "__crdb__.")
    row.updated = hlc_field(meta, "updated", "__crdb__.")
    row.mvcc_timestamp = hlc_field(meta, "mvcc_timestamp", "__crdb__.")
    with_commit_time(row)
    row.after = convert(row.after, ctx, "after")
    return [row]


FAMILY = Family(order=20, names=("bare",), claims=_claims, decode=_decode)
