"""Option ``deadLetterTopic``: bodies that can't be decoded are published there (body unchanged,
attributes naming the error, the subscription and the message id) before their batch can commit,
so they are acknowledged only once the publish was confirmed and the batch committed
(issue 14, item 4)."""

from __future__ import annotations

import collections
import uuid

import pytest

from conftest import pull_ids
from crdb_pubsub.source.options import OptionError, parse_options

SUB = "projects/p/subscriptions/sub-x"


def test_dead_letter_topic_is_validated():
    opts = parse_options({"subscription": SUB, "deadLetterTopic": "projects/p/topics/dead-x", "mode": "DROPMALFORMED"})
    assert opts.dead_letter_topic_path == "projects/p/topics/dead-x"
    with pytest.raises(OptionError, match="deadLetterTopic"):
        parse_options({"subscription": SUB, "deadLetterTopic": "projects/p/topics/dead-x", "mode": "FAILFAST"})
    with pytest.raises(OptionError, match="deadLetterTopic"):
        parse_options({"subscription": SUB, "deadLetterTopic": "not a topic"})


def _pull_all(host: str, sub: str) -> list:
    from crdb_pubsub.emulator import subscriber_client

    client = subscriber_client(host)
    out = []
    try:
        while True:
            resp = client.pull(request={"subscription": sub, "max_messages": 1000}, timeout=3)
            if not resp.received_messages:
                return out
            out.extend(resp.received_messages)
            client.acknowledge(request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]})
    except Exception:  # noqa: BLE001 - the emulator answers an empty Pull with a deadline
        return out
    finally:
        client.close()


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["DROPMALFORMED", "PERMISSIVE"])
def test_undecodable_bodies_go_to_the_dead_letter_topic(
    spark, emulator_host, make_subscription, publish, tmp_path, mode
):
    topic, sub = make_subscription(ack_deadline_seconds=10)
    dead_topic, dead_sub = make_subscription(ack_deadline_seconds=10, name=f"dead-{uuid.uuid4().hex[:8]}")
    good = [f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"t"}}'.encode() for i in range(200)]
    bad = [b"{not json", b'"a string"', b'{"Key":[1],"Value":{"after": 5},"Topic":"t"}'] * 10
    good_ids = publish(topic, good)
    bad_ids = publish(topic, bad)
    out = tmp_path / "out"
    q = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", emulator_host)
        .option("mode", mode)
        .option("deadLetterTopic", dead_topic)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    rows = spark.read.parquet(str(out)).select("message_id", "kind").collect()
    kinds = collections.Counter(r.kind for r in rows)
    written = collections.Counter(r.message_id for r in rows)
    dead = _pull_all(emulator_host, dead_sub)
    dead_ids = collections.Counter(m.message.attributes.get("crdb_pubsub_message_id") for m in dead)
    assert set(dead_ids) == set(bad_ids) and max(dead_ids.values()) == 1, "each undecodable body once in the DLQ"
    by_id = dict(zip(bad_ids, bad))
    for m in dead:
        a = m.message.attributes
        assert m.message.data == by_id[a["crdb_pubsub_message_id"]]  # the body unchanged
        assert a["crdb_pubsub_subscription"] == sub and a["crdb_pubsub_error"]
    assert set(written) >= set(good_ids) and max(written.values()) == 1
    if mode == "DROPMALFORMED":
        assert kinds == {"row": len(good)} and not set(written) & set(bad_ids), "nothing in both"
    else:
        assert kinds["malformed"] == len(bad)
    assert pull_ids(emulator_host, sub, timeout=2.0) == [], "everything acknowledged"


def test_dead_letters_go_through_the_endpoint_option(monkeypatch):
    """In a VPC that reaches Pub/Sub only through a Private Service Connect endpoint, the dead-letter
    publish must use the endpoint option too."""
    import pyarrow as pa

    from crdb_pubsub.source import dead_letter, transport
    from crdb_pubsub.source.options import parse_options

    seen = {}

    class Client:
        def publish(self, request, timeout):
            seen["published"] = len(request["messages"])

        @property
        def transport(self):
            return self

        def close(self):
            pass

    def publisher_client(emulator_host, credentials=None, **kw):
        seen["endpoint"] = kw.get("endpoint")
        return Client()

    monkeypatch.setattr(transport, "publisher_client", publisher_client)
    monkeypatch.setattr(transport, "load_credentials", lambda **kw: None)
    opts = parse_options(
        {
            "subscription": "projects/p/subscriptions/sub-a",
            "deadLetterTopic": "projects/p/topics/dead",
            "endpoint": "pubsub-psc.p.googleapis.com:443",
        }
    )
    batch = pa.RecordBatch.from_pydict(
        {"kind": ["malformed"], "data": [b"{"], "message_id": ["1"], "error": ["bad JSON"]}
    )
    assert dead_letter.publish_malformed(batch, opts) == 1
    assert seen == {"endpoint": "pubsub-psc.p.googleapis.com:443", "published": 1}
