"""Flow control, leases and AvailableNow against the fake Pub/Sub, where timing must be exact."""

from __future__ import annotations

import threading
import time

import pytest

from polling import wait_for
from spark_calls import Logs, SparkCalls, ids_of

SUB = "projects/p/subscriptions/flow"


def body(i: int, pad: int = 0) -> bytes:
    filler = f', "pad": "{"p" * pad}"' if pad else ""
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}{filler}}}}},"Topic":"t"}}'.encode()


@pytest.mark.virtual_time  # lets leases lapse (tests/virtual_time.py)
def test_available_now_on_a_live_topic_ends_within_bounds(fake, make_reader):
    """Scenario 3: a steady publisher never lets a Pull come back empty. The AvailableNow run still
    ends, reads the whole backlog published before it started, never holds more than
    maxOutstandingMessages, and does not let messages published after the cutoff lapse again and
    again (each lapse is a delivery attempt that a dead-letter policy counts)."""
    fake.create_subscription(SUB, ack_deadline=2)
    backlog = fake.publish(SUB, [body(i) for i in range(400)], publish_us=int((time.time() - 30) * 1e6))
    stop = threading.Event()
    live: list[str] = []

    def publisher() -> None:
        i = 10_000
        while not stop.is_set():
            live.extend(fake.publish(SUB, [body(i + k) for k in range(20)]))
            i += 20
            time.sleep(0.05)

    reader = make_reader(SUB, ackDeadlineSeconds=2, maxOutstandingMessages=100, maxMessagesPerTrigger=50)
    s = SparkCalls(reader, Logs(), "4.3")
    s.start()
    reader.prepareForTriggerAvailableNow()
    t = threading.Thread(target=publisher, daemon=True)
    t.start()
    held_max = 0
    try:
        t0 = time.monotonic()
        while s.trigger():
            m = reader.reportLatestOffset() or {}
            held_max = max(held_max, m.get("buffered", 0) + m.get("inFlight", 0) + m.get("laterHeld", 0))
            assert time.monotonic() - t0 < 90, "AvailableNow did not end on a live topic"
        time.sleep(3)  # two ack deadlines: a message left leased but unattended would lapse again
    finally:
        stop.set()
        t.join()
    got = s.ids()
    assert set(backlog) <= set(got), f"{len(set(backlog) - set(got))} backlog messages not read"
    assert len(got) == len(set(got))
    assert held_max <= 100, f"held {held_max} messages with maxOutstandingMessages=100"
    repeated = {mid: n for mid, n in fake.deliveries.items() if mid in set(live) and n > 2}
    assert not repeated, f"{len(repeated)} live messages delivered more than twice, e.g. {list(repeated.items())[:3]}"


@pytest.mark.virtual_time  # holds Pulls for seconds
def test_a_slow_pull_is_not_an_empty_subscription(fake, make_reader):
    """Scenario 3, conversely: against the real service a Pull that times out proves nothing (the
    service may hold a Pull until the deadline). AvailableNow must not take it for 'drained'."""
    fake.empty = "deadline"  # the real service raises DEADLINE_EXCEEDED instead of answering empty
    fake.create_subscription(SUB, ack_deadline=10)
    ids = fake.publish(SUB, [body(i) for i in range(300)])
    fake.slow_pulls = 4  # the first Pulls hang until their deadline
    reader = make_reader(SUB, ackDeadlineSeconds=10)
    s = SparkCalls(reader, Logs(), "4.3")
    s.start()
    reader.prepareForTriggerAvailableNow()
    t0 = time.monotonic()
    while s.trigger():
        assert time.monotonic() - t0 < 120
    assert sorted(s.ids()) == sorted(ids), "AvailableNow ended before reading the backlog"


@pytest.mark.virtual_time  # drains through a slow sink
def test_byte_budget_never_nacks_for_lack_of_room(fake, make_reader):
    """Scenario 4: a small maxOutstandingBytes and a busy sink. Pulls are sized by bytes too, so the
    receiver never takes more than it can hold and never hands messages back for lack of room
    (each hand-back is a redelivery and a delivery attempt)."""
    fake.create_subscription(SUB, ack_deadline=10)
    ids = fake.publish(SUB, [body(i, pad=1000) for i in range(600)])
    reader = make_reader(SUB, ackDeadlineSeconds=10, maxOutstandingBytes="64KiB", maxMessagesPerTrigger=30)
    s = SparkCalls(reader, Logs(), "4.3")
    s.start()
    busy = {"n": 0}

    def sink(batch_id, batches):
        if ids_of(batches) and busy["n"] < 2:
            busy["n"] += 1
            time.sleep(3)  # the sink is busy while the receiver is full

    wait_for(lambda: len(set(s.ids())) == len(ids), 120, "every message in the sink", step=lambda: s.trigger(sink))
    assert sum(fake.nacks.values()) == 0, f"{sum(fake.nacks.values())} messages handed back for lack of room"
    again = {mid: n for mid, n in fake.deliveries.items() if n > 1}
    assert not again, f"{len(again)} messages delivered more than once"


@pytest.mark.virtual_time  # waits out a max lease
def test_lease_duration_is_bounded_from_the_first_receipt(fake, make_reader):
    """Scenario 9: maxLeaseDurationSeconds counts from a message's first receipt. A redelivery of a
    message the receiver still holds must not start its lease clock again."""
    fake.create_subscription(SUB, ack_deadline=1)
    ids = fake.publish(SUB, [body(i) for i in range(20)])
    reader = make_reader(SUB, ackDeadlineSeconds=1, maxLeaseDurationSeconds=4)
    s = SparkCalls(reader, Logs(), "4.3")
    s.start()
    first_seen = time.monotonic()

    def slow(batch_id, batches):
        if ids_of(batches):
            time.sleep(3.0)
            fake.redeliver(SUB, ids[0])  # Pub/Sub may deliver a held message again at any time
            time.sleep(5.0)

    wait_for(lambda: bool(s.ids()), 30, "the first batch", step=lambda: s.trigger(slow))
    late = [(t - first_seen, mid) for t, mid, secs in fake.modacks if secs > 0 and t - first_seen > 4 + 1.0]
    assert not late, f"leases extended past maxLeaseDurationSeconds: {late[:5]}"
