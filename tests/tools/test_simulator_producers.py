"""The simulator's Debezium and TiCDC traffic: layout, positions, snapshot, ground truth, flags."""

from __future__ import annotations

import json

import pytest

from crdb_pubsub import decode_messages
from crdb_pubsub.tools.simulator import ChangefeedSimulator, main
from crdb_pubsub.tools.simulator.debezium import go_double, java_double


def _messages(producer: str, n: int = 60, **kw):
    return list(ChangefeedSimulator(seed=5, producer=producer, **kw).events(n))


@pytest.mark.parametrize("producer", ["debezium-postgres", "debezium-mysql"])
def test_debezium_server_layout_key_as_ordering_key(producer: str):
    msgs = _messages(producer)
    first = msgs[0]
    body = json.loads(first.data)
    assert list(body) == ["schema", "payload"]
    assert list(body["payload"]) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert b" " not in first.data.split(b'"payload"')[0]  # the JSON converter's compact schema
    key = json.loads(first.ordering_key)
    assert list(key) == ["schema", "payload"] and key["payload"] == {"id": body["payload"]["after"]["id"]}
    assert first.attributes == {}
    rows = decode_messages([m.data for m in msgs]).to_pylist()
    assert {r["kind"] for r in rows} == {"row"} and {r["envelope"] for r in rows} == {"debezium"}
    assert {r["op"] for r in rows} == {"c", "u", "d"}


def test_ticdc_layout_key_attribute_and_watermarks():
    msgs = _messages("ticdc", resolved_every=20)
    rows = [m for m in msgs if m.kind == "row"]
    body = json.loads(rows[0].data)
    assert list(body) == ["payload", "schema"]
    assert list(body["payload"]) == ["source", "ts_ms", "transaction", "op", "before", "after"]
    assert json.loads(rows[0].attributes["key"])["payload"] == {"id": body["payload"]["after"]["id"]}
    assert rows[0].ordering_key == ""
    decoded = decode_messages([m.data for m in msgs]).to_pylist()
    assert sum(r["kind"] == "watermark" for r in decoded) == 3 * 3  # every 20 changes, to each of 3 topics


@pytest.mark.parametrize(
    ("producer", "field"),
    [("debezium-postgres", "lsn"), ("debezium-mysql", "pos"), ("ticdc", "commit_ts")],
)
def test_positions_increase_with_the_commit_order(producer: str, field: str):
    sources = [json.loads(m.data)["payload"]["source"] for m in _messages(producer, 300) if m.kind == "row"]
    if producer == "debezium-mysql":
        places = [(int(s["file"].rsplit(".", 1)[1]), s["pos"], s["row"]) for s in sources]
        assert len({p[0] for p in places}) == 1  # 300 changes: one binlog file
    else:
        places = [s[field] for s in sources]
    assert places == sorted(places) and len(set(places)) == len(places)


def test_snapshot_reads_share_one_position_then_the_stream_follows():
    msgs = _messages("debezium-postgres", 30, snapshot_rows=40)
    payloads = [json.loads(m.data)["payload"] for m in msgs]
    reads = [p for p in payloads if p["op"] == "r"]
    assert reads and payloads[: len(reads)] == reads and len(payloads) == len(reads) + 30
    assert {p["source"]["lsn"] for p in reads} == {reads[0]["source"]["lsn"]}
    assert [p["source"]["snapshot"] for p in (reads[0], reads[-1])] == ["first", "last"]
    assert all(p["source"]["lsn"] > reads[0]["source"]["lsn"] for p in payloads[len(reads) :])


def test_the_changes_are_cockroachdbs_laid_out_otherwise():
    """One seed, one sequence of row changes, whichever producer: the same keys live at the end."""
    truths = {}
    for producer in ("cockroachdb", "debezium-postgres", "debezium-mysql", "ticdc"):
        sim = ChangefeedSimulator(seed=9, producer=producer)
        list(sim.events(200))
        truths[producer] = {t: sorted(rows) for t, rows in sim.ground_truth().items()}
    assert len({json.dumps(t, sort_keys=True) for t in truths.values()}) == 1


def test_same_seed_same_bytes():
    assert [m.data for m in _messages("ticdc")] == [m.data for m in _messages("ticdc")]


@pytest.mark.parametrize(
    ("value", "java", "go"),
    [
        (26.3, "26.3", "26.3"),
        (40.0, "40.0", "40"),
        (5e-07, "5.0E-7", "5e-7"),
        (2e-5, "2.0E-5", "0.00002"),
        (12345678.9, "1.23456789E7", "12345678.9"),
    ],
)
def test_doubles_as_jackson_and_go_write_them(value: float, java: str, go: str):
    assert (java_double(value), go_double(value)) == (java, go)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--producer", "ticdc", "--diff"], "--diff: a CockroachDB changefeed option, not for producer='ticdc'"),
        (["--producer", "debezium-mysql", "--resolved-every", "5"], "--resolved-every: debezium-mysql sends no"),
        (["--producer", "ticdc", "--snapshot-rows", "5"], "--snapshot-rows: TiCDC's changefeeds start"),
        (["--producer", "oracle"], "invalid choice: 'oracle'"),
    ],
)
def test_simulate_flags_mistakes_name_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--dry-run"], prog="crdb-pubsub simulate")
    assert exc.value.code == 2 and message in capsys.readouterr().err
