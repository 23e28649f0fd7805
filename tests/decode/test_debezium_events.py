"""Debezium events that are not row changes: transaction metadata and tombstones (issue 14, item 5),
and snapshot events whose source time is 0."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from crdb_pubsub import decode_messages

UTC = dt.UTC

# As in Debezium's PostgreSQL connector docs ("Transaction metadata"): BEGIN and END events.
BEGIN = b'{"status":"BEGIN","id":"571:53195829","ts_ms":1486500577125,"event_count":null,"data_collections":null}'
END = (
    b'{"status":"END","id":"571:53195832","ts_ms":1486500577691,"event_count":2,'
    b'"data_collections":[{"data_collection":"s1.a","event_count":1},{"data_collection":"s2.a","event_count":1}]}'
)


def _rows(bodies, **kw):
    return decode_messages(bodies, **kw).to_pylist()


@pytest.mark.parametrize(
    "body",
    [
        BEGIN,
        END,
        b'{"schema":{"type":"struct","name":"io.debezium.connector.common.'
        b'TransactionMetadataValue"},"payload":' + END + b"}",
    ],
)
def test_transaction_metadata_is_a_transaction_row(body):
    (row,) = _rows([body])
    assert row["kind"] == "transaction" and row["envelope"] == "debezium" and row["op"] is None
    event = json.loads(body)
    event = event.get("payload", event)
    assert json.loads(row["source"]) == event
    assert row["commit_time"] == dt.datetime.fromtimestamp(event["ts_ms"] / 1000, UTC)
    assert row["error"] is None and row["before"] is None and row["after"] is None


def test_transaction_metadata_with_microseconds():
    (row,) = _rows([b'{"status":"BEGIN","id":"7","ts_us":1486500577125123,"event_count":null,"data_collections":null}'])
    assert row["kind"] == "transaction"
    assert row["commit_time"] == dt.datetime(2017, 2, 7, 20, 49, 37, 125123, tzinfo=UTC)


@pytest.mark.parametrize("body", [b'{"schema":null,"payload":null}', b""])
def test_tombstones_are_tombstone_rows_keyed_by_the_ordering_key(body):
    rows = _rows([body, body], ordering_keys=['{"id":1}', None], message_ids=["1", "2"])
    assert [r["kind"] for r in rows] == ["tombstone", "tombstone"]
    assert [r["envelope"] for r in rows] == ["debezium", "debezium"]
    assert [r["key"] for r in rows] == ['{"id":1}', None]
    assert all(r["error"] is None and r["op"] is None for r in rows)


def test_forced_non_debezium_envelopes_still_refuse_an_empty_body():
    (row,) = _rows([b""], envelope="wrapped")
    assert row["kind"] == "malformed" and "empty" in row["error"]


def test_snapshot_event_with_zero_source_time_has_no_commit_time():
    body = (
        b'{"before":null,"after":{"id":1},"source":{"version":"2.4.0.Final","connector":"postgresql",'
        b'"name":"db","ts_ms":0,"snapshot":"true","db":"d","schema":"public","table":"t"},'
        b'"op":"r","ts_ms":1700000000000}'
    )
    (row,) = _rows([body])
    assert row["kind"] == "row" and row["op"] == "r"
    assert row["commit_time"] is None
