"""What a puller tells the Pulls-in-flight rule about each answer (driver/pullers.py).

The rule (pubsub/concurrency.py) grows a subscription's Pulls in flight by Little's law: the
round trip ``W`` over the CPU ``S`` an answer costs, judged only over windows in which the flow
control held no Pull back. Both figures must be what they say. With eight puller threads on two
cores a thread waits milliseconds for the GIL or a lock (the switch interval is 5 ms): on the
service's terms such waits passed for room held back (the window not judged) and for time spent
sorting (``W / S`` too small), and the Pulls in flight stalled at 4 or 8 of the 16 the round trip
asks for.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from crdb_pubsub.source.driver.flow import FlowControl
from crdb_pubsub.source.driver.pullers import Puller, Sent

SUB = "projects/p/subscriptions/pullers"


class _Receiver:
    """The receiver's side of one puller: one answer, then stop; what ``observed`` was told."""

    def __init__(self, stopping: threading.Event, accept_waits: float = 0.0) -> None:
        self.stopping = stopping
        self.accept_waits = accept_waits
        self.seen: list[dict[str, Any]] = []

    def wait_until_pulling(self, sub: str, slot: int = 0) -> bool:
        return not self.stopping.is_set()

    def still_pulling(self, sub: str) -> bool:
        return not self.stopping.is_set()

    def sending(self, sub: str, puller: int = 0) -> Sent:
        return Sent(time.monotonic(), False)

    def now(self) -> float:
        return time.monotonic()

    def note_available(self) -> None:
        pass

    def accept(self, sub: str, response: Any, reservation: Any, puller: int, sent: Sent) -> int:
        # Sorting an answer while another thread holds the GIL or the receiver's lock: the wall
        # time passes, this thread's CPU does not.
        time.sleep(self.accept_waits)
        return 150

    def observed(self, sub: str, latency: float, service: float, messages: int, held_back: bool) -> None:
        self.seen.append({"latency": latency, "service": service, "held_back": held_back})
        self.stopping.set()


class _Rpc:
    def pull(self, sub: str, max_messages: int, timeout: float, *, return_immediately: bool = False) -> object:
        time.sleep(0.025)  # the round trip
        return object()


def _one_answer(flow: FlowControl, receiver: _Receiver, stopping: threading.Event, before=None) -> dict[str, Any]:
    p = Puller(receiver, _Rpc(), flow, SUB, 0, stopping)  # type: ignore[arg-type]
    if before is not None:
        before(p)
    else:
        p.start()
    p.thread.join(10)
    assert not p.thread.is_alive() and receiver.seen, "the puller did not answer"
    return receiver.seen[0]


def test_a_pull_that_waited_for_the_flow_controls_lock_was_not_held_back():
    stopping = threading.Event()
    flow = FlowControl(10_000, 1 << 30)

    def busy_lock(p: Puller) -> None:
        # Room for the Pull throughout; only the lock is busy for a moment, as under contention.
        with flow._cond:
            p.start()
            time.sleep(0.02)

    seen = _one_answer(flow, _Receiver(stopping), stopping, busy_lock)
    assert seen["held_back"] is False, seen


def test_a_pull_that_waited_for_room_was_held_back():
    stopping = threading.Event()
    flow = FlowControl(100, 1 << 30)
    flow.add(100, 100, 1)  # full: the Pull waits until room is given back

    def full_then_room(p: Puller) -> None:
        p.start()
        time.sleep(0.05)
        flow.release(100, 100)

    seen = _one_answer(flow, _Receiver(stopping), stopping, full_then_room)
    assert seen["held_back"] is True, seen


def test_the_service_time_is_the_cpu_an_answer_cost_not_the_wait_for_the_gil():
    stopping = threading.Event()
    seen = _one_answer(FlowControl(10_000, 1 << 30), _Receiver(stopping, accept_waits=0.03), stopping)
    assert seen["latency"] >= 0.025, seen
    assert seen["service"] < 0.01, seen  # 30 ms of waiting, almost no CPU
