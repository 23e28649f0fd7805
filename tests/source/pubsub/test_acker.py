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


class _RoundTrip:
    """Each request takes a round trip; records how many were in flight at once and their sizes."""

    def __init__(self, seconds: float = 0.05, fail: set[str] | None = None) -> None:
        self.seconds = seconds
        self.fail = fail or set()
        self.sizes: list[int] = []
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()

    def acknowledge(self, sub, ack_ids, *, total=None):
        with self._lock:
            self.sizes.append(len(ack_ids))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.seconds)
        with self._lock:
            self.in_flight -= 1
        failed = {a: "UNAVAILABLE" for a in ack_ids if a in self.fail}
        return AckResult(confirmed=[a for a in ack_ids if a not in failed], failed=failed)


def test_a_commit_larger_than_one_request_goes_in_requests_in_flight_at_once():
    """A batch's acknowledgements (50,000 ids in one commit) are more than one request holds
    (2,500 ids): one sender sent them one request after another, each waiting its round trip (on
    the service's terms 20 x 25 ms at the end of every AvailableNow run). They go as the service's
    requests, several in flight, and the commit learns one answer for all of them."""
    from crdb_pubsub.source.transport import MAX_IDS_PER_REQUEST

    rpc = _RoundTrip(fail={"m7", "m9999"})
    acker = Acker(rpc)
    acker.start()
    ids = [f"m{i}" for i in range(4 * MAX_IDS_PER_REQUEST)]
    answered: list[AckResult] = []
    try:
        acker.submit(Job(ACK, "s", ids, on_done=answered.append))
        assert acker.flush(10)
    finally:
        acker.stop()
    assert max(rpc.sizes) <= MAX_IDS_PER_REQUEST and sum(rpc.sizes) == len(ids), rpc.sizes
    assert rpc.most_in_flight > 1, "one request after another"
    assert len(answered) == 1, "the commit is answered once"
    assert sorted(answered[0].confirmed) == sorted(set(ids) - {"m7", "m9999"})
    assert answered[0].failed == {"m7": "UNAVAILABLE", "m9999": "UNAVAILABLE"}
