"""The driver's receiver: pulls from Pub/Sub, holds leases, acknowledges when asked.

It lives in Spark's long-lived driver-side Python process (the one that runs ``latestOffset``,
``partitions`` and ``commit``) and is built lazily there; nothing here is pickled. Its parts, in
the spirit of python-pubsub's ``subscriber/_protocol``, each own one job:

* :mod:`.pullers` pull (one thread per subscription and slot), sized by :mod:`.flow`;
* :mod:`.flow` bounds what is held by ``maxOutstandingMessages``/``Bytes``;
* the shared Pub/Sub parts (:mod:`..pubsub`): the leaser keeps held messages' leases alive (and
  knows until when they are proven), the acker is the one path for acknowledgements and
  hand-backs, the acknowledgements read Pub/Sub's answers by the one rule, the remembered ids
  drop Pub/Sub's redeliveries, and chunks are the unit all of them share.

This module wires them: it sorts each Pull's messages (new, a redelivery of a held one, a
redelivery of an acknowledged one, published after an AvailableNow cutoff), hands buffered
messages to the mode (:meth:`Receiver.take`), acknowledges (:meth:`Receiver.ack`) and shuts down
in one way (:meth:`Receiver.shutdown`). Nothing is acknowledged unless the mode asks, after Spark
committed the batch. It also keeps the evidence that a subscription is drained (each puller's
newest answer; see :meth:`Receiver.quiet_locked`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..metrics import Counters
from ..pubsub.acker import ACK, Acker, Job
from ..pubsub.acknowledgements import PROVEN_MEMORY_SECONDS, UNPROVEN_MEMORY_SECONDS, Acknowledgements, Answered
from ..pubsub.chunks import BUFFERED, DONE, LATER, SEALED, Chunk, sizes_of, total
from ..pubsub.concurrency import Concurrency
from ..pubsub.drained import Answer, Drain
from ..pubsub.held import Held
from ..pubsub.holding import Holding
from ..pubsub.leaser import Leaser
from ..pubsub.remembered import Remembered
from ..pubsub.subscription import ReceiverError, Subscription, open_subscription
from ..transport import AckResult, Rpc
from ..wire import body_lengths, largest_body, numbers, pulled_batch
from .flow import FlowControl, Reservation
from .pullers import PULLERS_PER_SUBSCRIPTION, Puller, Sent

log = logging.getLogger("crdb_pubsub.receiver")

__all__ = ["Receiver", "ReceiverError"]


class Receiver:
    """Pull-based receiver for one or more subscriptions.

    ``_cond``'s lock guards the held index (``_held``), the buffer, the AvailableNow ``_later``
    chunks, the evidence of drained subscriptions (``_drain``), the pullers and how many each
    subscription wants (``_pullers``, ``_concurrency``), the error state, the count of
    acknowledgement steps (``_acked_steps``), and each held chunk's ``ack_ids``/``stale``/``state``.
    It is never held across an RPC. Lock order: ``_cond``, then the flow control's, the leaser's or
    the remembered ids' lock (each a leaf); never the other way round.
    """

    def __init__(
        self,
        rpc: Rpc,
        subscriptions: Sequence[str],
        *,
        lease_seconds: int,
        max_lease_seconds: int,
        max_messages: int,
        max_bytes: int,
        endpoint_description: str = "Pub/Sub",
        counters: Counters | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rpc = rpc
        self._subs = list(subscriptions)
        self._lease_seconds = lease_seconds
        self._endpoint = endpoint_description
        self._clock = clock
        self.counters = counters or Counters()
        self.flow = FlowControl(max_messages, max_bytes, pullers=len(self._subs) * PULLERS_PER_SUBSCRIPTION)
        self._concurrency = {s: Concurrency(PULLERS_PER_SUBSCRIPTION, clock()) for s in self._subs}
        self._stopping = threading.Event()
        self._pullers: list[Puller] = []
        self._info: dict[str, Subscription] = {}

        self._cond = threading.Condition()
        # Leases, acknowledgements, hand-backs and the evidence that a subscription is drained
        # (its slots are the pullers), as both modes hold messages; under this receiver's lock.
        self.holding = Holding(
            rpc,
            self.counters,
            self._cond,
            lease_seconds=lease_seconds,
            max_lease_seconds=max_lease_seconds,
            clock=clock,
        )
        self._held = Held(self._subs)
        self._buffer: deque[Chunk] = deque()
        # Messages in the buffer, kept as it changes: the mode's wait predicates read it at every
        # Pull answered, with the lock held (summing the buffer there was quadratic in a backlog).
        self._buffered = 0
        self._later: list[Chunk] = []
        self._live: dict[Chunk, None] = {}  # every chunk held (not done), in the order received
        self._cutoff_us: int | None = None  # AvailableNow: later messages are held apart
        self._cutoff_at = 0.0  # monotonic time the cutoff was set: only Pulls sent since count
        self._ended = False  # the AvailableNow run ended: nothing more is pulled
        self._fatal: BaseException | None = None
        self._unavailable_since: float | None = None
        self._last_error: str | None = None
        self._pruned_at = 0.0
        # Steps that moved chunks from the held index to the remembered ids (ack): accept, which
        # looks ids up before the lock, checks it.
        self._acked_steps = 0

    # ------------------------------------------------------------------ lifecycle

    def open(self, *, create_on_topics: Sequence[str] | None = None, subscription_filter: str | None = None) -> None:
        """Check every subscription (creating it on its topic when asked).

        Raises :class:`ReceiverError` when Pub/Sub can't be reached within the start bound or
        refuses a subscription.
        """
        for i, sub in enumerate(self._subs):
            topic = create_on_topics[i] if create_on_topics else None
            self._info[sub] = open_subscription(
                self._rpc, sub, topic, subscription_filter, lease_seconds=self._lease_seconds, endpoint=self._endpoint
            )
        self.holding.open(self._info, proven_memory=PROVEN_MEMORY_SECONDS, unproven_memory=UNPROVEN_MEMORY_SECONDS)

    # The shared parts, by name (the mode and the tests reach them here).
    @property
    def acker(self) -> Acker:
        return self.holding.acker

    @property
    def leaser(self) -> Leaser:
        return self.holding.leaser

    @property
    def remembered(self) -> Remembered:
        return self.holding.remembered

    @property
    def acks(self) -> Acknowledgements | None:
        return self.holding.acks

    @property
    def _drain(self) -> Drain:
        return self.holding.drain

    def start(
        self,
        *,
        create_on_topics: Sequence[str] | None = None,
        subscription_filter: str | None = None,
        may_renew: Callable[[], bool] | None = None,
    ) -> None:
        """Start pulling (opening the subscriptions first unless :meth:`open` did).

        ``may_renew()``: whether leases may still be renewed (the stateDir still held: see
        :class:`..pubsub.leaser.Leaser`).
        """
        if self.acks is None:
            self.open(create_on_topics=create_on_topics, subscription_filter=subscription_filter)
        self.holding.start(may_renew=may_renew)
        for sub in self._subs:
            for i in range(PULLERS_PER_SUBSCRIPTION):
                p = Puller(self, self._rpc, self.flow, sub, i, self._stopping)
                p.start()
                self._pullers.append(p)

    def shutdown(self, *, hand_back: bool, within: float) -> float:
        """Stop the receiver, the one way to stop: no Pull, lease or hand-back lands after this returns.

        Stops issuing Pulls and lease renewals, waits for the Pulls in flight (what they bring is
        handed back at once: a Pull answered after the hand-back would take messages away from
        the next run for a whole lease), hands every held message back (``hand_back``) so that
        the next run gets them at once, and waits for what was queued to reach Pub/Sub. All of it
        within ``within`` seconds; whatever does not make it is delivered again when its lease
        lapses, as after a crash. Returns the wall time until which messages may still be leased
        (see :meth:`~..core.mode.Mode.shutdown`): the shadows it knows of when all of it made it
        (every Pull ended, every hand-back and acknowledgement answered, none failed), else ``inf``.
        """
        end = self._clock() + within
        self._stopping.set()
        self.flow.wake()
        with self._cond:
            self._cond.notify_all()
        renewing = not self.leaser.stop(timeout=min(1.0, within))
        # Keep a second of the budget for the hand-back itself.
        with self._cond:
            pullers = list(self._pullers)
        for p in pullers:
            p.thread.join(max(0.0, end - 1.0 - self._clock()))
        failed: list[int] = []  # hand-backs Pub/Sub refused, in part
        if hand_back:
            with self._cond:
                chunks = list(self._live)
            self._hand_back(chunks, total=max(0.5, end - self._clock()), on_done=lambda r: failed.append(len(r.failed)))
        _, flushed = self.holding.stop(max(0.0, end - self._clock()))
        with self._cond:
            still_held = bool(self._live)
        if renewing or any(p.thread.is_alive() for p in pullers) or not flushed or any(failed) or still_held:
            return float("inf")
        now, wall = self._clock(), time.time()
        with self._cond:
            shadow = self._drain.latest_shadow()
        return wall + (shadow - now) if shadow > now else 0.0

    # ------------------------------------------------------------------ pullers' side

    def wait_until_pulling(self, sub: str, slot: int = 0) -> bool:
        """Return False (after a short wait) while ``sub`` should not be pulled by ``slot``.

        An AvailableNow run that found it drained pulls nothing more from it, nor anything once it
        ended (what a Pull brings then is only handed back); nor, by a slot whose newest answer
        would prove it drained but for a shadow, before the shadow's end (:meth:`.Drain.idle_until`).
        """
        with self._cond:
            if not self._pulling_locked(sub):
                self._cond.wait(0.5)
                return False
            if self._cutoff_us is not None:
                left = self._drain.idle_until(sub, slot, self._cutoff_us) - self._clock()
                if left > 0:
                    self._cond.wait(min(0.5, left))
                    return False
        return not self._stopping.is_set()

    def still_pulling(self, sub: str) -> bool:
        """Whether a Pull of ``sub`` is still wanted, without waiting (see :meth:`wait_until_pulling`)."""
        with self._cond:
            return self._pulling_locked(sub) and not self._stopping.is_set()

    def _pulling_locked(self, sub: str) -> bool:
        return not (
            self._ended
            or (self._cutoff_us is not None and self._quiet(sub, self._cutoff_us, self._cutoff_at))  # drained
        )

    def sending(self, sub: str, puller: int = 0) -> Sent:
        """Return the :class:`Sent` of a Pull ``puller`` is about to send on ``sub``.

        When, and whether messages of an ordered subscription are outstanding (its answer then
        proves nothing about what waits).
        """
        info = self._info.get(sub)
        outstanding = False
        if info is not None and info.ordered:
            # Held messages, and acknowledgements and hand-backs not yet answered, hold their keys'
            # next ones back; those published after the cutoff hold back only later ones still (a
            # key's messages come in publish order).
            with self._cond:
                outstanding = self._held.holds_earlier(sub)
            outstanding = outstanding or self.acker.holding_back(sub)
        now = self._clock()
        with self._cond:
            # Once a Pull of this subscription timed out, an AvailableNow run asks with
            # return_immediately: a long Pull that timed out again would cast a new shadow.
            immediate = self._cutoff_us is not None and self._drain.shadowed(sub)
            self._drain.pulling(sub, puller, now)
        return Sent(now, outstanding, immediate)

    def timed_out(self, sub: str, sent: Sent, timeout: float, puller: int = 0) -> None:
        """Note that ``puller``'s Pull sent at ``sent`` timed out (or failed).

        Pub/Sub may have leased messages to nobody until its deadline plus the subscription's ack
        deadline.
        """
        with self._cond:
            self._drain.leased_at(sub, sent.at + timeout)
            self._drain.pull_ended(sub, puller)

    def accept(
        self, sub: str, response: Any, reservation: Reservation, puller: int = 0, sent: Sent | None = None
    ) -> int:
        """Sort one Pull response's messages and hold the new ones; return how many it brought.

        ``puller``: its slot; ``sent``: when its Pull was sent.
        """
        now = self._clock()
        sent = sent or Sent(now, False)
        info = self._info.get(sub)
        granted = float(info.ack_deadline if info else 10)
        proven = sent.at + granted  # Pub/Sub leased them at the earliest when the Pull was sent
        ack_ids, mids, batch = pulled_batch(response)  # for all messages: nearly every one is new
        if not mids:
            self.flow.cancel(reservation)
            self._answer(sub, puller, sent, None)
            return 0
        if self._stopping.is_set():
            # Handed back at once: a hand-back that fails leaves them leased to nobody for a
            # deadline, which the next process waits out (shutdown reports it).
            self.flow.cancel(reservation)
            self.holding.hand_back_ids(sub, ack_ids, total=2.0)
            return 0
        new: list[Chunk] = []
        oldest_in_answer = int(numbers(batch.column(2)).min())
        # Looked up before the lock (it is the costly part); looked up again under it if an
        # acknowledgement came between: its messages left the held index for the remembered ids.
        acked_steps = self._acked_steps
        seen = self.remembered.seen(sub, mids, now)
        with self._cond:
            if self._acked_steps != acked_steps:
                seen = self.remembered.seen(sub, mids, now)
            answer = self._held.sort(sub, mids, ack_ids, proven, seen)
            part = answer.part(batch, mids, ack_ids)
            if part is not None:
                new = self._split_by_scope(sub, *part, now, proven)
                for c in new:
                    if c.state == LATER:
                        self._later.append(c)
                    else:
                        self._buffer.append(c)
                        self._buffered += len(c)
                self._held.add(new, answer, proven)
            self._live.update(dict.fromkeys(new))
            # Every message counts, new or a redelivery: an answer made of redeliveries says
            # nothing about what else the subscription still holds.
            self._drain.answered(sub, puller, Answer(sent.at, oldest_in_answer, sent.outstanding))
            self._cond.notify_all()
        n_new, nbytes = total(new)
        # Every message of the response tells how large messages are, new or not.
        self.flow.settle(reservation, n_new, nbytes, largest_body(batch))
        self.counters.add("received", n_new)
        self.counters.add("redeliveredWhileHeld", answer.again)
        self.counters.add("redeliveriesDropped", len(answer.dropped))
        # The subscription's own deadline shorter than the lease we want (10 s, gcloud's default,
        # against 60): lengthened at once, before a slow batch elsewhere in this process lets it
        # lapse, by the leaser's thread: this puller's next Pull does not wait for that round trip,
        # and one renewal covers the answers that came meanwhile.
        short = granted < self._lease_seconds
        self.leaser.add(new, granted, renew_now=short)
        if short and answer.refreshed:
            self.leaser.renew_soon(answer.refreshed)  # a chunk twice is renewed once
        if answer.dropped:
            self.acker.submit(Job(ACK, sub, answer.dropped))
        return len(mids)

    def now(self) -> float:
        """Return the time on the receiver's clock (monotonic unless injected)."""
        return self._clock()

    def observed(self, sub: str, latency: float, service: float, messages: int, held_back: bool) -> None:
        """Learn from one answer of ``sub`` how many Pulls to keep in flight (:mod:`..pubsub.concurrency`).

        ``latency``: its round trip; ``service``: the CPU :meth:`accept` took; ``held_back``: its
        puller waited for room in the flow control first.
        """
        with self._cond:
            c = self._concurrency[sub]
            before = c.pullers
            wanted = c.answered(self._clock(), latency, service, messages, held_back)
            if wanted <= before or self._stopping.is_set():
                return
            new = [Puller(self, self._rpc, self.flow, sub, i, self._stopping) for i in range(before, wanted)]
            self.flow.set_pullers(sum(x.pullers for x in self._concurrency.values()))
            for p in new:  # started under the lock: shutdown joins every puller it lists
                p.start()
            self._pullers.extend(new)
            shortest = c.round_trip()
        log.info(
            "pulling %s with %d Pulls in flight (round trip %.1f ms, %.2f ms of sorting an answer)",
            sub,
            wanted,
            1000 * shortest,
            1000 * service,
        )

    def _split_by_scope(
        self, sub: str, batch: pa.RecordBatch, mids: list[str], acks: list[str], now: float, proven: float
    ) -> list[Chunk]:
        cutoff = self._cutoff_us
        if cutoff is not None:
            later = numbers(batch.column(2)) > cutoff
            if later.any():
                out = []
                for mask, state in ((~later, BUFFERED), (later, LATER)):
                    idx = np.flatnonzero(mask)
                    if not len(idx):
                        continue
                    part = batch.take(pa.array(idx))
                    c = self._chunk(sub, part, [mids[i] for i in idx], [acks[i] for i in idx], now, proven)
                    c.state = state
                    out.append(c)
                return out
        return [self._chunk(sub, batch, mids, acks, now, proven)]

    @staticmethod
    def _chunk(sub: str, batch: pa.RecordBatch, mids: list[str], acks: list[str], now: float, proven: float) -> Chunk:
        nbytes, largest = sizes_of(batch)
        return Chunk(sub, mids, acks, batch, nbytes, largest, now, proven_until=proven)

    def _answer(self, sub: str, puller: int, sent: Sent, oldest_new_us: int | None) -> None:
        with self._cond:
            self._drain.answered(sub, puller, Answer(sent.at, oldest_new_us, sent.outstanding))
            self._cond.notify_all()

    def fail(self, exc: BaseException, sub: str) -> None:
        log.error("pulling %s failed for good: %s", sub, exc)
        self.counters.add("pullErrors")
        with self._cond:
            self._fatal = exc
            self._cond.notify_all()

    def note_unavailable(self, exc: BaseException) -> None:
        self.counters.add("pullErrors")
        with self._cond:
            if self._unavailable_since is None:
                self._unavailable_since = self._clock()
                log.warning("Pub/Sub at %s unavailable, retrying with backoff: %s", self._endpoint, exc)
            self._last_error = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"

    def note_available(self) -> None:
        if self._unavailable_since is None:
            return
        with self._cond:
            if self._unavailable_since is not None:
                log.warning(
                    "Pub/Sub at %s reachable again after %.1f s",
                    self._endpoint,
                    self._clock() - self._unavailable_since,
                )
            self._unavailable_since = None

    # ------------------------------------------------------------------ the mode's side

    def take(self, max_messages: int | None = None, max_bytes: int | None = None) -> list[Chunk]:
        """Move up to the limits from the buffer, oldest first; taken chunks stay held and leased.

        At least one message is taken when any is buffered, however large, so a single message
        above ``max_bytes`` can't stall the stream.
        """
        out: list[Chunk] = []
        count = size = 0
        with self._cond:
            while self._buffer:
                c = self._buffer[0]
                n = len(c)
                if max_messages is not None:
                    n = min(n, max_messages - count)
                    if n <= 0:
                        break
                if max_bytes is not None and size + c.nbytes > max_bytes:
                    n = min(n, self._fit(c, max_bytes - size))
                    if n == 0:
                        if out:
                            break
                        n = 1
                if n < len(c):
                    self._split_head(c, n)
                    continue
                self._buffer.popleft()
                self._buffered -= len(c)
                c.state = SEALED
                out.append(c)
                count += len(c)
                size += c.nbytes
        return out

    @staticmethod
    def _fit(c: Chunk, room: int) -> int:
        assert c.batch is not None
        cum = np.cumsum(body_lengths(c.batch.column(0)))
        return int(np.searchsorted(cum, room, side="right"))

    def _split_head(self, c: Chunk, n: int) -> None:
        """Replace the buffer's first chunk by its first ``n`` messages and the rest (lock held)."""
        head, tail = c.split(n)
        self._buffer[0] = tail
        self._buffer.appendleft(head)
        self._held.add((head, tail))
        self._live.pop(c, None)
        self._live.update(dict.fromkeys((head, tail)))
        self.leaser.discard([c])
        for part in (head, tail):
            if not part.given_up:
                self.leaser.add_scheduled(part)
        c.state = DONE

    def ack(self, chunks: Sequence[Chunk], on_answered: Answered | None = None) -> int:
        """Acknowledge and release ``chunks`` (Spark committed them). Returns the message count.

        Pub/Sub's answers are read by the one rule (:mod:`..pubsub.acknowledgements`); the
        ledger learns through ``on_answered`` which acknowledgements were not proven.
        """
        assert self.acks is not None
        with self._cond:
            # Out of the held index and into the remembered ids in one step under the lock accept
            # sorts a Pull's answer by: a redelivery is held, or remembered, never neither.
            live = self._retire_locked(chunks)
            outgoing = self.acks.remember(live)
            self._acked_steps += 1  # last: an accept that read the count before finds them remembered
        n = self.acks.send(outgoing, on_answered)
        self.leaser.discard(live)
        # Their room is given back once their acknowledgements are queued, not before.
        self._give_room(live)
        return n

    def _retire_locked(self, chunks: Iterable[Chunk]) -> list[Chunk]:
        """Mark the chunks not done yet done, out of the held index; return them. Called with ``_cond`` held."""
        live: list[Chunk] = []
        for c in chunks:
            if c.state == DONE:
                continue
            c.state = DONE
            live.append(c)
            self._live.pop(c, None)
            self._held.remove(c)
        if self._clock() - self._pruned_at > 5.0:
            self._pruned_at = self._clock()
            self.remembered.prune(self._pruned_at)
        self._later = [c for c in self._later if c.state != DONE]
        self._cond.notify_all()
        return live

    def _give_room(self, chunks: list[Chunk]) -> None:
        m, b = total(chunks)
        self.flow.release(m, b)

    def _hand_back(
        self, chunks: Iterable[Chunk], total: float | None = None, on_done: Callable[[AckResult], None] | None = None
    ) -> int:
        with self._cond:
            chunks = list(chunks)
            # Published after the cutoff, they hold back only their keys' later messages (see sending).
            holds_keys = any(c.state != LATER for c in chunks)
            live = self._retire_locked(chunks)
        # Their room is given back once their hand-back is queued (those a renewal is in flight for
        # stay held until it landed): a puller given it before would hold more than
        # maxOutstandingMessages while this thread is off the CPU.
        return self.holding.hand_back(live, queued=self._give_room, holds_keys=holds_keys, total=total, on_done=on_done)

    def adopt(self, chunks: Sequence[Chunk]) -> None:
        """Hold messages recovered from an earlier process, as part of a planned batch.

        Their ack ids are stale: when Pub/Sub delivers them again, the new ack ids are attached, and
        only those are leased.
        """
        with self._cond:
            for c in chunks:
                c.state = SEALED
                self._live[c] = None
            self._held.add(chunks)
        m, b = total(chunks)
        self.flow.add(m, b, max((c.largest for c in chunks), default=0))
        # A stale chunk whose messages come back gets fresh ack ids: lease it like any other.
        self.leaser.add(list(chunks), float(self._lease_seconds))

    def requeue(self, chunks: Sequence[Chunk]) -> None:
        """Adopted chunks whose batch Spark never recorded, in their order: they go into the next batches.

        Before what is buffered: they were delivered before it, and on an ordered subscription
        what the pullers buffered meanwhile may be their keys' later messages.
        """
        with self._cond:
            for c in chunks:
                c.state = BUFFERED
                self._buffered += len(c)
            self._buffer.extendleft(reversed(chunks))
            self._cond.notify_all()

    # ------------------------------------------------------------------ AvailableNow and first fill

    def set_cutoff(self, publish_us: int | None) -> None:
        """Set the AvailableNow cutoff: messages published after ``publish_us`` are held apart.

        They are handed back when the run ends; a subscription found drained is pulled no more.
        """
        with self._cond:
            self._cutoff_us = publish_us
            self._cutoff_at = self._clock()
            self._ended = False
            self._cond.notify_all()

    def _quiet(self, sub: str, cutoff_us: int, since: float) -> bool:
        return self._drain.quiet(sub, range(self._concurrency[sub].pullers), cutoff_us, since)

    # Predicates for :meth:`wait`, evaluated with the lock held.

    def quiet_locked(self, cutoff_us: int, since: float) -> bool:
        """Return whether every subscription shows it delivered what was published until the cutoff.

        True when every subscription answered a Pull sent at or after ``since`` with no new message
        published at or before ``cutoff_us``, while nothing that would hold messages back was
        outstanding (an ordered subscription's held messages) and after any Pull that timed out
        could have leased messages to nobody: what was published until then has been delivered
        to us, as far as Pub/Sub can show.
        """
        return all(self._quiet(s, cutoff_us, since) for s in self._subs)

    def blocked_by_later_locked(self) -> bool:
        """AvailableNow: nothing buffered and no room to pull, all of it held by later messages."""
        return not self._buffer and bool(self._later) and self.flow.full()

    def hand_back_later(self) -> int:
        """AvailableNow: hand back what was published after the cutoff, to make room to pull the rest.

        Each is a delivery attempt, so it happens only when later messages fill the flow control
        and nothing shows the subscriptions drained. Returns how many.
        """
        with self._cond:
            later, self._later = self._later, []
        return self._hand_back(later)

    def buffered_count_locked(self) -> int:
        return self._buffered

    def buffered_for_locked(self) -> float:
        """How long the oldest buffered message has waited to be planned (0.0 when none is buffered)."""
        return self._clock() - self._buffer[0].first_received if self._buffer else 0.0

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` (evaluated with the lock held), an error, or ``timeout``."""
        end = self._clock() + timeout
        with self._cond:
            while not predicate():
                if self._fatal is not None:
                    return False
                left = end - self._clock()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.25))
            return True

    def buffered(self) -> tuple[int, int]:
        with self._cond:
            return total(self._buffer)

    def has_buffered(self) -> bool:
        with self._cond:
            return bool(self._buffer)

    def end_available_now(self, *, within: float) -> bool:
        """Stop pulling, hand back what was published after the cutoff and wait for every acknowledgement to be answered.

        At most ``within`` seconds. False when some were not answered in time.
        """
        with self._cond:
            later = list(self._later)
            self._cutoff_us = None
            self._ended = True
        if later:
            self._hand_back(later)
        return self.acker.flush(within)

    # ------------------------------------------------------------------ health and numbers

    def raise_if_failed(self) -> None:
        if self._fatal is not None:
            exc = self._fatal
            raise ReceiverError(
                f"pulling from Pub/Sub at {self._endpoint} failed: {type(exc).__name__}: {getattr(exc, 'message', exc)}"
            )

    def unavailable_for(self) -> float:
        since = self._unavailable_since
        return 0.0 if since is None else self._clock() - since

    def gauges(self) -> dict[str, Any]:
        """Held messages and lag, for progress reports and logs."""
        now_us = int(time.time() * 1_000_000)
        with self._cond:
            buffered, _ = total(self._buffer)
            later, _ = total(self._later)
            oldest = min((c.oldest_us for c in self._live if c.oldest_us is not None), default=None)
            out: dict[str, Any] = {
                "buffered": buffered,
                "inFlight": self.flow.held_messages - buffered - later,
                "laterHeld": later,
                "heldBytes": self.flow.held_bytes,
                "rememberedIds": self.remembered.count(),
                "oldestUnackedAgeSeconds": round((now_us - oldest) / 1e6, 3) if oldest is not None else 0.0,
            }
            if self._unavailable_since is not None:
                out["unavailableForSeconds"] = round(self._clock() - self._unavailable_since, 1)
                out["lastError"] = self._last_error
        return out
