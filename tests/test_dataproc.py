"""examples/dataproc/streaming_job.py run as Dataproc runs it: ``spark-submit`` with the built wheel
installed on the "nodes" (the guide's initialization action or container), on Spark's
``local-cluster[2,1,1024]`` master (two executor JVMs of their own), against the emulator, bounded with
``--available-now``; the source's ``stateDir`` and the Delta tables on ``gs://`` (the suite's Cloud
Storage test server), in both receiver modes.

Nothing reaches the driver or the executors but what a cluster gives them:

* the package comes from the wheel alone: the job's interpreter is a venv of its own that sees the
  suite's site-packages (the dependencies) and the wheel installed with ``--no-deps``, but not the
  editable install of ``crdb_pubsub`` (its ``.pth`` hook is never run there); why not
  ``--py-files``: :func:`cluster_python`;
* ``spark-submit`` gets an allowlisted environment (PATH, JAVA_HOME, LANG, a fresh HOME and cwd),
  ``PYTHONPATH`` empty for the executors' Python workers, ``SPARK_HOME`` a folder of its own (links to
  pyspark's ``bin``/``jars``) so that the executors' work folders land there; local-cluster's
  executor JVMs inherit the driver's environment, which therefore holds only what every Dataproc
  VM has: credentials, here ``STORAGE_EMULATOR_HOST`` (for the ``gs://`` stateDir) and
  ``GOOGLE_SERVICE_ACCOUNT`` (delta-rs pointed at the test server); the Pub/Sub emulator goes as
  the ``emulatorHost`` option, inside the reader's options as any option travels;
* the job's message ids are recorded per batch (``tests/dataproc_audited_job.py`` wraps the job's
  foreachBatch function, nothing else), so lost and duplicated messages are counted, not inferred
  from the Delta tables, which hide duplicates.

Delta on ``gs://`` goes through ``tests/gcs_front.py`` (the two XML API calls fake-gcs-server lacks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pyspark
import pytest

from conftest import publish_simulated
from crdb_pubsub.apply import compare_to_ground_truth
from crdb_pubsub.tools.simulator import primary_keys, spark_schemas

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# Spark 4.0/4.1 run Trigger.AvailableNow as one batch (docs/versions.md).
SINGLE_BATCH_AVAILABLE_NOW = tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2)
ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "dataproc" / "streaming_job.py"
AUDITED_JOB = Path(__file__).resolve().parent / "dataproc_audited_job.py"
PROJECT = "test-project"


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def delta_gcs(gcs_server, tmp_path_factory):
    """delta-rs pointed at the test server through ``gcs_front.XmlFront``: ``(storage_options, env)``,
    the same settings as ``storage_options`` (this process) and as environment (the job's)."""
    from gcs_front import delta_account

    with delta_account(gcs_server.endpoint, tmp_path_factory.mktemp("delta-gcs")) as account:
        yield {"google_service_account": str(account)}, {"GOOGLE_SERVICE_ACCOUNT": str(account)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (whl,) = out.glob("crdb_pubsub-*.whl")
    return whl


def test_the_wheel_carries_every_module(wheel):
    """Dataproc imports the package from the wheel alone. The suite's editable install finds every
    folder whatever setup.cfg lists, so a sub-package the wheel leaves out shows only here."""
    import zipfile

    folders = {
        "connector/autoregister": "pyspark_crdb_pubsub",
        "connector": "crdb_pubsub",
        "emulator": "crdb_pubsub/emulator",
    }
    want = set()
    for path in (ROOT / "connector").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        src = next(f for f in folders if rel.startswith(f + "/"))
        want.add(folders[src] + rel[len(src) :])
    want |= {"crdb_pubsub/emulator/" + p.name for p in (ROOT / "emulator").glob("*.py")}
    with zipfile.ZipFile(wheel) as whl:
        have = {n for n in whl.namelist() if n.endswith(".py")}
    assert sorted(want - have) == []


class _Watch(threading.Thread):
    """Lists the stateDir's ``v3/`` every 0.2 s while the job runs: every key ever seen."""

    def __init__(self, url: str) -> None:
        super().__init__(name="state-dir-watch", daemon=True)
        from crdb_pubsub.source.storage import open_storage

        self.storage, self.seen, self.done = open_storage(url), set(), threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.seen.update(self.storage.list("v3/"))


@pytest.fixture(scope="module")
def cluster_python(tmp_path_factory, wheel) -> Path:
    """A node's interpreter: a venv whose site-packages holds one ``.pth`` line naming the suite's
    site-packages (the dependencies; a path added that way is not a site folder, so its ``.pth``
    files, the editable install's import hook, are never run) and the built wheel installed with
    ``--no-deps``, as the guide's initialization action (or container) installs it on every node.

    ``--py-files`` is not enough: pyspark puts an entry on its Python workers' path only for
    ``.zip``/``.egg``/``.jar`` names, and the streaming source's driver-side runner process
    (``python_streaming_source_runner``) gets none of them whatever the name: measured here, a
    ``.whl`` fails at ``load()`` and the same wheel renamed ``.zip`` at the first batch, both with
    ``No module named 'crdb_pubsub'``."""
    folder = tmp_path_factory.mktemp("cluster-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "suite-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
        check=True,
        timeout=300,
    )
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import sys, importlib.util as u; import pyspark, pyarrow, deltalake, google.cloud.pubsub, google.cloud.storage; "
            "print(u.find_spec('crdb_pubsub').origin.startswith(sys.prefix))",
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert probe.stdout.strip() == "True", (probe.stdout, probe.stderr[-2000:])
    return python


@pytest.fixture(scope="module")
def spark_home(tmp_path_factory) -> Path:
    """A SPARK_HOME of the test's own (links to the pyspark package's folders): local-cluster's
    workers put the executors' work folders (their logs, the files Spark ships) under it."""
    home = tmp_path_factory.mktemp("spark-home")
    for name in ("bin", "jars", "sbin", "python", "conf"):
        if (_pyspark_home() / name).exists():
            (home / name).symlink_to(_pyspark_home() / name)
    return home


def _cluster_env(spark_home: Path, home: Path, extra: dict[str, str]) -> dict[str, str]:
    keep = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=str(home), SPARK_HOME=str(spark_home), **extra)
    return env


def _why(stderr: str) -> str:
    """The first Python traceback of a failed job's stderr (Spark's log hides it), and the tail."""
    at = stderr.find("Traceback (most recent call last)")
    first = stderr[at : at + 4000] if at >= 0 else ""
    errors = [line for line in stderr.splitlines() if " ERROR " in line or "Error:" in line][:20]
    return "\n".join([first, *errors, "...", stderr[-2000:]])


def _tally(published: list[str], delivered: list[str]) -> tuple[int, int, int]:
    """(lost, duplicated, unexpected): published ids never delivered, deliveries beyond the first of
    an id, ids delivered that were never published."""
    seen: dict[str, int] = {}
    for i in delivered:
        seen[i] = seen.get(i, 0) + 1
    want = set(published)
    return len(want - set(seen)), sum(n - 1 for n in seen.values()), len(set(seen) - want)


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_streaming_job_on_local_cluster_with_the_wheel(
    gcs_server,
    delta_gcs,
    emulator_host,
    cluster_python,
    spark_home,
    gcs_state_url: str,
    tmp_path: Path,
    receiver: str,
):
    """The job as Dataproc runs it, with either receiver, on two executor JVMs: the source's stateDir
    and the Delta tables on gs:// (the checkpoint stays on the driver's disk: Spark reaches gs://
    through the Cloud Storage connector's jar, which this machine can't fetch); lost 0, duplicated 0."""
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    storage_options, delta_env = delta_gcs
    sim = ChangefeedSimulator(seed=5, updated=True, diff=True, resolved_every=50)
    stem = f"dp-{tmp_path.name[-12:]}".replace("_", "-")
    subs, report = publish_simulated(emulator_host, PROJECT, sim, stem, 600, shuffle_window=20, duplicate_fraction=0.03)
    published = [i for ids in report.message_ids.values() for i in ids]

    # One bucket, one prefix per query, as the guide recommends: the ledger and the tables side by side.
    source_state, tables = f"{gcs_state_url}/source-state", f"{gcs_state_url}/tables"
    cwd, home, ids_dir = tmp_path / "cwd", tmp_path / "home", tmp_path / "ids"
    cwd.mkdir()
    home.mkdir()
    env = _cluster_env(spark_home, home, {"STORAGE_EMULATOR_HOST": gcs_server.endpoint, **delta_env})
    serial = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # three JVMs on two cores (tests/stream_job.py)
    conf = {
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": str(cluster_python),
        "spark.pyspark.driver.python": str(cluster_python),
        "spark.executorEnv.PYTHONPATH": "",
        "spark.executor.memory": "512m",
        "spark.driver.extraJavaOptions": serial,
        "spark.executor.extraJavaOptions": serial,
    }
    cmd = [str(spark_home / "bin" / "spark-submit"), "--master", "local-cluster[2,1,1024]"]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [
        "--py-files",
        str(JOB),
        str(AUDITED_JOB),
        "--ids-dir",
        str(ids_dir),
        "--subscriptions",
        ",".join(subs),
        "--emulator-host",
        emulator_host,
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--tables",
        tables,
        "--simulator-schemas",
        "--available-now",
        "--option",
        "maxMessagesPerTrigger=400",
        "--option",
        "ackDeadlineSeconds=30",
        "--option",
        f"stateDir={source_state}",
        "--option",
        f"receiver={receiver}",
    ]
    if receiver == "executors":
        cmd += ["--option", "numPartitions=2"]
    watch = _Watch(source_state)
    watch.start()
    t0 = time.monotonic()
    runs: list[list[dict]] = []
    try:
        # Spark 4.2+ drains the backlog in one AvailableNow run. On 4.0/4.1 (Dataproc's image 3.0
        # and Serverless runtime 3.0) a run is a single batch, acknowledged by the next run through
        # the stateDir: the job is submitted again until a run reads nothing (as a user re-submits).
        for _ in range(1 if not SINGLE_BATCH_AVAILABLE_NOW else 6):
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env, cwd=cwd)
            n = len(runs)
            (tmp_path / f"job-{n}.stderr").write_text(res.stderr)
            (tmp_path / f"job-{n}.stdout").write_text(res.stdout)
            assert res.returncode == 0, res.stdout[-3000:] + _why(res.stderr)
            runs.append([json.loads(line) for line in res.stdout.splitlines() if line.startswith('{"event"')])
            if runs[-1][-1].get("messages") == 0:
                break
    finally:
        watch.done.set()
        watch.join()
    took = time.monotonic() - t0
    batches: list[dict] = []
    done: dict = {"messages": 0, "malformed": 0, "tables": {}}
    for events in runs:
        start, end = events[0], events[-1]
        assert start["event"] == "start" and end["event"] == "done", events
        # The job imported the package installed from the wheel on the "node", not the checkout.
        assert start["module"].startswith(str(cluster_python.parents[1])), start["module"]
        run_batches = [e for e in events if e["event"] == "batch"]
        assert end["batches"] == len(run_batches)
        batches += run_batches
        done["messages"] += end["messages"]
        done["malformed"] += end["malformed"]
        done["tables"].update(end["tables"])
    assert len(batches) >= 2 and (not SINGLE_BATCH_AVAILABLE_NOW or runs[-1][-1]["messages"] == 0), len(runs)
    # Two executor JVMs ran tasks: their work folders are under the test's SPARK_HOME.
    apps = list((spark_home / "work").glob("app-*"))
    executors = {p.name for app in apps for p in app.iterdir() if p.is_dir()}

    delivered = [i for p in sorted(ids_dir.glob("*.ids")) for i in p.read_text().split("\n") if i]
    lost, duplicated, unexpected = _tally(published, delivered)
    print(
        json.dumps(
            {
                "test": f"dataproc-local-cluster-{receiver}",
                "published": len(published),
                "delivered": len(delivered),
                "lost": lost,
                "duplicated": duplicated,
                "batches": len(batches),
                "executor_work_dirs": len(executors),
                "job_seconds": round(took, 1),
            }
        )
    )
    assert unexpected == 0 and lost == 0 and duplicated == 0, (lost, duplicated, unexpected)
    assert len(executors) >= 2, f"executor work folders: {sorted(executors)}"
    assert done["malformed"] == 0 and done["messages"] == len(published)

    # The Delta tables are on gs:// and hold the simulator's ground truth.
    problems = compare_to_ground_truth(
        tables, sim.ground_truth(), spark_schemas(), primary_keys(), storage_options=storage_options
    )
    assert problems == []
    assert {t: c["rows"] for t, c in done["tables"].items()} == {t: len(r) for t, r in sim.ground_truth().items()}
    from crdb_pubsub.source.storage import open_storage

    objects = open_storage(tables).list("")
    assert {k.split("/")[0] for k in objects if "/_delta_log/" in k} == set(done["tables"]), objects[:20]

    # The source's ledger went through the bucket: what a batch records before Spark learns its
    # offset (driver: the batch; executors: the plan and the tasks' slices), and what stays after.
    after = set(open_storage(source_state).list("v3/"))
    seen = watch.seen | after
    recorded = ("v3/batches/",) if receiver == "driver" else ("v3/plans/", "v3/slices/")
    for prefix in recorded:
        assert any(k.startswith(prefix) for k in seen), (prefix, sorted(seen)[:20])
    assert {"v3/META.json", "v3/LOCK"} <= after and any(k.startswith("v3/acked/") for k in after), sorted(after)


def test_streaming_job_bad_arguments_exit_2():
    res = subprocess.run(
        [
            sys.executable,
            str(JOB),
            "--subscriptions",
            "x",
            "--checkpoint",
            "c",
            "--tables",
            "s",
            "--option",
            "noequals",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr


@pytest.mark.parametrize(
    "state_dir", ["gs://b/cdc/checkpoint", "gs://b/cdc/checkpoint/state/", "gs://b/cdc", "gs://b/cdc/tables/source"]
)
def test_streaming_job_refuses_a_source_state_dir_that_overlaps(state_dir):
    """The source's stateDir needs a prefix of its own: not the checkpoint's, nor the Delta tables'."""
    res = subprocess.run(
        [
            sys.executable,
            str(JOB),
            "--subscriptions",
            "x",
            "--checkpoint",
            "gs://b/cdc/checkpoint",
            "--tables",
            "gs://b/cdc/tables",
            "--option",
            f"stateDir={state_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "prefix of its own" in res.stderr, res.stderr


def test_streaming_job_still_takes_the_tables_by_their_former_flag():
    """``--state-dir`` named the Delta tables before ``--tables``; commands written with it still run."""
    res = subprocess.run(
        [sys.executable, str(JOB), "--subscriptions", "x", "--checkpoint", "gs://b/cdc/checkpoint"]
        + ["--state-dir", "gs://b/cdc/tables", "--option", "stateDir=gs://b/cdc/tables/source"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "overlaps --tables gs://b/cdc/tables" in res.stderr, res.stderr
