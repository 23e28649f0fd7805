"""crdb_pubsub.testing.Changefeed: Python rows in, each producer's bytes out, and the state they lead to."""

from __future__ import annotations

import ast
import datetime as dt
import json
import random
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from crdb_pubsub import decode_messages
from crdb_pubsub.apply import DeltaStore, apply_arrow, read_state
from crdb_pubsub.testing import Changefeed

KIT = Path(__file__).resolve().parents[2] / "connector" / "testing"


def test_cockroachdb_wrapped_bytes_as_its_sink_lays_them_out():
    feed = Changefeed("accounts", key=["id"])
    feed.insert({"id": 1, "owner": "zoë", "balance": Decimal("26.30")}).resolved()
    row, resolved = feed.messages()
    hlc = row.hlc
    assert row.data.decode() == (
        '{"Key":[1],"Value":{"after": {"balance": 26.30, "id": 1, "owner": "zoë"}, "updated": "%s"},"Topic":"accounts"}'
        % hlc
    )
    assert resolved.data.decode() == '{"resolved":"%s"}' % hlc and resolved.kind == "resolved"


def test_options_and_types_reach_the_bytes():
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=dt.UTC)
    uid = uuid.UUID(int=7)
    feed = Changefeed("t", key=["id"], envelope="enriched", enriched_properties="source,schema", diff=True)
    feed.insert({"id": uid, "at": when, "raw": b"\x00\xff", "doc": {"a": [1]}, "tags": ["x"], "f": float("nan")})
    (msg,) = feed.messages()
    body = json.loads(msg.data)["Value"]
    after = body["payload"]["after"]
    assert after == {"at": "2026-01-02T03:04:05.12Z", "doc": {"a": [1]}, "f": "NaN", "id": str(uid),
                     "raw": "\\x00ff", "tags": ["x"]}  # fmt: skip
    types = {f["field"]: f["type"] for f in body["schema"]["fields"][1]["fields"]}
    assert types == {"id": "string", "at": "string", "raw": "bytes", "doc": "json", "tags": "array", "f": "float64"}


def test_update_keeps_the_columns_not_given_and_state_follows():
    feed = Changefeed("t", key=["k1", "k2"])
    feed.insert({"k1": "a", "k2": 1, "v": 1}).insert({"k1": "a", "k2": 2, "v": 2})
    feed.update({"k1": "a", "k2": 1, "w": "new"}).delete({"k1": "a", "k2": 2})
    assert feed.state() == {("a", 1): {"k1": "a", "k2": 1, "v": 1, "w": "new"}}
    keys = [m.key for m in feed.messages()]
    assert keys == ['["a", 1]', '["a", 2]', '["a", 1]', '["a", 2]']


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.insert({"id": 1}).insert({"id": 1}), "which is live"),
        (lambda f: f.update({"id": 9}), "which is not live"),
        (lambda f: f.delete({"name": "x"}), "has no key column 'id'"),
        (lambda f: Changefeed("t", key=["id"], envlope="bare"), "envlope: not a changefeed option"),
        (lambda f: Changefeed("t", key=["id"], producer="ticdc", diff=True), "diff: a CockroachDB changefeed option"),
        (lambda f: Changefeed("t", key=["id"], producer="debezium-mysql").resolved(), "sends no resolved"),
        (lambda f: Changefeed("t", key="id"), "key: the primary-key columns as a list"),
    ],
)
def test_mistakes_say_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call(Changefeed("t", key=["id"]))


@pytest.mark.parametrize("producer", ["cockroachdb", "debezium-postgres", "debezium-mysql", "ticdc"])
def test_shuffled_duplicated_messages_applied_give_the_feeds_state(tmp_path: Path, producer: str):
    rng = random.Random(4)
    feed = Changefeed("accounts", key=["id"], producer=producer)
    for i in range(60):
        feed.insert({"id": i, "owner": f"o{i}", "balance": Decimal(rng.randrange(10**6)).scaleb(-2)})
    for _ in range(80):
        k = rng.choice([k for (k,) in feed.state()])
        if rng.random() < 0.3:
            feed.delete({"id": k})
        else:
            feed.update({"id": k, "balance": Decimal(rng.randrange(10**6)).scaleb(-2)})
    messages = feed.messages()
    stream = messages + rng.sample(messages, 30)
    rng.shuffle(stream)
    batch = decode_messages(
        [m.data for m in stream],
        message_ids=[str(i) for i in range(len(stream))],
        attributes=[m.attributes or None for m in stream],
        ordering_keys=[m.ordering_key for m in stream],
    )
    schemas = {"accounts": "id BIGINT, owner STRING, balance DECIMAL(12,2)"}
    res = apply_arrow(pa.Table.from_batches([batch]), 0, store=DeltaStore(str(tmp_path)), app_id="t", schemas=schemas)
    assert res.malformed == 0, res.errors
    got = {r["id"]: r for r in read_state(str(tmp_path), "accounts").to_pylist()}
    assert got == {k: row for (k,), row in feed.state().items()}


def test_nothing_in_the_kit_imports_from_the_tests():
    for path in KIT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            assert not any(n.split(".")[0] in ("tests", "conftest", "emulator_policy") for n in names), path
