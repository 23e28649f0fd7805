"""What must hold on every Spark version the README claims (4.0, 4.1, 4.2, 4.3), end to end on
the emulator: an AvailableNow drain, a failing sink then a restart, a SIGKILL then a restart.

The SIGKILL is one case a run, the receivers taking turns over the versions CI runs
(``receiver=executors`` plans and commits through the same offset calls, so Spark's call order
matters to it the same way; its SIGKILL case starts the query, restarts it and drains the rest with
AvailableNow, so a separate executors drain adds only time): executors on 4.0 with Python 3.11, on
4.1 with 3.12 and on 4.2, driver on 4.0 with Python 3.12, so each of Spark's two call orders (4.0/4.1,
4.2+) and each Python sees both (4.2+ and 3.11 see the driver killed in the main suite, which kills
both receivers on the pinned Spark, in depth).

On Spark 4.0/4.1 Trigger.AvailableNow runs as a single batch and Spark tells the source of that
batch's commit only at the next run's first call, so the drain is two runs there: the second
acknowledges the first one's batch (recognised through the stateDir) and reads nothing new.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from conftest import end_frozen, freeze_reader, pull_ids
from polling import wait_for
from stream_job import job_command

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SPARK = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
SINGLE_BATCH_AVAILABLE_NOW = SPARK < (4, 2)
ACK_DEADLINE = 5


def body(i: int) -> bytes:
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"smoke"}}'.encode()


def _counts(ids, got) -> tuple[int, int]:
    c = collections.Counter(got)
    return len(set(ids) - set(c)), sum(n - 1 for n in c.values())


def _parquet_ids(out: Path) -> list[str]:
    import pyarrow.parquet as pq

    meta = out / "_spark_metadata"
    files = []
    for log in sorted(meta.iterdir()) if meta.exists() else []:
        if log.name.startswith(".") or log.name.endswith(".tmp"):
            continue
        for line in log.read_text().splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                if entry.get("action") != "delete":
                    files.append(entry["path"].removeprefix("file://").removeprefix("file:"))
    return [m for f in files for m in pq.read_table(f, columns=["message_id"]).column(0).to_pylist()]


def _run_job(
    host: str,
    sub: str,
    tmp: Path,
    *,
    available_now: bool,
    max_per_trigger: int = 0,
    timeout: float = 300,
    receiver: str = "driver",
):
    cmd = job_command(
        host,
        sub,
        tmp,
        state=True,
        available_now=available_now,
        ack_deadline=ACK_DEADLINE,
        max_per_trigger=max_per_trigger,
        receiver=receiver,
    )
    return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    return out


def _drain(host: str, sub: str, tmp: Path, receiver: str = "driver") -> None:
    """Trigger.AvailableNow until the backlog is read and acknowledged (see the module docstring):
    one run on 4.2+; on 4.0/4.1 runs until one reads nothing new, since each run acknowledges the
    previous run's batch and its own batch waits for the next run."""
    if not SINGLE_BATCH_AVAILABLE_NOW:
        _finish(_run_job(host, sub, tmp, available_now=True, receiver=receiver))
        return
    before = -1
    for _ in range(6):
        _finish(_run_job(host, sub, tmp, available_now=True, receiver=receiver))
        now = len(_parquet_ids(tmp / "out"))
        print(f"single-batch AvailableNow run: {now} rows written so far")
        if now == before:
            return
        before = now
    raise AssertionError(f"six single-batch AvailableNow runs kept reading ({before} rows written)")


# The module docstring's turns: (Spark minor + Python minor) odd is executors.
SIGKILL_RECEIVER = "executors" if (SPARK[1] + sys.version_info[1]) % 2 else "driver"


def test_available_now_drain(emulator_host, make_subscription, publish, tmp_path):
    receiver = "driver"
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    ids = publish(topic, [body(i) for i in range(2000)])
    _drain(emulator_host, sub, tmp_path, receiver)
    lost, duplicated = _counts(ids, _parquet_ids(tmp_path / "out"))
    time.sleep(ACK_DEADLINE + 1)
    left = pull_ids(emulator_host, sub, timeout=2.0)
    print(
        f"FAULT-RESULT spark={pyspark.__version__} available-now receiver={receiver} lost={lost} duplicated={duplicated} left={len(left)}"
    )
    assert (lost, duplicated, len(left)) == (0, 0, 0)


@pytest.mark.parametrize("reader", ["exits", "frozen"])
def test_failing_sink_then_restart_with_state_dir(spark, emulator_host, make_subscription, publish, tmp_path, reader):
    """Issue 9 scenario 1 end to end: on 4.0/4.1 Spark's restart first calls partitions(X, X) for
    the batch whose sink failed; the replay must still deliver it. ``frozen``: the failed query's
    reader process is stopped (SIGSTOP) before the sink fails, so it outlives its query holding the
    stateDir; the restart must take it over from whichever call each version makes first."""
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    ids = publish(topic, [body(i) for i in range(1000)])
    seen_dir = tmp_path / "sink"
    seen_dir.mkdir()
    failed: dict = {}

    def sink(df, batch_id):
        got = [r.message_id for r in df.select("message_id").collect()]
        if got and "ids" not in failed and len(list(seen_dir.iterdir())) >= 1:
            failed["ids"] = got
            if reader == "frozen":
                failed["pid"] = freeze_reader(tmp_path / "state")
            raise RuntimeError("sink fails on purpose")
        (seen_dir / f"{batch_id:06d}").write_text("\n".join(got))  # batch N replaces file N

    def start():
        return (
            spark.readStream.format("crdb_pubsub")
            .option("subscription", sub)
            .option("emulatorHost", emulator_host)
            .option("stateDir", str(tmp_path / "state"))
            .option("ackDeadlineSeconds", str(ACK_DEADLINE))
            .option("maxMessagesPerTrigger", "200")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    def seen() -> list[str]:
        return [m for p in sorted(seen_dir.iterdir()) for m in p.read_text().split("\n") if m]

    q = start()
    try:
        with pytest.raises(Exception, match="sink fails on purpose"):
            q.awaitTermination(180)
        assert failed.get("ids")
        q = start()
        try:
            wait_for(lambda: set(ids) <= set(seen()), 180, "every message in the sink after the restart", query=q)
        finally:
            q.stop()
    finally:
        if "pid" in failed:
            end_frozen(failed["pid"])
    lost, duplicated = _counts(ids, seen())
    print(
        f"FAULT-RESULT spark={pyspark.__version__} failing-sink-stateDir reader={reader} lost={lost} "
        f"duplicated={duplicated}"
    )
    assert (lost, duplicated) == (0, 0)


@pytest.mark.parametrize("receiver", [SIGKILL_RECEIVER])
def test_sigkill_then_restart_with_state_dir(emulator_host, make_subscription, publish, tmp_path, receiver):
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    ids = publish(topic, [body(i) for i in range(2000)])
    first = _run_job(emulator_host, sub, tmp_path, available_now=False, max_per_trigger=250, receiver=receiver)
    commits = tmp_path / "chk" / "commits"

    def committed() -> int:
        return len([p for p in commits.glob("*") if p.name.isdigit()]) if commits.exists() else 0

    try:
        end = time.monotonic() + 180
        while committed() < 1:  # killed with a batch committed and the next one planned or pulling
            assert first.poll() is None, first.stdout.read()
            assert time.monotonic() < end, "the job never committed a batch"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    time.sleep(ACK_DEADLINE + 1)  # what the dead driver held comes back
    _drain(emulator_host, sub, tmp_path, receiver)
    lost, duplicated = _counts(ids, _parquet_ids(tmp_path / "out"))
    time.sleep(ACK_DEADLINE + 1)
    left = pull_ids(emulator_host, sub, timeout=2.0)
    print(
        f"FAULT-RESULT spark={pyspark.__version__} sigkill-stateDir receiver={receiver} lost={lost} duplicated={duplicated} left={len(left)}"
    )
    assert (lost, duplicated, len(left)) == (0, 0, 0)
