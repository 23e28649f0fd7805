"""The offset protocol: what Spark's calls prove, shared by both receiver modes.

Spark drives the calls in an order that differs by version (measured on 4.0.5, 4.1.4, 4.2.1 and
4.3.0; ``tests/spark_calls.py`` plays them), and the protocol relies only on what every version
guarantees:

* **Only a ``latestOffset`` call proves a commit.** Spark asks for the next offset only after the
  previous batch's sink finished and its commit-log entry was written. On 4.2+ the call names the
  committed end (``latestOffset(start)``); on 4.0/4.1 it takes no argument, and the committed end
  is the newest offset Spark holds: the last one this process returned, or the one Spark named in
  ``partitions`` (after a restart Spark runs an uncommitted batch again *before* it asks for the
  next offset). ``commit(end)`` proves it too. ``partitions(start, end)`` proves nothing: after a
  restart 4.0/4.1 first call ``partitions(X, X)`` with a batch X that may never have committed.
* A proven commit acknowledges exactly the messages of the batches it covers (:meth:`Mode.acknowledge`),
  so a batch is acknowledged at the next ``latestOffset``, with no empty batch needed.
* ``latestOffset`` plans batch ``start + 1`` (:meth:`Mode.plan`), durably first with a stateDir.
* ``partitions`` hands out what each partition of a batch reads (:meth:`Mode.inputs`); a batch this
  process did not plan is replayed from the stateDir with the same content, or yields nothing
  (never acknowledged, so Pub/Sub delivers its messages again) without one.
* AvailableNow (4.2+): messages published after the run began belong to the next run; the run
  ends when the mode has the evidence that everything before was read (:meth:`Mode.available_now_over`),
  and the acknowledgements are awaited (bounded) before it does.

The protocol also owns what both modes share around it: the query run and the stateDir's ledger
(:mod:`..state.ledger`), the executors' decode reports (:mod:`..stats`), and the progress report.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..metrics import Counters
from ..pubsub.acknowledgements import PROVEN_MEMORY_SECONDS, UNPROVEN_MEMORY_SECONDS
from ..state.ledger import Ledger
from ..stats import StatsServer
from .mode import Limits, Mode
from .offsets import batch_of, offset_of, run_of

if TYPE_CHECKING:  # pragma: no cover
    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.protocol")

ACK_FLUSH_SECONDS = 35.0  # the end of an AvailableNow run waits this long for acknowledgements
STATE_DIR_WAIT_SECONDS = 30.0  # for the previous run of this query to release the stateDir
SUMMARY_EVERY_SECONDS = 30.0
MAX_SCANNED_BATCHES = 1000  # a range of offsets wider than this asks the mode which batches it knows


class OffsetProtocol:
    """The driver-side state of one streaming query in one process, over one :class:`Mode`.

    ``_lock`` serialises Spark's calls (they come from one thread, but a SIGTERM hand-back and
    metric reports may come from others) and guards the offsets, the run and ``_malformed``. The
    mode's own locks are taken under it, never the other way round.
    """

    def __init__(self, options: SourceOptions, mode: Mode, counters: Counters) -> None:
        self._opts = options
        self._mode = mode
        self.counters = counters
        self._lock = threading.RLock()
        self._ledger: Ledger | None = None
        self._stats: StatsServer | None = None
        self._run: str | None = None
        self._begun = False
        self._spark_latest = 0  # the newest offset Spark holds (see the module docstring)
        self._committed = -1  # the newest batch whose commit was proven
        self._first_latest = True
        # (start, end) of the last latestOffset(start) that planned a batch or ended an AvailableNow
        # run: asked again with that start, the answer is the same (a batch is planned once, a run
        # ends once, whatever the mode would decide now).
        self._answered: tuple[int, int] | None = None
        self._cutoff_us: int | None = None  # Trigger.AvailableNow
        self._warned_unreplayable: set[int] = set()
        # Decode reports of batches not yet committed: a retried task replaces its report.
        self._malformed: dict[tuple[int, int], int] = {}
        self._malformed_committed = 0
        self._last_summary = time.monotonic()

    # ---------------------------------------------------------------- start

    def _begin(self, offset: dict | None) -> None:
        """Begin every Spark call here: start the mode on the first one.

        Also learn the query run from the first offset that names one (see :meth:`_learn`).
        """
        if not self._begun:
            self._start(run_of(offset))
        self._learn(offset)

    def _start(self, run: str | None) -> None:
        """Open the stateDir (recovering what an earlier process left) and start the mode.

        ``run``: the query run named by the offset of the call that starts the reader, if any.
        """
        opts = self._opts
        ledger = recovered = None
        if opts.stateDir:
            ledger = Ledger(
                opts.stateDir,
                wait_seconds=STATE_DIR_WAIT_SECONDS,
                window_seconds=PROVEN_MEMORY_SECONDS,
                unconfirmed_seconds=UNPROVEN_MEMORY_SECONDS,
                run=run,
            )
            try:
                ledger.check_subscriptions(opts.subscription_paths)
                recovered = ledger.recover()
            except Exception:
                ledger.close()
                raise
        if self._cutoff_us is not None:
            self._mode.set_cutoff(self._cutoff_us)
        try:
            self._mode.start(ledger, recovered)
        except Exception:
            if ledger is not None:
                ledger.close()
            raise
        self._ledger = ledger
        if recovered is not None:
            self._committed = recovered.newest_commit
        self._stats = StatsServer(self._on_stats)
        self._begun = True

    def _learn(self, offset: dict | None) -> None:
        """Which query run Spark drives, from the offsets it names.

        Offsets after the first batch carry the run. A process whose first calls name no run
        serves a fresh checkpoint (or one whose first batch never committed): a stateDir holding
        another run's committed batches is refused there. The run of a fresh checkpoint is
        created when its first batch is planned (:meth:`_ensure_run`).
        """
        run = run_of(offset)
        if run is None:
            fresh = self._run is None and (offset is None or batch_of(offset) == 0)
            if fresh and self._ledger is not None and self._ledger.has_committed_history():
                self._ledger.claim(None, self._opts.subscription_paths, fresh=True)
            return
        if self._run is None:
            self._run = run
            if self._ledger is not None:
                self._ledger.claim(run, self._opts.subscription_paths)
        elif run != self._run:
            raise ValueError(
                f"crdb_pubsub: Spark named offset {offset!r} of query run {run}, but this reader serves run "
                f"{self._run}; was the checkpoint location used by another query?"
            )

    def _ensure_run(self) -> None:
        if self._run is None:
            self._run = uuid.uuid4().hex[:12]
            if self._ledger is not None:
                self._ledger.claim(self._run, self._opts.subscription_paths, fresh=True)

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

        Spark calls this before any offset call, so the mode may not have started yet (the run
        is not known); the cutoff applies from its start.
        """
        with self._lock:
            self._cutoff_us = int(time.time() * 1_000_000)
            self._mode.set_cutoff(self._cutoff_us)
            self._answered = None

    def latest(self, start: dict | None, max_messages: int | None, max_bytes: int | None) -> dict:
        with self._lock:
            self._begin(start)
            self._mode.check()
            if start is not None:
                self._spark_latest = batch_of(start) or 0
            # Spark asks for the next offset only once the batch ending at its newest offset
            # committed: acknowledge everything up to there.
            self._prove_committed(self._spark_latest)
            base = self._spark_latest
            limits = Limits(max_messages, max_bytes)
            if self._first_latest:
                self._first_latest = False
                self._mode.first_latest(base, limits)
            self._maybe_summarise()
            if start is not None and self._answered is not None and self._answered[0] == base:
                self._spark_latest = self._answered[1]
                return offset_of(self._answered[1], self._run)
            if self._cutoff_us is not None and self._mode.available_now_over(base):
                # The run ends with this answer: acknowledgements must reach Pub/Sub first.
                if not self._mode.end_available_now(ACK_FLUSH_SECONDS):
                    log.warning(
                        "some acknowledgements were not answered within %.0f s; %s",
                        ACK_FLUSH_SECONDS,
                        "they are remembered in the stateDir"
                        if self._ledger
                        else "their messages may be delivered again (set stateDir to recognise them)",
                    )
                self._cutoff_us = None
                self._mode.set_cutoff(None)
                self._answered = (base, base)  # the run is over: asked again, still nothing new
                return offset_of(base, self._run)
            bid = base + 1
            if not self._mode.plan(bid, limits, self._ensure_run):
                return offset_of(base, self._run)
            self.counters.add("batchesPlanned")
            self._spark_latest = bid
            self._answered = (base, bid)
            return offset_of(bid, self._run)

    def partitions(self, start: dict, end: dict) -> list[tuple[int, int, Any]]:
        """Return what each partition of the batches in ``(start, end]`` reads: ``(batch id, index, input)``."""
        with self._lock:
            self._begin(end)
            sid, eid = batch_of(start) or 0, batch_of(end) or 0
            self._spark_latest = max(self._spark_latest, eid)
            out: list[tuple[int, int, Any]] = []
            wanted = range(sid + 1, eid + 1) if eid - sid <= MAX_SCANNED_BATCHES else self._mode.known(sid, eid)
            for bid in wanted:
                inputs = self._mode.inputs(bid)
                if inputs is None:
                    if bid not in self._warned_unreplayable:
                        self._warned_unreplayable.add(bid)
                        log.warning(
                            "batch %d was planned by an earlier process and %s: it yields no rows now; its messages "
                            "were never acknowledged, so Pub/Sub delivers them again into later batches",
                            bid,
                            "the stateDir has no record of it" if self._opts.stateDir else "no stateDir is set",
                        )
                    continue
                out.extend((bid, i, x) for i, x in enumerate(inputs))
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
            out["malformed"] = self._malformed_committed + sum(self._malformed.values())
            out.update(self._mode.gauges())
            return out

    def shutdown(self, *, within: float) -> None:
        """Stop the mode, release the stateDir (at most ``within`` s)."""
        ledger, stats = self._ledger, self._stats
        leased_until: float | None = float("inf") if self._begun else None
        try:
            if self._begun:
                leased_until = self._mode.shutdown(within)
        finally:
            if ledger is not None:
                ledger.close(leased_until=leased_until)
            if stats is not None:
                stats.close()

    def stats_address(self) -> tuple[tuple[str, ...], str] | None:
        return (self._stats.addresses, self._stats.token) if self._stats is not None else None

    # ---------------------------------------------------------------- internals

    def _prove_committed(self, upto: int) -> None:
        if upto > self._committed:
            self._mode.acknowledge(upto)
            self._committed = upto
        # Per-batch state goes when its batch commits.
        done = [k for k in self._malformed if k[0] <= upto]
        for k in done:
            self._malformed_committed += self._malformed.pop(k)
        self._warned_unreplayable = {b for b in self._warned_unreplayable if b > upto}

    def _on_stats(self, batch: int, partition: int, messages: int, malformed: int) -> None:
        with self._lock:
            if batch > self._committed:
                self._malformed[(batch, partition)] = malformed

    def _maybe_summarise(self) -> None:
        now = time.monotonic()
        if now - self._last_summary < SUMMARY_EVERY_SECONDS:
            return
        self._last_summary = now
        log.info("crdb_pubsub source: %s", self.report())


def protocol_for(options: SourceOptions, mode_factory: Callable[[SourceOptions, Counters], Mode]) -> OffsetProtocol:
    """Build the protocol over the mode ``mode_factory`` builds (with the counters both share)."""
    counters = Counters()
    return OffsetProtocol(options, mode_factory(options, counters), counters)
