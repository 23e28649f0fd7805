"""Benchmark: CDC apply into Delta Lake vs. the same stream into Spark's noop sink.

One emulator; the simulator's movr tables (users, vehicles, rides) on one topic each, every topic
with two subscriptions holding the same backlog (default 100,000 row changes: inserts, updates and
deletes over at least 30,000 distinct keys; no resolved messages, so messages == changes). In one
run, after a small warm-up of both paths (so neither pays for starting Spark's Python workers):

  (a) ``readStream.format("crdb_pubsub")`` with Trigger.AvailableNow into the noop sink (decoding
      included), timed from ``start()`` to termination;
  (b) the same source through ``foreachBatch(foreach_batch_apply(...))``: each batch reduced to the
      latest change per key and merged into one Delta table per source table (delta-rs).

Then checks the Delta tables against the simulator's ground truth and prints both rates; the last
line is ``apply/noop ratio R``. Not a test: absolute numbers are noisy here, the ratio is the figure.

    python examples/bench_apply.py [--changes 100000] [--option key=value ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

PROJECT = "bench-project"


def _drain(
    spark, host: str, subs: list[str], options: dict[str, str], apply_to: str | None, schemas: dict[str, str]
) -> tuple[float, int, int]:
    """(seconds, input rows, batches) to drain ``subs`` with AvailableNow into noop or apply."""
    from crdb_pubsub.apply import foreach_batch_apply

    with tempfile.TemporaryDirectory(prefix="bench-apply-chk-") as tmp:
        reader = (
            spark.readStream.format("crdb_pubsub").option("subscription", ",".join(subs)).option("emulatorHost", host)
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        writer = reader.load().writeStream.option("checkpointLocation", os.path.join(tmp, "chk"))
        writer = (
            writer.format("noop") if apply_to is None else writer.foreachBatch(foreach_batch_apply(apply_to, schemas))
        )
        t0 = time.perf_counter()
        q = writer.trigger(availableNow=True).start()
        q.awaitTermination()
        elapsed = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"the query failed: {q.exception()}")
        return elapsed, sum(p["numInputRows"] for p in q.recentProgress), len(q.recentProgress)


def _subscriptions(host: str, topics: list[str], stem: str) -> tuple[list[str], list[str]]:
    from crdb_pubsub.emulator import create_topic_and_subscription

    noop, apply = [], []
    for t in topics:
        noop.append(
            create_topic_and_subscription(host, PROJECT, f"{stem}-{t}", f"{stem}-{t}-noop", ack_deadline_seconds=120)[1]
        )
        apply.append(
            create_topic_and_subscription(
                host, PROJECT, f"{stem}-{t}", f"{stem}-{t}-apply", ack_deadline_seconds=120, exist_ok=True
            )[1]
        )
    return noop, apply


def _publish(host: str, sim, stem: str, n: int) -> None:
    from crdb_pubsub.tools.simulator import make_publisher

    publisher = make_publisher(host)
    real_topic_path = publisher.topic_path
    publisher.topic_path = lambda proj, topic: real_topic_path(proj, f"{stem}-{topic}")
    try:
        sim.publish(publisher, PROJECT, n, create_topics=False, shuffle_window=100, duplicate_fraction=0.0, timeout=900)
    finally:
        publisher.stop()
        publisher.transport.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=100_000)
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="extra source option")
    args = ap.parse_args(argv)
    options = dict(o.split("=", 1) for o in args.option)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub
    from crdb_pubsub.apply import compare_to_ground_truth
    from crdb_pubsub.emulator import emulator
    from crdb_pubsub.tools.simulator import ChangefeedSimulator, primary_keys, spark_schemas

    schemas = spark_schemas()
    with emulator(project=PROJECT) as host, tempfile.TemporaryDirectory(prefix="bench-apply-") as tmp:
        sim = ChangefeedSimulator(seed=7, updated=True, diff=True, mix=(0.5, 0.3, 0.2))
        warm = ChangefeedSimulator(seed=8, updated=True, diff=True, mix=(0.5, 0.3, 0.2))
        noop_subs, apply_subs = _subscriptions(host, sim.topics(), "bench")
        warm_noop, warm_apply = _subscriptions(host, warm.topics(), "warm")
        t0 = time.perf_counter()
        _publish(host, sim, "bench", args.changes)
        _publish(host, warm, "warm", 2_000)
        stats = sim.stats()
        keys = sum(s["inserts"] for s in stats.values())
        print(
            f"published {args.changes:,} changes ({sum(s['inserts'] for s in stats.values()):,} inserts, "
            f"{sum(s['updates'] for s in stats.values()):,} updates, {sum(s['deletes'] for s in stats.values()):,} "
            f"deletes; {keys:,} distinct keys) to {len(noop_subs)} topics in {time.perf_counter() - t0:.1f} s"
        )

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench-apply")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        crdb_pubsub.register(spark)
        _drain(spark, host, warm_noop, options, None, schemas)
        _drain(spark, host, warm_apply, options, os.path.join(tmp, "warm-state"), schemas)

        a, a_rows, a_batches = _drain(spark, host, noop_subs, options, None, schemas)
        state_dir = os.path.join(tmp, "state")
        b, b_rows, b_batches = _drain(spark, host, apply_subs, options, state_dir, schemas)
        spark.stop()

        problems = compare_to_ground_truth(state_dir, sim.ground_truth(), schemas, primary_keys())
        rate_a, rate_b = a_rows / a, b_rows / b
        print(
            f"(a) source -> noop sink         : {a:7.2f} s  {rate_a:9,.0f} msg/s  ({a_rows:,} rows, {a_batches} batches)"
        )
        print(
            f"(b) source -> apply -> Delta    : {b:7.2f} s  {rate_b:9,.0f} msg/s  ({b_rows:,} rows, {b_batches} batches)"
        )
        print("state == simulator ground truth:", problems if problems else "OK")
        print(f"apply/noop ratio {rate_b / rate_a:.2f}")
        return 0 if not problems and a_rows == b_rows == args.changes else 1


if __name__ == "__main__":
    sys.exit(main())
