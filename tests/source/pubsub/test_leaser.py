"""The leaser on its own: a hand-back never overtaken by a renewal sent before it."""

from __future__ import annotations

import threading
import time

import pytest

from crdb_pubsub.source.pubsub.chunks import DONE, Chunk
from crdb_pubsub.source.pubsub.leaser import Leaser
from crdb_pubsub.source.transport import AckResult


def _chunk(name: str) -> Chunk:
    return Chunk("s", [name], [f"ack-{name}"], None, 1, 1, time.monotonic())


def test_a_hand_back_waits_for_the_renewal_in_flight():
    """A renewal sent just before its chunk is handed back may act after the hand-back: the
    message would then be leased, to nobody, for a whole lease (an AvailableNow run that handed it
    back reads no answer as proof of anything meanwhile, and the next run does not know to wait).
    So the leaser gives such a chunk back to its owner only once the renewal was answered."""
    in_flight, answer = threading.Event(), threading.Event()

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        in_flight.set()
        answer.wait(5)
        return AckResult(confirmed=list(ack_ids))

    released: list[list[str]] = []
    leaser = Leaser(
        renew,
        lease_seconds=60,
        max_lease_seconds=600,
        on_released=lambda cs: released.append([m for c in cs for m in c.message_ids]),
    )
    a, b = _chunk("a"), _chunk("b")
    leaser.add([a], 10.0, renew_now=True)
    leaser.start()
    try:
        assert in_flight.wait(5), "no renewal was sent"
        assert leaser.discard([a, b], handing_back=True) == [a]  # b: handed back at once by its owner
        assert released == []
        answer.set()
        assert leaser.wait_landed([a], 5)
        assert released == [["a"]]
    finally:
        answer.set()
        assert leaser.stop(timeout=2)


@pytest.mark.virtual_time
def test_a_hand_back_released_after_a_renewal_knows_the_lease_that_renewal_granted():
    """When a hand-back fails, its messages stay leased until the last lease asked for: the owner
    reads that bound (``leased_until``) when the renewal it waited for lets the hand-back go, and
    casts it as a shadow (no empty answer proves a subscription drained before it) or reports it to
    the next process. A renewal acts as late as it is answered (seconds, when the service is slow),
    granting its lease from then."""
    in_flight = threading.Event()

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        in_flight.set()
        time.sleep(8.0)  # a slow service: the renewal lands and is answered 8 s after it was sent
        return AckResult(confirmed=list(ack_ids))

    seen: list[float] = []
    leaser: Leaser

    def released(chunks: list[Chunk]) -> None:
        seen.append(leaser.leased_until(chunks))

    leaser = Leaser(renew, lease_seconds=60, max_lease_seconds=600, on_released=released)
    a = _chunk("a")
    leaser.add([a], 10.0, renew_now=True)
    leaser.start()
    try:
        assert in_flight.wait(5), "no renewal was sent"
        a.state = DONE  # its owner retires it as it hands it back
        assert leaser.discard([a], handing_back=True) == [a]
        assert leaser.wait_landed([a], 20)
        answered = time.monotonic()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen, "the hand-back was never released"
        assert seen[0] >= answered + 60 - 0.5, (
            f"released with the lease bound {seen[0] - answered:.1f} s from the renewal's answer; it granted 60 s"
        )
    finally:
        assert leaser.stop(timeout=10)


def _chunks(n: int, size: int) -> list[Chunk]:
    now = time.monotonic()
    return [
        Chunk(
            "s",
            [f"m{i}-{j}" for j in range(size)],
            [f"ack-{i}-{j}" for j in range(size)],
            None,
            1,
            1,
            now,
            proven_until=now + 10,
        )
        for i in range(n)
    ]


def _renew_at_once(requests: int, seen: list[list[str]]):
    """A renewal that is answered only when ``requests`` of them are in flight together."""
    together = threading.Barrier(requests, timeout=5)

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        seen.append(list(ack_ids))
        together.wait()  # one after another, the first waits alone and fails
        return AckResult(confirmed=list(ack_ids))

    return renew


def test_a_renewal_round_larger_than_one_request_sends_its_requests_at_once():
    """Messages received together come due together: a backlog of 1,000,000 held over its first
    renewal is 400 requests. From one thread, each waiting its round trip 25 ms away, such a round
    takes 10 s, and the leases of its last messages may lapse meanwhile. The requests go at once,
    each a whole number of chunks within the service's limits."""
    seen: list[list[str]] = []
    chunks = _chunks(5, 1000)  # 5,000 ack ids: three requests of at most 2,500 whole chunks
    leaser = Leaser(_renew_at_once(3, seen), lease_seconds=60, max_lease_seconds=600)
    leaser.add(chunks, 10.0, renew_now=True)
    sent = time.monotonic()
    leaser.start()
    try:
        end = time.monotonic() + 10
        while any(c.proven_until < sent + 60 for c in chunks) and time.monotonic() < end:
            time.sleep(0.01)
        assert sorted(map(len, seen)) == [1000, 2000, 2000]
        assert sorted(a for ids in seen for a in ids) == sorted(a for c in chunks for a in c.ack_ids)
        assert all(c.proven_until >= sent + 60 for c in chunks), "a request waited for another's answer"
    finally:
        assert leaser.stop(timeout=2)


def test_extending_from_the_callers_thread_sends_its_requests_at_once():
    """A receiver=executors task extends every chunk it pulled as it ends (the driver takes their
    leases over from there): 50,000 messages are 20 requests, which must not cost 20 round trips."""
    seen: list[list[str]] = []
    chunks = _chunks(4, 1000)
    leaser = Leaser(_renew_at_once(2, seen), lease_seconds=60, max_lease_seconds=600)
    sent = time.monotonic()
    leaser.extend(chunks, 60)
    assert sorted(map(len, seen)) == [2000, 2000]
    assert all(c.proven_until >= sent + 60 for c in chunks)


def test_chunks_added_that_are_not_due_run_no_round():
    """A window of small answers holds thousands of chunks: a round at every answer, each looking
    at every chunk held, cost more than sorting the answers (bench_driver.py: the leaser's thread
    2-4 us a message). An answer whose renewal is not due before the next round starts none."""
    rounds = []

    def clock() -> float:
        if threading.current_thread().name == "leaser-under-test":
            rounds.append(1)  # a round reads the clock once as it starts, and once after it
        return time.monotonic()

    leaser = Leaser(
        lambda sub, ids, seconds: AckResult(confirmed=list(ids)),
        lease_seconds=60,
        max_lease_seconds=600,
        clock=clock,
        name="leaser-under-test",
    )
    leaser.start()
    try:
        time.sleep(0.3)  # its first round, with nothing leased: the next is a second away
        before = len(rounds)
        for i in range(200):
            leaser.add([_chunk(f"m{i}")], 60.0)
            time.sleep(0.001)
        assert len(rounds) - before <= 4, f"{(len(rounds) - before) // 2} rounds for 200 chunks due in 30 s or more"
    finally:
        assert leaser.stop(timeout=2)


def test_a_chunk_due_before_the_next_round_is_renewed_in_time():
    """A round sleeps until the earliest renewal is due (up to a second); a chunk added with a
    shorter deadline than that is renewed before its lease lapses all the same."""
    renewed: dict[str, float] = {}

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        for a in ack_ids:
            renewed.setdefault(a, time.monotonic())
        return AckResult(confirmed=list(ack_ids))

    leaser = Leaser(renew, lease_seconds=60, max_lease_seconds=600)
    leaser.add([_chunk("long")], 60.0)
    leaser.start()
    try:
        time.sleep(0.3)  # the leaser now sleeps toward its next round
        added = time.monotonic()
        leaser.add([_chunk("short")], 1.5)  # renewed between 0.5 s and its lapse at 1.5 s
        deadline = added + 1.5
        while "ack-short" not in renewed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "ack-short" in renewed, "the chunk's lease lapsed unrenewed"
        assert renewed["ack-short"] - added < 1.5 - 0.5  # with the slack kept before a lease lapses
        assert "ack-long" not in renewed
    finally:
        assert leaser.stop(timeout=2)


def test_a_lease_as_short_as_its_slack_is_renewed_once_a_round():
    """A one-second lease is due again as soon as it is renewed (a renewal keeps a second of slack):
    each round renews it once, and the next round comes a tick later."""
    renewals = []
    leaser = Leaser(
        lambda sub, ids, seconds: renewals.append(time.monotonic()) or AckResult(confirmed=list(ids)),
        lease_seconds=1,
        max_lease_seconds=600,
    )
    leaser.add([_chunk("short")], 1.0)
    leaser.start()
    time.sleep(0.5)
    assert leaser.stop(timeout=2), "a renewal round did not end"
    assert 2 <= len(renewals) <= 10, f"{len(renewals)} renewals in 0.5 s"


@pytest.mark.virtual_time
def test_a_renewal_answered_after_the_proven_lease_ran_out_proves_nothing():
    """A standard subscription answers OK to a renewal of a lease that lapsed: the message may have
    been delivered again meanwhile, so the renewal extends the proof only if answered in time."""

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        time.sleep(3.0)  # answered 3 s after it was sent: after the proven lease (2 s) ran out
        return AckResult(confirmed=list(ack_ids))

    leaser = Leaser(renew, lease_seconds=60, max_lease_seconds=600)
    now = time.monotonic()
    late = Chunk("s", ["m"], ["a"], None, 1, 1, now, proven_until=now + 2.0)
    leaser.add([late], 2.0)
    leaser.extend([late], 60)
    assert late.proven_until == now + 2.0, "a late answer proved a lease"
    now = time.monotonic()
    in_time = Chunk("s", ["n"], ["b"], None, 1, 1, now, proven_until=now + 10.0)
    leaser.add([in_time], 10.0)
    leaser.extend([in_time], 60)
    assert in_time.proven_until >= now + 60


@pytest.mark.virtual_time
def test_a_renewal_shorter_than_the_lease_it_renews_proves_only_the_shorter_lease():
    """ModifyAckDeadline sets when a lease ends, it does not extend it: a Pull on a subscription
    whose deadline is 20 s leases a message for 20 s, and a renewal of 10 s sent at once ends that
    lease 10 s from then. On e54b009 the proof kept the Pull's 20 s (the larger of the two): an
    acknowledgement sent after the shortened lease lapsed counted as proven on a standard
    subscription, its id was remembered for the dedupe window only, and the redelivery that came
    716 s later was yielded a second time (finding drawn_executors_posix_6567). A renewal that
    failed may have acted all the same: the proof is the shorter of the two."""
    answers = [AckResult(confirmed=["a"]), AckResult(failed={"b": "TRANSIENT_FAILURE_UNORDERED_ACK_ID"})]

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        time.sleep(0.5)
        return answers.pop(0)

    leaser = Leaser(renew, lease_seconds=10, max_lease_seconds=600)
    now = time.monotonic()
    ok = Chunk("s", ["m"], ["a"], None, 1, 1, now, proven_until=now + 20.0)
    leaser.add([ok], 20.0)
    leaser.extend([ok], 10)
    assert ok.proven_until == now + 10.0, "the proof outlived the lease the renewal set"
    now = time.monotonic()
    failed = Chunk("s", ["n"], ["b"], None, 1, 1, now, proven_until=now + 20.0)
    leaser.add([failed], 20.0)
    leaser.extend([failed], 10)
    assert failed.proven_until == now + 10.0, "a failed renewal may have set the lease all the same"


def test_a_renewal_in_flight_that_may_shorten_the_lease_already_bounds_the_proof():
    """A renewal of 10 s sent while a Pull's lease of 20 s runs may set the lease to end 10 s from
    its arrival as soon as it is sent: what reads the proof meanwhile (a receiver=executors task
    recording its slice, an acknowledgement answered) must not count on the Pull's 20 s. On
    928a414 the proof kept the Pull's lease until the renewal was answered: a task recorded its
    slice while the renewal was in flight, the driver judged the acknowledgement sent 12.4 s later
    proven on a standard subscription (the lease had lapsed: Pub/Sub answers OK all the same), and
    the message, delivered again 770 s later, was yielded a second time (sim executors/posix seed
    1238)."""
    in_flight, answer = threading.Event(), threading.Event()

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        in_flight.set()
        answer.wait(5)
        return AckResult(confirmed=list(ack_ids))

    leaser = Leaser(renew, lease_seconds=10, max_lease_seconds=600)
    now = time.monotonic()
    c = Chunk("s", ["m"], ["a"], None, 1, 1, now, proven_until=now + 20.0)
    leaser.add([c], 20.0)
    t = threading.Thread(target=leaser.extend, args=([c], 10))
    t.start()
    assert in_flight.wait(5)
    try:
        assert c.proven_until <= time.monotonic() + 10.0, "the proof outlives the lease the renewal in flight may set"
    finally:
        answer.set()
        t.join(5)
    assert c.proven_until <= time.monotonic() + 10.0


@pytest.mark.virtual_time
def test_no_renewal_goes_once_the_process_may_no_longer_hold_messages():
    """A runner that missed its SIGTERM lives on beside the query's next run, which took the
    stateDir over and waits out only a lease (and a renewal's deadline) from then: the old
    runner's leaser must send no renewal once its stateDir lease no longer holds, and may again
    once it does (a brownout of the stateDir's storage that ended before anyone took it over).
    On 364c1b5 the sim's executors/posix seed 1026 ended an AvailableNow run with 5 messages that
    such a runner kept leasing for 17 s after the next run took over."""
    renewed: list[float] = []
    holds = [True]

    def renew(sub: str, ack_ids: list[str], seconds: int) -> AckResult:
        renewed.append(time.monotonic())
        return AckResult(confirmed=list(ack_ids))

    leaser = Leaser(renew, lease_seconds=10, max_lease_seconds=3600, may_renew=lambda: holds[0])
    a = _chunk("a")
    leaser.add([a], 10.0)
    leaser.start()
    try:
        time.sleep(30.0)
        assert len(renewed) >= 3, f"{len(renewed)} renewals in 30 s of 10 s leases"
        holds[0] = False
        until, before = leaser.leased_until([a]), len(renewed)
        time.sleep(60.0)
        assert len(renewed) == before, f"{len(renewed) - before} renewals after the stateDir was lost"
        assert leaser.leased_until([a]) == until
        holds[0] = True
        time.sleep(10.0)
        assert len(renewed) > before, "renewals did not resume once the stateDir was held again"
    finally:
        assert leaser.stop(timeout=10)
