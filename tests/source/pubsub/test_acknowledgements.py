"""The one rule by which Pub/Sub's answers to acknowledgements are read (``pubsub/acknowledgements.py``)."""

from __future__ import annotations

import threading
import time

from crdb_pubsub.source.metrics import Counters
from crdb_pubsub.source.pubsub.acker import Acker
from crdb_pubsub.source.pubsub.acknowledgements import Acknowledgements
from crdb_pubsub.source.pubsub.chunks import Chunk
from crdb_pubsub.source.pubsub.remembered import Remembered
from crdb_pubsub.source.transport import AckResult

SUB = "projects/p/subscriptions/s"
PROVEN, UNPROVEN = 600.0, 7 * 24 * 3600.0


class _Rpc:
    def acknowledge(self, sub, ack_ids, *, total=None) -> AckResult:
        return AckResult(confirmed=list(ack_ids))  # a standard subscription: OK, whether it acted or not


def _acks(exactly_once: bool = False, counters: Counters | None = None) -> tuple[Acknowledgements, Remembered, Acker]:
    acker = Acker(_Rpc())
    acker.start()
    remembered = Remembered()
    acks = Acknowledgements(
        acker,
        remembered,
        counters if counters is not None else Counters(),
        exactly_once={SUB} if exactly_once else set(),
        proven_memory=PROVEN,
        unproven_memory=UNPROVEN,
    )
    return acks, remembered, acker


def _answered(acks: Acknowledgements, chunk: Chunk) -> list[tuple[str, str, str]]:
    got: list[list[tuple[str, str, str]]] = []
    done = threading.Event()
    acks.acknowledge([chunk], lambda unproven: (got.append(unproven), done.set()))
    assert done.wait(5), "no answer"
    return got[0]


def test_an_ok_after_the_lease_lapsed_proves_nothing_on_a_standard_subscription():
    # A standard subscription answers OK to an ack id whose lease lapsed, acting or not: the
    # message may come back, possibly long after, and must be recognised for as long as Pub/Sub
    # keeps it, and recorded as unproven for the next process.
    acks, remembered, acker = _acks()
    try:
        lapsed = Chunk(SUB, ["7"], ["a7"], None, 1, 1, time.monotonic(), proven_until=time.monotonic() - 1)
        assert _answered(acks, lapsed) == [(SUB, "7", "a7")]
        assert remembered.seen(SUB, ["7"], time.monotonic() + PROVEN + 60) == [True], "forgotten with the proven ones"
        alive = Chunk(SUB, ["8"], ["a8"], None, 1, 1, time.monotonic(), proven_until=time.monotonic() + 60)
        assert _answered(acks, alive) == []
        assert remembered.seen(SUB, ["8"], time.monotonic() + PROVEN - 60) == [True]
    finally:
        acker.stop()


def test_on_an_exactly_once_subscription_the_answer_is_the_proof():
    acks, _, acker = _acks(exactly_once=True)
    try:
        lapsed = Chunk(SUB, ["7"], ["a7"], None, 1, 1, time.monotonic(), proven_until=time.monotonic() - 1)
        assert _answered(acks, lapsed) == []
    finally:
        acker.stop()


def test_every_answered_acknowledgement_is_counted_by_its_outcome():
    # A user reads ``acknowledged`` against its outcomes: an OK that came after the lease could
    # have lapsed (renewals answered late under load) is neither confirmed, failed nor stale, and
    # must still show, or the gap looks like acknowledgements that never came back.
    counters = Counters()
    acks, _, acker = _acks(counters=counters)
    try:
        now = time.monotonic()
        lapsed = Chunk(SUB, ["1", "2"], ["a1", "a2"], None, 1, 1, now, proven_until=now - 1)
        alive = Chunk(SUB, ["3"], ["a3"], None, 1, 1, now, proven_until=now + 60)
        _answered(acks, lapsed)
        _answered(acks, alive)
        m = counters.snapshot()
        assert (m["acknowledged"], m["ackConfirmed"], m["ackLate"], m["ackFailed"], m["ackStale"]) == (3, 1, 2, 0, 0), m
    finally:
        acker.stop()
