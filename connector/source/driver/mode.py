"""The :class:`~..core.mode.Mode` of ``receiver=driver``: sealed batches over one receiver.

``latestOffset`` seals what the receiver buffered into batch N (recorded in the stateDir first,
when there is one), and ``partitions`` hands the batch to the executors as Arrow IPC
(:mod:`..wire`), a stream per partition that its task fetches from this process
(:mod:`.handoff`) or finds inside the partition (``batchTransfer=tasks``), and only decodes. A batch planned by an
earlier process is replayed from the stateDir with the same messages; one that Spark never saw
returns to the buffer. A proven commit acknowledges exactly the batches it covers.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from .. import wire
from ..core.mode import Limits
from ..metrics import Counters
from ..pubsub.chunks import Chunk, sizes_of
from ..pubsub.drained import UNAVAILABLE_LIMIT_SECONDS
from ..pubsub.subscription import ReceiverError
from ..state.ledger import BATCH_SCHEMA, Ledger, Recovered, StateDirError
from .handoff import BatchServer, Ticket
from .receiver import Receiver

if TYPE_CHECKING:  # pragma: no cover
    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.driver")

FIRST_FILL_SECONDS = 20.0  # the first batch of a process waits at most this long for the backlog
# The first batch of a multi-batch AvailableNow run goes once what came first has waited this long
# (see first_latest): long enough that the batch more it makes (Spark's fixed cost of a batch,
# 0.2-0.4 s here) is paid for by the pulling it overlaps.
FIRST_LINGER_SECONDS = 0.5


@dataclass
class SealedBatch:
    batch_id: int
    chunks: list[Chunk]
    payloads: list[pa.Buffer]  # one Arrow IPC stream per Spark partition
    messages: int


class DriverMode:
    """The driver-side state of ``receiver=driver``: sealed batches and the receiver.

    Called by :class:`~..core.protocol.OffsetProtocol` under its lock (so ``_sealed`` and
    ``_recovered`` need no lock of their own); the receiver's threads never touch them.
    """

    def __init__(
        self,
        options: SourceOptions,
        counters: Counters,
        *,
        receiver_factory: Callable[[SourceOptions, Counters], Receiver] | None = None,
    ) -> None:
        self._opts = options
        self.counters = counters
        self._receiver_factory = receiver_factory or make_receiver
        self._receiver: Receiver | None = None
        self._ledger: Ledger | None = None
        self._sealed: dict[int, SealedBatch] = {}
        self._recovered: dict[int, tuple[pa.Table, list[Chunk]]] = {}
        self._cutoff: tuple[int, float] | None = None  # AvailableNow: (cutoff us, monotonic start)
        self._planned = False  # whether this process planned a batch yet
        self._handoff: BatchServer | None = None  # batchTransfer=fetch, once started
        self._warned_later = False

    @property
    def receiver(self) -> Receiver:
        assert self._receiver is not None, "the mode has not started"
        return self._receiver

    # ---------------------------------------------------------------- Mode

    def start(self, ledger: Ledger | None, recovered: Recovered | None) -> None:
        """Hold what an earlier process planned, and remember what it acknowledged, *before* pulling starts.

        That way Pub/Sub's redeliveries of those messages are recognised (a redelivery pulled
        before would be planned again: a duplicate); whether the planned batches are replayed or
        planned anew is decided when Spark's calls show which batches it knows.
        """
        opts = self._opts
        if recovered is not None and recovered.plans:
            raise StateDirError(
                f"stateDir {opts.stateDir} holds batch(es) {sorted(recovered.plans)} planned with receiver=executors "
                "that Spark has not committed; option 'receiver' is 'driver' now. Run the query with "
                "receiver=executors until they commit (e.g. one Trigger.AvailableNow run), or delete the stateDir "
                "(Pub/Sub then delivers their messages again)"
            )
        receiver = self._receiver_factory(opts, self.counters)
        receiver.open(create_on_topics=opts.topic_paths or None, subscription_filter=opts.filter)
        if recovered is not None:
            for bid, table in recovered.pending.items():
                chunks = _chunks_of(table)
                receiver.adopt(chunks)
                self._recovered[bid] = (table, chunks)
            receiver.holding.recover(recovered.remembered, recovered.unconfirmed, recovered.leased_until)
            if recovered.pending:
                log.info(
                    "stateDir holds %d planned batch(es) not known to be committed: %s",
                    len(recovered.pending),
                    sorted(recovered.pending),
                )
        if self._cutoff is not None:
            receiver.set_cutoff(self._cutoff[0])
        receiver.start(may_renew=ledger.holds if ledger is not None else None)
        self._ledger = ledger
        self._receiver = receiver
        if opts.batchTransfer == "fetch":
            self._handoff = BatchServer()

    def set_cutoff(self, cutoff_us: int | None) -> None:
        self._cutoff = (cutoff_us, time.monotonic()) if cutoff_us is not None else None
        if self._receiver is not None and cutoff_us is not None:
            self._receiver.set_cutoff(cutoff_us)

    def check(self) -> None:
        self.receiver.raise_if_failed()

    def first_latest(self, committed: int, limits: Limits) -> None:
        """Put back the batches an earlier process planned that Spark never saw; then wait for the backlog.

        They go back to the buffer; the wait, bounded, is for what the subscriptions hold, so that a
        single-batch run (Trigger.Once, or AvailableNow on 4.0/4.1) reads the backlog. A
        multi-batch AvailableNow run (4.2+, it has a cutoff) reads the rest in its next batches,
        so its first batch goes once what came first has waited :data:`FIRST_LINGER_SECONDS`:
        Spark works on it while the receiver pulls the next instead of waiting for the whole
        backlog and the subscriptions' evidence that they are drained.
        """
        receiver = self.receiver
        unseen = sorted(b for b in self._recovered if b > committed)
        receiver.requeue([c for bid in unseen for c in self._recovered.pop(bid)[1]])
        if unseen:
            if self._ledger is not None:
                self._ledger.drop(unseen)
            log.info(
                "batch(es) %s were planned by an earlier process but never reached Spark: their messages "
                "go into the next batches",
                unseen,
            )
        # An AvailableNow run reads until its own cutoff, and its pullers stop once they show it
        # (what came after is the next run's): waiting on a later cutoff would wait out the bound.
        cutoff, since = self._cutoff or (int(time.time() * 1_000_000), time.monotonic())
        want = self._batch_limits(limits).max_messages or receiver.flow.max_messages
        linger = FIRST_LINGER_SECONDS if self._cutoff is not None else math.inf

        def ready() -> bool:
            return (
                receiver.buffered_count_locked() >= want
                or receiver.quiet_locked(cutoff, since)
                or receiver.flow.full()
                or receiver.buffered_for_locked() >= linger
            )

        receiver.wait(ready, FIRST_FILL_SECONDS)
        receiver.raise_if_failed()

    def available_now_over(self, committed: int) -> bool:
        """Wait until something is buffered or the subscriptions show they are drained.

        The run is over when nothing is buffered and they are. Later messages that fill the flow
        control are handed back (a delivery attempt each) to make room for the rest of the backlog:
        a full flow control shows nothing about what still waits.
        """
        assert self._cutoff is not None
        cutoff, since = self._cutoff
        receiver = self.receiver

        def over() -> bool:
            return receiver.buffered_count_locked() > 0 or receiver.quiet_locked(cutoff, since)

        def ready() -> bool:
            return over() or receiver.blocked_by_later_locked()

        while True:
            if receiver.wait(ready, 1.0):
                if receiver.wait(over, 0.0):
                    break
                n = receiver.hand_back_later()
                if not self._warned_later:
                    self._warned_later = True
                    log.warning(
                        "Trigger.AvailableNow: messages published after the run began filled "
                        "maxOutstandingMessages/maxOutstandingBytes before the backlog was read; %d of them were "
                        "handed back (a delivery attempt each) to make room. Raise the bounds to avoid it",
                        n,
                    )
                continue
            receiver.raise_if_failed()
            if receiver.unavailable_for() > UNAVAILABLE_LIMIT_SECONDS:
                raise ReceiverError(
                    f"Pub/Sub has been unavailable for {UNAVAILABLE_LIMIT_SECONDS:.0f} s while "
                    "Trigger.AvailableNow was draining the backlog; nothing was acknowledged that Spark did not commit"
                )
        return not receiver.has_buffered()

    def plan(self, batch_id: int, limits: Limits, ensure_run: Callable[[], None]) -> bool:
        limits = self._batch_limits(limits)
        chunks = self.receiver.take(limits.max_messages, limits.max_bytes)
        if not chunks:
            return False
        self._planned = True
        ensure_run()
        table = pa.Table.from_batches([c.batch for c in chunks], schema=wire.MESSAGE_SCHEMA)
        if self._ledger is not None:
            subs = pa.array([c.sub for c in chunks for _ in range(len(c))], pa.string())
            acks = pa.array([a for c in chunks for a in c.ack_ids], pa.string())
            self._ledger.record(batch_id, pa.Table.from_arrays([subs, acks, *table.columns], schema=BATCH_SCHEMA))
        for c in chunks:
            c.batch = None  # the payloads are the one copy from now on
        self._sealed[batch_id] = SealedBatch(batch_id, chunks, self._payloads(table), table.num_rows)
        return True

    def inputs(self, batch_id: int) -> list[pa.Buffer] | list[Ticket] | None:
        batch = self._sealed.get(batch_id) or self._replay(batch_id)
        if batch is None:
            return None
        if self._handoff is not None:
            return self._handoff.offer(batch_id, batch.payloads)
        return batch.payloads

    def known(self, after: int, upto: int) -> list[int]:
        return sorted(b for b in set(self._sealed) | set(self._recovered) if after < b <= upto)

    def acknowledge(self, upto: int) -> None:
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
        chunks = [c for b in done for c in self._sealed.pop(b).chunks]
        if self._handoff is not None:
            self._handoff.withdraw(done)
        on_answered = None
        if self._ledger is not None:
            ledger = self._ledger
            ledger.committed(upto, [(c.sub, m, a) for c in chunks for m, a in zip(c.message_ids, c.ack_ids)])

            def on_answered(unproven: list[tuple[str, str, str]]) -> None:
                ledger.answered(upto, unproven)

        self.receiver.ack(chunks, on_answered)

    def end_available_now(self, within: float) -> bool:
        return self.receiver.end_available_now(within=within)

    def gauges(self) -> dict:
        out = self._receiver.gauges() if self._receiver is not None else {}
        out["awaitingCommit"] = sum(b.messages for b in self._sealed.values())
        return out

    def shutdown(self, within: float) -> float:
        if self._handoff is not None:
            self._handoff.close()
        receiver = self._receiver
        if receiver is None:
            return 0.0
        log.info("stopping: handing %d held message(s) back to Pub/Sub", receiver.flow.held_messages)
        return receiver.shutdown(hand_back=True, within=within)

    # ---------------------------------------------------------------- internals

    def _batch_limits(self, limits: Limits) -> Limits:
        """Return the limits of the next batch: at most half of what flow control lets the receiver hold.

        Flow control counts a batch's messages until Spark commits it, so a batch that took the
        whole window would stop pulling while Spark runs it, and the next batch would be the
        little that came in between; half leaves room to pull the next batch meanwhile. Except
        the first batch of a process that is not a Trigger.AvailableNow run on Spark 4.2+: it may
        be its run's only batch (Trigger.Once, AvailableNow on 4.0/4.1) and reads the whole window.
        """
        if not self._planned and self._cutoff is None:
            return limits
        flow = self.receiver.flow
        half_messages, half_bytes = max(1, flow.max_messages // 2), max(1, flow.max_bytes // 2)
        return Limits(
            min(limits.max_messages or half_messages, half_messages), min(limits.max_bytes or half_bytes, half_bytes)
        )

    def _payloads(self, table: pa.Table) -> list[pa.Buffer]:
        nbytes = int(wire.body_lengths(table.column("data")).sum())
        return [
            wire.to_ipc(table.slice(o, n)) for o, n in wire.slices(table.num_rows, self._opts.numPartitions, nbytes)
        ]

    def _replay(self, batch_id: int) -> SealedBatch | None:
        recovered = self._recovered.pop(batch_id, None)
        if recovered is None:
            if self._ledger is not None:
                # Not recovered when this process started: whatever record of it appears later (a
                # write of an earlier process that landed late) must never count.
                self._ledger.void(batch_id)
            return None
        table, chunks = recovered
        messages = table.select(wire.MESSAGE_SCHEMA.names)
        for c in chunks:
            c.batch = None
        batch = SealedBatch(batch_id, chunks, self._payloads(messages), messages.num_rows)
        self._sealed[batch_id] = batch
        self.counters.add("batchesReplayed")
        log.info("replaying batch %d (%d messages) from the stateDir", batch_id, messages.num_rows)
        return batch


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
        out.append(
            Chunk(
                sub,
                part.column("message_id").to_pylist(),
                part.column("ack_id").to_pylist(),
                batch,
                nbytes,
                largest,
                now,
                stale=True,
            )
        )
    return out


def make_receiver(options: SourceOptions, counters: Counters) -> Receiver:
    from .. import transport

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
