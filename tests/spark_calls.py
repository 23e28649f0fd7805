"""Spark's side of the Python streaming source protocol, played in-process on a stream reader.

Spark drives a ``DataSourceStreamReader`` in a fixed order that differs between versions (seen
with a probe source, one that only logged each call it received, on pyspark 4.0.5, 4.1.4, 4.2.1 and
4.3.0; the orders below are what it logged):

* 4.2+: ``initialOffset()``, then per micro-batch ``latestOffset(start, limit)``; when it returns
  a new offset, ``commit(previous end)`` and ``partitions(start, end)``; the batch runs; its
  commit-log entry is written. After a restart with an uncommitted batch N, ``partitions`` of N
  is called again first, with no ``latestOffset`` before it.
* 4.0/4.1: ``latestOffset()`` without arguments (even before ``initialOffset()``), then the same
  ``commit``/``partitions`` order. After a restart Spark first calls ``partitions(X, X)`` with the
  newest offset-log entry X (``setLatestSeenOffset``), which may never have committed, then
  replays N if it was not committed.

:class:`SparkCalls` keeps Spark's offset and commit logs in memory so that a test can stop
"Spark", build a new reader (a new driver process) and restart from the same logs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


def ids_of(batches: list[pa.RecordBatch]) -> list[str]:
    out: list[str] = []
    for b in batches:
        out.extend(b.column(b.schema.get_field_index("message_id")).to_pylist())
    return out


@dataclass
class Logs:
    """Spark's checkpoint: the offset log (batch id -> end offset) and the commit log."""

    offsets: dict[int, dict] = field(default_factory=dict)
    commits: set[int] = field(default_factory=set)

    def latest(self) -> tuple[int, dict] | None:
        if not self.offsets:
            return None
        n = max(self.offsets)
        return n, self.offsets[n]


class SparkCalls:
    """Drives ``reader`` the way Spark ``version`` ("4.0", "4.1", "4.2", "4.3") does."""

    def __init__(self, reader: Any, logs: Logs, version: str = "4.3", limit: Any = None) -> None:
        self.reader = reader
        self.logs = logs
        self.old_api = version in ("4.0", "4.1")
        self.limit = limit
        self.batches: list[tuple[int, list[pa.RecordBatch]]] = []  # what the sink saw
        self._start: dict | None = None
        self._pending: int | None = None  # constructed but not committed batch id
        self._started = False

    # ------------------------------------------------------------------ start / restart

    def start(self) -> None:
        """What Spark does when the query starts on ``logs`` (fresh or restart)."""
        latest = self.logs.latest()
        self._started = True
        if latest is None:
            if not self.old_api:
                self.reader.initialOffset()
            self._start = None
            return
        n, end = latest
        if self.old_api:
            self.reader.partitions(end, end)  # setLatestSeenOffset
        if n in self.logs.commits:
            self._start = end
        else:
            self._start = self.logs.offsets.get(n - 1) if n > 0 else None
            self._pending = n

    def _initial(self) -> dict:
        return self.reader.initialOffset()

    # ------------------------------------------------------------------ one trigger

    def trigger(self, sink: Callable[[int, list[pa.RecordBatch]], None] | None = None) -> bool:
        """One trigger: run the pending batch, or construct the next one and run it.

        Returns False when no new batch was constructed (no new data). ``sink`` may raise, as a
        failing sink does: the batch then stays uncommitted (the query would die).
        """
        assert self._started
        if self._pending is None:
            if self.old_api:
                end = self.reader.latestOffset()
                if self._start is None:
                    self._start = self._initial()
            else:
                if self._start is None:
                    self._start = self._initial()
                end = self.reader.latestOffset(self._start, self._limit())
            if _same(end, self._start):
                return False
            n = (max(self.logs.offsets) + 1) if self.logs.offsets else 0
            self.logs.offsets[n] = end
            if n > 0 and (n - 1) in self.logs.offsets:
                self.reader.commit(self.logs.offsets[n - 1])
            self._pending = n
        n = self._pending
        end = self.logs.offsets[n]
        start = self.logs.offsets[n - 1] if n > 0 else self._start_of_first()
        parts = self.reader.partitions(start, end)
        batches = [b for p in parts for b in _roundtrip(self.reader).read(p)]
        if sink is not None:
            sink(n, batches)
        self.batches.append((n, batches))
        self.logs.commits.add(n)
        self._pending = None
        self._start = end
        return True

    def _start_of_first(self) -> dict:
        return self._initial()

    def _limit(self) -> Any:
        if self.limit is not None:
            return self.limit
        return self.reader.getDefaultReadLimit()

    def run(self, triggers: int, sink: Callable | None = None) -> None:
        for _ in range(triggers):
            self.trigger(sink)

    def ids(self) -> list[str]:
        return [i for _, bs in self.batches for i in ids_of(bs)]


def _same(a: dict, b: dict | None) -> bool:
    return b is not None and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _roundtrip(reader: Any) -> Any:
    """The reader as an executor gets it: pickled and unpickled (no driver state)."""
    import pickle

    return pickle.loads(pickle.dumps(reader))
