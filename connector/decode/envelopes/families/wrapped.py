"""``envelope=wrapped`` (the default): ``after``, with ``key``, ``topic``, ``before`` (``diff``),
``updated`` and ``mvcc_timestamp`` as the changefeed's options add them."""

from __future__ import annotations

from ..common import Context, Row, fill_images_and_meta, op_from_images, with_commit_time
from ..registry import Family

_KEYS = frozenset(("after", "before", "key", "topic", "updated", "mvcc_timestamp"))


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return env in ("auto", "wrapped") and "after" in d and keys <= _KEYS


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    row = Row("row", "wrapped")
    after, before = fill_images_and_meta(row, d, ctx)
    row.op = op_from_images(after, "before" in d, before)
    return [with_commit_time(row)]


def _refuse(d: dict[str, bytes]) -> str:
    if "after" not in d:
        return "envelope=wrapped: the value has no `after` field"
    return f"envelope=wrapped: unexpected field(s) {', '.join(sorted(set(d) - _KEYS))}"


FAMILY = Family(order=80, names=("wrapped",), claims=_claims, decode=_decode, refuse=_refuse)
