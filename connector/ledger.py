"""Planned batches as Arrow, in memory and (with ``stateDir``) durably on disk.

The same Arrow layout carries a batch's messages to the executors (without ack ids) and into the
state directory (with them), so one pair of functions converts in both directions.

With a state directory the ledger gives the source exactly-once replay into idempotent sinks:

* ``record`` writes a batch (messages and ack ids) before ``latestOffset`` hands its offset to
  Spark, so a batch Spark planned can always be replayed with the same content;
* ``acknowledged`` swaps a batch's file for a small list of its message ids once acked, so a later
  Pub/Sub redelivery of those messages is recognised and dropped;
* ``recover`` reads both back in a new process.

Files are written to a temporary name, fsynced and renamed, so a crash leaves either the old or the
new file, never half of one. A lock file keeps two live queries from sharing one directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import pyarrow as pa

from .receiver import Received

log = logging.getLogger("crdb_pubsub.ledger")

_MESSAGE_FIELDS = [
    pa.field("data", pa.binary()),
    pa.field("message_id", pa.string()),
    pa.field("publish_us", pa.int64()),
    pa.field("attributes", pa.map_(pa.string(), pa.string())),
    pa.field("ordering_key", pa.string()),
]
MESSAGE_SCHEMA = pa.schema(_MESSAGE_FIELDS)
STATE_SCHEMA = pa.schema([pa.field("sub", pa.string()), pa.field("ack_ids", pa.list_(pa.string())), *_MESSAGE_FIELDS])
ACKED_SCHEMA = pa.schema([pa.field("sub", pa.string()), pa.field("message_id", pa.string())])


def messages_to_arrow(messages: Sequence[Received], *, with_ack_ids: bool = False) -> pa.RecordBatch:
    """Columns of ``messages`` (payload and Pub/Sub metadata; ack ids only for the state file)."""
    cols = [
        pa.array([m.data for m in messages], pa.binary()),
        pa.array([m.message_id for m in messages], pa.string()),
        pa.array([m.publish_us for m in messages], pa.int64()),
        pa.array([list(m.attributes.items()) if m.attributes else None for m in messages], pa.map_(pa.string(), pa.string())),
        pa.array([m.ordering_key for m in messages], pa.string()),
    ]
    if not with_ack_ids:
        return pa.RecordBatch.from_arrays(cols, schema=MESSAGE_SCHEMA)
    head = [
        pa.array([m.sub for m in messages], pa.string()),
        pa.array([m.ack_ids() for m in messages], pa.list_(pa.string())),
    ]
    return pa.RecordBatch.from_arrays(head + cols, schema=STATE_SCHEMA)


def arrow_to_messages(batch: pa.RecordBatch | pa.Table) -> list[Received]:
    """Inverse of ``messages_to_arrow(..., with_ack_ids=True)``."""
    subs = batch.column("sub").to_pylist()
    ack_ids = batch.column("ack_ids").to_pylist()
    data = batch.column("data").to_pylist()
    mids = batch.column("message_id").to_pylist()
    pub = batch.column("publish_us").to_pylist()
    attrs = batch.column("attributes").to_pylist()
    oks = batch.column("ordering_key").to_pylist()
    now = time.monotonic()
    out = []
    for i in range(len(mids)):
        ids = ack_ids[i] or [""]
        out.append(
            Received(subs[i], ids[0], mids[i], data[i], pub[i], dict(attrs[i]) if attrs[i] else None, oks[i] or "", now, ids[1:] or None)
        )
    return out


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()


@dataclass
class Recovered:
    """What a previous process left: batches planned but not known to be committed, acked ids."""

    pending: dict[int, list[Received]] = field(default_factory=dict)
    acknowledged: list[tuple[tuple[str, str], float]] = field(default_factory=list)  # (key, acked at, wall s)


class Ledger:
    """Durable record of planned batches under ``state_dir`` (a no-op without one)."""

    def __init__(self, state_dir: str | None, *, dedupe_window_seconds: float) -> None:
        self._window = dedupe_window_seconds
        self._dir = Path(state_dir) / "v1" if state_dir else None
        self._lock_fd: int | None = None
        if self._dir is not None:
            (self._dir / "batches").mkdir(parents=True, exist_ok=True)
            (self._dir / "acked").mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                self._lock_fd = None
                raise RuntimeError(
                    f"stateDir {state_dir} is in use by another running query; each query needs its own stateDir"
                ) from None

    @property
    def durable(self) -> bool:
        return self._dir is not None

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---------------------------------------------------------------- writing

    def record(self, batch_id: int, messages: Sequence[Received]) -> None:
        """Make a planned batch durable before its offset is handed to Spark."""
        if self._dir is None or not messages:
            return
        table = messages_to_arrow(messages, with_ack_ids=True)
        self._write(self._dir / "batches" / f"{batch_id:020d}.arrow", table)

    def acknowledged(self, batch_ids: Iterable[int], messages: Sequence[Received]) -> None:
        """Replace acked batches' files by the list of their message ids (for dedupe)."""
        if self._dir is None:
            return
        ids = list(batch_ids)
        if messages:
            table = pa.RecordBatch.from_arrays(
                [pa.array([m.sub for m in messages], pa.string()), pa.array([m.message_id for m in messages], pa.string())],
                schema=ACKED_SCHEMA.with_metadata({"acked_at": repr(time.time())}),
            )
            self._write(self._dir / "acked" / f"{max(ids):020d}.arrow", table)
        for bid in ids:
            try:
                (self._dir / "batches" / f"{bid:020d}.arrow").unlink()
            except FileNotFoundError:
                pass
        self._prune()

    def _write(self, path: Path, batch: pa.RecordBatch) -> None:
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            with pa.ipc.new_file(fh, batch.schema) as writer:
                writer.write_batch(batch)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _prune(self) -> None:
        assert self._dir is not None
        horizon = time.time() - self._window
        for path in sorted((self._dir / "acked").glob("*.arrow")):
            try:
                acked_at = float(pa.ipc.open_file(path).schema.metadata[b"acked_at"])
            except Exception:  # noqa: BLE001 - an unreadable leftover is of no use for dedupe
                acked_at = 0.0
            if acked_at >= horizon:
                break
            path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- reading

    def recover(self) -> Recovered:
        out = Recovered()
        if self._dir is None:
            return out
        for path in sorted((self._dir / "batches").glob("*.arrow")):
            try:
                out.pending[int(path.stem)] = arrow_to_messages(pa.ipc.open_file(path).read_all())
            except Exception as exc:  # noqa: BLE001
                log.error("state file %s is unreadable (%s): that batch can't be replayed; Pub/Sub will redeliver it", path, exc)
        horizon = time.time() - self._window
        for path in sorted((self._dir / "acked").glob("*.arrow")):
            try:
                table = pa.ipc.open_file(path).read_all()
                acked_at = float(table.schema.metadata[b"acked_at"])
            except Exception:  # noqa: BLE001
                continue
            if acked_at < horizon:
                continue
            for sub, mid in zip(table.column("sub").to_pylist(), table.column("message_id").to_pylist()):
                out.acknowledged.append(((sub, mid), acked_at))
        for tmp in list((self._dir / "batches").glob("*.tmp")) + list((self._dir / "acked").glob("*.tmp")):
            tmp.unlink(missing_ok=True)
        return out
