#!/usr/bin/env bash
# The test command: sets up .venv (see examples/bootstrap.sh) and runs the whole suite
# (unit + integration against the real Pub/Sub emulator + Spark end to end).
# Extra arguments go to pytest, e.g.  bash tests/run.sh -k decoding
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/examples/bootstrap.sh"
cd "$ROOT"
exec "$PY" -m pytest -ra "$@"
