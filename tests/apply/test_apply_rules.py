"""CDC apply into Delta Lake, without Spark: the ordering rule, tombstones, idempotent batches,
typed values, schema changes, bare deletes, column families and table routing, checked on
hand-made batches and on simulator traffic through the real decoder against its ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apply.helpers import BASE, SCHEMA, batch, change, chunks, decoded, hlc, shuffled_with_duplicates
from crdb_pubsub.apply import (
    BareDeleteError,
    SchemaChangeError,
    apply_batch,
    compare_to_ground_truth,
    merge_into_sql,
    parse_hlc,
    read_state,
)
from crdb_pubsub.tools.simulator import ChangefeedSimulator, primary_keys, spark_schemas


def apply(rows_or_table, batch_id: int, sd: Path, app_id: str = "q", **kw):
    table = rows_or_table if not isinstance(rows_or_table, list) else batch(rows_or_table)
    return apply_batch(table, batch_id, state_dir=str(sd), app_id=app_id, **({"schemas": SCHEMA} | kw))


def state(sd: Path, table: str = "accounts") -> dict:
    return {r["id"]: r for r in read_state(str(sd), table).to_pylist()}


def versions(sd: Path, table: str = "accounts") -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(sd / table)).version()


# -- the ordering rule -----------------------------------------------------------------------------


def test_parse_hlc_is_exact_integers():
    assert parse_hlc("1745000000000000001.0000000002") == (1745000000000000001, 2)
    assert parse_hlc("1745000000000000001") == (1745000000000000001, 0)
    # As floats these two are equal; as HLCs the first is newer.
    assert float("1745000000000000001.0") == float("1745000000000000000.9999999999")
    assert parse_hlc("1745000000000000001.0000000000") > parse_hlc("1745000000000000000.9999999999")
    assert parse_hlc("not-an-hlc") is None and parse_hlc(None) is None


def test_latest_hlc_wins_exactly_regardless_of_arrival_order(tmp_path: Path):
    rows = [
        change(1, hlc(BASE + 1), name='"newest by 1 ns"'),
        change(1, hlc(BASE, 9), name='"older"'),  # float(...) of both HLCs is the same number
        change(2, hlc(BASE, 10), name='"logical 10"'),
        change(2, hlc(BASE, 2), name='"logical 2"'),  # "2" > "10" as text: must not win
    ]
    res = apply(rows, 0, tmp_path)
    got = state(tmp_path)
    assert got[1]["name"] == "newest by 1 ns" and got[2]["name"] == "logical 10"
    t = res.tables["accounts"]
    assert (t.changes, t.upserts, t.deletes, t.superseded, t.rows) == (4, 2, 0, 2, 2)
    # The same changes one per batch, newest first: the older ones lose against the state too.
    other = tmp_path / "other"
    for i, r in enumerate([rows[0], rows[2], rows[1], rows[3]]):
        apply([r], i, other)
    assert state(other) == got


def test_ties_delete_beats_update_then_greater_after_text(tmp_path: Path):
    at = hlc(BASE, 3)
    rows = [
        change(1, at, name='"kept?"'),
        change(1, at, op="d"),  # same HLC: the delete wins
        change(2, at, name='"aaa"'),
        change(2, at, name='"bbb"'),  # same HLC and op: greater after text
    ]
    apply(list(reversed(rows)), 0, tmp_path)
    got = state(tmp_path)
    assert 1 not in got
    assert got[2]["name"] == "bbb"
    other = tmp_path / "other"
    apply(rows, 0, other)
    assert state(other) == got
    # Across batches too: an update at the HLC of a delete already applied does not revive the key.
    apply([change(1, at, name='"after the delete, same HLC"')], 1, tmp_path)
    assert 1 not in state(tmp_path)


def test_late_older_update_after_delete_does_not_resurrect(tmp_path: Path):
    apply([change(1, hlc(BASE + 5), name='"v5"')], 0, tmp_path)
    r = apply([change(1, hlc(BASE + 7), op="d")], 1, tmp_path)
    assert r.tables["accounts"].deletes == 1 and r.tables["accounts"].rows == 0
    r = apply([change(1, hlc(BASE + 6), name='"late v6"')], 2, tmp_path)
    assert state(tmp_path) == {}, "a late older update resurrected a deleted row"
    assert r.tables["accounts"].superseded == 1 and r.tables["accounts"].tombstones == 1
    # The tombstone is in the Delta table, with its HLC; current-state reads leave it out.
    tomb = read_state(str(tmp_path), "accounts", include_deleted=True, with_meta=True).to_pylist()
    assert [(t["_crdb_key"], t["_crdb_deleted"], t["_crdb_hlc"]) for t in tomb] == [("[1]", True, hlc(BASE + 7))]
    # An older change for a key deleted in the same batch is equally dead.
    apply([change(2, hlc(BASE + 9), op="d"), change(2, hlc(BASE + 8), name='"x"')], 3, tmp_path)
    assert state(tmp_path) == {}
    # A newer insert brings the key back.
    apply([change(1, hlc(BASE + 8), op="c", name='"v8"')], 4, tmp_path)
    assert state(tmp_path)[1]["name"] == "v8"


# -- idempotent batches ----------------------------------------------------------------------------


def test_same_batch_id_twice_is_one_delta_version_and_the_same_state(tmp_path: Path):
    rows = [change(k, hlc(BASE + k), name=f'"n{k}"', balance="1.10") for k in range(5)]
    first = apply(rows, 0, tmp_path)
    more = [change(k, hlc(BASE + 10 + k), name=f'"m{k}"') for k in range(3)]
    apply(more, 1, tmp_path)
    before, version = state(tmp_path), versions(tmp_path)
    # Spark re-runs batch 1 after a failure; Pub/Sub redelivered other content into it, even newer.
    again = apply(more + [change(4, hlc(BASE + 99), name='"redelivered"')], 1, tmp_path)
    assert state(tmp_path) == before and versions(tmp_path) == version
    assert again.tables["accounts"].skipped and again.tables["accounts"].version == version
    assert first.tables["accounts"].upserts == 5
    # The batch id is recorded in the table's own log, under the query's id.
    from deltalake import DeltaTable

    assert DeltaTable(str(tmp_path / "accounts")).transaction_version("q") == 1
    # Another query (another app id) is not confused with this one.
    apply([change(4, hlc(BASE + 99), name='"other query"')], 1, tmp_path, app_id="q2")
    assert state(tmp_path)[4]["name"] == "other query"


def test_replayed_batch_skips_only_the_tables_already_committed(tmp_path: Path):
    rows = [change(1, hlc(BASE + 1), name='"a"'), change(1, hlc(BASE + 1), table="other", name='"b"')]
    schemas = SCHEMA | {"other": SCHEMA["accounts"]}
    apply([rows[0]], 0, tmp_path, schemas=schemas)  # the batch died after its first table
    res = apply(rows, 0, tmp_path, schemas=schemas)
    assert res.tables["accounts"].skipped and not res.tables["other"].skipped
    assert state(tmp_path, "other")[1]["name"] == "b" and versions(tmp_path, "accounts") == 0


# -- typed values and schema changes ---------------------------------------------------------------


def test_decimal_and_bigint_are_exact_and_bad_values_are_malformed_not_applied(tmp_path: Path):
    rows = [
        change(
            1, hlc(BASE + 1), balance="26.30", big="9223372036854775807", ext='{"w": 2.50, "n": 9223372036854775807}'
        ),
        change(2, hlc(BASE + 1), balance="-0.01", big="-9223372036854775808"),
    ]
    apply(rows, 0, tmp_path)
    got = state(tmp_path)
    assert str(got[1]["balance"]) == "26.30" and got[1]["big"] == 9223372036854775807
    assert got[1]["ext"] == '{"w": 2.50, "n": 9223372036854775807}'  # JSONB keeps its exact text
    assert str(got[2]["balance"]) == "-0.01" and got[2]["big"] == -9223372036854775808
    bad = [
        change(1, hlc(BASE + 2), balance="1.234"),  # more scale than DECIMAL(12,2): not rounded
        change(2, hlc(BASE + 2), big="9223372036854775808"),
    ]  # out of BIGINT range
    malformed = {"kind": "malformed", "table_name": None, "error": "not JSON", "message_id": "bad1"}
    res = apply(bad + [malformed], 1, tmp_path)
    assert res.tables["accounts"].malformed == 2 and res.malformed == 3
    assert any("fractional digits" in e for e in res.errors)
    assert state(tmp_path) == got, "a malformed change altered the state"
    # A malformed newest change does not hide an older good one of the same batch.
    apply([change(3, hlc(BASE + 5), balance="1.234"), change(3, hlc(BASE + 4), balance="7.00")], 2, tmp_path)
    assert str(state(tmp_path)[3]["balance"]) == "7.00"


def test_schema_is_inferred_once_with_decimals(tmp_path: Path):
    apply([change(1, hlc(BASE + 1), balance="26.30", big="9223372036854775807")], 0, tmp_path, schemas={})
    import pyarrow as pa
    from deltalake import DeltaTable

    schema = pa.schema(DeltaTable(str(tmp_path / "accounts")).schema().to_arrow())
    assert schema.field("balance").type == pa.decimal128(38, 2) and schema.field("big").type == pa.int64()
    apply([change(2, hlc(BASE + 2), balance="1234567.50", big="1")], 1, tmp_path, schemas={})
    got = state(tmp_path)
    assert str(got[1]["balance"]) == "26.30" and str(got[2]["balance"]) == "1234567.50"
    assert got[1]["big"] == 9223372036854775807


def test_schema_evolution_adds_a_new_nullable_column(tmp_path: Path):
    apply([change(1, hlc(BASE + 1), name='"a"', balance="1.00", big="1", ext="null")], 0, tmp_path)
    # ALTER TABLE accounts ADD COLUMN note STRING, ADD COLUMN score DECIMAL: rows now carry them.
    res = apply(
        [change(2, hlc(BASE + 2), name='"b"', balance="2.00", big="2", ext="null", note='"hi"', score="12.50")],
        1,
        tmp_path,
    )
    assert res.tables["accounts"].added_columns == ["note", "score"]
    got = state(tmp_path)
    assert got[1]["note"] is None and got[2]["note"] == "hi" and str(got[2]["score"]) == "12.50"
    # Given DDL types the new column exactly.
    res = apply(
        [
            change(
                3,
                hlc(BASE + 3),
                name='"c"',
                balance="3.00",
                big="3",
                ext="null",
                note='"x"',
                score="1.5",
                ratio="0.125",
            )
        ],
        2,
        tmp_path,
        schemas={"accounts": SCHEMA["accounts"] + ", ratio DECIMAL(9,3)"},
    )
    assert res.tables["accounts"].added_columns == ["ratio"] and str(state(tmp_path)[3]["ratio"]) == "0.125"


def test_other_schema_changes_fail_naming_table_and_column(tmp_path: Path):
    apply([change(1, hlc(BASE + 1), name='"a"', balance="1.00", big="1", ext="null")], 0, tmp_path)
    # DROP COLUMN big: the rows no longer carry it.
    with pytest.raises(SchemaChangeError, match=r"table accounts: column big .*missing"):
        apply([change(2, hlc(BASE + 2), name='"b"', balance="2.00", drop=("big",))], 1, tmp_path)
    # A type change in the DDL against the Delta table's column.
    with pytest.raises(SchemaChangeError, match=r"table accounts: column balance is decimal\(12,2\)"):
        apply(
            [change(2, hlc(BASE + 2), name='"b"', balance="2.00", big="2", ext="null")],
            1,
            tmp_path,
            schemas={"accounts": "id BIGINT, name STRING, balance DECIMAL(20,4), big BIGINT, ext STRING"},
        )
    assert set(state(tmp_path)) == {1}


# -- envelopes: bare deletes, column families, table routing ---------------------------------------


def _bare(key: int, at: str, op: str | None, **cols) -> bytes:
    row = {"id": key, **cols}
    if op is not None:
        row["op"] = op
    body = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in row.items())
    return ('{"Key":[%d],"Value":{%s, "__crdb__": {"updated": "%s"}},"Topic":"accounts"}' % (key, body, at)).encode()


def test_bare_envelope_deletes_need_an_op_column_and_then_apply(tmp_path: Path):
    import pyarrow as pa

    from crdb_pubsub import decode_messages

    def bare_batch(bodies):
        return pa.Table.from_batches([decode_messages(bodies, message_ids=[str(i) for i in range(len(bodies))])])

    plain = bare_batch([_bare(1, hlc(BASE + 1), None, name="a"), _bare(1, hlc(BASE + 2), None, name=None)])
    with pytest.raises(BareDeleteError, match="bare_op_column"):
        apply(plain, 0, tmp_path, schemas={"accounts": "id BIGINT, name STRING"})
    # CREATE CHANGEFEED ... AS SELECT *, event_op() AS op FROM accounts
    feed = bare_batch(
        [
            _bare(1, hlc(BASE + 1), "insert", name="a"),
            _bare(2, hlc(BASE + 1), "insert", name="b"),
            _bare(1, hlc(BASE + 3), "delete", name=None),
            _bare(2, hlc(BASE + 2), "update", name="b2"),
        ]
    )
    apply(feed, 0, tmp_path, schemas={"accounts": "id BIGINT, name STRING"}, bare_op_column="op")
    assert {k: v["name"] for k, v in state(tmp_path).items()} == {2: "b2"}
    # The late, older update of the deleted key stays dead; the op column is not a state column.
    apply(
        bare_batch([_bare(1, hlc(BASE + 2), "update", name="late")]),
        1,
        tmp_path,
        schemas={"accounts": "id BIGINT, name STRING"},
        bare_op_column="op",
    )
    assert set(state(tmp_path)) == {2} and "op" not in read_state(str(tmp_path), "accounts").column_names


def test_column_families_merge_into_one_row_in_any_order(tmp_path: Path):
    sim = ChangefeedSimulator(seed=5, updated=True, column_families=True, mix=(0.4, 0.4, 0.2))
    messages = list(sim.events(1500))
    assert any(m.topic == "vehicles.details" for m in messages)
    for i, part in enumerate(chunks(shuffled_with_duplicates(messages, seed=5), 400)):
        apply(decoded(part), i, tmp_path, schemas=spark_schemas())
    assert compare_to_ground_truth(str(tmp_path), sim.ground_truth(), spark_schemas(), primary_keys()) == []
    vehicles = read_state(str(tmp_path), "vehicles", with_meta=True)
    assert {"_crdb_order__primary", "_crdb_order__details"} <= set(vehicles.column_names)


def test_column_family_late_change_applies_under_a_newer_change_of_another_family(tmp_path: Path):
    def fam(family: str, at: str, op: str = "u", **cols) -> dict:
        r = change(1, at, op, table="vehicles", **cols)
        r["topic"] = f"vehicles.{family}"
        if op != "d":
            r["after"] = "{" + ", ".join(f'"{k}": {v}' for k, v in cols.items()) + "}"
        return r

    schemas = {"vehicles": "id BIGINT, status STRING, ext STRING"}
    apply(
        [fam("primary", hlc(BASE + 1), "c", id="1", status='"new"'), fam("details", hlc(BASE + 1), "c", ext='"e1"')],
        0,
        tmp_path,
        schemas=schemas,
    )
    apply([fam("details", hlc(BASE + 5), ext='"e5"')], 1, tmp_path, schemas=schemas)
    apply(
        [fam("primary", hlc(BASE + 3), status='"s3"'), fam("details", hlc(BASE + 2), ext='"e2 (stale)"')],
        2,
        tmp_path,
        schemas=schemas,
    )
    assert {k: (v["status"], v["ext"]) for k, v in state(tmp_path, "vehicles").items()} == {1: ("s3", "e5")}
    apply(
        [fam("primary", hlc(BASE + 9), "d"), fam("details", hlc(BASE + 8), ext='"e8 (before the delete)"')],
        3,
        tmp_path,
        schemas=schemas,
    )
    assert state(tmp_path, "vehicles") == {}


def test_table_name_attribute_routes_one_topic_to_its_tables(tmp_path: Path):
    # CREATE CHANGEFEED FOR users, vehicles, rides INTO 'gcpubsub://...?topic_name=cdc_all'
    #   WITH updated, with_table_name_attribute=true
    sim = ChangefeedSimulator(
        seed=9, updated=True, topic_name="cdc_all", with_table_name_attribute=True, resolved_every=40
    )
    messages = list(sim.events(900))
    assert {m.topic for m in messages} == {"cdc_all"}
    for i, part in enumerate(chunks(shuffled_with_duplicates(messages, seed=9), 500)):
        apply(decoded(part), i, tmp_path, schemas=spark_schemas())
    assert compare_to_ground_truth(str(tmp_path), sim.ground_truth(), spark_schemas(), primary_keys()) == []
    assert not (tmp_path / "cdc_all").exists()


# -- out of order and duplicated delivery -----------------------------------------------------------


@pytest.mark.parametrize(
    "envelope, kw",
    [
        ("wrapped", {"diff": True}),
        ("enriched", {"enriched_properties": "source"}),
        ("wrapped", {"mvcc_timestamp": True, "updated": False}),
    ],
)
def test_out_of_order_and_duplicated_delivery_give_the_ground_truth(tmp_path: Path, envelope, kw):
    sim = ChangefeedSimulator(
        seed=13, envelope=envelope, **({"updated": True} | kw), resolved_every=50, mix=(0.45, 0.35, 0.2)
    )
    messages = list(sim.events(3000))
    delivered = shuffled_with_duplicates(messages, seed=13, dup_fraction=0.15)
    results = [
        apply(decoded(part), i, tmp_path, schemas=spark_schemas()) for i, part in enumerate(chunks(delivered, 700))
    ]
    assert compare_to_ground_truth(str(tmp_path), sim.ground_truth(), spark_schemas(), primary_keys()) == []
    assert sum(r.malformed for r in results) == 0
    truth = sim.ground_truth()
    assert {t: results[-1].tables[t].rows for t in truth} == {t: len(rows) for t, rows in truth.items()}
    # Decimals with trailing zeros and INT8 beyond 2^53 were really exercised.
    assert any(v["odometer"] is not None and v["odometer"] > 2**53 for v in truth["vehicles"].values())


# -- other engines and catalogs ---------------------------------------------------------------------


def test_duckdb_reads_the_state_table(tmp_path: Path):
    import duckdb
    from deltalake import DeltaTable

    apply([change(1, hlc(BASE + 1), name='"a"', balance="26.30"), change(2, hlc(BASE + 1), op="d")], 0, tmp_path)
    users = DeltaTable(str(tmp_path / "accounts")).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    rows = duckdb.sql("SELECT id, balance FROM users WHERE NOT _crdb_deleted").fetchall()
    assert [(i, str(b)) for i, b in rows] == [(1, "26.30")]


def test_merge_into_sql_for_a_catalog_table():
    sql = merge_into_sql("lake.cdc.users", "batch_view", ["id", "name", "_crdb_key", "_crdb_order"])
    assert sql == (
        "MERGE INTO lake.cdc.users AS t\n"
        "USING batch_view AS s\n"
        "ON t.`_crdb_key` = s.`_crdb_key`\n"
        "WHEN MATCHED AND s.`_crdb_order` > t.`_crdb_order` THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )
    fam = merge_into_sql(
        "v", "s_view", ["id", "ext", "_crdb_key", "_crdb_order", "_crdb_order__details"], {"details": ["ext"]}
    )
    assert "WHEN MATCHED AND (s.`_crdb_order__details` > coalesce(t.`_crdb_order__details`, ''))" in fam
    assert (
        "t.`ext` = CASE WHEN s.`_crdb_order__details` > coalesce(t.`_crdb_order__details`, '') "
        "THEN s.`ext` ELSE t.`ext` END"
    ) in fam
    assert "WHEN NOT MATCHED THEN INSERT (`id`, `ext`, `_crdb_key`, `_crdb_order`, `_crdb_order__details`)" in fam
