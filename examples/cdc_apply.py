"""CDC apply, end to end in one file: simulator -> Pub/Sub emulator -> crdb_pubsub -> foreachBatch(apply).

    python examples/cdc_apply.py [--rows 500]

Afterwards each movr table (users, vehicles, rides) exists as a typed current-state Delta Lake
table; the script prints a few rows, reads one with DuckDB, and compares them with the simulator's
ground truth.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

PROJECT = "example-project"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub
    from crdb_pubsub.apply import compare_to_ground_truth, foreach_batch_apply, read_state
    from crdb_pubsub.emulator import create_topic_and_subscription, emulator
    from crdb_pubsub.tools.simulator import ChangefeedSimulator, make_publisher, primary_keys, spark_schemas

    with emulator(project=PROJECT) as host, tempfile.TemporaryDirectory() as tmp:
        # 1. A changefeed WITH updated, diff: one topic per table, out of order, a few duplicates.
        sim = ChangefeedSimulator(seed=1, updated=True, diff=True, resolved_every=100)
        subs = [create_topic_and_subscription(host, PROJECT, t, f"{t}-sub")[1] for t in sim.topics()]
        publisher = make_publisher(host)
        sim.publish(publisher, PROJECT, args.rows, create_topics=False, shuffle_window=50, duplicate_fraction=0.05)
        publisher.stop()
        publisher.transport.close()

        # 2. The stream, applied batch by batch to a Delta Lake table per source table.
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")  # small state tables: 200 shuffle tasks only cost time
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        crdb_pubsub.register(spark)
        state_dir = os.path.join(tmp, "state")
        schemas = spark_schemas()  # e.g. {"users": "id STRING, ..., balance DECIMAL(12,2), ..."}
        query = (
            spark.readStream.format("crdb_pubsub")
            .option("subscription", ",".join(subs))
            .option("emulatorHost", host)
            .load()
            .writeStream.foreachBatch(
                foreach_batch_apply(
                    state_dir,
                    schemas,
                    on_result=lambda r: print(
                        f"batch {r.batch_id}: "
                        + ", ".join(f"{t} ~{c.upserts} -{c.deletes} = {c.rows}" for t, c in sorted(r.tables.items()))
                    ),
                )
            )
            .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

        # 3. The result: typed tables equal to what the "database" holds, readable by other engines.
        read_state(state_dir, "vehicles", spark=spark).select("city", "id", "odometer", "status").show(
            5, truncate=False
        )
        import duckdb
        from deltalake import DeltaTable

        users = DeltaTable(os.path.join(state_dir, "users")).to_pyarrow_dataset()  # noqa: F841 - read by DuckDB
        print("DuckDB:", duckdb.sql("SELECT count(*), sum(balance) FROM users WHERE NOT _crdb_deleted").fetchall()[0])
        problems = compare_to_ground_truth(state_dir, sim.ground_truth(), schemas, primary_keys())
        print("state == simulator ground truth:", problems if problems else "OK")
        spark.stop()
        return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
