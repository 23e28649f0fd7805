"""The :class:`~..core.mode.Mode` of ``receiver=executors``: plan slices, lease them, acknowledge on commit.

Every ``latestOffset`` plans batch ``start + 1`` without pulling anything: its :class:`~.orders.Plan`
(partitions, limits, cutoff) is recorded once in the ledger, and a replay in any process gives the
tasks exactly those orders (an empty batch is cheap: its tasks find nothing). A batch's messages
are known only from the slices its tasks recorded (:mod:`.store`).

* **Leases.** A thread looks for the slices of uncommitted batches every :data:`SCAN_SECONDS`
  (a listing, best effort) and leases what it finds with the shared leaser, from the ack ids
  recorded in them, until the batch commits; a task keeps them leased itself until Spark
  consumed its rows, and once more for the driver to take over.
* **Acknowledgements.** A proven commit of N reads every slice of every batch ``<= N`` by its exact
  name (a missing one is an error, never a skip), acknowledges the yielded rows and the
  redeliveries through the shared :class:`~..pubsub.acknowledgements.Acknowledgements`, records
  the commit in the ledger and deletes the slices.
* **Redeliveries.** Message ids that may come back (acknowledged without proof, or held in a slice
  of an uncommitted batch) travel to the tasks in each order, compactly; before the orders of a
  batch are built, the previous batch's acknowledgements are awaited (bounded), so that the
  usual order carries none.
* **AvailableNow** (4.2+): the orders carry the cutoff; later messages are recorded apart, leased,
  and handed back once when the run ends. The run ends at the first committed batch whose every
  task found its subscriptions drained, by evidence an empty answer alone does not give: no Pull
  of the batch timed out within an ack deadline before, and no ordered subscription had messages
  outstanding (see :meth:`ExecutorsMode.available_now_over`).
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
from ..pubsub.acker import NACK, Acker, Job
from ..pubsub.acknowledgements import UNPROVEN_MEMORY_SECONDS, Acknowledgements
from ..pubsub.chunks import DONE, Chunk
from ..pubsub.leaser import Leaser
from ..pubsub.remembered import IdSet, Remembered
from ..pubsub.subscription import ReceiverError, Subscription, open_subscription
from ..state.ledger import Ledger, Recovered, StateDirError
from ..transport import Rpc, rpc_for
from .orders import Plan, SliceOrder, orders_of
from .store import LATER, SliceInfo, SliceStore

if TYPE_CHECKING:  # pragma: no cover
    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.executors")

SCAN_SECONDS = 0.5
SLICE_VISIBLE_SECONDS = 90.0  # a committed batch's slice not visible after this long is an error
ORDERS_WAIT_SECONDS = 2.0  # for the previous batch's acknowledgements to be answered
CLOCK_SKEW_SECONDS = 1.0  # between a task's host and the driver's, when a task's wall times are read
AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS = 120.0


class _Slice:
    """A recorded slice the driver leases until its batch commits."""

    __slots__ = ("acks", "chunks", "info", "later")

    def __init__(self, chunks: list[Chunk], later: list[Chunk], info: SliceInfo, acks: pa.Table) -> None:
        self.chunks = chunks  # rows to acknowledge when the batch commits
        self.later = later  # AvailableNow: rows handed back when the run ends
        self.info = info
        self.acks = acks  # (sub, message_id, ack_id) to acknowledge: what the ledger keeps of a commit


class ExecutorsMode:
    """The driver-side state of ``receiver=executors``.

    ``_lock`` guards ``_slices``, ``_plans`` and ``_held`` (the scan thread and Spark's thread both
    use them); it is taken under the protocol's lock, and the leaser's, the acker's and the
    remembered ids' locks are taken under it, never the other way round.
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
        self._remembered = Remembered(on_evicted=lambda n: counters.add("rememberedEvicted", n))
        self._acker: Acker | None = None
        self._acks: Acknowledgements | None = None
        self._leaser: Leaser | None = None
        self._lock = threading.Lock()
        self._plans: dict[int, Plan] = {}  # uncommitted batches
        self._slices: dict[tuple[int, int], _Slice] = {}  # uncommitted batches' slices seen so far
        self._later: list[Chunk] = []  # AvailableNow: committed batches' later rows, held until the run ends
        self._committed = -1
        self._evidence: tuple[int, bool] = (-1, False)  # (newest committed batch, its drain evidence)
        self._cutoff_us: int | None = None
        self._run_from: int | None = None  # the first batch planned in this AvailableNow run
        self._unanswered: set[int] = set()  # uncommitted batches whose orders were built with acks unanswered
        # Wall time until which messages of a subscription may be leased to nobody (a Pull that
        # timed out) or held by an acknowledgement not proven: no empty answer before proves much.
        self._shadow: dict[str, float] = {}
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None

    @property
    def _store(self) -> SliceStore:
        assert self._slice_store is not None, "the mode has not started"
        return self._slice_store

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
        self._acker = Acker(rpc)
        self._acks = Acknowledgements(
            self._acker,
            self._remembered,
            self.counters,
            exactly_once={s for s, i in self._subs.items() if i.exactly_once},
            proven_memory=0.0,
            unproven_memory=UNPROVEN_MEMORY_SECONDS,
            on_unproven=self._on_unproven,
        )
        self._leaser = Leaser(
            self._rpc.modify_ack_deadline,
            lease_seconds=opts.ackDeadlineSeconds,
            max_lease_seconds=opts.maxLeaseDurationSeconds,
            on_given_up=lambda n: self.counters.add("leasesExpired", n),
            on_extended=lambda n: self.counters.add("leasesExtended", n),
        )
        self._acker.start()
        self._leaser.start()
        for sub, pairs in recovered.unconfirmed:  # acknowledge again: they may still work
            self._remembered.add(sub, [m for m, _ in pairs], time.monotonic() + UNPROVEN_MEMORY_SECONDS)
            self._acks.resend(sub, pairs)
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

    def check(self) -> None:
        pass  # the tasks report Pub/Sub's refusals themselves, by failing

    def first_latest(self, committed: int, limits: Limits) -> None:
        pass  # nothing is held: plans Spark never saw are reused for the batch of the same number

    def available_now_over(self, committed: int) -> bool:
        """Return whether the run may end.

        It may once a committed batch of this run shows every subscription drained.
        """
        if self._run_from is None or committed < self._run_from:
            return False
        batch, drained = self._evidence
        return batch == committed and drained

    def plan(self, batch_id: int, limits: Limits, ensure_run: Callable[[], None]) -> bool:
        opts = self._opts
        assert self._ledger is not None
        ensure_run()
        parts = opts.numPartitions or max(2, len(opts.subscription_paths))
        plan = Plan(
            parts=parts,
            max_messages=min(limits.max_messages or opts.maxOutstandingMessages, opts.maxOutstandingMessages),
            max_bytes=min(limits.max_bytes or opts.maxOutstandingBytes, opts.maxOutstandingBytes),
            cutoff_us=self._cutoff_us,
        )
        # Recorded once: a plan an earlier process recorded for this batch number wins (its tasks
        # may have recorded slices under it, which are this batch's content now).
        recorded = Plan.of(self._ledger.record_plan(batch_id, plan.as_json()))
        with self._lock:
            self._plans[batch_id] = recorded
        if self._cutoff_us is not None and self._run_from is None:
            self._run_from = batch_id
        return True

    def inputs(self, batch_id: int) -> list[SliceOrder] | None:
        with self._lock:
            plan = self._plans.get(batch_id)
        if plan is None:
            assert self._ledger is not None
            raw = self._ledger.read_plan(batch_id)
            if raw is None:
                return None
            plan = Plan.of(raw)
            with self._lock:
                self._plans[batch_id] = plan
            self.counters.add("batchesReplayed")
        assert self._acker is not None
        # The previous batch's acknowledgements decide what may come back: wait for their answers
        # (they usually take milliseconds) so that the orders carry only what really may.
        if not self._acker.flush(ORDERS_WAIT_SECONDS):
            self._unanswered.add(batch_id)
        subs = self._opts.subscription_paths
        deadlines = {s: i.ack_deadline for s, i in self._subs.items()}
        # Once a Pull of a subscription timed out, an AvailableNow run's tasks ask with
        # return_immediately: a long Pull that timed out again would cast a new shadow.
        immediate = frozenset(s for s in subs if plan.cutoff_us is not None and s in self._shadow)
        return orders_of(
            batch_id, plan, subs, deadlines, self._opts.ackDeadlineSeconds, self._drop_sets(batch_id), immediate
        )

    def known(self, after: int, upto: int) -> list[int]:
        with self._lock:
            return sorted(b for b in self._plans if after < b <= upto)

    def acknowledge(self, upto: int) -> None:
        assert self._ledger is not None and self._acks is not None and self._leaser is not None
        with self._lock:
            plans = sorted(((b, p) for b, p in self._plans.items() if b <= upto), key=lambda bp: bp[0])
        batches = [b for b, _ in plans]
        done: list[_Slice] = []
        evidence = True
        for bid, plan in plans:
            slices = [self._slice(bid, p) for p in range(plan.parts)]
            done.extend(slices)
            if bid == upto:
                evidence = self._drained(bid, slices)
        with self._lock:
            for bid in batches:
                del self._plans[bid]
            for key in [k for k in self._slices if k[0] <= upto]:
                del self._slices[key]
        self._unanswered = {b for b in self._unanswered if b > upto}
        self._committed = max(self._committed, upto)
        self._evidence = (upto, evidence and bool(batches) and batches[-1] == upto)
        chunks = [c for s in done for c in s.chunks]
        later = [c for s in done for c in s.later]
        for c in chunks:
            c.state = DONE
        self._leaser.discard(chunks)
        self._later.extend(later)
        if self._cutoff_us is None and self._later:
            self.end_available_now(0.0)  # a plan of an earlier AvailableNow run, replayed outside one
        acks = pa.concat_tables([s.acks for s in done]) if done else None
        if acks is not None and acks.num_rows:
            self._ledger.committed(upto, acks)
        else:
            self._ledger.committed(upto, [])
        for bid, plan in plans:
            self._store.forget(bid, plan.parts)
        ledger = self._ledger
        self._acks.acknowledge(chunks, lambda unproven: ledger.answered(upto, unproven))

    def end_available_now(self, within: float) -> bool:
        assert self._acker is not None and self._leaser is not None
        later, self._later = self._later, []
        if later:
            for c in later:
                c.state = DONE
            self._leaser.discard(later)
            by_sub: dict[str, list[str]] = {}
            for c in later:
                by_sub.setdefault(c.sub, []).extend(c.fresh_ack_ids())
            for sub, ids in by_sub.items():
                self._acker.submit(Job(NACK, sub, ids))
            self.counters.add("handedBack", sum(len(c) for c in later))
        return self._acker.flush(within)

    def gauges(self) -> dict[str, Any]:
        with self._lock:
            slices = list(self._slices.values())
        held = sum(s.info.kept for s in slices)
        later = sum(len(c) for s in slices for c in s.later) + sum(len(c) for c in self._later)
        oldest = min((s.info.oldest_us for s in slices if s.info.oldest_us is not None), default=None)
        now_us = int(time.time() * 1_000_000)
        return {
            "buffered": 0,
            "inFlight": held,
            "laterHeld": later,
            "heldBytes": 0,
            "awaitingCommit": held,
            "rememberedIds": self._remembered.count(),
            "oldestUnackedAgeSeconds": round((now_us - oldest) / 1e6, 3) if oldest is not None else 0.0,
        }

    def shutdown(self, within: float) -> float:
        """Stop leasing; let queued acknowledgements reach Pub/Sub (at most ``within`` s).

        Recorded slices are not handed back: Spark replays their batch from them, and what the
        next run pulls again of them is recognised. Clean only when none was held.
        """
        end = time.monotonic() + within
        self._stop.set()
        if self._leaser is not None:
            self._leaser.stop(timeout=min(1.0, within))
        flushed = True
        if self._acker is not None:
            flushed = self._acker.flush(max(0.0, end - time.monotonic()))
            self._acker.stop()
        with self._lock:
            held = bool(self._slices) or bool(self._later)
        if held or not flushed:
            return float("inf")
        return max(self._shadow.values(), default=0.0)

    # ---------------------------------------------------------------- slices

    def _slice(self, bid: int, part: int) -> _Slice:
        """Read slice ``part`` of committed batch ``bid`` by its exact name.

        Spark committed the batch, so every task recorded (or replayed) its slice: one not visible
        yet is waited for, and one that stays missing fails the query rather than leave its
        messages unacknowledged and unrecognised.
        """
        with self._lock:
            known = self._slices.get((bid, part))
        if known is not None:
            return known
        end = time.monotonic() + SLICE_VISIBLE_SECONDS
        while True:
            found = self._store.read_acks(bid, part)
            if found is not None:
                return self._register(bid, part, *found, lease=False)
            if time.monotonic() >= end:
                raise StateDirError(
                    f"batch {bid} was committed by Spark but its slice {part} is not in the stateDir "
                    f"({self._store.key(bid, part)}) after {SLICE_VISIBLE_SECONDS:.0f} s; its messages can't be "
                    "acknowledged, so the query stops (is the stateDir one directory that every executor and the "
                    "driver reach?)"
                )
            time.sleep(0.5)

    def _register(self, bid: int, part: int, table: pa.Table, info: SliceInfo, *, lease: bool) -> _Slice:
        """Hold a recorded slice: its rows by role, leased until its batch commits (``lease``)."""
        roles = table.column("role").to_numpy()
        now = time.monotonic()
        # The task proved the leases until this wall time; counted on this host's clock, less
        # the skew between hosts. The leaser renews at once: if Pub/Sub answers before it, the
        # proof goes on.
        proven = now + (info.proven_until - time.time()) - CLOCK_SKEW_SECONDS
        chunks = _chunks(table, roles != LATER, now, proven)
        later = _chunks(table, roles == LATER, now, proven)
        acks = table.filter(pa.array(roles != LATER)).select(["sub", "message_id", "ack_id"])
        s = _Slice(chunks, later, info, acks)
        with self._lock:
            have = self._slices.get((bid, part))
            if have is not None:
                return have
            self._slices[(bid, part)] = s
        self.counters.add("received", info.kept)
        self.counters.add("redeliveriesDropped", info.rows - info.kept - sum(len(c) for c in later))
        self.counters.add("handedBack", info.handed_back)
        self.counters.add("pullErrors", info.pull_errors)
        for sub, pull in info.subs.items():
            # A Pull of this slice that timed out may have leased messages to nobody: no empty
            # answer to a Pull sent before its shadow ends proves the subscription drained.
            if pull.shadow_until > self._shadow.get(sub, 0.0):
                self._shadow[sub] = pull.shadow_until
        if lease and self._leaser is not None:
            self._leaser.add(chunks + later, max(1.0, proven - now), renew_now=True)
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
            for part in self._store.listed(bid):
                if part >= plan.parts or (bid, part) in seen:
                    continue
                found = self._store.read_acks(bid, part)
                if found is not None and bid > self._committed:
                    self._register(bid, part, *found, lease=True)

    def _drop_sets(self, batch_id: int) -> dict[str, IdSet]:
        """Return, by subscription, the ids a task of ``batch_id`` must not yield again.

        Those acknowledged without proof or not answered yet, or held in a slice of another
        uncommitted batch; a slice of the same batch is checked by the task itself when it records.
        """
        with self._lock:
            held: dict[str, list[str]] = {}
            for (bid, _), s in self._slices.items():
                if bid == batch_id:
                    continue
                for c in s.chunks:
                    held.setdefault(c.sub, []).extend(c.message_ids)
        now = time.monotonic()
        out = {}
        for sub in self._subs:
            ids = self._remembered.ids(sub, now)
            if sub in held:
                ids = ids.union(IdSet.of(held[sub]))
            if len(ids):
                out[sub] = ids
        return out

    def _drained(self, bid: int, slices: list[_Slice]) -> bool:
        """Return whether committed batch ``bid``'s tasks found every subscription drained.

        Each ended on an empty answer (or one of only later messages) to a Pull sent after any
        earlier Pull of it could have leased messages to nobody, with Pub/Sub reachable; and for an
        ordered subscription, nothing of it was held when they pulled (no row kept in the batch, the
        previous acknowledgements answered and proven).
        """
        for s in slices:
            for sub, pull in s.info.subs.items():
                if pull.last not in ("empty", "later") or pull.unavailable:
                    return False
                if pull.last_sent < max(pull.shadow_until, self._shadow.get(sub, 0.0)):
                    return False
                info = self._subs.get(sub)
                held = bid in self._unanswered or any(x.info.subs.get(sub, pull).kept for x in slices)
                if info is not None and info.ordered and held:
                    return False
        return bool(slices)

    def _on_unproven(self, sub: str) -> None:
        # An acknowledgement not proven may leave its message leased, holding an ordered key's
        # next messages back until the lease lapses: no empty answer before then proves "drained".
        info = self._subs.get(sub)
        until = time.time() + (info.ack_deadline if info else self._opts.ackDeadlineSeconds)
        self._shadow[sub] = max(self._shadow.get(sub, 0.0), until)


def _chunks(table: pa.Table, mask: np.ndarray, now: float, proven: float) -> list[Chunk]:
    """One chunk per subscription of a slice's rows where ``mask``."""
    if not mask.any():
        return []
    part = table.filter(pa.array(mask)) if not mask.all() else table
    subs = part.column("sub").to_pylist()
    mids = part.column("message_id").to_pylist()
    acks = part.column("ack_id").to_pylist()
    if len(set(subs)) == 1:
        return [Chunk(subs[0], mids, acks, None, 0, 0, now, proven_until=proven)]
    rows: dict[str, list[int]] = {}
    for i, s in enumerate(subs):
        rows.setdefault(s, []).append(i)
    return [
        Chunk(sub, [mids[i] for i in idx], [acks[i] for i in idx], None, 0, 0, now, proven_until=proven)
        for sub, idx in rows.items()
    ]


__all__ = ["ExecutorsMode", "ReceiverError"]
