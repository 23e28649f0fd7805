"""CockroachDB's HLC timestamps (``"<wall nanoseconds>.<10-digit logical>"``), defined once.

The general path matches whole strings with :data:`HLC`; the fast paths match Arrow columns with
the same grammar as pyarrow regexes (:data:`HLC_TEXT`, and :data:`HLC_QUOTED` for raw JSON values),
restricted to wall times that fit an int64 of nanoseconds so that a column can be converted in bulk.
"""

from __future__ import annotations

import re

# Up to 18 digits, or 19 digits below 9e18: the wall times whose nanoseconds fit an int64.
_WALL = r"(?:[0-9]{1,18}|[1-8][0-9]{18})"
_LOGICAL = r"\.[0-9]{10}"

HLC = re.compile(r"[0-9]+" + _LOGICAL + r"\Z")
HLC_TEXT = "^" + _WALL + _LOGICAL + "$"
HLC_QUOTED = '^"' + _WALL + _LOGICAL + '"$'

MAX_MICROS = 2**63 - 1


def hlc_to_micros(hlc: str) -> int | None:
    """Wall time of an HLC string in microseconds since the epoch (None when out of range)."""
    micros = int(hlc.partition(".")[0]) // 1000
    return micros if micros <= MAX_MICROS else None
