"""Resolved timestamps: ``{"resolved": "<HLC>"}`` (wrapped, enriched and webhook changefeeds).

The fast path takes the resolved messages CockroachDB's Pub/Sub sink publishes, compact and
unwrapped: ``{"resolved":"<HLC>"}`` and, with the bare envelope (decoded by the bare family),
``{"__crdb__":{"resolved":"<HLC>"}}``.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from ...columns import const, hlc_micros_array
from ...hlc import hlc_to_micros
from ..common import Bad, Context, Row, hlc_field
from ..registry import BatchFast, Family, Part


def resolved_row(d: dict[str, bytes], envelope: str, where: str) -> Row:
    """Decode the row of a resolved message (``where`` prefixes the field in errors)."""
    value = hlc_field(d, "resolved", where)
    if value is None:
        raise Bad(f"`{where}resolved` must be an HLC string, got null")
    row = Row("resolved", envelope)
    row.resolved = value
    row.commit_us = hlc_to_micros(value)
    return row


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return keys == {"resolved"} and env in ("auto", "wrapped", "enriched", "webhook")


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    return [resolved_row(d, "wrapped" if env == "auto" else env, "")]


# -- the fast path -----------------------------------------------------------------------------------

# The HLC unescaped, with a wall time that fits an int64 of nanoseconds (hlc.HLC_TEXT's grammar).
_HLC = rb"((?:[0-9]{1,18}|[1-8][0-9]{18})\.[0-9]{10})"
_PLAIN = re.compile(rb'\{"resolved":"' + _HLC + rb'"\}\Z')
_BARE = re.compile(rb'\{"__crdb__":\{"resolved":"' + _HLC + rb'"\}\}\Z')
_LONGEST = len(b'{"__crdb__":{"resolved":"}}') + 19 + 11 + 1
# The envelope column of each form, by the envelope option it runs under (None: not this form).
_PLAIN_ENVELOPE = {"auto": "wrapped", "wrapped": "wrapped", "enriched": "enriched", "webhook": "webhook"}
_BARE_ENVELOPE = {"auto": "bare", "bare": "bare"}


def _likely(first: bytes) -> int:
    return 2 if first.startswith((b'{"resolved":', b'{"__crdb__":{"resolved":')) else 0


def _fast(bodies: list[bytes], envelope: str) -> list[Part]:
    """Decode the compact resolved messages among ``bodies`` (short bodies are matched one by one)."""
    n = len(bodies)
    short = np.flatnonzero(np.fromiter(map(len, bodies), dtype=np.int64, count=n) <= _LONGEST)
    parts: list[Part] = []
    for pattern, names in ((_PLAIN, _PLAIN_ENVELOPE), (_BARE, _BARE_ENVELOPE)):
        out = names.get(envelope)
        if out is None or not len(short):
            continue
        found = [(i, hit.group(1)) for i in short.tolist() if (hit := pattern.match(bodies[i])) is not None]
        if not found:
            continue
        idx = np.array([i for i, _ in found], dtype=np.int64)
        m = len(idx)
        resolved = pa.array([hlc for _, hlc in found], pa.binary()).cast(pa.string())
        none = pa.nulls(m, pa.string())
        cols = dict.fromkeys(("topic", "table_name", "key", "op", "before", "after", "updated", "mvcc_timestamp", "source"), none)  # fmt: skip
        cols.update(
            kind=const("resolved", m), envelope=const(out, m), resolved=resolved, commit_time=hlc_micros_array(resolved)
        )
        parts.append((idx, cols))
    return parts


FAMILY = Family(
    order=10, names=(), claims=_claims, decode=_decode,
    fast=BatchFast(envelopes=("auto", "wrapped", "enriched", "webhook", "bare"), likely=_likely, run=_fast),
)  # fmt: skip
