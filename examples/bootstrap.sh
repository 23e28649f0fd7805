#!/usr/bin/env bash
# Shared set-up for the README's commands: a virtualenv with the package and its test extras.
# Re-running is cheap: the install is skipped while setup.cfg (and the pyspark pin) is unchanged.
#   source examples/bootstrap.sh                       # .venv in the repo, pyspark as setup.cfg allows
#   PYSPARK_VERSION=4.0.5 source examples/bootstrap.sh # a cached venv with that pyspark
#                                                      # ($CRDB_PUBSUB_CACHE, default ~/.cache/crdb-pubsub),
#                                                      # named by both versions: venv-pyspark-4.0.5-py3.11
#   PYSPARK_VERSION=4.0.0 CRDB_PUBSUB_PYTHON_VERSION=3.12 source examples/bootstrap.sh
#                                                      # ... built with python3.12 (Serverless runtime 3.0's)
# The interpreter: $PYTHON (a path or command), else python$CRDB_PUBSUB_PYTHON_VERSION (on PATH, else
# pyenv's newest installed X.Y.*), else python3. A Python asked for by version that can't be run
# fails in one line, never falls back to another.
# Sets PY to the venv's python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${PYTHON:-}" ] || [ -z "${CRDB_PUBSUB_PYTHON_VERSION:-}" ]; then
  PYTHON_BIN="${PYTHON:-python3}"
else
  want_py="$CRDB_PUBSUB_PYTHON_VERSION"
  PYTHON_BIN=""
  # A pyenv shim for python3.12 is on PATH even when 3.12 is not the active version, and then fails
  # when run: try running it, then pyenv's own copies.
  for cand in "python$want_py" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$want_py".*/bin/"python$want_py" 2>/dev/null | sort -V -r); do
    if "$cand" -c "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$want_py')" >/dev/null 2>&1; then
      PYTHON_BIN="$(command -v "$cand")"
      break
    fi
  done
  if [ -z "$PYTHON_BIN" ]; then
    echo "crdb-pubsub: Python $want_py was asked for (CRDB_PUBSUB_PYTHON_VERSION / --python) and none runs here: install it (e.g. pyenv install $want_py) or set PYTHON=/path/to/python$want_py" >&2
    exit 1
  fi
fi

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
  py_xy="$("$PYTHON_BIN" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  VENV="${CRDB_PUBSUB_CACHE:-$HOME/.cache/crdb-pubsub}/venv-pyspark-$PYSPARK_VERSION-py$py_xy"
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
