"""The Dataproc install as a cluster without internet access runs it: examples/dataproc/build-wheelhouse.sh
builds the wheelhouse here, and examples/dataproc/install-crdb-pubsub.sh installs from it with the
network refused, into the interpreter it finds the way it finds it on a node.

The node is a temporary folder shaped as an image 3.0 node: Spark's configuration folder holding
a ``spark-env.sh`` (found through ``SPARK_CONF_DIR``, as Spark finds it) whose ``PYSPARK_PYTHON``
names an interpreter outside ``/opt/conda`` (image 3.0 ships Python through Pixi, not Conda), a
fresh virtualenv made without pip. The network is refused for pip: no configuration file, an index
and a proxy on a closed loopback port; a control shows that this pip can reach nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DATAPROC = ROOT / "examples" / "dataproc"
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
PY_XY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and "proxy" not in k.lower()}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=f"{CLOSED}/simple",
        HTTP_PROXY=CLOSED,
        HTTPS_PROXY=CLOSED,
        http_proxy=CLOSED,
        https_proxy=CLOSED,
        PIP_RETRIES="0",
        PIP_TIMEOUT="5",
        PIP_NO_INPUT="1",
    )
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """The guide's wheelhouse, for this machine's Python (the guide's default is image 3.0's 3.12)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    done = subprocess.run(
        ["bash", str(DATAPROC / "build-wheelhouse.sh"), str(out), PY_XY],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    names = {p.name.split("-")[0].lower() for p in out.glob("*.whl")}
    assert {"crdb_pubsub", "deltalake", "pyarrow", "google_cloud_pubsub", "grpcio"} <= names, names
    return out


def _node(tmp: Path, spark_env: str | None) -> Path:
    """A node's folders: ``etc/spark/conf`` (with ``spark_env`` as its spark-env.sh, if given)."""
    conf = tmp / "etc" / "spark" / "conf"
    conf.mkdir(parents=True)
    if spark_env is not None:
        (conf / "spark-env.sh").write_text(spark_env)
    return conf


def _spark_env(python: Path) -> str:
    # Lines of the kind Dataproc writes: defaults, a command that is not on this PATH, PYSPARK_PYTHON.
    return (
        "export SPARK_HOME=${SPARK_HOME:-/usr/lib/spark}\n"
        "export SPARK_DIST_CLASSPATH=$(hadoop classpath)\n"
        f"export PYSPARK_PYTHON=${{PYSPARK_PYTHON:-{python}}}\n"
    )


def _install(*args: str, conf: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(DATAPROC / "install-crdb-pubsub.sh"), *args],
        env=dict(env or os.environ, SPARK_CONF_DIR=str(conf)),
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_wheelhouse_installs_with_the_network_refused(wheelhouse, tmp_path):
    python_home = tmp_path / "opt" / "pixi" / "envs" / "spark"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(python_home)], check=True, timeout=300)
    python = python_home / "bin" / "python"
    conf = _node(tmp_path, _spark_env(python))
    env = _offline_env()

    control = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "control"), "six"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert control.returncode != 0, "pip reached an index: the network is not refused for this test"

    done = _install("--from", str(wheelhouse), conf=conf, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"the interpreter: {python} (Python {PY_XY}." in done.stderr
    assert f"PYSPARK_PYTHON in {conf}/spark-env.sh" in done.stderr
    assert "crdb-pubsub: installed 0.1.0" in done.stdout
    check = subprocess.run(
        [str(python), "-c", "import crdb_pubsub, deltalake, pyarrow, google.cloud.pubsub_v1, google.cloud.storage"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr[-2000:]


def test_without_pyspark_python_it_says_where_it_looked(tmp_path):
    conf = _node(tmp_path, "export SPARK_HOME=/usr/lib/spark\n")
    done = _install("--print-python", conf=conf)
    assert done.returncode == 0, done.stderr
    if Path("/opt/conda/default/bin/python").exists():
        pytest.skip("this machine has Conda's Dataproc path: the python3 fallback is not reached")
    assert (
        f"python3 on PATH (no PYSPARK_PYTHON in {conf}/spark-env.sh, no /opt/conda/default/bin/python)" in done.stderr
    )


def test_an_interpreter_that_does_not_run_fails_in_one_line(tmp_path):
    conf = _node(tmp_path, _spark_env(tmp_path / "opt" / "gone" / "bin" / "python"))
    done = _install("--print-python", conf=conf)
    assert done.returncode == 1
    assert (
        f"the interpreter {tmp_path}/opt/gone/bin/python (from PYSPARK_PYTHON in {conf}/spark-env.sh) does not run"
        in (done.stderr)
    )
    assert "crdb-pubsub-python" in done.stderr


def test_an_old_python_is_refused_naming_its_version(tmp_path):
    old = tmp_path / "opt" / "old" / "bin" / "python"
    old.parent.mkdir(parents=True)
    # Answers its version as a 3.9 would, and fails the version check as one would.
    old.write_text('#!/bin/sh\ncase "$2" in *print*) echo 3.9.18 ;; *) exit 1 ;; esac\n')
    old.chmod(0o755)
    conf = _node(tmp_path, _spark_env(old))
    done = _install("--print-python", conf=conf)
    assert done.returncode == 1
    assert "is Python 3.9.18; crdb-pubsub needs 3.11 or later" in done.stderr


def test_a_bad_argument_says_which_are_accepted(tmp_path):
    done = _install("--frmo", "x", conf=_node(tmp_path, None))
    assert done.returncode == 2 and "--print-python; --from DIR" in done.stderr
