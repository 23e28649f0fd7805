"""The ``simulate`` command line (``examples/simulate.py`` and ``crdb-pubsub simulate`` share it)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from .core import ChangefeedSimulator
from .debezium import PRODUCERS
from .messages import ENVELOPES
from .publish import make_publisher
from .tables import TABLES


def build_arg_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """Arguments of the ``simulate`` command; :func:`main` turns them into a simulator run."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Publish simulated CockroachDB changefeed messages (movr tables) to a Pub/Sub emulator: one "
        "topic per table (or --topic-name), and on each a subscription <topic>-spark made before the first "
        "message, so that what is published waits there for `crdb-pubsub tail` and the Spark source. "
        "--producer lays the same changes out as Debezium or TiCDC publish them.",
    )
    p.add_argument(
        "--emulator-host",
        default=os.environ.get("PUBSUB_EMULATOR_HOST"),
        help="host:port of the emulator (default: $PUBSUB_EMULATOR_HOST)",
    )
    p.add_argument("--project", default="crdb-sim", help="Pub/Sub project id (default crdb-sim)")
    p.add_argument("--rows", type=int, default=1000, help="row changes to generate (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="the same seed and options give the same messages (default 0)")
    p.add_argument(
        "--envelope",
        choices=ENVELOPES,
        default="wrapped",
        help="the changefeed's envelope option (default wrapped, CockroachDB's own default)",
    )
    p.add_argument(
        "--enriched-properties",
        default="",
        help="with --envelope enriched: comma list of source,schema (the changefeed's enriched_properties)",
    )
    p.add_argument(
        "--producer",
        choices=("cockroachdb", *PRODUCERS),
        default="cockroachdb",
        help="who publishes the changes: a CockroachDB changefeed (default), Debezium Server's Pub/Sub sink "
        "(debezium-postgres, debezium-mysql: the record key as ordering key) or TiCDC's Debezium protocol "
        "through Kafka (ticdc: the key in a `key` attribute); the CockroachDB flags are for cockroachdb only",
    )
    p.add_argument(
        "--snapshot-rows",
        type=int,
        default=0,
        help="with a Debezium producer: start with a snapshot (op r) of the rows N unpublished changes leave",
    )
    p.add_argument("--tables", default=",".join(TABLES), help="comma list of tables (default: all of them)")
    p.add_argument("--mix", default="0.6,0.3,0.1", help="insert,update,delete weights (default 0.6,0.3,0.1)")
    p.add_argument(
        "--topic-name", default=None, help="publish every table to this one topic (the changefeed's topic_name)"
    )
    p.add_argument(
        "--resolved-every", type=int, default=0, help="a resolved message after every N changes (default 0: none)"
    )
    for flag, what in (
        ("diff", "the changefeed option diff: row messages carry before"),
        ("updated", "the changefeed option updated: row messages carry the commit's HLC"),
        ("mvcc-timestamp", "the changefeed option mvcc_timestamp"),
        ("key-in-value", "the changefeed option key_in_value"),
        ("column-families", "split_column_families: one message per column family, on topic table.family"),
        ("full-table-name", "full_table_name: topics and table names as database.schema.table"),
        ("legacy-wrapper", "the sink of CockroachDB before v25.2: lowercase wrapper, the key as ordering key"),
        ("with-table-name-attribute", "with_table_name_attribute: each message names its table in TABLE_NAME"),
    ):
        p.add_argument(f"--{flag}", action="store_true", help=what)
    p.add_argument("--rate", type=float, default=None, help="max messages per second (default: as fast as it goes)")
    p.add_argument(
        "--shuffle-window",
        type=int,
        default=0,
        help="deliver out of order: shuffle inside consecutive windows of N messages (default 0: in order)",
    )
    p.add_argument(
        "--duplicate-fraction",
        type=float,
        default=0.0,
        help="publish this fraction of the messages twice, a little later, as CockroachDB may (default 0.0)",
    )
    p.add_argument(
        "--no-create-topics", action="store_true", help="publish to topics that exist already (do not create them)"
    )
    p.add_argument(
        "--subscription-suffix",
        default="-spark",
        help="make a subscription <topic><suffix> on each topic before publishing, if missing "
        "(default -spark: users-spark, vehicles-spark, rides-spark)",
    )
    p.add_argument(
        "--no-subscriptions",
        action="store_true",
        help="make no subscriptions (then only subscriptions made beforehand receive the messages)",
    )
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
        producer=args.producer,
        snapshot_rows=args.snapshot_rows,
    )


def as_flags(message: str) -> str:
    """Say a simulator error ("resolved_every: expected ...") with the flag ("--resolved-every: ...")."""
    return re.sub(r"^(\w+):", lambda m: "--" + m.group(1).replace("_", "-") + ":", message)


def checked_simulator(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ChangefeedSimulator:
    """Build the simulator ``args`` describe, every flag checked before anything is published.

    A mistake exits through ``parser.error`` (one line naming the flag, exit 2).
    """
    try:
        sim = simulator_from_args(args)
    except ValueError as exc:
        parser.error(as_flags(str(exc)))
    if args.rows < 0:
        parser.error(f"--rows must be >= 0, got {args.rows}")
    if args.rate is not None and not args.rate > 0:
        parser.error(f"--rate must be > 0, got {args.rate:g}")
    if args.shuffle_window < 0:
        parser.error(f"--shuffle-window must be >= 0, got {args.shuffle_window}")
    if not 0.0 <= args.duplicate_fraction <= 1.0:
        parser.error(f"--duplicate-fraction must be 0.0 to 1.0, got {args.duplicate_fraction:g}")
    if not args.no_subscriptions and not args.subscription_suffix:
        parser.error("--subscription-suffix must not be empty (a subscription's id differs from its topic's)")
    return sim


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the ``simulate`` command; returns the process exit code (2 on bad arguments)."""
    parser = build_arg_parser(prog)
    args = parser.parse_args(argv)
    sim = checked_simulator(parser, args)
    if args.dry_run:
        for msg in sim.events(args.rows):
            sys.stdout.write(f"{msg.topic}\t{msg.data.decode('utf-8')}\n")
        print(json.dumps(sim.stats(), indent=2), file=sys.stderr)
        return 0
    if not args.emulator_host:
        parser.error("--emulator-host is required (or set PUBSUB_EMULATOR_HOST)")
    from crdb_pubsub.tools.rpc import Unreachable, check_reachable, emulator_source

    host = args.emulator_host
    given = list(sys.argv[1:] if argv is None else argv)
    flagged = any(a == "--emulator-host" or a.startswith("--emulator-host=") for a in given)
    origin = emulator_source(host if flagged else None, host)
    try:
        check_reachable(host, origin)
        publisher = make_publisher(host, ordering=sim.uses_ordering_keys)
        try:
            subscriptions = _prepare(publisher, args, sim.topics(), f"the emulator at {host} ({origin})")
            report = sim.publish(
                publisher,
                args.project,
                args.rows,
                rate=args.rate,
                create_topics=False,
                shuffle_window=args.shuffle_window,
                duplicate_fraction=args.duplicate_fraction,
                on_progress=lambda done, total: print(f"published {done}/{total}", file=sys.stderr),
                rpc_timeout=PUBLISH_SECONDS,
            )
        finally:
            publisher.stop()
            publisher.transport.close()
    except ValueError as exc:
        parser.error(as_flags(str(exc)))
    except Unreachable as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except RuntimeError as exc:  # publishes that failed (each within its deadline)
        parser.exit(1, f"{parser.prog}: error: publishing to the emulator at {host}: {exc}\n")
    print(
        json.dumps(
            {
                "topics": sim.topics(),
                "subscriptions": subscriptions,
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


# A publish (its retries included) gives up after this long; the simulator reports the failures.
PUBLISH_SECONDS = 30.0


def _prepare(publisher: Any, args: argparse.Namespace, topics: list[str], where: str) -> list[str]:
    """Make the topics and a subscription on each, every call within its deadline.

    ``--no-create-topics`` and ``--no-subscriptions`` skip either; returns the subscriptions' paths.
    """
    from google.api_core import exceptions as gexc

    from crdb_pubsub.emulator import subscriber_client
    from crdb_pubsub.tools.rpc import RPC_SECONDS, Unreachable, rpc_failure

    made: list[str] = []
    subscriber = None if args.no_subscriptions else subscriber_client(args.emulator_host)
    try:
        for topic in topics:
            topic_path = publisher.topic_path(args.project, topic)
            if not args.no_create_topics:
                try:
                    publisher.create_topic(request={"name": topic_path}, timeout=RPC_SECONDS, retry=None)
                except gexc.AlreadyExists:
                    pass
                except gexc.GoogleAPICallError as exc:
                    raise rpc_failure(exc, where) from None
            if subscriber is None:
                continue
            sub_path = subscriber.subscription_path(args.project, topic + args.subscription_suffix)
            try:
                subscriber.create_subscription(
                    request={
                        "name": sub_path,
                        "topic": topic_path,
                        "ack_deadline_seconds": 60,
                        "enable_message_ordering": args.legacy_wrapper,
                    },
                    timeout=RPC_SECONDS,
                    retry=None,
                )
            except gexc.AlreadyExists:
                pass
            except gexc.NotFound:
                raise Unreachable(f"topic {topic_path} does not exist on {where} (drop --no-create-topics)") from None
            except gexc.GoogleAPICallError as exc:
                raise rpc_failure(exc, where) from None
            made.append(sub_path)
    finally:
        if subscriber is not None:
            subscriber.close()
    return made


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
