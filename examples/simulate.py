"""Publish simulated CockroachDB changefeed traffic (movr tables) to a Pub/Sub emulator.

    python examples/simulate.py --emulator-host "$PUBSUB_EMULATOR_HOST" --rows 10000 --diff --resolved-every 100
    python examples/simulate.py --dry-run --rows 5 --envelope enriched --enriched-properties source

Prints the simulator's stats and the publish throughput as JSON. The argument parsing lives in
``crdb_pubsub.tools.simulator`` (``build_arg_parser`` / ``main``) so the ``crdb-pubsub simulate`` command
behaves the same.
"""

from __future__ import annotations

import sys

from crdb_pubsub.tools.simulator import main

if __name__ == "__main__":
    sys.exit(main(prog="simulate.py"))
