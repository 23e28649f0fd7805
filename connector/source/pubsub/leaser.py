"""The leaser: keeps the ack deadlines of held messages from lapsing, and knows until when they hold.

Each chunk is one lease group. Its lease is renewed (ModifyAckDeadline with ``lease_seconds``) at
a jittered point between 50 % and 70 % of the deadline it was last granted, and at least one second
before it lapses; the jitter keeps the renewals of chunks received together from landing at once.
``max_lease_seconds`` after the *first* receipt of a chunk it is given up: no further renewal, even
if Pub/Sub delivers some of its messages again, so Pub/Sub redelivers them (at-least-once) rather
than a stuck batch holding them forever.

A renewal *sets* when a lease ends (it may shorten it: a subscription's deadline longer than
``lease_seconds``), so it moves the chunk's *proven* lease (``Chunk.proven_until``) to
``sent + seconds`` (Pub/Sub applied the new deadline after the request was sent) when Pub/Sub
answered it before the proven lease ran out; otherwise (answered late, failed, no answer: it may
have acted all the same) the proof can only shrink to that, never grow: a standard subscription
answers OK to an expired ack id. It shrinks as the request is sent, not when it is answered: in
flight, the renewal may already have set the shorter lease. Both receiver modes and the executors'
tasks use this class.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from ..transport import REQUESTS_IN_FLIGHT, AckResult, chunk_ack_id_groups
from .chunks import DONE, Chunk

log = logging.getLogger("crdb_pubsub.leaser")

TICK_SECONDS = 0.1  # the finest step between renewal rounds
IDLE_SECONDS = 1.0  # the longest sleep between rounds (a round also looks for chunks to give up)
RENEW_FRACTION = (0.5, 0.7)
MIN_SLACK_SECONDS = 1.0

Renew = Callable[[str, list[str], int], AckResult]
"""``renew(subscription, ack ids, seconds)``: one ModifyAckDeadline, bounded in time."""


class Leaser:
    """Renews the leases of registered chunks from its own thread.

    A round (or an :meth:`extend`) larger than one request sends its requests from threads of that
    round, :data:`~..transport.REQUESTS_IN_FLIGHT` at most, and ends when every one was answered.

    A round visits only the chunks that are due (a queue ordered by ``renew_at``), and an
    :meth:`add` wakes the thread only when it brings a renewal due before the next round: a window
    of small answers holds thousands of chunks, and a scan of all of them at each answer cost more
    than sorting the answers.

    ``_lock`` guards ``_chunks``, ``_queue``, ``_next_round`` and each registered chunk's lease
    fields (``lease_until``, ``renew_at``, ``given_up``, ``proven_until``). It is never held
    across an RPC; no other lock is taken under it.
    """

    def __init__(
        self,
        renew: Renew,
        *,
        lease_seconds: int,
        max_lease_seconds: int,
        on_given_up: Callable[[int], None] = lambda n: None,
        on_extended: Callable[[int], None] = lambda n: None,
        on_released: Callable[[list[Chunk]], None] = lambda chunks: None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "crdb-pubsub-leaser",
        may_renew: Callable[[], bool] | None = None,
    ) -> None:
        self._renew = renew
        # ``may_renew()``: whether this process may still hold messages (its stateDir lease holds
        # by its own clock). A process that may not (it lost the stateDir to the query's next run,
        # or can no longer prove it holds it) sends no renewal: the next run waits out a lease and
        # a renewal's deadline from the moment it took the stateDir over, and no longer.
        self.may_renew = may_renew
        self._lease_seconds = lease_seconds
        self._max_lease_seconds = max_lease_seconds
        self._on_given_up = on_given_up
        self._on_extended = on_extended
        # ``on_released(chunks)``: chunks whose hand-back waited for a renewal of theirs in flight
        # (sent first, it could act last and lease them to nobody): hand them back now.
        self._on_released = on_released
        self._flying: dict[Chunk, int] = {}  # chunks in a renewal in flight, how many
        self._returned: set[Chunk] = set()  # of those, the ones handed back meanwhile
        self._clock = clock
        self._name = name
        self._lock = threading.Lock()
        self._chunks: dict[Chunk, None] = {}  # the chunks leased here
        # (renew_at, sequence, chunk), one entry each time a chunk's renew_at is set; an entry whose
        # time is no longer its chunk's, or whose chunk is no longer leased, is skipped. Renewals
        # go out by time, then in the order they were scheduled: the same in every run (the
        # sequence, not the chunks' addresses, breaks ties).
        self._queue: list[tuple[float, int, Chunk]] = []
        self._sequence = itertools.count()
        self._next_round = float("inf")  # when the thread's next round starts unless woken sooner
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and by what is due before _next_round
        self._thread: threading.Thread | None = None
        self._warned = False

    def _schedule(self, c: Chunk, granted: float, now: float) -> None:
        c.lease_until = now + granted
        c.renew_at = min(now + granted * random.uniform(*RENEW_FRACTION), c.lease_until - MIN_SLACK_SECONDS)

    def add(self, chunks: list[Chunk], granted: float, *, renew_now: bool = False) -> None:
        """Start leasing ``chunks``, whose deadline Pub/Sub set to ``granted`` seconds from now.

        ``renew_now``: renew at the next tick (e.g. chunks another process leased until now).
        """
        now = self._clock()
        with self._lock:
            for c in chunks:
                self._schedule(c, granted, now)
                if renew_now:
                    c.renew_at = now
                self._chunks[c] = None
                self._enqueue(c)
            wake = self._due_before_next_round(chunks)
        if wake:
            self._wake.set()

    def leased_elsewhere(self, chunks: Iterable[Chunk], until: float) -> None:
        """Note that another process (a task) may have leased ``chunks`` until ``until`` (this clock).

        :meth:`leased_until` counts it: a hand-back that fails leaves them leased that long.
        """
        with self._lock:
            for c in chunks:
                c.lease_until = max(c.lease_until, until)

    def renew_soon(self, chunks: Iterable[Chunk]) -> None:
        """Renew ``chunks`` (those leased here) in the next round, which starts at once.

        E.g. chunks delivered again while held, whose new ack ids have the subscription's deadline.
        """
        now = self._clock()
        with self._lock:
            for c in chunks:
                if c in self._chunks and c.renew_at > now:
                    c.renew_at = now
                    self._enqueue(c)
        self._wake.set()

    def add_scheduled(self, chunk: Chunk) -> None:
        """Lease a chunk that already carries its lease state (one half of a split chunk)."""
        with self._lock:
            self._chunks[chunk] = None
            self._enqueue(chunk)
            wake = self._due_before_next_round([chunk])
        if wake:
            self._wake.set()

    def _enqueue(self, c: Chunk) -> None:
        heapq.heappush(self._queue, (c.renew_at, next(self._sequence), c))

    def _due_before_next_round(self, chunks: list[Chunk]) -> bool:
        return any(c.renew_at < self._next_round for c in chunks)

    def discard(self, chunks: list[Chunk], *, handing_back: bool = False) -> list[Chunk]:
        """Stop leasing ``chunks``.

        ``handing_back``: their owner hands them back to Pub/Sub. Returns those a renewal is in
        flight for: their owner hands them back only once ``on_released`` gives them (when the
        renewal was answered or timed out), so that no renewal acts after the hand-back.
        """
        held: list[Chunk] = []
        with self._lock:
            for c in chunks:
                self._chunks.pop(c, None)
                if handing_back and c in self._flying:
                    self._returned.add(c)
                    held.append(c)
            self._compact_locked()
        return held

    def _compact_locked(self) -> None:
        """Drop the queue's entries of chunks no longer leased once they are most of it.

        Their entries would otherwise keep acknowledged chunks (their ack ids) alive until their
        renewal time, up to most of a lease after the acknowledgement.
        """
        # Rebuilt once the stale entries outnumber the live ones (plus two): the cost, the queue's
        # length, is spread over as many discards, and at most a few chunks stay pinned.
        if len(self._queue) > 2 * len(self._chunks) + 2:
            self._queue = [e for e in self._queue if e[2] in self._chunks and e[0] == e[2].renew_at]
            heapq.heapify(self._queue)

    def leased_until(self, chunks: Iterable[Chunk]) -> float:
        """Return the latest time (on this leaser's clock) until which ``chunks`` may be leased."""
        with self._lock:
            return max((c.lease_until for c in chunks), default=0.0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop renewing: no renewal round starts after this returns.

        Waits up to ``timeout`` for a round in flight. Returns whether none is in flight any more
        (else a renewal sent before may still act after a hand-back that follows).
        """
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            flying = bool(self._flying)
        return not flying and not (self._thread is not None and self._thread.is_alive())

    def extend(self, chunks: list[Chunk], seconds: int) -> None:
        """Renew ``chunks`` now, from the caller's thread (e.g. before it records or hands them over)."""
        with self._lock:
            for c in chunks:
                self._flying[c] = self._flying.get(c, 0) + 1
        by_sub: dict[str, list[Chunk]] = {}
        for c in chunks:
            by_sub.setdefault(c.sub, []).append(c)
        self._send_all(by_sub, seconds)

    def _run(self) -> None:
        # A round runs when the earliest renewal is due (not sooner than a tick apart, not later
        # than IDLE_SECONDS), or at once when something due sooner is added (_next_round).
        sleep = TICK_SECONDS
        while True:
            self._wake.wait(sleep)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._tick()
            except Exception:
                log.exception("lease renewal round failed")
                with self._lock:
                    self._next_round = self._clock() + IDLE_SECONDS
            sleep = max(0.0, self._next_round - self._clock())

    def _tick(self) -> None:
        """Renew what is due; set when the next round starts (``_next_round``)."""
        now = self._clock()
        due: dict[str, list[Chunk]] = {}
        given_up = 0
        queue = self._queue
        renewed: list[Chunk] = []
        may = self.may_renew is None or self.may_renew()  # before the lock: it takes the stateDir lease's
        with self._lock:
            while queue and queue[0][0] <= now:
                at, _, c = heapq.heappop(queue)
                if at != c.renew_at or c not in self._chunks:
                    continue  # rescheduled since (another entry has its time), or no longer leased
                if c.state == DONE:
                    del self._chunks[c]
                    continue
                if c.given_up:
                    continue
                if now - c.first_received + self._lease_seconds > self._max_lease_seconds:
                    c.given_up = True
                    given_up += len(c)
                    del self._chunks[c]
                    continue
                if not may:
                    c.renew_at = now + IDLE_SECONDS  # its lease runs down; looked at again then
                    renewed.append(c)
                    continue
                due.setdefault(c.sub, []).append(c)
                self._flying[c] = self._flying.get(c, 0) + 1  # in flight from now: see discard()
                self._schedule(c, float(self._lease_seconds), now)
                renewed.append(c)
            for c in renewed:  # queued after the loop: a lease as short as its slack is due again at once
                self._enqueue(c)
            while queue and (queue[0][0] != queue[0][2].renew_at or queue[0][2] not in self._chunks):
                heapq.heappop(queue)
            left = queue[0][0] - now if queue else IDLE_SECONDS
            self._next_round = now + min(IDLE_SECONDS, max(TICK_SECONDS, left))
        if given_up:
            self._on_given_up(given_up)
            if not self._warned:
                self._warned = True
                log.warning(
                    "messages held longer than maxLeaseDurationSeconds=%d: their leases are no longer extended and "
                    "Pub/Sub will deliver them again (at-least-once)",
                    self._max_lease_seconds,
                )
        if self._stop.is_set():
            self._landed([c for cs in due.values() for c in cs])
            return
        self._send_all(due, self._lease_seconds)

    def _send_all(self, by_sub: dict[str, list[Chunk]], seconds: int) -> None:
        """Renew ``by_sub``'s chunks (noted in flight), in requests of whole chunks sent at once.

        Chunks received together come due together: a backlog held over its first renewal is
        hundreds of requests, which from one thread, each waiting its round trip, would take
        seconds while the last leases lapse.
        """
        requests = [
            (sub, part)
            for sub, chunks in by_sub.items()
            for part in chunk_ack_id_groups(chunks, lambda c: c.fresh_ack_ids())
        ]
        if len(requests) <= 1:
            for sub, part in requests:
                self._send(sub, part, seconds)
            return
        todo = deque(requests)
        errors: list[Exception] = []

        def sender() -> None:
            while todo:
                try:
                    sub, part = todo.popleft()
                except IndexError:  # another sender took the last one
                    return
                try:
                    self._send(sub, part, seconds)
                except Exception as exc:  # noqa: BLE001 - raised in the caller's thread below
                    errors.append(exc)

        senders = [
            threading.Thread(target=sender, name=f"{self._name}-request-{i}", daemon=True)
            for i in range(min(REQUESTS_IN_FLIGHT, len(requests)))
        ]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        if errors:  # a request's refusal is reported per ack id: this is a bug's, raised as before
            raise errors[0]

    def wait_landed(self, chunks: list[Chunk], timeout: float) -> bool:
        """Wait until no renewal of ``chunks`` is in flight (at most ``timeout``); whether none is."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                if not any(c in self._flying for c in chunks):
                    return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)

    def _landed(self, chunks: list[Chunk]) -> None:
        """Note that the renewal of ``chunks`` ended; give back (``on_released``) those handed back meanwhile."""
        with self._lock:
            returned = [c for c in chunks if c in self._returned]
            for c in chunks:
                self._flying[c] -= 1
                if not self._flying[c]:
                    del self._flying[c]
                    self._returned.discard(c)
        if returned:  # outside the lock: the owner takes its own
            self._on_released(returned)

    def _send(self, sub: str, chunks: list[Chunk], seconds: int) -> None:
        """Renew ``chunks``, noted in flight by the caller, in one request (when they fit one)."""
        ids = [a for c in chunks for a in c.fresh_ack_ids()]
        if not ids:
            self._landed(chunks)
            return
        sent = self._clock()
        with self._lock:
            for c in chunks:
                c.proven_until = min(c.proven_until, sent + seconds)  # it may act from now on
        result: AckResult | None = None
        try:
            result = self._renew(sub, ids, seconds)
        finally:
            answered = self._clock()
            with self._lock:
                # Whether or not it was answered, it may have taken effect as late as now: the
                # lease may last this long. Recorded before a hand-back that waited for it goes
                # (``_landed``): one that fails leaves the message leased until then.
                for c in chunks:
                    c.lease_until = max(c.lease_until, answered + seconds)
            self._landed(chunks)
        failed = result.failed
        extended = 0
        with self._lock:
            for c in chunks:
                if c.state == DONE:
                    continue  # acknowledged or handed back meanwhile: its renewal proves nothing more
                mine = c.fresh_ack_ids()
                # Extended when, of each message, an ack id was (the others are earlier deliveries').
                ok = not failed or not any(c.failed(i, failed) for i in range(len(c)) if i not in c.stale)
                if ok:
                    extended += len(mine)
                if ok and answered < c.proven_until:
                    c.proven_until = sent + seconds
        self._on_extended(extended)
        if failed:
            log.warning(
                "extending the lease of %d message(s) on %s failed (%s); they may be delivered again",
                len(failed),
                sub,
                next(iter(failed.values())),
            )
