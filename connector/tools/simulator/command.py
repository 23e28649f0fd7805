"""The ``simulate`` command line (``examples/simulate.py`` and ``crdb-pubsub simulate`` share it)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .core import ChangefeedSimulator
from .messages import ENVELOPES
from .publish import make_publisher
from .tables import TABLES


def build_arg_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """Arguments of the ``simulate`` command; :func:`main` turns them into a simulator run."""
    p = argparse.ArgumentParser(
        prog=prog, description="Publish simulated CockroachDB changefeed messages (movr tables) to a Pub/Sub emulator."
    )
    p.add_argument(
        "--emulator-host",
        default=os.environ.get("PUBSUB_EMULATOR_HOST"),
        help="host:port of the emulator (default: $PUBSUB_EMULATOR_HOST)",
    )
    p.add_argument("--project", default="crdb-sim", help="Pub/Sub project id")
    p.add_argument("--rows", type=int, default=1000, help="row changes to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--envelope", choices=ENVELOPES, default="wrapped")
    p.add_argument("--enriched-properties", default="", help="comma list of source,schema")
    p.add_argument("--tables", default=",".join(TABLES), help="comma list of tables")
    p.add_argument("--mix", default="0.6,0.3,0.1", help="insert,update,delete weights")
    p.add_argument("--topic-name", default=None, help="publish everything to this one topic")
    p.add_argument("--resolved-every", type=int, default=0, help="resolved after every N changes")
    for flag in (
        "diff",
        "updated",
        "mvcc-timestamp",
        "key-in-value",
        "column-families",
        "full-table-name",
        "legacy-wrapper",
        "with-table-name-attribute",
    ):
        p.add_argument(f"--{flag}", action="store_true")
    p.add_argument("--rate", type=float, default=None, help="max messages per second")
    p.add_argument("--shuffle-window", type=int, default=0)
    p.add_argument("--duplicate-fraction", type=float, default=0.0)
    p.add_argument("--no-create-topics", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print the message bodies, publish nothing")
    return p


def simulator_from_args(args: argparse.Namespace) -> ChangefeedSimulator:
    """Build the simulator an argument namespace of :func:`build_arg_parser` describes."""
    try:
        mix = tuple(float(x) for x in args.mix.split(","))
    except ValueError:
        raise ValueError(f"mix: expected comma-separated numbers, got {args.mix!r}") from None
    return ChangefeedSimulator(
        seed=args.seed,
        envelope=args.envelope,
        enriched_properties=args.enriched_properties or None,
        diff=args.diff,
        updated=args.updated,
        mvcc_timestamp=args.mvcc_timestamp,
        key_in_value=args.key_in_value,
        column_families=args.column_families,
        full_table_name=args.full_table_name,
        topic_name=args.topic_name,
        resolved_every=args.resolved_every,
        legacy_wrapper=args.legacy_wrapper,
        with_table_name_attribute=args.with_table_name_attribute,
        tables=[t.strip() for t in args.tables.split(",") if t.strip()],
        mix=mix,
    )


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the ``simulate`` command; returns the process exit code (2 on bad arguments)."""
    parser = build_arg_parser(prog)
    args = parser.parse_args(argv)
    try:
        sim = simulator_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.dry_run:
        for msg in sim.events(args.rows):
            sys.stdout.write(f"{msg.topic}\t{msg.data.decode('utf-8')}\n")
        print(json.dumps(sim.stats(), indent=2), file=sys.stderr)
        return 0
    if not args.emulator_host:
        parser.error("--emulator-host is required (or set PUBSUB_EMULATOR_HOST)")
    publisher = make_publisher(args.emulator_host, ordering=args.legacy_wrapper)
    try:
        report = sim.publish(
            publisher,
            args.project,
            args.rows,
            rate=args.rate,
            create_topics=not args.no_create_topics,
            shuffle_window=args.shuffle_window,
            duplicate_fraction=args.duplicate_fraction,
            on_progress=lambda done, total: print(f"published {done}/{total}", file=sys.stderr),
        )
    except ValueError as exc:
        parser.error(str(exc))
    finally:
        publisher.stop()
        publisher.transport.close()
    print(
        json.dumps(
            {
                "topics": sim.topics(),
                "published": report.published,
                "row_messages": report.row_messages,
                "resolved_messages": report.resolved_messages,
                "duplicates": report.duplicates,
                "per_topic": report.per_topic,
                "elapsed_s": round(report.elapsed_s, 3),
                "messages_per_s": round(report.messages_per_s, 1),
                "stats": report.stats,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
