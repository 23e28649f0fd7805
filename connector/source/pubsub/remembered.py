"""Message ids remembered after their acknowledgement, to recognise Pub/Sub's redeliveries.

Pub/Sub is at-least-once: an acknowledged message can be delivered again (a lost ack, or an ack
that reached Pub/Sub after the message's lease had lapsed, which a standard subscription answers
with OK all the same). Both receiver modes remember each acknowledged message id until its own
expiry (see :mod:`.acknowledgements` for how long), and drop or re-acknowledge a redelivery.

At 10,000 msg/s a 600 s window holds six million ids, so they are not Python objects: Pub/Sub
message ids are decimal numbers, kept as sorted ``int64`` arrays ("generations", one per
acknowledgement, merged as they accumulate) with one expiry each: 8 bytes an id. Ids that are not
plain decimal numbers below 10^18 (never seen from Pub/Sub, but possible) fall back to a dict.

The memory is bounded in time (each generation's expiry) and in size (:data:`MAX_REMEMBERED_IDS`
in all): past the bound the generations nearest their expiry are forgotten first, counted, and
logged once. :class:`IdSet` is the compact, picklable copy of one subscription's ids that travels
to the executors.

Thread-safe: ``_lock`` guards every field; it is a leaf lock (nothing else is taken under it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger("crdb_pubsub.remembered")

_POWERS_OF_TEN = np.array([10**k for k in range(19)], np.int64)  # an id's digit count: how many are <= it
MAX_GENERATIONS = 12  # per subscription; lookups cost one binary search per generation
# 20 million ids: 160 MB. An hour of failing acknowledgements at 5,000 msg/s stays within it.
MAX_REMEMBERED_IDS = 20_000_000


@dataclass(eq=False)
class Generation:
    """Ids remembered together, with one expiry (a handle :meth:`Remembered.forget` takes)."""

    ids: np.ndarray  # sorted, unique int64
    expires_at: float
    other: dict[str, float] = field(default_factory=dict)  # non-numeric ids (rare)

    def count(self) -> int:
        return len(self.ids) + len(self.other)


def numeric(mids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Return the ids as int64 where that is exact (digits only, no leading zero, < 10^18); the rest."""
    if not mids:
        return np.empty(0, np.int64), []
    joined = "".join(mids)
    if joined.isdigit() and max(map(len, mids)) <= 18:
        nums = np.array(mids, dtype=np.int64)
        # Canonical (no leading zero) exactly when each id has as many digits as characters; no id
        # has more digits than characters, so comparing the totals checks them all at once.
        if int(np.maximum(np.searchsorted(_POWERS_OF_TEN, nums, side="right"), 1).sum()) == len(joined):
            return nums, []
    ok = [m for m in mids if _canonical(m)]
    other = [m for m in mids if not _canonical(m)]
    return np.array(ok, dtype=np.int64), other


def _canonical(m: str) -> bool:
    return m.isdigit() and len(m) <= 18 and (m[0] != "0" or len(m) == 1)


def _merge_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union of two sorted unique arrays in linear time (a stable sort finds the two runs)."""
    c = np.concatenate((a, b))
    c.sort(kind="stable")
    keep = np.empty(len(c), dtype=bool)
    keep[:1] = True
    np.not_equal(c[1:], c[:-1], out=keep[1:])
    return c[keep]


def _member(sorted_ids: np.ndarray, nums: np.ndarray) -> np.ndarray:
    if not len(sorted_ids) or not len(nums):
        return np.zeros(len(nums), dtype=bool)
    pos = np.searchsorted(sorted_ids, nums)
    pos[pos >= len(sorted_ids)] = len(sorted_ids) - 1
    return sorted_ids[pos] == nums


@dataclass(frozen=True)
class IdSet:
    """A compact, picklable set of message ids (8 bytes an id): what an executor checks against."""

    nums: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # sorted, unique
    other: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.nums) + len(self.other)

    def mask(self, mids: Sequence[str]) -> np.ndarray:
        """Return, for each id, whether it is in the set."""
        if not len(self):
            return np.zeros(len(mids), dtype=bool)
        nums, other = numeric(mids)
        hit = _member(self.nums, nums)
        if not other:
            return hit
        out = np.empty(len(mids), dtype=bool)
        it = iter(hit.tolist())
        for i, m in enumerate(mids):
            out[i] = m in self.other if not _canonical(m) else next(it)
        return out

    @classmethod
    def of(cls, mids: Sequence[str]) -> IdSet:
        nums, other = numeric(list(mids))
        return cls(np.unique(nums), frozenset(other))

    def union(self, other: IdSet) -> IdSet:
        if not len(other):
            return self
        if not len(self):
            return other
        return IdSet(_merge_sorted(self.nums, other.nums), self.other | other.other)


class _Ids:
    """Ids of one subscription, in generations ordered by expiry."""

    def __init__(self) -> None:
        self.generations: list[Generation] = []

    def add(self, gen: Generation) -> None:
        i = len(self.generations)
        while i > 0 and self.generations[i - 1].expires_at > gen.expires_at:
            i -= 1
        self.generations.insert(i, gen)
        while len(self.generations) > MAX_GENERATIONS:
            self._merge_smallest_pair()

    def _merge_smallest_pair(self) -> None:
        gens = self.generations
        sizes = [gens[i].count() + gens[i + 1].count() for i in range(len(gens) - 1)]
        i = int(np.argmin(sizes))
        a, b = gens[i], gens[i + 1]
        # The merged generation lives as long as its longer-lived half: ids are kept a little
        # longer than their window, never shorter.
        other = dict(a.other)
        for m, t in b.other.items():
            other[m] = max(t, other.get(m, 0.0))
        gens[i : i + 2] = [Generation(_merge_sorted(a.ids, b.ids), max(a.expires_at, b.expires_at), other)]

    def live(self, now: float) -> list[Generation]:
        return [g for g in self.generations if g.expires_at > now]

    def prune(self, now: float) -> None:
        self.generations = self.live(now)

    def count(self) -> int:
        return sum(g.count() for g in self.generations)


class Remembered:
    """``(subscription, message id)`` pairs acknowledged recently, each with its own expiry."""

    def __init__(
        self,
        *,
        max_ids: int | None = None,
        on_evicted: Callable[[int], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import time

        self._lock = threading.Lock()
        self._subs: dict[str, _Ids] = {}
        self._max_ids = MAX_REMEMBERED_IDS if max_ids is None else max_ids
        self._on_evicted = on_evicted
        self._clock = clock or time.monotonic
        self._warned = False

    def add(self, sub: str, mids: Sequence[str], expires_at: float) -> Generation | None:
        """Remember ``mids`` until ``expires_at``; the handle :meth:`forget` takes (None if empty)."""
        if not len(mids):
            return None
        nums, other = numeric(mids)
        gen = Generation(np.unique(nums), expires_at, dict.fromkeys(other, expires_at))
        with self._lock:
            ids = self._subs.get(sub)
            if ids is None:
                ids = self._subs[sub] = _Ids()
            ids.add(gen)
            self._bound()
        return gen

    def forget(self, sub: str, gen: Generation | None) -> None:
        """Stop remembering one generation (if it was not merged into another meanwhile)."""
        if gen is None:
            return
        with self._lock:
            ids = self._subs.get(sub)
            if ids is not None and any(g is gen for g in ids.generations):
                ids.generations = [g for g in ids.generations if g is not gen]

    def _bound(self) -> None:
        total = sum(ids.count() for ids in self._subs.values())
        if total <= self._max_ids:
            return
        now = self._clock()
        for ids in self._subs.values():
            ids.prune(now)
        total = sum(ids.count() for ids in self._subs.values())
        evicted = 0
        while total > self._max_ids:
            # The generation nearest its expiry goes first: it would have been forgotten soonest.
            sub_ids = min(
                (ids for ids in self._subs.values() if ids.generations), key=lambda ids: ids.generations[0].expires_at
            )
            gen = sub_ids.generations.pop(0)
            total -= gen.count()
            evicted += gen.count()
        if evicted:
            if self._on_evicted is not None:
                self._on_evicted(evicted)
            if not self._warned:
                self._warned = True
                log.warning(
                    "more than %d acknowledged message ids to remember: the oldest are forgotten, and a "
                    "redelivery of one of them is read again (at-least-once)",
                    self._max_ids,
                )

    def seen(self, sub: str, mids: Sequence[str], now: float) -> list[bool]:
        """Return, for each id, whether it was acknowledged and is still remembered.

        One binary search per generation: the receive path asks this of every Pull response.
        """
        if not mids:
            return []
        with self._lock:
            ids = self._subs.get(sub)
            gens = ids.live(now) if ids is not None else []
        if not gens:
            return [False] * len(mids)
        nums, other = numeric(mids)
        hit = np.zeros(len(nums), dtype=bool)
        for g in gens:
            hit |= _member(g.ids, nums)
        if not other:
            return hit.tolist()
        found = {m for m in other if any(g.other.get(m, 0.0) > now for g in gens)}
        it = iter(hit.tolist())
        return [(m in found) if not _canonical(m) else next(it) for m in mids]

    def ids(self, sub: str, now: float) -> IdSet:
        """Return the live ids of ``sub`` as one compact set."""
        with self._lock:
            ids = self._subs.get(sub)
            gens = ids.live(now) if ids is not None else []
        if not gens:
            return IdSet()
        nums = gens[0].ids
        for g in gens[1:]:
            nums = _merge_sorted(nums, g.ids)
        other = frozenset(m for g in gens for m, t in g.other.items() if t > now)
        return IdSet(nums, other)

    def prune(self, now: float) -> None:
        with self._lock:
            for ids in self._subs.values():
                ids.prune(now)

    def nbytes(self) -> int:
        with self._lock:
            return sum(g.ids.nbytes + 100 * len(g.other) for ids in self._subs.values() for g in ids.generations)

    def count(self) -> int:
        with self._lock:
            return sum(ids.count() for ids in self._subs.values())
