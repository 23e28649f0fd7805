"""A task's Pulls in flight (executors/task.py): against a server that answers each Pull after a
round trip, a task keeps several in flight and fills its slice sooner; what the Pulls still in
flight bring once the share is full, or the time is up, is kept, never dropped or handed back."""

from __future__ import annotations

import time

import pytest

from crdb_pubsub.source.executors import task

from .one_task import SUB, SlowPulls, one_order, read_slice

pytestmark = pytest.mark.virtual_time  # the fake's waits and the source's on the virtual clock (tests/virtual_time.py)


def test_a_slow_server_gets_several_pulls_in_flight_and_the_slice_fills_sooner(fake, tmp_path):
    fake.create_subscription(SUB, ack_deadline=60)
    ids = fake.publish(SUB, [b"x" * 100] * 2000)
    assert read_slice(tmp_path / "w", one_order(max_messages=10, batch=0))[0] == ids[:10]  # what a first task costs
    delay = 0.25
    slow = SlowPulls(fake, lambda n: delay, cap=100, share=610)
    got, _ = read_slice(tmp_path / "a", one_order(max_messages=610))
    assert sorted(got, key=int) == ids[10:620] and len(set(got)) == 610
    assert slow.most >= 2, "one Pull at a time"
    assert not slow.over, "the Pulls in flight asked for more than the share left"
    # One Pull at a time waits a round trip an answer (the first asks for a few, no size known
    # yet; then six bring 100 each): the round trips overlap instead.
    assert slow.calls >= 4
    waited = sum(b - a for a, b in slow.spans)
    assert slow.busy() < 0.8 * waited, f"Pulls in flight {slow.busy():.2f} s of their {waited:.2f} s"
    assert not fake.nacks, "messages were handed back"


def test_what_pulls_in_flight_bring_after_the_share_filled_is_kept(fake, tmp_path):
    fake.create_subscription(SUB, ack_deadline=60)
    # Small messages first: the share's bytes look roomy; then one answer of large ones fills them
    # while the other Pull in flight, slower, still brings its own.
    small = fake.publish(SUB, [b"s" * 10] * 10)
    large = fake.publish(SUB, [b"L" * 1000] * 200)
    slow = SlowPulls(fake, lambda n: 0.5 if n == 2 else 0.02, cap=30, share=500)
    got, _ = read_slice(tmp_path, one_order(max_messages=500, max_bytes=20_000))
    assert slow.most >= 2
    delivered = [m for m in small + large if fake.deliveries[m]]
    # The first Pulls, one at a time, learn the size from ten small messages (the first asks for
    # one: the byte share holds less than ten of Pub/Sub's largest); the first answer of large
    # ones filled the share's bytes.
    assert len(delivered) == 10 + 30 + 30
    assert sorted(got, key=int) == delivered and len(set(got)) == len(got), "a message a Pull brought is not kept"
    assert not fake.nacks, "messages were handed back for lack of room"
    assert set(fake.unacked(SUB)) >= set(got)


def test_pulls_in_flight_when_the_time_is_up_are_waited_for_and_kept(fake, tmp_path):
    fake.create_subscription(SUB, ack_deadline=60)
    ids = fake.publish(SUB, [b"x" * 100] * 1000)
    # Every Pull after the first answers 0.4 s after it was sent; the task's time is 0.5 s: Pulls
    # are in flight when it is up.
    slow = SlowPulls(fake, lambda n: 0.0 if n == 0 else 0.4, cap=50, share=1000)
    got, took = read_slice(tmp_path, one_order(max_messages=1000, seconds=0.5))
    assert slow.most >= 2
    assert max(slow.answered) > slow.first + 0.5, "no Pull answered after the time was up"
    delivered = [m for m in ids if fake.deliveries[m]]
    assert len(delivered) > 10 + 50
    assert sorted(got, key=int) == delivered and len(set(got)) == len(got)
    assert not fake.nacks
    assert took < 2.0


def test_a_pull_that_fails_for_good_waits_for_the_others_and_hands_their_messages_back(fake, tmp_path):
    from google.api_core import exceptions as gexc

    fake.create_subscription(SUB, ack_deadline=60)
    fake.publish(SUB, [b"x" * 100] * 1000)
    # The second Pull of the first pair is refused, before the first one answers.
    refused = gexc.PermissionDenied("not allowed (fake)")
    SlowPulls(fake, lambda n: 0.2 if n == 1 else 0.02, cap=50, share=1000, fail=lambda n: refused if n == 2 else None)
    with pytest.raises(gexc.PermissionDenied):
        read_slice(tmp_path, one_order(max_messages=1000))
    delivered = [m for m in fake.deliveries if fake.deliveries[m]]
    assert len(delivered) == 10 + 50  # the first answer and the slow one still in flight
    assert set(fake.nacks) == set(delivered), "what the Pulls brought was not handed back"


def test_the_next_task_of_a_worker_starts_with_the_pulls_the_last_one_learned(fake, tmp_path):
    fake.create_subscription(SUB, ack_deadline=60)
    # More than the first task can pull in its time (16 x 100 / 0.1 s = 16,000 a second at most), so
    # the next task finds messages. A share far larger than what comes in the task's time: no Pull
    # is cut by it, every window counts.
    ids = fake.publish(SUB, [b"x" * 100] * 60_000)
    first = SlowPulls(fake, lambda n: 0.1, cap=100, share=1_000_000)
    got, _ = read_slice(tmp_path / "a", one_order(max_messages=1_000_000, seconds=3.0))
    learned = task._LEARNED[SUB]
    assert learned > task.START, f"a 0.1 s round trip and answers of 100 left the task at {learned} Pulls"
    assert first.most <= learned
    fake.pull = first._pull  # unwrap: the next task's server is as slow, counted afresh
    second = SlowPulls(fake, lambda n: 0.1, cap=100, share=1_000_000)
    got2, _ = read_slice(tmp_path / "b", one_order(max_messages=1_000_000, seconds=1.0, batch=2))
    assert second.most >= learned, f"the next task kept {second.most} Pulls in flight, not the {learned} learned"
    assert set(got).isdisjoint(got2) and set(got) | set(got2) <= set(ids)


class _SlowToExtend:
    """Wraps the fake's ModifyAckDeadline: a lease extension answers after a round trip; records when each was in flight."""

    def __init__(self, fake, delay: float) -> None:
        self._modify = fake.modify_ack_deadline
        self._delay = delay
        self.spans: list[tuple[float, float]] = []
        fake.modify_ack_deadline = self

    def __call__(self, sub, ack_ids, seconds):
        came = time.monotonic()
        if seconds:
            time.sleep(self._delay)
        try:
            return self._modify(sub, ack_ids, seconds)
        finally:
            if seconds:
                self.spans.append((came, time.monotonic()))


def test_a_task_keeps_pulling_while_lease_extensions_wait_for_their_answers(fake, tmp_path):
    """A subscription created by gcloud has a 10 s ack deadline, below the 60 s lease, so each
    answer is extended on receipt. A task that waited for those extensions' answers sent no Pull
    meanwhile: a round trip of extensions between answers left its Pulls idle, and the same slice
    took 0.55 s on the virtual clock against 0.29 s from a subscription of 60 s."""
    took = {}
    for deadline in (60, 10):
        sub = f"{SUB}-{deadline}"
        fake.create_subscription(sub, ack_deadline=deadline)
        ids = fake.publish(sub, [b"x" * 100] * 2000)
        warm = one_order(max_messages=10, batch=0, deadline=deadline, sub=sub)
        assert read_slice(tmp_path / f"w{deadline}", warm)[0] == ids[:10]
        slow = SlowPulls(fake, lambda n: 0.025, cap=100, share=1500)
        extending = _SlowToExtend(fake, 0.025)
        got, _ = read_slice(tmp_path / f"a{deadline}", one_order(max_messages=1500, deadline=deadline, sub=sub))
        assert sorted(got, key=int) == ids[10:1510]
        assert extending.spans, "nothing was extended"
        took[deadline] = max(slow.answered) - slow.first
        fake.pull, fake.modify_ack_deadline = slow._pull, extending._modify
    assert took[10] < 1.2 * took[60], f"the slice took {took[10]:.3f} s against {took[60]:.3f} s without extensions"
    assert not fake.nacks, "messages were handed back"


def test_a_failed_attempt_whose_hand_back_was_lost_leaves_its_retry_a_shadow(fake, tmp_path):
    """An attempt that fails after pulling hands its messages back and releases its claim. The
    transport answers a lost hand-back with the ids it failed for: taken as done, the messages
    stayed leased to nobody, the retry found the claim released and cast no shadow, and the
    AvailableNow run ended with them (and, on an ordered subscription, their keys' next messages)
    unread (found by the simulation, seed 466 of executors/gs on 81b7626)."""
    from google.api_core import exceptions as gexc

    from crdb_pubsub.source.executors.store import SliceStore

    fake.create_subscription(SUB, ack_deadline=60)
    fake.publish(SUB, [b"x" * 100] * 1000)
    refused = gexc.PermissionDenied("not allowed (fake)")
    slow = SlowPulls(fake, lambda n: 0.02, cap=50, share=1000, fail=lambda n: refused if n == 2 else None)
    modify = fake.modify_ack_deadline

    def lost_hand_backs(sub, ack_ids, seconds):
        if seconds == 0:
            raise gexc.DeadlineExceeded("ModifyAckDeadline: the request was lost (fake)")
        return modify(sub, ack_ids, seconds)

    fake.modify_ack_deadline = lost_hand_backs
    order = one_order(max_messages=1000)
    with pytest.raises(gexc.PermissionDenied):
        read_slice(tmp_path, order)
    failed_at = time.time()
    fake.pull, fake.modify_ack_deadline = slow._pull, modify
    read_slice(tmp_path, order)  # the retry
    recorded = SliceStore(task._storage(str(tmp_path))).read_acks(order.batch_id, order.index)
    assert recorded is not None
    shadow = recorded[1].subs[SUB].shadow_until
    assert shadow >= failed_at + 59, f"the retry's evidence is shadowed {shadow - failed_at:.1f} s, not a lease"


def test_a_tasks_size_probe_is_not_the_flow_control_holding_it_back(fake, tmp_path, monkeypatch):
    """A task's first Pull asks for a few on purpose (no message's size is known yet). That is not
    the room holding it back: reported so, the window it falls in went unjudged, and a fresh task
    on the service's terms spent 0.6 s of a 2 s pull at 2 Pulls in flight (the ramp's own pace is
    pubsub/test_concurrency.py's)."""
    from crdb_pubsub.source.pubsub.concurrency import Concurrency

    reported: list[tuple[int, bool]] = []  # (messages, held_back) of each answer, in order

    class Recording(Concurrency):
        def answered(self, now, latency, service, messages, held_back):
            reported.append((messages, held_back))
            return super().answered(now, latency, service, messages, held_back)

    monkeypatch.setattr(task, "Concurrency", Recording)
    fake.create_subscription(SUB, ack_deadline=60)
    fake.publish(SUB, [b"x" * 100] * 2_000)
    SlowPulls(fake, lambda n: 0.025, cap=300, share=1_000_000)
    read_slice(tmp_path, one_order(max_messages=1_000_000, seconds=0.5))
    probe, *rest = reported
    assert probe[0] == task.FIRST_PULL_MESSAGES and rest, reported[:3]
    assert not probe[1], "the size probe was reported as held back by the room"
    assert not any(held for _, held in rest), "a Pull was reported held back with a share far from full"
