#!/usr/bin/env bash
# Builds a wheelhouse: the crdb-pubsub wheel with its `apply` extra and every dependency, as wheels
# for the cluster's Python and platform, so that the cluster installs with no package index
# (pip install --no-index --find-links; install-crdb-pubsub.sh does). Run it from a clone:
#
#   bash examples/dataproc/build-wheelhouse.sh                    # -> dist/wheelhouse/, for image 3.0
#   bash examples/dataproc/build-wheelhouse.sh OUT 3.11           # another folder, another Python
#
# The target is Python 3.12 (Dataproc image 3.0 and Serverless runtime 3.0) on x86_64 Linux with
# glibc 2.17 or later; set CRDB_PUBSUB_PLATFORMS (pip --platform tags, space-separated) for an Arm
# cluster, e.g. "manylinux_2_28_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64". pip matches
# --platform tags literally, so the list names each manylinux tag a dependency may be published with.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$ROOT/dist/wheelhouse}"
PY_VERSION="${2:-3.12}"
read -r -a PLATFORMS <<<"${CRDB_PUBSUB_PLATFORMS:-manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64}"
PYTHON="${PYTHON:-python3}"

mkdir -p "$OUT"
"$PYTHON" -m pip wheel "$ROOT" --no-deps --quiet -w "$OUT"
wheel="$(ls "$OUT"/crdb_pubsub-*-py3-none-any.whl | sort -V | tail -n 1)"
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
"$PYTHON" -m pip download --quiet --only-binary=:all: --implementation cp --python-version "$PY_VERSION" \
  "${platform_args[@]}" --dest "$OUT" "$wheel[apply]"
echo "wheelhouse for Python $PY_VERSION (${PLATFORMS[*]}): $OUT ($(ls "$OUT" | wc -l) wheels)"
