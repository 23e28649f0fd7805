#!/usr/bin/env bash
# Shared set-up for the README's commands: a virtualenv with the package and its test extras.
# Re-running is cheap: the install is skipped while setup.cfg (and the pyspark pin) is unchanged.
#   source examples/bootstrap.sh                       # .venv in the repo, pyspark as setup.cfg allows
#   PYSPARK_VERSION=4.0.5 source examples/bootstrap.sh # a cached venv with that pyspark
#                                                      # ($CRDB_PUBSUB_CACHE, default ~/.cache/crdb-pubsub)
# Sets PY to the venv's python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON_BIN="${PYTHON:-python3}"

"$PYTHON_BIN" - <<'PYCHECK'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"crdb-pubsub needs Python >= 3.11 (found {sys.version.split()[0]}); set PYTHON=/path/to/python3.11")
PYCHECK
if ! command -v java >/dev/null 2>&1; then
  echo "crdb-pubsub: Spark needs Java 17+ on PATH (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi

if [ -n "${PYSPARK_VERSION:-}" ]; then
  VENV="${CRDB_PUBSUB_CACHE:-$HOME/.cache/crdb-pubsub}/venv-pyspark-$PYSPARK_VERSION"
  EXTRA=("pyspark==$PYSPARK_VERSION")
else
  VENV="$ROOT/.venv"
  EXTRA=()
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.crdb_pubsub_installed"
WANT="$( (cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml"; echo "$ROOT ${PYSPARK_VERSION:-}") | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "==> installing crdb-pubsub ${PYSPARK_VERSION:+with pyspark $PYSPARK_VERSION }and its dependencies into $VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]" "${EXTRA[@]}"
  echo "$WANT" > "$STAMP"
fi
PY="$VENV/bin/python"
# Spark's Python workers must use the venv's interpreter, not python3 from PATH.
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
