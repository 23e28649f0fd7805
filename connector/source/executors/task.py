"""A task's pull: fill one slice from Pub/Sub, record it, hand back its rows.

Runs in an executor's Python worker. What it pulls is written to the stateDir (:mod:`.store`)
before any row is yielded, so the driver can lease and acknowledge it, and a retry of the task
replays it. The task stops pulling when its share of the trigger's limits is full, when a Pull
brings nothing (nothing older than the cutoff, in AvailableNow), or when its time is up: a
fraction of the subscription's ack deadline.

While it holds messages the task keeps their leases alive (the shared :class:`~..pubsub.leaser.Leaser`:
at once on receipt when the subscription's deadline is shorter than ``ackDeadlineSeconds``, then
before each lapses), until Spark has consumed its rows; the driver leases them from then on. A
message whose lease is not proven alive when the slice is recorded may have been delivered to
another task meanwhile: it is handed back, not recorded (whoever gets it next yields it). A
message another slice of the batch already recorded, or one the driver lists as delivered
before, is recorded as a redelivery: acknowledged with the batch, not yielded.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..pubsub.chunks import DONE, Chunk
from ..pubsub.leaser import Leaser
from ..pubsub.remembered import IdSet
from ..storage import Storage, open_storage
from ..storage.lease import Lease
from ..transport import Backoff, Rpc, group_by_subscription, is_transient, rpc_for
from ..wire import MESSAGE_SCHEMA, body_lengths, pulled_batch
from .orders import SliceOrder
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

MAX_PER_PULL = 1000  # Pub/Sub's own bound on one Pull
PULL_TIMEOUT_SECONDS = 2.0
RECORD_MARGIN_SECONDS = 1.0  # a recorded message's lease must be proven alive at least this much longer


@contextlib.contextmanager
def pulled_slice(options: SourceOptions, order: SliceOrder) -> Iterator[pa.Table]:
    """Provide the messages of ``order``'s slice to yield (:data:`MESSAGE_SCHEMA`), for the ``with``.

    The recorded slice if one exists, else a new one, pulled and recorded first. The leases of a new
    slice are kept until the ``with`` ends (Spark consumed the rows), then extended once more for
    the driver to take over.
    """
    store = SliceStore(_storage(options.stateDir or ""))
    table = store.read(order.batch_id, order.index)
    keeper: Leaser | None = None
    chunks: list[Chunk] = []
    if table is None:
        # Another attempt's claim is waited for until it must have expired (its executor died).
        claim = store.claim(order.batch_id, order.index, wait=CLAIM_TTL_SECONDS + 2 * CLAIM_MARGIN_SECONDS + 5.0)
        try:
            table = store.read(order.batch_id, order.index)  # the other attempt may have finished meanwhile
            if table is None:
                table, keeper, chunks = _pull_and_record(options, order, store, claim)
        finally:
            claim.release()
    try:
        kept = table.filter(pc.equal(table.column("role"), KEEP)) if table.num_rows else table
        yield kept.select(MESSAGE_SCHEMA.names)
    finally:
        if keeper is not None:
            keeper.stop(timeout=1.0)
            keeper.extend(chunks, order.lease_seconds)


def _pull_and_record(
    options: SourceOptions, order: SliceOrder, store: SliceStore, claim: Lease
) -> tuple[pa.Table, Leaser | None, list[Chunk]]:
    rpc = _rpc(options)
    keeper = Leaser(
        rpc.modify_ack_deadline,
        lease_seconds=order.lease_seconds,
        max_lease_seconds=max(order.lease_seconds, options.maxLeaseDurationSeconds),
        name=f"crdb-pubsub-task-leaser-{order.batch_id}-{order.index}",
    )
    keeper.start()
    pulled = _Pulled(order, keeper)
    try:
        _pull(rpc, order, pulled)
        pulled.drop_unproven(rpc)
        pulled.mark_recorded_elsewhere(store)
        table, info = pulled.table(), pulled.info()
        published = store.publish(claim, order.batch_id, order.index, table, info)
    except BaseException:
        keeper.stop(timeout=1.0)
        pulled.hand_back(rpc)  # nothing was recorded: let Pub/Sub deliver them again at once
        raise
    if not published:
        # A speculative or retried attempt recorded the slice first: it is the one that counts.
        keeper.stop(timeout=1.0)
        pulled.hand_back(rpc)
        recorded = store.read(order.batch_id, order.index)
        assert recorded is not None
        return recorded, None, []
    return table, keeper, pulled.chunks


@dataclass
class _Evidence:
    last: str = "none"
    last_sent: float = 0.0
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
        self.kept = 0
        self.kept_bytes = 0
        self.handed_back = 0
        self.pulled_at: float | None = None
        self.seen: dict[str, set[str]] = {}
        self.evidence: dict[str, _Evidence] = {s: _Evidence() for s in order.subscriptions}

    def add(
        self, sub: str, ack_ids: list[str], mids: list[str], batch: pa.RecordBatch, roles: np.ndarray, sent: float
    ) -> None:
        deadline = self.order.deadlines.get(sub, 10)
        c = Chunk(sub, mids, ack_ids, batch, 0, 0, time.monotonic(), proven_until=sent + deadline)
        self.chunks.append(c)
        self.batches.append(batch)
        self.roles.append(roles)
        self.keeper.add([c], float(deadline))
        if deadline < self.order.lease_seconds:
            self.keeper.extend([c], self.order.lease_seconds)

    def drop_unproven(self, rpc: Rpc) -> None:
        """Hand back, unrecorded, the messages whose lease is not proven to outlive the recording.

        Pub/Sub may have delivered them to another task meanwhile.
        """
        bound = time.monotonic() + RECORD_MARGIN_SECONDS
        lapsed = [i for i, c in enumerate(self.chunks) if c.proven_until < bound]
        if not lapsed:
            return
        gone = [self.chunks[i] for i in lapsed]
        self.keeper.discard(gone)
        _hand_back(rpc, gone)
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

    def mark_recorded_elsewhere(self, store: SliceStore) -> None:
        """Mark the messages another slice of this batch recorded as redeliveries here.

        Such a message (its lease lapsed there, and Pub/Sub delivered it here) is yielded by that
        slice: here it is a redelivery.
        """
        if not self.chunks:
            return
        mine = self.order.index
        others: dict[str, list[str]] = {}
        for p in range(self.order.parts):
            if p == mine:
                continue
            found = store.read_acks(self.order.batch_id, p)
            if found is None:
                continue
            acks, _ = found
            for sub, ids in group_by_subscription(
                zip(acks.column("sub").to_pylist(), acks.column("message_id").to_pylist())
            ).items():
                others.setdefault(sub, []).extend(ids)
        if not others:
            return
        sets = {sub: IdSet.of(ids) for sub, ids in others.items()}
        for c, roles in zip(self.chunks, self.roles):
            s = sets.get(c.sub)
            if s is not None:
                hit = s.mask(c.message_ids) & (roles == KEEP)
                roles[hit] = REDELIVERY

    def table(self) -> pa.Table:
        if not self.chunks:
            return SLICE_SCHEMA.empty_table()
        messages = pa.Table.from_batches(self.batches, schema=MESSAGE_SCHEMA)
        subs = pa.array([c.sub for c in self.chunks for _ in range(len(c))], pa.string())
        acks = pa.array([a for c in self.chunks for a in c.ack_ids], pa.string())
        return pa.Table.from_arrays(
            [subs, acks, *messages.columns, pa.array(np.concatenate(self.roles), pa.int8())], schema=SLICE_SCHEMA
        )

    def info(self) -> SliceInfo:
        kept = oldest = None
        if self.chunks:
            roles = np.concatenate(self.roles)
            publish = np.concatenate([b.column(2).to_numpy() for b in self.batches])
            keep = roles == KEEP
            kept = int(keep.sum())
            oldest = int(publish[keep].min()) if kept else None
        mono, wall = time.monotonic(), time.time()
        proven = min((c.proven_until for c in self.chunks), default=mono)
        kept_by_sub: dict[str, int] = {}
        for c, roles in zip(self.chunks, self.roles):
            kept_by_sub[c.sub] = kept_by_sub.get(c.sub, 0) + int((roles == KEEP).sum())
        return SliceInfo(
            rows=sum(len(c) for c in self.chunks),
            kept=kept or 0,
            oldest_us=oldest,
            pulled_at=self.pulled_at or wall,
            proven_until=wall + (proven - mono),
            handed_back=self.handed_back,
            subs={
                s: SubscriptionPull(e.last, e.last_sent, e.shadow_until, e.unavailable, kept_by_sub.get(s, 0))
                for s, e in self.evidence.items()
            },
            pull_errors=sum(e.errors for e in self.evidence.values()),
        )

    def hand_back(self, rpc: Rpc) -> None:
        _hand_back(rpc, [c for c in self.chunks if c.state != DONE])


def _hand_back(rpc: Rpc, chunks: list[Chunk]) -> None:
    by_sub = group_by_subscription((c.sub, a) for c in chunks for a in c.ack_ids)
    for sub, ids in by_sub.items():
        try:
            rpc.modify_ack_deadline(sub, ids, 0, total=5.0)
        except Exception:  # noqa: BLE001 - best effort: the leases lapse anyway
            log.warning("handing %d message(s) back to %s failed; they return when their leases lapse", len(ids), sub)


def _pull(rpc: Rpc, order: SliceOrder, out: _Pulled) -> None:
    """Pull until the share is full, every subscription answered with nothing (more), or the time is up.

    A Pull error is retried within that time only: the task then records what it holds (and says
    Pub/Sub was unavailable) rather than holding messages past their lease.
    """
    end = time.monotonic() + order.seconds
    open_subs = list(order.subscriptions)
    turn = 0
    while open_subs and out.kept < order.max_messages and out.kept_bytes < order.max_bytes:
        left = end - time.monotonic()
        if left <= 0:
            return
        sub = open_subs[turn % len(open_subs)]
        turn += 1
        answer = _one_pull(
            rpc,
            sub,
            min(MAX_PER_PULL, order.max_messages - out.kept),
            left,
            out.evidence[sub],
            order.deadlines.get(sub, 10),
            sub in order.immediate,
        )
        if answer is None:  # the time ran out waiting
            return
        response, sent_mono, sent_wall = answer
        if out.pulled_at is None:
            out.pulled_at = sent_wall
        if not _accept(rpc, sub, response, order, out, sent_mono, sent_wall):
            open_subs.remove(sub)


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


def _accept(
    rpc: Rpc, sub: str, response: Any, order: SliceOrder, out: _Pulled, sent_mono: float, sent_wall: float
) -> bool:
    """Add one answer's messages; False when ``sub`` has nothing more for this slice."""
    ack_ids, mids, batch = pulled_batch(response)
    evidence = out.evidence[sub]
    evidence.last_sent = sent_wall
    if not mids:
        evidence.last = "empty"
        return False
    n = len(mids)
    roles = np.zeros(n, dtype=np.int8)
    publish = batch.column(2).to_numpy()
    if order.cutoff_us is not None:
        roles[publish > order.cutoff_us] = LATER
    drop = order.drop.get(sub)
    seen = out.seen.setdefault(sub, set())
    # A message delivered before (listed by the driver, or twice to this task) is recorded to be
    # acknowledged with its new ack id, not yielded again.
    again = drop.mask(mids) if drop is not None else np.zeros(n, dtype=bool)
    if seen:
        again |= np.fromiter((m in seen for m in mids), dtype=bool, count=n)
    seen.update(mids)
    roles[again & (roles == KEEP)] = REDELIVERY
    # The byte share: what does not fit goes back (at least one message, so a large one moves).
    sizes = body_lengths(batch.column(0))
    keep = roles == KEEP
    room = order.max_bytes - out.kept_bytes
    back: list[int] = []
    if keep.any() and int(sizes[keep].sum()) > room:
        fits = 0
        for i in np.flatnonzero(keep).tolist():
            size = int(sizes[i])
            if fits and size > room:
                back.append(i)
                continue
            fits += 1
            room -= size
    if back:
        rpc.modify_ack_deadline(sub, [ack_ids[i] for i in back], 0, total=5.0)
        out.handed_back += len(back)
        take = np.setdiff1d(np.arange(n), np.array(back, dtype=np.int64))
        batch = batch.take(pa.array(take))
        mids = [mids[i] for i in take.tolist()]
        ack_ids = [ack_ids[i] for i in take.tolist()]
        roles = roles[take]
        sizes = sizes[take]
    out.add(sub, ack_ids, mids, batch, roles, sent_mono)
    kept = roles == KEEP
    out.kept += int(kept.sum())
    out.kept_bytes += int(sizes[kept].sum())
    before_cutoff = roles != LATER
    evidence.last = "messages" if before_cutoff.any() else "later"
    # An answer of only later messages: this subscription is drained for the run.
    return bool(before_cutoff.any())


_RPCS: dict[tuple, Rpc] = {}
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
