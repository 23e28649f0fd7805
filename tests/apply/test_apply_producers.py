"""Each producer's real and generated bodies through the apply.

* The conformance corpus (``tests/data/conformance/debezium_examples.jsonl``: TiCDC's codec tests,
  Debezium's documentation and test fixtures, each line naming its source file and commit): every
  body applies, or is refused with a named reason, or is no change (DDL, watermarks).
* Generated traffic: per producer, the simulator's changes (a snapshot first where the producer
  takes one), delivered shuffled and with duplicates, in batches, give the simulator's ground truth.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from crdb_pubsub import decode_messages
from crdb_pubsub.apply import DeltaStore, apply_arrow, compare_to_ground_truth, read_state
from crdb_pubsub.tools.simulator import ChangefeedSimulator, primary_keys, spark_schemas

CORPUS = Path(__file__).resolve().parents[1] / "data" / "conformance" / "debezium_examples.jsonl"
ENTRIES = [json.loads(line) for line in CORPUS.read_text().splitlines()]
KEY_MESSAGE = "a Debezium key message (only key columns), not a change event"
NO_KEY = "no key: a Debezium value carries none"
BAD_JSON = "a malformed message: message: invalid JSON"

# index: (source fragment, outcome); outcome: ("applied", table, op) | ("refused", reason) | ("none", kind)
EXPECT: dict[int, tuple[str, tuple]] = {
    0: ("codec_test.go#L115", ("refused", KEY_MESSAGE)),
    1: ("codec_test.go#L134", ("none", "ddl")),
    2: ("codec_test.go#L474", ("none", "ddl")),
    3: ("codec_test.go#L552", ("none", "ddl")),
    4: ("codec_test.go#L601", ("refused", KEY_MESSAGE)),
    5: ("codec_test.go#L611", ("none", "watermark")),
    6: ("codec_test.go#L803", ("refused", KEY_MESSAGE)),
    7: ("codec_test.go#L812", ("applied", "table1", "c")),
    8: ("codec_test.go#L870", ("applied", "table1", "c")),
    9: ("codec_test.go#L1019", ("applied", "table1", "u")),
    10: ("codec_test.go#L1198", ("applied", "table1", "u")),
    11: ("codec_test.go#L1273", ("applied", "table1", "d")),
    12: ("codec_test.go#L1333", ("applied", "table1", "d")),
    13: ("datatype.dbz.json", ("applied", "foo", "c")),
    14: ("datatype.dbz.key.json", ("refused", KEY_MESSAGE)),
    15: ("postgresql.adoc#L765", ("applied", "customers", "c")),
    **{i: (frag, ("refused", BAD_JSON)) for i, frag in
       ((16, "L1047"), (17, "L1152"), (18, "L1251"), (19, "L1330"), (20, "L1365"), (21, "L639"), (22, "L501"))},
    23: ("serde-with-schema.json", ("applied", "customers", "c")),
    24: ("serde-without-schema.json", ("applied", "customers", "c")),
    25: ("serde-update.json", ("applied", "customers", "u")),
}  # fmt: skip

# Where each producer's record key travels: TiCDC's Kafka key (entry 6, {"tiny": 1}) in the `key`
# attribute, as Google's Pub/Sub Kafka connector carries it, for the events of that row (7-10);
# the MySQL connector's key (entry 14) as Debezium Server's ordering key. The other events come
# without their key in the corpus (TiCDC's deletes are of {"tiny": 2}, whose key message it does
# not hold; the documentation's and fixtures' events): the user names the key columns.
TICDC_KEY = ENTRIES[6]["body"]
MYSQL_KEY = ENTRIES[14]["body"]
KEY_COLUMNS = {"customers": ["id"], "table1": ["tiny"]}


def _apply_one(state: Path, index: int, with_keys: bool):
    body = ENTRIES[index]["body"].encode()
    attributes = {"key": TICDC_KEY} if with_keys and 7 <= index <= 10 else None
    ordering_key = MYSQL_KEY if with_keys and index == 13 else ""
    batch = decode_messages([body], message_ids=["m"], attributes=[attributes], ordering_keys=[ordering_key])
    kind = batch.column("kind")[0].as_py()
    result = apply_arrow(
        pa.Table.from_batches([batch]),
        0,
        store=DeltaStore(str(state)),
        app_id="corpus",
        key_columns=KEY_COLUMNS if with_keys and index not in (7, 8, 9, 10) else None,
    )
    return kind, result


def test_every_corpus_entry_has_an_expected_outcome():
    assert sorted(EXPECT) == list(range(len(ENTRIES)))


@pytest.mark.parametrize("index", sorted(EXPECT))
def test_corpus_body_applies_or_is_refused_with_a_reason(tmp_path: Path, index: int):
    fragment, outcome = EXPECT[index]
    assert fragment in ENTRIES[index]["source"]
    kind, res = _apply_one(tmp_path, index, with_keys=True)
    if outcome[0] == "none":
        assert kind == outcome[1] and res.tables == {} and res.malformed == 0
    elif outcome[0] == "refused":
        assert res.malformed == 1 and outcome[1] in res.errors[0], res.errors
    else:
        _, table, op = outcome
        counts = res.tables[table]
        assert (counts.upserts, counts.deletes, counts.malformed) == ((0, 1, 0) if op == "d" else (1, 0, 0))
        rows = read_state(str(tmp_path), table, include_deleted=True, with_meta=True).to_pylist()
        assert len(rows) == 1 and rows[0]["_crdb_deleted"] == (op == "d")


@pytest.mark.parametrize("index", [i for i, (_, o) in EXPECT.items() if o[0] == "applied"])
def test_corpus_change_without_its_key_is_refused_not_guessed(tmp_path: Path, index: int):
    _, res = _apply_one(tmp_path, index, with_keys=False)
    assert res.malformed == 1 and NO_KEY in res.errors[0], res.errors


def test_ticdc_key_attribute_of_another_row_is_refused(tmp_path: Path):
    """Entry 11 deletes {"tiny": 2}: the key of {"tiny": 1} (entry 6) is not its key."""
    body = ENTRIES[11]["body"].encode()
    batch = decode_messages([body], message_ids=["m"], attributes=[{"key": TICDC_KEY}])
    res = apply_arrow(pa.Table.from_batches([batch]), 0, store=DeltaStore(str(tmp_path)), app_id="t")
    assert res.malformed == 1 and "gives `tiny` = 1, the row image 2: not this row's key" in res.errors[0]


def test_corpus_values_are_typed_from_the_mysql_connector(tmp_path: Path):
    """The real MySQL connector's DATE (days), DATETIME (ms), TIMESTAMP (ISO text) and BIGINT, typed."""
    state = tmp_path / "typed"
    body = ENTRIES[13]["body"].encode()
    batch = decode_messages([body], message_ids=["m"], ordering_keys=[MYSQL_KEY])
    ddl = {"foo": "pk INT, col_d_2023 DATE, col_dt BIGINT, col_ts TIMESTAMP, col_bigint BIGINT"}
    res = apply_arrow(pa.Table.from_batches([batch]), 0, store=DeltaStore(str(state)), app_id="t", schemas=ddl)
    assert res.malformed == 0, res.errors
    (row,) = read_state(str(state), "foo").to_pylist()
    assert (str(row["col_d_2023"]), row["col_dt"], str(row["col_ts"]), row["col_bigint"]) == (
        "2023-11-30",
        1701347696000,
        "2023-11-30 12:34:56+00:00",
        -9223372036854775808,
    )


# -- generated traffic: shuffled, duplicated, in batches == the ground truth -------------------------


@pytest.mark.parametrize("producer", ["debezium-postgres", "debezium-mysql", "ticdc"])
@pytest.mark.parametrize("seed", [1, 2])
def test_shuffled_duplicated_stream_equals_the_ground_truth(tmp_path: Path, producer: str, seed: int):
    sim = ChangefeedSimulator(
        seed=seed,
        producer=producer,
        snapshot_rows=0 if producer == "ticdc" else 40,
        resolved_every=25 if producer == "ticdc" else 0,
        mix=(0.5, 0.35, 0.15),
    )
    messages = list(sim.events(500))
    rng = random.Random(seed)
    stream = messages + rng.sample(messages, len(messages) // 10)
    rng.shuffle(stream)
    schemas = spark_schemas(producer=producer)
    store = DeltaStore(str(tmp_path))
    applied = deleted = 0
    i = batch_id = 0
    while i < len(stream):
        chunk = stream[i : i + rng.randint(20, 200)]
        i += len(chunk)
        batch = decode_messages(
            [m.data for m in chunk],
            message_ids=[f"{batch_id}-{j}" for j in range(len(chunk))],
            attributes=[m.attributes or None for m in chunk],
            ordering_keys=[m.ordering_key for m in chunk],
        )
        res = apply_arrow(pa.Table.from_batches([batch]), batch_id, store=store, app_id="gen", schemas=schemas)
        assert res.malformed == 0, res.errors
        applied += sum(c.upserts for c in res.tables.values())
        deleted += sum(c.deletes for c in res.tables.values())
        batch_id += 1
    assert deleted > 0 and applied > 0
    assert compare_to_ground_truth(str(tmp_path), sim.ground_truth(), schemas, primary_keys()) == []
