"""CDC apply: the reduce/merge rules on hand-made batches (pure Spark), then simulator -> emulator ->
connector -> apply end to end against the simulator's ground truth."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import publish_simulated

from crdb_pubsub.apply import (
    apply_batch,
    compare_to_ground_truth,
    foreach_batch_apply,
    parse_hlc,
    read_state,
    simulator_schemas,
)

SCHEMA = {"accounts": "id BIGINT, name STRING, balance DECIMAL(12,2), big BIGINT, ext STRING"}
_ids = itertools.count()
BASE = 1_745_000_000_000_000_000


def hlc(wall: int, logical: int = 0) -> str:
    return "%d.%010d" % (wall, logical)


def change(key: int, at: str, op: str = "u", **after) -> dict:
    """One decoded row change as the source emits it (``after`` as exact JSON text)."""
    body = None if op == "d" else '{"id": %d' % key + "".join(f', "{k}": {v}' for k, v in after.items()) + "}"
    return {"kind": "row", "table_name": "accounts", "key": f"[{key}]", "op": op, "after": body,
            "updated": at, "message_id": f"m{next(_ids):06d}"}


def batch(spark, rows: list[dict]):
    from crdb_pubsub.decode.schema import spark_schema

    schema = spark_schema()
    full = [{c: r.get(c) for c in schema.fieldNames()} for r in rows]
    return spark.createDataFrame(full, schema)


def state(spark, state_dir: Path) -> dict[int, dict]:
    return {r.id: r.asDict() for r in read_state(spark, str(state_dir), "accounts").collect()}


# ---------------------------------------------------------------------------------------------
# Pure Spark: the reduce and merge rules
# ---------------------------------------------------------------------------------------------

def test_parse_hlc_is_exact_integers():
    assert parse_hlc("1745000000000000001.0000000002") == (1745000000000000001, 2)
    assert parse_hlc("1745000000000000001") == (1745000000000000001, 0)
    # As floats these two are equal; as HLCs the first is newer.
    assert float("1745000000000000001.0") == float("1745000000000000000.9999999999")
    assert parse_hlc("1745000000000000001.0000000000") > parse_hlc("1745000000000000000.9999999999")
    assert parse_hlc("not-an-hlc") is None and parse_hlc(None) is None


@pytest.mark.spark
def test_latest_hlc_wins_exactly_regardless_of_arrival_order(spark, tmp_path: Path):
    rows = [
        change(1, hlc(BASE + 1), name='"newest by 1 ns"'),
        change(1, hlc(BASE, 9), name='"older"'),  # float(...) of both HLCs is the same number
        change(2, hlc(BASE, 10), name='"logical 10"'),
        change(2, hlc(BASE, 2), name='"logical 2"'),  # "2" > "10" as text: must not win
    ]
    res = apply_batch(batch(spark, rows), 0, state_dir=str(tmp_path), schemas=SCHEMA)
    got = state(spark, tmp_path)
    assert got[1]["name"] == "newest by 1 ns" and got[2]["name"] == "logical 10"
    t = res.tables["accounts"]
    assert (t.changes, t.inserts, t.updates, t.deletes, t.superseded, t.rows) == (4, 2, 0, 0, 2, 2)


@pytest.mark.spark
def test_ties_delete_beats_update_then_greater_after_text(spark, tmp_path: Path):
    at = hlc(BASE, 3)
    rows = [
        change(1, at, name='"kept?"'), change(1, at, op="d"),          # same HLC: the delete wins
        change(2, at, name='"aaa"'), change(2, at, name='"bbb"'),      # same HLC and op: greater after text
    ]
    apply_batch(batch(spark, list(reversed(rows))), 0, state_dir=str(tmp_path), schemas=SCHEMA)
    got = state(spark, tmp_path)
    assert 1 not in got
    assert got[2]["name"] == "bbb"
    # The same rows in the other arrival order give the same state.
    other = tmp_path / "other"
    apply_batch(batch(spark, rows), 0, state_dir=str(other), schemas=SCHEMA)
    assert state(spark, other) == got


@pytest.mark.spark
def test_delete_tombstone_blocks_late_older_update_and_newer_insert_revives(spark, tmp_path: Path):
    sd = str(tmp_path)
    apply_batch(batch(spark, [change(1, hlc(BASE + 5), name='"v5"')]), 0, state_dir=sd, schemas=SCHEMA)
    r = apply_batch(batch(spark, [change(1, hlc(BASE + 7), op="d")]), 1, state_dir=sd, schemas=SCHEMA)
    assert r.tables["accounts"].deletes == 1 and r.tables["accounts"].rows == 0
    r = apply_batch(batch(spark, [change(1, hlc(BASE + 6), name='"late v6"')]), 2, state_dir=sd, schemas=SCHEMA)
    assert state(spark, tmp_path) == {}, "a late older update resurrected a deleted row"
    assert r.tables["accounts"].superseded == 1 and r.tables["accounts"].tombstones == 1
    # An older change for a key deleted in the same batch is equally dead.
    r = apply_batch(batch(spark, [change(2, hlc(BASE + 9), op="d"), change(2, hlc(BASE + 8), name='"x"')]), 3,
                    state_dir=sd, schemas=SCHEMA)
    assert state(spark, tmp_path) == {} and r.tables["accounts"].tombstoned == 1
    apply_batch(batch(spark, [change(1, hlc(BASE + 8), op="c", name='"v8"')]), 4, state_dir=sd, schemas=SCHEMA)
    assert state(spark, tmp_path)[1]["name"] == "v8"


@pytest.mark.spark
def test_rerun_of_the_same_batch_is_idempotent(spark, tmp_path: Path):
    sd = str(tmp_path)
    rows = [change(k, hlc(BASE + k), name=f'"n{k}"', balance="1.10") for k in range(5)]
    first = apply_batch(batch(spark, rows), 0, state_dir=sd, schemas=SCHEMA)
    before = state(spark, tmp_path)
    again = apply_batch(batch(spark, rows), 0, state_dir=sd, schemas=SCHEMA)
    assert state(spark, tmp_path) == before
    assert first.tables["accounts"].inserts == 5
    assert again.tables["accounts"].inserts == 0 and again.tables["accounts"].superseded == 5
    assert again.tables["accounts"].version == first.tables["accounts"].version
    assert json.loads((tmp_path / "_batches" / "000000000000.json").read_text())["batch_id"] == 0


@pytest.mark.spark
def test_decimal_and_bigint_are_exact_and_bad_values_are_malformed_not_applied(spark, tmp_path: Path):
    sd = str(tmp_path)
    rows = [
        change(1, hlc(BASE + 1), balance="26.30", big="9223372036854775807",
               ext='{"w": 2.50, "n": 9223372036854775807}'),
        change(2, hlc(BASE + 1), balance="-0.01", big="-9223372036854775808"),
    ]
    apply_batch(batch(spark, rows), 0, state_dir=sd, schemas=SCHEMA)
    got = state(spark, tmp_path)
    assert str(got[1]["balance"]) == "26.30" and got[1]["big"] == 9223372036854775807
    assert got[1]["ext"] == '{"w": 2.50, "n": 9223372036854775807}'  # JSONB keeps its exact text
    assert str(got[2]["balance"]) == "-0.01" and got[2]["big"] == -9223372036854775808
    bad = [change(1, hlc(BASE + 2), balance="1.234"),  # more scale than DECIMAL(12,2): not rounded
           change(2, hlc(BASE + 2), big="9223372036854775808")]  # out of BIGINT range
    malformed_src = {"kind": "malformed", "table_name": None, "error": "not JSON", "message_id": "bad1"}
    res = apply_batch(batch(spark, bad + [malformed_src]), 1, state_dir=sd, schemas=SCHEMA)
    assert res.tables["accounts"].malformed == 2 and res.malformed == 3
    assert any("fractional digits" in e for e in res.errors)
    assert state(spark, tmp_path) == got, "a malformed change altered the state"


@pytest.mark.spark
def test_schema_is_inferred_once_with_decimals(spark, tmp_path: Path):
    sd = str(tmp_path)
    apply_batch(batch(spark, [change(1, hlc(BASE + 1), balance="26.30", big="9223372036854775807")]), 0,
                state_dir=sd)
    ddl = (tmp_path / "accounts" / "_schema.ddl").read_text()
    assert "balance DECIMAL(38,2)" in ddl and "big BIGINT" in ddl
    apply_batch(batch(spark, [change(2, hlc(BASE + 2), balance="1234567.5", big="1")]), 1, state_dir=sd)
    got = state(spark, tmp_path)
    assert str(got[1]["balance"]) == "26.30" and str(got[2]["balance"]) == "1234567.50"
    assert got[1]["big"] == 9223372036854775807


# ---------------------------------------------------------------------------------------------
# End to end: simulator -> emulator -> crdb_pubsub -> foreachBatch(apply) == ground truth
# ---------------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.parametrize("envelope, shuffle_window, duplicate_fraction", [
    ("wrapped", 50, 0.05),
    ("enriched", 50, 0.05),
])
def test_stream_apply_equals_ground_truth(spark, emulator_host, tmp_path: Path, envelope, shuffle_window,
                                          duplicate_fraction):
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    kw = {"enriched_properties": "source"} if envelope == "enriched" else {"diff": True}
    sim = ChangefeedSimulator(seed=11, envelope=envelope, updated=True, resolved_every=100,
                              mix=(0.45, 0.35, 0.2), **kw)
    subs, report = publish_simulated(emulator_host, "test-project", sim, f"apply-{envelope}-{next(_ids)}", 1500,
                                     shuffle_window=shuffle_window, duplicate_fraction=duplicate_fraction)
    assert report.duplicates > 0

    schemas = simulator_schemas()
    results = []
    df = (spark.readStream.format("crdb_pubsub").option("subscription", ",".join(subs))
          .option("emulatorHost", emulator_host).option("maxMessagesPerTrigger", "800").load())
    q = (df.writeStream.foreachBatch(foreach_batch_apply(str(tmp_path / "state"), schemas, on_result=results.append))
         .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    assert q.awaitTermination(240), "AvailableNow query did not finish"
    assert q.exception() is None

    truth = sim.ground_truth()
    problems = compare_to_ground_truth(spark, str(tmp_path / "state"), truth, schemas)
    assert problems == []
    # Every row message arrived (duplicates may add more); none was lost on the way.
    assert report.row_messages <= sum(r.rows_in for r in results) <= report.row_messages + report.duplicates
    assert sum(r.malformed for r in results) == 0
    # Decimals with trailing zeros and INT8 beyond 2^53 were really exercised.
    odometers = [v["odometer"] for v in truth["vehicles"].values() if v["odometer"] is not None]
    assert any(o > 2**53 for o in odometers)
    assert any(str(v["balance"]).endswith("0") for v in truth["users"].values() if v["balance"] is not None)
    final = results[-1].tables
    assert {t: final[t].rows for t in truth} == {t: len(rows) for t, rows in truth.items()}

