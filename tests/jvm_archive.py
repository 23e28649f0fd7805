"""Spark's driver JVMs start from a class-data archive (the JDK's AppCDS), built once per Spark.

The suite starts Spark drivers by the dozen (each fault scenario restarts its job three or four
times, the smoke runs do the same on every Spark), and on two cores a driver's start-up is mostly
the JVM loading and verifying Spark's ~15,000 classes: measured here (JDK 17, pyspark 4.3), a
session took 8.5 s to start and 4.6 s to run its first job; from the archive, 3.8 s and 1.8 s.
Nothing about what the tests check changes: the archive holds class metadata only, and a JVM that
cannot use it (not built yet, another JDK, other jars) starts without class sharing, a second or
so slower than the JDK's default.

``python tests/jvm_archive.py`` builds the archive for this venv's pyspark under
``~/.cache/crdb-pubsub`` unless it is there (~1 min); a run that starts Spark without it builds it
in the background, its first drivers starting without; ``CRDB_PUBSUB_JVM_ARCHIVE=0`` turns it off.
Every driver started from the test process or its children gets the archive through
``SPARK_SUBMIT_OPTS`` (the launcher adds it to the driver JVM's options); a job that starts executor
JVMs of its own (``local-cluster``) adds ``CRDB_PUBSUB_JVM_ARCHIVE_OPTS`` to theirs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Without the log options a JVM that cannot map the archive says so on its stdout, which some tests read.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def enabled() -> bool:
    return os.environ.get("CRDB_PUBSUB_JVM_ARCHIVE", "1") != "0"


def archive_path() -> Path:
    """Where this venv's pyspark and this JDK keep their archive (the key: pyspark's jars, ``java -version``)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    listing = "\n".join(sorted(f"{p.name}:{p.stat().st_size}" for p in jars.glob("*.jar")))
    key = hashlib.sha256(f"{jars.resolve()}\n{java}\n{listing}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("CRDB_PUBSUB_CACHE", Path.home() / ".cache" / "crdb-pubsub"))
    return cache / "jvm-archive" / f"spark-{pyspark.__version__}-{key}.jsa"


def use(path: Path) -> None:
    """Point every Spark driver started from now on (here and in child processes) at ``path``."""
    flags = f"-XX:SharedArchiveFile={path} {_QUIET}"
    os.environ["CRDB_PUBSUB_JVM_ARCHIVE_OPTS"] = flags
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if flags not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {flags}".strip()


def build_in_background(path: Path) -> subprocess.Popen:
    """Build ``path`` in a process of its own; JVMs started before it is there start without it."""
    return subprocess.Popen([sys.executable, __file__, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build(path: Path, timeout: float = 300) -> bool:
    """Run a small Spark workload whose JVM writes the classes it loaded to ``path`` at exit; the
    file appears whole or not at all (written beside it, then renamed). Whether it was built."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob("*.jsa.tmp"):  # a build killed before it could clean up
        if time.time() - stale.stat().st_mtime > 3600:
            stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".jsa.tmp")
    os.close(fd)
    os.unlink(tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "CRDB_PUBSUB_JVM_ARCHIVE_OPTS")}
    env["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={tmp} {_QUIET}"
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--workload"], env=env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0 or not os.path.exists(tmp):
            print(f"jvm_archive: not built ({done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
            return False
        os.replace(tmp, path)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _workload() -> None:
    """What the suite's drivers do, in small: a Python streaming source read with AvailableNow into
    parquet with a checkpoint, a foreachBatch, a batch read back."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Numbers(DataSource):
        @classmethod
        def name(cls) -> str:
            return "numbers"

        def schema(self) -> str:
            return "id long, body binary"

        def streamReader(self, schema):
            return NumbersReader()

    class NumbersReader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"n": 0}

        def latestOffset(self) -> dict:
            return {"n": 100}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition(i) for i in range(2)]

        def read(self, partition):
            for i in range(50):
                yield (i, b"x")

        def commit(self, end: dict) -> None:
            pass

    with tempfile.TemporaryDirectory() as d:
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.dataSource.register(Numbers)
        df = spark.readStream.format("numbers").load()
        q = (
            df.writeStream.format("parquet")
            .option("path", f"{d}/out")
            .option("checkpointLocation", f"{d}/chk")
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        q = (
            df.writeStream.foreachBatch(lambda b, i: b.count())
            .option("checkpointLocation", f"{d}/chk2")
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        spark.read.parquet(f"{d}/out").groupBy("id").count().collect()
        spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes: wait for that.
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=120)


if __name__ == "__main__":
    if sys.argv[1:] == ["--workload"]:
        _workload()
    else:
        target = Path(sys.argv[1]) if sys.argv[1:] else archive_path()
        if not target.exists():
            print(f"{'built' if build(target) else 'NOT built'}: {target}")
