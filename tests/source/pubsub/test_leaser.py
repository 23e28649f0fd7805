"""The leaser on its own: a hand-back never overtaken by a renewal sent before it."""

from __future__ import annotations

import threading
import time

from crdb_pubsub.source.pubsub.chunks import Chunk
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
