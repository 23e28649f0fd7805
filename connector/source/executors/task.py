"""A task's pull: fill one slice from Pub/Sub, record and register it, hand back its rows.

Runs in an executor's Python worker. What it pulls is written to the stateDir (:mod:`.store`) and
registered in its batch's register before any row is yielded, so the driver can lease and
acknowledge it, and a retry of the task replays it. The task stops pulling when its share of the
trigger's limits is full, when a Pull brings nothing (nothing older than the cutoff, in
AvailableNow), or when its time is up: a fraction of the subscription's ack deadline.

Several Pulls of a subscription are in flight at once, as many as the rule both receiver modes
apply says (:mod:`..pubsub.concurrency`: Little's law, from the round trips and the time an answer
takes to keep), so that the round trip to the service is hidden; one on an ordered subscription
(answers that came back out of turn could put a key's messages out of order), and one until the
first message's size is known. No new Pull goes out once the share is full or the time is up;
those in flight are waited for, and what they bring is kept (it is leased to this task).

The share is a soft bound: the Pulls in flight ask together for no more than still fits (by count,
and by bytes at the largest message seen; each for its part of it), and everything an answer brings
is kept, so a share overshoots by less than the answers in flight when it fills, and nothing is
ever handed back for lack of room (a hand-back is a delivery attempt, and a message handed back and
pulled again could not be told from a redelivery).

While it holds messages the task keeps their leases alive (the shared :class:`~..pubsub.leaser.Leaser`:
at once on receipt when the subscription's deadline is shorter than ``ackDeadlineSeconds``, then
before each lapses), until Spark has consumed its rows; the driver leases them from then on. A
message whose lease is not proven alive when the slice is recorded may have been delivered to
another task meanwhile: it is handed back, not recorded (whoever gets it next yields it). A
message the driver says an earlier batch yielded (or another batch's slice holds), or that this
task pulled twice, is recorded as a redelivery: acknowledged with the batch, not yielded. Of a
message that two tasks of the batch recorded, the one registered first yields it (:mod:`.store`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..pubsub.chunks import DONE, Chunk
from ..pubsub.concurrency import START, Concurrency, cpu_seconds
from ..pubsub.held import Held
from ..pubsub.leaser import Leaser
from ..pubsub.pull import FIRST_PULL_MESSAGES, MAX_PULL_MESSAGES, PULL_TIMEOUT_SECONDS
from ..storage import Storage, open_storage
from ..storage.lease import Lease
from ..transport import MODIFY_DEADLINE, Backoff, Rpc, group_by_subscription, is_transient, rpc_for
from ..wire import MESSAGE_SCHEMA, body_lengths, numbers, pulled_batch
from . import seen
from .orders import SliceOrder, longest_lease
from .store import (
    CLAIM_MARGIN_SECONDS,
    CLAIM_TTL_SECONDS,
    KEEP,
    LATER,
    REDELIVERY,
    SLICE_SCHEMA,
    SliceInfo,
    SliceStore,
    SubscriptionPull,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.task")

MAX_MESSAGE_BYTES = 10 << 20  # Pub/Sub's largest message
RECORD_MARGIN_SECONDS = 1.0  # a recorded message's lease must be proven alive at least this much longer


@contextlib.contextmanager
def pulled_slice(options: SourceOptions, order: SliceOrder) -> Iterator[pa.Table]:
    """Provide the messages of ``order``'s slice to yield (:data:`MESSAGE_SCHEMA`), for the ``with``.

    The recorded slice if one exists, else a new one, pulled and recorded first; registered in
    either case, then less what a slice registered before it yields. The leases of a new slice are
    kept until the ``with`` ends (Spark consumed the rows), then extended once more for the driver
    to take over.
    """
    store = SliceStore(_storage(options.stateDir or ""))
    table = store.read(order.batch_id, order.index)
    keeper: Leaser | None = None
    chunks: list[Chunk] = []
    if table is None and not store.planned(order.batch_id):
        # An attempt left over from a batch Spark already committed (its plan and slices are
        # deleted at the commit): its rows go nowhere, and what it pulled nobody would acknowledge
        # or wait out (an AvailableNow run could end with it leased to nobody).
        yield MESSAGE_SCHEMA.empty_table()
        return
    try:
        if table is None:
            # Another attempt's claim is waited for until it must have expired (its executor died).
            claim = store.claim(order.batch_id, order.index, wait=CLAIM_TTL_SECONDS + 2 * CLAIM_MARGIN_SECONDS + 5.0)
            try:
                table = store.read(order.batch_id, order.index)  # another attempt may have finished meanwhile
                if table is None and not store.planned(order.batch_id):
                    table = SLICE_SCHEMA.empty_table()  # committed while this attempt waited for the claim
                elif table is None and order.replay:
                    # Its first run recorded nothing, so yielded nothing: neither does this one (a
                    # sink that kept that run's output must see the same batch).
                    table = SLICE_SCHEMA.empty_table()
                    if not store.publish(claim, order.batch_id, order.index, table, _empty_info()):
                        table = store.read(order.batch_id, order.index)
                elif table is None:
                    table, keeper, chunks = _pull_and_record(options, order, store, claim)
            finally:
                # Idempotent: an attempt that lost the slice to another released it with its own note.
                claim.release(note=None if keeper is not None else _carried(claim, order))
        register = store.register(order.batch_id, order.index)
        yield _yielded(store, order, table, register)
    finally:
        if keeper is not None:
            keeper.stop(timeout=1.0)
            keeper.extend(chunks, order.lease_seconds)


def _empty_info() -> SliceInfo:
    """Return the metadata of a slice that pulled nothing (a replay's, its first run recorded none)."""
    now = time.time()
    return SliceInfo(rows=0, kept=0, oldest_us=None, pulled_at=now, proven_until=now, handed_back=0)


def _yielded(store: SliceStore, order: SliceOrder, table: pa.Table, register: list[int]) -> pa.Table:
    """Return the rows to yield: the kept ones, less those a slice registered before this one keeps."""
    if not table.num_rows:
        return table.select(MESSAGE_SCHEMA.names)
    keep = pc.equal(table.column("role"), KEEP)
    earlier = register[: register.index(order.index)]
    for p in earlier:
        found = store.read_acks(order.batch_id, p)
        if found is None:
            continue  # registered, then deleted: its batch committed (a zombie attempt's replay)
        acks, _ = found
        theirs = acks.filter(pc.equal(acks.column("role"), KEEP))
        # Compared in Arrow's kernels: a slice is tens of thousands of rows, and Python's strings
        # of both cost more than the rest of the task's own work on them.
        for sub in pc.unique(theirs.column("sub")).to_pylist():
            ids = theirs.filter(pc.equal(theirs.column("sub"), sub)).column("message_id").combine_chunks()
            both = pc.and_(pc.equal(table.column("sub"), sub), pc.is_in(table.column("message_id"), value_set=ids))
            keep = pc.and_(keep, pc.invert(both))
    if pc.all(keep).as_py():
        # Most slices yield every row: filtering would copy all their bodies for nothing.
        return table.select(MESSAGE_SCHEMA.names)
    return table.filter(keep).select(MESSAGE_SCHEMA.names)


def _pull_and_record(
    options: SourceOptions, order: SliceOrder, store: SliceStore, claim: Lease
) -> tuple[pa.Table, Leaser | None, list[Chunk]]:
    """Pull the slice, record it (while the claim holds) and return it with its lease keeper and chunks."""
    rpc = _rpc(options)
    recorded = threading.Event()
    keeper = Leaser(
        rpc.modify_ack_deadline,
        lease_seconds=order.lease_seconds,
        max_lease_seconds=max(order.lease_seconds, options.maxLeaseDurationSeconds),
        name=f"crdb-pubsub-task-leaser-{order.batch_id}-{order.index}",
        # Until the slice is recorded, renewals go only while the claim allows writes: once it may
        # have lapsed another attempt can take it over, and it waits out the leases this one had
        # then (a process frozen past its claim renews nothing when it wakes).
        may_renew=lambda: recorded.is_set() or claim.holds(),
    )
    keeper.start()
    pulled = _Pulled(order, keeper)
    previous = claim.previous
    if previous is not None:
        # An earlier attempt died while it held the claim: what it pulled stays leased, to nobody,
        # for up to the longest lease it may have had. One that failed says until when what it
        # could not hand back may be. No answer before then proves a subscription drained.
        released = bool(previous.get("released"))
        until = (
            float(previous.get("leased_until") or 0.0)
            if released
            else time.time() + longest_lease(order.lease_seconds, order.deadlines.values())
        )
        for e in pulled.evidence.values():
            e.shadow_until = max(e.shadow_until, until)
    try:
        _pull(rpc, order, pulled, claim)
        pulled.drop_unproven(rpc)
        pulled.mark_seen()
        table, info = pulled.table(), pulled.info()
        published = store.publish(claim, order.batch_id, order.index, table, info)
        if published:
            recorded.set()
    except BaseException:
        leased_until = _let_go(keeper, pulled, rpc)  # nothing was recorded: let Pub/Sub deliver them again at once
        if leased_until:
            with contextlib.suppress(Exception):  # unreleased, the retry waits out a whole lease
                claim.release(note={"leased_until": leased_until})  # for the retry (see above)
        raise
    if not published:
        # Another attempt recorded the slice first (one frozen as it wrote, whose claim this one
        # took over, woke and its write landed): it is the one that counts, and Spark may kill
        # this one any moment now. Nothing of what this attempt pulled reaches the driver but its
        # claim, so it says first, in one write, until when that may stay leased, however the
        # hand-back goes (ExecutorsMode._shadow_claims): a renewal sent by then acts within its
        # deadline and leases for the longest lease at most; released, the claim allows none after.
        bound = time.time() + MODIFY_DEADLINE.total + longest_lease(order.lease_seconds, order.deadlines.values())
        claim.release(note={"leased_until": max([bound, *(e.shadow_until for e in pulled.evidence.values())])})
        _let_go(keeper, pulled, rpc)
        other = store.read(order.batch_id, order.index)
        assert other is not None
        return other, None, []
    return table, keeper, pulled.chunks


def _let_go(keeper: Leaser, pulled: _Pulled, rpc: Rpc) -> float:
    """Stop renewing and hand back what was not recorded; return until when some may stay leased (0.0: none).

    The bound covers what the hand-back did not reach, a renewal still in flight (it may act after
    the hand-back, from when it acts: at most its deadline after it was sent), and the shadows of
    the attempt's Pulls (one answered after it gave up leased messages no hand-back reaches) and of
    the attempt before it.
    """
    landed = keeper.stop(timeout=1.0)
    leased_until = pulled.hand_back(rpc)
    if not landed:
        order = pulled.order
        leased_until = max(
            leased_until,
            time.time() + MODIFY_DEADLINE.total + longest_lease(order.lease_seconds, order.deadlines.values()),
        )
    return max([leased_until, *(e.shadow_until for e in pulled.evidence.values())])


def _carried(claim: Lease, order: SliceOrder) -> dict | None:
    """Return the note the claim's last holder left, while it lasts (for an attempt that records no slice).

    The driver reads the claim's last record alone: an attempt that releases it passes on until
    when messages of the attempt before may stay leased (its note, or, when it died holding the
    claim, the longest lease it may have had).
    """
    previous = claim.previous
    if previous is None:
        return None
    if previous.get("released"):
        until = float(previous.get("leased_until") or 0.0)
    else:
        until = time.time() + longest_lease(order.lease_seconds, order.deadlines.values())
    return {"leased_until": until} if until > time.time() else None


@dataclass
class _Evidence:
    answered: bool = False
    last_sent: float = 0.0
    last_oldest_us: int | None = None
    shadow_until: float = 0.0
    unavailable: bool = False
    errors: int = 0


class _Pulled:
    """What one task pulled so far: one chunk per answer, the rows' roles, the evidence per subscription.

    Only the task's thread touches it (the keeper reads the chunks' lease fields under its own
    lock).
    """

    def __init__(self, order: SliceOrder, keeper: Leaser) -> None:
        self.order = order
        self.keeper = keeper
        self.chunks: list[Chunk] = []
        self.batches: list[pa.RecordBatch] = []
        self.roles: list[np.ndarray] = []
        self.kept = 0  # messages held (yielded, or held apart for the next run): what the share bounds
        self.kept_bytes = 0
        self.largest = 0  # the largest body seen: the byte share's estimate per message
        self.sampled = 0  # messages whose size was seen
        self.handed_back = 0
        self.pulled_at: float | None = None
        self.held = Held()  # what it holds, by subscription and id: a delivery again refreshes its row
        self.evidence: dict[str, _Evidence] = {s: _Evidence() for s in order.subscriptions}
        self.unextended: list[Chunk] = []  # the keeper extends them at once; proven by the end (:meth:`extend_new`)

    def sampling(self) -> bool:
        """Whether fewer than :data:`FIRST_PULL_MESSAGES` messages' sizes are known (Pulls go one at a time)."""
        return self.sampled < FIRST_PULL_MESSAGES

    def full(self) -> bool:
        return self.kept >= self.order.max_messages or self.kept_bytes >= self.order.max_bytes

    def room(self, asked: int = 0, pulls: int = 1) -> int:
        """How many messages the next Pull asks for; 0: none now (the Pulls in flight ask for what fits).

        Its part, one of ``pulls`` in flight, of what fits the share's count and bytes, and no more
        than the ``asked`` by the Pulls in flight leave. Until a few messages' sizes are known
        (:meth:`sampling`), one Pull at a time asks for a few. Call it only while the share is not
        :meth:`full`.
        """
        count = self.order.max_messages - self.kept
        if not self.largest:
            # No more than the byte share holds at the largest message Pub/Sub allows.
            return 0 if asked else max(1, min(count, FIRST_PULL_MESSAGES, self.order.max_bytes // MAX_MESSAGE_BYTES))
        fits = min(count, (self.order.max_bytes - self.kept_bytes) // self.largest)
        if self.sampling():
            # The largest of one or two messages is no estimate yet: a few more, sized by it.
            return 0 if asked else max(1, min(fits, FIRST_PULL_MESSAGES - self.sampled))
        free = fits - asked
        if free <= 0:
            # Less than one message of the largest size fits the bytes: one more, alone (the
            # soft bound), or the answers in flight first.
            return 0 if asked else 1
        return min(free, -(-fits // pulls), MAX_PULL_MESSAGES)

    def accept(self, sub: str, response: Any, sent_mono: float, sent_wall: float) -> bool:
        """Keep one answer's messages; False when ``sub`` has nothing (more) for this slice."""
        ack_ids, mids, batch = pulled_batch(response)
        evidence = self.evidence[sub]
        evidence.answered = True
        evidence.last_sent = sent_wall
        if not mids:
            evidence.last_oldest_us = None
            return False
        publish = numbers(batch.column(2))
        evidence.last_oldest_us = int(publish.min())
        sizes = body_lengths(batch.column(0))
        self.largest = max(self.largest, int(sizes.max()))
        self.sampled += len(mids)
        deadline = self.order.deadlines.get(sub, 10)
        proven = sent_mono + deadline
        # A message delivered to this task before refreshes its row (both ack ids are acknowledged
        # or handed back with it): one row a message, yielded once.
        answer = self.held.sort(sub, mids, ack_ids, proven)
        part = answer.part(batch, mids, ack_ids)
        if part is not None:
            rows, part_mids, part_acks = part
            roles = np.zeros(len(part_mids), dtype=np.int8)
            if self.order.cutoff_us is not None:
                roles[numbers(rows.column(2)) > self.order.cutoff_us] = LATER
            c = self.add(sub, part_acks, part_mids, rows, roles, sent_mono)
            self.held.add([c], answer, proven)
            # The share bounds what the task holds: what it yields and what it holds apart for
            # the next run (a redelivery is acknowledged with the batch and holds nothing).
            self.kept += len(part_mids)
            self.kept_bytes += int(sizes.sum()) if answer.new is None else int(sizes[answer.new].sum())
        if answer.refreshed and deadline < self.order.lease_seconds:
            # Their new ack ids have the subscription's deadline: extended at once, as on receipt.
            self.keeper.renew_soon(answer.refreshed)
            self.unextended.extend(c for c in dict.fromkeys(answer.refreshed) if c not in self.unextended)
        # An answer of only later messages: this subscription is drained for the run.
        return self.order.cutoff_us is None or bool((publish <= self.order.cutoff_us).any())

    def add(
        self, sub: str, ack_ids: list[str], mids: list[str], batch: pa.RecordBatch, roles: np.ndarray, sent: float
    ) -> Chunk:
        deadline = self.order.deadlines.get(sub, 10)
        c = Chunk(sub, mids, ack_ids, batch, 0, 0, time.monotonic(), proven_until=sent + deadline)
        self.chunks.append(c)
        self.batches.append(batch)
        self.roles.append(roles)
        # The subscription's own deadline shorter than the task's lease: extended at once, by the
        # keeper's thread, so this thread's Pulls do not wait for the extensions' round trips.
        short = deadline < self.order.lease_seconds
        self.keeper.add([c], float(deadline), renew_now=short)
        if short:
            self.unextended.append(c)
        return c

    def extend_new(self) -> None:
        """Extend to the task's lease, from this thread, what the keeper has not been answered for yet.

        Called once the pull is over: what is recorded must have its lease proven to outlive the
        recording (:meth:`drop_unproven`). A chunk the keeper extended is proven beyond the
        subscription's deadline from now (it was pulled at most 40 % of that deadline ago); the
        others (their extension in flight or lost) are extended here.
        """
        if not self.unextended:
            return
        now = time.monotonic()
        chunks, self.unextended = self.unextended, []
        unproven = [c for c in chunks if c.proven_until < now + self.order.deadlines.get(c.sub, 10)]
        self.keeper.extend(unproven, self.order.lease_seconds)

    def drop_unproven(self, rpc: Rpc) -> None:
        """Hand back, unrecorded, the messages whose lease is not proven to outlive the recording.

        Pub/Sub may have delivered them to another task meanwhile.
        """
        bound = time.monotonic() + RECORD_MARGIN_SECONDS
        lapsed = [i for i, c in enumerate(self.chunks) if c.proven_until < bound]
        if not lapsed:
            return
        gone = [self.chunks[i] for i in lapsed]
        self._give_back(rpc, gone)
        for c in gone:
            c.state = DONE
        n = sum(len(c) for c in gone)
        self.handed_back += n
        log.warning(
            "%d pulled message(s) of batch %d partition %d had leases that may have lapsed (Pub/Sub "
            "unreachable?): handed back, not recorded",
            n,
            self.order.batch_id,
            self.order.index,
        )
        keep = [i for i in range(len(self.chunks)) if i not in set(lapsed)]
        self.chunks = [self.chunks[i] for i in keep]
        self.batches = [self.batches[i] for i in keep]
        self.roles = [self.roles[i] for i in keep]

    def mark_seen(self) -> None:
        """Mark as redeliveries the messages the driver says must not be yielded (:mod:`.seen`)."""
        if self.order.seen is None or not self.chunks:
            return
        by_sub: dict[str, list[int]] = {}
        for i, c in enumerate(self.chunks):
            by_sub.setdefault(c.sub, []).append(i)
        for sub, idx in by_sub.items():
            masks = [self.roles[i] != REDELIVERY for i in idx]
            mids = list(
                itertools.chain.from_iterable(
                    itertools.compress(self.chunks[i].message_ids, mask.tolist()) for i, mask in zip(idx, masks)
                )
            )
            if not mids:
                continue
            answer = seen.ask(self.order.seen, self.order.batch_id, sub, mids)
            at = 0
            for i, where in zip(idx, map(np.flatnonzero, masks)):
                drop = answer[at : at + len(where)]
                at += len(where)
                self.roles[i][where[drop]] = REDELIVERY

    def _give_back(self, rpc: Rpc, chunks: list[Chunk]) -> None:
        """Hand ``chunks`` back before the slice is recorded; no answer before proves their subscription drained."""
        waiting = self.keeper.discard(chunks, handing_back=True)
        if waiting:
            # A renewal sent before could act after the hand-back: hand back once it landed.
            self.keeper.wait_landed(waiting, MODIFY_DEADLINE.total + 1.0)
        until = _hand_back(rpc, chunks, self.order) or time.time()
        for c in chunks:
            e = self.evidence[c.sub]
            e.shadow_until = max(e.shadow_until, until)

    def table(self) -> pa.Table:
        if not self.chunks:
            return SLICE_SCHEMA.empty_table()
        messages = pa.Table.from_batches(self.batches, schema=MESSAGE_SCHEMA)
        subs = pa.array([c.sub for c in self.chunks for _ in range(len(c))], pa.string())
        acks = pa.array([a for c in self.chunks for a in c.ack_ids], pa.string())
        roles = np.concatenate(self.roles)
        table = pa.Table.from_arrays([subs, acks, *messages.columns, pa.array(roles, pa.int8())], schema=SLICE_SCHEMA)
        # The ack ids of a message's earlier deliveries to this task: a row each, acknowledged with
        # the batch (or handed back with the message, if it is held for the next run), not yielded.
        rows, earlier = [], []
        at = 0
        for c in self.chunks:
            for j, ids in c.earlier.items():
                rows.extend([at + j] * len(ids))
                earlier.extend(ids)
            at += len(c)
        if not rows:
            return table
        again = table.take(pa.array(rows, pa.int64()))
        again = again.set_column(1, "ack_id", pa.array(earlier, pa.string()))
        kinds = np.where(roles[rows] == LATER, LATER, REDELIVERY).astype(np.int8)
        again = again.set_column(again.num_columns - 1, "role", pa.array(kinds, pa.int8()))
        return pa.concat_tables([table, again])

    def info(self) -> SliceInfo:
        kept = oldest = None
        if self.chunks:
            roles = np.concatenate(self.roles)
            publish = np.concatenate([numbers(b.column(2)) for b in self.batches])
            keep = roles == KEEP
            kept = int(keep.sum())
            oldest = int(publish[keep].min()) if kept else None
        mono, wall = time.monotonic(), time.time()
        proven = min((c.proven_until for c in self.chunks), default=mono)
        # The keeper renews on after the recording, each renewal setting the lease to end
        # lease_seconds after it (sooner than a Pull's lease of a longer subscription deadline):
        # no later renewal lets the lease end sooner than this.
        proven = min(proven, mono + self.order.lease_seconds)
        kept_by_sub: dict[str, int] = {}
        held_by_sub: dict[str, int] = {}
        later_bytes = 0
        for c, roles, batch in zip(self.chunks, self.roles, self.batches):
            kept_by_sub[c.sub] = kept_by_sub.get(c.sub, 0) + int((roles == KEEP).sum())
            held_by_sub[c.sub] = held_by_sub.get(c.sub, 0) + int((roles != LATER).sum())
            if self.order.cutoff_us is not None:
                later_bytes += int(body_lengths(batch.column(0))[roles == LATER].sum())
        return SliceInfo(
            rows=sum(len(c) + sum(map(len, c.earlier.values())) for c in self.chunks),
            kept=kept or 0,
            oldest_us=oldest,
            pulled_at=self.pulled_at or wall,
            proven_until=wall + (proven - mono),
            handed_back=self.handed_back,
            subs={
                s: SubscriptionPull(
                    e.answered,
                    e.last_sent,
                    e.last_oldest_us,
                    e.shadow_until,
                    e.unavailable,
                    kept_by_sub.get(s, 0),
                    held_by_sub.get(s, 0),
                )
                for s, e in self.evidence.items()
            },
            pull_errors=sum(e.errors for e in self.evidence.values()),
            later_bytes=later_bytes,
        )

    def hand_back(self, rpc: Rpc) -> float:
        """Hand back what was not recorded; return :func:`_hand_back`'s bound (0.0: all of it went)."""
        return _hand_back(rpc, [c for c in self.chunks if c.state != DONE], self.order)


def _hand_back(rpc: Rpc, chunks: list[Chunk], order: SliceOrder) -> float:
    """Hand ``chunks`` back; return the wall time until which those that did not go may stay leased (0.0: all went).

    The transport reports a lost request per ack id, not by raising. Not handed back, a message
    stays leased, to nobody, for as long as its Pull or this task's keeper leased it.
    """
    by_sub = group_by_subscription((c.sub, a) for c in chunks for a in c.fresh_ack_ids())
    lost = 0
    for sub, ids in by_sub.items():
        try:
            failed = len(rpc.modify_ack_deadline(sub, ids, 0, total=5.0).failed)
        except Exception:  # noqa: BLE001 - counted as not handed back
            failed = len(ids)
        if failed:
            lost += failed
            log.warning("handing %d message(s) back to %s failed; they return when their leases lapse", failed, sub)
    if not lost:
        return 0.0
    return time.time() + longest_lease(order.lease_seconds, order.deadlines.values())


def _pull(rpc: Rpc, order: SliceOrder, out: _Pulled, claim: Lease) -> None:
    """Pull until the share is full, every subscription answered with nothing (more), or the time is up.

    Keeps several Pulls in flight (see the module's docstring); returns once none is. A Pull error
    is retried within that time only: the task then records what it holds (and says Pub/Sub was
    unavailable) rather than holding messages past their lease. An error that is not retried is
    raised once the other Pulls in flight answered, their messages kept (the caller hands them back).

    Each Pull goes only while ``claim`` still allows writes (``LeaseLost`` otherwise, raised the
    same way): once it may have lapsed (its renewals stalled or failed), another attempt may take
    it over and pull the slice again, and what both held would pass the share.
    """
    end = time.monotonic() + order.seconds
    flight = _InFlight(rpc, order, end)
    # A task's pull lasts seconds: learning from START each time would spend half of it below the
    # Pulls the round trip wants. It starts where the last task of this Python worker (Spark reuses
    # them) left the subscription, and goes on learning from there.
    rules = {s: Concurrency(_LEARNED.get(s, START), time.monotonic()) for s in order.subscriptions}
    # Likewise the size of its messages: the first Pull is sized by the byte share, not a guess.
    out.largest = max([out.largest, *(_SIZES.get(s, 0) for s in order.subscriptions)])
    if out.largest:
        out.sampled = FIRST_PULL_MESSAGES  # the sizes the worker's last task saw are the estimate
    ordered = set(order.ordered)
    open_subs = list(order.subscriptions)
    # A share may fill on the first subscription's answers: the batches start with each in turn.
    turn = order.batch_id
    sending = True  # False once the time is up or a Pull failed for good
    failure: BaseException | None = None

    def slots(sub: str) -> int:
        return 1 if sub in ordered else rules[sub].pullers

    try:
        while True:
            while sending and open_subs and not out.full():
                if end - time.monotonic() <= 0:
                    sending = False
                    break
                free = [s for s in open_subs if flight.by_sub[s] < slots(s)]
                if not free or (out.sampling() and flight.count):
                    break
                ask = out.room(flight.asked, sum(slots(s) for s in open_subs))
                if not ask:
                    break
                sub = open_subs[turn % len(open_subs)]
                while sub not in free:
                    turn += 1
                    sub = open_subs[turn % len(open_subs)]
                turn += 1
                claim.check()
                flight.send(sub, ask, probe=out.sampling())
            if not flight.count:
                break
            done = flight.next()
            done.merge_into(out.evidence[done.sub])
            if isinstance(done.outcome, BaseException):
                failure = failure or done.outcome
                sending = False
                continue
            if done.outcome is None:  # the time ran out waiting
                sending = False
                continue
            more, service, messages = _accept(out, done)
            if not more and done.sub in open_subs:
                open_subs.remove(done.sub)
            # A Pull asked for less than the most only for lack of room holds the window back: the
            # size probe asked for a few on purpose, and its window is the network's all the same.
            rules[done.sub].answered(
                time.monotonic(),
                done.latency,
                service,
                messages,
                held_back=done.asked < MAX_PULL_MESSAGES and not done.probe,
            )
        out.extend_new()
    finally:
        # Leaving by an exception of this thread: what the Pulls in flight bring is leased to this
        # task all the same, and kept, for the caller to hand back.
        while flight.count:
            done = flight.next()
            done.merge_into(out.evidence[done.sub])
            if isinstance(done.outcome, tuple):
                with contextlib.suppress(Exception):
                    _accept(out, done)
        with contextlib.suppress(Exception):
            out.extend_new()  # left by an exception: best effort, the caller hands them back
        for s, rule in rules.items():
            _LEARNED[s] = rule.pullers
            if out.largest:
                _SIZES[s] = out.largest
    if failure is not None:
        raise failure


def _accept(out: _Pulled, done: _Done) -> tuple[bool, float, int]:
    """Keep an answer: whether its subscription may have more, the CPU it took, the messages it brought."""
    response, sent_mono, sent_wall = done.outcome
    if out.pulled_at is None or sent_wall < out.pulled_at:
        out.pulled_at = sent_wall
    started, sampled = cpu_seconds(), out.sampled
    more = out.accept(done.sub, response, sent_mono, sent_wall)
    # The answer's messages, counted where they were read (the response may be its bytes): every
    # one of them is sampled, its size seen.
    return more, cpu_seconds() - started, out.sampled - sampled


@dataclass
class _Done:
    """One Pull's outcome, and the evidence it left for the task's thread to merge.

    The outcome: an answer (response, monotonic and wall time sent), ``None`` (the time ran out) or
    the exception it raised.
    """

    sub: str
    asked: int
    outcome: Any
    evidence: _Evidence
    latency: float = 0.0
    probe: bool = False  # sent before any message's size was known (asked for a few)

    def merge_into(self, evidence: _Evidence) -> None:
        evidence.shadow_until = max(evidence.shadow_until, self.evidence.shadow_until)
        evidence.errors += self.evidence.errors
        if isinstance(self.outcome, tuple):
            evidence.unavailable = False
        elif self.evidence.unavailable:
            evidence.unavailable = True


class _InFlight:
    """A task's Pulls in flight, each on a thread of its own; their outcomes come back as they come.

    Only the task's thread calls it.
    """

    def __init__(self, rpc: Rpc, order: SliceOrder, end: float) -> None:
        self._rpc = rpc
        self._order = order
        self._end = end
        self._done: queue.Queue[_Done] = queue.Queue()
        self.count = 0
        self.asked = 0  # messages the Pulls in flight asked for
        self.by_sub = dict.fromkeys(order.subscriptions, 0)

    def send(self, sub: str, max_messages: int, probe: bool = False) -> None:
        self.count += 1
        self.asked += max_messages
        self.by_sub[sub] += 1
        name = f"crdb-pubsub-task-pull-{self._order.batch_id}-{self._order.index}-{sub.rsplit('/', 1)[-1]}"
        threading.Thread(target=self._run, args=(sub, max_messages, probe), name=name, daemon=True).start()

    def _run(self, sub: str, max_messages: int, probe: bool) -> None:
        evidence = _Evidence()
        done = _Done(sub, max_messages, None, evidence, probe=probe)
        try:
            order = self._order
            done.outcome = _one_pull(
                self._rpc,
                sub,
                max_messages,
                self._end - time.monotonic(),
                evidence,
                order.deadlines.get(sub, 10),
                sub in order.immediate,
            )
            if done.outcome is not None:
                done.latency = time.monotonic() - done.outcome[1]
        except BaseException as exc:  # noqa: BLE001 - the task's thread raises it
            done.outcome = exc
        finally:
            self._done.put(done)

    def ready(self) -> bool:
        """Whether a Pull's outcome is waiting."""
        return not self._done.empty()

    def next(self) -> _Done:
        """Wait for the next Pull in flight to end (one must be in flight)."""
        done = self._done.get()
        self.count -= 1
        self.asked -= done.asked
        self.by_sub[done.sub] -= 1
        return done


def _one_pull(
    rpc: Rpc, sub: str, max_messages: int, left: float, evidence: _Evidence, deadline: int, immediately: bool = False
) -> tuple[Any, float, float] | None:
    """Pull one answer from ``sub`` (possibly empty), with the monotonic and wall time its Pull was sent.

    ``None`` when ``left`` ran out first. A Pull that timed out or failed casts a shadow: it may have
    leased messages to nobody until the subscription's ack deadline has passed.
    """
    from google.api_core import exceptions as gexc

    backoff = Backoff(0.1, 2.0)
    end = time.monotonic() + left
    prefer = immediately
    while True:
        remaining = end - time.monotonic()
        if remaining <= 0:
            return None
        timeout = max(0.2, min(PULL_TIMEOUT_SECONDS, remaining))
        sent_mono, sent_wall = time.monotonic(), time.time()
        try:
            response = rpc.pull(sub, max_messages, timeout, return_immediately=immediately)
        except gexc.DeadlineExceeded:
            # A timed-out Pull proves nothing (the service may hold it): ask once more,
            # returning at once; that answer counts.
            evidence.shadow_until = max(evidence.shadow_until, sent_wall + timeout + deadline)
            immediately = True
            continue
        except Exception as exc:
            if not is_transient(exc):
                raise
            evidence.shadow_until = max(evidence.shadow_until, sent_wall + timeout + deadline)
            evidence.unavailable = True
            evidence.errors += 1
            immediately = prefer
            time.sleep(min(backoff.next(), max(0.0, end - time.monotonic())))
            continue
        evidence.unavailable = False
        return response, sent_mono, sent_wall


_RPCS: dict[tuple, Rpc] = {}
# Pulls in flight a subscription's last task in this Python worker ended with (see _pull).
_LEARNED: dict[str, int] = {}
# The largest message body a subscription's last task in this Python worker saw (see _pull).
_SIZES: dict[str, int] = {}
_STORAGES: dict[str, Storage] = {}


def _storage(state_dir: str) -> Storage:
    """One storage per Python worker and stateDir (a Cloud Storage client costs tens of ms to make)."""
    storage = _STORAGES.get(state_dir)
    if storage is None:
        storage = _STORAGES[state_dir] = open_storage(state_dir)
    return storage


def _rpc(options: SourceOptions) -> Rpc:
    """One client per Python worker and endpoint (Spark reuses workers across tasks)."""
    kwargs = options.credential_kwargs()
    key = (
        options.effective_emulator_host,
        options.endpoint,
        hash(kwargs["credentials_json"]),
        kwargs["credentials_file"],
    )
    rpc = _RPCS.get(key)
    if rpc is None:
        rpc = _RPCS[key] = rpc_for(options)
    return rpc
