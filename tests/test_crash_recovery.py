"""A driver killed with SIGKILL mid-stream and restarted on the same checkpoint loses nothing;
with ``stateDir`` it also duplicates nothing (replay of planned batches + dedupe by message id)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stream_job import job_command

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ACK_DEADLINE = 5


def _job(emulator_host: str, sub: str, tmp: Path, *, state: bool, available_now: bool) -> subprocess.Popen:
    cmd = job_command(emulator_host, sub, tmp, state=state, available_now=available_now, ack_deadline=ACK_DEADLINE)
    # Its own session: SIGKILL to the group takes the JVM and its Python workers down at once,
    # as a crashed driver machine would.
    return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _committed_sink_batches(tmp: Path) -> int:
    meta = tmp / "out" / "_spark_metadata"
    return len([p for p in meta.glob("*") if p.name.isdigit()]) if meta.exists() else 0


@pytest.mark.parametrize("state", [True, False], ids=["stateDir", "no-stateDir"])
def test_sigkill_mid_stream_then_restart(spark, emulator_host, make_subscription, publish, tmp_path, state):
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    bodies = [f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"t"}}'.encode() for i in range(3000)]
    ids = publish(topic, bodies)

    first = _job(emulator_host, sub, tmp_path, state=state, available_now=False)
    try:
        deadline = time.monotonic() + 120
        while _committed_sink_batches(tmp_path) < 2 and time.monotonic() < deadline:
            assert first.poll() is None, first.stdout.read()
            time.sleep(0.2)
        assert _committed_sink_batches(tmp_path) >= 2, "the job never committed a batch"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    done_before = _committed_sink_batches(tmp_path)

    # Messages the dead driver held come back once their leases lapse.
    time.sleep(ACK_DEADLINE + 1)
    second = _job(emulator_host, sub, tmp_path, state=state, available_now=True)
    try:
        out, _ = second.communicate(timeout=240)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, out[-3000:]

    got = [r.message_id for r in spark.read.parquet(str(tmp_path / "out")).select("message_id").collect()]
    counts = collections.Counter(got)
    missing = set(ids) - set(counts)
    duplicated = sum(c - 1 for c in counts.values())
    print(f"stateDir={state}: sink batches before kill={done_before}, rows={len(got)}, lost={len(missing)}, duplicated={duplicated}")
    assert not missing, f"{len(missing)} messages lost; the restarted job said:\n{out[-4000:]}"
    if state:
        assert duplicated == 0
