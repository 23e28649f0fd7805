"""A streaming job run as a separate driver process, so tests can SIGKILL it mid-stream.

    python tests/stream_job.py --emulator-host H --subscription S --checkpoint C --output O
        [--state-dir D] [--available-now] [--max-per-trigger N] [--ack-deadline S]
        [--receiver driver|executors] [--num-partitions P]

Reads the subscription with crdb_pubsub and appends to a parquet directory (Spark's file sink is
exactly-once per batch id, so duplicates in the output come from the source, never the sink).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def job_command(
    emulator_host: str,
    subscription: str,
    tmp: Path,
    *,
    state: bool | str,
    available_now: bool,
    ack_deadline: int = 5,
    max_per_trigger: int = 250,
    receiver: str = "driver",
    num_partitions: int | None = None,
) -> list[str]:
    """The command line that runs this job with its checkpoint/output/state under ``tmp`` (``state``:
    a stateDir there, none, or the stateDir given, e.g. ``gs://...``)."""
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--emulator-host",
        emulator_host,
        "--subscription",
        subscription,
        "--checkpoint",
        str(tmp / "chk"),
        "--output",
        str(tmp / "out"),
        "--ack-deadline",
        str(ack_deadline),
        "--max-per-trigger",
        str(max_per_trigger),
    ]
    if state:
        cmd += ["--state-dir", state if isinstance(state, str) else str(tmp / "state")]
    if available_now:
        cmd.append("--available-now")
    if receiver != "driver":
        cmd += ["--receiver", receiver]
    if num_partitions:
        cmd += ["--num-partitions", str(num_partitions)]
    return cmd


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--emulator-host", required=True)
    ap.add_argument("--subscription", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--state-dir")
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--max-per-trigger", type=int, default=300, help="0: no limit")
    ap.add_argument("--ack-deadline", type=int, default=5)
    ap.add_argument("--receiver", default="driver")
    ap.add_argument("--num-partitions", type=int)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("crdb-pubsub-stream-job")
        .config("spark.ui.enabled", "false")
        # A job lives seconds to a minute (the fault scenarios start dozens): C2's compilations
        # never pay back on 2 cores, and the client compiler alone made a SIGKILL scenario ~17% faster.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    crdb_pubsub.register(spark)
    reader = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", args.subscription)
        .option("emulatorHost", args.emulator_host)
        .option("ackDeadlineSeconds", str(args.ack_deadline))
        .option("receiver", args.receiver)
    )
    if args.num_partitions:
        reader = reader.option("numPartitions", str(args.num_partitions))
    if args.max_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", str(args.max_per_trigger))
    if args.state_dir:
        reader = reader.option("stateDir", args.state_dir)
    writer = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("STARTED", flush=True)
    query.awaitTermination()
    print("FINISHED", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
