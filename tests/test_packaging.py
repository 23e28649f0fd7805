"""What the installed package declares: the dependencies Spark's Python workers need."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement


def test_pyarrow_as_spark_4_2_needs_it():
    """Spark 4.2+ declares pyarrow>=18 for its SQL workers; a lower floor would let pip pick a
    pyarrow that the data source worker rejects (issue 14, item 7)."""
    reqs = {r.name: r for r in map(Requirement, requires("crdb-pubsub") or []) if r.marker is None}
    assert "pyarrow" in reqs
    assert not reqs["pyarrow"].specifier.contains("17.0.0") and reqs["pyarrow"].specifier.contains("18.0.0")


_NO_REGISTER_JOB = r"""
import sys
from pyspark.sql import SparkSession

host, sub, out = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").appName("no-register")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
# Nothing from crdb_pubsub is imported or registered here: Spark finds pyspark_crdb_pubsub itself.
q = (spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", host)
     .load().writeStream.format("parquet").option("path", out + "/data")
     .option("checkpointLocation", out + "/chk").trigger(availableNow=True).start())
q.awaitTermination(240)
print("ROWS", spark.read.parquet(out + "/data").count())
spark.stop()
"""


@pytest.mark.integration
def test_format_works_without_register_in_a_fresh_driver(emulator_host, make_subscription, publish, tmp_path):
    """Installed (not editable: Spark's lookup lists modules on sys.path), a fresh driver process
    reads ``format("crdb_pubsub")`` with nothing imported or registered (issue 14, item 2)."""
    root = Path(__file__).resolve().parent.parent
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(root)],
        check=True,
        timeout=300,
    )
    assert (target / "pyspark_crdb_pubsub" / "__init__.py").exists()
    topic, sub = make_subscription()
    ids = publish(topic, [b'{"resolved":"1.0000000000"}'] * 25)
    env = {
        **os.environ,
        "PYTHONPATH": str(target),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    script = tmp_path / "job.py"
    script.write_text(_NO_REGISTER_JOB)
    # -I is too strict (it drops the venv's site-packages); -s keeps user site out, and the job runs
    # outside the repository so that nothing resolves through the editable install's sources.
    done = subprocess.run(
        [sys.executable, "-s", str(script), emulator_host, sub, str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"ROWS {len(ids)}" in done.stdout
