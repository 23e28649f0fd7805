"""CockroachDB changefeed on Pub/Sub -> current-state tables, as a Spark job (Dataproc or local).

    spark-submit --py-files crdb_pubsub-*.whl streaming_job.py \\
        --subscriptions projects/P/subscriptions/users-spark,projects/P/subscriptions/rides-spark \\
        --checkpoint gs://BUCKET/cdc/checkpoint --tables gs://BUCKET/cdc/tables \\
        --option stateDir=gs://BUCKET/cdc/source-state \\
        --schema "users=id STRING, city STRING, balance DECIMAL(12,2)" --trigger-seconds 30

Every micro-batch is applied with ``crdb_pubsub.apply`` (latest change per key by HLC, deletes as
tombstones, exact DECIMAL/BIGINT) to one Delta Lake table per source table under ``--tables``
(delta-rs, so the ``deltalake`` package must be installed where the driver runs: the ``apply``
extra), and one JSON line of counts is printed per batch
(``{"event": "batch", ...}``); a bounded run (``--available-now``) ends with ``{"event": "done", ...}``.

``--option stateDir=gs://...`` is the *source's* state (its ledger, for exactly-once replay; with
``--option receiver=executors`` the tasks' slices too), not ``--tables`` (the Delta tables): one
per query, under a prefix of its own, e.g. next to the checkpoint in the same bucket. The job
refuses a stateDir that is, holds or lies inside the checkpoint or ``--tables``. (``--state-dir``,
its former name, still works; it was too easy to take for the source's ``stateDir``.)
Exit codes: 0 done (or stopped), 1 the query failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="streaming_job.py", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--subscriptions", required=True, help="comma-separated projects/P/subscriptions/S (or bare ids with --project)"
    )
    ap.add_argument("--project", default=None, help="project of bare subscription ids")
    ap.add_argument("--checkpoint", required=True, help="checkpoint location (gs://... on Dataproc)")
    ap.add_argument(
        "--tables",
        "--state-dir",  # its former name, kept working
        dest="tables",
        required=True,
        help="where the per-table Delta tables live (gs://... on Dataproc); not the source's stateDir option",
    )
    ap.add_argument(
        "--schema",
        action="append",
        default=[],
        metavar="TABLE=DDL",
        help="Spark DDL of a table's columns, e.g. 'users=id STRING, balance DECIMAL(12,2)' "
        "(repeatable; tables without one get a schema inferred once)",
    )
    ap.add_argument(
        "--bare-op-column",
        default=None,
        help="bare envelope only: the column a CDC query selects event_op() as (tells deletes apart)",
    )
    ap.add_argument(
        "--schemas-file", default=None, help="JSON file {table: DDL} (local path; on Dataproc ship it with --files)"
    )
    ap.add_argument(
        "--simulator-schemas", action="store_true", help="use the schemas of the simulator's movr tables (demo/test)"
    )
    ap.add_argument("--trigger-seconds", type=float, default=30.0, help="micro-batch interval (default 30)")
    ap.add_argument(
        "--available-now",
        action="store_true",
        help="drain what is waiting, then stop (Spark >= 4.2: in as many batches as it takes; "
        "4.0/4.1: one batch, acknowledged by the next run, so use --option stateDir=...)",
    )
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="source option passed through, e.g. stateDir=gs://BUCKET/cdc/source-state "
        "receiver=executors numPartitions=16 ackDeadlineSeconds=60 maxMessagesPerTrigger=50000",
    )
    ap.add_argument("--emulator-host", default=None, help="Pub/Sub emulator host:port (local runs only)")
    ap.add_argument("--timeout", type=float, default=None, help="stop after this many seconds (default: never)")
    args = ap.parse_args(argv)
    for item in args.schema + args.option:
        if "=" not in item:
            ap.error(f"expected KEY=VALUE, got {item!r}")
    if not args.trigger_seconds > 0:
        ap.error("--trigger-seconds must be > 0")
    source_state = next((v for k, v in (o.split("=", 1) for o in args.option) if k.strip().lower() == "statedir"), None)
    if source_state:
        for flag, other in (("--checkpoint", args.checkpoint), ("--tables", args.tables)):
            if _overlap(source_state, other):
                ap.error(
                    f"stateDir={source_state} overlaps {flag} {other}: give the source's stateDir a "
                    f"prefix of its own (e.g. gs://BUCKET/cdc/source-state next to gs://BUCKET/cdc/checkpoint)"
                )
    return args


def _overlap(a: str, b: str) -> bool:
    """Whether one location is the other or lies inside it (compared as given, trailing '/' aside)."""
    a, b = a.strip().rstrip("/"), b.strip().rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def schemas_from_args(args: argparse.Namespace) -> dict[str, str]:
    schemas: dict[str, str] = {}
    if args.simulator_schemas:
        from crdb_pubsub.tools.simulator import spark_schemas

        schemas.update(spark_schemas())
    if args.schemas_file:
        with open(args.schemas_file, encoding="utf-8") as fh:
            schemas.update(json.load(fh))
    for item in args.schema:
        table, ddl = item.split("=", 1)
        schemas[table.strip()] = ddl.strip()
    return schemas


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    import crdb_pubsub
    from crdb_pubsub.apply import foreach_batch_apply

    spark = SparkSession.builder.appName("crdb-pubsub-cdc-apply").getOrCreate()
    crdb_pubsub.register(spark)
    schemas = schemas_from_args(args)
    print(
        json.dumps(
            {
                "event": "start",
                "crdb_pubsub": crdb_pubsub.__version__,
                "module": crdb_pubsub.__file__,
                "spark": spark.version,
                "tables_with_schema": sorted(schemas),
            }
        ),
        flush=True,
    )

    reader = spark.readStream.format("crdb_pubsub").option("subscription", args.subscriptions)
    if args.project:
        reader = reader.option("projectId", args.project)
    if args.emulator_host:
        reader = reader.option("emulatorHost", args.emulator_host)
    for item in args.option:
        key, value = item.split("=", 1)
        reader = reader.option(key.strip(), value)
    changes = reader.load()

    totals = {"batches": 0, "messages": 0, "rows_in": 0, "malformed": 0}
    last_tables: dict = {}

    def report(res) -> None:
        totals["batches"] += 1
        totals["messages"] += res.messages
        totals["rows_in"] += res.rows_in
        totals["malformed"] += res.malformed
        last_tables.update({t: c.__dict__ for t, c in res.tables.items()})
        print(json.dumps({"event": "batch", **res.to_json()}), flush=True)

    writer = (
        changes.writeStream.queryName("crdb_pubsub_cdc_apply")
        .foreachBatch(foreach_batch_apply(args.tables, schemas, bare_op_column=args.bare_op_column, on_result=report))
        .option("checkpointLocation", args.checkpoint)
    )
    writer = (
        writer.trigger(availableNow=True)
        if args.available_now
        else writer.trigger(processingTime=f"{args.trigger_seconds:g} seconds")
    )
    t0 = time.monotonic()
    query = writer.start()
    try:
        query.awaitTermination(args.timeout)
    except KeyboardInterrupt:
        pass
    finally:
        if query.isActive:
            query.stop()
    failed = query.exception()
    print(
        json.dumps(
            {
                "event": "done" if failed is None else "failed",
                "elapsed_s": round(time.monotonic() - t0, 1),
                **totals,
                "tables": last_tables,
                "error": None if failed is None else str(failed).splitlines()[0],
            }
        ),
        flush=True,
    )
    spark.stop()
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
