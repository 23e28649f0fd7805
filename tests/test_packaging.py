"""What the installed package declares: the dependencies Spark's Python workers need, and no Spark.

The wheel, as built, carries no dependency on pyspark: installed onto a cluster, whose Spark is no
pip package, it must not bring a second one (issue 31). A fresh virtualenv shows what pip really
resolves, and that without pyspark what needs Spark fails with one line.
"""

from __future__ import annotations

import email
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
# How a user without Spark 4 is told to get it: the end of each of the one-line errors below.
HOW = (
    "pip install 'pyspark>=4.0,<5', or run where Spark 4 is installed (e.g. Dataproc image 3.0, Serverless runtime 3.0)"
)
NO_SPARK = f"ImportError: crdb-pubsub needs pyspark >= 4.0, and none is installed here: {HOW}"


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


# ----------------------------------------------------------------------------- the wheel, as built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", str(ROOT)]
        + ["-w", str(out)],
        check=True,
        timeout=300,
    )
    (whl,) = out.glob("crdb_pubsub-*.whl")
    return whl


def _metadata(whl: Path) -> email.message.Message:
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_string(z.read(name).decode())


def test_the_wheel_requires_no_spark(wheel):
    """pyspark only under extras: ``spark`` (a machine without Spark), ``connect`` and ``test``."""
    reqs = [Requirement(r) for r in _metadata(wheel).get_all("Requires-Dist")]
    spark = [r for r in reqs if r.name == "pyspark"]
    assert spark and all(r.marker is not None for r in spark), [str(r) for r in spark]
    by_extra = {e for r in spark for e in ("spark", "connect", "test") if r.marker.evaluate({"extra": e})}
    assert by_extra == {"spark", "connect", "test"}
    (plain,) = [r for r in spark if r.marker.evaluate({"extra": "spark"})]
    assert not plain.extras and plain.specifier.contains("4.0.0") and not plain.specifier.contains("3.5.1")


def test_the_index_page_and_the_release_basics(wheel):
    """The README as the package index shows it links nowhere relative; LICENSE, URLs, classifiers."""
    meta = _metadata(wheel)
    body = meta.get_payload()
    targets = re.findall(r"\]\s?\(([^)\s]+)\)", body)
    assert len(targets) > 10
    assert [t for t in targets if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", t)] == []
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Source", "Documentation", "Changelog", "Issues"}
    assert all(u.startswith(meta["Home-page"]) for u in urls.values())
    assert meta["License"] == "Apache-2.0"
    with zipfile.ZipFile(wheel) as z:
        (lic,) = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        text = z.read(lic).decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    # The Pythons CI runs the suite on (.ci/run, tests/versions): add one here when CI runs it.
    pythons = sorted(c.rsplit(" :: ", 1)[1] for c in meta.get_all("Classifier") if re.search(r"Python :: 3\.\d+$", c))
    assert pythons == ["3.11", "3.12"]


@pytest.mark.parametrize(
    "fake, line",
    [
        (
            '__version__ = "3.5.1"\n',  # Dataproc image 2.2's Spark: no Python Data Source API
            "ImportError: crdb-pubsub needs pyspark >= 4.0 (its Python Data Source API), and found pyspark 3.5.1 at {dir}: "
            + HOW,
        ),
        (
            "import py4j_is_missing\n",  # a cluster's pyspark on the path without its py4j
            "ImportError: crdb-pubsub needs pyspark >= 4.0, and importing pyspark failed (No module named "
            "'py4j_is_missing'): " + HOW,
        ),
    ],
    ids=["spark-3.5", "broken"],
)
def test_an_unusable_spark_is_named_in_one_line(tmp_path, fake, line):
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text(fake)
    for snippet in ("import crdb_pubsub.source.datasource", "import crdb_pubsub; crdb_pubsub.decode_messages"):
        done = subprocess.run(
            [sys.executable, "-c", snippet],
            env={**os.environ, "PYTHONPATH": str(tmp_path)},  # before site-packages: shadows the real pyspark
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == line.format(dir=tmp_path / "pyspark"), done.stderr
        assert "During handling" not in done.stderr and "direct cause" not in done.stderr


@pytest.mark.integration
def test_a_fresh_venv_gets_no_spark_and_one_line_without_it(wheel, tmp_path):
    """``pip install <wheel>`` into a new virtualenv: pip resolves every dependency from the index
    (PyPI) as a user's install would, and pulls no pyspark; without it, every way into what needs
    Spark fails with one line; the package itself imports."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    t0 = time.monotonic()
    # This interpreter's pip installs into the new venv (--python): the same resolution, without
    # bootstrapping a pip into it.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", py, "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", py, "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "crdb-pubsub" in names and "pyarrow" in names and "google-cloud-pubsub" in names
    assert not names & {"pyspark", "py4j", "pyspark-client", "pyspark-connect"}, sorted(names)

    def run(snippet: str) -> subprocess.CompletedProcess:
        # -s: no user site; outside the repository, so nothing resolves through its sources.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        return subprocess.run(
            [py, "-s", "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    assert run("import importlib.util as u; assert u.find_spec('pyspark') is None").returncode == 0
    version = run("import crdb_pubsub; print(crdb_pubsub.__version__)")
    assert version.returncode == 0 and version.stdout.strip(), version.stderr
    for snippet in (
        "import crdb_pubsub.source.datasource",  # the data source module
        "import pyspark_crdb_pubsub",  # what Spark's lookup imports
        "import crdb_pubsub; crdb_pubsub.register(None)",
        "import crdb_pubsub; crdb_pubsub.decode_messages",
        "from crdb_pubsub import apply",
    ):
        done = run(snippet)
        assert done.returncode == 1, (snippet, done.stdout, done.stderr)
        assert done.stderr.strip().splitlines()[-1] == NO_SPARK, (snippet, done.stderr)
        assert "During handling" not in done.stderr and "direct cause" not in done.stderr, done.stderr
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file())
    print(
        f"\nwheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB; pip install into a fresh venv "
        f"{took:.1f} s, {len(names)} packages, {size / 2**20:.0f} MiB, no pyspark"
    )
