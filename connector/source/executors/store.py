"""Where slices live: ``<stateDir>/v3/slices/<batch>/<partition>.arrow``, in the stateDir's storage.

A slice is an Arrow IPC file with :data:`SLICE_SCHEMA` (the messages a task pulled, the
subscription and ack id of each, and its role) and metadata saying how the pull ended
(:class:`SliceInfo`). It is written once (:meth:`~..storage.Storage.create`: a POSIX ``link``, a
Cloud Storage ``ifGenerationMatch=0``), so of two attempts (a speculative copy, or a retry racing
a task presumed dead) exactly one publishes, and a task killed mid-write leaves nothing readable.
A claim (a lease with an expiry, ``<partition>.claim``) keeps a second attempt from pulling while
the first is alive; an attempt whose executor died is taken over once its claim expired, and its
late write, if it wakes, is refused (the claim fences it).

The batch's *register* (``<batch>/register.json``, one compare-and-swap object) lists the slices in
the order their tasks registered them; a task registers its slice after writing it and before it
yields a row. It is what says which tasks ran: a slice that is not registered yielded nothing (its
task died first, or Spark never needed it), so the driver neither acknowledges it nor waits for it.
Its order settles a message that two tasks of the batch pulled (Pub/Sub may deliver a message again
while it is leased): the task registered first yields it, the others do not, at every replay alike.

Every reader opens a slice by its exact name (a shared file system's client may not list a file
another host created a moment ago: NFS attribute caching). Listing is used only to find slices
early for leasing, best effort. The driver reads only the small columns (``sub``, ``message_id``,
``ack_id``, ``role``) and the metadata: from a memory map on POSIX, by ranged reads on Cloud Storage.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from ..lifecycle import gone_from_this_host
from ..state.ledger import BATCH_SCHEMA, ROOT, plan_key
from ..storage import Storage
from ..storage.lease import Lease, LeaseHeld

# What a task does with each row of its slice.
KEEP = 0  # yielded; acknowledged when the batch commits
REDELIVERY = 1  # a message yielded elsewhere (another batch or slice): acknowledged, not yielded
LATER = 2  # AvailableNow: published after the cutoff; not yielded, handed back when the run ends

SLICE_SCHEMA = pa.schema([*BATCH_SCHEMA, pa.field("role", pa.int8())])
ACK_COLUMNS = ("sub", "message_id", "ack_id", "role")
_ACK_FIELDS = [SLICE_SCHEMA.get_field_index(name) for name in ACK_COLUMNS]

# A claim lasts this long past its holder's last renewal (renewed every third of it while the
# task pulls and records); another attempt takes it over that plus the margin after.
CLAIM_TTL_SECONDS = 10.0
CLAIM_MARGIN_SECONDS = 2.0


class SliceConflict(RuntimeError):
    """Another attempt of the same task still holds its claim."""


@dataclass(frozen=True)
class SubscriptionPull:
    """How one task's pull of one subscription ended: its part of the evidence of a drained subscription.

    See :mod:`..pubsub.drained`; ``last_sent`` is wall time, ``last_oldest_us`` the oldest publish
    time the last answer brought (``None``: nothing, or no answer at all when ``answered`` is false).
    """

    answered: bool = False  # some Pull of it was answered
    last_sent: float = 0.0  # wall time the Pull of the last answer was sent
    last_oldest_us: int | None = None
    shadow_until: float = 0.0  # wall time until which a timed-out or failed Pull may have leased messages
    unavailable: bool = False  # Pub/Sub could not be reached at the end
    kept: int = 0  # rows this task yields from the subscription
    # Rows it holds until the commit acknowledges them: those it yields and the redeliveries it
    # drops (on an ordered subscription each holds its key's next messages back). Not the later
    # ones: a key's messages come in publish order, so only later ones wait behind them.
    held: int = 0


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
    later_bytes: int = 0  # body bytes of the later rows (AvailableNow): held until the run ends

    def metadata(self) -> dict[bytes, bytes]:
        return {b"crdb_pubsub_slice": json.dumps(asdict(self)).encode()}

    @classmethod
    def of(cls, schema: pa.Schema) -> SliceInfo:
        raw = json.loads((schema.metadata or {})[b"crdb_pubsub_slice"])
        raw["subs"] = {s: SubscriptionPull(**v) for s, v in raw.get("subs", {}).items()}
        return cls(**raw)


class SliceStore:
    """The slices in one stateDir's storage (used by the driver and by every task)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def _dir(batch_id: int) -> str:
        return f"{ROOT}/slices/{batch_id:020d}/"

    def key(self, batch_id: int, partition: int) -> str:
        return f"{self._dir(batch_id)}{partition:05d}.arrow"

    # ---------------------------------------------------------------- tasks

    def claim(self, batch_id: int, partition: int, *, wait: float) -> Lease:
        """Hold the right to pull for ``(batch, partition)``, renewed until released.

        Waits up to ``wait`` s for another attempt's claim to be released or to expire.

        Raises :class:`SliceConflict` (naming the holder) if it is still held then.
        """
        lease = Lease(
            self.storage,
            self._claim(batch_id, partition),
            ttl=CLAIM_TTL_SECONDS,
            margin=CLAIM_MARGIN_SECONDS,
        )
        try:
            lease.acquire(wait, poll=0.25, gone=gone_from_this_host)
        except LeaseHeld as exc:
            raise SliceConflict(
                f"crdb_pubsub: another attempt of batch {batch_id} partition {partition} still holds "
                f"its claim ({exc}); this attempt fails so that the batch does not read twice"
            ) from None
        lease.start_renewing()
        return lease

    def publish(self, claim: Lease, batch_id: int, partition: int, table: pa.Table, info: SliceInfo) -> bool:
        """Write the slice durably while ``claim`` is held; False when another attempt's slice is there.

        Raises ``LeaseLost`` when the claim was lost (taken over).
        """
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, SLICE_SCHEMA.with_metadata(info.metadata())) as writer:
            writer.write_table(table.cast(SLICE_SCHEMA) if table.schema != SLICE_SCHEMA else table)
        return claim.create(self.key(batch_id, partition), sink.getvalue().to_pybytes())

    def read(self, batch_id: int, partition: int) -> pa.Table | None:
        """Return the recorded slice (every column), or ``None`` if none was published."""
        source = self.storage.open_input(self.key(batch_id, partition))
        if source is None:
            return None
        with source:
            return pa.ipc.open_file(source).read_all()

    def claimed(self, batch_id: int, partition: int) -> bool:
        """Whether some attempt of task ``partition`` of ``batch_id`` ever claimed its slice (it started pulling)."""
        return self.storage.stat(self._claim(batch_id, partition)) is not None

    def planned(self, batch_id: int) -> bool:
        """Whether ``batch_id``'s plan is in the ledger: recorded before its tasks run, deleted when Spark committed it."""
        return self.storage.stat(plan_key(batch_id)) is not None

    def claim_record(self, batch_id: int, partition: int) -> dict | None:
        """Return task ``partition``'s claim as its last holder left it (``None``: never claimed).

        Its ``expiry`` (wall clock), whether it was ``released``, and the note it was released
        with (``leased_until``: until when messages it could not hand back may stay leased).
        """
        data = self.storage.read(self._claim(batch_id, partition))
        return None if data is None else json.loads(data)

    def _claim(self, batch_id: int, partition: int) -> str:
        return f"{self._dir(batch_id)}{partition:05d}.claim"

    def register(self, batch_id: int, partition: int) -> list[int]:
        """Register slice ``partition`` of ``batch_id`` (idempotent); return the register: the partitions in order.

        Compare-and-swap on the register object, repeated when another task's registration got in
        between.
        """
        key = self._register(batch_id)
        while True:
            found = self.storage.read_versioned(key)
            order, version = (json.loads(found[0]), found[1]) if found is not None else ([], 0)
            if partition in order:
                return order
            if self.storage.swap(key, json.dumps([*order, partition]).encode(), version) is not None:
                return [*order, partition]

    def registered(self, batch_id: int) -> list[int]:
        """Return the partitions of ``batch_id`` whose slices were registered, in order (by exact name)."""
        data = self.storage.read(self._register(batch_id))
        return [] if data is None else [int(p) for p in json.loads(data)]

    def _register(self, batch_id: int) -> str:
        return f"{self._dir(batch_id)}register.json"

    def read_acks(self, batch_id: int, partition: int) -> tuple[pa.Table, SliceInfo] | None:
        """Return the small columns of a slice (the bodies are not read) and its metadata.

        ``None`` if none was published.
        """
        source = self.storage.open_input(self.key(batch_id, partition))
        if source is None:
            return None
        with source:
            reader = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=_ACK_FIELDS))
            return reader.read_all(), SliceInfo.of(reader.schema)

    # ---------------------------------------------------------------- driver

    def listed(self, batch_id: int) -> list[int]:
        """Partitions whose slice a listing shows now (best effort: see the module)."""
        prefix = self._dir(batch_id)
        out = []
        for key in self.storage.list(prefix):
            name = key[len(prefix) :]
            if name.endswith(".arrow") and name[:-6].isdigit():
                out.append(int(name[:-6]))
        return sorted(out)

    def forget(self, batch_id: int, parts: int) -> None:
        """Delete the slices, claims and register of a committed batch (by name: no listing)."""
        d = self._dir(batch_id)
        keys = [f"{d}{p:05d}.{kind}" for p in range(parts) for kind in ("arrow", "claim")]
        self.storage.delete([*keys, self._register(batch_id)])

    def drop(self, upto: int) -> None:
        """Delete the slices of every batch ``<= upto`` (a listing: used once, at start)."""
        prefix = f"{ROOT}/slices/"
        batches = {key[len(prefix) :].split("/", 1)[0] for key in self.storage.list(prefix)}
        for name in batches:
            if name.isdigit() and int(name) <= upto:
                self.storage.delete_prefix(f"{prefix}{name}/")
