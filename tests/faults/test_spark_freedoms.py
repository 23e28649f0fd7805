"""What Spark is free to do to a source, end to end on real Spark against the real emulator.

Each scenario runs with ``receiver=driver`` and ``receiver=executors`` (both with a ``stateDir``):

1. ``maxBytesPerTrigger`` of 64 KiB over ~3,000 bodies of 400-800 bytes: Spark asks for byte-bounded
   batches (``ReadMaxBytes``); every message reaches an exactly-once sink once, in many batches.
2. A ``foreachBatch`` that reads only part of a batch (``df.limit(5).collect()``) and writes
   nothing of it: Spark never runs some of that batch's tasks and still commits the batch. Later
   another batch is counted first (``df.count()`` runs every task, then ``limit`` runs one again:
   a task read twice) and not written either. The query goes on, later batches keep coming,
   nothing is written twice, and what is lost is at most those batches (driver: each was sealed
   whole and is acknowledged; executors: the tasks Spark never ran pulled nothing, so their share
   comes in later batches).
3. An executor JVM SIGKILLed mid-batch on ``local-cluster[2,1,1024]`` (two executor JVMs, a job of
   its own, ``tests/stream_job.py --master``): Spark reruns the lost task on the other executor and
   starts a new one; an AvailableNow run drains everything into the parquet file sink, read through
   its ``_spark_metadata`` log: lost 0, duplicated 0.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polling import wait_for
from stream_job import job_command

from ._support import (
    BatchFileSink,
    MetricsSampler,
    cmdline,
    descendants,
    report,
    row_body,
    scaled,
    sink_column,
    tally,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

RECEIVERS = ["driver", "executors"]


def _reader(spark, host: str, sub: str, **options):
    r = spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", host)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _batches(sink: BatchFileSink) -> dict[int, list[str]]:
    """The sink's files: batch id -> message ids written for it."""
    out = {}
    for p in sorted(sink.dir.glob("*.ids")):
        text = p.read_text()
        out[int(p.stem)] = text.split("\n") if text else []
    return out


# --------------------------------------------------------------------------- 1. maxBytesPerTrigger


@pytest.mark.parametrize("receiver", RECEIVERS)
def test_max_bytes_per_trigger(spark, emulator_host, make_subscription, publish, tmp_path: Path, receiver: str):
    limit = 64 * 1024
    n = scaled(3000, 20_000)
    bodies = [row_body(i, pad=330 + (i * 37) % 400) for i in range(n)]  # 400-800 bytes
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(topic, bodies)
    size = dict(zip(ids, (len(b) for b in bodies)))
    total = sum(size.values())

    opts: dict[str, object] = {"maxBytesPerTrigger": limit, "receiver": receiver, "stateDir": tmp_path / "state"}
    if receiver == "executors":
        opts["numPartitions"] = 2
    sink = BatchFileSink(tmp_path / "sink")
    q = (
        _reader(spark, emulator_host, sub, **opts)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    t0 = time.monotonic()
    try:
        wait_for(lambda: set(ids) <= set(sink.ids()), 240, "every message in the sink", query=q, interval=1.0)
        took = time.monotonic() - t0
        time.sleep(1.5)  # a late duplicate would land now
    finally:
        q.stop()
    lost, duplicated, unexpected = tally(ids, sink.ids())
    per_batch = [sum(size.get(i, 0) for i in got) for got in _batches(sink).values() if got]
    report(
        f"max-bytes-per-trigger-{receiver}",
        published=n,
        lost=lost,
        duplicated=duplicated,
        body_bytes=total,
        max_bytes_per_trigger=limit,
        batches_with_rows=len(per_batch),
        largest_batch_bytes=max(per_batch, default=0),
        smallest_batch_bytes=min(per_batch, default=0),
        seconds=round(took, 1),
    )
    assert not unexpected
    assert lost == 0 and duplicated == 0
    # The limit took effect: no batch much above it, so at least total/limit batches.
    assert len(per_batch) >= math.ceil(total / limit)
    if receiver == "driver":
        assert max(per_batch) <= limit, "the driver sealed a batch above maxBytesPerTrigger"


# --------------------------------------------------------------------------- 2. part of a batch read


class _PartialReadSink:
    """Writes every batch as :class:`BatchFileSink` does (batch N replaces file N), except the
    batches with rows named in ``probes`` (1 = the first batch with rows): of those it reads
    ``df.limit(5).collect()`` (``"limit"``), or ``df.count()`` then that (``"count"``), and
    writes nothing."""

    def __init__(self, directory: Path, probes: dict[int, str]) -> None:
        self.files = BatchFileSink(directory)
        self.probes = probes
        self.with_rows = 0
        self.partial: list[dict] = []

    def __call__(self, df, batch_id: int) -> None:
        probe = self.probes.get(self.with_rows + 1)
        if probe is not None:
            count = df.count() if probe == "count" else None
            peeked = [r.message_id for r in df.select("message_id").limit(5).collect()]
            if peeked:
                self.with_rows += 1
                self.partial.append(
                    {
                        "batch": batch_id,
                        "probe": probe,
                        "count": count,
                        "peeked": peeked,
                        "parts": df.rdd.getNumPartitions(),
                    }
                )
                return
        self.files(df, batch_id)
        if self.files.calls[-1][1]:
            self.with_rows += 1


def _settled(missing, bound: int, quiet: float):
    """A condition: ``missing()`` is at most ``bound`` and has not changed for ``quiet`` seconds."""
    state = {"value": None, "since": 0.0}

    def cond() -> bool:
        m = missing()
        now = time.monotonic()
        if m != state["value"]:
            state.update(value=m, since=now)
            return False
        return m <= bound and now - state["since"] >= quiet

    return cond


@pytest.mark.parametrize("receiver", RECEIVERS)
def test_foreach_batch_reads_part_of_a_batch(
    spark, emulator_host, make_subscription, publish, tmp_path: Path, receiver: str
):
    """The 2nd batch with rows: ``limit`` only (tasks left unrun); the 4th: ``count``, then ``limit``."""
    per_trigger = 200
    n = scaled(1000, 5000)
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(topic, [row_body(i) for i in range(n)])
    # Several partitions, so that limit(5) needs only the first task's rows and Spark leaves the others unrun.
    opts: dict[str, object] = {
        "maxMessagesPerTrigger": per_trigger,
        "receiver": receiver,
        "stateDir": tmp_path / "state",
        "numPartitions": 2 if receiver == "executors" else 4,
    }
    sink = _PartialReadSink(tmp_path / "sink", probes={2: "limit", 4: "count"})
    q = (
        _reader(spark, emulator_host, sub, **opts)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    t0 = time.monotonic()
    try:
        with MetricsSampler(q) as sampler:
            wait_for(lambda: len(sink.partial) == 2, 120, "both partially read batches", query=q)
            # At most a batch's worth from the limit-only batch, and what the counted batch held.
            bound = per_trigger + int(sink.partial[1]["count"])
            # Everything but (part of) those in the sink, then nothing more for a while: the
            # tasks Spark left unrun in executors mode have their messages come in later batches.
            wait_for(
                _settled(lambda: len(set(ids) - set(sink.files.ids())), bound, quiet=3.0),
                180,
                f"all but at most {bound} messages in the sink, and no more coming",
                query=q,
                interval=0.5,
            )
            took = time.monotonic() - t0
            assert q.isActive, f"the query ended: {q.exception()}"
        last = sampler.last()
    finally:
        q.stop()
    got = sink.files.ids()
    lost, duplicated, unexpected = tally(ids, got)
    last_partial = sink.partial[-1]["batch"]
    after = [b for b, rows in _batches(sink.files).items() if b > last_partial and rows]
    report(
        f"partial-batch-read-{receiver}",
        published=n,
        lost=lost,
        duplicated=duplicated,
        partial_batches=[
            {
                "batch": p["batch"],
                "probe": p["probe"],
                "partitions": p["parts"],
                "rows": p["count"],
                "peeked_in_sink": len(set(p["peeked"]) & set(got)),
            }
            for p in sink.partial
        ],
        bound=bound,
        # Of the limit-only batch (the counted one is lost whole): driver, all it sealed;
        # executors, the share of the task Spark ran (the rest came in later batches).
        lost_of_limit_batch=lost - int(sink.partial[1]["count"]),
        batches_with_rows_after=len(after),
        received=last.get("received"),
        redeliveries_dropped=last.get("redeliveriesDropped"),
        seconds=round(took, 1),
    )
    assert not unexpected
    assert duplicated == 0, "a message was written twice"
    assert after, "no batch with rows came after the partially read ones"
    assert lost <= bound, f"{lost} lost: more than the partially read batches held (at most {bound})"


# --------------------------------------------------------------------------- 3. executor JVM killed


def _executor_of(pid: int) -> int | None:
    """The executor JVM a process runs under (a task's Python worker: worker, daemon, JVM)."""
    while pid > 1:
        if "CoarseGrainedExecutorBackend" in cmdline(pid):
            return pid
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


def _executor_pids(root: int) -> list[int]:
    """Executor JVMs under the job's process (local-cluster's workers start them as children of the driver JVM)."""
    return sorted(p for p in descendants(root) if "CoarseGrainedExecutorBackend" in cmdline(p))


def _numbered(d: Path) -> set[int]:
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def _tail(log: Path, n: int = 5000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else ""


def _job_env() -> dict[str, str]:
    """The test's environment without what a real cluster would not pass to its executors: the
    emulator goes as an option; the workers' interpreter is named (it has the package installed)."""
    drop = ("PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@pytest.mark.parametrize("receiver", RECEIVERS)
def test_executor_jvm_killed_mid_batch(emulator_host, make_subscription, publish, tmp_path: Path, receiver: str):
    """The first task that has rows marks itself and pauses; its executor JVM is SIGKILLed then."""
    n = scaled(1200, 10_000)
    per_trigger = scaled(400, 1000)  # several batches after the one the kill hits
    task_sleep = 2.0
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(topic, [row_body(i) for i in range(n)])
    log, markers = tmp_path / "job.log", tmp_path / "markers"
    markers.mkdir()
    cmd = job_command(
        emulator_host,
        sub,
        tmp_path,
        state=True,
        available_now=True,
        ack_deadline=10,
        max_per_trigger=per_trigger,
        receiver=receiver,
        num_partitions=2,
        master="local-cluster[2,1,1024]",
        task_sleep=task_sleep,
        task_marker_dir=markers,
        log_level="WARN",  # TaskSetManager's "Lost task ... ExecutorLostFailure" is a WARN
    )
    offsets, commits = tmp_path / "chk" / "offsets", tmp_path / "chk" / "commits"
    t0 = time.monotonic()
    with open(log, "wb") as fh:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=fh, stderr=subprocess.STDOUT, env=_job_env())
    killed: dict[str, object] = {}
    seen_executors: set[int] = set()
    try:
        end = time.monotonic() + 180
        while not killed:
            if proc.poll() is not None:
                raise AssertionError(f"job exited with {proc.returncode} before the kill:\n{_tail(log)}")
            if time.monotonic() > end:
                raise AssertionError(f"no task marked itself in 180 s:\n{_tail(log)}")
            seen_executors.update(_executor_pids(proc.pid))
            for marker in sorted(markers.iterdir()):
                batch_text, part, attempt, worker = marker.name.split("-")
                batch = int(batch_text) if batch_text.isdigit() else None
                victim = _executor_of(int(worker))
                if victim is None or victim not in descendants(proc.pid):
                    continue
                running = _numbered(offsets) - _numbered(commits)
                os.kill(victim, signal.SIGKILL)
                killed.update(
                    pid=victim,
                    batch=batch,
                    task=f"{part}.{attempt}",
                    uncommitted_at_kill=batch in running if batch is not None else bool(running),
                    at_seconds=round(time.monotonic() - t0, 1),
                )
                break
            time.sleep(0.05)
        end = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < end:
            seen_executors.update(_executor_pids(proc.pid))
            time.sleep(0.5)
        if proc.poll() is None:
            raise AssertionError(f"the AvailableNow run did not finish in 240 s:\n{_tail(log)}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    took = time.monotonic() - t0
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, _tail(log)
    got = sink_column(tmp_path / "out")["message_id"].to_pylist()
    lost, duplicated, unexpected = tally(ids, got)
    lost_tasks = [line for line in text.splitlines() if "ExecutorLostFailure" in line]
    report(
        f"executor-jvm-killed-{receiver}",
        published=n,
        lost=lost,
        duplicated=duplicated,
        killed_in_batch=killed["batch"],
        killed_task=killed["task"],
        uncommitted_at_kill=killed["uncommitted_at_kill"],
        kill_at_seconds=killed["at_seconds"],
        tasks_lost_with_the_executor=len(lost_tasks),
        executor_jvms_seen=len(seen_executors),
        batches=len(_numbered(commits)),
        sink_rows=len(got),
        seconds=round(took, 1),
    )
    assert killed["uncommitted_at_kill"], "the executor was killed after its batch committed: not mid-batch"
    assert lost_tasks, "Spark lost no task with the executor: the kill was not mid-task"
    assert not unexpected
    assert lost == 0, f"{lost} messages lost after an executor was killed in batch {killed['batch']}"
    assert duplicated == 0, f"{duplicated} duplicates after an executor was killed in batch {killed['batch']}"
