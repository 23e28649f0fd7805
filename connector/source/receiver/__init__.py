"""The driver-side receiver: pulls from Pub/Sub, holds leases, acknowledges when asked.

It lives in Spark's long-lived driver-side Python process (the one that runs ``latestOffset``,
``partitions`` and ``commit``) and is built lazily there; nothing here is pickled. Its parts, in
the spirit of python-pubsub's ``subscriber/_protocol``, each own one job:

* :mod:`.pullers` pull (one thread per subscription and slot), sized by :mod:`.flow`;
* :mod:`.flow` bounds what is held by ``maxOutstandingMessages``/``Bytes``;
* :mod:`.leaser` keeps held messages' leases alive, up to ``maxLeaseDurationSeconds``;
* :mod:`.acker` is the one path to Pub/Sub for acknowledgements and hand-backs;
* :mod:`.history` remembers acknowledged message ids to drop Pub/Sub's redeliveries;
* :mod:`.chunks` is the unit all of them share: the messages of one Pull response.

This module wires them: it sorts each Pull's messages (new, a redelivery of a held one, a
redelivery of an acknowledged one, published after an AvailableNow cutoff), hands buffered
messages to the planner (:meth:`Receiver.take`), acknowledges (:meth:`Receiver.ack`) and shuts
down in one way (:meth:`Receiver.shutdown`). Nothing is acknowledged unless the planner asks,
after Spark committed the batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from ..metrics import Counters
from ..transport import AckResult, Rpc
from ..wire import body_lengths, largest_body, pulled_batch
from .acker import ACK, NACK, Acker, Job
from .chunks import BUFFERED, DONE, LATER, SEALED, Chunk, sizes_of, total
from .flow import FlowControl, Reservation
from .history import AckHistory
from .leaser import Leaser
from .pullers import PULLERS_PER_SUBSCRIPTION, Puller

if TYPE_CHECKING:  # pragma: no cover
    pass

log = logging.getLogger("crdb_pubsub.receiver")

DEDUPE_WINDOW_SECONDS = 600.0  # acknowledged ids Pub/Sub confirmed are remembered this long
# An acknowledgement Pub/Sub did not confirm (refused, unreachable, or sent with an ack id of an
# earlier process) will come back, possibly much later: remember it as long as Pub/Sub keeps
# messages (7 days at most).
UNCONFIRMED_MEMORY_SECONDS = 7 * 24 * 3600.0
START_TIMEOUT_SECONDS = 15.0


class ReceiverError(RuntimeError):
    """Pub/Sub refused us for good (missing subscription, permissions, unreachable at start)."""


AckCallback = Callable[[str, list[str], list[tuple[str, str]]], None]
"""``(subscription, confirmed message ids, [(unconfirmed message id, ack id)])``."""


class Receiver:
    """Pull-based receiver for one or more subscriptions.

    ``_cond``'s lock guards the held index (``_held``), the buffer, the AvailableNow ``_later``
    chunks, the scope and answers used to detect a drained subscription, the error state, and
    :attr:`history`. It is never held across an RPC.
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
        self.flow = FlowControl(max_messages, max_bytes)
        self.history = AckHistory()
        self.acker = Acker(rpc)
        self.leaser = Leaser(self._renew, lease_seconds=lease_seconds, max_lease_seconds=max_lease_seconds,
                             on_given_up=lambda n: self.counters.add("leasesExpired", n), clock=clock)
        self._stopping = threading.Event()
        self._pullers: list[Puller] = []
        self._sub_deadline: dict[str, int] = {}

        self._cond = threading.Condition()
        self._held: dict[str, dict[str, Chunk]] = {s: {} for s in self._subs}
        self._buffer: deque[Chunk] = deque()
        self._later: list[Chunk] = []
        self._live: set[Chunk] = set()  # every chunk held (not done)
        # Drain detection: the newest answer of each puller (subscription, slot), as (monotonic
        # time, oldest publish time of the messages it brought, or None when it brought none).
        # One puller's empty answer proves little while another's Pull may be bringing messages,
        # so a subscription is quiet only when all its pullers' newest answers are.
        self._answers: dict[tuple[str, int], tuple[float, int | None]] = {}
        self._cutoff_us: int | None = None  # AvailableNow: later messages are held apart
        self._fatal: BaseException | None = None
        self._unavailable_since: float | None = None
        self._last_error: str | None = None
        self._pruned_at = 0.0

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, create_on_topics: Sequence[str] | None = None, subscription_filter: str | None = None) -> None:
        """Check every subscription (creating it on its topic when asked), then start pulling.

        Raises :class:`ReceiverError` when Pub/Sub can't be reached within
        ``START_TIMEOUT_SECONDS`` or refuses a subscription.
        """
        for i, sub in enumerate(self._subs):
            topic = create_on_topics[i] if create_on_topics else None
            self._sub_deadline[sub] = self._check_subscription(sub, topic, subscription_filter)
        self.acker.start()
        self.leaser.start()
        for sub in self._subs:
            for i in range(PULLERS_PER_SUBSCRIPTION):
                p = Puller(self, self._rpc, self.flow, sub, i, self._stopping)
                p.start()
                self._pullers.append(p)

    def _check_subscription(self, sub: str, topic: str | None, wanted_filter: str | None = None) -> int:
        return open_subscription(self._rpc, sub, topic, wanted_filter, lease_seconds=self._lease_seconds,
                                 endpoint=self._endpoint)

    def shutdown(self, *, hand_back: bool, within: float) -> None:
        """The one way to stop: no Pull, lease or hand-back lands after this returns.

        Stops issuing Pulls and lease renewals, waits for the Pulls in flight (what they bring is
        handed back at once: a Pull answered after the hand-back would take messages away from
        the next run for a whole lease), hands every held message back (``hand_back``) so that
        the next run gets them at once, and waits for what was queued to reach Pub/Sub. All of it
        within ``within`` seconds; whatever does not make it is delivered again when its lease
        lapses, as after a crash.
        """
        end = self._clock() + within
        self._stopping.set()
        self.flow.wake()
        with self._cond:
            self._cond.notify_all()
        self.leaser.stop(timeout=min(1.0, within))
        # Keep a second of the budget for the hand-back itself.
        for p in self._pullers:
            p.thread.join(max(0.0, end - 1.0 - self._clock()))
        if hand_back:
            with self._cond:
                chunks = list(self._live)
            self._hand_back(chunks, total=max(0.5, end - self._clock()))
        self.acker.flush(max(0.0, end - self._clock()))
        self.acker.stop()

    # ------------------------------------------------------------------ pullers' side

    def wait_until_pulling(self, sub: str) -> bool:
        """False (after a short wait) while ``sub`` should not be pulled: an AvailableNow run that
        found it drained pulls nothing more from it."""
        with self._cond:
            if self._cutoff_us is not None and self._quiet(sub, self._cutoff_us, 0.0):
                self._cond.wait(0.5)
                return False
        return not self._stopping.is_set()

    def accept(self, sub: str, response: Any, reservation: Reservation, puller: int = 0) -> None:
        """Sort one Pull response's messages and hold the new ones (``puller``: its slot)."""
        now = self._clock()
        ack_ids, mids, batch = pulled_batch(response)  # for all messages: nearly every one is new
        if not mids:
            self.flow.cancel(reservation)
            self._answer(sub, puller, now, None)
            return
        if self._stopping.is_set():
            self.flow.cancel(reservation)
            self._rpc.modify_ack_deadline(sub, ack_ids, 0, total=2.0)
            return
        refreshed: list[str] = []
        dropped: list[str] = []
        new: list[Chunk] = []
        oldest_in_answer = int(batch.column(2).to_numpy().min())
        with self._cond:
            held = self._held[sub]
            seen = self.history.seen(sub, mids, now)
            keep: list[int] = []
            first: dict[str, int] = {}
            # The usual response: all new, none held or remembered, no id twice. Checked and
            # indexed by C loops; anything else is sorted message by message below.
            usual = not any(seen) and held.keys().isdisjoint(mids) and len(set(mids)) == len(mids)
            for i, mid in enumerate(() if usual else mids):
                c = held.get(mid)
                if c is not None:
                    c.refresh(mid, ack_ids[i])  # its newest ack id is the one that works now
                    refreshed.append(ack_ids[i])
                elif seen[i]:
                    dropped.append(ack_ids[i])
                elif mid in first:
                    refreshed.append(ack_ids[i])  # delivered twice in one response
                    ack_ids[first[mid]] = ack_ids[i]
                else:
                    first[mid] = i
                    keep.append(i)
            if usual or keep:
                everything = usual or len(keep) == len(mids)
                part = batch if everything else batch.take(pa.array(keep, pa.int64()))
                part_mids = mids if everything else [mids[i] for i in keep]
                part_acks = ack_ids if everything else [ack_ids[i] for i in keep]
                new = self._split_by_scope(sub, part, part_mids, part_acks, now)
                for c in new:
                    held.update(dict.fromkeys(c.message_ids, c))
                    if c.state == LATER:
                        self._later.append(c)
                    else:
                        self._buffer.append(c)
            self._live.update(new)
            # Every message counts, new or a redelivery: an answer made of redeliveries says
            # nothing about what else the subscription still holds.
            self._answers[(sub, puller)] = (now, oldest_in_answer)
            self._cond.notify_all()
        n_new, nbytes = total(new)
        # Every message of the response tells how large messages are, new or not.
        self.flow.settle(reservation, n_new, nbytes, largest_body(batch))
        self.counters.add("received", n_new)
        self.counters.add("redeliveredWhileHeld", len(refreshed))
        self.counters.add("redeliveriesDropped", len(dropped))
        granted = float(self._sub_deadline.get(sub, 10))
        if granted < self._lease_seconds:
            # The subscription's own deadline is shorter than the lease we want: lengthen it at
            # once, before a slow batch elsewhere in this process lets it lapse.
            fresh = [a for c in new for a in c.ack_ids] + refreshed
            self._renew(sub, fresh, self._lease_seconds)
            granted = float(self._lease_seconds)
        self.leaser.add(new, granted)
        if dropped:
            self.acker.submit(Job(ACK, sub, dropped))

    def _split_by_scope(self, sub: str, batch: pa.RecordBatch, mids: list[str], acks: list[str], now: float) -> list[Chunk]:
        cutoff = self._cutoff_us
        if cutoff is not None:
            later = batch.column(2).to_numpy() > cutoff
            if later.any():
                out = []
                for mask, state in ((~later, BUFFERED), (later, LATER)):
                    idx = np.flatnonzero(mask)
                    if not len(idx):
                        continue
                    part = batch.take(pa.array(idx))
                    c = self._chunk(sub, part, [mids[i] for i in idx], [acks[i] for i in idx], now)
                    c.state = state
                    out.append(c)
                return out
        return [self._chunk(sub, batch, mids, acks, now)]

    @staticmethod
    def _chunk(sub: str, batch: pa.RecordBatch, mids: list[str], acks: list[str], now: float) -> Chunk:
        nbytes, largest = sizes_of(batch)
        return Chunk(sub, mids, acks, batch, nbytes, largest, now)

    def _answer(self, sub: str, puller: int, now: float, oldest_new_us: int | None) -> None:
        with self._cond:
            self._answers[(sub, puller)] = (now, oldest_new_us)
            self._cond.notify_all()

    def _renew(self, sub: str, ack_ids: list[str], seconds: int) -> None:
        if not ack_ids:
            return
        result = self._rpc.modify_ack_deadline(sub, ack_ids, seconds)
        self.counters.add("leasesExtended", len(result.confirmed))
        if result.failed:
            log.warning("extending the lease of %d message(s) on %s failed (%s); they may be delivered again",
                        len(result.failed), sub, next(iter(result.failed.values())))

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
                log.warning("Pub/Sub at %s reachable again after %.1f s", self._endpoint,
                            self._clock() - self._unavailable_since)
            self._unavailable_since = None

    # ------------------------------------------------------------------ the planner's side

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
        held = self._held[c.sub]
        for part in (head, tail):
            for mid in part.message_ids:
                held[mid] = part
        self._live.discard(c)
        self._live.update((head, tail))
        self.leaser.discard([c])
        for part in (head, tail):
            if not part.given_up:
                self.leaser.add_scheduled(part)
        c.state = DONE

    def ack(self, chunks: Sequence[Chunk], on_done: AckCallback | None = None) -> int:
        """Acknowledge and release ``chunks`` (Spark committed them). Returns the message count.

        The requests go through the acker; when Pub/Sub answers, ``on_done`` learns per
        subscription which messages were confirmed and which were not (those stay remembered until
        :data:`UNCONFIRMED_MEMORY_SECONDS`, so their redeliveries are dropped).
        """
        now = self._clock()
        live = self._release(chunks, remember_until=now + DEDUPE_WINDOW_SECONDS)
        by_sub: dict[str, list[Chunk]] = {}
        for c in live:
            by_sub.setdefault(c.sub, []).append(c)
        n = 0
        for sub, cs in by_sub.items():
            ids, mid_of, stale = [], {}, []
            for c in cs:
                for i, (mid, a) in enumerate(zip(c.message_ids, c.ack_ids)):
                    ids.append(a)
                    mid_of[a] = mid
                    if i in c.stale:
                        stale.append(a)
            n += len(ids)
            self.acker.submit(Job(ACK, sub, ids, on_done=self._ack_answered(sub, mid_of, set(stale), on_done)))
        self.counters.add("acknowledged", n)
        return n

    def _ack_answered(self, sub: str, mid_of: dict[str, str], stale: set[str], on_done: AckCallback | None
                      ) -> Callable[[AckResult], None]:
        def done(result: AckResult) -> None:
            confirmed = [mid_of[a] for a in result.confirmed if a not in stale]
            unconfirmed = [(mid_of[a], a) for a in result.confirmed if a in stale]
            unconfirmed += [(mid_of[a], a) for a in result.failed]
            self.counters.add("ackConfirmed", len(confirmed))
            self.counters.add("ackStale", sum(1 for a in result.confirmed if a in stale))
            self.counters.add("ackFailed", len(result.failed))
            if unconfirmed:
                with self._cond:
                    self.history.add(sub, [m for m, _ in unconfirmed], self._clock() + UNCONFIRMED_MEMORY_SECONDS)
            if on_done is not None:
                on_done(sub, confirmed, unconfirmed)
        return done

    def _release(self, chunks: Iterable[Chunk], remember_until: float | None) -> list[Chunk]:
        """Mark chunks done, drop them from the held index and flow control (and, when they were
        acknowledged, remember their ids until ``remember_until``)."""
        live: list[Chunk] = []
        with self._cond:
            for c in chunks:
                if c.state == DONE:
                    continue
                c.state = DONE
                live.append(c)
                self._live.discard(c)
                held = self._held[c.sub]
                for mid in c.message_ids:
                    if held.get(mid) is c:
                        del held[mid]
                if not held:
                    self._held[c.sub] = {}  # a dict keeps its largest size: give a burst's back
                if remember_until is not None:
                    self.history.add(c.sub, c.message_ids, remember_until)
            if remember_until is not None and self._clock() - self._pruned_at > 5.0:
                self._pruned_at = self._clock()
                self.history.prune(self._pruned_at)
            self._later = [c for c in self._later if c.state != DONE]
            self._cond.notify_all()
        self.leaser.discard(live)
        m, b = total(live)
        self.flow.release(m, b)
        return live

    def _hand_back(self, chunks: Iterable[Chunk], total: float | None = None) -> int:
        live = self._release(chunks, remember_until=None)
        by_sub: dict[str, list[str]] = {}
        for c in live:
            by_sub.setdefault(c.sub, []).extend(c.fresh_ack_ids())
        for sub, ids in by_sub.items():
            self.acker.submit(Job(NACK, sub, ids, total=total))
        n = sum(len(c) for c in live)
        self.counters.add("handedBack", n)
        return n

    def adopt(self, chunks: Sequence[Chunk]) -> None:
        """Hold messages recovered from an earlier process, as part of a planned batch (their ack
        ids are stale: when Pub/Sub delivers them again, the new ack ids are attached, and only
        those are leased)."""
        with self._cond:
            for c in chunks:
                c.state = SEALED
                held = self._held.setdefault(c.sub, {})
                for mid in c.message_ids:
                    held[mid] = c
                self._live.add(c)
        m, b = total(chunks)
        self.flow.add(m, b, max((c.largest for c in chunks), default=0))
        # A stale chunk whose messages come back gets fresh ack ids: lease it like any other.
        self.leaser.add(list(chunks), float(self._lease_seconds))

    def requeue(self, chunks: Sequence[Chunk]) -> None:
        """Adopted chunks whose batch Spark never recorded: they go into the next batches."""
        with self._cond:
            for c in chunks:
                c.state = BUFFERED
                self._buffer.append(c)
            self._cond.notify_all()

    def remember(self, sub: str, message_ids: Sequence[str], expires_in: float) -> None:
        """Treat these messages as acknowledged for ``expires_in`` more seconds (recovered state)."""
        if expires_in <= 0:
            return
        with self._cond:
            self.history.add(sub, message_ids, self._clock() + expires_in)

    def resend_acks(self, sub: str, pairs: Sequence[tuple[str, str]], on_done: AckCallback | None = None) -> None:
        """Acknowledge again messages an earlier process could not get confirmed (their ack ids
        are probably stale; the messages are remembered until Pub/Sub delivers them again)."""
        if not pairs:
            return
        mid_of = {a: m for m, a in pairs}
        self.acker.submit(Job(ACK, sub, list(mid_of), on_done=self._ack_answered(sub, mid_of, set(mid_of), on_done)))

    # ------------------------------------------------------------------ AvailableNow and first fill

    def set_cutoff(self, publish_us: int) -> None:
        """AvailableNow: messages published after ``publish_us`` are held apart and handed back
        when the run ends; a subscription found drained is pulled no more."""
        with self._cond:
            self._cutoff_us = publish_us

    def _quiet(self, sub: str, cutoff_us: int, since: float) -> bool:
        for slot in range(PULLERS_PER_SUBSCRIPTION):
            answer = self._answers.get((sub, slot))
            if answer is None or answer[0] < since:
                return False
            oldest = answer[1]
            if oldest is not None and oldest <= cutoff_us:
                return False
        return True

    # Predicates for :meth:`wait`, evaluated with the lock held.

    def quiet_locked(self, cutoff_us: int, since: float) -> bool:
        """Every subscription answered, at or after ``since``, with no new message published at or
        before ``cutoff_us``: what was published until then has been delivered to us."""
        return all(self._quiet(s, cutoff_us, since) for s in self._subs)

    def blocked_by_later_locked(self) -> bool:
        """AvailableNow: nothing buffered and no room to pull, all of it held by later messages."""
        return not self._buffer and bool(self._later) and self.flow.full()

    def buffered_count_locked(self) -> int:
        return sum(len(c) for c in self._buffer)

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
        """Hand back what was published after the cutoff and wait for every acknowledgement to be
        answered (at most ``within`` seconds). False when some were not answered in time."""
        with self._cond:
            later = list(self._later)
            self._cutoff_us = None
        if later:
            self._hand_back(later)
        return self.acker.flush(within)

    # ------------------------------------------------------------------ health and numbers

    def raise_if_failed(self) -> None:
        if self._fatal is not None:
            exc = self._fatal
            raise ReceiverError(
                f"pulling from Pub/Sub at {self._endpoint} failed: {type(exc).__name__}: {getattr(exc, 'message', exc)}")

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
                "rememberedIds": self.history.count(),
                "oldestUnackedAgeSeconds": round((now_us - oldest) / 1e6, 3) if oldest is not None else 0.0,
            }
            if self._unavailable_since is not None:
                out["unavailableForSeconds"] = round(self._clock() - self._unavailable_since, 1)
                out["lastError"] = self._last_error
        return out


def open_subscription(rpc: Rpc, sub: str, topic: str | None, wanted_filter: str | None, *, lease_seconds: int,
                      endpoint: str) -> int:
    """Check ``sub`` (creating it on ``topic`` when given and missing); its ack deadline in seconds.

    Raises :class:`ReceiverError` when Pub/Sub refuses it or can't be reached.
    """
    from google.api_core import exceptions as gexc

    try:
        try:
            info = rpc.get_subscription(sub)
        except gexc.NotFound:
            if not topic:
                raise ReceiverError(
                    f"subscription {sub} does not exist at {endpoint}; create it, or set option "
                    "'topic' to have it created on that topic") from None
            try:
                info = rpc.create_subscription(sub, topic, max(10, min(600, lease_seconds)), wanted_filter)
                log.info("created subscription %s on %s", sub, topic)
            except gexc.AlreadyExists:
                info = rpc.get_subscription(sub)
            except gexc.NotFound:
                raise ReceiverError(
                    f"topic {topic} does not exist at {endpoint}, so subscription {sub} can't be created on it"
                ) from None
    except ReceiverError:
        raise
    except (gexc.PermissionDenied, gexc.Unauthenticated) as exc:
        raise ReceiverError(f"Pub/Sub refused access to {sub} at {endpoint}: {exc.message}") from None
    except gexc.InvalidArgument as exc:
        raise ReceiverError(f"Pub/Sub rejected subscription {sub}: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - transient errors outlasted the start deadline
        raise ReceiverError(
            f"cannot reach Pub/Sub at {endpoint} to open {sub} (gave up after "
            f"{START_TIMEOUT_SECONDS:.0f} s): {type(exc).__name__}: {getattr(exc, 'message', exc)}") from None
    have = getattr(info, "filter", "") or None
    if wanted_filter is not None and have != wanted_filter:
        # Pub/Sub filters can't be changed: reading it anyway would read other messages.
        raise ReceiverError(f"subscription {sub} exists with filter {have!r}, not the option's filter "
                            f"{wanted_filter!r}; filters are immutable: use another subscription name")
    return int(getattr(info, "ack_deadline_seconds", 0) or 10)
