"""The demo: a CockroachDB changefeed on Pub/Sub becomes current-state tables, live.

1. starts the Pub/Sub emulator (or uses PUBSUB_EMULATOR_HOST),
2. publishes movr changefeed traffic (inserts, updates, deletes, resolved timestamps) exactly as
   CockroachDB's Pub/Sub sink lays it out, slightly out of order and with a few duplicates,
3. streams it through ``spark.readStream.format("crdb_pubsub")`` and applies every micro-batch to a
   Delta Lake table per source table (``crdb_pubsub.apply``, one MERGE per table and batch),
   printing progress while it runs,
4. prints a summary per table and checks the state against the simulator's ground truth.

Bounded by default (exits on its own): it publishes ``--rows`` changes as fast as the emulator
takes them and reports the start-up (Spark, the first batch) apart from the steady pace (the batches
after the first), so its numbers are the connector's and not Spark's start-up. ``--forever``
publishes at ``--rate`` until Ctrl-C.
Run it with ``bash examples/demo.sh`` (sets up .venv first) or ``python examples/demo.py --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time

PROJECT = "demo-project"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rows",
        type=int,
        default=20_000,
        help="row changes to publish in a bounded run, as fast as the emulator takes them (default 20000)",
    )
    ap.add_argument("--forever", action="store_true", help="keep publishing and streaming until Ctrl-C")
    ap.add_argument(
        "--rate", type=float, default=500.0, help="messages per second to publish with --forever (default 500)"
    )
    ap.add_argument("--envelope", default="wrapped", choices=["wrapped", "enriched"])
    ap.add_argument(
        "--producer",
        default="cockroachdb",
        choices=["cockroachdb", "debezium-postgres", "debezium-mysql", "ticdc"],
        help="who publishes the changes (default cockroachdb; the Debezium road: debezium-postgres, "
        "debezium-mysql through Debezium Server's Pub/Sub sink, ticdc through Kafka)",
    )
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--shuffle-window", type=int, default=50, help="out-of-order delivery window (default 50)")
    ap.add_argument("--duplicate-fraction", type=float, default=0.02, help="re-emitted duplicates (default 0.02)")
    ap.add_argument("--max-messages-per-trigger", type=int, default=5000)
    ap.add_argument("--trigger-seconds", type=float, default=1.0)
    ap.add_argument(
        "--state-dir", default=None, help="where the Delta state tables go (default: a temporary directory)"
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="give up a bounded run after this many seconds")
    args = ap.parse_args(argv)
    if args.rows <= 0 or args.rate <= 0:
        ap.error("--rows and --rate must be > 0")
    return args


class Totals:
    """Cumulative counts over the batches, fed by foreachBatch (runs in this driver process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.messages = 0
        self.first: tuple[float, int] | None = None  # (monotonic end, messages) of the first batch with rows
        self.last = 0.0  # monotonic end of the newest batch with rows
        self.tables: dict[str, dict[str, int]] = {}
        self.malformed = 0
        self.errors: list[str] = []

    def add(self, res) -> None:
        with self.lock:
            self.batches += 1
            self.messages += res.messages
            if res.messages:
                self.last = time.monotonic()
                if self.first is None:
                    self.first = (self.last, self.messages)
            self.malformed += res.malformed
            self.errors = (self.errors + res.errors)[:5]
            for table, c in res.tables.items():
                t = self.tables.setdefault(
                    table,
                    dict.fromkeys(
                        ("upserts", "deletes", "superseded", "malformed", "rows", "tombstones", "version"), 0
                    ),
                )
                for k in ("upserts", "deletes", "superseded", "malformed"):
                    t[k] += getattr(c, k)
                t["rows"], t["tombstones"], t["version"] = c.rows, c.tombstones, c.version


class Publisher(threading.Thread):
    """Publishes in chunks at ``rate`` so the stream has something to chew on while it runs."""

    def __init__(self, sim, publisher, rows: int, rate: float, forever: bool, shuffle: int, dups: float) -> None:
        super().__init__(daemon=True)
        self.sim, self.publisher, self.rows, self.rate = sim, publisher, rows, rate
        self.forever, self.shuffle, self.dups = forever, shuffle, dups
        self.stop_event = threading.Event()
        self.published = 0
        self.row_messages = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        chunk = 250
        try:
            left = self.rows
            while not self.stop_event.is_set() and (self.forever or left > 0):
                n = chunk if self.forever else min(chunk, left)
                rep = self.sim.publish(
                    self.publisher,
                    PROJECT,
                    n,
                    rate=self.rate if self.forever else None,
                    create_topics=False,
                    shuffle_window=self.shuffle,
                    duplicate_fraction=self.dups,
                )
                self.published += rep.published
                self.row_messages += rep.row_messages
                left -= n
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def _simulator(args: argparse.Namespace, simulator):
    """The traffic: CockroachDB's (WITH updated, diff or enriched) or another producer's."""
    if args.producer != "cockroachdb":
        # Debezium's feeds start with a snapshot of the rows already there; TiCDC sends watermarks.
        snapshot = 0 if args.producer == "ticdc" else 200
        resolved = 100 if args.producer == "ticdc" else 0
        return simulator(
            seed=args.seed,
            producer=args.producer,
            snapshot_rows=snapshot,
            resolved_every=resolved,
            mix=(0.5, 0.35, 0.15),
        )
    kw = {"enriched_properties": "source"} if args.envelope == "enriched" else {"diff": True}
    return simulator(
        seed=args.seed, envelope=args.envelope, updated=True, resolved_every=100, mix=(0.5, 0.35, 0.15), **kw
    )


def source_metrics(query) -> dict:
    p = query.lastProgress
    if p and p["sources"] and p["sources"][0].get("latestOffset"):
        try:
            return json.loads(p["sources"][0]["latestOffset"])
        except (TypeError, ValueError):
            return {}
    return {}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("crdb_pubsub").setLevel(logging.WARNING)

    from pyspark.sql import SparkSession

    import crdb_pubsub
    from crdb_pubsub.apply import compare_to_ground_truth, foreach_batch_apply, read_state
    from crdb_pubsub.emulator import create_topic_and_subscription, emulator
    from crdb_pubsub.tools.simulator import ChangefeedSimulator, make_publisher, primary_keys, spark_schemas

    interrupted = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())  # Ctrl-C: stop cleanly, then summarise

    with emulator(project=PROJECT) as host_port, tempfile.TemporaryDirectory(prefix="crdb-pubsub-demo-") as tmp:
        state_dir = args.state_dir or os.path.join(tmp, "state")
        print(f"\n==> Pub/Sub emulator at {host_port}")
        sim = _simulator(args, ChangefeedSimulator)
        subs = []
        for topic in sim.topics():
            _, sub = create_topic_and_subscription(host_port, PROJECT, topic, f"{topic}-spark", exist_ok=True)
            subs.append(sub)

        print("==> starting Spark (local[2]) ...")
        t_spark = time.monotonic()
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("crdb-pubsub-demo")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.showConsoleProgress", "false")
            # Idle queries report progress (and the source's ack counters) every second, not every 10.
            .config("spark.sql.streaming.noDataProgressEventInterval", "1000")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        crdb_pubsub.register(spark)

        schemas = spark_schemas(producer=args.producer)
        totals = Totals()
        changes = (
            spark.readStream.format("crdb_pubsub")
            .option("subscription", ",".join(subs))  # one subscription per table, read together
            .option("emulatorHost", host_port)
            .option("maxMessagesPerTrigger", str(args.max_messages_per_trigger))
            .load()
        )
        query = (
            changes.writeStream.queryName("cdc_apply")
            .foreachBatch(foreach_batch_apply(state_dir, schemas, on_result=totals.add))
            .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
            .trigger(processingTime=f"{args.trigger_seconds} seconds")
            .start()
        )
        publisher = make_publisher(host_port, ordering=sim.uses_ordering_keys)
        pub = Publisher(
            sim, publisher, args.rows, args.rate, args.forever, args.shuffle_window, args.duplicate_fraction
        )
        mode = f"until Ctrl-C at {args.rate:g} msg/s" if args.forever else f"{args.rows} row changes, published at once"
        print(
            f"==> streaming {', '.join(sim.topics())} into {state_dir} ({mode}; "
            f"shuffle window {args.shuffle_window}, {args.duplicate_fraction:.0%} duplicates)\n"
        )
        pub.start()
        t0 = time.monotonic()
        last_print = 0.0
        caught_up_since = None
        ok = True
        try:
            while True:
                time.sleep(0.25)
                if query.exception() is not None:
                    print(f"\n!! the streaming query failed: {query.exception()}")
                    ok = False
                    break
                if pub.error is not None:
                    print(f"\n!! publishing failed: {pub.error}")
                    ok = False
                    break
                now = time.monotonic()
                m = source_metrics(query)
                if now - last_print >= 2.0:
                    last_print = now
                    with totals.lock:
                        rows_state = " ".join(f"{t} {c['rows']}" for t, c in sorted(totals.tables.items()))
                        batches, seen = totals.batches, totals.messages
                    print(
                        f"[{now - t0:5.1f}s] published {pub.published:6d} | batches {batches:3d} | "
                        f"applied {seen:6d} msgs ({seen / max(now - t0, 1e-9):6.0f}/s) | "
                        f"acked {m.get('acknowledged', 0):6d} in-flight {m.get('inFlight', 0):5d} | "
                        f"lag {m.get('oldestUnackedAgeSeconds', 0) or 0:4.1f}s | state rows: {rows_state}",
                        flush=True,
                    )
                if interrupted.is_set() and not pub.stop_event.is_set():
                    print(
                        "\n==> Ctrl-C: stopping the publisher, letting the stream catch up (Ctrl-C again to quit now)"
                    )
                    pub.stop_event.set()
                    interrupted.clear()
                elif interrupted.is_set():
                    ok = False
                    break
                publishing_done = not pub.is_alive()
                if publishing_done and totals.messages >= pub.published:
                    # Give the source one more planning step so the last batch is acknowledged too.
                    caught_up_since = caught_up_since or now
                    if m.get("acknowledged", 0) >= pub.published or now - caught_up_since > 5:
                        break
                if not args.forever and now - t0 > args.timeout:
                    print(f"\n!! timed out after {args.timeout:g} s")
                    ok = False
                    break
        finally:
            pub.stop_event.set()
            pub.join(timeout=30)
            publisher.stop()
            publisher.transport.close()
            query.stop()
        time.monotonic() - t0
        m = source_metrics(query)

        print(
            f"\n==> streamed {totals.messages} messages in {totals.batches} micro-batches; acknowledged "
            f"{m.get('acknowledged', 0)}, malformed {totals.malformed}"
        )
        print(
            f"    start-up: Spark {t0 - t_spark:.1f} s, then the first batch applied "
            + (
                f"{totals.first[0] - t0:.1f} s after the query started (Python workers start, first imports)"
                if totals.first
                else "never"
            )
        )
        if totals.first and totals.messages > totals.first[1] and totals.last > totals.first[0]:
            steady = (totals.messages - totals.first[1]) / (totals.last - totals.first[0])
            print(
                f"    steady pace: {totals.messages - totals.first[1]} messages in {totals.batches - 1} batches, "
                f"{totals.last - totals.first[0]:.1f} s after the first = {steady:,.0f} msg/s, each batch decoded "
                "and applied to Delta (a real sink's pace, not the source's alone: see docs/performance.md)\n"
            )
        else:
            print("    steady pace: everything fit in the first batch (publish more with --rows to measure it)\n")
        header = (
            f"{'table':10s} {'upserts':>8s} {'deletes':>8s} {'superseded':>10s} {'malformed':>9s} "
            f"{'rows in state':>13s} {'tombstones':>10s} {'delta version':>13s}"
        )
        print(header)
        print("-" * len(header))
        for table, c in sorted(totals.tables.items()):
            print(
                f"{table:10s} {c['upserts']:8d} {c['deletes']:8d} {c['superseded']:10d} {c['malformed']:9d} "
                f"{c['rows']:13d} {c['tombstones']:10d} {c['version']:13d}"
            )
        print(
            "(superseded = duplicates, changes older than the state's version of their key, and column-family\n"
            " messages folded into their row; tombstones = deleted keys kept so late older changes lose)\n"
        )
        if "users" in totals.tables:
            print(
                f"A few rows of the users Delta table {os.path.join(state_dir, 'users')} "
                f"(from {args.producer}; typed: balance is DECIMAL(12,2)):"
            )
            read_state(state_dir, "users", spark=spark).select("id", "city", "name", "balance", "created_at").orderBy(
                "id"
            ).show(5, truncate=False)

        if ok:
            problems = compare_to_ground_truth(state_dir, sim.ground_truth(), schemas, primary_keys())
            if problems:
                ok = False
                print("state == simulator ground truth: MISMATCH")
                for p in problems:
                    print("   ", p)
            else:
                print(
                    "state == simulator ground truth: OK"
                    + ("" if args.producer == "cockroachdb" else f" ({args.producer})")
                )
        spark.stop()
    print(f"==> done in {time.monotonic() - t_spark:.0f} s after Spark started: emulator stopped, Spark stopped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
