"""examples/dataproc/streaming_job.py run exactly as Dataproc runs it: ``spark-submit`` with the built wheel
on ``--py-files``, against the emulator, bounded with ``--available-now``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import publish_simulated

from crdb_pubsub.apply import compare_to_ground_truth
from crdb_pubsub.tools.simulator import primary_keys, spark_schemas

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "dataproc" / "streaming_job.py"
PROJECT = "test-project"


def _spark_submit() -> str:
    """The spark-submit the pyspark package ships (next to the venv's python, else in SPARK_HOME)."""
    candidate = Path(sys.executable).with_name("spark-submit")
    if candidate.exists():
        return str(candidate)
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out), "-q"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    (whl,) = out.glob("crdb_pubsub-*.whl")
    return whl


def test_the_wheel_carries_every_module(wheel):
    """Dataproc imports the package from the wheel alone. The suite's editable install finds every
    folder whatever setup.cfg lists, so a sub-package the wheel leaves out shows only here."""
    import zipfile

    folders = {"connector/autoregister": "pyspark_crdb_pubsub", "connector": "crdb_pubsub",
               "emulator": "crdb_pubsub/emulator"}
    want = set()
    for path in (ROOT / "connector").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        src = next(f for f in folders if rel.startswith(f + "/"))
        want.add(folders[src] + rel[len(src):])
    want |= {"crdb_pubsub/emulator/" + p.name for p in (ROOT / "emulator").glob("*.py")}
    with zipfile.ZipFile(wheel) as whl:
        have = {n for n in whl.namelist() if n.endswith(".py")}
    assert sorted(want - have) == []


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_streaming_job_via_spark_submit_with_the_wheel(spark, emulator_host, wheel, tmp_path: Path, receiver: str):
    """The job as Dataproc runs it, with either receiver."""
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    sim = ChangefeedSimulator(seed=5, updated=True, diff=True, resolved_every=50)
    stem = f"dp-{tmp_path.name[-12:]}".replace("_", "-")
    subs, report = publish_simulated(emulator_host, PROJECT, sim, stem, 600, shuffle_window=20, duplicate_fraction=0.03)

    state_dir, checkpoint = tmp_path / "state", tmp_path / "checkpoint"
    env = {k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [
        _spark_submit(), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.sql.session.timeZone=UTC",
        "--py-files", str(wheel), str(JOB),
        "--subscriptions", ",".join(subs), "--emulator-host", emulator_host,
        "--checkpoint", str(checkpoint), "--state-dir", str(state_dir), "--simulator-schemas",
        "--available-now", "--option", "maxMessagesPerTrigger=400", "--option", "ackDeadlineSeconds=30",
    ]
    if receiver == "executors":
        cmd += ["--option", "receiver=executors", "--option", f"stateDir={tmp_path / 'source-state'}",
                "--option", "numPartitions=2"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith('{"event"')]
    assert res.returncode == 0, res.stderr[-3000:]
    start, done = events[0], events[-1]
    assert start["event"] == "start" and done["event"] == "done", events
    # The job imported the package from the wheel on --py-files, as on Dataproc.
    assert wheel.name in start["module"], start["module"]
    batches = [e for e in events if e["event"] == "batch"]
    assert len(batches) >= 2 and done["batches"] == len(batches)
    assert done["messages"] >= report.published - report.duplicates and done["malformed"] == 0

    problems = compare_to_ground_truth(str(state_dir), sim.ground_truth(), spark_schemas(), primary_keys())
    assert problems == []
    assert {t: c["rows"] for t, c in done["tables"].items()} == {t: len(r) for t, r in sim.ground_truth().items()}


def test_streaming_job_bad_arguments_exit_2():
    res = subprocess.run([sys.executable, str(JOB), "--subscriptions", "x", "--checkpoint", "c", "--state-dir", "s",
                          "--option", "noequals"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr
