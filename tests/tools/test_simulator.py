"""Tests of crdb_pubsub.tools.simulator: CockroachDB's exact bytes, determinism, ground truth, publishing."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import re
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from crdb_pubsub.tools.simulator import (
    INT8_MAX,
    TABLES,
    ChangefeedSimulator,
    SimMessage,
    crdb_json,
    main,
)

CONFORMANCE = Path(__file__).resolve().parents[1] / "data" / "conformance" / "crdb_examples.jsonl"
HLC_RE = re.compile(r"^\d{19}\.\d{10}$")


def _examples() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CONFORMANCE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _rows(msgs: list[SimMessage]) -> list[SimMessage]:
    return [m for m in msgs if m.kind == "row"]


def _split(msg: SimMessage) -> tuple[str, str, str]:
    """(key text, value text, topic) of a current-sink body, cut at the known key and topic."""
    text = msg.data.decode("utf-8")
    head = '{"Key":' + msg.key + ',"Value":'
    tail = ',"Topic":' + json.dumps(msg.topic) + "}"
    assert text.startswith(head) and text.endswith(tail), text[:200]
    return msg.key, text[len(head) : -len(tail)], msg.topic


def _loads(text: str) -> Any:
    return json.loads(text, parse_float=Decimal)


def _assert_sorted(obj: Any) -> None:
    if isinstance(obj, list):
        for x in obj:
            _assert_sorted(x)
    elif isinstance(obj, dict):
        assert list(obj) == sorted(obj), list(obj)
        for v in obj.values():
            _assert_sorted(v)


def _pairs(text: str) -> Any:
    """Parse keeping object key order, to check CockroachDB's sorted keys on the raw bytes."""
    return json.loads(text, parse_float=Decimal, object_pairs_hook=dict)


# --------------------------------------------------------------------------------------------
# The encoder against real CockroachDB bytes
# --------------------------------------------------------------------------------------------


def test_encoder_reproduces_every_pubsub_wire_example_byte_for_byte() -> None:
    wire = [e for e in _examples() if e.get("pubsub_wire") and e["body"].startswith("{")]
    assert len(wire) >= 6
    for ex in wire:
        body = json.loads(ex["body"], parse_float=Decimal)
        if "Key" in body:
            rebuilt = (
                '{"Key":'
                + crdb_json(body["Key"])
                + ',"Value":'
                + crdb_json(body["Value"])
                + ',"Topic":'
                + json.dumps(body["Topic"])
                + "}"
            )
        else:
            compact = dict(compact=True, escape_html=True)
            rebuilt = (
                '{"key":'
                + crdb_json(body["key"], **compact)
                + ',"value":'
                + crdb_json(body["value"], **compact)
                + ',"topic":'
                + json.dumps(body["topic"])
                + "}"
            )
            assert ex["ordering_key"] == crdb_json(body["key"])
        assert rebuilt == ex["body"], ex["source"]


def test_encoder_reproduces_cockroach_encoder_test_bodies() -> None:
    checked = 0
    for ex in _examples():
        if "encoder_test.go" not in ex["source"] and "changefeed_basics_test.go" not in ex["source"]:
            continue
        if not ex["body"].startswith("{"):
            continue
        parsed = json.loads(ex["body"], parse_float=Decimal)
        resolved = "resolved" in ex["body"]
        assert crdb_json(parsed, compact=resolved) == ex["body"], ex["source"]
        checked += 1
    assert checked >= 15


def test_encoder_types() -> None:
    assert crdb_json(Decimal("26.30")) == "26.30"
    assert crdb_json(INT8_MAX) == "9223372036854775807"
    assert (
        crdb_json({"b": [1, None, True], "a": 'Zoë & <東京>\n"\\'})
        == '{"a": "Zoë & <東京>\\n\\"\\\\", "b": [1, null, true]}'
    )
    assert crdb_json("<&>", escape_html=True) == '"\\u003c\\u0026\\u003e"'
    assert crdb_json("\x01\u2028") == '"\\u0001\\u2028"'
    assert crdb_json(5.0) == "5" and crdb_json(12.345) == "12.345" and crdb_json(1e-7) == "1E-7"
    with pytest.raises(ValueError):
        crdb_json(float("nan"))


# --------------------------------------------------------------------------------------------
# Layout of generated messages
# --------------------------------------------------------------------------------------------


def test_wrapped_layout_matches_the_documented_pubsub_example() -> None:
    sim = ChangefeedSimulator(seed=1, tables=["users"])
    first = next(iter(sim.events(1)))
    doc = next(e["body"] for e in _examples() if e.get("pubsub_wire") and e["body"].startswith('{"Key":'))
    shape = re.compile(r'^\{"Key":\["[^\]]+"\],"Value":\{"after": \{"address": .*\}\},"Topic":"users"\}$')
    assert shape.match(doc)
    assert shape.match(first.data.decode())
    assert first.data.startswith(b'{"Key":["') and b'"],"Value":{"after": {' in first.data
    assert first.data.endswith(b'},"Topic":"users"}')
    assert first.attributes == {} and first.ordering_key == "" and first.op == "c"


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"diff": True, "updated": True, "mvcc_timestamp": True, "key_in_value": True},
        {"envelope": "bare", "updated": True, "key_in_value": True},
        {
            "envelope": "enriched",
            "enriched_properties": ["source", "schema"],
            "diff": True,
            "updated": True,
            "mvcc_timestamp": True,
            "key_in_value": True,
        },
        {"column_families": True, "diff": True},
    ],
)
def test_values_are_cockroach_encoded_sorted_and_spaced(opts: dict[str, Any]) -> None:
    sim = ChangefeedSimulator(seed=11, resolved_every=25, **opts)
    for msg in _rows(list(sim.events(300))):
        key, value, _ = _split(msg)
        for text in (key, value):
            parsed = _pairs(text)
            _assert_sorted(parsed)
            # Re-encoding the parsed bytes gives the same bytes: spacing, escapes and digits are exact.
            assert crdb_json(parsed) == text


def test_resolved_messages_are_exact_and_go_to_every_topic() -> None:
    for envelope, template in (
        ("wrapped", '{"resolved":"%s"}'),
        ("bare", '{"__crdb__":{"resolved":"%s"}}'),
        ("enriched", '{"resolved":"%s"}'),
    ):
        sim = ChangefeedSimulator(seed=2, envelope=envelope, resolved_every=10, column_families=True)
        msgs = list(sim.events(100))
        resolved = [m for m in msgs if m.kind == "resolved"]
        assert len(resolved) == 10 * len(sim.topics())
        for m in resolved:
            assert m.data == (template % m.hlc).encode() and m.key == "" and m.ordering_key == ""
        by_hlc = collections.defaultdict(set)
        for m in resolved:
            by_hlc[m.hlc].add(m.topic)
        assert all(topics == set(sim.topics()) for topics in by_hlc.values())


def test_hlc_strictly_increasing_and_resolved_covers_earlier_rows() -> None:
    sim = ChangefeedSimulator(seed=3, resolved_every=7)
    msgs = list(sim.events(500))
    last_commit: tuple[int, int] | None = None
    same_wall = 0
    seen_commits = []
    for m in msgs:
        assert HLC_RE.match(m.hlc), m.hlc
        ts = tuple(int(x) for x in m.hlc.split("."))
        if m.kind == "row":
            if last_commit is not None:
                assert ts > last_commit
                same_wall += ts[0] == last_commit[0]
            last_commit = ts
            seen_commits.append(ts)
        else:
            # Resolved: every row published so far is at or below it, every later one above.
            assert ts >= last_commit
    assert same_wall > 10  # the logical component really is exercised
    later = [tuple(int(x) for x in m.hlc.split(".")) for m in msgs if m.kind == "row"]
    assert later == sorted(set(later))


def test_decimal_trailing_zeros_and_big_int8_survive() -> None:
    sim = ChangefeedSimulator(seed=4)
    msgs = _rows(list(sim.events(600)))
    trailing_zero = big = int8_max = 0
    for m in msgs:
        _, value, _ = _split(m)
        after = _loads(value)["after"]
        if not after:
            continue
        for col in ("balance", "revenue"):
            d = after.get(col)
            if isinstance(d, Decimal):
                assert d.as_tuple().exponent == -2
                trailing_zero += str(d).endswith("0")
        odo = after.get("odometer")
        if isinstance(odo, int) and odo > 2**53:
            big += 1
            assert str(odo) in value
            int8_max += odo == INT8_MAX
    assert trailing_zero > 3 and big > 10 and int8_max > 0
    assert re.search(rb'"balance": \d+\.\d0[,}]', b"".join(m.data for m in msgs))


def test_non_ascii_and_special_strings_are_raw_utf8() -> None:
    sim = ChangefeedSimulator(seed=5)
    blob = b"".join(m.data for m in sim.events(800))
    for word in ("Zoë", "Jürgen", "東京", "🚲"):
        assert word.encode("utf-8") in blob
    assert b"\\u00" not in blob.replace(b"\\u0009", b"")  # no \u escapes of non-ASCII
    assert b"Caf\xc3\xa9 & Bar <2>" in blob  # no HTML escaping in the current sink
    assert b'"NaN"' in blob or b'"Infinity"' in blob or b'"-Infinity"' in blob
    assert re.search(rb'"raw": "\\\\x[0-9a-f]*"', blob)


# --------------------------------------------------------------------------------------------
# Ground truth
# --------------------------------------------------------------------------------------------


def _replay(msgs: list[SimMessage], envelope: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Rebuild table state from the messages alone, independently of the simulator's code.

    With column families each family's message carries only its columns, so a row is the merge
    of its families and disappears when the delete of its last family arrives.
    """
    state: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in TABLES}
    for m in _rows(msgs):
        body = _loads(_split(m)[1])
        pk = m.key
        if envelope == "enriched":
            body = body.get("payload", body) if "schema" in body else body
            key = _loads(m.key)
            key = key.get("payload", key)
            pk = crdb_json([key[c] for c in TABLES[m.table].pk])
        table = state[m.table]
        families = dict(TABLES[m.table].families)
        suffix = m.topic.rsplit(".", 1)[-1]
        family_cols = (
            families.get(suffix, TABLES[m.table].column_names) if m.topic != m.table else TABLES[m.table].column_names
        )
        if m.op == "d":
            assert pk in table, "delete of a row that is not live"
            for col in family_cols:
                table[pk].pop(col, None)
            if not table[pk]:
                del table[pk]
            continue
        cols = body["after"] if envelope != "bare" else {k: v for k, v in body.items() if k != "__crdb__"}
        assert set(cols) == set(family_cols)
        if m.op == "u":
            assert pk in table, "update of a row that is not live"
        table.setdefault(pk, {}).update(cols)
    for rows in state.values():
        for row in rows.values():
            if isinstance(row.get("distance"), Decimal):
                row["distance"] = float(row["distance"])
    return state


@pytest.mark.parametrize(
    "opts",
    [
        {"diff": True},
        {"column_families": True},
        {"envelope": "bare"},
        {"envelope": "enriched", "enriched_properties": ["schema"]},
    ],
)
def test_ground_truth_equals_replay_in_commit_order(opts: dict[str, Any]) -> None:
    sim = ChangefeedSimulator(seed=6, mix=(1, 1, 0.5), resolved_every=20, **opts)
    msgs = list(sim.events(400))
    truth = sim.ground_truth()
    replay = _replay(msgs, opts.get("envelope", "wrapped"))
    assert set(truth) == set(TABLES)
    for table in TABLES:
        assert replay[table] == truth[table], table
    stats = sim.stats()
    assert sum(s["deletes"] for s in stats.values()) > 20
    assert sum(s["updates"] for s in stats.values()) > 50
    for table, s in stats.items():
        assert len(truth[table]) == s["inserts"] - s["deletes"]


def test_ground_truth_value_types() -> None:
    sim = ChangefeedSimulator(seed=7)
    list(sim.events(300))
    truth = sim.ground_truth()
    users = list(truth["users"].values())
    assert any(isinstance(u["balance"], Decimal) for u in users)
    vehicles = list(truth["vehicles"].values())
    assert all(isinstance(v["is_electric"], bool) for v in vehicles)
    assert any(isinstance(v["ext"], dict) for v in vehicles)
    assert all(isinstance(v["odometer"], (int, type(None))) for v in vehicles)
    for key, row in truth["vehicles"].items():
        assert key == crdb_json([row["city"], row["id"]])
    truth["users"].clear()
    assert sim.ground_truth()["users"], "ground_truth() must return a copy"


def test_determinism_and_independence_from_envelope() -> None:
    def run(**kw: Any) -> tuple[list[bytes], dict]:
        sim = ChangefeedSimulator(resolved_every=9, **kw)
        return [m.data for m in sim.events(250)], sim.ground_truth()

    a, truth_a = run(seed=42)
    b, truth_b = run(seed=42)
    c, _ = run(seed=43)
    assert a == b and truth_a == truth_b
    assert a != c
    _, truth_enriched = run(seed=42, envelope="enriched", enriched_properties=["source"], diff=True)
    _, truth_families = run(seed=42, column_families=True)
    assert truth_enriched == truth_a == truth_families


def test_events_continue_where_they_stopped() -> None:
    one = ChangefeedSimulator(seed=8)
    two = ChangefeedSimulator(seed=8)
    whole = [m.data for m in one.events(200)]
    parts = [m.data for m in two.events(120)] + [m.data for m in two.events(80)]
    assert whole == parts and one.ground_truth() == two.ground_truth()


# --------------------------------------------------------------------------------------------
# Envelope shapes and topic naming
# --------------------------------------------------------------------------------------------


def test_wrapped_deletes_and_diff() -> None:
    sim = ChangefeedSimulator(seed=9, diff=True, mix=(1, 1, 1))
    msgs = _rows(list(sim.events(200)))
    for m in msgs:
        value = _loads(_split(m)[1])
        assert set(value) == {"after", "before"}
        if m.op == "c":
            assert value["before"] is None and value["after"]
        elif m.op == "d":
            assert value["after"] is None and value["before"]
        else:
            assert value["after"] and value["before"] and value["after"] != value["before"]


def test_bare_shape() -> None:
    sim = ChangefeedSimulator(seed=10, envelope="bare", updated=True, mvcc_timestamp=True, mix=(1, 1, 1))
    msgs = _rows(list(sim.events(200)))
    assert any(m.op == "d" for m in msgs)
    for m in msgs:
        value = _loads(_split(m)[1])
        table = TABLES[m.table]
        assert set(value) == set(table.column_names) | {"__crdb__"}
        assert value["__crdb__"] == {"mvcc_timestamp": m.hlc, "updated": m.hlc}
        if m.op == "d":
            for col in table.column_names:
                expected_null = col not in table.pk
                assert (value[col] is None) == expected_null, col
    plain = ChangefeedSimulator(seed=10, envelope="bare")
    assert all(b"__crdb__" not in m.data for m in _rows(list(plain.events(50))))


def test_enriched_shape_with_source_and_schema() -> None:
    sim = ChangefeedSimulator(
        seed=12,
        envelope="enriched",
        enriched_properties="source,schema",
        diff=True,
        updated=True,
        mvcc_timestamp=True,
        mix=(1, 1, 1),
    )
    msgs = _rows(list(sim.events(150)))
    assert {m.op for m in msgs} == {"c", "u", "d"}
    for m in msgs:
        key = _loads(m.key)
        table = TABLES[m.table]
        assert set(key) == {"payload", "schema"} and list(key["payload"]) == sorted(table.pk)
        assert key["schema"]["name"] == f"{m.table}.key"
        body = _loads(_split(m)[1])
        assert set(body) == {"payload", "schema"}
        payload = body["payload"]
        assert set(payload) == {"after", "before", "op", "source", "ts_ns"}
        assert payload["op"] == m.op and (payload["after"] is None) == (m.op == "d")
        src = payload["source"]
        wall = int(m.hlc.split(".")[0])
        assert src["ts_hlc"] == m.hlc == src["mvcc_timestamp"] and src["ts_ns"] == wall
        assert payload["ts_ns"] > wall and src["table_name"] == m.table
        assert src["primary_keys"] == list(table.pk) and src["origin"] == "cockroachdb"
        fields = [f["field"] for f in body["schema"]["fields"]]
        assert fields == ["before", "after", "source", "ts_ns", "op"]
        after_schema = body["schema"]["fields"][1]
        assert after_schema["name"] == f"{m.table}.after.value"
        assert [f["field"] for f in after_schema["fields"]] == list(table.column_names)
    users = next(m for m in msgs if m.table == "users")
    balance = next(f for f in _loads(_split(users)[1])["schema"]["fields"][1]["fields"] if f["field"] == "balance")
    assert balance == {
        "field": "balance",
        "name": "decimal",
        "optional": True,
        "parameters": {"precision": "12", "scale": "2"},
        "type": "float64",
    }


def test_enriched_plain_key_is_an_object() -> None:
    sim = ChangefeedSimulator(seed=13, envelope="enriched", tables=["vehicles"])
    m = next(iter(sim.events(1)))
    assert re.match(r'^\{"city": "[^"]+", "id": "[0-9a-f-]{36}"\}$', m.key)
    assert set(_loads(_split(m)[1])) == {"after", "op", "ts_ns"}


def test_column_families_split_vehicles() -> None:
    sim = ChangefeedSimulator(seed=14, column_families=True, diff=True, tables=["vehicles", "users"])
    assert sim.topics() == ["vehicles.primary", "vehicles.details", "users"]
    families = dict(TABLES["vehicles"].families)
    msgs = _rows(list(sim.events(300)))
    for m in msgs:
        if m.table != "vehicles":
            continue
        family = m.topic.split(".")[1]
        value = _loads(_split(m)[1])
        for side in ("after", "before"):
            if value[side] is not None:
                assert set(value[side]) == set(families[family])
    topics = collections.Counter(m.topic for m in msgs if m.table == "vehicles")
    assert topics["vehicles.primary"] > 0 and topics["vehicles.details"] > 0
    # An update only touching one family's columns only produces that family's message.
    updates = collections.Counter(m.hlc for m in msgs if m.table == "vehicles" and m.op == "u")
    assert 1 in updates.values()


def test_topic_naming_options() -> None:
    assert ChangefeedSimulator(full_table_name=True).topics() == [
        "movr.public.users",
        "movr.public.vehicles",
        "movr.public.rides",
    ]
    sim = ChangefeedSimulator(topic_name="movr-all", resolved_every=5, seed=15)
    msgs = list(sim.events(20))
    assert sim.topics() == ["movr-all"] and {m.topic for m in msgs} == {"movr-all"}
    assert all(m.data.endswith(b',"Topic":"movr-all"}') for m in _rows(msgs))
    assert sum(m.kind == "resolved" for m in msgs) == 4
    fam = ChangefeedSimulator(full_table_name=True, column_families=True, tables=["vehicles"])
    assert fam.topics() == ["movr.public.vehicles.primary", "movr.public.vehicles.details"]


def test_legacy_wrapper() -> None:
    sim = ChangefeedSimulator(seed=16, legacy_wrapper=True, diff=True, resolved_every=50)
    msgs = list(sim.events(400))
    for m in _rows(msgs):
        text = m.data.decode()
        assert text.startswith('{"key":[') and ',"value":{"after":' in text
        assert text.endswith(f',"topic":"{m.topic}"}}')
        assert text.startswith('{"key":' + m.key.replace(", ", ",") + ',"value":')
        assert m.ordering_key == m.key and m.key == crdb_json(json.loads(m.key))
        assert "<" not in text and ">" not in text and "&" not in text  # Go's json.Marshal escapes them
        assert _loads(text)["key"] == json.loads(m.key)
    assert any("\\u0026" in m.data.decode() for m in msgs)
    assert all(m.data.startswith(b'{"resolved":') for m in msgs if m.kind == "resolved")


def test_table_name_attribute() -> None:
    sim = ChangefeedSimulator(seed=17, with_table_name_attribute=True, resolved_every=3)
    for m in sim.events(9):
        assert m.attributes == ({"TABLE_NAME": m.table} if m.kind == "row" else {})


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"envelope": "row"}, "envelope"),
        ({"enriched_properties": ["source"]}, "enriched_properties"),
        ({"envelope": "enriched", "enriched_properties": ["sauce"]}, "enriched_properties"),
        ({"envelope": "bare", "diff": True}, "diff"),
        ({"envelope": "enriched", "legacy_wrapper": True}, "legacy_wrapper"),
        ({"resolved_every": -1}, "resolved_every"),
        ({"tables": ["users", "orders"]}, "tables"),
        ({"tables": []}, "tables"),
        ({"topic_name": "9bad"}, "topic_name"),
        ({"mix": (0, 1, 1)}, "mix"),
        ({"mix": {"upsert": 1}}, "mix"),
        ({"updated": "yes"}, "updated"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_bad_options_name_themselves(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ChangefeedSimulator(**kwargs)


def test_bad_n_rows() -> None:
    with pytest.raises(ValueError, match="n_rows"):
        list(ChangefeedSimulator().events(-1))


def test_a_few_hundred_events_are_fast() -> None:
    sim = ChangefeedSimulator(seed=18, diff=True, updated=True, resolved_every=10)
    start = time.perf_counter()
    n = len(list(sim.events(500)))
    elapsed = time.perf_counter() - start
    assert n > 500 and elapsed < 0.5, elapsed


# --------------------------------------------------------------------------------------------
# Publishing, with a fake publisher (no emulator)
# --------------------------------------------------------------------------------------------


class _FakePublisher:
    """Records publishes; completes every future at once with a fresh message id."""

    class publisher_options:
        enable_message_ordering = False

    def __init__(self) -> None:
        self.created: list[str] = []
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def create_topic(self, *, name: str) -> None:
        self.created.append(name)

    def publish(self, path: str, data: bytes, **attrs: str) -> concurrent.futures.Future:
        self.sent.append((path, data, attrs))
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(str(len(self.sent)))
        return fut


def test_publish_shuffles_and_duplicates_deterministically() -> None:
    def run() -> tuple[Any, _FakePublisher, list[bytes]]:
        reference = [m.data for m in ChangefeedSimulator(seed=19, resolved_every=25).events(200)]
        pub = _FakePublisher()
        report = ChangefeedSimulator(seed=19, resolved_every=25).publish(
            pub, "p", 200, shuffle_window=16, duplicate_fraction=0.1
        )
        return report, pub, reference

    report, pub, reference = run()
    _report2, pub2, _ = run()
    assert pub.sent == pub2.sent
    assert pub.created == [f"projects/p/topics/{t}" for t in ("users", "vehicles", "rides")]
    sent = [d for _, d, _ in pub.sent]
    assert report.published == len(sent) == len(reference) + report.duplicates
    assert report.duplicates == round(0.1 * len(reference))
    extra = collections.Counter(sent) - collections.Counter(reference)
    assert sum(extra.values()) == report.duplicates  # duplicates are byte-identical copies
    assert set(sent) == set(reference) and sent != reference
    assert report.row_messages + report.resolved_messages == len(reference)
    assert sum(report.per_topic.values()) == report.published
    assert sum(len(v) for v in report.message_ids.values()) == report.published


def test_publish_surfaces_failures_and_checks_ordering() -> None:
    class Failing(_FakePublisher):
        def publish(self, path: str, data: bytes, **attrs: str) -> concurrent.futures.Future:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            fut.set_exception(RuntimeError("boom"))
            return fut

    with pytest.raises(RuntimeError, match=r"publishes failed.*boom"):
        ChangefeedSimulator(seed=20).publish(Failing(), "p", 5)
    with pytest.raises(ValueError, match="legacy_wrapper"):
        ChangefeedSimulator(legacy_wrapper=True).publish(_FakePublisher(), "p", 5)
    with pytest.raises(ValueError, match="duplicate_fraction"):
        ChangefeedSimulator().publish(_FakePublisher(), "p", 5, duplicate_fraction=2)


def test_cli_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dry-run", "--rows", "6", "--seed", "3", "--tables", "users", "--resolved-every", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and lines[0].startswith('users\t{"Key":["')
    with pytest.raises(SystemExit):
        main(["--dry-run", "--envelope", "bare", "--diff"])


# --------------------------------------------------------------------------------------------
# Against the real emulator
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_publish_to_emulator_and_pull_back() -> None:
    from crdb_pubsub.emulator import subscriber_client
    from crdb_pubsub.tools.simulator import make_publisher
    from emulator_policy import emulator_or_skip

    project = "crdb-sim-test"
    sim = ChangefeedSimulator(seed=21, diff=True, updated=True, resolved_every=50, with_table_name_attribute=True)
    expected = list(
        ChangefeedSimulator(seed=21, diff=True, updated=True, resolved_every=50, with_table_name_attribute=True).events(
            300
        )
    )
    with emulator_or_skip() as host_port:
        publisher = make_publisher(host_port)
        subscriber = subscriber_client(host_port)
        try:
            subs = {}
            for topic in sim.topics():
                topic_path = publisher.topic_path(project, topic)
                publisher.create_topic(name=topic_path)
                subs[topic] = subscriber.subscription_path(project, f"sub-{topic}")
                subscriber.create_subscription(name=subs[topic], topic=topic_path, ack_deadline_seconds=60)
            report = sim.publish(publisher, project, 300)
            assert report.published == len(expected) and report.duplicates == 0
            got = {t: _pull_all(subscriber, s, report.per_topic[t]) for t, s in subs.items()}
        finally:
            publisher.stop()
            publisher.transport.close()
            subscriber.close()
    for topic in sim.topics():
        want = [(m.data, m.attributes) for m in expected if m.topic == topic]
        assert sorted(got[topic], key=repr) == sorted(want, key=repr), topic
        ids = report.message_ids[topic]
        assert len(ids) == len(set(ids)) == len(want)


def _pull_all(subscriber: Any, subscription: str, expected: int, deadline_s: float = 30.0) -> list:
    out: list[tuple[bytes, dict[str, str]]] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < expected and time.monotonic() < deadline:
        resp = subscriber.pull(subscription=subscription, max_messages=1000, timeout=5.0)
        if not resp.received_messages:
            continue
        for rm in resp.received_messages:
            out.append((rm.message.data, dict(rm.message.attributes)))
        subscriber.acknowledge(subscription=subscription, ack_ids=[rm.ack_id for rm in resp.received_messages])
    return out


def test_every_change_yields_a_message() -> None:
    sim = ChangefeedSimulator(seed=22, mix=(1, 3, 1))
    msgs = list(sim.events(2000))
    assert len(msgs) == 2000
    assert sum(s["row_messages"] for s in sim.stats().values()) == 2000
