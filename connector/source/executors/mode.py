"""The :class:`~..core.mode.Mode` of ``receiver=executors``: plan slices, lease them, acknowledge on commit.

Every ``latestOffset`` plans batch ``start + 1`` without pulling anything: its :class:`~.orders.Plan`
(partitions, limits, cutoff) is recorded once in the ledger, and a replay in any process gives the
tasks exactly those orders (an empty batch is cheap: its tasks find nothing). A batch's messages
are known only from the slices its tasks recorded and registered (:mod:`.store`).

* **Leases.** A thread looks for the slices of uncommitted batches every :data:`SCAN_SECONDS`
  (a listing, best effort) and leases what it finds with the shared leaser, from the ack ids
  recorded in them, until the batch commits; a task keeps them leased itself until Spark
  consumed its rows, and once more for the driver to take over.
* **Acknowledgements.** A proven commit of N reads the register of every batch ``<= N`` and the
  slices it lists, by their exact names, acknowledges their yielded rows and redeliveries through
  the shared :class:`~..pubsub.acknowledgements.Acknowledgements`, records the commit in the ledger
  and deletes the slices. A slice that is not registered yielded nothing: its messages are not
  acknowledged (a task Spark never needed, or one that died first).
* **Redeliveries.** The driver remembers what it acknowledged (a proven acknowledgement for the
  dedupe window, as the driver mode does, an unproven one for as long as Pub/Sub keeps a message)
  and holds the slices of uncommitted batches; each task asks it, for exactly the messages it
  pulled, which must not be yielded (:mod:`.seen`).
* **AvailableNow** (4.2+): the orders carry the cutoff; later messages are recorded apart, leased,
  and handed back once when the run ends (or earlier, when they fill the flow control). The run ends
  at the first committed batch whose every task found its subscriptions drained, by the rule both
  modes share (:mod:`..pubsub.drained`), and fails when Pub/Sub stays unreachable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..core.mode import Limits
from ..metrics import Counters
from ..pubsub.acknowledgements import PROVEN_MEMORY_SECONDS, UNPROVEN_MEMORY_SECONDS
from ..pubsub.chunks import DONE, Chunk, total
from ..pubsub.drained import UNAVAILABLE_LIMIT_SECONDS, Answer, Drain
from ..pubsub.holding import Holding
from ..pubsub.remembered import IdSet
from ..pubsub.subscription import ReceiverError, Subscription, open_subscription
from ..state.ledger import Ledger, Recovered, StateDirError
from ..transport import MODIFY_DEADLINE, Rpc, rpc_for
from ..wire import mask, numbers
from .orders import Plan, SliceOrder, longest_lease, orders_of
from .seen import SeenServer
from .store import CLAIM_MARGIN_SECONDS, KEEP, LATER, SliceInfo, SliceStore

if TYPE_CHECKING:  # pragma: no cover
    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.executors")

SCAN_SECONDS = 0.5
ORDERS_WAIT_SECONDS = 2.0  # for the previous batch's acknowledgements to be answered
CLOCK_SKEW_SECONDS = 1.0  # between a task's host and the driver's, when a task's wall times are read
EMPTY_BATCH_PAUSE_SECONDS = 1.0  # AvailableNow: between empty batches while a shadow lasts


class _Slice:
    """A recorded slice the driver leases until its batch commits."""

    __slots__ = ("acks", "chunks", "info", "kept_ids", "later")

    def __init__(
        self, chunks: list[Chunk], later: list[Chunk], info: SliceInfo, acks: pa.Table, kept_ids: dict[str, IdSet]
    ) -> None:
        self.chunks = chunks  # rows to acknowledge when the batch commits
        self.later = later  # AvailableNow: rows handed back when the run ends
        self.info = info
        self.acks = acks  # (sub, message_id, ack_id) to acknowledge: what the ledger keeps of a commit
        self.kept_ids = kept_ids  # by subscription: the messages it yields (other batches must not)


class ExecutorsMode:
    """The driver-side state of ``receiver=executors``.

    Messages are held with the one machine both modes share (:class:`~..pubsub.holding.Holding`);
    this class keeps what is the planner's own: plans, the slices its tasks recorded, the later rows
    of an AvailableNow run, and the drain evidence the tasks report.

    ``_lock`` guards ``_slices``, ``_plans``, ``_later`` and the outage clock (the scan thread, the
    seen server's threads, the acker's callbacks and Spark's thread use them), and is the holding's
    lock (its ``drain`` and the hand-backs that wait for a renewal). It is taken under the
    protocol's lock; the leaser's, the acker's and the remembered ids' locks are neither held while
    it is taken nor taken under it.
    """

    def __init__(self, options: SourceOptions, counters: Counters, *, rpc: Rpc | None = None) -> None:
        assert options.stateDir, "receiver=executors needs stateDir (checked by the options)"
        self._opts = options
        self.counters = counters
        self._slice_store: SliceStore | None = None  # in the ledger's storage, once started
        self._given_rpc = rpc
        self._rpc: Rpc | None = None
        self._ledger: Ledger | None = None
        self._subs: dict[str, Subscription] = {}
        # Leases, acknowledgements, hand-backs and the shadows they leave, as both modes hold
        # messages (once started; its evidence in wall time, since tasks report from other hosts).
        self._holding: Holding | None = None
        self._seen: SeenServer | None = None
        self._lock = threading.Lock()
        self._plans: dict[int, Plan] = {}  # uncommitted batches
        self._planned_here: set[int] = set()  # of those, the ones this process planned (the others: replays)
        self._slices: dict[tuple[int, int], _Slice] = {}  # uncommitted batches' slices seen so far
        self._later: list[Chunk] = []  # AvailableNow: committed batches' later rows, held until the run ends
        self._committed = -1
        self._evidence: tuple[int, bool] = (-1, False)  # (newest committed batch, its drain evidence)
        self._cutoff_us: int | None = None
        self._run_from: int | None = None  # the first batch planned in this AvailableNow run
        self._run_began = 0.0  # wall time the AvailableNow run began
        self._unanswered: set[int] = set()  # uncommitted batches whose orders were built with acks unanswered
        # AvailableNow: claims of committed batches' registered slices another attempt held at the
        # commit, read again at each commit until released or expired (_shadow_claims).
        self._held_claims: dict[tuple[int, int], tuple[str, ...]] = {}
        self._unavailable_since: float | None = None  # wall time: the tasks found Pub/Sub unreachable since
        self._warned_later = False
        self._last_empty = False  # the newest committed batch brought nothing
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None

    @property
    def _store(self) -> SliceStore:
        assert self._slice_store is not None, "the mode has not started"
        return self._slice_store

    @property
    def holding(self) -> Holding:
        assert self._holding is not None, "the mode has not started"
        return self._holding

    @property
    def _drain(self) -> Drain:
        # Shadows in wall time (the tasks' Pulls, an acknowledgement not proven, an earlier
        # process's leases): see ..pubsub.drained. Under ``_lock``, the holding's lock.
        return self.holding.drain

    # ---------------------------------------------------------------- Mode

    def start(self, ledger: Ledger | None, recovered: Recovered | None) -> None:
        opts = self._opts
        assert ledger is not None and recovered is not None, "receiver=executors needs stateDir"
        if recovered.pending:
            raise StateDirError(
                f"stateDir {opts.stateDir} holds batch(es) {sorted(recovered.pending)} planned with receiver=driver "
                "that Spark has not committed; option 'receiver' is 'executors' now. Run the query with "
                "receiver=driver until they commit (e.g. one Trigger.AvailableNow run), or delete the stateDir "
                "(Pub/Sub then delivers their messages again)"
            )
        rpc = self._given_rpc or rpc_for(opts)
        topics = opts.topic_paths
        for i, sub in enumerate(opts.subscription_paths):
            self._subs[sub] = open_subscription(
                rpc,
                sub,
                topics[i] if topics else None,
                opts.filter,
                lease_seconds=opts.ackDeadlineSeconds,
                endpoint=opts.endpoint_description,
            )
        self._ledger, self._rpc = ledger, rpc
        self._slice_store = SliceStore(ledger.storage)
        self._committed = recovered.newest_commit
        self._store.drop(recovered.newest_commit)
        self._holding = Holding(
            rpc,
            self.counters,
            self._lock,
            lease_seconds=opts.ackDeadlineSeconds,
            max_lease_seconds=opts.maxLeaseDurationSeconds,
            evidence_clock=time.time,
        )
        self._holding.open(self._subs, proven_memory=PROVEN_MEMORY_SECONDS, unproven_memory=UNPROVEN_MEMORY_SECONDS)
        self._holding.recover(recovered.remembered, recovered.unconfirmed, recovered.leased_until)
        self._seen = SeenServer(self._seen_answer)
        self._holding.start(may_renew=ledger.holds)
        with self._lock:
            self._plans.update({bid: Plan.of(raw) for bid, raw in recovered.plans.items()})
        self._scan()
        if self._plans:
            log.info(
                "stateDir holds batch(es) %s planned and not known to be committed: replayed (or reused) with "
                "the slices their tasks recorded, whose messages are not yielded a second time",
                sorted(self._plans),
            )
        self._scanner = threading.Thread(target=self._scan_loop, name="crdb-pubsub-slice-scan", daemon=True)
        self._scanner.start()

    def set_cutoff(self, cutoff_us: int | None) -> None:
        self._cutoff_us = cutoff_us
        if cutoff_us is None:
            self._run_from = None
        else:
            self._run_began = time.time()

    def check(self) -> None:
        """Fail an AvailableNow run that the tasks found Pub/Sub unreachable for too long."""
        since = self._unavailable_since
        if self._cutoff_us is not None and since is not None and time.time() - since > UNAVAILABLE_LIMIT_SECONDS:
            raise ReceiverError(
                f"Pub/Sub has been unavailable to the tasks for {UNAVAILABLE_LIMIT_SECONDS:.0f} s "
                "while Trigger.AvailableNow was draining the backlog; nothing was acknowledged that Spark did not "
                "commit"
            )

    def first_latest(self, committed: int, limits: Limits) -> None:
        pass  # nothing is held: plans Spark never saw are reused for the batch of the same number

    def available_now_over(self, committed: int) -> bool:
        """Return whether the run may end.

        It may once a committed batch of this run shows every subscription drained. While only a
        shadow stands between the last batch (which brought nothing) and that evidence, the next
        batch is planned no sooner than :data:`EMPTY_BATCH_PAUSE_SECONDS` later: an empty batch
        costs Spark a micro-batch, and nothing it finds before the shadow ends proves anything.
        """
        self.check()
        if self._run_from is None or committed < self._run_from:
            return False
        batch, drained = self._evidence
        if batch == committed and drained:
            return True
        if batch == committed and self._last_empty:
            with self._lock:
                shadow = self._drain.latest_shadow()
            pause = min(EMPTY_BATCH_PAUSE_SECONDS, shadow - time.time())
            if pause > 0:
                time.sleep(pause)
        return False

    def plan(self, batch_id: int, limits: Limits, ensure_run: Callable[[], None]) -> bool:
        opts = self._opts
        assert self._ledger is not None
        ensure_run()
        max_messages = min(limits.max_messages or opts.maxOutstandingMessages, opts.maxOutstandingMessages)
        max_bytes = min(limits.max_bytes or opts.maxOutstandingBytes, opts.maxOutstandingBytes)
        if self._cutoff_us is not None:
            max_messages, max_bytes = self._room_beside_later(max_messages, max_bytes)
        subs = opts.subscription_paths
        ordered = tuple(s for s in subs if self._subs[s].ordered)
        # No more tasks than messages (each task's share is at least one: see orders_of), nor than
        # subscriptions when every one is ordered (each is pulled by one task: see Plan.ordered).
        parts = min(opts.numPartitions or max(2, len(subs)), max_messages)
        if len(ordered) == len(subs):
            parts = min(parts, len(subs))
        plan = Plan(
            parts=parts,
            max_messages=max_messages,
            max_bytes=max_bytes,
            cutoff_us=self._cutoff_us,
            ordered=ordered,
        )
        # Recorded once: a plan an earlier process recorded for this batch number wins (its tasks
        # may have recorded slices under it, which are this batch's content now).
        recorded = Plan.of(self._ledger.record_plan(batch_id, plan.as_json()))
        with self._lock:
            self._plans[batch_id] = recorded
            self._planned_here.add(batch_id)
        if self._cutoff_us is not None and self._run_from is None:
            self._run_from = batch_id
        return True

    def inputs(self, batch_id: int) -> list[SliceOrder] | None:
        assert self._ledger is not None and self._seen is not None
        with self._lock:
            plan = self._plans.get(batch_id)
        if plan is None:
            # Not recovered when this process started: read by its exact name (a listing may lag),
            # or voided, so that a plan landing late is never acted on.
            plan = Plan.of(self._ledger.plan_or_void(batch_id))
            with self._lock:
                self._plans[batch_id] = plan
            if not plan.parts:
                return None
        # The previous batch's acknowledgements decide what may still be held on an ordered
        # subscription: wait for their answers (they usually take milliseconds).
        if not self.holding.acker.flush(ORDERS_WAIT_SECONDS):
            self._unanswered.add(batch_id)
        subs = self._opts.subscription_paths
        deadlines = {s: i.ack_deadline for s, i in self._subs.items()}
        # Once a Pull of a subscription timed out, an AvailableNow run's tasks ask with
        # return_immediately: a long Pull that timed out again would cast a new shadow.
        # And a subscription whose last answer would prove it drained but for a shadow is not
        # pulled before the shadow's end (each Pull risks a new one: Drain.idle_until).
        now = time.time()
        with self._lock:
            immediate = frozenset(s for s in subs if plan.cutoff_us is not None and self._drain.shadowed(s))
            idle = frozenset(
                s for s in subs if plan.cutoff_us is not None and self._drain.idle_until(s, 0, plan.cutoff_us) > now
            )
            replay = batch_id not in self._planned_here
        if replay:  # planned by an earlier process: recovered at the start, or read by name now
            self.counters.add("batchesReplayed")
        ordered = frozenset(s for s, i in self._subs.items() if i.ordered)
        room = self._room_now(batch_id)
        return orders_of(
            batch_id,
            plan,
            subs,
            deadlines,
            self._opts.ackDeadlineSeconds,
            self._seen.where,
            immediate,
            ordered,
            replay=replay,
            idle=idle,
            room=room,
        )

    def _room_now(self, batch_id: int) -> tuple[int, int]:
        """Return the messages and bytes the bounds leave beside what the batches before ``batch_id`` hold.

        Spark may commit a batch only after the next batch's tasks ran (a commit may come late):
        the earlier batch's messages are then still held, and the tasks take only
        what is left of ``maxOutstandingMessages``/``Bytes``. The plan was made without them (in
        Spark's usual order the commit comes between the plan and the tasks).
        """
        with self._lock:
            plans = [(b, p) for b, p in self._plans.items() if b < batch_id]
            slices = {k: s for k, s in self._slices.items() if k[0] < batch_id}
            held = [*self._later, *self.holding.waiting]
        unseen = unseen_bytes = 0
        for bid, plan in plans:
            for part in range(plan.parts):
                s = slices.get((bid, part))
                if s is not None:
                    held.extend((*s.chunks, *s.later))
                else:  # not registered yet (or never recorded): it may hold its whole share
                    unseen += plan.messages_of(part)
                    unseen_bytes += plan.bytes_each
        count, nbytes = total(held)
        return (
            self._opts.maxOutstandingMessages - count - unseen,
            self._opts.maxOutstandingBytes - nbytes - unseen_bytes,
        )

    def known(self, after: int, upto: int) -> list[int]:
        with self._lock:
            return sorted(b for b in self._plans if after < b <= upto)

    def acknowledge(self, upto: int) -> None:
        assert self._ledger is not None
        with self._lock:
            plans = sorted(((b, p) for b, p in self._plans.items() if b <= upto), key=lambda bp: bp[0])
        if not plans:
            return  # nothing this process planned or recovered (batch 0 is the initial offset, no batch)
        batches = [b for b, _ in plans]
        done: list[_Slice] = []
        stale_later: list[Chunk] = []  # held apart for an AvailableNow run that is over
        evidence = True
        for bid, plan in plans:
            registered = self._store.registered(bid) if plan.parts else []
            slices = {p: self._slice(bid, p) for p in registered if p < plan.parts}
            done.extend(slices.values())
            if plan.cutoff_us is not None:
                self._shadow_claims(bid, plan, set(registered))
            if plan.cutoff_us != self._cutoff_us:
                stale_later.extend(c for s in slices.values() for c in s.later)
            if bid == upto:
                evidence = self._drained(bid, plan, slices) and not self._held_claims
            self._note_availability(slices.values())
        with self._lock:
            for bid in batches:
                del self._plans[bid]
                self._planned_here.discard(bid)
            unregistered = [s for (b, _), s in self._slices.items() if b <= upto and s not in done]
            for key in [k for k in self._slices if k[0] <= upto]:
                del self._slices[key]
        # Their tasks renewed the leases until they ended, before Spark committed: each renewal
        # may set a lease ending up to ackDeadlineSeconds (and the time it takes to act) from now,
        # later than this process knows. A hand-back or an acknowledgement that fails leaves them
        # leased that long.
        self.holding.leaser.leased_elsewhere(
            [c for s in (*done, *unregistered) for c in (*s.chunks, *s.later)],
            time.monotonic() + self._opts.ackDeadlineSeconds + MODIFY_DEADLINE.total,
        )
        # A slice that was leased but not registered yielded nothing (its task died first, or Spark
        # did not need it): its messages go back to Pub/Sub, never acknowledged.
        self._hand_back([c for s in unregistered for c in s.chunks + s.later], deliverable=True)
        self._unanswered = {b for b in self._unanswered if b > upto}
        self._committed = max(self._committed, upto)
        self._evidence = (upto, evidence and bool(batches) and batches[-1] == upto)
        self._last_empty = not any(s.info.rows for s in done)
        chunks = [c for s in done for c in s.chunks]
        later = [c for s in done for c in s.later if c not in stale_later]
        for c in chunks:
            c.state = DONE
        self.holding.leaser.discard(chunks)
        with self._lock:
            self._later.extend(later)
        # Rows held apart by the plan of an earlier AvailableNow run (replayed after a restart):
        # published after that run began, perhaps before this one did; they go back at once.
        self._hand_back(stale_later, deliverable=True)
        acks = pa.concat_tables([s.acks for s in done]) if done else None
        if acks is not None and acks.num_rows:
            self._ledger.committed(upto, acks)
        else:
            self._ledger.committed(upto, [])
        for bid, plan in plans:
            self._store.forget(bid, plan.parts)
        ledger, acks = self._ledger, self.holding.acks
        assert acks is not None
        acks.acknowledge(chunks, lambda unproven: ledger.answered(upto, unproven))

    def end_available_now(self, within: float) -> bool:
        self._hand_back_later()
        return self.holding.acker.flush(within)

    def gauges(self) -> dict[str, Any]:
        with self._lock:
            slices = list(self._slices.values())
            committed_later = sum(len(c) for c in self._later)
        held = sum(s.info.kept for s in slices)
        later = sum(len(c) for s in slices for c in s.later) + committed_later
        oldest = min((s.info.oldest_us for s in slices if s.info.oldest_us is not None), default=None)
        now_us = int(time.time() * 1_000_000)
        return {
            "buffered": 0,
            "inFlight": held,
            "laterHeld": later,
            "heldBytes": 0,
            "awaitingCommit": held,
            "rememberedIds": self._holding.remembered.count() if self._holding is not None else 0,
            "oldestUnackedAgeSeconds": round((now_us - oldest) / 1e6, 3) if oldest is not None else 0.0,
        }

    def shutdown(self, within: float) -> float:
        """Stop leasing; let queued acknowledgements reach Pub/Sub (at most ``within`` s).

        Recorded slices are not handed back: Spark replays their batch from them, and what the
        next run pulls again of them is recognised. The next process waits out their leases
        (``inf``) when some were held.
        """
        end = time.monotonic() + within
        self._stop.set()
        if self._seen is not None:
            self._seen.close()
        renewing, flushed = False, True
        if self._holding is not None:
            renewed, flushed = self._holding.stop(max(0.0, end - time.monotonic()))
            renewing = not renewed
        with self._lock:
            held = bool(self._slices) or bool(self._later) or bool(self._holding and self._holding.waiting)
            held = held or bool(self._held_claims)  # an attempt that may yet lose its slice
            shadow = self._drain.latest_shadow()
        if held or not flushed or renewing:
            return float("inf")
        return shadow

    # ---------------------------------------------------------------- slices

    def _slice(self, bid: int, part: int) -> _Slice:
        """Read registered slice ``part`` of committed batch ``bid`` by its exact name.

        A task registers its slice after writing it, so a registered slice that can't be read
        means the stateDir is not one directory for every executor and the driver, or lost data:
        the query stops rather than leave its messages unacknowledged and unrecognised.
        """
        with self._lock:
            known = self._slices.get((bid, part))
        if known is not None:
            return known
        found = self._store.read_acks(bid, part)
        if found is None:
            raise StateDirError(
                f"batch {bid} was committed by Spark and its task {part} registered its slice, but the slice is "
                f"not in the stateDir ({self._store.key(bid, part)}); its messages can't be acknowledged, so the "
                "query stops (is the stateDir one directory that every executor and the driver reach?)"
            )
        return self._register(bid, part, *found, lease=False)

    def _register(self, bid: int, part: int, table: pa.Table, info: SliceInfo, *, lease: bool) -> _Slice:
        """Hold a recorded slice: its rows by role, leased until its batch commits (``lease``).

        Its later rows (AvailableNow) are leased in either case: they are held until the run ends.
        """
        roles = numbers(table.column("role"))
        now = time.monotonic()
        # The task proved the leases until this wall time; counted on this host's clock, less
        # the skew between hosts. The leaser renews at once: if Pub/Sub answers before it, the
        # proof goes on.
        proven = now + (info.proven_until - time.time()) - CLOCK_SKEW_SECONDS
        chunks = _chunks(table, roles != LATER, now, proven)
        later = _chunks(table, roles == LATER, now, proven, info.later_bytes)
        acks = table.filter(mask(roles != LATER)).select(["sub", "message_id", "ack_id"])
        kept_ids = {
            sub: IdSet.of(ids)
            for sub, ids in _by_sub(table.filter(mask(roles == KEEP)).select(["sub", "message_id"])).items()
        }
        s = _Slice(chunks, later, info, acks, kept_ids)
        with self._lock:
            have = self._slices.get((bid, part))
            if have is not None:
                return have
            self._slices[(bid, part)] = s
            for sub, pull in info.subs.items():
                # A Pull of this slice that timed out may have leased messages to nobody: no empty
                # answer to a Pull sent before its shadow ends proves the subscription drained.
                self._drain.shadow(sub, pull.shadow_until)
        self.counters.add("received", info.kept)
        self.counters.add("redeliveriesDropped", info.rows - info.kept - sum(len(c) for c in later))
        self.counters.add("handedBack", info.handed_back)
        self.counters.add("pullErrors", info.pull_errors)
        # Rows held for the next AvailableNow run stay held past the commit: leased however the
        # slice was found (a slice first read at its batch's commit is not leased otherwise).
        held = chunks + later if lease else later
        if held and self._holding is not None:
            self._holding.leaser.add(held, max(1.0, proven - now), renew_now=True)
        return s

    def _scan_loop(self) -> None:
        while not self._stop.wait(SCAN_SECONDS):
            try:
                self._scan()
            except Exception:
                log.exception("looking for slices in the stateDir failed")

    def _scan(self) -> None:
        """Lease the slices of uncommitted batches recorded since the last look."""
        with self._lock:
            plans = dict(self._plans)
            seen = set(self._slices)
        for bid, plan in sorted(plans.items()):
            if not plan.parts:
                continue
            for part in self._store.listed(bid):
                if part >= plan.parts or (bid, part) in seen:
                    continue
                found = self._store.read_acks(bid, part)
                if found is not None and bid > self._committed:
                    self._register(bid, part, *found, lease=True)

    def _seen_answer(self, batch: int, sub: str, mids: list[str]) -> np.ndarray:
        """Which of ``mids`` a task of ``batch`` must not yield (see :mod:`.seen`).

        Those acknowledged and still remembered, and those a slice of another uncommitted batch
        yields; the slices of the same batch settle among themselves (:mod:`.store`).
        """
        hit = np.array(self.holding.remembered.seen(sub, mids, time.monotonic()), dtype=bool)
        with self._lock:
            others = [s.kept_ids[sub] for (b, _), s in self._slices.items() if b != batch and sub in s.kept_ids]
        for ids in others:
            hit |= ids.mask(mids)
        return hit

    def _drained(self, bid: int, plan: Plan, slices: dict[int, _Slice]) -> bool:
        """Take committed batch ``bid``'s answers as evidence; return whether every subscription is drained.

        By the rule both modes share (:mod:`..pubsub.drained`), over the newest answer of any task
        of the run (one slot a subscription: the batches follow each other; a task that can't pull
        every subscription it serves in one batch pulls them in turn). On an ordered subscription
        an answer counts only if nothing of it was held when it came (no row held in its batch, a
        redelivery it drops included; the previous acknowledgements answered and proven). A task
        that found Pub/Sub unreachable sets its subscription's evidence back.
        """
        subs = self._opts.subscription_paths
        with self._lock:
            for sub in subs:
                info = self._subs.get(sub)
                # ``held`` counts the kept rows too; ``kept`` alone speaks for a slice recorded by
                # a version that did not count ``held`` (read back from the stateDir as 0).
                held = bid in self._unanswered or any(
                    s.info.subs.get(sub) is not None and (s.info.subs[sub].held or s.info.subs[sub].kept)
                    for s in slices.values()
                )
                outstanding = bool(info is not None and info.ordered and held)
                for s in slices.values():
                    pull = s.info.subs.get(sub)
                    if pull is None or not (pull.answered or pull.unavailable):
                        continue
                    sent = pull.last_sent if pull.answered else s.info.pulled_at
                    oldest = 0 if pull.unavailable else pull.last_oldest_us  # 0: not evidence
                    self._drain.answered(sub, 0, Answer(sent, oldest, outstanding))
            if plan.cutoff_us is None:
                return False
            return all(self._drain.quiet(sub, [0], plan.cutoff_us, self._run_began) for sub in subs)

    def _shadow_claims(self, bid: int, plan: Plan, registered: set[int]) -> None:
        """AvailableNow: wait out what an attempt the batch did not count may hold, by its claim.

        What such an attempt pulled stays leased, to nobody, for up to the longest lease it may
        have had (:func:`.orders.longest_lease`); no answer before then proves its subscriptions
        drained. Read from each task's claim:

        * a task that claimed its slice and did not register may have died holding leases, or
          still hold them (a task the job cancelled may run on, renewing them while its claim
          holds: it is read again as below);
        * an attempt that lost the slice to another (one frozen as it wrote, whose write landed
          when it woke) released the claim noting until when what it pulled may stay leased
          (``leased_until``), before it handed that back. Nothing else of it reaches this process;
        * the claim of a registered slice that another attempt still holds (the one that recorded
          the slice released it before it registered): that attempt may yet lose the slice, or
          be killed first. A claim still held is read again at each commit (and the run does not end) until it is
          released, or expired: its holder died, and what it pulled lapses within the longest
          lease after the claim's expiry (a task renews only while its claim allows writes).
        """
        subs = self._opts.subscription_paths
        claims = {(bid, p): tuple(plan.subscriptions(p, subs)) for p in range(plan.parts)}
        with self._lock:
            claims.update(self._held_claims)
            self._held_claims.clear()
        for (b, p), claim_subs in claims.items():
            record = self._store.claim_record(b, p)
            if record is None:
                continue
            now = time.time()
            noted = float(record.get("leased_until") or 0.0)
            held = not record.get("released")
            expiry = float(record.get("expiry") or 0.0) + CLAIM_MARGIN_SECONDS
            unregistered = b == bid and p not in registered
            with self._lock:
                if held and now <= expiry:
                    # Its holder is alive, or died less than a claim ago: read again at each commit.
                    self._held_claims[(b, p)] = claim_subs
                    if not unregistered:
                        continue
                for sub in claim_subs:
                    longest = longest_lease(self._opts.ackDeadlineSeconds, [self._subs[sub].ack_deadline])
                    if noted > now:
                        self._drain.shadow(sub, noted)  # what an attempt that lost its slice could not hand back
                    if unregistered:
                        self._drain.shadow(sub, now + longest)  # a task that may have died holding leases
                    elif held:
                        self._drain.shadow(sub, expiry + longest)  # an attempt that died holding the claim

    def _note_availability(self, slices: Any) -> None:
        """Keep when the tasks last found Pub/Sub reachable (an AvailableNow run fails after too long without)."""
        reports = [
            pull.unavailable for s in slices for pull in s.info.subs.values() if pull.answered or pull.unavailable
        ]
        if not reports:
            return
        if any(reports):
            if self._unavailable_since is None:
                self._unavailable_since = min(s.info.pulled_at for s in slices)
        else:
            self._unavailable_since = None

    def _room_beside_later(self, max_messages: int, max_bytes: int) -> tuple[int, int]:
        """AvailableNow: the messages and bytes a batch may take beside the later ones held.

        Later messages count against ``maxOutstandingMessages`` and ``maxOutstandingBytes`` until
        the run ends; when they take half of either, they are handed back (a delivery attempt each)
        to make room for the rest of the backlog, as the driver mode does.
        """
        bound, bound_bytes = self._opts.maxOutstandingMessages, self._opts.maxOutstandingBytes
        with self._lock:
            held = [*self._later, *(c for s in self._slices.values() for c in s.later), *self.holding.waiting]
        later, later_bytes = total(held)
        if later * 2 >= bound or later_bytes * 2 >= bound_bytes:
            n = self._hand_back_later()
            if n and not self._warned_later:
                self._warned_later = True
                log.warning(
                    "Trigger.AvailableNow: messages published after the run began filled half of "
                    "maxOutstandingMessages or maxOutstandingBytes before the backlog was read; %d of them were "
                    "handed back (a delivery attempt each) to make room. Raise the bounds to avoid it",
                    n,
                )
            with self._lock:
                later, later_bytes = total(self.holding.waiting)
        return max(1, min(max_messages, bound - later)), max(1, min(max_bytes, bound_bytes - later_bytes))

    def _hand_back_later(self) -> int:
        """Hand back the later rows of committed batches (AvailableNow); return how many."""
        with self._lock:
            later, self._later = self._later, []
        return self._hand_back(later)

    def _hand_back(self, chunks: list[Chunk], *, deliverable: bool = False) -> int:
        """Stop leasing ``chunks`` and hand them back to Pub/Sub (ModifyAckDeadline 0); return how many.

        ``deliverable``: they may be older than an AvailableNow cutoff: no answer to a Pull sent
        before now proves their subscription drained.
        """
        if not chunks:
            return 0
        if deliverable:
            now = time.time()
            with self._lock:
                for sub in {c.sub for c in chunks}:
                    self._drain.shadow(sub, now)
        for c in chunks:
            c.state = DONE
        return self.holding.hand_back(chunks)


def _by_sub(table: pa.Table) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for sub, mid in zip(table.column("sub").to_pylist(), table.column("message_id").to_pylist()):
        out.setdefault(sub, []).append(mid)
    return out


def _chunks(table: pa.Table, where: np.ndarray, now: float, proven: float, nbytes: int = 0) -> list[Chunk]:
    """One chunk per subscription of a slice's rows ``where`` (a boolean mask) holds.

    ``nbytes``: their body bytes (the driver reads no body), shared among the chunks by rows.
    """
    if not where.any():
        return []
    part = table.filter(mask(where)) if not where.all() else table
    subs = part.column("sub").to_pylist()
    mids = part.column("message_id").to_pylist()
    acks = part.column("ack_id").to_pylist()
    if len(set(subs)) == 1:
        return [Chunk(subs[0], mids, acks, None, nbytes, 0, now, proven_until=proven)]
    rows: dict[str, list[int]] = {}
    for i, s in enumerate(subs):
        rows.setdefault(s, []).append(i)
    return [
        Chunk(
            sub,
            [mids[i] for i in idx],
            [acks[i] for i in idx],
            None,
            nbytes * len(idx) // len(mids),
            0,
            now,
            proven_until=proven,
        )
        for sub, idx in rows.items()
    ]


__all__ = ["ExecutorsMode", "ReceiverError"]
