"""Spark Connect: the source registered through a Connect session runs on the server (issue 14,
item 1). The package must be installed where the server's Python workers run; here the local
Connect server (``SparkSession.builder.remote("local")``) shares this venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_JOB = r"""
import json, sys
from pyspark.sql import SparkSession
import crdb_pubsub

host, sub, out = sys.argv[1:4]
spark = SparkSession.builder.remote("local[2]").getOrCreate()
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
crdb_pubsub.register(spark)
q = (spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", host)
     .option("stateDir", out + "/state").load()
     .writeStream.format("parquet").option("path", out + "/data")
     .option("checkpointLocation", out + "/chk").trigger(availableNow=True).start())
q.awaitTermination(240)
ids = [r.message_id for r in spark.read.parquet(out + "/data").select("message_id").collect()]
print("IDS " + json.dumps(ids))
spark.stop()
"""


def test_available_now_drain_through_spark_connect(emulator_host, make_subscription, publish, tmp_path):
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(
        topic, [f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"c"}}'.encode() for i in range(300)]
    )
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(script), emulator_host, sub, str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("IDS "))[4:])
    lost, duplicated = len(set(ids) - set(got)), len(got) - len(set(got))
    assert (lost, duplicated) == (0, 0)
