"""maxOutstandingMessages must be a hard bound even with several Pulls in flight per subscription.

Deterministic reproduction without the emulator: a fake Pub/Sub client holds every Pull until two
are in flight at once (or 1 s has passed), then answers each with as many messages as it asked
for. Each puller sized its request from the same ``held`` count, so with two pullers per
subscription the receiver can end up holding twice ``maxOutstandingMessages``.
"""

from __future__ import annotations

import threading
import time

from google.api_core import exceptions as gexc
from google.protobuf.timestamp_pb2 import Timestamp
from google.pubsub_v1.types import PubsubMessage, PullResponse, ReceivedMessage

from crdb_pubsub.source.driver import Receiver
from crdb_pubsub.source.transport import Rpc

SUB = "projects/p/subscriptions/sub-race"


class _Sub:
    ack_deadline_seconds = 60


class FakeClient:
    def __init__(self) -> None:
        self._barrier = threading.Barrier(2)
        self._served = 0
        self._lock = threading.Lock()
        self._next_id = 0

    def get_subscription(self, request, timeout=None, retry=None):
        return _Sub()

    def pull(self, request, timeout=None, retry=None):
        with self._lock:
            first_two = self._served < 2
            self._served += 1
        if not first_two:
            time.sleep(0.2)
            raise gexc.DeadlineExceeded("empty")
        try:
            self._barrier.wait(timeout=1.0)  # both pullers in flight (if there are two)
        except threading.BrokenBarrierError:
            pass
        msgs = []
        with self._lock:
            for _ in range(request["max_messages"]):
                self._next_id += 1
                msgs.append(
                    ReceivedMessage(
                        ack_id=f"a{self._next_id}",
                        message=PubsubMessage(
                            data=b"x", message_id=str(self._next_id), publish_time=Timestamp(seconds=1)
                        ),
                    )
                )
        return PullResponse(received_messages=msgs)

    def modify_ack_deadline(self, request, timeout=None):
        pass

    def acknowledge(self, request, timeout=None):
        pass


def test_concurrent_pulls_never_exceed_max_outstanding_messages():
    limit = 50
    r = Receiver(
        Rpc(FakeClient()), [SUB], lease_seconds=60, max_lease_seconds=3600, max_messages=limit, max_bytes=1 << 30
    )
    r.start()
    try:
        time.sleep(2.5)
        held = r.flow.held_messages
    finally:
        r.shutdown(hand_back=False, within=2)
    assert held <= limit, f"receiver holds {held} messages with maxOutstandingMessages={limit}"
