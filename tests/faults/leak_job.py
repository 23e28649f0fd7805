"""Run a crdb_pubsub query with credentials in a separate driver process (its stdout/stderr are
the evidence scanned by ``test_security.py``): print the plan strings, start a query against the
real endpoint with a token URI that refuses connections, print how it failed.

    python tests/faults/leak_job.py --subscription S --checkpoint C (--credentials-json-file F | --credentials-file F)
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscription", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--credentials-json-file")
    ap.add_argument("--credentials-file")
    ap.add_argument("--receiver", default="driver")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.pop("PUBSUB_EMULATOR_HOST", None)

    from pyspark.sql import SparkSession

    import crdb_pubsub

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("crdb-pubsub-leak-job")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("INFO")
    crdb_pubsub.register(spark)
    r = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", args.subscription)
        .option("ackDeadlineSeconds", "10")
    )
    if args.credentials_json_file:
        with open(args.credentials_json_file) as fh:
            r = r.option("credentialsJson", fh.read())
    else:
        r = r.option("credentialsFile", args.credentials_file)
    if args.receiver != "driver":
        r = r.option("receiver", args.receiver).option("stateDir", args.checkpoint + "-state")
    df = r.load()
    print("PLAN", df._jdf.queryExecution().toString(), flush=True)
    df.explain(extended=True)
    q = df.writeStream.format("noop").option("checkpointLocation", args.checkpoint).start()
    try:
        q.awaitTermination(120)
        print("QUERY ENDED WITHOUT ERROR", flush=True)
    except Exception as exc:  # noqa: BLE001 - the failure is the evidence
        print("QUERY FAILED", repr(exc), flush=True)
        print("QUERY EXCEPTION", str(q.exception()), flush=True)
    print("PROGRESS", q.recentProgress, flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
