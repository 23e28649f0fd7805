"""A test of your own pipeline against the Pub/Sub emulator: changes in, your streaming job, the table checked.

Where crdb-pubsub is installed (no checkout needed), with Java 17+ and the emulator at hand
(docs/emulator.md: the Cloud SDK's, Docker, or PUBSUB_EMULATOR_HOST):

    pip install 'crdb-pubsub[spark,apply,testing]'
    pytest examples/test_my_pipeline.py

The fixtures (``changefeed``, ``crdb_spark``) come from the package's pytest plugin; nothing here
imports from this repository's tests. Walked through in docs/testing.md.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from crdb_pubsub.apply import foreach_batch_apply, read_state
from crdb_pubsub.testing import run_available_now

SCHEMAS = {"accounts": "id BIGINT, owner STRING, balance DECIMAL(12,2)"}


def accounts_pipeline(spark, subscription: str, state_dir: str, emulator_host: str):
    """The job under test (in your project, imported from your code): changes -> current-state table."""
    changes = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", subscription)
        .option("emulatorHost", emulator_host)
        .load()
    )
    return changes.writeStream.foreachBatch(foreach_batch_apply(state_dir, SCHEMAS))


@pytest.mark.parametrize("producer", ["cockroachdb", "debezium-postgres"])
def test_the_accounts_table_follows_the_changes(crdb_spark, changefeed, tmp_path, producer):
    feed = changefeed("accounts", key=["id"], producer=producer)
    feed.insert({"id": 1, "owner": "ann", "balance": Decimal("26.30")})
    feed.insert({"id": 2, "owner": "bob", "balance": Decimal("5.00")})
    feed.update({"id": 1, "balance": Decimal("30.10")})
    feed.delete({"id": 2})
    feed.publish(duplicates=0.5, shuffle=True)  # as Pub/Sub may deliver them: twice, in any order

    state = str(tmp_path / "state")
    run_available_now(accounts_pipeline(crdb_spark, feed.subscription, state, feed.emulator.host_port))

    assert read_state(state, "accounts").to_pylist() == [{"id": 1, "owner": "ann", "balance": Decimal("30.10")}]


def test_the_raw_changes_as_the_source_reads_them(crdb_spark, changefeed):
    feed = changefeed("accounts", key=["id"], diff=True)  # WITH diff: `before` tells an insert from an update
    feed.insert({"id": 7, "owner": "eve", "balance": Decimal("1.50")}).resolved()
    feed.publish()

    changes = (
        crdb_spark.readStream.format("crdb_pubsub")
        .option("subscription", feed.subscription)
        .option("emulatorHost", feed.emulator.host_port)
        .load()
    )
    out = run_available_now(changes.select("kind", "op", "key", "after")).to_pylist()

    assert sorted(r["kind"] for r in out) == ["resolved", "row"]
    (row,) = [r for r in out if r["kind"] == "row"]
    assert (row["op"], row["key"], row["after"]) == ("c", "[7]", '{"balance": 1.50, "id": 7, "owner": "eve"}')
