#!/usr/bin/env bash
# The demo command: sets up .venv, starts the Pub/Sub emulator, publishes CockroachDB changefeed
# traffic, streams it through spark.readStream.format("crdb_pubsub") and prints the decoded rows.
# Extra arguments go to examples/demo.py (see --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/examples/bootstrap.sh"
exec "$PY" "$ROOT/examples/demo.py" "$@"
