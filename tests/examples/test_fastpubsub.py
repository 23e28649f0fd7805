"""examples/fastpubsub.py, the benchmarks' Pub/Sub server: what it answers is what the service's
clients read, and its terms (partial, capped answers) hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.pubsub_v1.types import pubsub

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import fastpubsub  # noqa: E402

TOPIC, SUB = "projects/p/topics/t", "projects/p/subscriptions/s"


def _state(**terms) -> fastpubsub.State:
    state = fastpubsub.State(fastpubsub.Terms(**terms))
    state.create_topic(pubsub.Topic.pb()(name=TOPIC).SerializeToString())
    state.create_subscription(pubsub.Subscription.pb()(name=SUB, topic=TOPIC).SerializeToString())
    return state


def _publish(state: fastpubsub.State, bodies: list[bytes], **fields) -> list[str]:
    request = pubsub.PublishRequest.pb()(
        topic=TOPIC, messages=[pubsub.PubsubMessage.pb()(data=b, **fields) for b in bodies]
    )
    return list(pubsub.PublishResponse.pb().FromString(state.publish(request.SerializeToString())).message_ids)


def _pull(state: fastpubsub.State, n: int) -> list:
    return list(pubsub.PullResponse.pb().FromString(state.pull(SUB, n, True, 0)).received_messages)


def test_a_pull_answers_what_was_published_as_the_client_library_reads_it():
    state = _state()
    ids = _publish(state, [b"a", b"b"], attributes={"TABLE_NAME": "users"}, ordering_key="")
    got = _pull(state, 10)
    assert [m.message.message_id for m in got] == ids
    assert [m.message.data for m in got] == [b"a", b"b"]
    assert got[0].message.attributes["TABLE_NAME"] == "users" and got[0].message.publish_time.seconds > 0
    assert len({m.ack_id for m in got}) == 2 and _pull(state, 10) == []


def test_acknowledged_messages_are_gone_and_handed_back_ones_come_first():
    state = _state()
    _publish(state, [b"%d" % i for i in range(5)])
    first = _pull(state, 2)
    state.settle(SUB, [first[0].ack_id.encode()], None)
    state.settle(SUB, [first[1].ack_id.encode()], 0)
    assert [m.message.data for m in _pull(state, 10)] == [b"1", b"2", b"3", b"4"]


def test_the_terms_cap_and_draw_the_answers():
    state = _state(pull_cap=100, pull_fill=0.3, seed=7)
    _publish(state, [b"x"] * 2000)
    sizes = [len(_pull(state, 1000)) for _ in range(10)]
    assert all(1 <= n <= 30 for n in sizes) and len(set(sizes)) > 1
    again = _state(pull_cap=100, pull_fill=0.3, seed=7)
    _publish(again, [b"x"] * 2000)
    assert [len(_pull(again, 1000)) for _ in range(10)] == sizes  # seeded: the same answers


def test_bad_terms_are_refused():
    with pytest.raises(ValueError, match="pull_fill"):
        fastpubsub.Terms(pull_fill=0)


@pytest.mark.integration
def test_selftest_passes_with_the_google_cloud_pubsub_clients():
    """The server's own check, as ``python examples/fastpubsub.py --selftest`` runs it (about 5 s)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "fastpubsub.py"), "--selftest"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "fastpubsub selftest: passed" in done.stdout
