"""The ``columns`` option end to end: real Spark (local mode) against the real emulator, both receivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from crdb_pubsub.decode import decode_messages
from crdb_pubsub.tools.simulator import ChangefeedSimulator
from polling import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NAMES = ["after", "kind", "key", "mvcc_timestamp", "error"]  # not the documented order: the order given wins


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_columns_on_spark(spark, emulator_host, make_subscription, publish, tmp_path: Path, receiver):
    """The DataFrame has exactly the named columns in the order given, Spark accepts the executors'
    pruned Arrow batches, and the rows are the decoder's own, a malformed message's reason included."""
    topic, sub = make_subscription(ack_deadline_seconds=10)
    sim = ChangefeedSimulator(seed=11, updated=True, resolved_every=40)
    bodies = [m.data for m in sim.events(600)]
    bodies[100] = b"{not json"
    publish(topic, bodies, attributes={"origin": "test"})

    reader = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", emulator_host)
        .option("columns", ",".join(NAMES))
        .option("receiver", receiver)
        .option("stateDir", str(tmp_path / "state"))
    )
    df = reader.load()
    assert df.columns == NAMES
    got: list[tuple] = []
    query = (
        df.writeStream.foreachBatch(lambda batch, _: got.extend(tuple(r) for r in batch.collect()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    wait_for(lambda: not query.isActive, 300, "the AvailableNow run to end", query=query)
    assert query.exception() is None

    expected = decode_messages(bodies).select(NAMES).to_pylist()
    assert sorted(got, key=repr) == sorted((tuple(r[n] for n in NAMES) for r in expected), key=repr)
    assert [r for r in got if r[1] == "malformed" and r[4]], "the malformed message's row and its reason"
