"""HLC timestamps as the apply helper orders them: exact integers, and one sortable text key.

The grammar is the decoder's (:mod:`crdb_pubsub.decode.hlc`); only the wall-only form (no
``.logical`` part, logical 0) is added here, as some producers write it.
"""

from __future__ import annotations

import re

from ..decode.hlc import HLC

__all__ = ["DELETE_RANK", "OP_RANK", "ORDER_WIDTH", "order_key", "parse_hlc"]

_WALL_ONLY = re.compile(r"[0-9]+\Z")

# At equal HLC a delete beats an update beats an insert beats a snapshot read.
OP_RANK = {"r": 0, "c": 1, "u": 2, "d": 3}
DELETE_RANK = 3
_WALL_DIGITS = 20
_LOGICAL_DIGITS = 10
# Width of an order key: wall, logical, rank.
ORDER_WIDTH = _WALL_DIGITS + _LOGICAL_DIGITS + 1


def parse_hlc(text: str | None) -> tuple[int, int] | None:
    """``"1745000000000000000.0000000001"`` -> ``(1745000000000000000, 1)``; None if not an HLC.

    Exact integer arithmetic: two HLCs compare as these tuples compare (never as floats, which
    cannot tell ``...001.0`` from ``...000.9999999999``).
    """
    if not text:
        return None
    if HLC.match(text):
        wall, _, logical = text.partition(".")
        return int(wall), int(logical)
    if _WALL_ONLY.match(text):
        return int(text), 0
    return None


def order_key(hlc: tuple[int, int], op: str) -> str | None:
    """Return a fixed-width text that sorts (byte-wise, as SQL compares strings) as (HLC, op rank) do.

    The MERGE predicates compare these keys, so the whole "which change wins" rule is one ``>``
    that any SQL engine evaluates the same way. None when the wall time needs more than 20 digits.
    """
    wall, logical = hlc
    if wall >= 10**_WALL_DIGITS or logical >= 10**_LOGICAL_DIGITS:
        return None
    return "%020d%010d%d" % (wall, logical, OP_RANK.get(op, OP_RANK["u"]))
