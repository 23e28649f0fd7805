#!/usr/bin/env bash
# Shared set-up for the README's two commands: a virtualenv in .venv with the package and its test
# extras installed. Re-running is cheap: the install is skipped while setup.cfg is unchanged.
# Usage: source examples/bootstrap.sh   (sets PY to the venv's python)
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

VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.crdb_pubsub_installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "==> installing crdb-pubsub and its dependencies into $VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  echo "$WANT" > "$STAMP"
fi
PY="$VENV/bin/python"
# Spark's Python workers must use the venv's interpreter, not python3 from PATH.
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
