"""After a restart with stateDir, redeliveries of acknowledged messages are recognised for the whole
dedupe window counted from *their own* acknowledgement (scenario 2)."""

from __future__ import annotations

import time

import pytest

from polling import wait_for
from spark_calls import Logs, SparkCalls

SUB = "projects/p/subscriptions/dedupe"


def body(i: int) -> bytes:
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"t"}}'.encode()


@pytest.mark.virtual_time  # waits out expiry times (tests/virtual_time.py)
def test_recovered_ids_keep_their_own_expiry(fake, make_reader, tmp_path, monkeypatch):
    fake.create_subscription(SUB, ack_deadline=8)
    shift = {"seconds": 0.0}
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + shift["seconds"])
    opts = dict(stateDir=tmp_path / "state", ackDeadlineSeconds=8, maxMessagesPerTrigger=100)
    logs = Logs()

    first = SparkCalls(make_reader(SUB, **opts), logs, "4.3")
    first.start()
    a = fake.publish(SUB, [body(i) for i in range(50)])
    wait_for(lambda: set(a) <= set(first.ids()), 30, "batch A read", step=first.trigger)
    b = fake.publish(SUB, [body(100 + i) for i in range(50)])
    wait_for(lambda: set(b) <= set(first.ids()), 30, "batch B read", step=first.trigger)
    wait_for(lambda: set(a) <= set(fake.acked(SUB)), 30, "batch A acknowledged", step=first.trigger)
    # The query has been running for almost ten minutes: A was acknowledged 596 s ago. B's
    # acknowledgement is lost on the way (Pub/Sub answers OK but will deliver B again).
    shift["seconds"] = 596.0
    fake.drop_acks = True
    for _ in range(20):
        first.trigger()
        time.sleep(0.05)
    time.sleep(1.0)
    first.reader.stop()  # the driver goes down; a new one starts at once
    fake.drop_acks = False

    second = SparkCalls(make_reader(SUB, **opts), logs, "4.3")
    second.start()
    n = [1000]

    def keep_publishing() -> None:
        fake.publish(SUB, [body(n[0])])
        n[0] += 1
        second.trigger()
        time.sleep(0.2)

    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 14, 30, "the lapse of B's last lease", step=keep_publishing)
    again = set(b) & set(second.ids())
    assert not again, f"{len(again)} messages of B, acknowledged seconds before the restart, delivered again"
    assert len(second.ids()) >= 20, "the restarted reader committed new batches"
