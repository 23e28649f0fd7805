"""Pub/Sub as its contract allows it to behave, for the simulation (on :mod:`.scheduler`'s clock).

Only the freedoms the service documents (Pub/Sub's subscriber overview, exactly-once delivery,
ordering and pull pages; docs/guarantees.md, 'The simulation'), each drawn from the seed:

* **Delivery**: at-least-once; a Pull answers 1..min(asked, available) messages (never more than
  1,000), in any order within the answer, or waits for messages until its deadline and then answers
  empty or times out. An answer brings the oldest deliverable messages, except (``disorder``) when
  it brings any: the older ones it passed over are delivered late, out of order. A message still
  leased may be delivered again (to the same or another puller), and an acknowledged one too
  (standard subscriptions); every delivery has a fresh ack id, and only the newest one acts.
* **Late answers**: a Pull may be answered after its client gave up: its messages are leased to
  nobody until the deadline passes. Acknowledge and ModifyAckDeadline may land and lose their
  answer, or land late (any time before their deadline, answered after it), or not land; a standard subscription answers OK to an ack id whose lease
  lapsed (acting or not); an exactly-once one answers per ack id (``ErrorInfo`` metadata) and may
  fail some transiently.
* **Ordering keys**: a key's messages come in publish order; none while one of them is
  outstanding; several of a key may come in one answer; when one is delivered again (nack,
  expiry), every later message of the key that was delivered comes again, acknowledged or not;
  a standard subscription may deliver a key again from its first unacknowledged message while
  that message is still leased (with some of the key's next ones).
* **Outages** of any length: every RPC fails with UNAVAILABLE.

Not modelled (see docs/guarantees.md): an empty answer while messages wait, and an answer of only
newer messages while older ones wait (beyond ``disorder``). The reference allows both, but then no
end of an AvailableNow run could be sound: here they are what ``disorder`` marks as delivered late.

The client (:class:`SimSubscriberClient`) has the generated client's four methods, so the source's
own :class:`~crdb_pubsub.source.transport.Rpc` runs on top of it (its retries and deadlines
included). The service records what the checker needs: deliveries, effective acknowledgements
(when, by whom), and what each application held at most.
"""

from __future__ import annotations

import itertools
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.pubsub_v1.types import PullResponse

from .scheduler import Process, Scheduler, SimThread

MAX_PULL = 1000
# How long after it took effect an acknowledged message may be delivered again: within the source's
# dedupe window (pubsub/acknowledgements.PROVEN_MEMORY_SECONDS, 600 s), with a margin for its proof.
AFTER_ACK_WINDOW_SECONDS = 540.0


@dataclass
class Terms:
    """The service's freedoms for one run, drawn from its seed (:meth:`draw`)."""

    latency: tuple[float, float] = (0.001, 0.02)  # one way, seconds
    partial: float = 0.3  # chance an answer brings fewer than it could
    disorder: float = 0.0  # chance an answer brings any deliverable messages, not the oldest
    duplicate: float = 0.0  # chance per answer to add a message still leased elsewhere (standard)
    after_ack: float = 0.0  # chance per answer to add an acknowledged message (standard)
    late_pull: float = 0.0  # chance an answer with messages arrives after the client gave up
    empty_timeout: float = 0.5  # chance a Pull that found nothing times out instead of answering empty
    ack_lost: float = 0.0  # chance an Acknowledge/ModifyAckDeadline lands but its answer is lost
    ack_dropped: float = 0.0  # ... is lost before it lands
    ack_late: float = 0.0  # ... answered after the client's deadline (landing before it)
    hand_back_dropped: float = 0.0  # a hand-back (ModifyAckDeadline 0) lost before it lands, besides; by a focus only
    expired_ack_acts: float = 0.5  # chance a standard subscription's OK to a lapsed ack id acts anyway
    transient_eod: float = 0.0  # exactly-once: chance per ack id of a TRANSIENT_FAILURE
    outages: list[tuple[float, float]] = field(default_factory=list)  # (start, end), virtual seconds

    @classmethod
    def draw(cls, rng: Any, *, rough: float) -> Terms:
        """Terms for one run; ``rough`` in [0, 1] scales how often the rarer freedoms are used."""

        def maybe(p: float) -> float:
            return p * rough if rng.random() < 0.6 else 0.0

        outages = []
        if rng.random() < 0.35 * rough:
            start = rng.uniform(0.5, 60.0)
            length = rng.choice([0.3, 2.0, 8.0, 25.0, 70.0, 200.0, rng.uniform(0.1, 100.0)])
            outages.append((start, start + length))
        return cls(
            latency=(0.0005, rng.choice([0.002, 0.01, 0.05])),
            partial=rng.choice([0.0, 0.3, 0.8]),
            disorder=maybe(0.3),
            duplicate=maybe(0.08),
            after_ack=maybe(0.04),
            late_pull=maybe(0.05),
            empty_timeout=rng.choice([0.0, 0.5, 1.0]),
            ack_lost=maybe(0.05),
            ack_dropped=maybe(0.03),
            ack_late=maybe(0.03),
            expired_ack_acts=rng.random(),
            transient_eod=maybe(0.05),
            outages=outages,
        )


@dataclass
class Message:
    mid: str
    data: bytes
    key: str
    publish_us: int
    index: int  # publish order within the subscription
    acked: bool = False
    ever_acked: bool = False
    acked_at: float = 0.0  # when its first acknowledgement took effect
    ack_id: str | None = None  # of the newest delivery
    lease_until: float = 0.0
    deliveries: int = 0
    holder: Process | None = None  # the process that received or extended the newest delivery
    app: str | None = None  # the application whose Pull made the newest delivery (answered in time or not)
    let_go: set[str] = field(default_factory=set)  # ack ids its holders acknowledged or handed back (landed or not)
    client_acked: bool = False  # a client acknowledged it (later deliveries are dropped on arrival)
    late_at: float | None = None  # when an answer last passed it over for a newer one (None: delivered since)
    # (passed over at, answer with it reached its client at) of every time it was passed over.
    late_spans: list[tuple[float, float]] = field(default_factory=list)
    released: bool = False  # the service ended its lease (a key delivered again), not the clock


@dataclass
class Subscription:
    name: str
    ack_deadline: int
    exactly_once: bool = False
    ordered: bool = False
    messages: dict[str, Message] = field(default_factory=dict)
    by_ack: dict[str, Message] = field(default_factory=dict)  # every ack id ever given -> its message
    keys: dict[str, list[Message]] = field(default_factory=dict)


@dataclass
class AckEvent:
    at: float
    sub: str
    mid: str
    process: Process | None


class SimPubSub:
    """The service: subscriptions, their messages, and the record of what happened."""

    def __init__(self, sched: Scheduler, seed: int, terms: Terms) -> None:
        import random

        self.sched = sched
        self.terms = terms
        self.rng = random.Random(f"pubsub-{seed}")
        self._seed = seed
        self._calls = 0  # Acknowledge/ModifyAckDeadline requests so far (salts per-id draws)
        self.subs: dict[str, Subscription] = {}
        self._ids = itertools.count(1_000_001)
        self._ack_ids = itertools.count(1)
        self._waiters: list[Any] = []
        self.acks: list[AckEvent] = []
        self.deliveries = 0
        self.max_held: dict[str, int] = {}  # app name -> most messages its live processes held at once
        self.max_held_bytes: dict[str, int] = {}  # app name -> most body bytes its live processes held at once
        # (virtual time, message id, holder): a lease that lapsed while a live process held the
        # message (it had neither acknowledged nor handed it back), seen when it was delivered again.
        self.lapsed_while_held: list[tuple[float, str, str]] = []
        self.app_of: Callable[[Process | None], str | None] = lambda p: None
        self.on_call: Callable[[], None] | None = None  # before every RPC lands (the world's kill switch)
        self.network = Process("network", host="pubsub")  # carries requests that land late
        # (chance a call, longest seconds): the caller's process is paused after it noted the
        # call's time and before the client sent it (the call's deadline counts from the send).
        self.call_pauses: tuple[float, float] = (0.0, 0.0)
        self.call_pauses_until = float("inf")  # virtual time after which no call pauses (as the pauser stops)
        # Pids of task attempts another attempt took the claim over from (paused past their claim,
        # or dead), and of attempts Spark gave up on (their executor lost) that run on: written off
        # by the query, what they hold until they hand it back counts against no bound
        # (docs/guarantees.md, "Memory is bounded by the options").
        self.written_off: set[int] = set()
        self.watch: set[str] = set()  # message ids whose story is kept in ``story`` (replays)
        self.story: list[str] = []

    # ---------------------------------------------------------------- test side

    def create_subscription(self, name: str, *, ack_deadline: int, exactly_once: bool, ordered: bool) -> None:
        self.subs[name] = Subscription(name, ack_deadline, exactly_once, ordered)

    def publish(self, sub: str, bodies: list[bytes], key: str = "") -> list[str]:
        s = self.subs[sub]
        now_us = int(self.sched_wall() * 1_000_000)
        out = []
        for body in bodies:
            m = Message(str(next(self._ids)), body, key, now_us, len(s.messages))
            s.messages[m.mid] = m
            if key:
                s.keys.setdefault(key, []).append(m)
            out.append(m.mid)
        self._notify()
        return out

    def sched_wall(self) -> float:
        from .scheduler import WALL_EPOCH

        return WALL_EPOCH + self.sched.now

    def let_go(self, sub: str, ack_ids: list[str], *, acked: bool) -> None:
        """The client stopped holding these deliveries (it queued their acknowledgement or hand-back)."""
        s = self.subs.get(sub)
        if s is None:
            return
        for a in ack_ids:
            m = s.by_ack.get(a)
            if m is not None:
                m.let_go.add(a)
                m.client_acked = m.client_acked or acked

    def _arrived(self, delivered: list[tuple[str, Message]]) -> None:
        """An answer reached its client (or was lost): what it brings is no longer passed over."""
        for _, m in delivered:
            if m.late_at is not None:
                m.late_spans.append((m.late_at, self.sched.now))
                m.late_at = None

    def passed_over_between(self, since: float, start: float, end: float) -> set[str]:
        """What an answer had passed over (at ``since`` or later) and not yet delivered at some
        moment from ``start`` to ``end``; on an ordered subscription with its key's later messages
        (see :meth:`delivered_late`)."""
        out: set[str] = set()
        for s in self.subs.values():
            for m in s.messages.values():
                spans = [*m.late_spans, *([(m.late_at, end)] if m.late_at is not None else [])]
                if not any(a >= since and a <= end and b >= start for a, b in spans):
                    continue
                out.add(m.mid)
                if s.ordered and m.key:
                    out.update(x.mid for x in s.keys[m.key] if x.index > m.index)
        return out

    def delivered_late(self, since: float) -> set[str]:
        """What an answer passed over for newer messages since ``since`` and that has not been
        delivered since; on an ordered subscription also every later message of its key: those wait
        behind it, so they come late too (seed 82 of executors/gs)."""
        out: set[str] = set()
        for s in self.subs.values():
            for m in s.messages.values():
                if m.late_at is None or m.late_at < since:
                    continue
                out.add(m.mid)
                if s.ordered and m.key:
                    out.update(x.mid for x in s.keys[m.key] if x.index > m.index)
        return out

    def leased_to_the_dead_until(self) -> float:
        """When the last lease that a dead process holds lapses (0.0: none does).

        Until then its messages, and on an ordered subscription its keys' later ones, reach no one,
        whatever the source does: a killed task that had pulled and not recorded takes them along.
        """
        return max(
            (
                m.lease_until
                for s in self.subs.values()
                for m in s.messages.values()
                if not m.acked and m.holder is not None and not m.holder.alive
            ),
            default=0.0,
        )

    def unacked(self, sub: str) -> list[str]:
        return [m.mid for m in self.subs[sub].messages.values() if not m.acked]

    def down(self) -> bool:
        return any(a <= self.sched.now < b for a, b in self.terms.outages)

    def client(self) -> SimSubscriberClient:
        return SimSubscriberClient(self)

    # ---------------------------------------------------------------- timing

    def _leg(self) -> None:
        lo, hi = self.terms.latency
        self.sched.sleep(self.rng.uniform(lo, hi))

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for t in waiters:
            self.sched.wake(t)

    def _wait(self, timeout: float) -> None:
        self._waiters.append(self.sched.current())
        self.sched.block(timeout, "Pull waiting for messages")

    def _tell(self, m: Message, what: str) -> None:
        self.story.append(f"{self.sched.now:9.3f} {m.mid} {what}")

    def _id_chance(self, ack_id: str, salt: str) -> float:
        """A per-ack-id draw that does not depend on the order ids are listed in."""
        return zlib.crc32(f"{self._seed}/{salt}/{ack_id}".encode()) / 2**32

    # ---------------------------------------------------------------- delivery

    def _deliverable(self, s: Subscription, now: float) -> list[Message]:
        free = [m for m in s.messages.values() if not m.acked and (m.ack_id is None or m.lease_until <= now)]
        if not s.ordered:
            return free
        out = []
        for m in free:
            if not m.key:
                out.append(m)
                continue
            # The first unacknowledged message of its key, with nothing of the key outstanding.
            first = next(x for x in s.keys[m.key] if not x.acked)
            if first is m and not any(
                x.ack_id is not None and x.lease_until > now and not x.acked for x in s.keys[m.key]
            ):
                out.append(m)
        return out

    @staticmethod
    def _first(s: Subscription, m: Message) -> Message:
        """The first unacknowledged message of ``m``'s key."""
        return next(x for x in s.keys[m.key] if not x.acked)

    def _choose(self, s: Subscription, avail: list[Message], asked: int, now: float) -> list[Message]:
        """What one answer brings: the oldest deliverable messages, or (``disorder``) any of them.

        An answer that brings a message while an older one was deliverable delivers that older
        one late, out of order (the documented limit of Trigger.AvailableNow): it is marked so.
        """
        rng = self.rng
        limit = min(asked, MAX_PULL)
        avail = sorted(avail, key=lambda m: m.index)
        if self.terms.disorder and rng.random() < self.terms.disorder:
            heads = rng.sample(avail, len(avail))
        else:
            heads = avail
        picked: list[Message] = []
        for m in heads:
            if len(picked) >= limit:
                break
            picked.append(m)
            if s.ordered and m.key:
                # Several of a key in one answer: the next ones in order, if not outstanding.
                later = [x for x in s.keys[m.key] if x.index > m.index and not x.acked]
                for x in later[: rng.randrange(0, 4)]:
                    if len(picked) >= limit or (x.ack_id is not None and x.lease_until > now):
                        break
                    picked.append(x)
        if picked and self.terms.partial and rng.random() < self.terms.partial:
            picked = picked[: rng.randint(1, len(picked))]
        newest = max((m.index for m in picked), default=-1)
        for m in avail:
            if m.index < newest and m not in picked:
                m.late_at = now
        picked.extend(self._again(s, picked, limit, now))
        rng.shuffle(picked)  # an answer's messages come in any order, a key's in publish order
        if s.ordered:
            for key in {m.key for m in picked if m.key}:
                slots = [i for i, m in enumerate(picked) if m.key == key]
                for i, m in zip(slots, sorted((picked[i] for i in slots), key=lambda m: m.index)):
                    picked[i] = m
        return picked

    def _again(self, s: Subscription, picked: list[Message], limit: int, now: float) -> list[Message]:
        """Messages an answer brings again (standard subscriptions): one still leased, one acknowledged."""
        rng, out = self.rng, []
        if s.exactly_once or len(picked) >= limit:
            return out
        if self.terms.duplicate and rng.random() < self.terms.duplicate:
            leased = [m for m in s.messages.values() if not m.acked and m.ack_id is not None and m.lease_until > now]
            # On an ordered subscription a key is delivered again from its first unacknowledged
            # message (with some of the key's next ones), even while that message is leased: only
            # exactly-once subscriptions promise not to.
            leased = [m for m in leased if m not in picked and (not s.ordered or not m.key or self._first(s, m) is m)]
            if leased:
                m = rng.choice(leased)
                out.append(m)
                if s.ordered and m.key:
                    nxt = [x for x in s.keys[m.key] if x.index > m.index and not x.acked and x not in picked]
                    out.extend(nxt[: min(rng.randrange(0, 4), limit - len(picked) - len(out))])
        if len(picked) + len(out) < limit and self.terms.after_ack and rng.random() < self.terms.after_ack:
            # Within the window the source promises to recognise them in (PROVEN_MEMORY_SECONDS from
            # the acknowledgement of the batch that yielded it); later ones are passed on, the
            # documented limit.
            window = now - AFTER_ACK_WINDOW_SECONDS
            done = [m for m in s.messages.values() if m.acked and m.acked_at > window and (not s.ordered or not m.key)]
            if done:
                m = rng.choice(done)
                m.acked = False
                out.append(m)
        return out

    def _deliver(
        self, s: Subscription, msgs: list[Message], now: float, to: Process | None, caller: Process | None = None
    ) -> list[tuple[str, Message]]:
        out = []
        for m in msgs:
            if s.ordered and m.key and m.deliveries:
                # A redelivery brings every later message of its key that was delivered, again.
                for x in s.keys[m.key]:
                    if x.index > m.index and x.deliveries:
                        x.acked = False
                        x.lease_until = 0.0
                        x.released = True  # by the service, not run out: no lapse of its holder's
            if self._held_by(m) and m.lease_until <= now and not m.released:
                self.lapsed_while_held.append((now, m.mid, m.holder.name))  # type: ignore[union-attr]
            ack_id = f"{s.name.rsplit('/', 1)[-1]}:{next(self._ack_ids)}"
            m.released = False
            m.ack_id = ack_id
            m.lease_until = now + s.ack_deadline
            m.deliveries += 1
            m.holder = to
            m.app = self.app_of(caller or to)
            s.by_ack[ack_id] = m
            out.append((ack_id, m))
            if m.mid in self.watch:
                self._tell(
                    m,
                    f"delivered as {ack_id} to {to.name if to else 'nobody (answer too late)'}, leased until {m.lease_until:.2f}",
                )
        self.deliveries += len(out)
        self._note_held(s, now)
        return out

    def _held_by(self, m: Message) -> bool:
        """Whether a live process holds ``m``'s newest delivery: it has neither acknowledged it nor
        handed it back (nor queued either), whether or not its lease is still alive; not a task
        attempt the query wrote off (:attr:`written_off`)."""
        return (
            not m.acked
            and m.ack_id is not None
            and m.holder is not None
            and m.holder.alive
            and m.holder.pid not in self.written_off
            and m.ack_id not in m.let_go
            and not m.client_acked
        )

    def _note_held(self, s: Subscription, now: float) -> None:
        counts: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for m in s.messages.values():
            if self._held_by(m):
                app = self.app_of(m.holder)
                if app is not None:
                    counts[app] = counts.get(app, 0) + 1
                    sizes[app] = sizes.get(app, 0) + len(m.data)
        for app, n in counts.items():
            if n > self.max_held.get(app, 0):
                self.max_held[app] = n
            if sizes[app] > self.max_held_bytes.get(app, 0):
                self.max_held_bytes[app] = sizes[app]

    # ---------------------------------------------------------------- RPCs (called in the caller's thread)

    def _before_send(self) -> None:
        """Maybe pause the caller's process before its call goes (:attr:`call_pauses`)."""
        chance, longest = self.call_pauses
        if chance and self.sched.now < self.call_pauses_until and self.rng.random() < chance:
            self.sched.check()
            process, seconds = self.sched.process(), self.rng.uniform(0.5, longest)
            logging.getLogger("crdb_pubsub.sim").info("%s paused for %.1f s before a call went", process.name, seconds)
            self.sched.pause(process, seconds)
            self.sched.sleep(0.0)

    def _begin(self, timeout: float | None) -> None:
        self.sched.check()
        if self.on_call is not None:
            self.on_call()
        self._leg()
        if self.down():
            raise gexc.ServiceUnavailable("Pub/Sub is unreachable (simulated outage)")

    def pull(self, sub: str, asked: int, timeout: float | None, immediately: bool) -> list[tuple[str, Message]]:
        sched = self.sched
        self._before_send()
        start = sched.now
        deadline = start + (60.0 if timeout is None else timeout)
        self._begin(timeout)
        s = self.subs.get(sub)
        if s is None:
            raise gexc.NotFound(f"Resource not found (resource={sub})")
        caller = sched.process()
        # A long poll with nothing to deliver: the service answers empty a little before the
        # client's deadline, or lets the deadline pass.
        give_up = deadline - self.rng.uniform(0.0, 1.0)
        while True:
            now = sched.now
            avail = self._deliverable(s, now)
            if avail or immediately:
                break
            if now >= give_up:
                if self.terms.empty_timeout and self.rng.random() < self.terms.empty_timeout:
                    sched.sleep(max(0.0, deadline - sched.now))
                    raise gexc.DeadlineExceeded("Deadline Exceeded")
                break
            nxt = min(
                (m.lease_until for m in s.messages.values() if not m.acked and m.lease_until > now), default=give_up
            )
            self._wait(max(0.001, min(give_up, nxt) - now))
        if sched.now >= deadline:
            # Its client was paused while the request went or waited: the service answers no
            # request past its deadline (gRPC sends the deadline along). An answer before it,
            # lost, is the late answer below.
            raise gexc.DeadlineExceeded("Deadline Exceeded")
        # An answer that finds nothing deliverable may still bring a message again.
        picked = (
            self._choose(s, avail, asked, sched.now) if avail else self._again(s, [], min(asked, MAX_PULL), sched.now)
        )
        # Answered after the client gave up: a long Pull, or one asked to return at once (the
        # request may wait in a queue all the same).
        late = bool(picked) and self.terms.late_pull and self.rng.random() < self.terms.late_pull
        delivered = self._deliver(s, picked, sched.now, None if late else caller, caller)
        if late:
            # Answered after the client's deadline: leased to nobody.
            self._arrived(delivered)
            sched.sleep(max(0.0, deadline - sched.now))
            raise gexc.DeadlineExceeded("Deadline Exceeded")
        self._leg()
        # What an answer passed over is delivered once the answer reaches its client: a source
        # that decides meanwhile has not seen it (driver/posix seed 534 decided 1 ms before).
        self._arrived(delivered)
        if sched.now > deadline:
            for _, m in delivered:
                m.holder = None
            raise gexc.DeadlineExceeded("Deadline Exceeded")
        return delivered

    def _per_id(
        self,
        sub: str,
        ack_ids: list[str],
        timeout: float | None,
        act: Callable[[Subscription, Message, str], str | None],
        kind: str,
        *,
        let_go: bool = False,
    ) -> None:
        sched = self.sched
        if kind == "Acknowledge" or let_go:  # sent: the source holds them no more, landed or not
            self.let_go(sub, ack_ids, acked=kind == "Acknowledge")
        self._before_send()
        start = sched.now
        self._begin(timeout)
        self._calls += 1
        s = self.subs[sub]
        t = self.terms
        if timeout is not None and sched.now - start >= timeout:
            # Sent while its client was paused past the deadline: never acted on (see pull).
            raise gexc.DeadlineExceeded(f"{kind}: reached the service after its deadline (simulated)")
        r = self.rng.random()
        dropped = t.ack_dropped + (t.hand_back_dropped if let_go else 0.0)
        if r < dropped:
            sched.sleep(max(0.0, (timeout or 10.0) - (sched.now - start)))
            raise gexc.DeadlineExceeded(f"{kind}: the request was lost (simulated)")
        who = sched.process().name

        def land(late: bool) -> dict[str, str]:
            failures: dict[str, str] = {}
            for a in ack_ids:
                why = act(s, s.by_ack.get(a), a) if a in s.by_ack else "PERMANENT_FAILURE_INVALID_ACK_ID"
                if why is not None:
                    failures[a] = why
                m = s.by_ack.get(a)
                if m is not None and m.mid in self.watch:
                    self._tell(m, f"{kind} of {a} by {who}: {why or 'took effect'}{' (late)' if late else ''}")
            self._notify()
            return failures

        if r < dropped + t.ack_late:
            # It lands at any time before its deadline, and the answer comes after the client
            # gave up. Not later: gRPC sends the deadline along, and the service drops a request
            # whose deadline passed (as for a Pull answered late, whose lease starts before it).
            delay = self.rng.uniform(0.0, timeout or 10.0)

            def later() -> None:
                sched.sleep(delay)
                land(True)

            SimThread(sched, later, name=f"late-{kind}", process=self.network).start()
            sched.sleep(max(0.0, (timeout or 10.0) - (sched.now - start)))
            raise gexc.DeadlineExceeded(f"{kind}: answered after the deadline (simulated)")
        failures = land(False)
        if self.rng.random() < t.ack_lost:
            raise gexc.ServiceUnavailable(f"{kind}: landed, but the answer was lost (simulated)")
        self._leg()
        if timeout is not None and sched.now - start > timeout:
            raise gexc.DeadlineExceeded(f"{kind}: answered after the deadline (simulated)")
        if failures and s.exactly_once:
            raise _exactly_once_error(failures)

    def acknowledge(self, sub: str, ack_ids: list[str], timeout: float | None) -> None:
        def act(s: Subscription, m: Message, a: str) -> str | None:
            now = self.sched.now
            if s.exactly_once and self._id_chance(a, f"ack{self._calls}") < self.terms.transient_eod:
                return "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
            if m.acked:
                return None if m.ack_id == a else "PERMANENT_FAILURE_INVALID_ACK_ID"
            if m.ack_id != a:
                return "PERMANENT_FAILURE_INVALID_ACK_ID"
            lapsed = m.lease_until <= now
            if lapsed and (s.exactly_once or self._id_chance(a, "expired") >= self.terms.expired_ack_acts):
                return "PERMANENT_FAILURE_INVALID_ACK_ID"
            if not m.ever_acked:
                m.acked_at = now
            m.acked = m.ever_acked = True
            self.acks.append(AckEvent(now, s.name, m.mid, self.sched.process()))
            return None

        self._per_id(sub, ack_ids, timeout, act, "Acknowledge")

    def modify_ack_deadline(self, sub: str, ack_ids: list[str], seconds: int, timeout: float | None) -> None:
        me = self.sched.process()

        def act(s: Subscription, m: Message, a: str) -> str | None:
            now = self.sched.now
            if s.exactly_once and self._id_chance(a, f"mod{self._calls}") < self.terms.transient_eod:
                return "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
            if m.acked or m.ack_id != a or m.lease_until <= now:
                return "PERMANENT_FAILURE_INVALID_ACK_ID"
            m.lease_until = now + seconds
            m.holder = me if seconds else None
            return None

        self._per_id(sub, ack_ids, timeout, act, f"ModifyAckDeadline({seconds} s)", let_go=seconds == 0)


def _exactly_once_error(failures: dict[str, str]) -> gexc.InvalidArgument:
    from google.rpc import error_details_pb2

    info = error_details_pb2.ErrorInfo(
        reason="EXACTLY_ONCE_ACKID_FAILURE", domain="pubsub.googleapis.com", metadata=failures
    )
    return gexc.InvalidArgument("Some acknowledgement ids in the request were invalid.", details=[info])


class _SubInfo:
    def __init__(self, s: Subscription) -> None:
        self.ack_deadline_seconds = s.ack_deadline
        self.enable_exactly_once_delivery = s.exactly_once
        self.enable_message_ordering = s.ordered
        self.name = s.name
        self.filter = ""


def _field(request: Any, name: str, default: Any = None) -> Any:
    if isinstance(request, dict):
        return request.get(name, default)
    return getattr(request, name, default)


class SimSubscriberClient:
    """The generated ``SubscriberClient``'s methods the source calls, answered by :class:`SimPubSub`."""

    def __init__(self, service: SimPubSub) -> None:
        self.service = service

    def get_subscription(
        self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any
    ) -> _SubInfo:
        self.service._begin(timeout)
        name = _field(request, "subscription")
        s = self.service.subs.get(name)
        if s is None:
            raise gexc.NotFound(f"Resource not found (resource={name})")
        self.service._leg()
        return _SubInfo(s)

    def create_subscription(self, request: Any = None, **_: Any) -> Any:
        raise gexc.PermissionDenied("the simulation creates its subscriptions itself")

    def pull(self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any) -> Any:
        delivered = self.service.pull(
            _field(request, "subscription"),
            int(_field(request, "max_messages", MAX_PULL)),
            timeout,
            bool(_field(request, "return_immediately", False)),
        )
        out = PullResponse.pb()()
        for ack_id, m in delivered:
            rm = out.received_messages.add()
            rm.ack_id = ack_id
            rm.message.data = m.data
            rm.message.message_id = m.mid
            rm.message.publish_time.seconds = m.publish_us // 1_000_000
            rm.message.publish_time.nanos = (m.publish_us % 1_000_000) * 1000
            if m.key:
                rm.message.ordering_key = m.key
        # Serialized, as the source's Pull stub hands a real answer over: the simulated receive
        # path reads the bytes as the real one does (transport._raw_pull_stub, pull_parse).
        return out.SerializeToString()

    def acknowledge(self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any) -> None:
        self.service.acknowledge(_field(request, "subscription"), list(_field(request, "ack_ids")), timeout)

    def modify_ack_deadline(
        self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any
    ) -> None:
        self.service.modify_ack_deadline(
            _field(request, "subscription"),
            list(_field(request, "ack_ids")),
            int(_field(request, "ack_deadline_seconds")),
            timeout,
        )

    def close(self) -> None:
        pass

    @property
    def transport(self) -> Any:
        return self
