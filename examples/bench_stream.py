"""Benchmark: the connector draining a backlog vs. a plain google-cloud-pubsub pull loop.

One emulator, one topic, two subscriptions holding the same backlog (default 50,000 realistic
changefeed messages). Measured in the same run:

  (a) baseline: synchronous Pull (1,000 messages) + Acknowledge in a loop until the backlog is gone;
  (b) connector: ``readStream.format("crdb_pubsub")`` with Trigger.AvailableNow into the noop sink
      (decoding included), timed from ``start()`` to termination; SparkSession start-up excluded.
      Reported twice: *cold* (the session's first query, which also pays for starting and
      importing Spark's Python workers) and *warm* (after a 2,000-message warm-up query, as every
      query but the first one in a long-lived session, and every batch of a long-running stream).

How the receiver pulls, measured without Spark on the same backlog:

  (r) the connector's receiver alone: unary Pull (two pullers), flow control, leases, and an
      acknowledgement per taken chunk;
  (s) google-cloud-pubsub's own streaming subscriber (``SubscriberClient.subscribe`` with
      ``FlowControl``: server-side outstanding limits, leasing, one callback per message that
      acknowledges it).

Prints every rate and, last, (b)/(a). Not a test: absolute numbers are noisy here, the ratio is
the figure.

    python examples/bench_stream.py [--messages 50000] [--option key=value ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

PROJECT = "bench-project"


def _bodies(n: int) -> list[bytes]:
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    sim = ChangefeedSimulator(seed=1, updated=True)
    out = [m.data for m in sim.events(n)]
    while len(out) < n:  # column families / deletes never produce fewer, but be safe
        out.extend(m.data for m in sim.events(n - len(out)))
    return out[:n]


def _publish(host: str, topic: str, bodies: list[bytes]) -> None:
    from google.cloud.pubsub_v1.types import BatchSettings

    from crdb_pubsub.emulator import publisher_client

    pub = publisher_client(host, batch_settings=BatchSettings(max_messages=1000, max_bytes=4_000_000, max_latency=0.05))
    try:
        futures = [pub.publish(topic, b) for b in bodies]
        for f in futures:
            f.result(timeout=120)
    finally:
        pub.stop()
        pub.transport.close()


def baseline(host: str, sub: str, n: int) -> float:
    """Seconds for a plain sync pull(1000) + acknowledge loop to consume ``n`` messages."""
    from google.api_core import exceptions as gexc

    from crdb_pubsub.emulator import subscriber_client

    client = subscriber_client(host)
    got = 0
    t0 = time.perf_counter()
    try:
        while got < n:
            try:
                resp = client.pull(request={"subscription": sub, "max_messages": 1000}, timeout=5.0, retry=None)
            except gexc.DeadlineExceeded:
                continue
            ids = [rm.ack_id for rm in resp.received_messages]
            if ids:
                client.acknowledge(request={"subscription": sub, "ack_ids": ids})
                got += len(ids)
    finally:
        client.close()
    return time.perf_counter() - t0


def receiver_alone(host: str, sub: str, n: int) -> float:
    """Seconds for the connector's receiver (no Spark) to take and acknowledge ``n`` messages."""
    from crdb_pubsub.source.receiver import Receiver
    from crdb_pubsub.source.transport import Rpc, subscriber_client

    r = Receiver(Rpc(subscriber_client(host)), [sub], lease_seconds=60, max_lease_seconds=3600,
                 max_messages=50_000, max_bytes=256 << 20)
    got = 0
    t0 = time.perf_counter()
    r.start()
    try:
        while got < n:
            chunks = r.take()
            if not chunks:
                time.sleep(0.001)
                continue
            got += sum(len(c) for c in chunks)
            r.ack(chunks)
        r.acker.flush(30)
        return time.perf_counter() - t0
    finally:
        r.shutdown(hand_back=True, within=5)


def streaming_subscriber(host: str, sub: str, n: int) -> float:
    """Seconds for google-cloud-pubsub's streaming subscriber to receive and ack ``n`` messages."""
    import threading

    from google.cloud.pubsub_v1.types import FlowControl

    from crdb_pubsub.emulator import subscriber_client

    client = subscriber_client(host)
    done = threading.Event()
    lock = threading.Lock()
    count = [0]

    def callback(message) -> None:
        message.ack()
        with lock:
            count[0] += 1
            if count[0] >= n:
                done.set()

    t0 = time.perf_counter()
    future = client.subscribe(sub, callback, flow_control=FlowControl(max_messages=50_000, max_bytes=256 << 20))
    try:
        done.wait(600)
        return time.perf_counter() - t0
    finally:
        future.cancel()
        try:
            future.result(timeout=30)
        except Exception:  # noqa: BLE001 - cancelled on purpose
            pass
        client.close()


def connector(spark, host: str, sub: str, n: int, options: dict[str, str]) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        reader = spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", host)
        for k, v in options.items():
            reader = reader.option(k, v)
        df = reader.load()
        t0 = time.perf_counter()
        q = df.writeStream.format("noop").option("checkpointLocation", os.path.join(tmp, "chk")).trigger(availableNow=True).start()
        q.awaitTermination()
        elapsed = time.perf_counter() - t0
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        return elapsed, rows, len(q.recentProgress)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="extra source option")
    args = ap.parse_args(argv)
    options = dict(o.split("=", 1) for o in args.option)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub
    from crdb_pubsub.emulator import create_topic_and_subscription, emulator

    with emulator(project=PROJECT) as host:
        topic, sub_a = create_topic_and_subscription(host, PROJECT, "bench", "bench-baseline", ack_deadline_seconds=60)
        _, sub_b = create_topic_and_subscription(host, PROJECT, "bench", "bench-connector", ack_deadline_seconds=60, exist_ok=True)
        _, sub_cold = create_topic_and_subscription(host, PROJECT, "bench", "bench-cold", ack_deadline_seconds=60, exist_ok=True)
        _, sub_r = create_topic_and_subscription(host, PROJECT, "bench", "bench-receiver", ack_deadline_seconds=60, exist_ok=True)
        _, sub_s = create_topic_and_subscription(host, PROJECT, "bench", "bench-streaming", ack_deadline_seconds=60, exist_ok=True)
        bodies = _bodies(args.messages)
        t0 = time.perf_counter()
        _publish(host, topic, bodies)
        print(f"published {len(bodies):,} messages ({sum(map(len, bodies)) / len(bodies):.0f} B avg) "
              f"in {time.perf_counter() - t0:.1f} s to one topic with five subscriptions")
        r = receiver_alone(host, sub_r, len(bodies))
        s_ = streaming_subscriber(host, sub_s, len(bodies))

        spark = (
            SparkSession.builder.master("local[2]").appName("bench-stream")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        crdb_pubsub.register(spark)

        a = baseline(host, sub_a, len(bodies))
        cold, cold_rows, _ = connector(spark, host, sub_cold, len(bodies), options)
        # Warm-up on its own small backlog, then the measured run.
        wtopic, wsub = create_topic_and_subscription(host, PROJECT, "warmup", "warmup-sub", ack_deadline_seconds=60)
        _publish(host, wtopic, bodies[:2000])
        connector(spark, host, wsub, 2000, options)
        b, rows, batches = connector(spark, host, sub_b, len(bodies), options)
        spark.stop()

    rate_a, rate_b, rate_cold = len(bodies) / a, rows / b, cold_rows / cold
    print(f"(r) crdb_pubsub receiver alone       : {r:7.2f} s  {len(bodies) / r:9,.0f} msg/s  (unary Pull, no Spark)")
    print(f"(s) library streaming subscriber     : {s_:7.2f} s  {len(bodies) / s_:9,.0f} msg/s  (StreamingPull + FlowControl, no Spark)")
    print(f"(a) plain pull(1000)+ack loop        : {a:7.2f} s  {rate_a:9,.0f} msg/s")
    print(f"(b) crdb_pubsub AvailableNow, warm   : {b:7.2f} s  {rate_b:9,.0f} msg/s  ({rows:,} rows decoded, {batches} batches)")
    print(f"    crdb_pubsub AvailableNow, cold   : {cold:7.2f} s  {rate_cold:9,.0f} msg/s  (first query of the session)")
    print(f"ratio (b)/(a) warm = {rate_b / rate_a:.2f}, cold = {rate_cold / rate_a:.2f}  (goal >= 0.8)")
    if rows != len(bodies) or cold_rows != len(bodies):
        print(f"WARNING: connector produced {rows}/{cold_rows} rows for {len(bodies)} messages")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
