"""``stateDir``: what this query planned and acknowledged, durably, for exactly-once replay.

Layout (``<stateDir>/v2``)::

    LOCK                      flock: one live process per stateDir
    META.json                 the query run and subscriptions this directory belongs to
    batches/<N>.arrow         receiver=driver: batch N as planned, messages and ack ids, written
                              before Spark learns its offset, so that Spark's replay of N yields
                              the same rows
    plans/<N>.json            receiver=executors: what batch N's tasks were told (partitions,
                              limits, cutoff), written once before Spark learns its offset; the
                              slices the tasks record are the batch's content
    acked/<X>.arrow           the messages of every batch <= X, written when Spark's commit of X
                              was proven; its ``answered`` marker follows once Pub/Sub answered
    acked/<X>.answered        all acknowledgements of X were answered (acked_at in the file)
    acked/<X>.unconfirmed.arrow  those Pub/Sub did not confirm, with their ack ids

What a new process learns from it (:meth:`Ledger.recover`): batches planned but not known to be
committed (replayed if Spark asks; a driver-mode batch Spark never saw returns to the buffer, an
executors-mode plan is reused for the batch of the same number); message ids to drop
when Pub/Sub delivers them again (for the dedupe window after a confirmed acknowledgement, far
longer after an unconfirmed one); and acknowledgements to send again.

Every file is written to a temporary name, fsynced and renamed (and the directory fsynced), so a
crash leaves the old or the new file, never half of one. Writes and the lock are guarded by one
thread lock: the planner writes from Spark's thread, acknowledgement answers arrive on the acker's.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa

from ..lifecycle import end_process, stale_sibling
from ..wire import MESSAGE_SCHEMA

log = logging.getLogger("crdb_pubsub.ledger")

FORMAT = 2
BATCH_SCHEMA = pa.schema([pa.field("sub", pa.string()), pa.field("ack_id", pa.string()), *MESSAGE_SCHEMA])
ACKED_SCHEMA = pa.schema([pa.field("sub", pa.string()), pa.field("message_id", pa.string()), pa.field("ack_id", pa.string())])


# A reader that Spark terminated hands back within 6 s (datasource.HAND_BACK_SECONDS + 1) and is
# ended by the kernel 2 s later at the latest (lifecycle.KILL_MARGIN_SECONDS): by then a holder
# still there did not get or could not handle Spark's SIGTERM.
TAKEOVER_AFTER_SECONDS = 8.0
KILL_AFTER_SECONDS = 5.0


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


class Ledger:
    """The durable record of one query's batches under ``<stateDir>/v2``."""

    def __init__(self, state_dir: str, *, wait_seconds: float, window_seconds: float, unconfirmed_seconds: float,
                 run: str | None = None, wall: Callable[[], float] = time.time,
                 max_unconfirmed: int = 20_000_000) -> None:
        """Take the directory, waiting up to ``wait_seconds`` for its holder to release it.

        ``run``: the query run Spark named in the call that opened the ledger, if it named one.
        A holder that is a stale reader of that same run (see :func:`.lifecycle.stale_sibling`)
        is ended once it has had :data:`TAKEOVER_AFTER_SECONDS` to end by itself.
        """
        self._root = Path(state_dir)
        self._dir = self._root / "v2"
        self._window = window_seconds
        self._unconfirmed = unconfirmed_seconds
        self._max_unconfirmed = max_unconfirmed
        self._unconfirmed_rows: dict[str, int] = {}  # file name -> rows, of the unconfirmed files on disk
        self._wall = wall
        self._lock = threading.Lock()
        for sub in ("batches", "plans", "acked"):
            (self._dir / sub).mkdir(parents=True, exist_ok=True)
        self._fd: int | None = self._acquire(wait_seconds, run)
        if (self._root / "v1").exists():
            log.warning("stateDir %s holds state of an older version (v1) that this version does not read; "
                        "its pending batches will be delivered again by Pub/Sub", state_dir)

    def _acquire(self, wait_seconds: float, run: str | None) -> int:
        fd = os.open(self._dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        t0 = time.monotonic()
        end = t0 + wait_seconds
        warned = False
        asked: tuple[int, float] | None = None  # (pid, when) of a stale holder asked to end
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _write_holder(fd)
                return fd
            except BlockingIOError:
                now = time.monotonic()
                if run is not None and now - t0 >= TAKEOVER_AFTER_SECONDS:
                    asked = self._end_stale_holder(fd, run, asked, now)
                if now >= end:
                    holder = _describe_holder(fd)
                    os.close(fd)
                    raise StateDirError(
                        f"stateDir {self._root} is in use by another running query{holder} (waited "
                        f"{wait_seconds:.0f} s for it to be released); each query needs its own stateDir") from None
                if not warned:
                    warned = True
                    log.info("stateDir %s is still held, probably by the previous run of this query that is "
                             "shutting down; waiting up to %.0f s", self._root, wait_seconds)
                time.sleep(0.1)

    def _end_stale_holder(self, fd: int, run: str, asked: tuple[int, float] | None,
                          now: float) -> tuple[int, float] | None:
        """End the holder if it is a reader of this driver serving ``run``: its run has ended, its
        process did not (it missed or could not handle Spark's SIGTERM). Asked first, killed
        :data:`KILL_AFTER_SECONDS` later; every write it may be doing is atomic, so a kill leaves
        what a crash leaves."""
        pid = _holder_pid(fd)
        meta = self._meta_or_none()
        if pid is None or meta is None or meta.get("run") != run or not stale_sibling(pid):
            return asked
        if asked is None or asked[0] != pid:
            log.warning("stateDir %s is still held by pid %d, a reader of this query run (%s) that Spark ended but "
                        "that did not exit; asking it to end", self._root, pid, run)
            end_process(pid, kill=False)
            return pid, now
        if now - asked[1] >= KILL_AFTER_SECONDS:
            log.warning("pid %d did not end within %.0f s; killing it (the stateDir stays consistent, as after a "
                        "crash)", pid, KILL_AFTER_SECONDS)
            end_process(pid, kill=True)
            return pid, float("inf")  # asked once more only if another holder appears
        return asked

    def _meta_or_none(self) -> dict | None:
        try:
            return self.meta()
        except StateDirError:
            return None

    def close(self) -> None:
        """Release the directory (no write happens after this)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # ---------------------------------------------------------------- identity

    def meta(self) -> dict | None:
        try:
            return json.loads((self._dir / "META.json").read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            raise StateDirError(f"stateDir {self._root}: META.json is unreadable; delete the directory to start over") from None

    def has_committed_history(self) -> bool:
        return any((self._dir / "acked").glob("*.arrow"))

    def check_subscriptions(self, subscriptions: Sequence[str]) -> None:
        """Refuse a directory recorded for another subscription list."""
        meta = self.meta()
        subs = sorted(subscriptions)
        if meta is not None and meta.get("subscriptions") != subs:
            raise StateDirError(
                f"stateDir {self._root} belongs to a query reading subscription(s) "
                f"{', '.join(meta.get('subscriptions', []))}; this query reads {', '.join(subs)}. "
                "Give each query its own stateDir")

    def claim(self, run: str | None, subscriptions: Sequence[str], *, fresh: bool = False) -> None:
        """Tie the directory to this query run and its subscriptions, or refuse with a clear error.

        ``fresh``: the run is new (a fresh checkpoint). A directory that holds another run's
        committed batches belongs to another query (another checkpoint): using it would
        acknowledge that query's batches as committed by this one. One that never saw a commit
        (a run that died before its first batch committed) is taken over; the caller plans its
        batches anew.
        """
        self.check_subscriptions(subscriptions)
        meta = self.meta()
        recorded = meta.get("run") if meta is not None else None
        if meta is not None:
            if recorded == run or (run is None and not fresh):
                return  # this run's directory, or a checkpoint of an older version that names no run
            if self.has_committed_history():
                raise StateDirError(
                    f"stateDir {self._root} belongs to another query (run {recorded}"
                    + (f"; this query's checkpoint names run {run}" if run and not fresh else "; this query starts from a new checkpoint")
                    + "): it holds that query's committed batches. Give each query (each checkpointLocation) its own "
                    "stateDir, or delete the directory if the other query is gone for good")
        if run is None:
            return
        self._write_bytes(self._dir / "META.json",
                          json.dumps({"format": FORMAT, "run": run, "subscriptions": sorted(subscriptions)}, indent=1).encode())

    # ---------------------------------------------------------------- writing

    def record(self, batch_id: int, table: pa.Table) -> None:
        """Make a planned batch durable before its offset is handed to Spark."""
        self._write_table(self._dir / "batches" / f"{batch_id:020d}.arrow", table, BATCH_SCHEMA)

    def record_plan(self, batch_id: int, plan: dict) -> dict:
        """Record what batch ``batch_id``'s tasks are told, once: the plan an earlier process
        recorded for the same batch wins (its tasks may have recorded slices under it), and is
        returned."""
        path = self._dir / "plans" / f"{batch_id:020d}.json"
        with self._lock:
            if self._fd is None:
                raise StateDirError(f"stateDir {self._root} was released: batch {batch_id} can't be planned")
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(plan).encode())
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return self.read_plan(batch_id) or plan
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(path.parent)
        return plan

    def read_plan(self, batch_id: int) -> dict | None:
        try:
            return json.loads((self._dir / "plans" / f"{batch_id:020d}.json").read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            raise StateDirError(f"stateDir {self._root}: the plan of batch {batch_id} is unreadable") from None

    def drop(self, batch_ids: Sequence[int]) -> None:
        """Forget planned batches that Spark never recorded (their messages are planned anew)."""
        with self._lock:
            if self._fd is None:
                return
            for bid in batch_ids:
                (self._dir / "batches" / f"{bid:020d}.arrow").unlink(missing_ok=True)

    def committed(self, batch_id: int, rows: "Sequence[tuple[str, str, str]] | pa.Table") -> None:
        """Spark committed every batch <= ``batch_id``: ``rows`` are their (sub, message id, ack id),
        as tuples or as a table of those three string columns."""
        if len(rows):
            self._write_acked(self._dir / "acked" / f"{batch_id:020d}.arrow", rows)
        with self._lock:
            if self._fd is None:
                return
            for p in [*(self._dir / "batches").glob("*.arrow"), *(self._dir / "plans").glob("*.json")]:
                if int(p.stem) <= batch_id:
                    p.unlink(missing_ok=True)

    def _write_acked(self, path: Path, rows: "Sequence[tuple[str, str, str]] | pa.Table") -> None:
        """(sub, message id, ack id) rows, stamped with the wall time of their acknowledgement."""
        schema = ACKED_SCHEMA.with_metadata({"acked_at": repr(self._wall())})
        if isinstance(rows, pa.Table):
            table = pa.Table.from_arrays(rows.columns, schema=schema)
        else:
            subs, mids, acks = (list(col) for col in zip(*rows))
            table = pa.table([pa.array(subs, pa.string()), pa.array(mids, pa.string()),
                              pa.array(acks, pa.string())], schema=schema)
        self._write_table(path, table, table.schema)

    def answered(self, batch_id: int, unconfirmed: Sequence[tuple[str, str, str]]) -> None:
        """Pub/Sub answered every acknowledgement of ``batch_id``; ``unconfirmed`` were not confirmed."""
        if unconfirmed:
            name = f"{batch_id:020d}.unconfirmed.arrow"
            self._write_acked(self._dir / "acked" / name, unconfirmed)
            self._unconfirmed_rows[name] = len(unconfirmed)
        self._write_bytes(self._dir / "acked" / f"{batch_id:020d}.answered", repr(self._wall()).encode())
        self._prune()

    def _write_table(self, path: Path, table: pa.Table, schema: pa.Schema) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with self._lock:
            if self._fd is None:
                log.warning("stateDir closed: not writing %s", path.name)
                return
            with open(tmp, "wb") as fh:
                with pa.ipc.new_file(fh, schema) as writer:
                    writer.write_table(table)
                fh.flush()
                os.fsync(fh.fileno())
            self._publish(tmp, path)

    def _write_bytes(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with self._lock:
            if self._fd is None:
                return
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            self._publish(tmp, path)

    @staticmethod
    def _publish(tmp: Path, path: Path) -> None:
        os.replace(tmp, path)
        _fsync_dir(path.parent)

    def _prune(self) -> None:
        now = self._wall()
        with self._lock:
            if self._fd is None:
                return
            markers = sorted((self._dir / "acked").glob("*.answered"))
            # The newest commit record stays whatever its age: it tells a new process what committed.
            for marker in markers[:-1]:
                stem = marker.name.split(".")[0]
                try:
                    at = float(marker.read_text())
                except (OSError, ValueError):
                    continue
                if at + self._window >= now:
                    break  # markers are written in commit order: the rest are younger
                unconfirmed = self._dir / "acked" / f"{stem}.unconfirmed.arrow"
                if unconfirmed.exists() and at + self._unconfirmed >= now:
                    # The confirmed ids' window is over; the unconfirmed ones stay remembered.
                    (self._dir / "acked" / f"{stem}.arrow").unlink(missing_ok=True)
                    continue
                unconfirmed.unlink(missing_ok=True)
                (self._dir / "acked" / f"{stem}.arrow").unlink(missing_ok=True)
                marker.unlink(missing_ok=True)
            self._bound_unconfirmed()

    def _bound_unconfirmed(self) -> None:
        """Unconfirmed acknowledgements on disk stay within ``max_unconfirmed`` rows: past it the
        oldest are forgotten (their messages are read again if Pub/Sub delivers them again)."""
        rows = self._unconfirmed_rows
        for name in [n for n in rows if not (self._dir / "acked" / n).exists()]:
            del rows[name]
        total = sum(rows.values())
        for name in sorted(rows):
            if total <= self._max_unconfirmed:
                break
            log.warning("stateDir %s holds more than %d unconfirmed acknowledgements: forgetting the oldest (%s)",
                        self._root, self._max_unconfirmed, name)
            (self._dir / "acked" / name).unlink(missing_ok=True)
            total -= rows.pop(name)

    # ---------------------------------------------------------------- reading

    def recover(self) -> Recovered:
        out = Recovered()
        now = self._wall()
        acked_dir = self._dir / "acked"
        for tmp in list((self._dir / "batches").glob("*.tmp")) + list(acked_dir.glob("*.tmp")):
            tmp.unlink(missing_ok=True)
        newest_commit = -1
        for path in sorted(acked_dir.glob("*.arrow")):
            stem = path.name.split(".")[0]
            newest_commit = max(newest_commit, int(stem))
            try:
                table = pa.ipc.open_file(path).read_all()
                acked_at = float(table.schema.metadata[b"acked_at"])
            except Exception as exc:  # noqa: BLE001 - an unreadable file can't help dedupe
                log.error("stateDir file %s is unreadable (%s); its messages may be delivered again", path, exc)
                continue
            if path.name.endswith(".unconfirmed.arrow"):
                out.unconfirmed.extend(_by_sub(table, with_ack_ids=True))
                self._unconfirmed_rows[path.name] = table.num_rows
            elif (acked_dir / f"{stem}.answered").exists():
                for sub, mids in _by_sub(table, with_ack_ids=False):
                    out.remembered.append((sub, mids, acked_at + self._window - now))
            else:
                # The process ended before Pub/Sub answered: nothing of this commit is confirmed.
                # Record it as answered-unconfirmed so that it is kept, and later pruned, as such.
                out.unconfirmed.extend(_by_sub(table, with_ack_ids=True))
                self._write_table(acked_dir / f"{stem}.unconfirmed.arrow", table, table.schema)
                self._unconfirmed_rows[f"{stem}.unconfirmed.arrow"] = table.num_rows
                self._write_bytes(acked_dir / f"{stem}.answered", repr(acked_at).encode())
        out.newest_commit = newest_commit
        for path in sorted((self._dir / "plans").glob("*.json")):
            bid = int(path.stem)
            if bid <= newest_commit:
                path.unlink(missing_ok=True)
                continue
            try:
                out.plans[bid] = json.loads(path.read_bytes())
            except ValueError:
                log.error("stateDir file %s is unreadable: batch %d's plan is planned anew", path, bid)
                path.unlink(missing_ok=True)
        for path in sorted((self._dir / "batches").glob("*.arrow")):
            bid = int(path.stem)
            if bid <= newest_commit:
                path.unlink(missing_ok=True)  # its commit was recorded; the file outlived it
                continue
            try:
                out.pending[bid] = pa.ipc.open_file(path).read_all()
            except Exception as exc:  # noqa: BLE001
                log.error("stateDir file %s is unreadable (%s): batch %d can't be replayed; Pub/Sub will deliver "
                          "its messages again", path, exc, bid)
        return out


def _by_sub(table: pa.Table, *, with_ack_ids: bool) -> list:
    subs = table.column("sub").to_pylist()
    mids = table.column("message_id").to_pylist()
    acks = table.column("ack_id").to_pylist() if with_ack_ids else None
    grouped: dict[str, list] = {}
    for i, sub in enumerate(subs):
        grouped.setdefault(sub, []).append((mids[i], acks[i]) if acks is not None else mids[i])
    return list(grouped.items())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_holder(fd: int) -> None:
    # Who holds the lock, for the message of a process that is refused it: the lock itself is the
    # flock, this text only names its holder (it may be stale, never trusted for anything else).
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def _read_holder(fd: int) -> dict:
    """What the lock's holder wrote of itself (``{}`` when nothing readable)."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _holder_pid(fd: int) -> int | None:
    """The pid the lock's holder wrote of itself, if it runs on this host."""
    holder = _read_holder(fd)
    pid = holder.get("pid")
    return pid if isinstance(pid, int) and holder.get("host") == socket.gethostname() else None


def _describe_holder(fd: int) -> str:
    """`` (pid N on host H since T, state S: program)`` of the lock's holder, as far as it is known."""
    holder = _read_holder(fd)
    try:
        pid, host = int(holder["pid"]), str(holder["host"])
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["since"])))
    except (ValueError, KeyError, TypeError):
        return ""
    out = f" (pid {pid} on host {host} since {since}"
    if host == socket.gethostname():
        try:  # what that process is and what it is doing, e.g. "D (disk sleep)" or "S (sleeping)"
            status = Path(f"/proc/{pid}/status").read_text()
            state = next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("State:")), "?")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            # The program and its module only: the rest of a command line may carry secrets.
            what = os.path.basename(argv[0]) + (f" -m {argv[2]}" if len(argv) > 2 and argv[1] == "-m" else "")
            out += f", state {state}: {what}"
        except OSError:
            out += ", no longer running here"
    return out + ")"
