"""The apply for Debezium (PostgreSQL, MySQL) and TiCDC: keys, positions, truncates, typed values.

Bodies go through the real decoder (``decode_messages``) with the ordering key and attributes a
producer gives them, then through the delta-rs path, as the source's rows would.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from crdb_pubsub import decode_messages
from crdb_pubsub.apply import DeltaStore, ProducerMixError, apply_arrow, merge_into_sql, read_state
from crdb_pubsub.apply.positions import Refused, debezium_position

_ids = itertools.count()
PG = {"version": "3.0.8.Final", "connector": "postgresql", "name": "pg", "ts_ms": 1, "snapshot": "false",
      "db": "shop", "schema": "public", "table": "accounts"}  # fmt: skip
MYSQL = {"version": "3.0.8.Final", "connector": "mysql", "name": "my", "ts_ms": 1, "snapshot": "false",
         "db": "shop", "table": "accounts", "server_id": 1}  # fmt: skip
TICDC = {"version": "2.4.0.Final", "connector": "TiCDC", "name": "tidb", "ts_ms": 0, "snapshot": "false",
         "db": "shop", "table": "accounts", "file": "", "pos": 0, "row": 0}  # fmt: skip
SCHEMA = {"accounts": "id BIGINT, name STRING, balance DECIMAL(12,2), raw BINARY, vip BOOLEAN"}


def pg(lsn: int, commit: int | None = None, **kw) -> dict:
    seq = json.dumps([None if commit is None else str(commit), str(lsn)])
    return {**PG, "sequence": seq, "lsn": lsn, **kw}


def mysql(file: int, pos: int, row: int = 0) -> dict:
    return {**MYSQL, "file": "mysql-bin.%06d" % file, "pos": pos, "row": row}


def ticdc(ts: int) -> dict:
    return {**TICDC, "commit_ts": ts}


def event(op: str, source: dict, after: dict | None = None, before: dict | None = None, *, ok: str | None = "auto",
          key: str | None = None, schema: bool = True) -> dict:  # fmt: skip
    """One Debezium message: its body and, like Debezium Server, the record key as ordering key.

    Like Debezium, ``after`` names every column of the table (``SCHEMA``; null unless given).
    """
    if after is not None:
        after = {**dict.fromkeys(("id", "name", "balance", "raw", "vip")), **after}
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1700000000000}
    body = json.dumps({"schema": {"type": "struct", "name": "x.Envelope"}, "payload": payload} if schema else payload)
    image = after if after is not None else before
    if ok == "auto":
        ok = json.dumps({"schema": {"type": "struct"}, "payload": {"id": image["id"]}}) if image else None
    return {"body": body.encode(), "ordering_key": ok or "", "attributes": {"key": key} if key else None}


def decoded(events: list[dict]) -> pa.Table:
    return pa.Table.from_batches([
        decode_messages(
            [e["body"] for e in events],
            message_ids=[f"m{next(_ids)}" for _ in events],
            attributes=[e["attributes"] for e in events],
            ordering_keys=[e["ordering_key"] for e in events],
        )
    ])  # fmt: skip


def apply(state: Path, events: list[dict], batch_id: int = 0, **kw):
    kw.setdefault("schemas", SCHEMA)
    return apply_arrow(decoded(events), batch_id, store=DeltaStore(str(state)), app_id="t", **kw)


def live(state: Path, table: str = "accounts") -> dict:
    try:
        rows = read_state(str(state), table).to_pylist()
    except LookupError:
        return {}
    return {r["id"]: r["name"] for r in rows}


# -- positions -------------------------------------------------------------------------------------


def test_postgres_orders_by_sequence_commit_then_lsn_not_by_lsn_alone():
    """A transaction's change can sit at an LSN below an earlier-committed one's (Materialize's finding,
    DBZ-2911): the sequence [last commit LSN, LSN] orders them as they committed."""
    first = debezium_position(json.dumps(pg(500, commit=400)), "u")
    later = debezium_position(json.dumps(pg(450, commit=600)), "u")  # committed after, written before
    assert later.order > first.order
    assert (
        debezium_position(json.dumps({**PG, "lsn": 7}), "c").order
        < debezium_position(json.dumps({**PG, "lsn": 8}), "r").order
    )


def test_mysql_orders_by_binlog_file_number_pos_and_row():
    orders = [debezium_position(json.dumps(mysql(f, p, r)), "u").order for f, p, r in
              [(9, 900000, 0), (10, 4, 0), (10, 4, 1), (10, 120, 0)]]  # fmt: skip
    assert orders == sorted(orders)
    assert debezium_position(json.dumps(mysql(3, 154)), "u").text == "mysql-bin.000003:154:0"


def test_ticdc_orders_by_commit_ts_and_a_split_update_keeps_the_row(tmp_path: Path):
    """TiCDC splits an update of a unique key into a delete and an insert at one commit_ts: the row lives."""
    row = {"id": 1, "name": "new", "balance": None, "raw": None, "vip": None}
    apply(tmp_path, [
        event("c", ticdc(5) , {**row, "name": "new"}, ok=None, key='{"payload":{"id":1}}'),
        event("d", ticdc(5), None, {**row, "name": "old"}, ok=None, key='{"payload":{"id":1}}'),
    ])  # fmt: skip
    assert live(tmp_path) == {1: "new"}


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ({**PG, "lsn": None}, "no `source.lsn`"),
        ({"connector": "sqlserver", "ts_ms": 5, "table": "accounts"}, "ts_ms is a clock, not an order"),
        ({**MYSQL, "file": "", "pos": 4, "row": 0}, "not a binlog file name"),
        ({**TICDC, "commit_ts": "x"}, "`source.commit_ts` must be an unsigned integer"),
    ],
)
def test_a_producer_without_a_position_is_refused_with_the_reason(tmp_path: Path, source, reason):
    res = apply(tmp_path, [event("c", source, {"id": 1, "name": "a"})])
    assert res.tables["accounts"].malformed == 1 and reason in res.errors[0]
    with pytest.raises(Refused):
        debezium_position(json.dumps(source), "c")


# -- keys ------------------------------------------------------------------------------------------


def test_the_key_comes_from_the_ordering_key_the_key_attribute_or_key_columns(tmp_path: Path):
    apply(tmp_path, [
        event("c", pg(10), {"id": 1, "name": "ordering key with schema"}),
        event("c", pg(11), {"id": 2, "name": "ordering key without"}, ok='{"id":2}'),
        event("c", pg(12), {"id": 3, "name": "key attribute"}, ok=None, key='{"payload":{"id":3}}'),
    ])  # fmt: skip
    apply(
        tmp_path, [event("c", pg(13), {"id": 4, "name": "key_columns"}, ok=None)], 1, key_columns={"accounts": ["id"]}
    )
    assert live(tmp_path) == {
        1: "ordering key with schema",
        2: "ordering key without",
        3: "key attribute",
        4: "key_columns",
    }
    keys = sorted(r["_crdb_key"] for r in read_state(str(tmp_path), "accounts", with_meta=True).to_pylist())
    assert keys == ["[1]", "[2]", "[3]", "[4]"]


@pytest.mark.parametrize(
    ("ordering_key", "reason"),
    [
        (None, "no key: a Debezium value carries none"),
        ("default", "Debezium Server's ordering key for an event without a key"),
        ('{"id":2}', "not this row's key"),
        ('{"account":1}', "which the row image does not hold"),
        ("orders", "is not a Debezium key"),
    ],
)
def test_a_row_without_a_findable_key_is_malformed_with_the_reason(tmp_path: Path, ordering_key, reason):
    res = apply(tmp_path, [event("c", pg(10), {"id": 1, "name": "a"}, ok=ordering_key)])
    assert res.tables["accounts"].malformed == 1 and reason in res.errors[0], res.errors


def test_a_delete_reads_its_key_from_before(tmp_path: Path):
    apply(tmp_path, [event("c", pg(10), {"id": 1, "name": "a"}), event("c", pg(11), {"id": 2, "name": "b"})])
    apply(tmp_path, [event("d", pg(12), None, {"id": 1, "name": None})], 1)
    assert live(tmp_path) == {2: "b"}


# -- the promises: latest wins, tombstones, any order, idempotent ----------------------------------


def _history() -> list[dict]:
    return [
        event("r", pg(100, None, snapshot="true"), {"id": 1, "name": "snap1"}),
        event("r", pg(100, None, snapshot="last"), {"id": 2, "name": "snap2"}),
        event("u", pg(120, 110), {"id": 1, "name": "one"}),
        event("d", pg(140, 130), None, {"id": 2}),
        event("c", pg(160, 150), {"id": 3, "name": "three"}),
        event("u", pg(180, 170), {"id": 3, "name": "three again"}),
        event("c", pg(200, 190), {"id": 2, "name": "two reborn"}),
    ]


def test_any_order_any_batching_and_duplicates_give_the_same_state(tmp_path: Path):
    want = {1: "one", 2: "two reborn", 3: "three again"}
    history = _history()
    for seed in range(6):
        rng = random.Random(seed)
        stream = history + rng.sample(history, 3)
        rng.shuffle(stream)
        state = tmp_path / f"s{seed}"
        size = rng.randint(1, 4)
        for b, i in enumerate(range(0, len(stream), size)):
            apply(state, stream[i : i + size], b)
        assert live(state) == want, seed


def test_a_late_older_change_after_a_delete_does_not_resurrect(tmp_path: Path):
    apply(tmp_path, [event("c", pg(10), {"id": 1, "name": "a"}), event("d", pg(30, 20), None, {"id": 1})])
    res = apply(tmp_path, [event("u", pg(25, 15), {"id": 1, "name": "late"})], 1)
    assert live(tmp_path) == {} and res.tables["accounts"].superseded == 1
    tomb = read_state(str(tmp_path), "accounts", include_deleted=True, with_meta=True).to_pylist()
    assert [(t["_crdb_key"], t["_crdb_deleted"], t["_crdb_hlc"]) for t in tomb] == [("[1]", True, "lsn 20/30")]


def test_the_same_batch_id_twice_is_one_version(tmp_path: Path):
    batch = [event("c", pg(10), {"id": 1, "name": "a"})]
    apply(tmp_path, batch, 7)
    again = apply(tmp_path, batch, 7)
    assert again.tables["accounts"].skipped and live(tmp_path) == {1: "a"}


def test_one_table_from_two_producers_is_refused(tmp_path: Path):
    with pytest.raises(ProducerMixError, match="from debezium-postgres and from debezium-mysql"):
        apply(tmp_path, [event("c", pg(10), {"id": 1}), event("c", mysql(1, 4), {"id": 2})])


# -- truncate ----------------------------------------------------------------------------------------


def truncate(source: dict) -> dict:
    return event("t", source, None, None, ok=None)


def test_a_truncate_deletes_the_rows_before_it_and_later_changes_live(tmp_path: Path):
    history = [
        event("c", pg(10), {"id": 1, "name": "a"}),
        event("c", pg(20, 15), {"id": 2, "name": "b"}),
        truncate(pg(40, 35)),
        event("c", pg(50, 45), {"id": 3, "name": "after"}),
        event("u", pg(30, 25), {"id": 1, "name": "late but older than the truncate"}),
    ]
    for seed in range(5):
        rng = random.Random(seed)
        stream = history + rng.sample(history, 2)
        rng.shuffle(stream)
        state = tmp_path / f"s{seed}"
        for b, e in enumerate(stream):
            apply(state, [e], b)
        assert live(state) == {3: "after"}, (seed, [json.loads(e["body"])["payload"]["op"] for e in stream])


def test_a_truncate_counts_the_rows_it_wiped(tmp_path: Path):
    apply(tmp_path, [event("c", pg(10), {"id": 1, "name": "a"}), event("c", pg(20, 15), {"id": 2, "name": "b"})])
    res = apply(tmp_path, [truncate(pg(40, 35))], 1)
    assert res.tables["accounts"].truncated == 2 and res.tables["accounts"].rows == 0
    assert res.tables["accounts"].tombstones == 2  # the truncate's own mark row is not counted


def test_merge_into_sql_carries_the_truncate():
    sql = merge_into_sql("lake.users", "v", ["id", "_crdb_key", "_crdb_order"], truncate=("0042", "lsn 0/42", 3))
    assert sql.endswith(
        "WHEN NOT MATCHED BY SOURCE AND t.`_crdb_order` < '0042' THEN UPDATE SET t.`id` = NULL, "
        "t.`_crdb_order` = '0042', t.`_crdb_hlc` = 'lsn 0/42', t.`_crdb_deleted` = true, t.`_crdb_batch_id` = 3"
    )


# -- typed values ------------------------------------------------------------------------------------


def test_debezium_values_land_typed(tmp_path: Path):
    after = {"id": 1, "name": "a", "balance": "26.30", "raw": "AAH/", "vip": 1}
    apply(tmp_path, [event("c", pg(10), after)])
    (row,) = read_state(str(tmp_path), "accounts").to_pylist()
    assert (str(row["balance"]), row["raw"], row["vip"]) == ("26.30", b"\x00\x01\xff", True)


@pytest.mark.parametrize(
    ("ddl", "value", "reason"),
    [
        ("id BIGINT, ts TIMESTAMP", {"ts": 1700000000000000}, "unit (ms, us, ns) only the event's schema names"),
        ("id BIGINT, name STRING", {"name": "__debezium_unavailable_value"}, "REPLICA IDENTITY FULL"),
        ("id BIGINT, raw BINARY", {"raw": "not base64!"}, "is not base64"),
    ],
)
def test_values_the_columns_cannot_take_are_malformed_and_the_state_stays(tmp_path: Path, ddl, value, reason):
    apply(tmp_path, [event("c", pg(10), {"id": 1, **dict.fromkeys(value)})], schemas={"accounts": ddl})
    res = apply(tmp_path, [event("u", pg(20, 15), {"id": 1, **value})], 1, schemas={"accounts": ddl})
    assert res.tables["accounts"].malformed == 1 and reason in res.errors[0], res.errors
    assert len(read_state(str(tmp_path), "accounts").to_pylist()) == 1
