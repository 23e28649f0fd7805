"""A chunk: the messages of one Pull response (or part of one) of one subscription.

Both receiver modes keep messages in chunks from receipt until they are acknowledged or handed
back: the bodies and metadata as Arrow columns (``batch``, in the wire layout) while they are
needed, the message ids and current ack ids as lists until the end. One chunk is one lease group
for the :mod:`.leaser`, so a chunk remembers when its first message was received and until when
its lease is *proven* to be alive (``proven_until``): from the time its Pull was sent plus the
subscription's ack deadline, extended by every renewal Pub/Sub answered before that bound. An
acknowledgement is proof that a message left the subscription only when it was answered while the
lease was proven alive (:mod:`.acknowledgements`): a standard subscription answers OK to an ack
id whose lease has lapsed.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from ..wire import body_lengths, numbers

# States a chunk goes through (``Chunk.state``).
BUFFERED = "buffered"  # waiting to be sealed into a batch
LATER = "later"  # AvailableNow: published after the cutoff, handed back when the run ends
SEALED = "sealed"  # in a planned batch, waiting for Spark's commit
DONE = "done"  # acknowledged or handed back


class Chunk:
    """Messages of one subscription received together.

    The owner's lock (the driver's receiver, the executors' planner or task) guards ``ack_ids``,
    ``stale`` and ``state``; the leaser's lock guards ``lease_until``, ``renew_at``, ``given_up``
    and ``proven_until``. The other fields never change.
    """

    __slots__ = (
        "_pos",
        "ack_ids",
        "batch",
        "earlier",
        "first_received",
        "given_up",
        "largest",
        "lease_until",
        "message_ids",
        "nbytes",
        "oldest_us",
        "proven_until",
        "renew_at",
        "stale",
        "state",
        "sub",
    )

    def __init__(
        self,
        sub: str,
        message_ids: list[str],
        ack_ids: list[str],
        batch: pa.RecordBatch | None,
        nbytes: int,
        largest: int,
        first_received: float,
        *,
        stale: bool = False,
        proven_until: float = 0.0,
    ) -> None:
        self.sub = sub
        self.message_ids = message_ids
        self.ack_ids = ack_ids
        # Indexes whose ack id came from an earlier process (recovered from stateDir): acking them
        # is likely to have no effect, and leasing them certainly has none.
        self.stale: set[int] = set(range(len(message_ids))) if stale else set()
        # Other ack ids of messages delivered to this process more than once while held, by index.
        # Which delivery is the newest (the one whose ack id acts) can't be told from the order
        # the answers arrive in (two Pulls may cross), so every one is extended, acknowledged and
        # handed back with the message.
        self.earlier: dict[int, list[str]] = {}
        self.batch = batch
        self.nbytes = nbytes
        self.largest = largest
        # The oldest publish time (epoch us): how far behind the stream is while this is held.
        self.oldest_us = int(numbers(batch.column(2)).min()) if batch is not None and batch.num_rows else None
        self.first_received = first_received
        self.lease_until = 0.0
        self.renew_at = 0.0
        self.given_up = False
        # Monotonic time until which the current ack ids' leases are known to be alive (0: none
        # is, e.g. ack ids recovered from an earlier process).
        self.proven_until = proven_until
        self.state = BUFFERED
        self._pos: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.message_ids)

    def __repr__(self) -> str:
        return f"Chunk({self.sub.rsplit('/', 1)[-1]}, {len(self)} messages, {self.nbytes} B, {self.state})"

    def refresh(self, message_id: str, ack_id: str, proven_until: float) -> None:
        """Take another delivery of a held message (Pub/Sub delivered it again while it was held).

        It comes with the lease its own Pull proves (``proven_until``). An ack id of this process's
        earlier delivery is kept beside it (see ``earlier``); one recovered from an earlier process
        is dropped.
        """
        if self._pos is None:
            self._pos = {m: i for i, m in enumerate(self.message_ids)}
        i = self._pos[message_id]
        if i not in self.stale and self.ack_ids[i] != ack_id:
            self.earlier.setdefault(i, []).append(self.ack_ids[i])
        self.ack_ids[i] = ack_id
        # The chunk's proof now holds for the weakest of its ack ids; a chunk whose ack ids were
        # all stale takes the new one's.
        had_fresh = len(self.stale) < len(self.message_ids)
        self.stale.discard(i)
        self.proven_until = min(self.proven_until, proven_until) if had_fresh else proven_until

    def proven(self, index: int, at: float) -> bool:
        """Return whether message ``index``'s lease was proven alive at monotonic time ``at``."""
        return index not in self.stale and at < self.proven_until

    def fresh_ack_ids(self) -> list[str]:
        """Ack ids delivered to this process (the ones worth a lease extension or a hand-back)."""
        fresh = list(self.ack_ids) if not self.stale else [a for i, a in enumerate(self.ack_ids) if i not in self.stale]
        return fresh + [a for ids in self.earlier.values() for a in ids] if self.earlier else fresh

    def all_ack_ids(self) -> list[str]:
        """Every ack id of the messages (to acknowledge them)."""
        return list(self.ack_ids) + [a for ids in self.earlier.values() for a in ids] if self.earlier else self.ack_ids

    def ids_of(self, index: int) -> list[str]:
        """Return the ack ids of message ``index``: its newest known, then those of earlier deliveries."""
        return [self.ack_ids[index], *self.earlier.get(index, ())]

    def failed(self, index: int, failed: dict[str, str]) -> bool:
        """Whether every ack id of message ``index`` is in ``failed`` (one that acted is enough)."""
        return all(a in failed for a in self.ids_of(index))

    def split(self, n: int) -> tuple[Chunk, Chunk]:
        """Split into the first ``n`` messages and the rest, as two chunks with the same lease state."""
        assert self.batch is not None and 0 < n < len(self)
        head_batch, tail_batch = self.batch.slice(0, n), self.batch.slice(n)
        out = []
        for part, lo, hi in ((head_batch, 0, n), (tail_batch, n, len(self))):
            nbytes, largest = sizes_of(part)
            c = Chunk(
                self.sub, self.message_ids[lo:hi], self.ack_ids[lo:hi], part, nbytes, largest, self.first_received
            )
            c.stale = {i - lo for i in self.stale if lo <= i < hi}
            c.earlier = {i - lo: ids for i, ids in self.earlier.items() if lo <= i < hi}
            c.lease_until, c.renew_at, c.given_up, c.state = self.lease_until, self.renew_at, self.given_up, self.state
            c.proven_until = self.proven_until
            out.append(c)
        return out[0], out[1]

    def take(self, indices: list[int]) -> Chunk:
        """Return the messages at ``indices`` (in that order) as a chunk with the same lease state."""
        assert self.batch is not None
        part = self.batch.take(pa.array(indices, pa.int64()))
        nbytes, largest = sizes_of(part)
        c = Chunk(
            self.sub,
            [self.message_ids[i] for i in indices],
            [self.ack_ids[i] for i in indices],
            part,
            nbytes,
            largest,
            self.first_received,
        )
        new = {old: i for i, old in enumerate(indices)}
        c.stale = {new[i] for i in self.stale if i in new}
        c.earlier = {new[i]: ids for i, ids in self.earlier.items() if i in new}
        c.lease_until, c.renew_at, c.given_up, c.state = self.lease_until, self.renew_at, self.given_up, self.state
        c.proven_until = self.proven_until
        return c


def sizes_of(batch: pa.RecordBatch) -> tuple[int, int]:
    """(total, largest) body bytes of a wire batch."""
    lengths = body_lengths(batch.column(0))
    if not len(lengths):
        return 0, 0
    return int(lengths.sum()), int(lengths.max())


def by_subscription(chunks: Iterable[Chunk]) -> dict[str, list[Chunk]]:
    """``chunks`` by subscription, in their order."""
    out: dict[str, list[Chunk]] = {}
    for c in chunks:
        out.setdefault(c.sub, []).append(c)
    return out


def total(chunks: Iterable[Chunk]) -> tuple[int, int]:
    """(messages, bytes) of ``chunks``."""
    m = b = 0
    for c in chunks:
        m += len(c)
        b += c.nbytes
    return m, b
