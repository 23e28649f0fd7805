"""A task's claim on its slice (executors/task.py, executors/mode.py): an attempt pulls only while
its claim allows writes; what an attempt that died holding it pulled stays leased, to nobody, for
as long as the longest lease it may have had, and no empty answer before then proves its
subscription drained (neither the retry's, nor the driver's when no retry ran)."""

from __future__ import annotations

import dataclasses
import time

import pyarrow as pa
import pytest
from google.api_core import exceptions as gexc

from crdb_pubsub.source.executors import store, task
from crdb_pubsub.source.executors.store import SliceInfo, SliceStore
from crdb_pubsub.source.storage import open_storage
from crdb_pubsub.source.storage.lease import Lease, LeaseLost
from spark_calls import Logs, SparkCalls, _roundtrip, ids_of

from .one_task import SUB, SlowPulls, one_order, read_slice

pytestmark = pytest.mark.virtual_time  # claims and leases lapse on the virtual clock (tests/virtual_time.py)


class _StalledRenewals:
    """The stateDir's storage with every swap of a claim after the first (the claim itself) stalling
    for ``stall`` seconds before it lands, as a write does when the request queued."""

    def __init__(self, storage, stall: float) -> None:
        self._storage = storage
        self._stall = stall
        self.claims = 0

    def __getattr__(self, name):
        return getattr(self._storage, name)

    def swap(self, key, *args, **kwargs):
        if key.endswith(".claim"):
            self.claims += 1
            if self.claims > 1:
                time.sleep(self._stall)
        return self._storage.swap(key, *args, **kwargs)


def test_a_task_whose_claim_may_have_lapsed_sends_no_more_pulls_and_hands_its_messages_back(
    fake, tmp_path, monkeypatch
):
    """The claim's renewals stall in the storage while the task still pulls (a claim of 3 s, a
    margin of 0.5 s, a pull of 4 s). Once the claim may have lapsed another attempt can take it
    over and pull the slice again: a task that went on pulling would hold its messages beside
    that attempt's, past the share. It stops sending Pulls when its claim stops allowing writes,
    hands back what it holds and fails (Spark retries it)."""

    ttl, margin = 3.0, 0.5
    monkeypatch.setattr(store, "CLAIM_TTL_SECONDS", ttl)
    monkeypatch.setattr(store, "CLAIM_MARGIN_SECONDS", margin)
    stalled = _StalledRenewals(open_storage(str(tmp_path)), stall=30.0)
    monkeypatch.setattr(task, "_storage", lambda state_dir: stalled)
    fake.create_subscription(SUB, ack_deadline=60)
    fake.publish(SUB, [b"x" * 100] * 5000)
    slow = SlowPulls(fake, lambda n: 0.25, cap=100, share=5000)
    with pytest.raises(LeaseLost, match="may have expired"):
        read_slice(tmp_path, one_order(max_messages=5000, seconds=4.0))
    assert stalled.claims >= 2, "no renewal was attempted"
    sent = [came for came, _ in slow.spans]
    # Writes stop at the expiry less the margin; the last Pull checked before that may reach the
    # server a little later, but before the expiry: nobody takes the claim over before it plus the margin.
    assert max(sent) < slow.first + ttl, (
        f"a Pull went {max(sent) - slow.first:.2f} s after the claim, which allowed writes for {ttl - margin} s"
    )
    delivered = [m for m in fake.deliveries if fake.deliveries[m]]
    assert delivered and set(fake.nacks) == set(delivered), "what the task held was not handed back"


def test_a_retry_that_takes_over_a_dead_attempts_claim_says_how_long_its_messages_may_stay_leased(fake, tmp_path):
    """The first attempt died holding the claim, after pulling from a subscription whose deadline
    (60 s) is longer than ``ackDeadlineSeconds`` (30 s): what it pulled stays leased, to nobody, for
    up to the subscription's deadline, and no empty answer before then proves the subscription
    drained (an AvailableNow run that took one as proof ended with those messages unread: the
    simulation's executors/gs seed 1170)."""

    storage = open_storage(str(tmp_path))
    claim = SliceStore(storage)._claim(1, 0)
    Lease(storage, claim, ttl=10, margin=2, clock=lambda: time.time() - 60).acquire(wait=0)  # died 48 s ago
    fake.create_subscription(SUB, ack_deadline=60)
    fake.publish(SUB, [b"x" * 100] * 10)
    order = dataclasses.replace(one_order(max_messages=10, deadline=60), lease_seconds=30)
    t0 = time.time()
    read_slice(tmp_path, order)
    info = SliceInfo.of(SliceStore(storage).read(1, 0).schema)
    assert info.subs[SUB].shadow_until >= t0 + 60, (
        f"shadow {info.subs[SUB].shadow_until - t0:.0f} s from the takeover, the subscription's deadline 60 s"
    )


class _FirstAnswerLost:
    """The first Pull is served, its messages leased, and its answer lost: the client gets
    DeadlineExceeded at its deadline (a Pull answered after its client gave up)."""

    def __init__(self, fake) -> None:
        self._pull = fake.pull
        self.calls = 0
        self.lost: list[str] = []
        self.sent = 0.0
        fake.pull = self

    def __call__(self, sub, max_messages, timeout, return_immediately):
        self.calls += 1
        if self.calls > 1:
            return self._pull(sub, max_messages, timeout, return_immediately)
        self.sent = time.time()
        self.lost = [m.mid for m in self._pull(sub, max_messages, timeout, return_immediately)]
        time.sleep(timeout)
        raise gexc.DeadlineExceeded("Deadline Exceeded")


def test_an_attempt_that_lost_its_claim_tells_its_retry_how_long_a_lost_answer_leases_messages(
    fake, tmp_path, monkeypatch
):
    """An attempt's first Pull is answered after it gave up (its messages leased to nobody for the
    subscription's deadline, 60 s); the attempt then loses its claim (its renewals stall: a pause of
    its process does the same), hands back what it holds and releases the claim for its retry,
    noting until when what it could not hand back stays leased. The lost answer's messages are
    among those: no empty answer of the retry before their lease lapses proves the subscription
    drained (the simulation's executors/posix seed 127 once call pauses were drawn: an
    AvailableNow run ended with 6 of 150 messages unread)."""

    ttl, margin = 3.0, 0.5
    monkeypatch.setattr(store, "CLAIM_TTL_SECONDS", ttl)
    monkeypatch.setattr(store, "CLAIM_MARGIN_SECONDS", margin)
    storage = open_storage(str(tmp_path))
    monkeypatch.setattr(task, "_storage", lambda state_dir: _StalledRenewals(storage, stall=5.0))
    fake.create_subscription(SUB, ack_deadline=60)
    fake.publish(SUB, [b"x" * 100] * 5000)
    lost = _FirstAnswerLost(fake)
    SlowPulls(fake, lambda n: 0.25, cap=100, share=5000)
    order = one_order(max_messages=5000, seconds=4.0)
    with pytest.raises(LeaseLost, match="may have expired"):
        read_slice(tmp_path, order)
    assert lost.lost, "the lost answer brought nothing"
    monkeypatch.setattr(task, "_storage", lambda state_dir: storage)
    read_slice(tmp_path, order)  # the retry
    info = SliceInfo.of(SliceStore(storage).read(1, 0).schema)
    assert info.subs[SUB].last_sent < lost.sent + 60, "the retry came after the lost answer's leases lapsed"
    assert info.subs[SUB].shadow_until >= lost.sent + 60, (
        f"the retry's shadow ends {info.subs[SUB].shadow_until - lost.sent:.0f} s after the lost answer's Pull; "
        "its messages stay leased to nobody for 60 s"
    )


def test_an_available_now_run_waits_out_the_leases_of_a_task_that_died_holding_its_claim(fake, make_reader, tmp_path):
    """Task 1 of the run's first batch claims its slice, pulls and dies before recording it, and
    no retry runs (the sink read the batch only in part); Spark commits the batch. What it pulled
    stays leased for the subscription's deadline (60 s), longer than ackDeadlineSeconds (30 s): the
    run must read it once that lapses, not end on an empty answer before (the simulation's
    executors/gs seed 1170, on the retry's side)."""
    fake.create_subscription(SUB, ack_deadline=60)
    ids = fake.publish(
        SUB, [f'{{"Key":[{i}],"Value":{{"after":{{"id":{i}}}}},"Topic":"t"}}'.encode() for i in range(40)]
    )
    reader = make_reader(SUB, receiver="executors", stateDir=tmp_path / "state", numPartitions=2, ackDeadlineSeconds=30)
    logs = Logs()
    s = SparkCalls(reader, logs, "4.3")
    s.start()
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    first, second = reader.partitions(start, end)
    claim = SliceStore(open_storage(str(tmp_path / "state"))).claim(second.batch_id, second.index, wait=0)
    claim.stop_renewing()  # the attempt dies: its claim is never released
    dead = [m.mid for m in fake.pull(SUB, 5, 1.0, True)]
    assert dead, "the dead attempt pulled nothing"
    got = ids_of(list(_roundtrip(reader).read(first)))
    logs.offsets[0] = end
    logs.commits.add(0)
    s = SparkCalls(reader, logs, "4.3")
    s.start()
    t0 = time.monotonic()
    while s.trigger():
        assert time.monotonic() - t0 < 300, "the AvailableNow run did not end"
    got += s.ids()
    missing = set(ids) - set(got)
    assert not missing, (
        f"the run ended with {len(missing)} messages unread, {len(set(dead) & missing)} of them the dead attempt's"
    )


class _ZombieWriteLands:
    """Wraps the fake's Pull: as the first Pull of the attempt under test is answered, another
    attempt's write of the same slice lands (one frozen as it wrote, whose claim this attempt took
    over); it pulled nothing. Every hand-back (ModifyAckDeadline 0) after that is lost."""

    def __init__(self, fake, storage, batch_id: int, index: int) -> None:
        self._fake = fake
        self._pull = fake.pull
        self._nack = fake.modify_ack_deadline
        self._storage = storage
        self._key = SliceStore(storage).key(batch_id, index)
        self.landed = False
        self.pulled: list[str] = []
        self.lost: list[str] = []
        fake.pull = self
        fake.modify_ack_deadline = self.modify_ack_deadline

    def __call__(self, sub, max_messages, timeout, return_immediately):
        got = self._pull(sub, max_messages, timeout, return_immediately)
        self.pulled += [m.mid for m in got]
        if not self.landed:
            self.landed = True
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, store.SLICE_SCHEMA.with_metadata(task._empty_info().metadata())) as writer:
                writer.write_table(store.SLICE_SCHEMA.empty_table())
            assert self._storage.create(self._key, sink.getvalue().to_pybytes())
        return got

    def modify_ack_deadline(self, sub, ack_ids, seconds):
        if seconds == 0 and self.landed:
            self.lost.extend(ack_ids)
            raise gexc.ServiceUnavailable("the hand-back was lost")
        return self._nack(sub, ack_ids, seconds)


def test_an_available_now_run_waits_out_the_leases_of_an_attempt_that_lost_its_slice_to_another(
    fake, make_reader, tmp_path
):
    """An attempt of task 1 pulls its share, then finds the slice recorded by another attempt (one
    frozen as it wrote, whose claim it had taken over: its write landed when it woke). What it
    pulled is not the slice's: it hands it back, and the hand-back is lost, so those messages stay
    leased, to nobody, for the subscription's deadline (60 s). The run must read them once that
    lapses, not end on the other task's empty answers before (the planner knows nothing of this
    attempt but its claim)."""
    fake.create_subscription(SUB, ack_deadline=60)
    ids = fake.publish(
        SUB, [f'{{"Key":[{i}],"Value":{{"after":{{"id":{i}}}}},"Topic":"t"}}'.encode() for i in range(40)]
    )
    state = tmp_path / "state"
    reader = make_reader(SUB, receiver="executors", stateDir=state, numPartitions=2, ackDeadlineSeconds=30)
    logs = Logs()
    s = SparkCalls(reader, logs, "4.3")
    s.start()
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    first, second = reader.partitions(start, end)
    zombie = _ZombieWriteLands(fake, open_storage(str(state)), second.batch_id, second.index)
    got = ids_of(list(_roundtrip(reader).read(second)))
    assert zombie.pulled and set(zombie.lost) and not got, "the attempt did not lose its slice as staged"
    got += ids_of(list(_roundtrip(reader).read(first)))
    logs.offsets[0] = end
    logs.commits.add(0)
    s = SparkCalls(reader, logs, "4.3")
    s.start()
    t0 = time.monotonic()
    while s.trigger():
        assert time.monotonic() - t0 < 300, "the AvailableNow run did not end"
    got += s.ids()
    missing = set(ids) - set(got)
    assert not missing, (
        f"the run ended with {len(missing)} messages unread, {len(set(zombie.pulled) & missing)} of them "
        "the losing attempt's"
    )


def test_a_task_renews_no_lease_once_its_claim_may_have_lapsed(fake, tmp_path, monkeypatch):
    """The claim's renewals stall in the storage while a Pull of the task hangs (as when its
    process is paused: its leaser's thread wakes first). Once the claim may have lapsed, another
    attempt can take it over and waits out the leases this one held then, no longer: a renewal
    sent after that leases its messages to nobody past the wait, and an empty answer of the other
    attempt's after the wait proves the subscription drained while they are still leased."""
    ttl, margin = 3.0, 0.5
    monkeypatch.setattr(store, "CLAIM_TTL_SECONDS", ttl)
    monkeypatch.setattr(store, "CLAIM_MARGIN_SECONDS", margin)
    stalled = _StalledRenewals(open_storage(str(tmp_path)), stall=30.0)
    monkeypatch.setattr(task, "_storage", lambda state_dir: stalled)
    fake.create_subscription(SUB, ack_deadline=2)
    fake.publish(SUB, [b"x" * 100] * 50)
    slow = SlowPulls(fake, lambda n: 0.1 if n == 0 else 6.0, cap=20, share=50)
    renewals: list[float] = []
    modify = fake.modify_ack_deadline

    def renewal(sub, ack_ids, seconds):
        if seconds > 0:
            renewals.append(time.monotonic())
        return modify(sub, ack_ids, seconds)

    fake.modify_ack_deadline = renewal
    order = dataclasses.replace(one_order(max_messages=50, seconds=8.0, deadline=2), lease_seconds=2)
    with pytest.raises(LeaseLost, match="may have expired"):
        read_slice(tmp_path, order)
    assert renewals, "the task renewed nothing before its claim lapsed"
    late = [round(t - slow.first, 2) for t in renewals if t >= slow.first + ttl - margin]
    assert not late, f"renewals sent {late} s after the first Pull; the claim allowed writes for {ttl - margin} s"


def test_an_attempt_left_over_from_a_committed_batch_pulls_nothing(fake, make_reader, tmp_path):
    """A task attempt of batch 1 starts after Spark committed the batch (a speculative copy, or an
    attempt of a lost executor that ran on): the batch's slices are deleted at the commit, so it
    finds none. Were it to pull, nobody would acknowledge or wait out what it took, and an
    AvailableNow run could end with those messages leased to nobody (the simulation's
    executors/gs seed 1961). It yields nothing and pulls nothing."""
    fake.create_subscription(SUB, ack_deadline=60)
    body = '{{"Key":[{i}],"Value":{{"after":{{"id":{i}}}}},"Topic":"t"}}'
    fake.publish(SUB, [body.format(i=i).encode() for i in range(10)])
    reader = make_reader(SUB, receiver="executors", stateDir=tmp_path / "state", numPartitions=1)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    (task_1,) = reader.partitions(start, end)
    assert len(ids_of(list(_roundtrip(reader).read(task_1)))) == 10
    reader.commit(end)
    later = fake.publish(SUB, [body.format(i=i).encode() for i in range(10, 20)])
    assert ids_of(list(_roundtrip(reader).read(task_1))) == [], "the left-over attempt yielded rows"
    taken = [m for m in later if fake.deliveries[m]]
    assert not taken, f"the left-over attempt pulled {len(taken)} messages nobody will acknowledge or wait out"
