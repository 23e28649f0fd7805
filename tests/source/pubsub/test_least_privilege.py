"""The source starts with ``roles/pubsub.subscriber`` on the subscription alone (issue 31).

That role grants ``pubsub.subscriptions.consume`` (Pull, Acknowledge, ModifyAckDeadline) but not
``pubsub.subscriptions.get``, so GetSubscription is refused. The emulator enforces no IAM: these
tests put a proxy in front of it that refuses what the role does not grant and answers
TestIamPermissions as the service does (``tests/iam_proxy.py``). Without GetSubscription the source
takes the safe side of each setting it would have read, says so in one warning line, and reads;
a subscription it cannot consume still fails at start.
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import PROJECT, pull_ids
from crdb_pubsub.source.pubsub.subscription import ReceiverError, Subscription, open_subscription
from crdb_pubsub.source.transport import Rpc, subscriber_client
from iam_proxy import SUBSCRIBER, RefusingProxy

pytestmark = pytest.mark.integration


def assumed_line(sub: str, deadline: int = 10) -> str:
    """The one warning line of a start without GetSubscription, as a user reads it."""
    return (
        f"subscription {sub}: Pub/Sub refused GetSubscription, which needs pubsub.subscriptions.get "
        "(in roles/pubsub.viewer, not in roles/pubsub.subscriber), so its settings are assumed, the safe "
        f"side of each: ack deadline {deadline} s, exactly-once delivery off, message ordering on; grant "
        "roles/pubsub.viewer on the subscription to have them read instead"
    )


@pytest.fixture
def subscriber_only(emulator_host):
    """The emulator as a principal with ``roles/pubsub.subscriber`` alone sees it."""
    proxy = RefusingProxy(emulator_host, refuse={"GetSubscription"}, granted=SUBSCRIBER)
    yield proxy
    proxy.close()


def _open(proxy: RefusingProxy, sub: str, topic: str | None = None, wanted_filter: str | None = None, lease: int = 60):
    rpc = Rpc(subscriber_client(proxy.host_port))
    return open_subscription(
        rpc, sub, topic, wanted_filter, lease_seconds=lease, endpoint=f"the emulator at {proxy.host_port}"
    )


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("crdb_pubsub")]


def test_the_proxy_refuses_as_iam_does(subscriber_only, make_subscription, publish):
    from google.api_core import exceptions as gexc

    topic, sub = make_subscription()
    client = subscriber_client(subscriber_only.host_port)
    with pytest.raises(gexc.PermissionDenied, match="not authorized"):
        client.get_subscription(request={"subscription": sub}, timeout=5, retry=None)
    ids = publish(topic, [b"a", b"b"])
    assert sorted(pull_ids(subscriber_only.host_port, sub)) == sorted(ids)  # consume is granted
    held = client.test_iam_permissions(
        request={"resource": sub, "permissions": ["pubsub.subscriptions.consume", "pubsub.subscriptions.get"]},
        timeout=5,
        retry=None,
    )
    assert list(held.permissions) == ["pubsub.subscriptions.consume"]


def test_opens_with_the_subscriber_role_alone(subscriber_only, make_subscription, caplog):
    _, sub = make_subscription(ack_deadline_seconds=30)
    with caplog.at_level(logging.INFO, logger="crdb_pubsub"):
        info = _open(subscriber_only, sub)
    # The safe side of each: the shortest lease Pub/Sub grants (proofs of a live lease never
    # outrun the real one), acknowledgements proven by their leases rather than by exactly-once
    # answers, and an AvailableNow run that trusts no answer while messages of a key are held.
    assert info == Subscription(sub, 10, False, True)
    assert _warnings(caplog) == [assumed_line(sub)]
    assert subscriber_only.calls["GetSubscription"] == 1


def test_the_assumed_deadline_follows_an_emulator_lease_below_ten_seconds(subscriber_only, make_subscription, caplog):
    _, sub = make_subscription(ack_deadline_seconds=3)
    with caplog.at_level(logging.INFO, logger="crdb_pubsub"):
        assert _open(subscriber_only, sub, lease=3).ack_deadline == 3
    assert _warnings(caplog) == [assumed_line(sub, 3)]


def test_a_subscription_it_cannot_consume_fails_at_start(subscriber_only):
    sub = f"projects/{PROJECT}/subscriptions/missing-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    with pytest.raises(ReceiverError) as err:
        _open(subscriber_only, sub)
    assert time.monotonic() - t0 < 15
    assert str(err.value) == (
        f"Pub/Sub refused access to {sub} at the emulator at {subscriber_only.host_port}: the subscription "
        "does not exist, or these credentials lack pubsub.subscriptions.consume on it (grant "
        "roles/pubsub.subscriber on the subscription)"
    )


def test_topic_creates_the_subscription_without_get(emulator_host, make_subscription, caplog):
    """``topic`` needs pubsub.subscriptions.create and pubsub.topics.attachSubscription, not get."""
    topic, _ = make_subscription()
    proxy = RefusingProxy(
        emulator_host,
        refuse={"GetSubscription"},
        granted=SUBSCRIBER | {"pubsub.subscriptions.create"},
    )
    try:
        sub = f"projects/{PROJECT}/subscriptions/created-{uuid.uuid4().hex[:8]}"
        with caplog.at_level(logging.INFO, logger="crdb_pubsub"):
            created = _open(proxy, sub, topic, lease=45)
        # It created the subscription: it knows what it asked for, and warns of nothing.
        assert created == Subscription(sub, 45, False, False)
        assert _warnings(caplog) == []
        assert proxy.calls["CreateSubscription"] == 1
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="crdb_pubsub"):
            again = _open(proxy, sub, topic, lease=45)  # the next run: it exists now
        assert again == Subscription(sub, 10, False, True)
        assert _warnings(caplog) == [assumed_line(sub)]
        # A filter can't be checked without reading the subscription: refused, not assumed.
        with pytest.raises(ReceiverError) as err:
            _open(proxy, sub, topic, 'attributes.TABLE_NAME = "users"')
        assert str(err.value) == (
            f"subscription {sub} exists, and without pubsub.subscriptions.get (in roles/pubsub.viewer or "
            "roles/pubsub.editor) its filter can't be checked against option 'filter' "
            "'attributes.TABLE_NAME = \"users\"'; grant that role on it, or drop option 'filter'"
        )
    finally:
        proxy.close()


def test_topic_without_the_right_to_create(emulator_host, make_subscription, caplog):
    """``topic`` set, creating refused too: an existing subscription is read as assumed, a missing one fails."""
    topic, sub = make_subscription()
    proxy = RefusingProxy(emulator_host, refuse={"GetSubscription", "CreateSubscription"}, granted=SUBSCRIBER)
    try:
        with caplog.at_level(logging.INFO, logger="crdb_pubsub"):
            assert _open(proxy, sub, topic) == Subscription(sub, 10, False, True)
        assert _warnings(caplog) == [assumed_line(sub)]
        missing = f"projects/{PROJECT}/subscriptions/missing-{uuid.uuid4().hex[:8]}"
        with pytest.raises(
            ReceiverError, match=r"does not exist, or these credentials lack pubsub\.subscriptions\.consume"
        ):
            _open(proxy, missing, topic)
    finally:
        proxy.close()


# ----------------------------------------------------------------------------- end to end, Spark


@pytest.mark.spark
@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_a_query_reads_with_the_subscriber_role_alone(
    subscriber_only, make_subscription, publish, emulator_host, tmp_path: Path, receiver: str
):
    """An AvailableNow query through the refusing proxy reads and acknowledges every message."""
    from stream_job import job_command

    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(topic, [f'{{"Key":[{i}],"Value":{{"after":{{"id":{i}}}}},"Topic":"t"}}'.encode() for i in range(400)])
    cmd = job_command(
        subscriber_only.host_port,
        sub,
        tmp_path,
        state=True,
        available_now=True,
        ack_deadline=10,
        max_per_trigger=150,
        receiver=receiver,
        num_partitions=2 if receiver == "executors" else None,
        log_level="WARN",
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    got = pq.read_table(tmp_path / "out", columns=["message_id"]).column("message_id").to_pylist()
    assert sorted(got) == sorted(ids)
    # The line a user reads in the driver's log, once: the runner opened the subscription once.
    assert out.count(assumed_line(sub)) == 1, out[-4000:]
    assert subscriber_only.calls["GetSubscription"] >= 1 and subscriber_only.calls["Acknowledge"] >= 1
    time.sleep(11)  # an ack deadline: whatever was not acknowledged would be back
    assert pull_ids(emulator_host, sub, timeout=2.0) == []
