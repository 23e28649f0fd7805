"""Acknowledging committed messages, and the one rule by which Pub/Sub's answers are read.

Both receiver modes acknowledge through :class:`Acknowledgements` once Spark's commit of a batch
is proven. For each message, Pub/Sub's answer is one of two outcomes:

* **proven**: the message left the subscription. On an exactly-once subscription, Pub/Sub
  confirmed its ack id. On a standard one, the ack was answered OK *while the lease was proven
  alive* (:attr:`Chunk.proven_until`): a standard subscription also answers OK to an ack id whose
  lease lapsed, and then delivers the message again, so an OK alone proves nothing.
* **unproven**: refused, unreachable, answered late, or sent with an ack id of an earlier process.
  The message may come back, possibly hours later.

Every acknowledged id is remembered (:class:`.Remembered`) from the moment its ack is *sent*, so
a redelivery that races the answer is recognised, then: an unproven one for
``unproven_memory`` seconds (Pub/Sub keeps a message 7 days at most); a proven one for
``proven_memory`` seconds (the driver's receiver keeps a window, the executors' tasks are sent
only what may come back). The ledger learns each commit's unproven acks (``on_answered``), so a
new process remembers them too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..metrics import Counters
from ..transport import AckResult
from .acker import ACK, Acker, Job
from .chunks import Chunk
from .remembered import Generation, Remembered

# How long an acknowledged id is remembered before its answer arrives, at least (the acker's
# total deadline is 30 s; see transport.ACKNOWLEDGE).
ANSWER_WINDOW_SECONDS = 60.0
# The driver's receiver remembers a proven acknowledgement this long (Pub/Sub may still deliver
# again, rarely); an unproven one as long as Pub/Sub keeps a message (7 days at most).
PROVEN_MEMORY_SECONDS = 600.0
UNPROVEN_MEMORY_SECONDS = 7 * 24 * 3600.0

Answered = Callable[[list[tuple[str, str, str]]], None]
"""``on_answered(unproven)``: every ack of one commit was answered; ``(sub, message id, ack id)``
of those not proven."""


class Acknowledgements:
    """Sends acknowledgements through one :class:`Acker` and sorts the answers by the one rule.

    ``on_unproven(sub, chunks)`` learns that some acknowledgement on ``sub`` of ``chunks`` was not proven (its message
    may still be leased, holding an ordered key's next messages back).

    Thread-safe: answers arrive on the acker's thread; :class:`.Remembered` has its own lock, and
    ``_Commit`` collects one commit's answers under its own (leaf) lock.
    """

    def __init__(
        self,
        acker: Acker,
        remembered: Remembered,
        counters: Counters,
        *,
        exactly_once: set[str],
        proven_memory: float,
        unproven_memory: float,
        on_unproven: Callable[[str, Sequence[Chunk]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.acker = acker
        self.remembered = remembered
        self._counters = counters
        self._exactly_once = exactly_once
        self._proven_memory = proven_memory
        self._unproven_memory = unproven_memory
        self._on_unproven = on_unproven
        self._clock = clock

    def acknowledge(self, chunks: Sequence[Chunk], on_answered: Answered | None = None) -> int:
        """Acknowledge every message of ``chunks``; return how many.

        ``on_answered`` runs once every subscription's requests were answered.
        """
        return self.send(self.remember(chunks), on_answered)

    def remember(self, chunks: Sequence[Chunk]) -> Outgoing:
        """Count every message of ``chunks`` as acknowledged from now on; :meth:`send` sends them.

        Apart from :meth:`send` for a receiver that recognises redeliveries by what it holds too: it
        remembers the ids in the same step (under its lock) as they leave its held index, so that a
        redelivery is always one or the other; :meth:`send` then goes outside that lock.
        """
        by_sub: dict[str, list[Chunk]] = {}
        for c in chunks:
            if len(c):
                by_sub.setdefault(c.sub, []).append(c)
        now = self._clock()
        gens = {
            sub: self.remembered.add(
                sub, [m for c in cs for m in c.message_ids], now + max(self._proven_memory, ANSWER_WINDOW_SECONDS)
            )
            for sub, cs in by_sub.items()
        }
        return Outgoing(by_sub, gens)

    def send(self, outgoing: Outgoing, on_answered: Answered | None = None) -> int:
        """Send the acknowledgements :meth:`remember` prepared, with each message's ack ids as they are now."""
        commit = _Commit(len(outgoing.by_sub), on_answered)
        if not outgoing.by_sub:
            commit.done([])
            return 0
        n = 0
        for sub, cs in outgoing.by_sub.items():
            n += sum(len(c) for c in cs)
            ack_ids = [a for c in cs for a in c.all_ack_ids()]
            self.acker.submit(Job(ACK, sub, ack_ids, on_done=self._answer(sub, cs, outgoing.gens[sub], commit)))
        self._counters.add("acknowledged", n)
        return n

    def resend(self, sub: str, pairs: Sequence[tuple[str, str]]) -> None:
        """Acknowledge again messages an earlier process could not prove acknowledged.

        Their ack ids are probably stale, so the caller remembers the messages first (for
        ``unproven_memory``), before anything is pulled: a redelivery is then recognised.
        """
        if pairs:
            self.acker.submit(Job(ACK, sub, [a for _, a in pairs]))

    def _answer(
        self, sub: str, chunks: list[Chunk], gen: Generation | None, commit: _Commit
    ) -> Callable[[AckResult], None]:
        def done(result: AckResult) -> None:
            answered = self._clock()
            exactly_once = sub in self._exactly_once
            failed = result.failed
            unproven: list[tuple[str, str, str]] = []
            n_failed = n_late = 0
            for c in chunks:
                # The usual chunk: every ack id answered OK while its lease was proven alive.
                in_time = exactly_once or answered < c.proven_until
                if not failed and not c.stale and in_time:
                    continue
                for i, (m, a) in enumerate(zip(c.message_ids, c.ack_ids)):
                    gone = bool(failed) and c.failed(i, failed)
                    n_failed += gone
                    if gone or i in c.stale or not in_time:
                        unproven.append((sub, m, a))
                        n_late += not gone and i not in c.stale
            total = sum(len(c) for c in chunks)
            self._counters.add("ackConfirmed", total - len(unproven))
            self._counters.add("ackLate", n_late)
            self._counters.add("ackFailed", n_failed)
            self._counters.add("ackStale", sum(len(c.stale) for c in chunks))
            if unproven:
                self.remembered.add(sub, [m for _, m, _ in unproven], answered + self._unproven_memory)
                if self._on_unproven is not None:
                    self._on_unproven(sub, chunks)
            if not self._proven_memory:
                self.remembered.forget(sub, gen)
            commit.done(unproven)

        return done


@dataclass
class Outgoing:
    """Acknowledgements remembered and not yet sent (:meth:`Acknowledgements.remember`)."""

    by_sub: dict[str, list[Chunk]]
    gens: dict[str, Generation | None]


class _Commit:
    """Collects the per-subscription answers to one commit's acknowledgements."""

    def __init__(self, subs: int, on_answered: Answered | None) -> None:
        self._left = subs
        self._on_answered = on_answered
        self._unproven: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def done(self, unproven: list[tuple[str, str, str]]) -> None:
        with self._lock:
            self._unproven.extend(unproven)
            self._left -= 1
            if self._left > 0:
                return
        if self._on_answered is not None:
            self._on_answered(self._unproven)
