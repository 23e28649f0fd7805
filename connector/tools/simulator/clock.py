"""A hybrid logical clock: the HLC timestamps of commits and resolved messages."""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass(frozen=True, order=True)
class HLC:
    """A CockroachDB HLC timestamp; ``str()`` is the changefeed form ``<wall ns>.<10-digit logical>``."""

    wall: int
    logical: int = 0

    def __str__(self) -> str:
        return "%d.%010d" % (self.wall, self.logical)


class Clock:
    """Commit timestamps in strictly increasing order, sometimes with the same wall time."""

    def __init__(self, rng: random.Random, start_wall: int) -> None:
        self._rng = rng
        self._now = HLC(start_wall, 0)

    def tick(self) -> HLC:
        if self._rng.random() < 0.15:
            self._now = HLC(self._now.wall, self._now.logical + 1)
        else:
            self._now = HLC(self._now.wall + self._rng.randint(1_000, 3_000_000), 0)
        return self._now

    @property
    def now(self) -> HLC:
        return self._now
