"""Flow control: what the receiver holds stays within ``maxOutstandingMessages``/``Bytes``.

Everything the receiver holds counts: buffered messages, messages in planned but unacknowledged
batches, and (AvailableNow) messages published after the cutoff that wait to be handed back. Pulls
in flight reserve their room first, so several pullers can't overshoot together.

Pub/Sub's Pull takes a message count, not a byte budget, so a Pull is sized by both: the count
room, and the byte room divided by the largest message seen in recent Pulls. Nothing is ever handed
back for lack of room (each hand-back is a redelivery and a delivery attempt): a Pull whose
messages turn out larger than any seen before may overshoot the byte bound by that difference,
once, and pulling then waits until room is freed. Before the first message size is known, each
puller asks for ``FIRST_PULL_MESSAGES``. A Pull asks for at most its puller's share of the bounds
(the bounds divided by the pullers): one puller's long Pull must not hold all the room while the
others, with none, can't pull (an AvailableNow run then waits for their answers).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, replace

from ..pubsub.pull import FIRST_PULL_MESSAGES, MAX_PULL_MESSAGES

SIZE_MEMORY = 8  # the byte estimate is the largest message of the last N Pulls


@dataclass(frozen=True)
class Reservation:
    messages: int
    bytes: int
    held_back: bool = False  # it waited for room: its Pull went out at the flow control's pace


class FlowControl:
    """Counts held messages and bytes; sizes and admits Pulls.

    ``_cond``'s lock guards every field: ``held_messages``, ``held_bytes``, ``_reserved_*``,
    ``_recent_max``. Waiters are woken whenever room is freed.
    """

    def __init__(self, max_messages: int, max_bytes: int, *, pullers: int = 1) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._share_messages = -(-max_messages // max(1, pullers))
        self._share_bytes = -(-max_bytes // max(1, pullers))
        self._cond = threading.Condition()
        self.held_messages = 0
        self.held_bytes = 0
        self._reserved_messages = 0
        self._reserved_bytes = 0
        # Pulls sent before any size was known reserve no bytes; once a size is known they count
        # at that size, or two pullers' first Pulls would overshoot the byte bound together.
        self._reserved_unsized = 0
        self._recent_max: deque[int] = deque(maxlen=SIZE_MEMORY)

    def set_pullers(self, pullers: int) -> None:
        """Share the bounds among ``pullers`` from now on (the receiver started more)."""
        with self._cond:
            self._share_messages = -(-self.max_messages // max(1, pullers))
            self._share_bytes = -(-self.max_bytes // max(1, pullers))

    def _estimate(self) -> int | None:
        return max(self._recent_max) if self._recent_max else None

    def _size(self) -> Reservation | None:
        count_room = self.max_messages - self.held_messages - self._reserved_messages
        byte_room = self.max_bytes - self.held_bytes - self._reserved_bytes
        if count_room <= 0:
            return None
        estimate = self._estimate()
        if estimate is None:
            # Until a Pull has told us how large messages are, ask for few at a time.
            return Reservation(min(count_room, FIRST_PULL_MESSAGES, self._share_messages), 0)
        byte_room -= self._reserved_unsized * estimate
        estimate = max(1, estimate)
        share = max(1, self._share_bytes // estimate)  # a message larger than a share still fits the room
        n = min(count_room, MAX_PULL_MESSAGES, self._share_messages, share, max(0, byte_room) // estimate)
        if n <= 0:
            if self.held_messages == 0 and self._reserved_messages == 0:
                # A lone message larger than the whole budget must still move.
                return Reservation(1, estimate)
            return None
        return Reservation(n, n * estimate)

    def reserve(self, stopping: threading.Event, wait: float = 0.5) -> Reservation | None:
        """Block until a Pull fits; reserve its room. ``None`` once ``stopping`` is set.

        The reservation is ``held_back`` when there was no room at first: a wait for this lock
        alone (other threads, the GIL) is not the flow control holding the Pull back.
        """
        waited = False
        with self._cond:
            while not stopping.is_set():
                r = self._size()
                if r is not None:
                    self._reserved_messages += r.messages
                    self._reserved_bytes += r.bytes
                    if not r.bytes:
                        self._reserved_unsized += r.messages
                    return replace(r, held_back=True) if waited else r
                waited = True
                self._cond.wait(wait)
            return None

    def settle(self, r: Reservation, messages: int, nbytes: int, largest: int) -> None:
        """Settle an answered Pull: its reservation becomes what it really brought (``messages`` kept)."""
        with self._cond:
            self._reserved_messages -= r.messages
            self._reserved_bytes -= r.bytes
            if not r.bytes:
                self._reserved_unsized -= r.messages
            self.held_messages += messages
            self.held_bytes += nbytes
            if largest:
                self._recent_max.append(largest)
            self._cond.notify_all()

    def cancel(self, r: Reservation) -> None:
        self.settle(r, 0, 0, 0)

    def add(self, messages: int, nbytes: int, largest: int) -> None:
        """Messages held without a Pull (recovered from a previous process)."""
        with self._cond:
            self.held_messages += messages
            self.held_bytes += nbytes
            if largest:
                self._recent_max.append(largest)
            self._cond.notify_all()

    def release(self, messages: int, nbytes: int) -> None:
        """Messages no longer held (acknowledged or handed back)."""
        if not messages:
            return
        with self._cond:
            self.held_messages -= messages
            self.held_bytes -= nbytes
            self._cond.notify_all()

    def full(self) -> bool:
        with self._cond:
            return self._size() is None and not self._reserved_messages

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
