"""One ``receiver=executors`` task against the fake, 25 ms away: the tests of a task's pull share these."""

from __future__ import annotations

import threading
import time

from crdb_pubsub.source.executors import task
from crdb_pubsub.source.executors.orders import SliceOrder
from crdb_pubsub.source.options import parse_options
from crdb_pubsub.source.state.ledger import plan_key
from crdb_pubsub.source.storage import open_storage

SUB = "projects/p/subscriptions/in-flight"


class SlowPulls:
    """Wraps the fake's Pull: each answers after ``delay(n)`` seconds (n: the Pull's number, from 0)
    and brings at most ``cap`` messages, as the service answers a few hundred 25 ms away.

    Counts the Pulls in flight, and checks that they never ask together for more than the share
    leaves (``share`` less what was delivered).
    """

    def __init__(self, fake, delay, cap: int, share: int, fail=lambda n: None) -> None:
        self._pull = fake.pull
        self._delay = delay
        self._fail = fail
        self._cap = cap
        self._share = share
        self._lock = threading.Lock()
        self.calls = 0
        self.now = 0
        self.most = 0
        self.asked = 0
        self.delivered = 0
        self.over: list[tuple[int, int]] = []  # (asked in flight, delivered) past the share
        self.first = None  # when the first Pull came (monotonic)
        self.answered: list[float] = []  # when each answer left
        self.spans: list[tuple[float, float]] = []  # each Pull's (arrival, answer)
        fake.pull = self

    def __call__(self, sub, max_messages, timeout, return_immediately):
        with self._lock:
            n = self.calls
            self.calls += 1
            self.first = self.first or time.monotonic()
            self.now += 1
            self.most = max(self.most, self.now)
            self.asked += max_messages
            if self.asked + self.delivered > self._share:
                self.over.append((self.asked, self.delivered))
        got = []
        came = time.monotonic()
        try:
            time.sleep(self._delay(n))
            if self._fail(n) is not None:
                raise self._fail(n)
            got = self._pull(sub, min(max_messages, self._cap), timeout, return_immediately)
            return got
        finally:
            with self._lock:
                self.now -= 1
                self.asked -= max_messages
                self.delivered += len(got)
                self.answered.append(time.monotonic())
                self.spans.append((came, self.answered[-1]))

    def busy(self) -> float:
        """The seconds during which some Pull was in flight."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.spans):
            total += max(0.0, b - max(a, end))
            end = max(end, b)
        return total


def one_order(
    max_messages: int,
    max_bytes: int = 1 << 30,
    seconds: float = 4.0,
    batch: int = 1,
    deadline: int = 60,
    sub: str = SUB,
) -> SliceOrder:
    return SliceOrder(
        batch_id=batch,
        index=0,
        parts=1,
        subscriptions=(sub,),
        max_messages=max_messages,
        max_bytes=max_bytes,
        seconds=seconds,
        # Long enough that a first task's first answer, slow on a loaded machine (seconds), still
        # has its lease proven when the slice is recorded.
        deadlines={sub: deadline},
        lease_seconds=60,
    )


def read_slice(tmp_path, order: SliceOrder) -> tuple[list[str], float]:
    opts = parse_options(
        {
            "subscription": order.subscriptions[0],
            "emulatorHost": "127.0.0.1:1",
            "receiver": "executors",
            "stateDir": str(tmp_path),
        }
    )
    storage = open_storage(str(tmp_path))  # the driver recorded the batch's plan before its tasks ran
    if storage.stat(plan_key(order.batch_id)) is None:
        storage.create(plan_key(order.batch_id), b"{}")
    t0 = time.monotonic()
    with task.pulled_slice(opts, order) as table:
        took = time.monotonic() - t0
        return table.column("message_id").to_pylist(), took
