"""The held index: the messages a receiver holds, by subscription and id, and how a Pull's answer sorts against it.

Pub/Sub may deliver a message again while it is held (its lease alive or not), and even twice in
one answer. Both receiver modes keep one row a message: a delivery of a held message refreshes
that row (:meth:`.Chunk.refresh`: its newest ack id is the one that acts, the earlier ones go
with it), so whatever happens to the message next, acknowledged, handed back or recorded, happens
with every ack id it was delivered with, and a message is never yielded by one row while another
of its rows is acknowledged or handed back.

The owner's lock guards an index (the driver's receiver); a task's pull has one thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from .chunks import LATER, Chunk


@dataclass
class Sorted:
    """One answer's messages, sorted against the index (:meth:`Held.sort`)."""

    sub: str
    new: list[int] | None  # indexes of the messages to hold (the first delivery of each); None: all of them
    refreshed: list[Chunk] = field(default_factory=list)  # held chunks a message of which came again
    again: int = 0  # deliveries of a held message, or of one already in this answer
    dropped: list[str] = field(default_factory=list)  # ack ids of messages remembered as acknowledged
    twice: list[tuple[str, str]] = field(default_factory=list)  # (id, ack id): a new message's later deliveries

    def part(
        self, batch: pa.RecordBatch, mids: list[str], ack_ids: list[str]
    ) -> tuple[pa.RecordBatch, list[str], list[str]] | None:
        """Return the rows of the messages to hold, ``(batch, ids, ack ids)``, or None when there are none."""
        if self.new is None or len(self.new) == len(mids):
            return batch, mids, ack_ids
        if not self.new:
            return None
        return batch.take(pa.array(self.new, pa.int64())), [mids[i] for i in self.new], [ack_ids[i] for i in self.new]


class Held:
    """Message id -> the chunk holding it, by subscription."""

    def __init__(self, subs: Iterable[str] = ()) -> None:
        self._subs: dict[str, dict[str, Chunk]] = {s: {} for s in subs}

    def sort(
        self, sub: str, mids: list[str], ack_ids: list[str], proven: float, seen: Sequence[bool] | None = None
    ) -> Sorted:
        """Sort one answer of ``sub``; a delivery of a held message refreshes its chunk at once.

        ``proven``: until when the answer's leases are proven; ``seen``: for each message, whether it
        was acknowledged and is remembered (its delivery is dropped, its ack id acknowledged again).
        """
        held = self._subs.setdefault(sub, {})
        # The usual answer: all new, none held or remembered, no id twice (C loops only).
        if (seen is None or not any(seen)) and held.keys().isdisjoint(mids) and len(set(mids)) == len(mids):
            return Sorted(sub, None)
        out = Sorted(sub, [])
        first: set[str] = set()
        for i, mid in enumerate(mids):
            c = held.get(mid)
            if c is not None:
                c.refresh(mid, ack_ids[i], proven)  # its newest ack id is the one that acts now
                out.refreshed.append(c)
                out.again += 1
            elif seen is not None and seen[i]:
                out.dropped.append(ack_ids[i])
            elif mid in first:
                out.twice.append((mid, ack_ids[i]))
                out.again += 1
            else:
                first.add(mid)
                out.new.append(i)  # type: ignore[union-attr]
        return out

    def add(self, chunks: Iterable[Chunk], sorted_: Sorted | None = None, proven: float = 0.0) -> None:
        """Index ``chunks``; then give them the deliveries ``sorted_`` found twice in their answer."""
        for c in chunks:
            self._subs.setdefault(c.sub, {}).update(dict.fromkeys(c.message_ids, c))
        if sorted_ is not None:
            held = self._subs[sorted_.sub]
            for mid, ack_id in sorted_.twice:
                held[mid].refresh(mid, ack_id, proven)

    def of(self, sub: str, mid: str) -> Chunk | None:
        """Return the chunk holding message ``mid`` of ``sub`` (None: not held)."""
        return self._subs.get(sub, {}).get(mid)

    def remove(self, c: Chunk) -> None:
        """Forget ``c``'s messages (those another chunk took over since stay)."""
        held = self._subs.get(c.sub)
        if held is None:
            return
        for mid in c.message_ids:
            if held.get(mid) is c:
                del held[mid]
        if not held:
            self._subs[c.sub] = {}  # a dict keeps its largest size: give a burst's back

    def holds_earlier(self, sub: str) -> bool:
        """Whether a message of ``sub`` not published after an AvailableNow cutoff is held.

        On an ordered subscription such a message holds its key's next messages back.
        """
        return any(c.state != LATER for c in set(self._subs.get(sub, {}).values()))
