"""The source's metrics: each defined once here, with its meaning.

Every name is a key of ``query.lastProgress["sources"][0]["latestOffset"]`` (Spark 4.2+), and the
README's metric table is generated from :data:`METRICS`. A new counter is one entry here plus the
``counters.add(name)`` where it happens; a new gauge is one entry plus its value in the report
(the receiver mode's ``gauges``: ``DriverMode.gauges`` with ``Receiver.gauges``, ``ExecutorsMode.gauges``;
or ``OffsetProtocol.report`` itself); ``tests/source/test_docs.py`` checks both.
Counters only grow and are safe to change from any thread; gauges are computed when reported.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    kind: str  # "counter" or "gauge"
    meaning: str
    always: bool = True  # False: reported only while it applies


METRICS: dict[str, Metric] = {
    "batch": Metric("gauge", "the newest batch Spark planned (the offset itself)"),
    "received": Metric("counter", "new messages accepted (not redeliveries of held or acknowledged ones)"),
    "acknowledged": Metric("counter", "messages whose acknowledgement was sent, after Spark committed their batch"),
    "ackConfirmed": Metric(
        "counter",
        "... proven to have left the subscription: confirmed by an exactly-once "
        "subscription, or answered while the message's lease was proven alive",
    ),
    "ackLate": Metric(
        "counter",
        "... answered OK too late to prove it: the message's lease may have lapsed first, as when its "
        "renewals were answered late (remembered; see Guarantees)",
    ),
    "ackFailed": Metric("counter", "... that Pub/Sub refused or could not be reached for (remembered; see Guarantees)"),
    "ackStale": Metric("counter", "... sent with an ack id of an earlier process (the message stays remembered)"),
    "handedBack": Metric("counter", "messages handed back for immediate redelivery (AvailableNow cutoff, shutdown)"),
    "leasesExtended": Metric("counter", "ack ids whose deadline was extended"),
    "leasesExpired": Metric("counter", "messages held past `maxLeaseDurationSeconds` (no longer extended)"),
    "redeliveredWhileHeld": Metric("counter", "deliveries of a message already held (its newest ack id is kept)"),
    "redeliveriesDropped": Metric("counter", "deliveries of a recently acknowledged message (acknowledged again)"),
    "rememberedEvicted": Metric(
        "counter",
        "remembered message ids forgotten early to keep the memory bound (a redelivery of one of them is read again)",
    ),
    "pullErrors": Metric(
        "counter", "Pull calls that failed (retried with backoff; with receiver=executors, counted by the tasks)"
    ),
    "malformed": Metric("counter", "bodies that could not be decoded, counted by the executors' decode"),
    "batchesPlanned": Metric("counter", "micro-batches sealed by this process"),
    "batchesReplayed": Metric("counter", "micro-batches replayed from the stateDir"),
    "buffered": Metric("gauge", "messages received and not yet in a batch"),
    "inFlight": Metric("gauge", "messages in planned, uncommitted batches"),
    "laterHeld": Metric("gauge", "AvailableNow: messages published after the start, held for the next run"),
    "heldBytes": Metric("gauge", "body bytes held (the `maxOutstandingBytes` bound)"),
    "awaitingCommit": Metric("gauge", "messages in batches sealed and waiting for Spark's commit"),
    "rememberedIds": Metric("gauge", "acknowledged message ids remembered to drop redeliveries"),
    "oldestUnackedAgeSeconds": Metric("gauge", "age of the oldest held message: how far behind the stream is"),
    "unavailableForSeconds": Metric("gauge", "how long Pub/Sub has been unreachable", always=False),
    "lastError": Metric("gauge", "the last error while Pub/Sub is unreachable", always=False),
}

COUNTERS = tuple(name for name, m in METRICS.items() if m.kind == "counter")


def metric_table() -> str:
    """Render the metrics as a Markdown table (metric, kind, meaning): the README's table is this text."""
    rows = ["| metric | kind | meaning |", "|---|---|---|"]
    for name, m in METRICS.items():
        when = "" if m.always else " (only while it applies)"
        rows.append(f"| `{name}` | {m.kind} | {m.meaning}{when} |")
    return "\n".join(rows) + "\n"


class Counters:
    """Named counters behind one lock."""

    def __init__(self, names: Iterable[str] = COUNTERS) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(names, 0)

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
