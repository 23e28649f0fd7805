"""A ``stateDir`` as the :class:`~crdb_pubsub.source.storage.Storage` contract lets it behave, in memory.

Two flavours, with the faults each storage really shows (drawn from the seed):

* ``posix`` (a local disk or an NFS mount): a listing may be a snapshot of the folder up to a few
  seconds old (NFS attribute caching): it misses what was created since and still shows what was
  deleted since; a read by exact name is always current. While the server is unreachable a hard
  mount blocks every call until it is back.
* ``gs`` (Cloud Storage): every call takes a round trip; 429/503 brownouts of any length, during
  which the client library retries, for up to 120 s, and then the call raises, its write landed
  or not.

Both: a call may stall (the calling process froze, or a request waited in a queue) and land long
after it was made, after another process took the stateDir's lease over. Objects are write-once
(:meth:`create`) or compare-and-swap (:meth:`swap`) with a version per write, as the contract says;
the record of writes lets the checker see what landed when, and from whom.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from google.api_core import exceptions as gexc

from crdb_pubsub.source.storage import ObjectInfo

from .scheduler import Scheduler

GIVE_UP_SECONDS = 120.0  # google-cloud-storage's default retry deadline


@dataclass
class StorageTerms:
    latency: tuple[float, float] = (0.0001, 0.002)
    list_lag: float = 0.0  # a listing shows the folder as it was up to this many seconds ago
    stall: float = 0.0  # chance a call stalls before it lands
    stall_seconds: tuple[float, float] = (5.0, 30.0)
    brownouts: list[tuple[float, float]] = field(default_factory=list)  # (start, end): calls fail
    landed_anyway: float = 0.5  # chance a write that failed in a brownout landed all the same
    # Chance a task attempt's write freezes its whole process for ``stall_seconds`` (a GC pause or
    # a VM migration as it writes: its claim's renewals stop too) and lands when it wakes. Set by
    # a focus only (tests/sim/world.py).
    freeze_tasks: float = 0.0

    @classmethod
    def draw(cls, rng: Any, flavour: str, *, rough: float) -> StorageTerms:
        brownouts = []
        if rng.random() < 0.2 * rough:
            start = rng.uniform(1.0, 60.0)
            brownouts.append((start, start + rng.choice([0.5, 2.0, 10.0, 30.0, 150.0])))
        return cls(
            latency=(0.0001, 0.002) if flavour == "posix" else (0.005, rng.choice([0.02, 0.1])),
            list_lag=rng.choice([0.0, 0.5, 3.0]) * rough if flavour == "posix" else 0.0,
            stall=0.01 * rough if rng.random() < 0.5 else 0.0,
            brownouts=brownouts,
            landed_anyway=rng.random(),
        )


@dataclass
class _Object:
    data: bytes
    version: int
    metadata: dict[str, str]
    created: float


class SimStorage:
    """One simulated ``stateDir``; shared by every simulated process (as one bucket or mount is)."""

    def __init__(self, sched: Scheduler, seed: int, flavour: str, terms: StorageTerms) -> None:
        import random

        assert flavour in ("posix", "gs")
        self.sched = sched
        self.flavour = flavour
        self.terms = terms
        self.rng = random.Random(f"storage-{seed}")
        self.description = "gs://sim-bucket/state" if flavour == "gs" else "/sim/state"
        self.listing_may_lag = flavour == "posix"
        self._objects: dict[str, _Object] = {}
        self._gone: list[tuple[str, float, float]] = []  # (key, created, deleted): what a lagging listing still shows
        self._versions = itertools.count(1)
        self.writes = 0
        self.late_writes: list[tuple[str, str]] = []  # (op, key) that landed after stalling
        # on_taken_over(pid): a task attempt's claim, never released, was taken over by another
        # attempt (the query wrote it off: see SimPubSub.written_off).
        self.on_taken_over: Callable[[int], None] | None = None
        self.on_call: Any = None  # called before every call lands (the world's kill switch)

    def __repr__(self) -> str:
        return f"SimStorage({self.description!r})"

    def __getstate__(self) -> dict:
        raise TypeError("the simulated storage is shared in-process, never pickled")

    # ---------------------------------------------------------------- timing and faults

    def _call(self, op: str, key: str, *, write: bool) -> bool:
        """Wait out the call's latency (and a stall); raise in a brownout. Returns whether it stalled."""
        s = self.sched
        s.check()
        if self.on_call is not None:
            self.on_call()
        lo, hi = self.terms.latency
        s.sleep(self.rng.uniform(lo, hi))
        # A write may stall (its process froze, or the request queued) and land long after.
        stalled = write and bool(self.terms.stall) and self.rng.random() < self.terms.stall
        if stalled:
            s.sleep(self.rng.uniform(*self.terms.stall_seconds))
        me = s.process()
        task = me is not None and me.host.startswith("executor")
        if write and self.terms.freeze_tasks and task and self.rng.random() < self.terms.freeze_tasks:
            seconds = self.rng.uniform(*self.terms.stall_seconds)
            s.pause(me, seconds)
            s.sleep(seconds)
            stalled = True
        end = self._brownout_end()
        if end is not None:
            # The client retries (Cloud Storage) or the hard mount blocks (NFS) meanwhile.
            give_up = s.now + GIVE_UP_SECONDS if self.flavour == "gs" else float("inf")
            s.sleep(min(end, give_up) - s.now)
            if self._brownout_end() is not None:
                if write and self.rng.random() < self.terms.landed_anyway:
                    return stalled  # the caller's write lands; the error comes after (see _after)
                self._fail(op, key)
        return stalled

    def _brownout_end(self) -> float | None:
        return next((b for a, b in self.terms.brownouts if a <= self.sched.now < b), None)

    def _browned_out(self) -> bool:
        return self._brownout_end() is not None

    def _fail(self, op: str, key: str) -> None:
        if self.flavour == "gs":
            raise gexc.ServiceUnavailable(f"{op} {key}: 503 Service Unavailable (simulated brownout)")
        raise OSError(5, f"{op} {key}: Input/output error (simulated)")

    def _after(self, op: str, key: str) -> None:
        """A write that landed during a brownout still reports the error to its caller."""
        if self._browned_out():
            self._fail(op, key)

    # ---------------------------------------------------------------- the Storage contract

    def create(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> bool:
        stalled = self._call("create", key, write=True)
        if key in self._objects:
            self._after("create", key)
            return False
        self._objects[key] = _Object(bytes(data), next(self._versions), dict(metadata or {}), self.sched.now)
        self.writes += 1
        if stalled:
            self.late_writes.append(("create", key))
        self._after("create", key)
        return True

    def swap(self, key: str, data: bytes, expected: int, *, metadata: Mapping[str, str] | None = None) -> int | None:
        stalled = self._call("swap", key, write=True)
        have = self._objects.get(key)
        if (have.version if have else 0) != expected:
            self._after("swap", key)
            return None
        version = next(self._versions)
        self._objects[key] = _Object(
            bytes(data), version, dict(metadata or {}), have.created if have else self.sched.now
        )
        self.writes += 1
        if stalled:
            self.late_writes.append(("swap", key))
        if have is not None and key.endswith(".claim"):
            self._note_takeover(have.data, data)
        self._after("swap", key)
        return version

    def _note_takeover(self, before: bytes, after: bytes) -> None:
        """Tell :attr:`on_taken_over` the pid of a task attempt whose unreleased claim another took over."""
        try:
            old, new = json.loads(before), json.loads(after)
        except ValueError:
            return
        was, now = (old.get("holder") or {}).get("pid"), (new.get("holder") or {}).get("pid")
        if was is not None and was != now and not old.get("released") and self.on_taken_over is not None:
            self.on_taken_over(was)

    def read(self, key: str) -> bytes | None:
        got = self.read_versioned(key)
        return None if got is None else got[0]

    def read_versioned(self, key: str) -> tuple[bytes, int] | None:
        self._call("read", key, write=False)
        o = self._objects.get(key)
        return None if o is None else (o.data, o.version)

    def stat(self, key: str) -> ObjectInfo | None:
        self._call("stat", key, write=False)
        o = self._objects.get(key)
        return None if o is None else ObjectInfo(len(o.data), o.version, dict(o.metadata))

    def open_input(self, key: str) -> Any | None:
        self._call("open", key, write=False)
        o = self._objects.get(key)
        return None if o is None else pa.BufferReader(o.data)

    def list(self, prefix: str = "") -> list[str]:
        self._call("list", prefix, write=False)
        now, lag = self.sched.now, self.terms.list_lag
        keys = sorted(self._objects)
        live = []
        for key in keys[bisect.bisect_left(keys, prefix) :]:
            if not key.startswith(prefix):
                break
            live.append(key)
        if not lag:
            return live
        # The folder as it was at ``seen`` (NFS attribute caching): newer objects are missing,
        # objects deleted since are still there.
        seen = now - self.rng.uniform(0.0, lag)
        out = {k for k in live if self._objects[k].created <= seen}
        out |= {
            k
            for k, created, deleted in self._gone
            if k.startswith(prefix) and created <= seen < deleted and k not in self._objects
        }
        self._gone = [g for g in self._gone if g[2] > now - lag]
        return sorted(out)

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if not keys:
            return
        stalled = self._call("delete", keys[0], write=True)
        for key in keys:
            o = self._objects.pop(key, None)
            if o is not None:
                self._gone.append((key, o.created, self.sched.now))
                if stalled:
                    self.late_writes.append(("delete", key))
        self._after("delete", keys[0])

    def delete_prefix(self, prefix: str) -> None:
        self.delete(self.list(prefix))

    # ---------------------------------------------------------------- the checker's view

    def keys(self) -> list[str]:
        return sorted(self._objects)
