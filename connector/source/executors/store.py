"""Where slices live: ``<stateDir>/v2/slices/<batch>/<partition>.arrow``.

A slice is an Arrow IPC file with :data:`SLICE_SCHEMA` (the messages a task pulled, the
subscription and ack id of each, and its :data:`role`) and metadata saying how the pull ended
(:class:`SliceInfo`). It is written to a name of its own attempt, fsynced, then *linked* to its
final name: ``link`` fails when the name exists, so of two attempts (a speculative copy, or a
retry racing a task presumed dead) exactly one publishes, and a task killed mid-write leaves only
a temporary file that nothing trusts. A claim keeps a second attempt from pulling at all while
the first is alive.

Every reader opens a slice by its exact name: the driver knows from a batch's plan how many slices
it has, and a shared file system's client may not list a file another host created a moment ago
(NFS attribute caching). Listing is used only to find slices early for leasing, best effort.
The driver reads only the small columns (``sub``, ``message_id``, ``ack_id``, ``role``) of a
memory-mapped file, and the metadata.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from ..state.ledger import BATCH_SCHEMA

# What a task does with each row of its slice.
KEEP = 0  # yielded; acknowledged when the batch commits
REDELIVERY = 1  # a message yielded elsewhere (another batch or slice): acknowledged, not yielded
LATER = 2  # AvailableNow: published after the cutoff; not yielded, handed back when the run ends

SLICE_SCHEMA = pa.schema([*BATCH_SCHEMA, pa.field("role", pa.int8())])
ACK_COLUMNS = ("sub", "message_id", "ack_id", "role")


@dataclass(frozen=True)
class SubscriptionPull:
    """How one task's pull of one subscription ended: the evidence of a drained subscription."""

    last: str = "none"  # the last answer: "empty", "later" (nothing before the cutoff), "messages", "none"
    last_sent: float = 0.0  # wall time the Pull of that answer was sent
    shadow_until: float = 0.0  # wall time until which a timed-out or failed Pull may have leased messages
    unavailable: bool = False  # Pub/Sub could not be reached at the end
    kept: int = 0  # rows this task yields from the subscription


@dataclass(frozen=True)
class SliceInfo:
    """How a task's pull ended, from a slice's metadata."""

    rows: int  # every row, whatever its role
    kept: int  # rows yielded
    oldest_us: int | None  # the oldest publish time of the kept rows
    pulled_at: float  # wall time of the first Pull
    proven_until: float  # wall time until which every recorded row's lease was proven alive
    handed_back: int  # messages handed back instead of recorded (their lease was not proven)
    subs: dict[str, SubscriptionPull] = field(default_factory=dict)
    pull_errors: int = 0  # Pulls that failed (retried within the task's time)

    def metadata(self) -> dict[bytes, bytes]:
        return {b"crdb_pubsub_slice": json.dumps(asdict(self)).encode()}

    @classmethod
    def of(cls, schema: pa.Schema) -> "SliceInfo":
        raw = json.loads((schema.metadata or {})[b"crdb_pubsub_slice"])
        raw["subs"] = {s: SubscriptionPull(**v) for s, v in raw.get("subs", {}).items()}
        return cls(**raw)


class SliceStore:
    """The slices under one stateDir (used by the driver and by every task)."""

    def __init__(self, state_dir: str) -> None:
        self.root = Path(state_dir) / "v2" / "slices"

    def _batch_dir(self, batch_id: int) -> Path:
        return self.root / f"{batch_id:020d}"

    def path(self, batch_id: int, partition: int) -> Path:
        return self._batch_dir(batch_id) / f"{partition:05d}.arrow"

    # ---------------------------------------------------------------- tasks

    def claim(self, batch_id: int, partition: int, *, wait: float) -> "Claim | None":
        """Hold the right to pull for ``(batch, partition)``; ``None`` if another live attempt still
        holds it after ``wait`` seconds."""
        d = self._batch_dir(batch_id)
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / f"{partition:05d}.claim", os.O_RDWR | os.O_CREAT, 0o600)
        end = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return Claim(fd)
            except BlockingIOError:
                if time.monotonic() >= end:
                    os.close(fd)
                    return None
                time.sleep(0.05)

    def publish(self, batch_id: int, partition: int, table: pa.Table, info: SliceInfo) -> bool:
        """Write the slice durably; False when another attempt's slice is already there."""
        final = self.path(batch_id, partition)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"{final.stem}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "wb") as fh:
                with pa.ipc.new_file(fh, SLICE_SCHEMA.with_metadata(info.metadata())) as writer:
                    writer.write_table(table.cast(SLICE_SCHEMA) if table.schema != SLICE_SCHEMA else table)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
            _fsync_dir(final.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def read(self, batch_id: int, partition: int) -> pa.Table | None:
        """The recorded slice (every column), or ``None`` if none was published."""
        try:
            with pa.memory_map(str(self.path(batch_id, partition))) as source:
                return pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            return None

    def read_acks(self, batch_id: int, partition: int) -> tuple[pa.Table, SliceInfo] | None:
        """The small columns of a slice (memory-mapped: the bodies are not read) and its metadata;
        ``None`` if none was published."""
        try:
            with pa.memory_map(str(self.path(batch_id, partition))) as source:
                reader = pa.ipc.open_file(source)
                table = reader.read_all().select(list(ACK_COLUMNS))
                return table, SliceInfo.of(reader.schema)
        except FileNotFoundError:
            return None

    # ---------------------------------------------------------------- driver

    def listed(self, batch_id: int) -> list[int]:
        """Partitions whose slice a directory listing shows now (best effort: see the module)."""
        d = self._batch_dir(batch_id)
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return []
        return sorted(int(n[:-6]) for n in names if n.endswith(".arrow") and n[:-6].isdigit())

    def drop(self, upto: int) -> None:
        """Forget the slices of every batch ``<= upto`` (acknowledged, or never to be replayed)."""
        if not self.root.exists():
            return
        for p in self.root.iterdir():
            if p.name.isdigit() and int(p.name) <= upto:
                shutil.rmtree(p, ignore_errors=True)


class Claim:
    """A held flock; released by :meth:`release` or by the holder's death."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
