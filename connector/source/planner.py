"""The offset protocol: what Spark's calls prove, and how they become sealed batches and acks.

Offsets are ``{"batch": N, "run": R}``: N counts the batches this source planned for the query,
R names the query run (a fresh checkpoint starts a new run; it ties a ``stateDir`` to its
checkpoint). Spark drives the calls in an order that differs by version (measured on 4.0.5,
4.1.4, 4.2.1 and 4.3.0; ``tests/spark_calls.py`` plays them), and the protocol relies only on
what every version guarantees:

* **Only a ``latestOffset`` call proves a commit.** Spark asks for the next offset only after the
  previous batch's sink finished and its commit-log entry was written. On 4.2+ the call names the
  committed end (``latestOffset(start)``); on 4.0/4.1 it takes no argument, and the committed end
  is the newest offset Spark holds: the last one this process returned, or the one Spark named in
  ``partitions`` (after a restart Spark runs an uncommitted batch again *before* it asks for the
  next offset). ``commit(end)`` proves it too. ``partitions(start, end)`` proves nothing: after a
  restart 4.0/4.1 first call ``partitions(X, X)`` with a batch X that may never have committed.
* A proven commit acknowledges exactly the messages of the batches it covers, so a batch is
  acknowledged at the next ``latestOffset``, with no empty batch needed on any version.
* ``latestOffset`` seals what is buffered into batch ``start + 1``, durably first with a
  stateDir. The first call of a process waits for what the subscriptions hold (bounded), so a
  single-batch run (``Trigger.Once``, or AvailableNow on 4.0/4.1) reads the backlog.
* ``partitions`` hands out a batch's stored payloads; a batch this process never planned is
  replayed from the stateDir with the same content, or yields nothing (never acknowledged, so
  Pub/Sub delivers its messages again) without one.
* AvailableNow (4.2+): messages published after the run began are held apart; the run ends when
  every subscription answered a Pull with nothing older, or when only such messages fill the flow
  control; those are then handed back once and the acknowledgements are awaited (bounded).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from . import wire
from .ledger import BATCH_SCHEMA, Ledger
from .metrics import Counters
from .receiver import DEDUPE_WINDOW_SECONDS, UNCONFIRMED_MEMORY_SECONDS, Receiver, ReceiverError
from .receiver.chunks import Chunk, sizes_of
from .stats import StatsServer

if TYPE_CHECKING:  # pragma: no cover
    from .options import SourceOptions

log = logging.getLogger("crdb_pubsub.planner")

FIRST_FILL_SECONDS = 20.0  # the first batch of a process waits at most this long for the backlog
AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS = 120.0
ACK_FLUSH_SECONDS = 35.0  # the end of an AvailableNow run waits this long for acknowledgements
STATE_DIR_WAIT_SECONDS = 30.0  # for the previous run of this query to release the stateDir
SUMMARY_EVERY_SECONDS = 30.0


def run_of(offset: dict | None) -> str | None:
    """R of an offset ``{"batch": N, "run": R}`` (``None`` when it names no run)."""
    run = offset.get("run") if isinstance(offset, dict) else None
    return str(run) if run is not None else None


def batch_of(offset: dict | None) -> int | None:
    """N of an offset ``{"batch": N, ...}`` (``None`` for ``None``)."""
    if offset is None:
        return None
    try:
        return int(offset["batch"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"crdb_pubsub: offset {offset!r} was not written by this source (expected {{'batch': N}}); "
            "was the checkpoint location used by another source?") from None


@dataclass
class SealedBatch:
    batch_id: int
    chunks: list[Chunk]
    payloads: list[pa.Buffer]  # one Arrow IPC stream per Spark partition
    messages: int


class Planner:
    """The driver-side state of one streaming query in one process.

    ``_lock`` serialises Spark's calls (they come from one thread, but a SIGTERM hand-back and
    metric reports may come from others) and guards ``_sealed``, ``_recovered`` and the offsets.
    """

    def __init__(self, options: "SourceOptions", *, receiver_factory: Callable[["SourceOptions", Counters], Receiver] | None = None) -> None:
        self._opts = options
        self._lock = threading.RLock()
        self._receiver_factory = receiver_factory or _make_receiver
        self.counters = Counters()
        self._receiver: Receiver | None = None
        self._ledger: Ledger | None = None
        self._stats: StatsServer | None = None
        self._run: str | None = None
        self._begun = False
        self._sealed: dict[int, SealedBatch] = {}
        self._recovered: dict[int, tuple[pa.Table, list[Chunk]]] = {}
        self._spark_latest = 0  # the newest offset Spark holds (see the module docstring)
        self._first_latest = True
        self._available_now_at: tuple[int, float] | None = None  # (cutoff us, monotonic)
        self._warned_unreplayable: set[int] = set()
        self._malformed: dict[tuple[int, int], int] = {}
        self._last_summary = time.monotonic()

    # ---------------------------------------------------------------- start

    def _begin(self, offset: dict | None) -> Receiver:
        """Every Spark call starts here: start receiving on the first, learn the query run from
        the first offset that names one (see :meth:`_learn`)."""
        if not self._begun:
            self._start(run_of(offset))
        self._learn(offset)
        assert self._receiver is not None
        return self._receiver

    def _start(self, run: str | None) -> None:
        """Open the stateDir (recovering what an earlier process left) and start pulling.

        ``run``: the query run named by the offset of the call that starts the reader, if any.

        Recovered batches are held *before* pulling starts, so that Pub/Sub's redeliveries of
        their messages are recognised as theirs. Whether they are replayed or planned anew is
        decided later, when Spark's calls show which batches it knows.
        """
        opts = self._opts
        receiver = self._receiver_factory(opts, self.counters)
        recovered = None
        if opts.stateDir:
            ledger = Ledger(opts.stateDir, wait_seconds=STATE_DIR_WAIT_SECONDS, window_seconds=DEDUPE_WINDOW_SECONDS,
                            unconfirmed_seconds=UNCONFIRMED_MEMORY_SECONDS, run=run)
            try:
                ledger.check_subscriptions(opts.subscription_paths)
                recovered = ledger.recover()
            except Exception:
                ledger.close()
                raise
            self._ledger = ledger
            for bid, table in recovered.pending.items():
                chunks = _chunks_of(table)
                receiver.adopt(chunks)
                self._recovered[bid] = (table, chunks)
            for sub, mids, expires_in in recovered.remembered:
                receiver.remember(sub, mids, expires_in)
            for sub, pairs in recovered.unconfirmed:
                receiver.remember(sub, [m for m, _ in pairs], UNCONFIRMED_MEMORY_SECONDS)
            if recovered.pending:
                log.info("stateDir holds %d planned batch(es) not known to be committed: %s",
                         len(recovered.pending), sorted(recovered.pending))
        if self._available_now_at is not None:
            receiver.set_cutoff(self._available_now_at[0])
        try:
            receiver.start(create_on_topics=opts.topic_paths or None, subscription_filter=opts.filter)
        except Exception:
            if self._ledger is not None:
                self._ledger.close()
            raise
        if recovered is not None:
            for sub, pairs in recovered.unconfirmed:
                receiver.resend_acks(sub, pairs)
        self._stats = StatsServer(self._on_stats)
        self._receiver = receiver
        self._begun = True

    def _learn(self, offset: dict | None) -> None:
        """Which query run Spark drives, from the offsets it names.

        Offsets after the first batch carry the run (``{"batch": N, "run": R}``). A process whose
        first calls name no run serves a fresh checkpoint (or one whose first batch never
        committed): a stateDir holding another run's committed batches is refused there. The run
        of a fresh checkpoint is created when its first batch is sealed (:meth:`_fresh_run`).
        """
        run = run_of(offset)
        if run is None:
            if self._run is None and (offset is None or batch_of(offset) == 0):
                if self._ledger is not None and self._ledger.has_committed_history():
                    self._ledger.claim(None, self._opts.subscription_paths, fresh=True)
            return
        if self._run is None:
            self._run = run
            if self._ledger is not None:
                self._ledger.claim(run, self._opts.subscription_paths)
        elif run != self._run:
            raise ValueError(
                f"crdb_pubsub: Spark named offset {offset!r} of query run {run}, but this reader serves run "
                f"{self._run}; was the checkpoint location used by another query?")

    def _fresh_run(self) -> None:
        self._run = uuid.uuid4().hex[:12]
        if self._ledger is not None:
            self._ledger.claim(self._run, self._opts.subscription_paths, fresh=True)

    def _offset(self, bid: int) -> dict:
        # Batch 0 is the initial offset, the same in every run (Spark recomputes it).
        if bid == 0 or self._run is None:
            return {"batch": bid}
        return {"batch": bid, "run": self._run}

    # ---------------------------------------------------------------- Spark's calls

    def initial_offset(self) -> dict:
        with self._lock:
            # With a stateDir the reader starts at the next call, which names an offset: after a
            # restart it names the query run, by which the stateDir can be taken over from a
            # reader of that run that outlived it (Ledger). Without one, start now: a missing
            # subscription fails the query at once, and pulling starts early.
            if not self._opts.stateDir:
                self._begin(None)
            return {"batch": 0}

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow (4.2+): read what was published until now, then end.

        Spark calls this before any offset call, so the receiver is not started here (the run
        is not known yet); the cutoff applies from the receiver's start.
        """
        with self._lock:
            self._available_now_at = (int(time.time() * 1_000_000), time.monotonic())
            if self._receiver is not None:
                self._receiver.set_cutoff(self._available_now_at[0])

    def latest(self, start: dict | None, max_messages: int | None, max_bytes: int | None) -> dict:
        with self._lock:
            receiver = self._begin(start)
            receiver.raise_if_failed()
            if start is not None:
                self._spark_latest = batch_of(start) or 0
            # Spark asks for the next offset only once the batch ending at its newest offset
            # committed: acknowledge everything up to there.
            self._prove_committed(self._spark_latest)
            base = self._spark_latest
            if self._first_latest:
                self._first_latest = False
                self._dissolve_unseen(receiver, base)
                self._wait_first_fill(receiver, max_messages)
            if self._available_now_at is not None:
                self._wait_available_now(receiver)
            chunks = receiver.take(max_messages, max_bytes)
            self._maybe_summarise()
            if chunks:
                bid = base + 1
                if self._run is None:
                    self._fresh_run()
                self._seal(bid, chunks)
                self._spark_latest = bid
                return self._offset(bid)
            if self._available_now_at is not None:
                # The run ends with this answer: acknowledgements must reach Pub/Sub first.
                if not receiver.end_available_now(within=ACK_FLUSH_SECONDS):
                    log.warning("some acknowledgements were not answered within %.0f s; %s", ACK_FLUSH_SECONDS,
                                "they are remembered in the stateDir" if self._ledger else
                                "their messages may be delivered again (set stateDir to recognise them)")
                self._available_now_at = None
            return self._offset(base)

    def partitions(self, start: dict, end: dict) -> list[tuple[int, int, pa.Buffer]]:
        """The payloads of batches in ``(start, end]``: ``(batch id, index, Arrow IPC)``."""
        with self._lock:
            self._begin(end)
            sid, eid = batch_of(start) or 0, batch_of(end) or 0
            self._spark_latest = max(self._spark_latest, eid)
            out: list[tuple[int, int, pa.Buffer]] = []
            wanted = range(sid + 1, eid + 1) if eid - sid <= 1000 else sorted(
                b for b in set(self._sealed) | set(self._recovered) if sid < b <= eid)
            for bid in wanted:
                batch = self._sealed.get(bid) or self._replay(bid)
                if batch is None:
                    if bid not in self._warned_unreplayable:
                        self._warned_unreplayable.add(bid)
                        log.warning(
                            "batch %d was planned by an earlier process and %s: it yields no rows now; its messages "
                            "were never acknowledged, so Pub/Sub delivers them again into later batches", bid,
                            "the stateDir has no record of it" if self._opts.stateDir else "no stateDir is set")
                    continue
                out.extend((bid, i, p) for i, p in enumerate(batch.payloads))
            return out

    def commit(self, end: dict) -> None:
        """Spark committed every batch ``<= end``: acknowledge their messages."""
        with self._lock:
            self._begin(end)
            self._prove_committed(batch_of(end) or 0)

    def report(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {"batch": self._spark_latest}
            out.update(self.counters.snapshot())
            out["malformed"] = sum(self._malformed.values())
            if self._receiver is not None:
                out.update(self._receiver.gauges())
            out["awaitingCommit"] = sum(b.messages for b in self._sealed.values())
            return out

    def shutdown(self, *, within: float) -> None:
        """Stop receiving, hand held messages back, release the stateDir (at most ``within`` s)."""
        receiver, ledger, stats = self._receiver, self._ledger, self._stats
        log.info("stopping: handing %d held message(s) back to Pub/Sub", receiver.flow.held_messages if receiver else 0)
        try:
            if receiver is not None:
                receiver.shutdown(hand_back=True, within=within)
        finally:
            if ledger is not None:
                ledger.close()
            if stats is not None:
                stats.close()

    # ---------------------------------------------------------------- internals

    def _prove_committed(self, upto: int) -> None:
        # Batches an earlier process planned and Spark committed before that process heard of it
        # (Spark 4.0/4.1 tell a single-batch AvailableNow run's commit only to the next run): held
        # since recovery, acknowledged now with the newest ack ids their messages were delivered with.
        known = sorted(b for b in self._recovered if b <= upto)
        for bid in known:
            _, chunks = self._recovered.pop(bid)
            self._sealed[bid] = SealedBatch(bid, chunks, [], sum(len(c) for c in chunks))
        if known:
            log.info("batch(es) %s, planned by an earlier process, were committed by Spark: acknowledging them", known)
        done = sorted(b for b in self._sealed if b <= upto)
        if not done:
            return
        chunks = [c for b in done for c in self._sealed[b].chunks]
        for b in done:
            del self._sealed[b]
        assert self._receiver is not None
        on_done = None
        if self._ledger is not None:
            ledger = self._ledger
            ledger.committed(upto, [(c.sub, m, a) for c in chunks for m, a in zip(c.message_ids, c.ack_ids)])
            on_done = _Answers(upto, len({c.sub for c in chunks}), ledger.answered).on_done
        self._receiver.ack(chunks, on_done)

    def _seal(self, bid: int, chunks: list[Chunk]) -> None:
        batches = [c.batch for c in chunks]
        table = pa.Table.from_batches(batches, schema=wire.MESSAGE_SCHEMA)
        if self._ledger is not None:
            subs = pa.array([c.sub for c in chunks for _ in range(len(c))], pa.string())
            acks = pa.array([a for c in chunks for a in c.ack_ids], pa.string())
            self._ledger.record(bid, pa.Table.from_arrays([subs, acks, *table.columns], schema=BATCH_SCHEMA))
        payloads = [wire.to_ipc(table.slice(o, n)) for o, n in wire.slices(table.num_rows, self._opts.numPartitions)]
        for c in chunks:
            c.batch = None  # the payloads are the one copy from now on
        self._sealed[bid] = SealedBatch(bid, chunks, payloads, table.num_rows)
        self.counters.add("batchesPlanned")

    def _replay(self, bid: int) -> SealedBatch | None:
        recovered = self._recovered.pop(bid, None)
        if recovered is None:
            return None
        table, chunks = recovered
        messages = table.select(wire.MESSAGE_SCHEMA.names)
        payloads = [wire.to_ipc(messages.slice(o, n)) for o, n in wire.slices(messages.num_rows, self._opts.numPartitions)]
        for c in chunks:
            c.batch = None
        batch = SealedBatch(bid, chunks, payloads, messages.num_rows)
        self._sealed[bid] = batch
        self.counters.add("batchesReplayed")
        log.info("replaying batch %d (%d messages) from the stateDir", bid, messages.num_rows)
        return batch

    def _dissolve_unseen(self, receiver: Receiver, base: int) -> None:
        """Batches planned by an earlier process that Spark never recorded go back to the buffer."""
        unseen = sorted(b for b in self._recovered if b > base)
        for bid in unseen:
            _, chunks = self._recovered.pop(bid)
            receiver.requeue(chunks)
        if unseen:
            if self._ledger is not None:
                self._ledger.drop(unseen)
            log.info("batch(es) %s were planned by an earlier process but never reached Spark: their messages "
                     "go into the next batches", unseen)

    def _wait_first_fill(self, receiver: Receiver, max_messages: int | None) -> None:
        since = time.monotonic()
        cutoff = int(time.time() * 1_000_000)
        want = max_messages or receiver.flow.max_messages

        def ready() -> bool:
            return (receiver.buffered_count_locked() >= want or receiver.quiet_locked(cutoff, since)
                    or receiver.flow.full())


        receiver.wait(ready, FIRST_FILL_SECONDS)
        receiver.raise_if_failed()

    def _wait_available_now(self, receiver: Receiver) -> None:
        assert self._available_now_at is not None
        cutoff, since = self._available_now_at

        def ready() -> bool:
            return (receiver.buffered_count_locked() > 0 or receiver.quiet_locked(cutoff, since)
                    or receiver.blocked_by_later_locked())

        while not receiver.wait(ready, 1.0):
            receiver.raise_if_failed()
            if receiver.unavailable_for() > AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS:
                raise ReceiverError(
                    f"Pub/Sub has been unavailable for {AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS:.0f} s while "
                    "Trigger.AvailableNow was draining the backlog; nothing was acknowledged that Spark did not commit")

    def _on_stats(self, batch: int, partition: int, messages: int, malformed: int) -> None:
        with self._lock:
            self._malformed[(batch, partition)] = malformed

    def stats_address(self) -> tuple[tuple[str, ...], str] | None:
        return (self._stats.addresses, self._stats.token) if self._stats is not None else None

    def _maybe_summarise(self) -> None:
        now = time.monotonic()
        if now - self._last_summary < SUMMARY_EVERY_SECONDS:
            return
        self._last_summary = now
        log.info("crdb_pubsub source: %s", self.report())


class _Answers:
    """Collects the per-subscription answers to one commit's acknowledgements for the ledger."""

    def __init__(self, batch_id: int, subs: int, answered: Callable[[int, list[tuple[str, str, str]]], None]) -> None:
        self._batch_id = batch_id
        self._left = subs
        self._answered = answered
        self._unconfirmed: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def on_done(self, sub: str, confirmed: list[str], unconfirmed: list[tuple[str, str]]) -> None:
        with self._lock:
            self._unconfirmed.extend((sub, m, a) for m, a in unconfirmed)
            self._left -= 1
            if self._left:
                return
        self._answered(self._batch_id, self._unconfirmed)


def _chunks_of(table: pa.Table) -> list[Chunk]:
    """Chunks (one per subscription) of a stateDir batch; their ack ids are from an earlier process."""
    subs = table.column("sub").to_pylist()
    now = time.monotonic()
    rows: dict[str, list[int]] = {}
    for i, s in enumerate(subs):
        rows.setdefault(s, []).append(i)
    out = []
    for sub, idx in rows.items():
        part = table.take(pa.array(idx, pa.int64()))
        batch = part.select(wire.MESSAGE_SCHEMA.names).combine_chunks().to_batches()[0]
        nbytes, largest = sizes_of(batch)
        out.append(Chunk(sub, part.column("message_id").to_pylist(), part.column("ack_id").to_pylist(), batch,
                         nbytes, largest, now, stale=True))
    return out


def _make_receiver(options: "SourceOptions", counters: Counters) -> Receiver:
    from . import transport

    return Receiver(
        transport.rpc_for(options),
        options.subscription_paths,
        lease_seconds=options.ackDeadlineSeconds,
        max_lease_seconds=options.maxLeaseDurationSeconds,
        max_messages=options.maxOutstandingMessages,
        max_bytes=options.maxOutstandingBytes,
        endpoint_description=options.endpoint_description,
        counters=counters,
    )
