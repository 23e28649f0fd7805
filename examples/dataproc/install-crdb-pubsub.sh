#!/usr/bin/env bash
# Dataproc initialization action: installs crdb-pubsub with its `apply` extra, on every node, into
# the Python that PySpark runs, from a wheelhouse in Cloud Storage and never from a package index.
# Clusters of image 2.2 and later have internal IP addresses only: they reach Google's APIs
# (Private Google Access, which Dataproc turns on for the subnet) but not PyPI, unless Cloud NAT
# gives them a way out. Build the wheelhouse with build-wheelhouse.sh (examples/dataproc/README.md).
#
# Cluster metadata:
#   crdb-pubsub-wheelhouse=gs://BUCKET/PREFIX/wheelhouse    required: the folder of wheels
#   crdb-pubsub-python=/path/to/python                       optional: the interpreter, not found
#
# By hand, on a node or in a custom image's build:
#   bash install-crdb-pubsub.sh --print-python     the interpreter it would install into, and why
#   bash install-crdb-pubsub.sh --from DIR         install from a wheelhouse folder on this machine
#
# The package must be installed on the nodes: on --py-files alone the streaming source's
# driver-side Python process can't import it (examples/dataproc/README.md, step 2).
set -euo pipefail

MIN_PYTHON="3.11"
SPARK_ENV="${SPARK_CONF_DIR:-/etc/spark/conf}/spark-env.sh"
METADATA=/usr/share/google/get_metadata_value
# Where Dataproc's Conda-based images (2.x) keep PySpark's interpreter, for an image whose
# spark-env.sh names none.
CONDA_PYTHON=/opt/conda/default/bin/python

say() { echo "crdb-pubsub: $*" >&2; }

metadata() {  # the cluster metadata value $1, empty when unset (or not on a Dataproc VM)
  if [ -x "$METADATA" ]; then "$METADATA" "attributes/$1" 2>/dev/null || true; fi
}

# The interpreter PySpark runs, as "PATH<TAB>why": what the cluster metadata names; else what
# Spark itself reads (PYSPARK_PYTHON, set in spark-env.sh: Spark sources that file at start);
# else Conda's on images that have it; else python3 on PATH, which Spark runs when PYSPARK_PYTHON
# is unset.
find_python() {
  local given from_env
  given="$(metadata crdb-pubsub-python)"
  if [ -n "$given" ]; then
    printf '%s\t%s\n' "$given" "cluster metadata crdb-pubsub-python"
    return
  fi
  if [ -r "$SPARK_ENV" ]; then
    from_env="$(env -i PATH=/usr/bin:/bin HOME=/root timeout 30 bash -c \
      'set -a; . "$1" >/dev/null 2>&1 || true; printf "%s" "${PYSPARK_PYTHON:-}"' _ "$SPARK_ENV" || true)"
    if [ -n "$from_env" ]; then
      printf '%s\t%s\n' "$from_env" "PYSPARK_PYTHON in $SPARK_ENV"
      return
    fi
  fi
  if [ -x "$CONDA_PYTHON" ]; then
    printf '%s\t%s\n' "$CONDA_PYTHON" "Conda's default environment ($SPARK_ENV names no PYSPARK_PYTHON)"
    return
  fi
  if command -v python3 >/dev/null 2>&1; then
    printf '%s\t%s\n' "$(command -v python3)" "python3 on PATH (no PYSPARK_PYTHON in $SPARK_ENV, no $CONDA_PYTHON)"
    return
  fi
  return 1
}

# The interpreter, checked: it runs and is recent enough. Prints its path; fails saying what was tried.
checked_python() {
  local found python why version
  if ! found="$(find_python)"; then
    say "no Python found: cluster metadata crdb-pubsub-python is unset, $SPARK_ENV names no PYSPARK_PYTHON, $CONDA_PYTHON does not exist and no python3 is on PATH. Set crdb-pubsub-python to the interpreter PySpark runs."
    return 1
  fi
  python="${found%%$'\t'*}"
  why="${found#*$'\t'}"
  if ! version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"; then
    say "the interpreter $python (from $why) does not run. Set the cluster metadata crdb-pubsub-python to the interpreter PySpark runs."
    return 1
  fi
  if ! "$python" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$MIN_PYTHON'.split('.'))))"; then
    say "the interpreter $python (from $why) is Python $version; crdb-pubsub needs $MIN_PYTHON or later (Dataproc image 3.0 ships 3.12)."
    return 1
  fi
  say "the interpreter: $python (Python $version), from $why"
  printf '%s\n' "$python"
}

install_from() {  # $1: a folder of wheels
  local python
  python="$(checked_python)"
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    say "$python has no pip; bootstrapping it from the interpreter's own copy (ensurepip, offline)"
    "$python" -m ensurepip --upgrade >/dev/null
  fi
  "$python" -m pip install --no-index --find-links "$1" --no-cache-dir --disable-pip-version-check 'crdb-pubsub[apply]'
  "$python" -c 'import crdb_pubsub, deltalake; print("crdb-pubsub: installed", crdb_pubsub.__version__, "at", crdb_pubsub.__file__)'
}

case "${1:-}" in
  --print-python)
    checked_python
    ;;
  --from)
    [ -d "${2:-}" ] || { say "--from needs a folder of wheels (build-wheelhouse.sh writes one)"; exit 2; }
    install_from "$2"
    ;;
  "")
    url="$(metadata crdb-pubsub-wheelhouse)"
    [ -n "$url" ] || { say "the cluster metadata crdb-pubsub-wheelhouse (gs://BUCKET/PREFIX/wheelhouse) is not set"; exit 1; }
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    gcloud storage cp "${url%/}/*" "$work/"
    install_from "$work"
    ;;
  *)
    say "unknown argument $1 (none: the initialization action; --print-python; --from DIR)"
    exit 2
    ;;
esac
