"""The acker: acknowledgements and hand-backs, several requests in flight, coalesced."""

from __future__ import annotations

import threading
import time

from crdb_pubsub.source.pubsub.acker import ACK, NACK, Acker, Job
from crdb_pubsub.source.transport import AckResult


class _Rpc:
    """Acknowledge answers at once, except that the first request waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.requests: list[tuple[str, list[str]]] = []
        self._first = True
        self._lock = threading.Lock()

    def acknowledge(self, sub, ack_ids, *, total=None):
        with self._lock:
            first, self._first = self._first, False
            self.requests.append(("ack", list(ack_ids)))
        if first:
            self.release.wait(10)
        return AckResult(confirmed=list(ack_ids))

    def modify_ack_deadline(self, sub, ack_ids, seconds, *, total=None):
        with self._lock:
            self.requests.append(("nack", list(ack_ids)))
        return AckResult(confirmed=list(ack_ids))


def test_a_request_waiting_on_retries_holds_up_no_other():
    """One request stuck (retries during an outage, up to 30 s) must not hold the acknowledgements
    queued behind it: an exactly-once subscription refuses an acknowledgement that comes after the
    message's next delivery, and an ordered key waits for it (found by tests/sim; on 11f59fe one
    thread sent every request in turn)."""
    rpc = _Rpc()
    acker = Acker(rpc)
    acker.start()
    answered: list[AckResult] = []
    try:
        acker.submit(Job(ACK, "s", ["stuck"]))
        time.sleep(0.1)
        acker.submit(Job(ACK, "s", ["a", "b"], on_done=answered.append))
        deadline = time.monotonic() + 5
        while not answered and time.monotonic() < deadline:
            time.sleep(0.01)
        assert answered and answered[0].confirmed == ["a", "b"], "a request waited for the one stuck before it"
    finally:
        rpc.release.set()
        assert acker.flush(5)
        acker.stop()


def test_queued_jobs_of_a_subscription_go_in_one_request_and_each_learns_its_own_answer():
    rpc = _Rpc()
    rpc._first = False
    acker = Acker(rpc, senders=1)
    results: dict[str, AckResult] = {}
    for name, ids in (("x", ["1", "2"]), ("y", ["3"]), ("z", ["4"])):
        acker.submit(Job(ACK, "s", ids, on_done=lambda r, name=name: results.__setitem__(name, r)))
    acker.submit(Job(NACK, "s", ["5"]))
    acker.start()
    try:
        assert acker.flush(5)
    finally:
        acker.stop()
    assert rpc.requests == [("ack", ["1", "2", "3", "4"]), ("nack", ["5"])]
    assert {k: r.confirmed for k, r in results.items()} == {"x": ["1", "2"], "y": ["3"], "z": ["4"]}
