"""The receiver against the real emulator: leases, flow control, dedupe, ack only on request."""

from __future__ import annotations

import time

import pytest

from conftest import pull_ids
from crdb_pubsub.source.core.protocol import protocol_for
from crdb_pubsub.source.driver import DriverMode, Receiver, ReceiverError
from crdb_pubsub.source.driver.handoff import Ticket, fetch
from crdb_pubsub.source.options import parse_options
from crdb_pubsub.source.transport import Rpc, chunk_ack_ids, subscriber_client
from crdb_pubsub.source.wire import from_ipc

pytestmark = pytest.mark.integration


def _receiver(host: str, sub: str, **kw) -> Receiver:
    args = dict(lease_seconds=10, max_lease_seconds=3600, max_messages=50_000, max_bytes=1 << 30)
    args.update(kw)
    return Receiver(Rpc(subscriber_client(host)), [sub], endpoint_description=f"the emulator at {host}", **args)


def _take_all(r: Receiver, n: int, timeout: float = 30.0) -> list:
    """Chunks taken from the buffer until they hold ``n`` messages."""
    got: list = []
    end = time.monotonic() + timeout
    while sum(len(c) for c in got) < n and time.monotonic() < end:
        got += r.take()
        time.sleep(0.05)
    return got


def _ids(chunks: list) -> list[str]:
    return [m for c in chunks for m in c.message_ids]


def test_leases_outlive_a_short_subscription_deadline(emulator_host, make_subscription, publish):
    topic, sub = make_subscription(ack_deadline_seconds=2)
    ids = publish(topic, [f"m{i}".encode() for i in range(300)])
    r = _receiver(emulator_host, sub, lease_seconds=3)
    r.start()
    try:
        held = _take_all(r, 300)
        assert sorted(_ids(held)) == sorted(ids)
        time.sleep(8)  # 4x the subscription's deadline, ~3 lease periods
        snap = r.counters.snapshot()
        assert snap["redeliveredWhileHeld"] == 0, snap
        assert snap["leasesExtended"] >= 300
        assert pull_ids(emulator_host, sub, timeout=1.0) == []  # nobody else can see them
        r.ack(held)
        assert r.acker.flush(10)
        assert (r.counters.get("acknowledged"), r.counters.get("ackConfirmed")) == (300, 300)
    finally:
        r.shutdown(hand_back=False, within=5)
    time.sleep(3.5)
    assert pull_ids(emulator_host, sub, timeout=1.0) == []  # acked for good


def test_flow_control_bounds_what_is_held(emulator_host, make_subscription, publish):
    topic, sub = make_subscription(ack_deadline_seconds=10)
    publish(topic, [b"x" * 100] * 1200)
    r = _receiver(emulator_host, sub, max_messages=250)
    r.start()
    try:
        time.sleep(2.5)
        assert r.flow.held_messages == 250
        first = r.take()
        assert len(_ids(first)) == 250
        time.sleep(1.0)
        assert r.flow.held_messages == 250  # taken but unacknowledged messages still count
        r.ack(first)
        got = _take_all(r, 250, timeout=10)
        assert len(_ids(got)) == 250 and r.flow.held_messages <= 250
        r.ack(got)
    finally:
        r.shutdown(hand_back=True, within=5)


def test_nothing_is_acknowledged_without_ack(emulator_host, make_subscription, publish):
    topic, sub = make_subscription(ack_deadline_seconds=2)
    ids = publish(topic, [b"a", b"b", b"c"])
    r = _receiver(emulator_host, sub)
    r.start()
    held = _take_all(r, 3)
    assert len(_ids(held)) == 3
    r.shutdown(hand_back=True, within=5)  # hand them back: a new consumer sees all of them at once
    assert sorted(pull_ids(emulator_host, sub, timeout=3.0)) == sorted(ids)


def test_redelivery_of_acknowledged_message_is_dropped(emulator_host, make_subscription, publish):
    topic, sub = make_subscription(ack_deadline_seconds=10)
    (mid,) = publish(topic, [b"once"])
    r = _receiver(emulator_host, sub)
    r.holding.recover([(sub, [mid], 600)], [], 0.0)  # as if a previous process had committed it
    r.start()
    try:
        time.sleep(2.0)
        assert r.take() == []
        assert r.counters.get("redeliveriesDropped") == 1
        assert r.acker.flush(10)
    finally:
        r.shutdown(hand_back=False, within=5)
    assert pull_ids(emulator_host, sub, timeout=1.0) == []  # and it was acknowledged


def test_missing_subscription_and_unreachable_emulator_fail_fast(emulator_host):
    r = _receiver(emulator_host, "projects/test-project/subscriptions/does-not-exist")
    with pytest.raises(ReceiverError, match="does not exist"):
        r.start()
    t0 = time.monotonic()
    dead = _receiver("127.0.0.1:9", "projects/test-project/subscriptions/whatever")
    with pytest.raises(ReceiverError, match="cannot reach Pub/Sub"):
        dead.start()
    assert time.monotonic() - t0 < 40


def test_topic_option_creates_the_subscription(emulator_host, make_subscription, publish):
    topic, _ = make_subscription()
    opts = parse_options(
        {
            "subscription": "projects/test-project/subscriptions/created-by-source",
            "topic": topic,
            "emulatorHost": emulator_host,
        }
    )
    planner = protocol_for(opts, DriverMode)
    try:
        start = planner.initial_offset()
        ids = publish(topic, [b"hello"])
        deadline = time.monotonic() + 10
        offset = start
        while offset == start and time.monotonic() < deadline:
            offset = planner.latest(start, None, None)
            time.sleep(0.1)
        assert offset["batch"] == 1
        # by default a partition carries a ticket to the batch, which a task fetches from the driver
        got = [
            m
            for _, _, p in planner.partitions(start, offset)
            for m in from_ipc(fetch(p) if isinstance(p, Ticket) else p).column("message_id").to_pylist()
        ]
        assert got == ids
    finally:
        planner.shutdown(within=5)


def test_ack_requests_are_split_below_the_size_limit():
    ids = ["x" * 200] * 5000
    chunks = list(chunk_ack_ids(ids))
    assert sum(len(c) for c in chunks) == 5000
    assert all(len(c) <= 2500 and sum(map(len, c)) <= 400_000 for c in chunks)


def test_ack_ids_that_fit_one_request_are_one_request_at_either_bound():
    from crdb_pubsub.source.transport import MAX_ID_BYTES_PER_REQUEST, MAX_IDS_PER_REQUEST, chunked

    cases = [
        [],
        ["a"],
        ["x"] * MAX_IDS_PER_REQUEST,
        ["x"] * (MAX_IDS_PER_REQUEST + 1),
        ["x" * 200] * (MAX_ID_BYTES_PER_REQUEST // 200),
        ["x" * 200] * (MAX_ID_BYTES_PER_REQUEST // 200) + ["y"],
        ["z" * (MAX_ID_BYTES_PER_REQUEST + 1)],
    ]
    for ids in cases:
        want = list(chunked(ids, len, MAX_IDS_PER_REQUEST, MAX_ID_BYTES_PER_REQUEST))
        assert list(chunk_ack_ids(ids)) == want, (len(ids), sum(map(len, ids)))
