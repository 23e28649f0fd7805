"""The machine messages are held with (``pubsub/holding.py``): its hand-backs and the shadows they leave."""

from __future__ import annotations

import threading
import time

from crdb_pubsub.source.metrics import Counters
from crdb_pubsub.source.pubsub.holding import Holding
from crdb_pubsub.source.pubsub.subscription import Subscription
from crdb_pubsub.source.transport import AckResult

SUB = "projects/p/subscriptions/s"


class _Rpc:
    def __init__(self, lose: bool) -> None:
        self.lose = lose

    def modify_ack_deadline(self, sub, ack_ids, seconds, total=None) -> AckResult:
        if self.lose:
            return AckResult(failed=dict.fromkeys(ack_ids, "DeadlineExceeded: lost"))
        return AckResult(confirmed=list(ack_ids))

    def acknowledge(self, sub, ack_ids, total=None) -> AckResult:
        return AckResult(confirmed=list(ack_ids))


def _holding(lose: bool) -> Holding:
    h = Holding(_Rpc(lose), Counters(), threading.Condition(), lease_seconds=60, max_lease_seconds=600)
    h.open({SUB: Subscription(SUB, 10, False, False)}, proven_memory=600.0, unproven_memory=600.0)
    h.start()
    return h


def test_a_hand_back_of_messages_no_chunk_holds_that_fails_casts_an_ack_deadline_of_shadow():
    h = _holding(lose=True)
    try:
        before = time.monotonic()
        h.hand_back_ids(SUB, ["a1", "a2"])
        assert h.acker.flush(5)
        assert h.drain.shadow_of(SUB) >= before + 10
    finally:
        h.stop(1.0)


def test_a_hand_back_that_went_casts_no_shadow():
    h = _holding(lose=False)
    try:
        h.hand_back_ids(SUB, ["a1"])
        assert h.acker.flush(5)
        assert h.drain.shadow_of(SUB) == 0.0
    finally:
        h.stop(1.0)


def test_an_earlier_process_is_waited_out_no_longer_than_a_lease_from_now():
    h = _holding(lose=False)
    try:
        now = time.monotonic()
        h.wait_out(time.time() + 3600)  # it reported a lease an hour long: at most ~a lease counts
        assert now + 60 <= h.drain.shadow_of(SUB) <= now + 60 + 120
    finally:
        h.stop(1.0)
