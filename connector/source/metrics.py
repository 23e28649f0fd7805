"""The source's counters, safe to change from any thread, reported in Spark's progress.

Counters only grow; gauges (held messages, lag) are computed where they are reported. Every name
here is a key of ``query.lastProgress["sources"][0]["latestOffset"]`` (see the README).
"""

from __future__ import annotations

import threading
from typing import Iterable

COUNTERS = (
    "received",  # new messages accepted (not redeliveries of held or acknowledged ones)
    "acknowledged",  # messages whose acknowledgement was sent (Spark committed their batch)
    "ackConfirmed",  # ... that Pub/Sub confirmed
    "ackFailed",  # ... that Pub/Sub refused or could not be reached for (remembered; see README)
    "ackStale",  # ... sent with an ack id from an earlier process (the message is remembered)
    "handedBack",  # messages handed back for immediate redelivery (AvailableNow cutoff, shutdown)
    "leasesExtended",  # ack ids whose deadline was extended
    "leasesExpired",  # messages held past maxLeaseDurationSeconds (no longer extended)
    "redeliveredWhileHeld",  # deliveries of a message already held (its newest ack id is kept)
    "redeliveriesDropped",  # deliveries of a recently acknowledged message (acknowledged again)
    "pullErrors",
    "malformed",  # reported by the executors' decode
    "batchesPlanned",
    "batchesReplayed",
)


class Counters:
    """Named counters behind one lock."""

    def __init__(self, names: Iterable[str] = COUNTERS) -> None:
        self._lock = threading.Lock()
        self._values = {n: 0 for n in names}

    def add(self, name: str, n: int = 1) -> None:
        if not n:
            return
        with self._lock:
            self._values[name] += n

    def get(self, name: str) -> int:
        with self._lock:
            return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)
