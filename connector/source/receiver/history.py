"""Recently acknowledged message ids, kept compactly, to recognise Pub/Sub's redeliveries.

Pub/Sub is at-least-once: an acknowledged message can be delivered again (a lost ack, or an ack id
that was no longer valid). The receiver remembers each acknowledged message id until its own
expiry: the dedupe window after an acknowledgement Pub/Sub confirmed, much longer for one it did
not confirm (the message will come back, possibly hours later).

At 10,000 msg/s a 600 s window holds six million ids, so they are not Python objects: Pub/Sub
message ids are decimal numbers, kept as sorted ``int64`` arrays ("generations", one per
acknowledgement, merged as they accumulate) with one expiry each: 8 bytes an id. Ids that are not
plain decimal numbers below 10^18 (never seen from Pub/Sub, but possible) fall back to a dict.

Not thread-safe: the receiver's lock guards it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

_POWERS_OF_TEN = np.array([10**k for k in range(19)], np.int64)  # an id's digit count: how many are <= it
MAX_GENERATIONS = 12  # per subscription and kind; lookups cost one binary search per generation


@dataclass
class _Generation:
    ids: np.ndarray  # sorted, unique int64
    expires_at: float


def _numeric(mids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """The ids as int64 where that is exact (digits only, no leading zero, < 10^18); the rest."""
    if not mids:
        return np.empty(0, np.int64), []
    joined = "".join(mids)
    if joined.isdigit() and max(map(len, mids)) <= 18:
        nums = np.array(mids, dtype=np.int64)
        # Canonical (no leading zero) exactly when each id has as many digits as characters; no id
        # has more digits than characters, so comparing the totals checks them all at once.
        if int(np.maximum(np.searchsorted(_POWERS_OF_TEN, nums, side="right"), 1).sum()) == len(joined):
            return nums, []
    ok = [m for m in mids if m.isdigit() and len(m) <= 18 and (m[0] != "0" or len(m) == 1)]
    other = [m for m in mids if not (m.isdigit() and len(m) <= 18 and (m[0] != "0" or len(m) == 1))]
    return np.array(ok, dtype=np.int64), other


def _merge_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union of two sorted unique arrays in linear time (a stable sort finds the two runs)."""
    c = np.concatenate((a, b))
    c.sort(kind="stable")
    keep = np.empty(len(c), dtype=bool)
    keep[:1] = True
    np.not_equal(c[1:], c[:-1], out=keep[1:])
    return c[keep]


class _Ids:
    """Ids of one subscription with one kind of expiry, in generations ordered by expiry."""

    def __init__(self) -> None:
        self.generations: list[_Generation] = []
        self.other: dict[str, float] = {}

    def add(self, mids: Sequence[str], expires_at: float) -> None:
        nums, other = _numeric(mids)
        for m in other:
            self.other[m] = max(expires_at, self.other.get(m, 0.0))
        if not len(nums):
            return
        gen = _Generation(np.unique(nums), expires_at)
        i = len(self.generations)
        while i > 0 and self.generations[i - 1].expires_at > expires_at:
            i -= 1
        self.generations.insert(i, gen)
        while len(self.generations) > MAX_GENERATIONS:
            self._merge_smallest_pair()

    def _merge_smallest_pair(self) -> None:
        gens = self.generations
        sizes = [len(gens[i].ids) + len(gens[i + 1].ids) for i in range(len(gens) - 1)]
        i = int(np.argmin(sizes))
        a, b = gens[i], gens[i + 1]
        # The merged generation lives as long as its longer-lived half: ids are kept a little
        # longer than their window, never shorter.
        gens[i : i + 2] = [_Generation(_merge_sorted(a.ids, b.ids), max(a.expires_at, b.expires_at))]

    def contains(self, nums: np.ndarray, other: Sequence[str], now: float) -> tuple[np.ndarray, set[str]]:
        hit = np.zeros(len(nums), dtype=bool)
        for g in self.generations:
            if g.expires_at <= now or not len(g.ids):
                continue
            pos = np.searchsorted(g.ids, nums)
            pos[pos >= len(g.ids)] = len(g.ids) - 1
            hit |= g.ids[pos] == nums
        found = {m for m in other if self.other.get(m, 0.0) > now}
        return hit, found

    def prune(self, now: float) -> None:
        self.generations = [g for g in self.generations if g.expires_at > now]
        if self.other:
            self.other = {m: t for m, t in self.other.items() if t > now}

    def nbytes(self) -> int:
        return sum(g.ids.nbytes for g in self.generations) + 100 * len(self.other)

    def count(self) -> int:
        return sum(len(g.ids) for g in self.generations) + len(self.other)


class AckHistory:
    """``(subscription, message id)`` pairs acknowledged recently, each with its own expiry."""

    def __init__(self) -> None:
        self._subs: dict[str, _Ids] = {}

    def add(self, sub: str, mids: Sequence[str], expires_at: float) -> None:
        ids = self._subs.get(sub)
        if ids is None:
            ids = self._subs[sub] = _Ids()
        ids.add(mids, expires_at)

    def seen(self, sub: str, mids: Sequence[str], now: float) -> list[bool]:
        """For each id: was it acknowledged and is it still remembered?"""
        ids = self._subs.get(sub)
        if ids is None or not mids:
            return [False] * len(mids)
        nums, other = _numeric(mids)
        hit, found = ids.contains(nums, other, now)
        if not other:
            return hit.tolist()
        out: list[bool] = []
        it = iter(hit.tolist())
        other_set = set(other)
        for m in mids:
            out.append(m in found if m in other_set else next(it))
        return out

    def prune(self, now: float) -> None:
        for ids in self._subs.values():
            ids.prune(now)

    def nbytes(self) -> int:
        return sum(ids.nbytes() for ids in self._subs.values())

    def count(self) -> int:
        return sum(ids.count() for ids in self._subs.values())
