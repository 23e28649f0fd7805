"""A streaming job run as a separate driver process, so tests can SIGKILL it mid-stream.

    python tests/stream_job.py --emulator-host H --subscription S --checkpoint C --output O
        [--state-dir D] [--available-now] [--max-per-trigger N] [--ack-deadline S]
        [--receiver driver|executors] [--num-partitions P]
        [--master local-cluster[2,1,1024]] [--task-sleep SECONDS [--task-marker-dir D]] [--log-level WARN]

Reads the subscription with crdb_pubsub and appends to a parquet directory (Spark's file sink is
exactly-once per batch id, so duplicates in the output come from the source, never the sink).

``--master`` runs it elsewhere than ``local[2]`` (``local-cluster[N,cores,memMB]`` gives executor
JVMs of their own, which a test can kill); ``--task-sleep`` makes each task pause that long after
the source handed it its first rows, so that a batch's tasks are reliably in flight for a while;
with ``--task-marker-dir`` each such task first writes a file there named
``<batch>-<partition>-<attempt>-<pid of its Python worker>`` (a test finds the task's executor by it).
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
    master: str | None = None,
    task_sleep: float | None = None,
    task_marker_dir: Path | None = None,
    log_level: str | None = None,
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
    if master:
        cmd += ["--master", master]
    if task_sleep:
        cmd += ["--task-sleep", str(task_sleep)]
    if task_marker_dir:
        cmd += ["--task-marker-dir", str(task_marker_dir)]
    if log_level:
        cmd += ["--log-level", log_level]
    return cmd


def _pause_after_first_rows(seconds: float, marker_dir: str | None):
    """A ``mapInArrow`` function that passes the rows through, pausing once after the first batch
    (after marking, in ``marker_dir``, which task of which batch in which process pauses)."""

    def pause(batches):
        import os
        import time

        from pyspark import TaskContext

        first = True
        for batch in batches:
            yield batch
            if first:
                first = False
                if marker_dir:
                    tc = TaskContext.get()
                    bid = tc.getLocalProperty("streaming.sql.batchId") if tc else None
                    name = f"{bid}-{tc.partitionId() if tc else -1}-{tc.attemptNumber() if tc else -1}-{os.getpid()}"
                    with open(os.path.join(marker_dir, name), "w"):
                        pass
                time.sleep(seconds)

    return pause


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
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--task-sleep", type=float, default=0.0, help="seconds each task pauses after its first rows")
    ap.add_argument("--task-marker-dir")
    ap.add_argument("--log-level", default="ERROR")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub

    builder = (
        SparkSession.builder.master(args.master)
        .appName("crdb-pubsub-stream-job")
        .config("spark.ui.enabled", "false")
        # A job lives seconds to a minute (the fault scenarios start dozens): C2's compilations
        # never pay back on 2 cores, and the client compiler alone made a SIGKILL scenario ~17% faster.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if args.master.startswith("local-cluster"):
        # Executor JVMs of their own: their Python workers run the interpreter named here (the
        # package is installed in its environment), as spark.pyspark.python does on a cluster.
        # Three JVMs on a small machine: one GC thread each starts them sooner.
        builder = (
            builder.config("spark.pyspark.python", sys.executable)
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.executor.memory", "512m")
            .config(
                "spark.executor.extraJavaOptions",
                f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {os.environ.get('CRDB_PUBSUB_JVM_ARCHIVE_OPTS', '')}".strip(),
            )
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(args.log_level)
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
    df = reader.load()
    if args.task_sleep > 0:
        df = df.mapInArrow(_pause_after_first_rows(args.task_sleep, args.task_marker_dir), df.schema)
    writer = df.writeStream.format("parquet").option("path", args.output).option("checkpointLocation", args.checkpoint)
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
