"""Where slices live: ``<stateDir>/v2/slices/<batch>/<partition>.arrow``.

A slice is an Arrow IPC file with :data:`SLICE_SCHEMA` (the messages a task pulled, the
subscription and ack id of each, and whether the row is yielded) and metadata saying how the
pull ended. It is written to a name of its own attempt, fsynced, then *linked* to its final name:
``link`` fails when the name exists, so of two attempts (a speculative copy, or a retry racing a
task presumed dead) exactly one publishes, and a task killed mid-write leaves only a temporary
file that nothing trusts. A claim (``flock`` on ``<partition>.claim``) keeps a second attempt from
pulling at all while the first is alive; the kernel releases it when the holder dies.

The driver reads only the small columns (``sub``, ``message_id``, ``ack_id``, ``keep``) of a
memory-mapped file, and the metadata, to lease and acknowledge.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from ..ledger import BATCH_SCHEMA

SLICE_SCHEMA = pa.schema([*BATCH_SCHEMA, pa.field("keep", pa.bool_())])
ACK_COLUMNS = ("sub", "message_id", "ack_id", "keep")


@dataclass(frozen=True)
class SliceInfo:
    """How a task's pull ended, from a slice's metadata."""

    rows: int  # every row, yielded or not
    kept: int  # rows yielded (the others are redeliveries of messages already delivered)
    drained: bool  # a Pull came back with nothing (nothing older than the cutoff in AvailableNow)
    oldest_us: int | None  # the oldest publish time of the kept rows
    pulled_at: float  # wall time of the first Pull
    handed_back: int  # messages the task handed back (published after the AvailableNow cutoff)

    def metadata(self) -> dict[bytes, bytes]:
        return {b"crdb_pubsub_slice": json.dumps(self.__dict__).encode()}

    @classmethod
    def of(cls, schema: pa.Schema) -> "SliceInfo":
        return cls(**json.loads((schema.metadata or {})[b"crdb_pubsub_slice"]))


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

    # ---------------------------------------------------------------- driver

    def batches(self) -> list[int]:
        """Batch ids that have a slice directory."""
        if not self.root.exists():
            return []
        return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())

    def slices(self, batch_id: int) -> Iterator[tuple[int, Path]]:
        d = self._batch_dir(batch_id)
        if not d.exists():
            return
        for p in sorted(d.glob("*.arrow")):
            yield int(p.stem), p

    @staticmethod
    def read_acks(path: Path) -> tuple[pa.Table, SliceInfo]:
        """The small columns of a slice (memory-mapped: the bodies are not read) and its metadata."""
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_file(source)
            table = reader.read_all().select(list(ACK_COLUMNS))
            return table, SliceInfo.of(reader.schema)

    def drop(self, upto: int) -> None:
        """Forget the slices of every batch ``<= upto`` (acknowledged, or never to be replayed)."""
        for bid in self.batches():
            if bid <= upto:
                shutil.rmtree(self._batch_dir(bid), ignore_errors=True)

    def write_plan(self, batch_id: int, plan: dict) -> None:
        """What the driver decided for a batch (limits, cutoff), for a later process's replay."""
        d = self._batch_dir(batch_id)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / "PLAN.json.tmp"
        tmp.write_text(json.dumps(plan))
        os.replace(tmp, d / "PLAN.json")

    def read_plan(self, batch_id: int) -> dict | None:
        try:
            return json.loads((self._batch_dir(batch_id) / "PLAN.json").read_text())
        except (FileNotFoundError, ValueError):
            return None


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
