#!/usr/bin/env bash
# The demo command: sets up .venv, starts the Pub/Sub emulator, publishes CockroachDB changefeed
# traffic, streams it through spark.readStream.format("crdb_pubsub"), applies it to per-table
# state (crdb_pubsub.apply) with live progress, and checks the state against the ground truth.
# Extra arguments go to examples/demo.py (see --help; --forever runs until Ctrl-C).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/examples/bootstrap.sh"
exec "$PY" "$ROOT/examples/demo.py" "$@"
