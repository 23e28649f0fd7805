"""Holding messages: the one machine both receiver modes (and a ``receiver=executors`` task) hold them with.

From its delivery until it leaves, a held message is leased (the :mod:`.leaser` renews it), and it
leaves in one of two ways, both through the :mod:`.acker`, the one path to Pub/Sub:

* **acknowledged** once Spark committed the batch that yielded it; the answers are read by the one
  rule of :mod:`.acknowledgements`, and the ids remembered (:mod:`.remembered`);
* **handed back** (ModifyAckDeadline 0) when it is not to be read now. A chunk a renewal is in
  flight for goes once the renewal landed (sent before, it could act after the hand-back and
  lease the messages to nobody). A hand-back that fails leaves its messages leased, to nobody,
  until the last lease asked for: a *shadow* on the evidence that the subscription is drained
  (:mod:`.drained`), as does an acknowledgement not proven, a Pull answered after its client gave
  up, and the leases of an earlier process of the query (:meth:`Holding.wait_out`).

The owner keeps what differs between the modes: where Pulls run, what is held for which batch, how
a batch is recorded. The driver's receiver and the executors' planner hold their messages with it;
a ``receiver=executors`` task, short-lived and on another host, still leases and hands back what it
pulled itself (:mod:`..executors.task`).

Times: leases are on the monotonic clock (``clock``); the evidence is on the owner's clock
(``evidence_clock``: the driver's receiver uses the monotonic one, the executors' planner wall time,
since its tasks report from other hosts).

Locks: ``lock`` is the owner's (a leaf to everything here but the owner's own state); it guards
:attr:`Holding.drain` and the chunks whose hand-back waits. The acker's, the leaser's and the
remembered ids' locks are never held while it is taken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..metrics import Counters
from ..transport import MODIFY_DEADLINE, AckResult, Rpc
from .acker import NACK, Acker, Job
from .acknowledgements import UNPROVEN_MEMORY_SECONDS, Acknowledgements
from .chunks import Chunk, by_subscription
from .drained import Drain
from .leaser import Leaser
from .pull import PULL_TIMEOUT_SECONDS
from .remembered import Remembered
from .subscription import Subscription

Queued = Callable[[list[Chunk]], None]
"""``queued(chunks)``: their hand-back is queued (their owner frees their room now)."""


class Holding:
    """Leases, acknowledgements, hand-backs and the shadows they leave, for the messages one owner holds."""

    def __init__(
        self,
        rpc: Rpc,
        counters: Counters,
        lock: Any,
        *,
        lease_seconds: int,
        max_lease_seconds: int,
        clock: Callable[[], float] = time.monotonic,
        evidence_clock: Callable[[], float] | None = None,
        name: str = "crdb-pubsub-leaser",
    ) -> None:
        self._rpc = rpc
        self._counters = counters
        self._lock = lock
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._evidence_clock = evidence_clock or clock
        self.subscriptions: dict[str, Subscription] = {}
        self.remembered = Remembered(on_evicted=lambda n: counters.add("rememberedEvicted", n), clock=clock)
        self.acker = Acker(rpc)
        self.leaser = Leaser(
            self._renew,
            lease_seconds=lease_seconds,
            max_lease_seconds=max_lease_seconds,
            on_given_up=lambda n: counters.add("leasesExpired", n),
            on_extended=lambda n: counters.add("leasesExtended", n),
            on_released=self._released,
            clock=clock,
            name=name,
        )
        self.drain = Drain({})  # the owner's lock guards it
        self.acks: Acknowledgements | None = None  # once the subscriptions are known
        self._waiting: dict[Chunk, Queued | None] = {}  # handed back once a renewal in flight landed
        self._unconfirmed: list[tuple[str, list[tuple[str, str]]]] = []  # an earlier process's, to send again

    def _renew(self, sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        return self._rpc.modify_ack_deadline(sub, ack_ids, seconds)

    def open(self, subscriptions: Mapping[str, Subscription], *, proven_memory: float, unproven_memory: float) -> None:
        """Know the subscriptions (their deadlines size the shadows; exactly-once ones prove acks)."""
        self.subscriptions = dict(subscriptions)
        with self._lock:
            self.drain = Drain({s: float(i.ack_deadline) for s, i in subscriptions.items()})
        self.acks = Acknowledgements(
            self.acker,
            self.remembered,
            self._counters,
            exactly_once={s for s, i in subscriptions.items() if i.exactly_once},
            proven_memory=proven_memory,
            unproven_memory=unproven_memory,
            on_unproven=self._unproven,
            clock=self._clock,
        )

    def recover(
        self,
        remembered: Iterable[tuple[str, list[str], float]],
        unconfirmed: Iterable[tuple[str, list[tuple[str, str]]]],
        leased_until: float,
    ) -> None:
        """Take over what an earlier process of the query left, before :meth:`start`.

        The ids it acknowledged, ``(sub, ids, seconds left of their window)``, are remembered that
        long. Those it could not prove acknowledged, ``(sub, [(id, ack id)])``, as long as Pub/Sub
        keeps a message, and are acknowledged again once started (their ack ids may still act).
        Its leases are waited out until wall time ``leased_until`` (:meth:`wait_out`).
        """
        now = self._clock()
        for sub, mids, expires_in in remembered:
            if expires_in > 0:
                self.remembered.add(sub, mids, now + expires_in)
        self._unconfirmed = list(unconfirmed)
        for sub, pairs in self._unconfirmed:
            self.remembered.add(sub, [m for m, _ in pairs], now + UNPROVEN_MEMORY_SECONDS)
        if leased_until > time.time():
            self.wait_out(leased_until)

    def start(self, *, may_renew: Callable[[], bool] | None = None) -> None:
        """Start acknowledging and renewing; ``may_renew()``: see :class:`.Leaser`."""
        assert self.acks is not None, "the subscriptions are not open"
        self.leaser.may_renew = may_renew
        self.acker.start()
        self.leaser.start()
        for sub, pairs in self._unconfirmed:
            self.acks.resend(sub, pairs)
        self._unconfirmed = []

    def stop(self, within: float) -> tuple[bool, bool]:
        """Stop renewing, let what is queued reach Pub/Sub (at most ``within`` s), stop the acker.

        Returns (no renewal is in flight any more, every request queued was answered).
        """
        end = self._clock() + within
        renewed = self.leaser.stop(timeout=min(1.0, within))
        flushed = self.acker.flush(max(0.0, end - self._clock()))
        self.acker.stop()
        return renewed, flushed

    @property
    def waiting(self) -> list[Chunk]:
        """The chunks whose hand-back waits for a renewal in flight: still held. The caller holds the owner's lock."""
        return list(self._waiting)

    # ------------------------------------------------------------------ handing back

    def hand_back(
        self,
        chunks: Iterable[Chunk],
        *,
        queued: Queued | None = None,
        holds_keys: bool = True,
        total: float | None = None,
        on_done: Callable[[AckResult], None] | None = None,
    ) -> int:
        """Stop leasing ``chunks`` and hand them back to Pub/Sub; return how many messages.

        ``queued(chunks)`` once their hand-back is queued: at once, or for those a renewal is in
        flight for, once it landed. ``holds_keys``: until answered, the hand-back holds back its
        ordering keys' next messages (see :attr:`.Job.holds_keys`); by default unless every chunk
        was published after an AvailableNow cutoff. ``total``: a tighter deadline (shutdown);
        ``on_done``: the answer to each request sent now.
        """
        chunks = list(chunks)
        if not chunks:
            return 0
        waiting = set(self.leaser.discard(chunks, handing_back=True))
        if waiting:
            with self._lock:
                self._waiting.update(dict.fromkeys(waiting, queued))
        ready = [c for c in chunks if c not in waiting]
        if ready:
            self._nack(ready, total=total, on_done=on_done, holds_keys=holds_keys)
            if queued is not None:
                queued(ready)
        n = sum(len(c) for c in chunks)
        self._counters.add("handedBack", n)
        return n

    def hand_back_ids(self, sub: str, ack_ids: list[str], *, total: float | None = None) -> None:
        """Hand back messages of ``sub`` held by no chunk (a Pull answered while the owner stops).

        Leased by their Pull only: one that fails leaves them leased an ack deadline from now.
        """
        if not ack_ids:
            return
        at = self._evidence_clock()

        def done(result: AckResult) -> None:
            if result.failed:
                with self._lock:
                    self.drain.leased_at(sub, at)

        self.acker.submit(Job(NACK, sub, ack_ids, on_done=done, total=total))

    def _released(self, chunks: list[Chunk]) -> None:
        # The leaser's thread: the renewal these waited for landed; hand them back now. They stay
        # waiting (held, their room taken) until their hand-back is queued.
        with self._lock:
            then = [(c, self._waiting.get(c)) for c in chunks]
        self._nack(chunks)
        with self._lock:
            for c in chunks:
                self._waiting.pop(c, None)
        for queued in {id(q): q for _, q in then if q is not None}.values():
            queued([c for c, q in then if q is queued])

    def _nack(
        self,
        chunks: list[Chunk],
        *,
        total: float | None = None,
        on_done: Callable[[AckResult], None] | None = None,
        holds_keys: bool = True,
    ) -> None:
        for sub, cs in by_subscription(chunks).items():
            ids = [a for c in cs for a in c.fresh_ack_ids()]
            done = self._handed_back(sub, self.leaser.leased_until(cs), on_done)
            self.acker.submit(Job(NACK, sub, ids, on_done=done, total=total, holds_keys=holds_keys))

    def _handed_back(
        self, sub: str, lease_until: float, then: Callable[[AckResult], None] | None
    ) -> Callable[[AckResult], None]:
        until = self._evidence(lease_until)

        def done(result: AckResult) -> None:
            if result.failed:
                # Not known to be handed back: leased to nobody until the last lease asked for.
                with self._lock:
                    self.drain.handed_back(sub, result.failed, until, self._evidence_clock())
            if then is not None:
                then(result)

        return done

    # ------------------------------------------------------------------ shadows

    def _unproven(self, sub: str, chunks: Sequence[Chunk]) -> None:
        # An acknowledgement not proven may leave its message leased (holding an ordered key's
        # next messages back) until its last lease ends, and at least an ack deadline from now:
        # no empty answer before then proves "drained".
        until = self._evidence(self.leaser.leased_until(chunks))
        with self._lock:
            self.drain.shadow(sub, until)
            self.drain.leased_at(sub, self._evidence_clock())

    def wait_out(self, leased_until: float) -> None:
        """Wait out what an earlier process leased: it may be held by nobody until wall time ``leased_until``.

        No later than a lease from now (a renewal it sent last acting up to its deadline later), or
        a Pull it had in flight (answered for the subscription's ack deadline): ``inf`` (it crashed)
        is as long as that. Until then no empty answer proves a subscription drained.
        """
        now, wall = self._evidence_clock(), time.time()
        window = self._lease_seconds + MODIFY_DEADLINE.total
        with self._lock:
            for sub, info in self.subscriptions.items():
                left = min(leased_until - wall, max(window, info.ack_deadline + PULL_TIMEOUT_SECONDS))
                if left > 0:
                    self.drain.shadow(sub, now + left)

    def _evidence(self, monotonic: float) -> float:
        """Return a time on the leases' clock as a time on the evidence's."""
        return self._evidence_clock() + (monotonic - self._clock())
