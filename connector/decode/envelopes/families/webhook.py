"""``envelope=webhook``: the webhook sink's batch, ``{"payload": [event, ...], "length": n}``."""

from __future__ import annotations

import re

from ..common import LIST, Bad, Context, Row, kind_of, parse_object, short, table_from_topic
from ..registry import Family


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return "payload" in d and d["payload"][:1] == b"[" and env in ("auto", "webhook")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    from ..registry import decode_value  # each event is a value of its own

    extra = set(d) - {"payload", "length"}
    if extra:
        raise Bad(f"webhook batch has unexpected field(s) {', '.join(sorted(extra))}")
    if "length" not in d:
        raise Bad("webhook batch is missing `length`")
    length = d["length"]
    if not re.fullmatch(rb"[0-9]+", length):
        raise Bad(f"webhook batch `length` must be a non-negative integer, got {short(length)}")
    try:
        events = LIST.decode(d["payload"])
    except RecursionError:
        raise Bad("webhook batch `payload`: JSON nested too deep") from None
    if int(length) != len(events):
        raise Bad(f"webhook batch `length` is {int(length)} but `payload` holds {len(events)} events")
    rows: list[Row] = []
    for i, item in enumerate(events):
        event = bytes(item)
        where = f"webhook event {i}"
        if event[:1] != b"{":
            raise Bad(f"{where} must be a JSON object, got {kind_of(event)}")
        obj = parse_object(event, where)
        try:
            out = decode_value(obj, event, ctx, "auto")
        except Bad as exc:
            raise Bad(f"{where}: {exc}") from None
        for row in out:
            if row.kind == "row" and row.envelope == "wrapped":
                row.envelope = "webhook"
            if row.table_name is None:
                row.table_name = table_from_topic(row.topic)
        rows.extend(out)
    return rows


def _refuse(d: dict[str, bytes]) -> str:
    return 'envelope=webhook expects {"payload": [...], "length": n}'


FAMILY = Family(order=30, names=("webhook",), claims=_claims, decode=_decode, refuse=_refuse)
