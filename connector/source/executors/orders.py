"""What the driver tells each task of a batch (:class:`SliceOrder`), and how a batch is split."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

MAX_TASK_PULL_SECONDS = 5.0
TASK_PULL_FRACTION = 0.4  # of the shortest subscription ack deadline: leases outlive the pull


def longest_lease(lease_seconds: int, deadlines: Iterable[int]) -> int:
    """Return the longest a message pulled from subscriptions of ``deadlines`` may stay leased, unextended.

    A Pull leases for the subscription's deadline, an extension for ``lease_seconds``
    (``ackDeadlineSeconds``): what an attempt that died held lapses after the longer of the two.
    Both the retry that takes its claim over and the driver (when no retry ran) wait that long
    before an empty answer may prove a subscription drained.
    """
    return max(lease_seconds, *deadlines, 0)


@dataclass(frozen=True)
class Plan:
    """What the driver decided for one batch, recorded once in the ledger.

    It is recorded before Spark learns the batch's offset; a replay, in any process, gives the tasks
    exactly these orders.
    """

    parts: int
    max_messages: int
    max_bytes: int
    cutoff_us: int | None = None  # Trigger.AvailableNow: later messages belong to the next run
    # Subscriptions with message ordering: each is pulled by one task of the batch. Pub/Sub may
    # deliver a key again, from its first unacknowledged message, while a task holds it: two tasks
    # of one batch holding a key would yield its messages in the order of their partitions.
    ordered: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {
            "parts": self.parts,
            "max_messages": self.max_messages,
            "max_bytes": self.max_bytes,
            "cutoff_us": self.cutoff_us,
            "ordered": list(self.ordered),
        }

    @classmethod
    def of(cls, raw: dict) -> Plan:
        return cls(
            int(raw["parts"]),
            int(raw["max_messages"]),
            int(raw["max_bytes"]),
            raw.get("cutoff_us"),
            tuple(raw.get("ordered", ())),
        )

    def messages_of(self, index: int) -> int:
        """Task ``index``'s share of the plan's messages: the shares add up to ``max_messages``."""
        return share(self.max_messages, self.parts, index)

    @property
    def bytes_each(self) -> int:
        """Each task's share of the plan's bytes (at least one)."""
        return max(1, math.ceil(self.max_bytes / self.parts))

    def subscriptions(self, index: int, subs: list[str]) -> tuple[str, ...]:
        """Return the subscriptions task ``index`` pulls.

        Each task one, round robin, or several each when there are more subscriptions than tasks;
        an ordered subscription one task only (the tasks past the first round pull the others).
        """
        if self.parts < len(subs):
            return tuple(subs[index :: self.parts])
        if index < len(subs):
            return (subs[index],)
        shared = [s for s in subs if s not in self.ordered]
        return (shared[index % len(shared)],) if shared else ()


@dataclass(frozen=True)
class SliceOrder:
    """What the driver asks of one task: the plan of one slice."""

    batch_id: int
    index: int
    parts: int  # slices in the batch: the task's siblings are 0..parts-1
    subscriptions: tuple[str, ...]
    max_messages: int
    max_bytes: int
    seconds: float  # time to pull
    deadlines: dict[str, int]  # each subscription's ack deadline (the lease a delivery starts with)
    lease_seconds: int  # ackDeadlineSeconds: the lease the task keeps while it holds messages
    cutoff_us: int | None = None  # AvailableNow: later messages are recorded apart, not yielded
    # Pull with return_immediately: an AvailableNow run waits for a timed-out Pull's shadow to pass,
    # and a long Pull that timed out again would cast a new one.
    immediate: tuple[str, ...] = ()
    # Where the task asks which of the messages it pulled it must not yield (:mod:`.seen`): the
    # driver-side reader's addresses and token.
    seen: tuple[tuple[str, ...], str] | None = None
    # Subscriptions with message ordering: one Pull at a time (see the task).
    ordered: tuple[str, ...] = ()
    # Spark runs the batch again (a restart, or a runner that died): what its first run yielded of
    # a slice was recorded first, so a slice not recorded yielded nothing then, and pulls nothing now.
    replay: bool = False

    def __repr__(self) -> str:  # the token stays out of plan strings and logs
        return f"SliceOrder(batch={self.batch_id}, index={self.index}, parts={self.parts})"


def share(count: int, parts: int, index: int) -> int:
    """Task ``index``'s part of ``count`` messages among ``parts`` tasks: the parts add up to it."""
    return count // parts + (index < count % parts)


def orders_of(
    batch_id: int,
    plan: Plan,
    subs: list[str],
    deadlines: dict[str, int],
    lease_seconds: int,
    seen: tuple[tuple[str, ...], str] | None,
    immediate: frozenset[str] = frozenset(),
    ordered: frozenset[str] = frozenset(),
    replay: bool = False,
    idle: frozenset[str] = frozenset(),
    room: tuple[int, int] | None = None,
) -> list[SliceOrder]:
    """Return the orders of ``plan``'s tasks; none pulls the ``idle`` subscriptions.

    ``room``: the messages and bytes the batch may take now, when less than its plan's (the shares
    then add up to it; a share may be 0).
    """
    shortest = min(deadlines.values(), default=10)
    seconds = max(0.5, min(MAX_TASK_PULL_SECONDS, shortest * TASK_PULL_FRACTION))
    count, nbytes = plan.max_messages, plan.bytes_each * plan.parts
    if room is not None:
        count, nbytes = min(count, max(0, room[0])), min(nbytes, max(0, room[1]))
    out = []
    for i in range(plan.parts):
        mine = tuple(s for s in plan.subscriptions(i, subs) if s not in idle)
        out.append(
            SliceOrder(
                batch_id=batch_id,
                index=i,
                parts=plan.parts,
                subscriptions=mine,
                # Each task's count share, the batch's count exactly (the plan has no more tasks
                # than messages; the room left may be less).
                max_messages=share(count, plan.parts, i),
                max_bytes=math.ceil(nbytes / plan.parts),
                seconds=seconds,
                deadlines={s: deadlines.get(s, 10) for s in mine},
                lease_seconds=lease_seconds,
                cutoff_us=plan.cutoff_us,
                immediate=tuple(s for s in mine if s in immediate),
                seen=seen,
                ordered=tuple(s for s in mine if s in ordered),
                replay=replay,
            )
        )
    return out
