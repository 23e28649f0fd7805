"""The driver's side of ``receiver=executors``: plan slices, keep their leases, acknowledge on commit.

The offset protocol is the driver mode's (:class:`~..planner.Planner`, whose run and commit
bookkeeping this class inherits): only a ``latestOffset`` (or ``commit``) call proves a commit,
and a proven commit acknowledges exactly the batches it covers. What differs is where messages
are: every ``latestOffset`` plans batch ``start + 1`` without pulling anything (a task that finds
the subscription empty records an empty slice: an empty batch is cheap), and a batch's messages
are known only from the slices its tasks recorded.

* **Leases.** A thread lists the slices of uncommitted batches every :data:`SCAN_SECONDS` and
  leases what it finds with the receiver's :class:`~..receiver.leaser.Leaser`, from the ack ids
  recorded in them, until the batch commits (or ``maxLeaseDurationSeconds``).
* **Acknowledgements.** A proven commit of N acknowledges the ack ids of every slice of batches
  ``<= N`` through the receiver's :class:`~..receiver.acker.Acker`, records them in the ledger
  (as the driver mode does) and deletes the slices.
* **Redeliveries.** Message ids whose delivery can't be known to be over (slices recorded by an
  earlier process, acknowledgements Pub/Sub did not confirm) travel to the tasks in each order;
  a task records a redelivery of one of them with its new ack id (acknowledged with the batch)
  and does not yield it.
* **AvailableNow** (4.2+): the orders carry the cutoff; the run ends at the first batch whose
  every slice reported its subscriptions drained.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..ledger import Ledger
from ..planner import ACK_FLUSH_SECONDS, STATE_DIR_WAIT_SECONDS, Planner, _Answers, batch_of, run_of
from ..receiver import DEDUPE_WINDOW_SECONDS, UNCONFIRMED_MEMORY_SECONDS, ReceiverError, open_subscription
from ..receiver.acker import ACK, Acker, Job
from ..receiver.chunks import DONE, Chunk
from ..receiver.leaser import Leaser
from ..stats import StatsServer
from ..transport import AckResult, Rpc, rpc_for
from .pull import SliceOrder
from .store import SliceInfo, SliceStore

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.slices")

SCAN_SECONDS = 0.5
MAX_TASK_PULL_SECONDS = 5.0
TASK_PULL_FRACTION = 0.4  # of the shortest subscription ack deadline: leases outlive the pull


class _Slice:
    """A recorded slice the driver leases until its batch commits."""

    __slots__ = ("acks", "chunks", "info", "stale")

    def __init__(self, chunks: list[Chunk], info: SliceInfo, stale: bool, acks: "pa.Table") -> None:
        self.chunks = chunks
        self.info = info
        self.stale = stale  # recorded by an earlier process: its acknowledgement proves nothing
        self.acks = acks  # (sub, message_id, ack_id) as recorded: what the ledger keeps of a commit


class SlicePlanner(Planner):
    """Driver-side state of one query in ``receiver=executors`` mode."""

    def __init__(self, options: "SourceOptions", *, rpc: Rpc | None = None) -> None:
        super().__init__(options)
        assert options.stateDir, "receiver=executors needs stateDir (checked by the options)"
        self._store = SliceStore(options.stateDir)
        self._given_rpc = rpc
        self._rpc: Rpc | None = None
        self._acker: Acker | None = None
        self._leaser: Leaser | None = None
        self._deadlines: dict[str, int] = {}
        self._plans: dict[int, dict] = {}
        self._available_now_from: int | None = None  # the first batch planned in an AvailableNow run
        # Guards the slices below and ``_drop``; the scan thread and Spark's thread both use them.
        self._slices_lock = threading.Lock()
        self._slices: dict[tuple[int, int], _Slice] = {}
        # batch -> partition -> did its slice find its subscriptions drained; outlives the slices,
        # which a commit deletes before the AvailableNow end check reads this.
        self._drained_parts: dict[int, dict[int, bool]] = {}
        self._acked_upto = -1
        self._drop: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None

    # ---------------------------------------------------------------- start

    def _begin(self, offset: dict | None) -> Any:
        if not self._begun:
            self._start(run_of(offset))
        self._learn(offset)
        return None

    def _start(self, run: str | None) -> None:
        opts = self._opts
        ledger = Ledger(opts.stateDir, wait_seconds=STATE_DIR_WAIT_SECONDS, window_seconds=DEDUPE_WINDOW_SECONDS,
                        unconfirmed_seconds=UNCONFIRMED_MEMORY_SECONDS, run=run)
        try:
            ledger.check_subscriptions(opts.subscription_paths)
            recovered = ledger.recover()
            rpc = self._given_rpc or rpc_for(opts)
            topics = opts.topic_paths
            for i, sub in enumerate(opts.subscription_paths):
                self._deadlines[sub] = open_subscription(rpc, sub, topics[i] if topics else None, opts.filter,
                                                         lease_seconds=opts.ackDeadlineSeconds,
                                                         endpoint=opts.endpoint_description)
        except Exception:
            ledger.close()
            raise
        self._ledger, self._rpc = ledger, rpc
        if recovered.pending:
            log.warning("stateDir holds %d batch(es) planned with receiver=driver; this query reads with "
                        "receiver=executors, so their messages come again from Pub/Sub", len(recovered.pending))
            ledger.drop(sorted(recovered.pending))
        self._acked_upto = recovered.newest_commit
        self._store.drop(recovered.newest_commit)
        for sub, pairs in recovered.unconfirmed:
            self._drop.setdefault(sub, set()).update(m for m, _ in pairs)
        self._acker = Acker(rpc)
        self._leaser = Leaser(self._renew, lease_seconds=opts.ackDeadlineSeconds,
                              max_lease_seconds=opts.maxLeaseDurationSeconds,
                              on_given_up=lambda n: self.counters.add("leasesExpired", n))
        self._acker.start()
        self._leaser.start()
        for sub, pairs in recovered.unconfirmed:  # acknowledge again: they may still work
            self._acker.submit(Job(ACK, sub, [a for _, a in pairs]))
        self._scan(stale=True)
        recorded = sorted({b for b, _ in self._slices})
        if recorded:
            log.info("stateDir holds slices of batch(es) %s not known to be committed: replayed if Spark runs them "
                     "again, and their messages are not yielded a second time", recorded)
        self._scanner = threading.Thread(target=self._scan_loop, name="crdb-pubsub-slice-scan", daemon=True)
        self._scanner.start()
        self._stats = StatsServer(self._on_stats)
        self._begun = True

    # ---------------------------------------------------------------- Spark's calls

    def prepare_available_now(self) -> None:
        with self._lock:
            self._available_now_at = (int(time.time() * 1_000_000), time.monotonic())

    def latest(self, start: dict | None, max_messages: int | None, max_bytes: int | None) -> dict:
        with self._lock:
            self._begin(start)
            if start is not None:
                self._spark_latest = batch_of(start) or 0
            self._prove_committed(self._spark_latest)
            base = self._spark_latest
            if self._available_now_at is not None:
                if self._available_now_from is not None and base >= self._available_now_from and self._drained(base):
                    assert self._acker is not None
                    if not self._acker.flush(ACK_FLUSH_SECONDS):
                        log.warning("some acknowledgements were not answered within %.0f s; they are remembered in "
                                    "the stateDir", ACK_FLUSH_SECONDS)
                    self._available_now_at = None
                    self._available_now_from = None
                    return self._offset(base)
            bid = base + 1
            if self._run is None:
                self._fresh_run()
            plan = {"max_messages": max_messages, "max_bytes": max_bytes,
                    "cutoff_us": self._available_now_at[0] if self._available_now_at else None}
            self._store.write_plan(bid, plan)
            self._plans[bid] = plan
            if self._available_now_at is not None and self._available_now_from is None:
                self._available_now_from = bid
            self._spark_latest = bid
            self.counters.add("batchesPlanned")
            self._maybe_summarise()
            return self._offset(bid)

    def partitions(self, start: dict, end: dict) -> list[tuple[int, int, SliceOrder]]:  # type: ignore[override]
        with self._lock:
            self._begin(end)
            sid, eid = batch_of(start) or 0, batch_of(end) or 0
            self._spark_latest = max(self._spark_latest, eid)
            out: list[tuple[int, int, SliceOrder]] = []
            for bid in range(max(sid, eid - 1000) + 1, eid + 1):
                plan = self._plans.get(bid)
                if plan is None:  # planned by an earlier process: what it decided, if recorded
                    plan = self._store.read_plan(bid) or {}
                    self.counters.add("batchesReplayed")
                out.extend((bid, o.index, o) for o in self._orders(bid, plan))
            return out

    def report(self) -> dict[str, Any]:
        with self._lock, self._slices_lock:
            out: dict[str, Any] = {"batch": self._spark_latest}
            out.update(self.counters.snapshot())
            out["malformed"] = sum(self._malformed.values())
            held = sum(s.info.kept for s in self._slices.values())
            oldest = min((s.info.oldest_us for s in self._slices.values() if s.info.oldest_us is not None),
                         default=None)
            now_us = int(time.time() * 1_000_000)
            out.update({
                "buffered": 0, "inFlight": held, "laterHeld": 0, "heldBytes": 0, "awaitingCommit": held,
                "rememberedIds": sum(len(v) for v in self._drop.values()),
                "oldestUnackedAgeSeconds": round((now_us - oldest) / 1e6, 3) if oldest is not None else 0.0,
            })
            return out

    def shutdown(self, *, within: float) -> None:
        """Stop leasing; let queued acknowledgements reach Pub/Sub (at most ``within`` s).

        Recorded slices are not handed back: Spark replays their batch from them, and what the
        next run pulls again of them is recognised.
        """
        end = time.monotonic() + within
        self._stop.set()
        try:
            if self._leaser is not None:
                self._leaser.stop(timeout=min(1.0, within))
            if self._acker is not None:
                self._acker.flush(max(0.0, end - time.monotonic()))
                self._acker.stop()
        finally:
            if self._ledger is not None:
                self._ledger.close()
            if self._stats is not None:
                self._stats.close()

    # ---------------------------------------------------------------- planning

    def _orders(self, bid: int, plan: dict) -> list[SliceOrder]:
        opts = self._opts
        subs = opts.subscription_paths
        parts = opts.numPartitions or max(2, len(subs))
        max_messages = min(plan.get("max_messages") or opts.maxOutstandingMessages, opts.maxOutstandingMessages)
        max_bytes = min(plan.get("max_bytes") or opts.maxOutstandingBytes, opts.maxOutstandingBytes)
        shortest = min(self._deadlines.values(), default=10)
        seconds = max(0.5, min(MAX_TASK_PULL_SECONDS, shortest * TASK_PULL_FRACTION))
        with self._slices_lock:
            drop = {s: frozenset(ids) for s, ids in self._drop.items() if ids}
        orders = []
        for i in range(parts):
            mine = tuple(subs[i::parts]) if parts < len(subs) else (subs[i % len(subs)],)
            orders.append(SliceOrder(
                batch_id=bid, index=i, subscriptions=mine,
                max_messages=max(1, math.ceil(max_messages / parts)), max_bytes=max(1, math.ceil(max_bytes / parts)),
                seconds=seconds, cutoff_us=plan.get("cutoff_us"),
                drop={s: drop[s] for s in mine if s in drop}))
        return orders

    def _drained(self, bid: int) -> bool:
        """Every task of ``bid`` recorded its slice and found its subscriptions drained."""
        with self._slices_lock:
            parts = self._drained_parts.get(bid, {})
            for old in [b for b in self._drained_parts if b < bid]:
                del self._drained_parts[old]
        expected = self._opts.numPartitions or max(2, len(self._opts.subscription_paths))
        return len(parts) >= expected and all(parts.values())

    # ---------------------------------------------------------------- leases

    def _scan_loop(self) -> None:
        while not self._stop.wait(SCAN_SECONDS):
            try:
                self._scan(stale=False)
            except Exception:  # noqa: BLE001 - the scan must outlive any single failure
                log.exception("scanning the stateDir for slices failed")

    def _scan(self, *, stale: bool) -> None:
        """Lease the slices recorded since the last scan (``stale``: by an earlier process)."""
        found: list[tuple[tuple[int, int], "Path"]] = []
        with self._slices_lock:
            upto = self._acked_upto
            for bid in self._store.batches():
                if bid <= upto:
                    continue
                found.extend(((bid, part), path) for part, path in self._store.slices(bid)
                             if (bid, part) not in self._slices)
        for key, path in found:
            try:
                table, info = self._store.read_acks(path)
            except FileNotFoundError:
                continue  # committed and deleted meanwhile
            chunks = _chunks(table)
            with self._slices_lock:
                if key[0] <= self._acked_upto or key in self._slices:
                    continue
                self._slices[key] = _Slice(chunks, info, stale, table.select(["sub", "message_id", "ack_id"]))
                self._drained_parts.setdefault(key[0], {})[key[1]] = info.drained
                if stale:
                    for c in chunks:
                        self._drop.setdefault(c.sub, set()).update(c.message_ids)
            if not stale:
                self.counters.add("received", info.kept)
                self.counters.add("redeliveriesDropped", info.rows - info.kept)
                self.counters.add("handedBack", info.handed_back)
            # The task extended the leases to ackDeadlineSeconds once the slice was recorded; count
            # from the first Pull in case it could not.
            assert self._leaser is not None
            shortest = min((self._deadlines.get(c.sub, 10) for c in chunks), default=10)
            self._leaser.add(chunks, max(1.0, shortest - (time.time() - info.pulled_at)))

    def _renew(self, sub: str, ack_ids: list[str], seconds: int) -> None:
        assert self._rpc is not None
        result = self._rpc.modify_ack_deadline(sub, ack_ids, seconds)
        self.counters.add("leasesExtended", len(result.confirmed))
        if result.failed:
            log.warning("extending the lease of %d recorded message(s) on %s failed (%s); they may be delivered "
                        "again, and are then not yielded twice only if their slice's batch is replayed first",
                        len(result.failed), sub, next(iter(result.failed.values())))

    # ---------------------------------------------------------------- acknowledgements

    def _prove_committed(self, upto: int) -> None:
        if upto <= self._acked_upto:
            return
        self._scan(stale=False)  # slices recorded since the last scan belong to what is acknowledged
        with self._slices_lock:
            keys = sorted(k for k in self._slices if k[0] <= upto)
            done = [self._slices.pop(k) for k in keys]
            self._acked_upto = upto
        chunks = [c for s in done for c in s.chunks]
        for c in chunks:
            c.state = DONE
        assert self._leaser is not None and self._acker is not None and self._ledger is not None
        self._leaser.discard(chunks)
        acks = pa.concat_tables([s.acks for s in done]) if done else None
        self._ledger.committed(upto, acks if acks is not None and acks.num_rows else [])
        self._store.drop(upto)
        if acks is None or not acks.num_rows:
            return
        by_sub: dict[str, list[Chunk]] = {}
        for c in chunks:
            by_sub.setdefault(c.sub, []).append(c)
        answers = _Answers(upto, len(by_sub), self._ledger.answered)
        stale_ids = {a for s in done if s.stale for c in s.chunks for a in c.ack_ids}
        for sub, cs in by_sub.items():
            ack_ids = list(itertools.chain.from_iterable(c.ack_ids for c in cs))
            self._acker.submit(Job(ACK, sub, ack_ids, on_done=self._answered(sub, cs, stale_ids, answers)))
        self.counters.add("acknowledged", acks.num_rows)

    def _answered(self, sub: str, chunks: list[Chunk], stale: set[str], answers: _Answers):  # noqa: ANN202
        def done(result: AckResult) -> None:
            with self._slices_lock:
                remembered = bool(self._drop.get(sub))
            if not stale and not result.failed and not remembered:
                # The usual answer: everything confirmed and nothing to forget; no per-id work.
                self.counters.add("ackConfirmed", len(result.confirmed))
                answers.on_done(sub, [], [])
                return
            mid_of = {a: m for c in chunks for m, a in zip(c.message_ids, c.ack_ids)}
            confirmed = [mid_of[a] for a in result.confirmed if a not in stale]
            unconfirmed = [(mid_of[a], a) for a in result.confirmed if a in stale]
            unconfirmed += [(mid_of[a], a) for a in result.failed]
            self.counters.add("ackConfirmed", len(confirmed))
            self.counters.add("ackStale", len(result.confirmed) - len(confirmed))
            self.counters.add("ackFailed", len(result.failed))
            with self._slices_lock:
                ids = self._drop.setdefault(sub, set())
                # A confirmed acknowledgement ends a message's delivery: no need to recognise it.
                ids.difference_update(confirmed)
                ids.update(m for m, _ in unconfirmed)
            answers.on_done(sub, confirmed, unconfirmed)
        return done


def _chunks(table: "pa.Table") -> list[Chunk]:
    """One chunk per subscription of a slice's ack columns (built in bulk: most slices read one)."""
    import pyarrow.compute as pc

    now = time.monotonic()
    subs = pc.unique(table.column("sub")).to_pylist()
    if len(subs) == 1:
        return [Chunk(subs[0], table.column("message_id").to_pylist(), table.column("ack_id").to_pylist(), None,
                      0, 0, now)]
    out = []
    for sub in subs:
        part = table.filter(pc.equal(table.column("sub"), sub))
        out.append(Chunk(sub, part.column("message_id").to_pylist(), part.column("ack_id").to_pylist(), None, 0, 0,
                         now))
    return out


__all__ = ["SlicePlanner", "ReceiverError"]
