"""The driver's receiver and its flow control on their own: sizing Pulls, taking batches by count and
bytes, sorting what a Pull brings."""

from __future__ import annotations

import threading

import pytest

from crdb_pubsub.source.driver import Receiver
from crdb_pubsub.source.driver.flow import FlowControl
from crdb_pubsub.source.pubsub.chunks import Chunk, sizes_of
from crdb_pubsub.source.pubsub.pull import FIRST_PULL_MESSAGES
from crdb_pubsub.source.transport import Rpc
from crdb_pubsub.source.wire import messages_batch

from ..test_wire import _response


def test_flow_sizes_pulls_by_count_and_by_bytes():
    stop = threading.Event()
    f = FlowControl(max_messages=100, max_bytes=64 * 1024)
    first = f.reserve(stop)
    assert first.messages == FIRST_PULL_MESSAGES  # no size known yet
    f.settle(first, 10, 10 * 1024, largest=1024)
    second = f.reserve(stop)
    assert second.messages == (64 * 1024 - 10 * 1024) // 1024  # the byte room, not the count room
    f.settle(second, second.messages, second.messages * 1024, largest=1024)
    assert f.full()
    f.release(10, 10 * 1024)
    assert f.reserve(stop).messages == 10


def test_first_pulls_of_several_pullers_count_once_sizes_are_known():
    """Two pullers' first Pulls go out before any size is known; the one still in flight must
    count at the learned size, or together they overshoot maxOutstandingBytes (seen end to end:
    77 messages of ~970 B held against a 64 KiB budget)."""
    stop = threading.Event()
    f = FlowControl(max_messages=100_000, max_bytes=64 * 1024)
    a, b = f.reserve(stop), f.reserve(stop)
    f.settle(a, 10, 10 * 1000, largest=1000)
    c = f.reserve(stop)
    f.settle(b, 10, 10 * 1000, largest=1000)  # b's answer arrives after c was sized
    f.settle(c, c.messages, c.messages * 1000, largest=1000)
    assert f.held_bytes <= 64 * 1024


def test_flow_lets_a_lone_message_larger_than_the_budget_through():
    stop = threading.Event()
    f = FlowControl(max_messages=100, max_bytes=64 * 1024)
    r = f.reserve(stop)
    f.settle(r, 0, 0, largest=1 << 20)  # a Pull showed a 1 MiB message, kept none
    assert f.reserve(stop).messages == 1


def test_one_puller_never_takes_the_room_of_the_others():
    """Each puller's Pull is sized to its share of the window: one puller's long Pull reserving all
    the room starved the other, whose newest answer then stood still, so an AvailableNow run could
    not show its subscription drained before its bound (seen in the simulation and with the fake,
    a window of 200 with 60 held)."""
    stop = threading.Event()
    f = FlowControl(max_messages=200, max_bytes=1 << 30, pullers=2)
    f.settle(f.reserve(stop), 10, 10 * 100, largest=100)
    f.add(50, 50 * 100, 100)
    a = f.reserve(stop)
    b = f.reserve(stop)
    assert a.messages == 100 and b.messages == 40  # a's share of 200, then what is left
    f.cancel(a)
    f.cancel(b)
    by_bytes = FlowControl(max_messages=100_000, max_bytes=10_000, pullers=2)
    by_bytes.settle(by_bytes.reserve(stop), 0, 0, largest=100)
    assert by_bytes.reserve(stop).messages == 50 and by_bytes.reserve(stop).messages == 50


def _chunk(sizes: list[int], start: int = 0) -> Chunk:
    mids = [str(start + i) for i in range(len(sizes))]
    batch = messages_batch([b"x" * n for n in sizes], mids, [1] * len(sizes), [None] * len(sizes), [None] * len(sizes))
    nbytes, largest = sizes_of(batch)
    return Chunk("s", mids, [f"a{m}" for m in mids], batch, nbytes, largest, 0.0)


def _receiver_with(chunks: list[Chunk]) -> Receiver:
    r = Receiver(Rpc(object()), ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    for c in chunks:
        r._live[c] = None
    r._held.add(chunks)
    r.requeue(chunks)
    return r


def test_take_splits_chunks_at_the_count_and_byte_limits():
    r = _receiver_with([_chunk([100] * 10), _chunk([100] * 10, start=10)])
    got = r.take(max_messages=15)
    assert [m for c in got for m in c.message_ids] == [str(i) for i in range(15)]
    got = r.take(max_bytes=250)
    assert [m for c in got for m in c.message_ids] == ["15", "16"]
    assert r._held.of("s", "17").message_ids[0] == "17"  # the rest is held by the new chunk


def test_the_buffered_count_follows_what_comes_and_goes():
    from crdb_pubsub.source.driver.flow import Reservation

    r = _receiver_with([_chunk([100] * 10), _chunk([100] * 10, start=10)])

    def counted() -> int:
        assert r.buffered_count_locked() == sum(len(c) for c in r._buffer)
        return r.buffered_count_locked()

    assert counted() == 20
    taken = r.take(max_messages=15)  # splits the second chunk
    assert counted() == 5
    r.accept("s", _response([{"ack_id": f"x{i}", "message_id": f"x{i}"} for i in range(3)]), Reservation(3, 0))
    assert counted() == 8
    r.requeue(taken)
    assert counted() == 23
    r.take()
    assert counted() == 0


def test_batches_an_earlier_process_planned_go_before_what_this_one_pulled():
    """A batch an earlier process planned and Spark never saw goes back to the buffer when the next
    process starts, after its pullers may have buffered answers: on an ordered subscription those
    may hold its keys' later messages (Pub/Sub delivers the key again from its first unacknowledged
    message). On e54b009 it went to the buffer's end, and a batch yielded a key's later message
    before its earlier ones (the simulation's driver/posix seed 10702)."""
    from crdb_pubsub.source.driver.flow import Reservation

    r = _receiver_with([])
    r.accept("s", _response([{"ack_id": f"x{i}", "message_id": f"x{i}"} for i in range(2)]), Reservation(2, 0))
    first, second = _chunk([100] * 2), _chunk([100] * 2, start=2)
    for c in (first, second):
        r._live[c] = None
    r._held.add([first, second])
    r.requeue([first, second])
    got = r.take()
    assert [m for c in got for m in c.message_ids] == ["0", "1", "2", "3", "x0", "x1"]


def test_take_always_moves_at_least_one_message():
    r = _receiver_with([_chunk([5000, 10])])
    got = r.take(max_bytes=1024)
    assert [m for c in got for m in c.message_ids] == ["0"]


class _Info:
    ack_deadline_seconds = 10


class _AnsweringRpc(Rpc):
    """Confirms every acknowledgement and lease at once, records the acknowledged ids."""

    def __init__(self) -> None:
        super().__init__(object())
        self.acked: list[str] = []

    def get_subscription(self, subscription):
        return _Info()

    def acknowledge(self, subscription, ack_ids, *, total=None):
        from crdb_pubsub.source.transport import AckResult

        self.acked.extend(ack_ids)
        return AckResult(confirmed=list(ack_ids))

    def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
        from crdb_pubsub.source.transport import AckResult

        return AckResult(confirmed=list(ack_ids))


def test_accept_sorts_new_held_acknowledged_and_repeated_ids():
    from crdb_pubsub.source.driver.flow import Reservation

    rpc = _AnsweringRpc()
    r = Receiver(rpc, ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    r.start()
    try:
        r.accept("s", _response([{"ack_id": f"a{i}", "message_id": str(i)} for i in range(4)]), Reservation(4, 0))
        r.ack(r.take(max_messages=1))  # "0" acknowledged; "1".."3" stay held
        assert r.acker.flush(5)
        assert rpc.acked == ["a0"]
        # A redelivery of "0" (acknowledged), of "2" (held: its new ack id goes beside the old one,
        # as the order answers arrive in does not tell which delivery is the newest), "5" twice in
        # one response (one message, both ack ids), and "4", new.
        r.accept(
            "s",
            _response(
                [
                    {"ack_id": "b0", "message_id": "0"},
                    {"ack_id": "b2", "message_id": "2"},
                    {"ack_id": "b5", "message_id": "5"},
                    {"ack_id": "c5", "message_id": "5"},
                    {"ack_id": "b4", "message_id": "4"},
                ]
            ),
            Reservation(5, 0),
        )
        assert r.counters.get("received") == 6
        assert r.counters.get("redeliveredWhileHeld") == 2 and r.counters.get("redeliveriesDropped") == 1
        taken = r.take()
        assert [m for c in taken for m in c.message_ids] == ["1", "2", "3", "5", "4"]
        r.ack(taken)
        assert r.acker.flush(5)
        assert sorted(rpc.acked) == sorted(["a0", "b0", "a1", "a2", "b2", "a3", "b5", "c5", "b4"])
    finally:
        r.shutdown(hand_back=False, within=1)


def test_a_message_delivered_twice_is_leased_and_handed_back_by_every_ack_id():
    """Two Pulls cross: Pub/Sub delivers "7" to one puller, then again to the other, and the second
    answer is read first. Only Pub/Sub knows which delivery's ack id acts, so the lease is extended
    and the message handed back with both (found by the simulation, seed 577 of driver/posix: the
    receiver kept the ack id that arrived last, extended a lease that did not exist, and an
    AvailableNow run ended while the message stayed leased to nobody)."""
    from crdb_pubsub.source.driver.flow import Reservation

    rpc = _AnsweringRpc()
    r = Receiver(rpc, ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    r.start()
    try:
        r.accept("s", _response([{"ack_id": "newer", "message_id": "7"}]), Reservation(1, 0))
        r.accept("s", _response([{"ack_id": "older", "message_id": "7"}]), Reservation(1, 0))
        (chunk,) = r.take()
        assert sorted(chunk.fresh_ack_ids()) == ["newer", "older"]
        extended: list[list[str]] = []
        rpc.modify_ack_deadline = lambda sub, ids, seconds, total=None: (extended.append(list(ids)), _ok(ids))[1]
        r.leaser.extend([chunk], 10)
        assert sorted(extended[-1]) == ["newer", "older"]
        r.shutdown(hand_back=True, within=2)
        assert sorted(extended[-1]) == ["newer", "older"]  # the hand-back (ModifyAckDeadline 0)
    finally:
        r.shutdown(hand_back=False, within=1)


def _ok(ids):
    from crdb_pubsub.source.transport import AckResult

    return AckResult(confirmed=list(ids))


class _RefusingHandBacks(_AnsweringRpc):
    """Extends leases; every hand-back (ModifyAckDeadline 0) is lost on the way."""

    def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
        if seconds == 0:
            from google.api_core.exceptions import DeadlineExceeded

            raise DeadlineExceeded("ModifyAckDeadline: the request was lost")
        return _ok(ack_ids)


def test_a_hand_back_that_failed_is_reported_as_a_lease_the_next_run_waits_out():
    """An AvailableNow run hands back what was published after its cutoff, and the hand-back is
    lost: those messages stay leased, to nobody, for the whole lease the leaser last granted (60 s
    here, not the subscription's 10 s). Shutdown must say so, or the next AvailableNow run takes
    Pub/Sub's empty answers for a drained subscription and ends with them unread (found by the
    simulation, seed 440 of driver/posix)."""
    import time

    from crdb_pubsub.source.driver.flow import Reservation

    r = Receiver(
        _RefusingHandBacks(), ["s"], lease_seconds=60, max_lease_seconds=600, max_messages=1000, max_bytes=1 << 30
    )
    r.start()
    try:
        r.set_cutoff(1_600_000_000 * 10**6)  # both messages were published after it
        r.accept("s", _response([{"ack_id": f"a{i}", "message_id": str(i)} for i in range(2)]), Reservation(2, 0))
        r.leaser.extend(list(r._later), 60)
        before = time.time()
        assert r.end_available_now(within=2)
        leased_until = r.shutdown(hand_back=True, within=2)
        assert leased_until >= before + 59, f"reported leased until {leased_until - before:.1f} s from now"
    finally:
        r.shutdown(hand_back=False, within=1)


def test_a_hand_back_waiting_for_a_renewal_keeps_its_room_until_sent():
    """A chunk handed back while its renewal is in flight is handed back once the renewal landed
    (see tests/source/pubsub/test_leaser.py); until then it is still held, and counts against
    maxOutstandingMessages (found by the simulation, seed 350 of driver/posix on 7772b89: its room
    was freed at once, and the receiver held 18 with a bound of 15)."""
    from crdb_pubsub.source.driver.flow import Reservation

    renewing, answer = threading.Event(), threading.Event()
    calls: list[tuple[int, list[str]]] = []

    class _Info60:
        ack_deadline_seconds = 60  # no extension at once on receipt

    class _SlowRenewals(_AnsweringRpc):
        def get_subscription(self, subscription):
            return _Info60()

        def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
            calls.append((seconds, list(ack_ids)))
            if seconds:
                renewing.set()
                answer.wait(5)
            return _ok(ack_ids)

    r = Receiver(_SlowRenewals(), ["s"], lease_seconds=60, max_lease_seconds=600, max_messages=1000, max_bytes=1 << 30)
    r.start()
    try:
        r.set_cutoff(1_600_000_000 * 10**6)  # both are published after it: held apart, handed back
        r.accept("s", _response([{"ack_id": f"a{i}", "message_id": str(i)} for i in range(2)]), Reservation(2, 0))
        later = list(r._later)
        t = threading.Thread(target=r.leaser.extend, args=(later, 60))
        t.start()
        assert renewing.wait(5)
        assert r.hand_back_later() == 2
        assert r.flow.held_messages == 2, "its room was freed before it was handed back"
        assert [s for s, _ in calls] == [60]  # no hand-back overtaking the renewal
        answer.set()
        t.join(5)
        assert r.acker.flush(5)
        assert [s for s, _ in calls] == [60, 0]
        assert r.flow.held_messages == 0
    finally:
        answer.set()
        r.shutdown(hand_back=False, within=1)


def test_a_hand_back_keeps_its_room_until_it_is_queued():
    """An AvailableNow run hands back what was published after its cutoff; until the hand-back
    (ModifyAckDeadline 0) is queued those messages are still held, and a puller given their room
    in between holds more than maxOutstandingMessages (found by the simulation's loaded machine,
    seed 1463 of driver/posix and 646 of driver/gs on 17201c3: the hand-back's thread freed the
    room, lost the CPU, and the pullers filled it: 19 held with a bound of 15)."""
    from crdb_pubsub.source.driver.flow import Reservation
    from crdb_pubsub.source.pubsub.acker import NACK

    r = Receiver(_AnsweringRpc(), ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=2, max_bytes=1 << 30)
    r.start()
    try:
        r.set_cutoff(1_600_000_000 * 10**6)  # both are published after it: held apart, handed back
        r.accept("s", _response([{"ack_id": f"a{i}", "message_id": str(i)} for i in range(2)]), Reservation(2, 0))
        held_when_queued: list[int] = []
        submit = r.acker.submit

        def seeing_the_room(job):
            if job.kind == NACK:
                held_when_queued.append(r.flow.held_messages)
            return submit(job)

        r.acker.submit = seeing_the_room
        assert r.hand_back_later() == 2
        assert held_when_queued == [2], "their room was given back before their hand-back was queued"
        assert r.acker.flush(5)
        assert r.flow.held_messages == 0
    finally:
        r.shutdown(hand_back=False, within=1)


def test_a_puller_waiting_for_room_when_the_run_ends_sends_no_pull():
    """An AvailableNow run ends while a puller waits for room that later messages fill; the end
    hands them back and gives their room back, and a Pull sent with it would bring them again at
    once (Pub/Sub redelivers what was handed back first): a third delivery attempt for messages
    published during the run (found by `test_available_now_on_a_live_topic_ends_within_bounds`,
    failing 7 of 32 runs on 074ec3b and 3 of 36 on 17201c3)."""
    import time

    cutoff_s = 1_700_000_000
    pulls_after_the_end: list[int] = []
    ended = threading.Event()

    class _OneOldOneLater(_AnsweringRpc):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def pull(self, subscription, max_messages, timeout, *, return_immediately=False):
            self.calls += 1
            if ended.is_set():
                pulls_after_the_end.append(max_messages)
            if self.calls == 1:  # published before the cutoff: buffered, its room held
                return _response([{"ack_id": "a0", "message_id": "0", "seconds": cutoff_s - 10}])
            if self.calls == 2:  # after it: held apart, handed back when the run ends
                return _response([{"ack_id": "a1", "message_id": "1", "seconds": cutoff_s + 10}])
            time.sleep(0.05)
            return _response([])

    r = Receiver(_OneOldOneLater(), ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=2, max_bytes=1 << 30)
    r.set_cutoff(cutoff_s * 10**6)
    r.start()
    try:
        assert r.wait(lambda: r.flow.held_messages == 2, 5), "the two answers never arrived"
        time.sleep(0.2)  # the pullers are waiting for room now
        ended.set()
        assert r.end_available_now(within=2)
        time.sleep(0.5)
        assert pulls_after_the_end == [], "a Pull went out with the room of the messages just handed back"
    finally:
        r.shutdown(hand_back=False, within=1)


@pytest.mark.parametrize("lookup_at", ["before the commit", "midway through the commit"])
def test_a_redelivery_sorted_while_its_batch_is_acknowledged_is_not_taken_again(lookup_at):
    """Spark's commit acknowledges a batch while a puller sorts a Pull's answer that redelivers one
    of its messages: the puller looks the id up among the acknowledged ones (outside the receiver's
    lock) just before the commit, or while the commit holds the lock with the batch out of the
    held index and not yet among the acknowledged ids, and reaches the held ones after. After a
    restart every message of the batch an earlier run planned comes back at once while the new run
    acknowledges it (the Spark 4.1.4 AvailableNow smoke run under load: 200 messages written twice;
    the simulation's stalled threads, seed 59 of driver/posix, found the second interleaving).
    Whichever thread goes first, the redelivery is never taken into a batch again, and its ack id
    is acknowledged."""
    from crdb_pubsub.source.driver.flow import Reservation

    rpc = _AnsweringRpc()
    r = Receiver(rpc, ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    r.start()
    try:
        r.accept("s", _response([{"ack_id": "a0", "message_id": "0"}]), Reservation(1, 0))
        batch = r.take()  # planned: Spark runs it
        committing, looked_up, acknowledged = threading.Event(), threading.Event(), threading.Event()
        lookup, remember = r.remembered.seen, r.acks.remember

        def descheduled_after_the_first_lookup(sub, mids, now):
            out = lookup(sub, mids, now)
            if not looked_up.is_set():
                looked_up.set()
                acknowledged.wait(5)  # the puller loses the CPU here; the commit's thread runs
            return out

        def descheduled_before_remembering(chunks):
            committing.set()
            if lookup_at != "before the commit":
                looked_up.wait(5)  # the commit's thread loses the CPU here, the lock held
            return remember(chunks)

        r.remembered.seen = descheduled_after_the_first_lookup
        r.acks.remember = descheduled_before_remembering

        def sort_the_redelivery() -> None:
            if lookup_at != "before the commit":
                committing.wait(5)
            r.accept("s", _response([{"ack_id": "b0", "message_id": "0"}]), Reservation(1, 0))

        puller = threading.Thread(target=sort_the_redelivery)
        puller.start()
        if lookup_at == "before the commit":
            assert looked_up.wait(5)
        r.ack(batch)  # Spark committed the batch
        acknowledged.set()
        puller.join(10)
        assert not puller.is_alive()
        assert [m for c in r.take() for m in c.message_ids] == []
        assert r.acker.flush(5)
        assert sorted(rpc.acked) == ["a0", "b0"]
    finally:
        r.shutdown(hand_back=False, within=1)


class _SlowToExtend(_AnsweringRpc):
    """Answers every Pull with 10 new messages; a lease extension is answered only once ``answer`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.pulls = 0
        self.extended: list[str] = []
        self.answer = threading.Event()
        self._lock = threading.Lock()

    def pull(self, subscription, max_messages, timeout, *, return_immediately=False):
        import time

        time.sleep(0.01)
        with self._lock:
            first, self.pulls = 10 * self.pulls, self.pulls + 1
        return _response([{"ack_id": f"a{i}", "message_id": str(i)} for i in range(first, first + 10)])

    def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
        if seconds:
            self.answer.wait(10)
            with self._lock:
                self.extended.extend(ack_ids)
        return _ok(ack_ids)


def test_a_subscription_deadline_shorter_than_the_lease_does_not_hold_the_next_pull():
    """``gcloud pubsub subscriptions create`` gives a subscription a 10 s ack deadline; the
    connector leases for 60 s by default, so every answer's messages are extended at once on
    receipt. A puller that waited for that extension's answer before its next Pull paid a second
    round trip per answer: on the service's terms the receiver alone drained 21,000 messages a
    second against 31,000 with a 60 s subscription. The extension goes on while the Pulls go on."""
    import time

    rpc = _SlowToExtend()
    r = Receiver(rpc, ["s"], lease_seconds=60, max_lease_seconds=600, max_messages=100_000, max_bytes=1 << 30)
    r.start()
    try:
        end = time.monotonic() + 5
        while rpc.pulls < 10 and time.monotonic() < end:
            time.sleep(0.01)
        assert rpc.pulls >= 10, f"{rpc.pulls} Pulls in 5 s: the pullers waited for the lease extensions' answers"
        rpc.answer.set()
        with r._cond:
            held = {a for c in r._live for a in c.fresh_ack_ids()}
        end = time.monotonic() + 5
        while not held <= set(rpc.extended) and time.monotonic() < end:
            time.sleep(0.01)
        assert held <= set(rpc.extended), "a message held was not extended to the lease"
    finally:
        rpc.answer.set()
        r.shutdown(hand_back=False, within=2)


def test_a_pull_answered_while_stopping_whose_hand_back_was_lost_is_reported_leased():
    """A Pull in flight when the query stops is answered after it: its messages are handed back at
    once. The transport answers a lost hand-back with the ids it failed for, not an exception.
    Taken as done, the messages stayed leased, to nobody, for their deadline, and the next
    AvailableNow run read Pub/Sub's empty answers as a drained subscription and ended with them
    unread (found by the simulation, seed 318 of driver/gs on 0f8644c)."""
    import time

    from crdb_pubsub.source.transport import AckResult

    in_flight, answer = threading.Event(), threading.Event()

    class _LostHandBacks(_AnsweringRpc):
        def pull(self, subscription, max_messages, timeout, *, return_immediately=False):
            if in_flight.is_set():  # the other puller: nothing
                time.sleep(0.05)
                return _response([])
            in_flight.set()
            answer.wait(5)
            return _response([{"ack_id": "late-a", "message_id": "1"}])

        def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
            if seconds == 0:
                return AckResult(failed=dict.fromkeys(ack_ids, "DeadlineExceeded: the request was lost"))
            return _ok(ack_ids)

    r = Receiver(_LostHandBacks(), ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    r.start()
    assert in_flight.wait(5)
    stopping = threading.Timer(0.2, answer.set)  # answered once the shutdown began
    stopping.start()
    leased_until = r.shutdown(hand_back=True, within=3)
    stopping.join()
    assert leased_until > time.time(), "a message leased to nobody was not reported"


class _OrderedInfo(_Info):
    enable_message_ordering = True


class _SlowAcknowledgements(_AnsweringRpc):
    """An ordered subscription whose acknowledgements and hand-backs are answered once released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def get_subscription(self, subscription):
        return _OrderedInfo()

    def acknowledge(self, subscription, ack_ids, *, total=None):
        self.release.wait(10)
        return super().acknowledge(subscription, ack_ids, total=total)

    def modify_ack_deadline(self, subscription, ack_ids, seconds, *, total=None):
        if seconds == 0:
            self.release.wait(10)
        return _ok(ack_ids)


def test_a_hand_back_of_messages_published_after_the_cutoff_holds_no_earlier_message_back():
    """On an ordered subscription a Pull proves nothing about what waits while the run holds or
    acknowledges messages: Pub/Sub holds their keys' next ones back. What an AvailableNow run hands
    back because it was published after its cutoff holds back only later messages still (a key's
    come in publish order), so a Pull sent while that hand-back is in flight counts as evidence.
    (Found by the simulation, seed 2025 of driver/posix: messages after the cutoff filled
    maxOutstandingMessages=15; each hand-back gave room the pullers took at once, every Pull went
    while one was in flight, and the run never ended.)"""
    from crdb_pubsub.source.driver.flow import Reservation

    cutoff_s = 1_700_000_100
    rpc = _SlowAcknowledgements()
    r = Receiver(rpc, ["s"], lease_seconds=10, max_lease_seconds=60, max_messages=1000, max_bytes=1 << 30)
    r.open()
    r.acker.start()
    try:
        r.set_cutoff(cutoff_s * 10**6)
        early = {"ack_id": "a0", "message_id": "0", "ordering_key": "k", "seconds": cutoff_s - 1}
        later = [
            {"ack_id": f"a{i}", "message_id": str(i), "ordering_key": "k", "seconds": cutoff_s + i} for i in (1, 2)
        ]
        r.accept("s", _response([early, *later]), Reservation(3, 0))
        assert r.hand_back_later() == 2
        assert not r.acker.flush(0), "the hand-back is not in flight"
        sent = r.sending("s")
        assert sent.outstanding, "the message before the cutoff is held: its key's next ones wait"
        r.ack(r.take())
        assert r.sending("s").outstanding, "its acknowledgement is in flight: its key's next ones wait"
        rpc.release.set()
        assert r.acker.flush(5)
        rpc.release.clear()
        # Only later messages handed back, and that hand-back in flight.
        r.accept("s", _response([{**m, "ack_id": "b" + m["ack_id"]} for m in later]), Reservation(2, 0))
        assert r.hand_back_later() == 2
        assert not r.acker.flush(0), "the hand-back is not in flight"
        assert not r.sending("s").outstanding, "a hand-back of later messages counted as holding earlier ones back"
    finally:
        rpc.release.set()
        r.shutdown(hand_back=False, within=1)
