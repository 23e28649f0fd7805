"""Scenario 5: a flood of hostile bodies (20 %) mixed into good ones, in each decoding mode.

Hostile bodies follow the decoder's bad-input list (tests/test_decoding.py): invalid and truncated
JSON, invalid UTF-8, empty bodies (published with an attribute, as Pub/Sub requires), top-level
scalars and arrays that are no envelope, a wrapper without ``Value``, wrong field types, 1,000-deep
nesting, duplicate keys, a webhook batch with the wrong ``length``, and near-10 MB junk. Among the
good ones is a valid near-10 MB row (Pub/Sub's limit is 10 MB including attributes).

* PERMISSIVE keeps every message, hostile ones as ``kind="malformed"``, good ones as ``row``.
* DROPMALFORMED writes exactly the good ones and counts the others (the ``malformed`` metric).
* FAILFAST stops the query naming a hostile message id and acknowledges nothing of the failing
  batch: a PERMISSIVE run on the same subscription afterwards sees every message the FAILFAST
  run did not commit (the named one included), and none it did.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from polling import wait_for

from ._support import MetricsSampler, publish_many, report, row_body, scaled, sink_column, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

BIG = 9_900_000  # bytes: under Pub/Sub's 10 MB message limit with the attribute
ACK_DEADLINE = 5
ATTRS = {"origin": "faults"}


def _hostile(i: int) -> list[bytes]:
    row = row_body(i)
    return [
        b"{nope " + str(i).encode(),
        row[:-5],
        f'{{"Key":[{i}],"Value":{{"after": {{"a": "'.encode() + b"\xff\xfe" + b'"}},"Topic":"t"}',
        b" \n",  # blank, not empty: an empty body is a Debezium tombstone (issue 14)
        str(i).encode(),
        f'[{{"a": {i}}}]'.encode(),
        f'{{"Key":[{i}],"Topic":"t"}}'.encode(),
        f'{{"Key":[{i}],"Value":{{"after": {{"a": 1}}}},"Topic":5}}'.encode(),
        b'{"after": {"a": ' + b"[" * 1000 + b"]" * 1000 + b"}}",
        f'{{"Key":[{i}],"Value":{{"after": {{"a": 1}}}},"Value":{{"after": null}},"Topic":"t"}}'.encode(),
        f'{{"payload":[{{"after": {{"a": {i}}}, "key": [{i}], "topic": "t"}}],"length":2}}'.encode(),
    ]


def build_flood(good: int, big_bad: int, big_good: int, seed: int = 6) -> tuple[list[bytes], list[bool]]:
    """``good`` good bodies and a quarter as many hostile ones (20 % of the total), shuffled."""
    bodies: list[tuple[bytes, bool]] = [(row_body(i), False) for i in range(good - big_good)]
    pad = BIG - len(row_body(0, pad=1))
    bodies += [(row_body(good + k, pad=pad), False) for k in range(big_good)]
    n_bad = good // 4
    bad = [_hostile(i)[i % 11] for i in range(n_bad - big_bad)]
    bad += [b"{" + b"x" * (BIG - 1) for _ in range(big_bad)]
    bodies += [(b, True) for b in bad]
    random.Random(seed).shuffle(bodies)
    return [b for b, _ in bodies], [bad for _, bad in bodies]


def _expected_kinds_hold(bodies: list[bytes], bad: list[bool]) -> None:
    """The decoder itself agrees which bodies are hostile (one of each shape is enough)."""
    from crdb_pubsub.decode.decoder import decode_messages

    sample = {}
    for b, is_bad in zip(bodies, bad):
        sample.setdefault((is_bad, len(b) > 1_000_000, b[:6]), (b, is_bad))
    kinds = decode_messages([b for b, _ in sample.values()]).column("kind").to_pylist()
    for (b, is_bad), kind in zip(sample.values(), kinds):
        assert kind == ("malformed" if is_bad else "row"), (b[:80], kind)


@pytest.fixture(scope="module")
def flood():
    good = scaled(10_000, 100_000)
    bodies, bad = build_flood(good, big_bad=scaled(2, 8), big_good=scaled(1, 4))
    _expected_kinds_hold(bodies, bad)
    return bodies, bad


def _publish(host: str, topic: str, flood) -> tuple[list[str], set[str], set[str]]:
    bodies, bad = flood
    ids = publish_many(host, topic, bodies, attributes=ATTRS, window=2000)
    return ids, {i for i, b in zip(ids, bad) if b}, {i for i, b in zip(ids, bad) if not b}


def _reader(spark, host: str, sub: str, mode: str):
    return (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", host)
        .option("mode", mode)
        .option("ackDeadlineSeconds", str(ACK_DEADLINE))
        .option("maxMessagesPerTrigger", "2500")
        .load()
        .select("message_id", "kind", "error")
    )


def _drain_available_now(spark, host, sub, mode, out: Path, chk: Path):
    q = (
        _reader(spark, host, sub, mode)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(600), "AvailableNow run did not finish"
    assert q.exception() is None, q.exception()
    return q


def test_permissive_keeps_everything_with_the_right_kinds(spark, emulator_host, make_subscription, tmp_path, flood):
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    ids, bad_ids, _good_ids = _publish(emulator_host, topic, flood)
    t0 = time.monotonic()
    _drain_available_now(spark, emulator_host, sub, "PERMISSIVE", tmp_path / "out", tmp_path / "chk")
    t = sink_column(tmp_path / "out", ("message_id", "kind"))
    kinds = dict(zip(t["message_id"].to_pylist(), t["kind"].to_pylist()))
    lost, duplicated, unexpected = tally(ids, t["message_id"].to_pylist())
    wrong = [m for m in ids if kinds.get(m) != ("malformed" if m in bad_ids else "row")]
    report(
        "malformed-flood-PERMISSIVE",
        published=len(ids),
        hostile=len(bad_ids),
        lost=lost,
        duplicated=duplicated,
        wrong_kind=len(wrong),
        malformed_rows=sum(1 for k in kinds.values() if k == "malformed"),
        seconds=round(time.monotonic() - t0, 1),
    )
    assert not unexpected and lost == 0 and duplicated == 0
    assert not wrong, f"{len(wrong)} messages with the wrong kind, e.g. {wrong[:3]}"


def test_dropmalformed_drops_exactly_the_hostile_ones_and_counts_them(
    spark, emulator_host, make_subscription, tmp_path, flood
):
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    ids, bad_ids, good_ids = _publish(emulator_host, topic, flood)
    t0 = time.monotonic()
    q = (
        _reader(spark, emulator_host, sub, "DROPMALFORMED")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    try:
        with MetricsSampler(q) as sampler:
            wait_for(
                lambda: sampler.last().get("ackConfirmed", 0) >= len(ids), 600, "every message acknowledged", query=q
            )
            # The malformed count is taken beside the stream, after the commit: let it catch up.
            wait_for(
                lambda: sampler.last().get("malformed", 0) >= len(bad_ids),
                60,
                "the malformed metric to count every hostile message",
                query=q,
            )
    finally:
        q.stop()
    last = sampler.last()
    got = sink_column(tmp_path / "out")["message_id"].to_pylist()
    lost, duplicated, unexpected = tally(good_ids, got)
    report(
        "malformed-flood-DROPMALFORMED",
        published=len(ids),
        hostile=len(bad_ids),
        lost=lost,
        duplicated=duplicated,
        written=len(got),
        malformed_metric=last.get("malformed"),
        seconds=round(time.monotonic() - t0, 1),
    )
    assert not (set(got) & bad_ids), "a hostile message reached the sink"
    assert not unexpected and lost == 0 and duplicated == 0
    assert last["malformed"] == len(bad_ids)


def test_failfast_names_the_bad_message_and_acknowledges_nothing_of_its_batch(
    spark, emulator_host, make_subscription, tmp_path, flood
):
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    ids, bad_ids, _good_ids = _publish(emulator_host, topic, flood)
    q = (
        _reader(spark, emulator_host, sub, "FAILFAST")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "ff"))
        .option("checkpointLocation", str(tmp_path / "chk-ff"))
        .start()
    )
    with pytest.raises(Exception) as info:
        q.awaitTermination(300)
    text = str(info.value)
    m = re.search(r"malformed message '([^']+)'", text)
    assert m, text[-2000:]
    named = m.group(1)
    assert named in bad_ids, f"FAILFAST named {named}, which is not a hostile message"
    committed = sink_column(tmp_path / "ff")["message_id"].to_pylist()
    assert not (set(committed) & bad_ids)

    # Nothing of the failing batch was acknowledged: once its leases lapse, a PERMISSIVE run on
    # the same subscription sees every message the FAILFAST run did not commit.
    time.sleep(ACK_DEADLINE + 2)
    _drain_available_now(spark, emulator_host, sub, "PERMISSIVE", tmp_path / "after", tmp_path / "chk-after")
    after = sink_column(tmp_path / "after")["message_id"].to_pylist()
    lost, duplicated, unexpected = tally(ids, committed + after)
    report(
        "malformed-flood-FAILFAST",
        published=len(ids),
        hostile=len(bad_ids),
        lost=lost,
        duplicated=duplicated,
        committed_before_failure=len(committed),
        seen_by_permissive_rerun=len(after),
        named=named,
    )
    assert named in set(after), "the message FAILFAST stopped on was acknowledged"
    assert not unexpected and lost == 0 and duplicated == 0
