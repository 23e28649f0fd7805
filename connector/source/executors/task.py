"""A task's pull: fill one slice from Pub/Sub, record it, hand back its rows.

Runs in an executor's Python worker. What it pulls is written to the stateDir (:mod:`.store`)
before any row is yielded, so the driver can lease and acknowledge it, and a retry of the task
replays it. The task stops pulling when its share of the trigger's limits is full, when a Pull
brings nothing (nothing older than the cutoff, in AvailableNow), or when its time is up: a
fraction of the subscription's ack deadline, so the first messages' leases are still alive when
the slice is recorded. Once recorded, the task extends their leases to ``ackDeadlineSeconds``;
from then on the driver keeps them alive until the batch commits.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..transport import Backoff, Rpc, group_by_subscription, is_transient, rpc_for
from ..wire import MESSAGE_SCHEMA, body_lengths, pulled_batch
from .store import SLICE_SCHEMA, SliceInfo, SliceStore

if TYPE_CHECKING:  # pragma: no cover
    from ..options import SourceOptions

log = logging.getLogger("crdb_pubsub.slices")

MAX_PER_PULL = 1000  # Pub/Sub's own bound on one Pull
PULL_TIMEOUT_SECONDS = 2.0
UNAVAILABLE_LIMIT_SECONDS = 60.0  # a task gives up (and fails, to be retried) after this long
# Test seam (tests/source/test_executors.py): if this file exists in the slices directory, the
# first task that pulls something consumes it and dies before recording its slice, as an
# executor lost mid-pull would.
KILL_NEXT_PULL = "KILL_NEXT_PULL"


@dataclass(frozen=True)
class SliceOrder:
    """What the driver asks of one task: the plan of one slice."""

    batch_id: int
    index: int
    subscriptions: tuple[str, ...]
    max_messages: int
    max_bytes: int
    seconds: float  # time to pull
    cutoff_us: int | None = None  # AvailableNow: later messages are handed back
    drop: dict[str, frozenset[str]] = field(default_factory=dict)  # ids already delivered, by subscription


class SliceConflict(RuntimeError):
    """Another attempt of the same task is still pulling."""


def rows_of(options: "SourceOptions", order: SliceOrder) -> pa.Table:
    """The messages of ``order``'s slice to yield (:data:`MESSAGE_SCHEMA`): the recorded slice if
    one exists, else a new one, pulled and recorded first."""
    store = SliceStore(options.stateDir or "")
    table = store.read(order.batch_id, order.index)
    if table is None:
        claim = store.claim(order.batch_id, order.index, wait=order.seconds + 3 * PULL_TIMEOUT_SECONDS + 10.0)
        if claim is None:
            raise SliceConflict(f"crdb_pubsub: another attempt of batch {order.batch_id} partition {order.index} is "
                                "still pulling; this attempt fails so that the batch does not read twice")
        try:
            table = store.read(order.batch_id, order.index)  # the other attempt may have finished meanwhile
            if table is None:
                table = _pull_and_record(options, order, store)
        finally:
            claim.release()
    kept = table.filter(table.column("keep")) if table.num_rows else table
    return kept.select(MESSAGE_SCHEMA.names)


def _pull_and_record(options: "SourceOptions", order: SliceOrder, store: SliceStore) -> pa.Table:
    rpc = _rpc(options)
    pulled = _Pulled()
    try:
        _pull(rpc, order, pulled)
        table, info = pulled.table(), pulled.info()
        if pulled.rows:
            _maybe_die(store)
        published = store.publish(order.batch_id, order.index, table, info)
    except BaseException:
        pulled.hand_back(rpc)  # nothing was recorded: let Pub/Sub deliver them again at once
        raise
    if not published:
        # A speculative or retried attempt recorded the slice first: it is the one that counts.
        pulled.hand_back(rpc)
        table = store.read(order.batch_id, order.index)
        assert table is not None
        return table
    pulled.extend_leases(rpc, options.ackDeadlineSeconds)
    return table


class _Pulled:
    """What one task pulled so far: record batches and per-row subscription, ack id, keep flag."""

    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []
        self.subs: list[str] = []
        self.ack_ids: list[str] = []
        self.keep: list[bool] = []
        self.rows = 0
        self.kept = 0
        self.kept_bytes = 0
        self.drained = False
        self.handed_back = 0
        self.pulled_at: float | None = None
        self.seen: dict[str, set[str]] = {}  # message ids by subscription

    def table(self) -> pa.Table:
        if not self.batches:
            return SLICE_SCHEMA.empty_table()
        messages = pa.Table.from_batches(self.batches, schema=MESSAGE_SCHEMA)
        return pa.Table.from_arrays(
            [pa.array(self.subs, pa.string()), pa.array(self.ack_ids, pa.string()), *messages.columns,
             pa.array(self.keep, pa.bool_())], schema=SLICE_SCHEMA)

    def info(self) -> SliceInfo:
        oldest = None
        if self.kept:
            publish = pa.chunked_array([b.column(2) for b in self.batches])
            keep = pa.array(self.keep, pa.bool_())
            oldest = pc.min(pc.filter(publish, keep)).as_py()
        return SliceInfo(rows=self.rows, kept=self.kept, drained=self.drained, oldest_us=oldest,
                         pulled_at=self.pulled_at or time.time(), handed_back=self.handed_back)

    def by_sub(self) -> dict[str, list[str]]:
        return group_by_subscription(zip(self.subs, self.ack_ids))

    def hand_back(self, rpc: Rpc) -> None:
        for sub, ids in self.by_sub().items():
            try:
                rpc.modify_ack_deadline(sub, ids, 0, total=5.0)
            except Exception:  # noqa: BLE001 - best effort: the leases lapse anyway
                log.warning("handing %d message(s) back to %s failed; they return when their leases lapse",
                            len(ids), sub)

    def extend_leases(self, rpc: Rpc, seconds: int) -> None:
        for sub, ids in self.by_sub().items():
            result = rpc.modify_ack_deadline(sub, ids, seconds)
            if result.failed:
                log.warning("extending the lease of %d recorded message(s) on %s failed (%s); the driver retries",
                            len(result.failed), sub, next(iter(result.failed.values())))


def _pull(rpc: Rpc, order: SliceOrder, out: _Pulled) -> None:
    end = time.monotonic() + order.seconds
    open_subs = list(order.subscriptions)
    turn = 0
    while open_subs and out.kept < order.max_messages and out.kept_bytes < order.max_bytes:
        left = end - time.monotonic()
        if left <= 0:
            return
        sub = open_subs[turn % len(open_subs)]
        turn += 1
        response = _one_pull(rpc, sub, min(MAX_PER_PULL, order.max_messages - out.kept), left)
        if response is None:  # the time ran out waiting
            return
        if out.pulled_at is None:
            out.pulled_at = time.time()
        if not _accept(rpc, sub, response, order, out):
            open_subs.remove(sub)
    out.drained = not open_subs


def _one_pull(rpc: Rpc, sub: str, max_messages: int, left: float) -> Any:
    """One answer from ``sub`` (possibly empty), ``None`` when ``left`` ran out first."""
    from google.api_core import exceptions as gexc

    backoff = Backoff(0.1, 2.0)
    unavailable_since = None
    while True:
        try:
            try:
                return rpc.pull(sub, max_messages, max(0.2, min(PULL_TIMEOUT_SECONDS, left)))
            except gexc.DeadlineExceeded:
                # A timed-out Pull proves nothing (the service may hold it): ask once more,
                # returning at once; that answer counts.
                return rpc.pull(sub, max_messages, PULL_TIMEOUT_SECONDS, return_immediately=True)
        except gexc.DeadlineExceeded:
            return None
        except Exception as exc:  # noqa: BLE001 - classified below
            if not is_transient(exc):
                raise
            now = time.monotonic()
            unavailable_since = unavailable_since or now
            if now - unavailable_since > UNAVAILABLE_LIMIT_SECONDS:
                raise
            time.sleep(backoff.next())


def _accept(rpc: Rpc, sub: str, response: Any, order: SliceOrder, out: _Pulled) -> bool:
    """Add one answer's messages; False when ``sub`` has nothing more for this slice."""
    ack_ids, mids, batch = pulled_batch(response)
    if not mids:
        return False
    publish = batch.column(2).to_numpy()
    sizes = body_lengths(batch.column(0))
    take = np.arange(len(mids))
    back: list[str] = []
    if order.cutoff_us is not None:
        later = publish > order.cutoff_us
        if later.any():
            back = [ack_ids[i] for i in np.flatnonzero(later)]
            take = np.flatnonzero(~later)
    # The byte share: what does not fit goes back (at least one message, so a large one moves).
    room = order.max_bytes - out.kept_bytes
    if len(take) and int(sizes[take].sum()) > room:
        fits: list[int] = []
        for i in take.tolist():
            size = int(sizes[i])
            if fits and size > room:
                back.append(ack_ids[i])
                continue
            fits.append(i)
            room -= size
        take = np.array(fits, dtype=np.int64)
    if back:
        rpc.modify_ack_deadline(sub, back, 0, total=5.0)
        out.handed_back += len(back)
    if len(take):
        if len(take) < len(mids):
            batch = batch.take(pa.array(take))
            mids = [mids[i] for i in take.tolist()]
            ack_ids = [ack_ids[i] for i in take.tolist()]
        drop = order.drop.get(sub, frozenset())
        seen = out.seen.setdefault(sub, set())
        # A message delivered before (in a batch of an earlier process, or twice to this task)
        # is recorded to be acknowledged with its new ack id, not yielded again.
        keep: list[bool] = []
        for mid in mids:
            keep.append(mid not in drop and mid not in seen)
            seen.add(mid)
        n_kept = sum(keep)
        out.batches.append(batch)
        out.subs.extend([sub] * len(mids))
        out.ack_ids.extend(ack_ids)
        out.keep.extend(keep)
        out.rows += len(mids)
        out.kept += n_kept
        kept_sizes = sizes[take]
        out.kept_bytes += int(kept_sizes.sum()) if n_kept == len(mids) else int(kept_sizes[np.array(keep)].sum())
    # An answer of only later messages: this subscription is drained for the run.
    return bool(len(take))


_RPCS: dict[tuple, Rpc] = {}


def _rpc(options: "SourceOptions") -> Rpc:
    """One client per Python worker and endpoint (Spark reuses workers across tasks)."""
    kwargs = options.credential_kwargs()
    key = (options.effective_emulator_host, options.endpoint, hash(kwargs["credentials_json"]),
           kwargs["credentials_file"])
    rpc = _RPCS.get(key)
    if rpc is None:
        rpc = _RPCS[key] = rpc_for(options)
    return rpc


def _maybe_die(store: SliceStore) -> None:
    marker = store.root / KILL_NEXT_PULL
    try:
        os.unlink(marker)
    except FileNotFoundError:
        return
    log.error("test seam %s: this task dies before recording its slice", marker)
    os._exit(1)
