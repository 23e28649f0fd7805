"""``stateDir``: what this query planned and acknowledged, durably, for exactly-once replay.

The ledger lives in a :class:`~..storage.Storage` (a POSIX directory or ``gs://bucket/prefix``),
under ``v3/``::

    LOCK                      the single-writer lease (:mod:`..storage.lease`): one live process per stateDir
    META.json                 the query run and subscriptions this directory belongs to
    batches/<N>.arrow         receiver=driver: batch N as planned, messages and ack ids, written
                              before Spark learns its offset, so that Spark's replay of N yields
                              the same rows
    plans/<N>.json            receiver=executors: what batch N's tasks were told (partitions,
                              limits, cutoff), written once before Spark learns its offset; the
                              slices the tasks record are the batch's content
    acked/<X>.arrow           the messages of every batch <= X, written when Spark's commit of X
                              was proven; its ``answered`` marker follows once Pub/Sub answered
    acked/<X>.answered.<T>    all acknowledgements of X were answered, at T (epoch milliseconds)
    acked/<X>.unconfirmed.<R>.arrow  the R of them not proven acknowledged, with their ack ids

What a new process learns from it (:meth:`Ledger.recover`): batches planned but not known to be
committed (replayed if Spark asks; a driver-mode batch Spark never saw returns to the buffer, an
executors-mode plan is reused for the batch of the same number); message ids to drop when Pub/Sub
delivers them again (for the dedupe window after a proven acknowledgement, far longer after an
unproven one); and acknowledgements to send again.

Every object but META.json is written once (a create that never overwrites), and every write goes
through the lease: a process that lost it (frozen past its expiry, another process took over)
can no longer write (:class:`StateDirError`). A commit deletes its batch's objects by name; what
outlived its window is pruned from one listing of ``acked/`` every :data:`PRUNE_EVERY_SECONDS`
(the names say when and how many), so nothing is kept in memory per batch.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ..lifecycle import end_process, gone_from_this_host, stale_sibling
from ..storage import Storage, open_storage
from ..storage.lease import Lease, LeaseHeld, LeaseLost
from ..wire import MESSAGE_SCHEMA

log = logging.getLogger("crdb_pubsub.ledger")

FORMAT = 3
ROOT = "v3"
BATCH_SCHEMA = pa.schema([pa.field("sub", pa.string()), pa.field("ack_id", pa.string()), *MESSAGE_SCHEMA])
ACKED_SCHEMA = pa.schema(
    [pa.field("sub", pa.string()), pa.field("message_id", pa.string()), pa.field("ack_id", pa.string())]
)

# The single-writer lease: renewed every LOCK_TTL_SECONDS / 3; another process takes it over once
# it is LOCK_MARGIN_SECONDS past its expiry (a holder on this host whose process is gone at once).
LOCK_TTL_SECONDS = 15.0
LOCK_MARGIN_SECONDS = 3.0
# A reader that Spark terminated hands back within 6 s (datasource.HAND_BACK_SECONDS + 1) and is
# ended by the kernel 2 s later at the latest (lifecycle.KILL_MARGIN_SECONDS): by then a holder
# still there did not get or could not handle Spark's SIGTERM.
TAKEOVER_AFTER_SECONDS = 8.0
KILL_AFTER_SECONDS = 5.0
PRUNE_EVERY_SECONDS = 30.0
VOID_PLAN = {"parts": 0, "max_messages": 0, "max_bytes": 0, "cutoff_us": None}  # a batch of no task

# Recovery looks for batch ids past the newest one a listing shows until this many in a row have no
# object (a batch id skips ahead by a few at most: one is planned per offset request).
LOOKAHEAD = 32


class StateDirError(RuntimeError):
    """The stateDir belongs to another query, or can't be used."""


@dataclass
class Recovered:
    pending: dict[int, pa.Table] = field(default_factory=dict)  # batch id -> BATCH_SCHEMA table
    # (sub, message ids, seconds they remain remembered)
    remembered: list[tuple[str, list[str], float]] = field(default_factory=list)
    # (sub, [(message id, ack id)]): acknowledgements Pub/Sub never confirmed
    unconfirmed: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    newest_commit: int = -1  # the newest batch whose commit was recorded
    plans: dict[int, dict] = field(default_factory=dict)  # receiver=executors: batch id -> plan, uncommitted
    # Wall time until which messages an earlier process leased may still be leased, held by
    # nobody (0: none; inf: unknown, it crashed): until then an empty answer proves nothing.
    leased_until: float = 0.0


def _id(key: str) -> int | None:
    head = key.rsplit("/", 1)[1].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _batch(bid: int) -> str:
    return f"{ROOT}/batches/{bid:020d}.arrow"


def _plan(bid: int) -> str:
    return f"{ROOT}/plans/{bid:020d}.json"


def plan_key(bid: int) -> str:
    """Return the key of batch ``bid``'s plan (``receiver=executors``), which exists until Spark commits the batch."""
    return _plan(bid)


def _acked(bid: int) -> str:
    return f"{ROOT}/acked/{bid:020d}.arrow"


def _answered(bid: int, at: float) -> str:
    return f"{ROOT}/acked/{bid:020d}.answered.{int(at * 1000)}"


def _unconfirmed(bid: int, rows: int) -> str:
    return f"{ROOT}/acked/{bid:020d}.unconfirmed.{rows}.arrow"


@dataclass
class _Commit:
    """What ``acked/`` holds of one commit, from the names of its objects."""

    record: str | None = None
    answered: tuple[str, float] | None = None  # (key, acked_at)
    unconfirmed: tuple[str, int] | None = None  # (key, rows)


def _commits(keys: Sequence[str]) -> dict[int, _Commit]:
    out: dict[int, _Commit] = {}
    for key in keys:
        name = key.rsplit("/", 1)[1]
        head, _, rest = name.partition(".")
        if not head.isdigit():
            continue
        c = out.setdefault(int(head), _Commit())
        if rest == "arrow":
            c.record = key
        elif rest.startswith("answered.") and rest[9:].isdigit():
            c.answered = (key, int(rest[9:]) / 1000)
        elif rest.startswith("unconfirmed.") and rest.endswith(".arrow") and rest[12:-6].isdigit():
            c.unconfirmed = (key, int(rest[12:-6]))
    return out


class Ledger:
    """The durable record of one query's batches in its stateDir.

    ``_lock`` serialises the ledger's writes and its in-memory index of what it wrote; the
    planner writes from Spark's thread, acknowledgement answers arrive on the acker's. It is a
    leaf lock except for the lease's own (taken under it by every fenced write).
    """

    def __init__(
        self,
        state_dir: str | Storage,
        *,
        wait_seconds: float,
        window_seconds: float,
        unconfirmed_seconds: float,
        run: str | None = None,
        wall: Callable[[], float] = time.time,
        max_unconfirmed: int = 20_000_000,
    ) -> None:
        """Take the stateDir's lease, waiting up to ``wait_seconds`` for its holder to release it.

        ``run``: the query run Spark named in the call that opened the ledger, if it named one.
        A holder that is a stale reader of that same run (see :func:`.lifecycle.stale_sibling`)
        is ended once it has had :data:`TAKEOVER_AFTER_SECONDS` to end by itself.
        """
        self.storage = open_storage(state_dir) if isinstance(state_dir, str) else state_dir
        self._where = self.storage.description
        self._window = window_seconds
        self._unconfirmed = unconfirmed_seconds
        self._max_unconfirmed = max_unconfirmed
        self._wall = wall
        self._lock = threading.Lock()
        self._closed = False
        self._pending: set[str] = set()  # batches/ and plans/ keys of uncommitted batches
        self._newest_commit = -1
        self._pruned_at = 0.0
        self._lease = Lease(self.storage, f"{ROOT}/LOCK", ttl=LOCK_TTL_SECONDS, margin=LOCK_MARGIN_SECONDS)
        self._acquire(wait_seconds, run)
        self._lease.start_renewing()
        try:
            if self.storage.list("v2/") or self.storage.list("v1/"):
                log.warning(
                    "stateDir %s holds state of an older version (v1/v2) that this version does not read; "
                    "its pending batches will be delivered again by Pub/Sub",
                    self._where,
                )
        except Exception:  # noqa: BLE001 - only a warning depends on it
            pass

    # ---------------------------------------------------------------- the lease

    def _acquire(self, wait_seconds: float, run: str | None) -> None:
        t0 = time.monotonic()
        end = t0 + wait_seconds
        warned = False
        asked: tuple[int, float] | None = None  # (pid, when) of a stale holder asked to end
        while True:
            try:
                self._lease.acquire(0, gone=gone_from_this_host)
                return
            except LeaseHeld as exc:
                holder = exc.holder
            now = time.monotonic()
            if run is not None and now - t0 >= TAKEOVER_AFTER_SECONDS:
                asked = self._end_stale_holder(holder, run, asked, now)
            if now >= end:
                raise StateDirError(
                    f"stateDir {self._where} is in use by another running query{_describe_holder(holder)} (waited "
                    f"{wait_seconds:.0f} s for it to be released); each query needs its own stateDir"
                ) from None
            if not warned:
                warned = True
                log.info(
                    "stateDir %s is still held, probably by the previous run of this query that is "
                    "shutting down; waiting up to %.0f s",
                    self._where,
                    wait_seconds,
                )
            time.sleep(0.25)

    def _end_stale_holder(
        self, holder: dict, run: str, asked: tuple[int, float] | None, now: float
    ) -> tuple[int, float] | None:
        """End the holder if it is a reader of this driver serving ``run``.

        Its run has ended, its process did not (it missed or could not handle Spark's SIGTERM).
        Asked first, killed :data:`KILL_AFTER_SECONDS` later; every write it may be doing is atomic,
        so a kill leaves what a crash leaves.
        """
        pid = holder.get("pid") if holder.get("host") == socket.gethostname() else None
        meta = self._meta_or_none()
        if not isinstance(pid, int) or meta is None or meta.get("run") != run or not stale_sibling(pid):
            return asked
        if asked is None or asked[0] != pid:
            log.warning(
                "stateDir %s is still held by pid %d, a reader of this query run (%s) that Spark ended but "
                "that did not exit; asking it to end",
                self._where,
                pid,
                run,
            )
            end_process(pid, kill=False)
            return pid, now
        if now - asked[1] >= KILL_AFTER_SECONDS:
            log.warning(
                "pid %d did not end within %.0f s; killing it (the stateDir stays consistent, as after a crash)",
                pid,
                KILL_AFTER_SECONDS,
            )
            end_process(pid, kill=True)
            return pid, float("inf")  # asked once more only if another holder appears
        return asked

    def _meta_or_none(self) -> dict | None:
        try:
            return self.meta()
        except StateDirError:
            return None

    def close(self, *, leased_until: float | None = None) -> None:
        """Release the stateDir (no write happens after this).

        ``leased_until``: the wall time until which messages this process (or one before it) leased
        may still be leased (a hand-back that did not land, a Pull answered too late; ``inf``:
        unknown); the next process waits it out before it takes an empty answer as proof. ``None``:
        this process leased nothing; what the process before it left is passed on.
        """
        if leased_until is None:
            leased_until = self._predecessor_leases()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._lease.release(note={"leased_until": leased_until if leased_until != float("inf") else None})
        except Exception as exc:  # noqa: BLE001 - the lease expires anyway
            log.warning(
                "releasing the stateDir %s failed (%s); the next process takes it over when it expires",
                self._where,
                exc,
            )

    def holds(self) -> bool:
        """Return whether this process still holds the stateDir by its own clock (it may write).

        Once it does not, another run of the query may take the stateDir over, and it waits out
        only the leases this one could have renewed until then: a process that lives on (a runner
        that missed its SIGTERM) must stop renewing what it holds.
        """
        return self._lease.holds()

    def _predecessor_leases(self) -> float:
        """Return until when messages the previous holder (or one before it) leased may still be leased.

        Wall time; ``inf`` when unknown (it did not release the stateDir: it crashed or froze).
        """
        previous = self._lease.previous
        if previous is None:
            return 0.0
        if not previous.get("released"):
            return float("inf")
        until = previous.get("leased_until", 0.0)  # absent: released by a version that did not say
        return float("inf") if until is None else float(until)

    def _fenced(self, write: Callable[[], object]) -> object:
        """Run one write while holding the lease; a process that lost it must not write."""
        try:
            return write()
        except LeaseLost as exc:
            raise StateDirError(
                f"stateDir {self._where}: this process no longer holds it ({exc}); it stops writing, "
                "as another process may take the stateDir over"
            ) from None

    def _create(self, key: str, data: bytes) -> bool:
        return bool(self._fenced(lambda: self._lease.create(key, data)))

    # ---------------------------------------------------------------- identity

    def meta(self) -> dict | None:
        found = self.storage.read_versioned(f"{ROOT}/META.json")
        if found is None:
            return None
        try:
            return json.loads(found[0])
        except ValueError:
            raise StateDirError(
                f"stateDir {self._where}: META.json is unreadable; delete the stateDir to start over"
            ) from None

    def has_committed_history(self) -> bool:
        return self._newest_commit >= 0 or any(k.endswith(".arrow") for k in self.storage.list(f"{ROOT}/acked/"))

    def check_subscriptions(self, subscriptions: Sequence[str]) -> None:
        """Refuse a directory recorded for another subscription list."""
        meta = self.meta()
        subs = sorted(subscriptions)
        if meta is not None and meta.get("subscriptions") != subs:
            raise StateDirError(
                f"stateDir {self._where} belongs to a query reading subscription(s) "
                f"{', '.join(meta.get('subscriptions', []))}; this query reads {', '.join(subs)}. "
                "Give each query its own stateDir"
            )

    def claim(self, run: str | None, subscriptions: Sequence[str], *, fresh: bool = False) -> None:
        """Tie the directory to this query run and its subscriptions, or refuse with a clear error.

        ``fresh``: the run is new (a fresh checkpoint). A directory that holds another run's
        committed batches belongs to another query (another checkpoint): using it would
        acknowledge that query's batches as committed by this one. One that never saw a commit
        (a run that died before its first batch committed) is taken over; the caller plans its
        batches anew.
        """
        self.check_subscriptions(subscriptions)
        found = self.storage.read_versioned(f"{ROOT}/META.json")
        meta = self.meta() if found is not None else None
        recorded = meta.get("run") if meta is not None else None
        if meta is not None:
            if recorded == run or (run is None and not fresh):
                return  # this run's directory, or a checkpoint of an older version that names no run
            if self.has_committed_history():
                raise StateDirError(
                    f"stateDir {self._where} belongs to another query (run {recorded}"
                    + (
                        f"; this query's checkpoint names run {run}"
                        if run and not fresh
                        else "; this query starts from a new checkpoint"
                    )
                    + "): it holds that query's committed batches. Give each query (each checkpointLocation) its own "
                    "stateDir, or delete the directory if the other query is gone for good"
                )
        if run is None:
            return
        data = json.dumps({"format": FORMAT, "run": run, "subscriptions": sorted(subscriptions)}, indent=1).encode()
        expected = found[1] if found is not None else 0
        if self._fenced(lambda: self._lease.swap(f"{ROOT}/META.json", data, expected)) is None:
            raise StateDirError(f"stateDir {self._where}: META.json changed while this process held the stateDir")

    # ---------------------------------------------------------------- writing

    def record(self, batch_id: int, table: pa.Table) -> None:
        """Make a planned batch durable before its offset is handed to Spark."""
        key = _batch(batch_id)
        if not self._create(key, _ipc(table, BATCH_SCHEMA)):
            raise StateDirError(
                f"stateDir {self._where} already holds batch {batch_id} ({key}); it was not expected "
                "there: is another process writing to this stateDir?"
            )
        with self._lock:
            self._pending.add(key)

    def record_plan(self, batch_id: int, plan: dict) -> dict:
        """Record what batch ``batch_id``'s tasks are told, once.

        The plan an earlier process recorded for the same batch wins (its tasks may have recorded
        slices under it), and is returned.
        """
        key = _plan(batch_id)
        with self._lock:
            self._pending.add(key)
        if self._create(key, json.dumps(plan).encode()):
            return plan
        return self.read_plan(batch_id) or plan

    def plan_or_void(self, batch_id: int) -> dict:
        """Return the plan of ``batch_id`` (by exact name), recording an empty one in its place if there is none.

        For a batch Spark replays that this process did not recover: a plan that appears later (an
        earlier process's write that landed late) must never be acted on, so the empty plan
        (``parts`` 0: no task) takes its place, write-once.
        """
        found = self.read_plan(batch_id)
        if found is not None:
            return found
        with self._lock:
            self._pending.add(_plan(batch_id))
        if self._create(_plan(batch_id), json.dumps(VOID_PLAN).encode()):
            return dict(VOID_PLAN)
        return self.read_plan(batch_id) or dict(VOID_PLAN)

    def read_plan(self, batch_id: int) -> dict | None:
        data = self.storage.read(_plan(batch_id))
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise StateDirError(f"stateDir {self._where}: the plan of batch {batch_id} is unreadable") from None

    def void(self, batch_id: int) -> None:
        """Make batch ``batch_id`` empty for good: any record of it is replaced by an empty one.

        For a batch Spark replays that this process did not recover when it started: a record that
        appears later (an earlier process's write that landed late) must never be replayed or
        acknowledged by anyone, so an empty record takes its place (write-once: nothing can land
        there afterwards).
        """
        key = _batch(batch_id)
        self._fenced(lambda: self._lease.delete([key]))
        self._create(key, _ipc(BATCH_SCHEMA.empty_table(), BATCH_SCHEMA))
        with self._lock:
            self._pending.add(key)

    def drop(self, batch_ids: Sequence[int]) -> None:
        """Forget planned batches that Spark never recorded (their messages are planned anew)."""
        keys = [_batch(b) for b in batch_ids]
        self._fenced(lambda: self._lease.delete(keys))
        with self._lock:
            self._pending.difference_update(keys)

    def committed(self, batch_id: int, rows: Sequence[tuple[str, str, str]] | pa.Table) -> None:
        """Record that Spark committed every batch <= ``batch_id``.

        ``rows`` are their (sub, message id, ack id), as tuples or as a table of those three string
        columns.
        """
        if len(rows):
            self._create(_acked(batch_id), _ipc(_acked_table(rows, self._wall()), None))
        with self._lock:
            self._newest_commit = max(self._newest_commit, batch_id)
            done = [k for k in self._pending if int(k.rsplit("/", 1)[1].split(".")[0]) <= batch_id]
            self._pending.difference_update(done)
        if done:
            self._fenced(lambda: self._lease.delete(done))

    def answered(self, batch_id: int, unconfirmed: Sequence[tuple[str, str, str]]) -> None:
        """Pub/Sub answered every acknowledgement of ``batch_id``; ``unconfirmed`` were not proven."""
        with self._lock:
            if self._closed:
                return
        at = self._wall()
        try:
            if unconfirmed:
                self._create(_unconfirmed(batch_id, len(unconfirmed)), _ipc(_acked_table(unconfirmed, at), None))
            self._create(_answered(batch_id, at), b"")
        except StateDirError as exc:
            log.warning("%s: not recording the answers of batch %d", exc, batch_id)
            return
        if at - self._pruned_at >= PRUNE_EVERY_SECONDS:
            self._prune()

    def _prune(self) -> None:
        """Forget commit records past their window, and unconfirmed ones past theirs or past a cap.

        The newest commit record stays: it tells a new process what committed. The cap is
        ``max_unconfirmed`` unconfirmed rows in all.
        """
        now = self._pruned_at = self._wall()
        commits = _commits(self.storage.list(f"{ROOT}/acked/"))
        newest = max((b for b, c in commits.items() if c.record), default=None)
        doomed: list[str] = []
        unconfirmed: list[tuple[int, str, int]] = []
        for bid, c in sorted(commits.items()):
            if c.answered is None:
                continue  # its answers are still to come (or recovery records them)
            at = c.answered[1]
            past_window = bid != newest and at + self._window < now
            if past_window and c.record:
                doomed.append(c.record)
            unconfirmed_gone = c.unconfirmed is None or at + self._unconfirmed < now
            if c.unconfirmed is not None:
                if unconfirmed_gone:
                    doomed.append(c.unconfirmed[0])
                else:
                    unconfirmed.append((bid, *c.unconfirmed))
            if past_window and unconfirmed_gone:
                doomed.append(c.answered[0])
        total = sum(n for _, _, n in unconfirmed)
        for bid, key, n in unconfirmed:  # oldest first
            if total <= self._max_unconfirmed:
                break
            log.warning(
                "stateDir %s holds more than %d unconfirmed acknowledgements: forgetting the oldest (batch %d's)",
                self._where,
                self._max_unconfirmed,
                bid,
            )
            doomed.append(key)
            total -= n
        if doomed:
            try:
                self._fenced(lambda: self._lease.delete(doomed))
            except StateDirError as exc:
                log.warning("%s: not pruning", exc)

    # ---------------------------------------------------------------- reading

    def _keys(self) -> tuple[list[str], list[str], list[str]]:
        """Return the keys of ``acked/``, ``plans/`` and ``batches/``: listed, then looked for by exact name.

        A listing on a shared file system may be a snapshot a few seconds old (NFS attribute
        caching) and miss what an earlier process wrote last, which is what recovery needs most.
        Batch ids only grow, so what a stale listing misses lies past the newest id any folder
        shows (not the folder's own: a committed batch's objects are deleted, so ``batches/`` may
        show nothing at all): each id after it is looked for by name until :data:`LOOKAHEAD` ids
        in a row have nothing.
        """
        out = []
        newest = -1
        for folder, name in (("acked", _acked), ("plans", _plan), ("batches", _batch)):
            keys = self.storage.list(f"{ROOT}/{folder}/")
            newest = max([newest, *(i for i in map(_id, keys) if i is not None)])
            if self.storage.listing_may_lag:
                bid = newest + 1
                empty = 0
                while empty < LOOKAHEAD:
                    if self.storage.stat(name(bid)) is not None:
                        keys.append(name(bid))
                        newest, empty = bid, 0
                    else:
                        empty += 1
                    bid += 1
            out.append(keys)
        return out[0], out[1], out[2]

    def recover(self) -> Recovered:
        out = Recovered(leased_until=self._predecessor_leases())
        now = self._wall()
        acked_keys, plan_keys, batch_keys = self._keys()
        commits = _commits(acked_keys)
        newest_commit = max((b for b, c in commits.items() if c.record or c.unconfirmed), default=-1)
        for bid, c in sorted(commits.items()):
            if c.unconfirmed is not None:
                table = self._recovered_table(c.unconfirmed[0])
                if table is not None:
                    out.unconfirmed.extend(_by_sub(table, with_ack_ids=True))
            if c.record is None:
                continue
            table = self._recovered_table(c.record)
            if table is None:
                continue
            acked_at = float(table.schema.metadata[b"acked_at"])
            if c.answered is not None or c.unconfirmed is not None:
                # The unconfirmed record is written once every answer came, just before the
                # marker: with it, the rest of the commit is proven even if the marker is missing
                # (its process lost the stateDir between the two writes).
                for sub, mids in _by_sub(table, with_ack_ids=False):
                    out.remembered.append((sub, mids, acked_at + self._window - now))
                if c.answered is None:
                    self._create(_answered(bid, acked_at), b"")
            else:
                # The process ended before Pub/Sub answered: nothing of this commit is proven.
                # Record it as answered-unconfirmed so that it is kept, and later pruned, as such.
                out.unconfirmed.extend(_by_sub(table, with_ack_ids=True))
                self._create(_unconfirmed(bid, table.num_rows), _ipc(table, None))
                self._create(_answered(bid, acked_at), b"")
        out.newest_commit = self._newest_commit = newest_commit
        stale: list[str] = []
        for key in plan_keys:
            bid = int(key.rsplit("/", 1)[1].split(".")[0])
            if bid <= newest_commit:
                stale.append(key)
                continue
            data = self.storage.read(key)
            if data is None:
                continue  # deleted since the listing was made
            try:
                out.plans[bid] = json.loads(data)
                self._pending.add(key)
            except ValueError:
                log.error("stateDir object %s is unreadable: batch %d's plan is planned anew", key, bid)
                stale.append(key)
        for key in batch_keys:
            bid = int(key.rsplit("/", 1)[1].split(".")[0])
            if bid <= newest_commit:
                stale.append(key)  # its commit was recorded; the object outlived it
                continue
            try:
                table = _read_table(self.storage, key)
            except FileNotFoundError:
                continue  # deleted since the listing was made
            except Exception as exc:  # noqa: BLE001
                log.error(
                    "stateDir object %s is unreadable (%s): batch %d can't be replayed; Pub/Sub will deliver "
                    "its messages again",
                    key,
                    exc,
                    bid,
                )
                continue
            self._pending.add(key)
            if table.num_rows:
                out.pending[bid] = table
        if stale:
            self._fenced(lambda: self._lease.delete(stale))
        return out

    def _recovered_table(self, key: str) -> pa.Table | None:
        try:
            table = _read_table(self.storage, key)
            float(table.schema.metadata[b"acked_at"])
            return table
        except FileNotFoundError:
            return None  # pruned since the listing was made
        except Exception as exc:  # noqa: BLE001 - an unreadable object can't help dedupe
            log.error("stateDir object %s is unreadable (%s); its messages may be delivered again", key, exc)
            return None


def _ipc(table: pa.Table, schema: pa.Schema | None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema or table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_table(storage: Storage, key: str) -> pa.Table:
    source = storage.open_input(key)
    if source is None:  # deleted since it was listed; the callers log it as unreadable
        raise FileNotFoundError(f"stateDir object {key} is gone")
    with source:
        return pa.ipc.open_file(source).read_all()


def _acked_table(rows: Sequence[tuple[str, str, str]] | pa.Table, acked_at: float) -> pa.Table:
    """(sub, message id, ack id) rows, stamped with the wall time of their acknowledgement."""
    schema = ACKED_SCHEMA.with_metadata({"acked_at": repr(acked_at)})
    if isinstance(rows, pa.Table):
        return pa.Table.from_arrays(rows.columns, schema=schema)
    subs, mids, acks = (list(col) for col in zip(*rows))
    return pa.table(
        [pa.array(subs, pa.string()), pa.array(mids, pa.string()), pa.array(acks, pa.string())], schema=schema
    )


def _by_sub(table: pa.Table, *, with_ack_ids: bool) -> list:
    subs = table.column("sub").to_pylist()
    mids = table.column("message_id").to_pylist()
    acks = table.column("ack_id").to_pylist() if with_ack_ids else None
    grouped: dict[str, list] = {}
    for i, sub in enumerate(subs):
        grouped.setdefault(sub, []).append((mids[i], acks[i]) if acks is not None else mids[i])
    return list(grouped.items())


def _describe_holder(holder: dict) -> str:
    """`` (pid N on host H since T, state S: program)`` of the lease's holder, as far as it is known."""
    try:
        pid, host = int(holder["pid"]), str(holder["host"])
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["since"])))
    except (ValueError, KeyError, TypeError):
        return ""
    out = f" (pid {pid} on host {host} since {since}"
    if host == socket.gethostname():
        try:  # what that process is and what it is doing, e.g. "D (disk sleep)" or "S (sleeping)"
            status = Path(f"/proc/{pid}/status").read_text()
            state = next(
                (line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("State:")), "?"
            )
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            # The program and its module only: the rest of a command line may carry secrets.
            what = os.path.basename(argv[0]) + (f" -m {argv[2]}" if len(argv) > 2 and argv[1] == "-m" else "")
            out += f", state {state}: {what}"
        except OSError:
            out += ", no longer running here"
    return out + ")"
