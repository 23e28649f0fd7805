"""CDC apply end to end: simulator -> emulator -> crdb_pubsub -> foreachBatch(apply) -> Delta ==
ground truth; and a batch Spark hands to foreachBatch twice is applied once."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from conftest import publish_simulated
from crdb_pubsub.apply import compare_to_ground_truth, foreach_batch_apply, read_state
from crdb_pubsub.tools.simulator import primary_keys, spark_schemas

pytestmark = [pytest.mark.integration, pytest.mark.spark]
_ids = itertools.count()


@pytest.mark.parametrize(
    "envelope, shuffle_window, duplicate_fraction",
    [
        ("wrapped", 50, 0.05),
        ("enriched", 50, 0.05),
    ],
)
def test_stream_apply_equals_ground_truth(
    spark, emulator_host, tmp_path: Path, envelope, shuffle_window, duplicate_fraction
):
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    kw = {"enriched_properties": "source"} if envelope == "enriched" else {"diff": True}
    sim = ChangefeedSimulator(seed=11, envelope=envelope, updated=True, resolved_every=100, mix=(0.45, 0.35, 0.2), **kw)
    subs, report = publish_simulated(
        emulator_host,
        "test-project",
        sim,
        f"apply-{envelope}-{next(_ids)}",
        1500,
        shuffle_window=shuffle_window,
        duplicate_fraction=duplicate_fraction,
    )
    assert report.duplicates > 0

    schemas = spark_schemas()
    results = []
    df = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", ",".join(subs))
        .option("emulatorHost", emulator_host)
        .option("maxMessagesPerTrigger", "800")
        .load()
    )
    q = (
        df.writeStream.foreachBatch(foreach_batch_apply(str(tmp_path / "state"), schemas, on_result=results.append))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(240), "AvailableNow query did not finish"
    assert q.exception() is None

    truth = sim.ground_truth()
    assert compare_to_ground_truth(str(tmp_path / "state"), truth, schemas, primary_keys()) == []
    # Every row message arrived (duplicates may add more); none was lost on the way.
    assert report.row_messages <= sum(r.rows_in for r in results) <= report.row_messages + report.duplicates
    assert sum(r.malformed for r in results) == 0
    # Decimals with trailing zeros and INT8 beyond 2^53 were really exercised.
    odometers = [v["odometer"] for v in truth["vehicles"].values() if v["odometer"] is not None]
    assert any(o > 2**53 for o in odometers)
    assert any(str(v["balance"]).endswith("0") for v in truth["users"].values() if v["balance"] is not None)
    final = {t: c.rows for r in results for t, c in r.tables.items()}
    assert final == {t: len(rows) for t, rows in truth.items()}
    # Spark reads the same state (the reader helper hands it over as a DataFrame).
    assert read_state(str(tmp_path / "state"), "users", spark=spark).count() == len(truth["users"])


def test_foreach_batch_called_twice_with_one_batch_id_applies_once(spark, emulator_host, tmp_path: Path):
    """Spark re-runs a failed batch with the same batchId: the second call adds no Delta version.
    The app id is the streaming query's id, read inside foreachBatch."""
    from deltalake import DeltaTable

    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    sim = ChangefeedSimulator(seed=3, updated=True, diff=True, tables=["users"])
    subs, _ = publish_simulated(emulator_host, "test-project", sim, f"apply-twice-{next(_ids)}", 200)
    state_dir = tmp_path / "state"
    apply_fn = foreach_batch_apply(str(state_dir), spark_schemas())
    seen: list[tuple[int, int, dict, bool]] = []

    def twice(batch_df, batch_id: int) -> None:
        batch_df.persist()
        apply_fn(batch_df, batch_id)
        version = DeltaTable(str(state_dir / "users")).version()
        state = {r["id"]: r for r in read_state(str(state_dir), "users").to_pylist()}
        apply_fn(batch_df, batch_id)  # the retry
        again = {r["id"]: r for r in read_state(str(state_dir), "users").to_pylist()}
        seen.append(
            (
                version,
                DeltaTable(str(state_dir / "users")).version(),
                {"same": state == again},
                apply_fn.last_result.tables["users"].skipped,
            )
        )
        batch_df.unpersist()

    q = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", ",".join(subs))
        .option("emulatorHost", emulator_host)
        .load()
        .writeStream.foreachBatch(twice)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180) and q.exception() is None
    assert seen and all(v1 == v2 and same["same"] and skipped for v1, v2, same, skipped in seen), seen
    assert DeltaTable(str(state_dir / "users")).transaction_version(f"crdb_pubsub.apply:{q.id}") is not None
    assert compare_to_ground_truth(str(state_dir), sim.ground_truth(), spark_schemas(), primary_keys()) == []
