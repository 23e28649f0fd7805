"""Benchmark: the connector draining a backlog vs. a plain google-cloud-pubsub pull loop.

One Pub/Sub server, one topic, one subscription per run holding the same backlog (default 50,000 realistic
changefeed messages). Measured in the same run:

  (a) baseline: synchronous Pull (1,000 messages) + Acknowledge in a loop until the backlog is gone;
  (b) connector: ``readStream.format("crdb_pubsub")`` with Trigger.AvailableNow into the noop sink
      (decoding included), timed from ``start()`` to termination; SparkSession start-up excluded.
      Reported twice: *cold* (the session's first query, which also pays for starting and
      importing Spark's Python workers) and *warm* (after a 2,000-message warm-up query, as every
      query but the first one in a long-lived session, and every batch of a long-running stream).
  (c) the connector with ``receiver=executors`` (the tasks pull and record their slices in a
      stateDir; the driver plans and acknowledges), warm, ``numPartitions`` = the machine's cores:
      its ratio to (a), and the driver's CPU per message, which no longer grows with the messages.

  (a') the same loop, except that it holds what it pulls and acknowledges every 4,000 messages
      (about one of the connector's batches here): the Pull/Acknowledge pattern of any consumer
      that acknowledges only after its batch committed, without Spark or decoding. Against the
      emulator this is the ceiling for (b): while any message is outstanding, the emulator's Pull
      copies the subscription's whole backlog (``MessageBacklog.updateExpiredAckDeadlines``
      rebuilds its set of undelivered messages), so draining a backlog of B messages in Pulls of
      100 costs it O(B^2 / 100) while messages are held, and nothing while they are not; (a)
      acknowledges each Pull before the next and never pays it. The real service does not work
      this way (it answers a Pull with up to 1,000 messages, and holding is its normal case).

How the receiver pulls, measured without Spark on the same backlog:

  (r) the connector's receiver alone: unary Pull (two pullers), flow control, leases, and an
      acknowledgement per taken chunk;
  (s) google-cloud-pubsub's own streaming subscriber (``SubscriberClient.subscribe`` with
      ``FlowControl``: server-side outstanding limits, leasing, one callback per message that
      acknowledges it).

CPU, from /proc (the figures that hold on any machine):

  driver CPU per message: the CPU time of Spark's driver-side Python runner
      (``pyspark.sql.streaming.python_streaming_source_runner``, one process per query) of the
      measured warm query, minus that of the 2,000-message warm-up query (start-up: imports,
      client, first Pull waits), per message beyond the warm-up's;
  executor CPU per message: the CPU time of the Python workers that run ``read()``
      (``pyspark.daemon`` and the workers it forks, reaped ones included) over the warm query,
      per message.

Prints every rate and, last, (b)/(a). Not a test: absolute numbers are noisy here, the ratio is
the figure.

    python examples/bench_stream.py [--messages 50000] [--option key=value ...] [--columns a,b,...]

Where it runs: ``examples/fastpubsub.py`` (an in-memory Pub/Sub server, started in a process of its
own); the server at ``PUBSUB_EMULATOR_HOST`` when it is set; Google's emulator with ``--emulator``;
or with ``--project P`` the real Pub/Sub service in project ``P`` through Application Default
Credentials: it creates a topic and seven subscriptions named ``bench-<pid>-<time>...``, publishes
the backlog (billed as any traffic), and deletes them at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

PROJECT = "bench-project"
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
PLANNING_WORKERS = ("lookup_data_sources", "create_data_source", "plan_data_source_read")
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU seconds, reaped children's CPU seconds) of ``pid`` from /proc."""
    return _stat_path(f"/proc/{pid}/stat")


def _stat_path(path: str) -> tuple[int, float, float] | None:
    try:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # After the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based from state.
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class ProcCpu:
    """Samples the CPU time of Spark's Python processes under this process's JVM (a thread
    polling /proc every 50 ms): driver-side runners by pid, executor workers as a snapshot."""

    def __init__(self) -> None:
        import threading

        self.runner_cpu: dict[int, float] = {}  # pid -> last seen CPU seconds
        self.last_jvms = (0.0, 0.0)
        self.last_jvm_tasks = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _procs(self) -> list[tuple[int, str, float, float]]:
        """(pid, cmdline, own CPU, reaped children CPU) of every process below this one."""
        parent: dict[int, int] = {}
        stats: dict[int, tuple[float, float]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _stat(int(name))
                if st is not None:
                    parent[int(name)] = st[0]
                    stats[int(name)] = st[1:]
        me, out = os.getpid(), []
        for pid in stats:
            p, hops = parent.get(pid), 0
            while p is not None and p != me and p > 1 and hops < 8:
                p, hops = parent.get(p), hops + 1
            if p == me:
                out.append((pid, _cmdline(pid), *stats[pid]))
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for pid, cmd, own, _ in self._procs():
                if RUNNER_MODULE in cmd:
                    with self._lock:
                        self.runner_cpu[pid] = max(own, self.runner_cpu.get(pid, 0.0))

    def runners(self) -> set[int]:
        with self._lock:
            return set(self.runner_cpu)

    def runner_seconds(self, pids: set[int]) -> float:
        with self._lock:
            return sum(self.runner_cpu[p] for p in pids)

    def executor_seconds(self) -> float:
        """CPU so far of the executor-side Python workers: live ones' own, plus what the daemons
        reaped (a worker that exited is counted in its daemon's children time)."""
        total = 0.0
        for _, cmd, own, reaped in self._procs():
            if "pyspark.daemon" in cmd and not any(w in cmd for w in PLANNING_WORKERS):
                total += own + reaped
        return total

    def jvm_seconds(self) -> tuple[float, float]:
        """CPU so far of (Spark's JVM, the Pub/Sub emulator's JVM), reaped children excluded."""
        spark = emulator = 0.0
        for _, cmd, own, _ in self._procs():
            if "java" not in cmd.split(" ", 1)[0]:
                continue
            if "org.apache.spark" in cmd or "pyspark" in cmd:
                spark += own
            elif "pubsub" in cmd.lower():
                emulator += own
        return spark, emulator

    def jvm_task_seconds(self) -> float:
        """CPU so far of the Spark JVM's task threads: the rows' work (Arrow batches into rows, the
        sink), without the JVM's compiler, collector and scheduling, which grow with the wall time."""
        total = 0.0
        for pid, cmd, _, _ in self._procs():
            if "java" not in cmd.split(" ", 1)[0] or not ("org.apache.spark" in cmd or "pyspark" in cmd):
                continue
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/comm") as f:
                        if not f.read().startswith("Executor task"):
                            continue
                    st = _stat_path(f"/proc/{pid}/task/{tid}/stat")
                    if st is not None:
                        total += st[1]
        return total

    def stop(self) -> None:
        self._stop.set()


def _bodies(n: int) -> list[bytes]:
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    sim = ChangefeedSimulator(seed=1, updated=True)
    out = [m.data for m in sim.events(n)]
    while len(out) < n:  # column families / deletes never produce fewer, but be safe
        out.extend(m.data for m in sim.events(n - len(out)))
    return out[:n]


def _publisher(host: str | None, **kwargs):
    """A publisher to the emulator at ``host``, or with ``None`` to the service (ADC)."""
    if host:
        from crdb_pubsub.emulator import publisher_client

        return publisher_client(host, **kwargs)
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient(**kwargs)


def _subscriber(host: str | None):
    """A subscriber to the emulator at ``host``, or with ``None`` to the service (ADC)."""
    if host:
        from crdb_pubsub.emulator import subscriber_client

        return subscriber_client(host)
    from google.cloud import pubsub_v1

    return pubsub_v1.SubscriberClient()


class _Resources:
    """The topics and subscriptions of one run: created on the emulator as usual, or on the service,
    where they are deleted at the end (an emulator's are gone with it)."""

    def __init__(self, host: str | None, project: str, ack_deadline: int = 60) -> None:
        self.host, self.project, self.ack_deadline = host, project, ack_deadline
        self.topics: list[str] = []
        self.subscriptions: list[str] = []

    def create(self, topic: str, subscription: str) -> tuple[str, str]:
        from google.api_core.exceptions import AlreadyExists

        if self.host:
            from crdb_pubsub.emulator import create_topic_and_subscription

            return create_topic_and_subscription(
                self.host, self.project, topic, subscription, ack_deadline_seconds=self.ack_deadline, exist_ok=True
            )
        pub, sub = _publisher(None), _subscriber(None)
        try:
            t, s = pub.topic_path(self.project, topic), sub.subscription_path(self.project, subscription)
            if t not in self.topics:
                with contextlib.suppress(AlreadyExists):
                    pub.create_topic(request={"name": t})
                self.topics.append(t)
            sub.create_subscription(request={"name": s, "topic": t, "ack_deadline_seconds": self.ack_deadline})
            self.subscriptions.append(s)
            return t, s
        finally:
            pub.transport.close()
            sub.close()

    def __enter__(self) -> _Resources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def delete(self) -> None:
        if self.host or not (self.topics or self.subscriptions):
            return
        pub, sub = _publisher(None), _subscriber(None)
        try:
            for s in self.subscriptions:
                sub.delete_subscription(request={"subscription": s})
            for t in self.topics:
                pub.delete_topic(request={"topic": t})
        finally:
            pub.transport.close()
            sub.close()


def _publish(host: str | None, topic: str, bodies: list[bytes]) -> None:
    from google.cloud.pubsub_v1.types import BatchSettings

    pub = _publisher(host, batch_settings=BatchSettings(max_messages=1000, max_bytes=4_000_000, max_latency=0.05))
    try:
        futures = [pub.publish(topic, b) for b in bodies]
        for f in futures:
            f.result(timeout=120)
    finally:
        pub.stop()
        pub.transport.close()


def baseline(host: str | None, sub: str, n: int, hold: int = 0) -> float:
    """Seconds for a plain sync pull(1000) + acknowledge loop to consume ``n`` messages: (a),
    acknowledging each Pull's messages before the next Pull; with ``hold``, (a'), acknowledging
    every ``hold`` messages instead (they stay outstanding until then)."""
    from google.api_core import exceptions as gexc

    client = _subscriber(host)
    got = 0
    held: list[str] = []
    t0 = time.perf_counter()
    try:
        while got < n:
            try:
                resp = client.pull(request={"subscription": sub, "max_messages": 1000}, timeout=5.0, retry=None)
            except gexc.DeadlineExceeded:
                continue
            held.extend(rm.ack_id for rm in resp.received_messages)
            got += len(resp.received_messages)
            if held and (len(held) >= hold or got >= n):
                for i in range(0, len(held), 2500):
                    client.acknowledge(request={"subscription": sub, "ack_ids": held[i : i + 2500]})
                held = []
    finally:
        client.close()
    return time.perf_counter() - t0


def held_baseline(host: str | None, sub: str, n: int, hold: int = 4000) -> float:
    """Seconds for (a'): :func:`baseline` acknowledging every ``hold`` messages."""
    return baseline(host, sub, n, hold)


def receiver_alone(host: str | None, sub: str, n: int) -> float:
    """Seconds for the connector's receiver (no Spark) to take and acknowledge ``n`` messages."""
    from crdb_pubsub.source.driver import Receiver
    from crdb_pubsub.source.transport import Rpc, subscriber_client

    r = Receiver(
        Rpc(subscriber_client(host)),
        [sub],
        lease_seconds=60,
        max_lease_seconds=3600,
        max_messages=50_000,
        max_bytes=256 << 20,
    )
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


def streaming_subscriber(host: str | None, sub: str, n: int) -> float:
    """Seconds for google-cloud-pubsub's streaming subscriber to receive and ack ``n`` messages."""
    import threading

    from google.cloud.pubsub_v1.types import FlowControl

    client = _subscriber(host)
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


def connector(
    spark, host: str | None, sub: str, n: int, options: dict[str, str], cpu: ProcCpu | None = None
) -> tuple[float, int, int, float, float]:
    """(seconds, rows, batches, driver-side runner CPU s, executor workers CPU s) of one drain."""
    runners_before = cpu.runners() if cpu else set()
    executors_before = cpu.executor_seconds() if cpu else 0.0
    jvms_before = cpu.jvm_seconds() if cpu else (0.0, 0.0)
    tasks_before = cpu.jvm_task_seconds() if cpu else 0.0
    with tempfile.TemporaryDirectory(prefix="bench-stream-", ignore_cleanup_errors=True) as tmp:
        reader = spark.readStream.format("crdb_pubsub").option("subscription", sub)
        if host:
            reader = reader.option("emulatorHost", host)
        for k, v in options.items():
            reader = reader.option(k, v)
        if options.get("receiver") == "executors" and "stateDir" not in options:
            reader = reader.option("stateDir", os.path.join(tmp, "state"))
        df = reader.load()
        t0 = time.perf_counter()
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", os.path.join(tmp, "chk"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        elapsed = time.perf_counter() - t0
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        batches = sum(1 for p in q.recentProgress if p["numInputRows"])
    if cpu is None:
        return elapsed, rows, batches, 0.0, 0.0
    jvms = cpu.jvm_seconds()
    cpu.last_jvms = (jvms[0] - jvms_before[0], jvms[1] - jvms_before[1])
    cpu.last_jvm_tasks = cpu.jvm_task_seconds() - tasks_before
    time.sleep(0.2)  # a last sample of the runner before Spark reaps it has been taken
    runner = cpu.runner_seconds(cpu.runners() - runners_before)
    return elapsed, rows, batches, runner, cpu.executor_seconds() - executors_before


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--skip-alone", action="store_true", help="skip (r) and (s), the runs without Spark")
    ap.add_argument(
        "--project",
        help="the real Pub/Sub service in this project (Application Default Credentials; creates, bills, deletes)",
    )
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="extra source option")
    ap.add_argument("--emulator", action="store_true", help="Google's Pub/Sub emulator instead of fastpubsub")
    ap.add_argument(
        "--subscription-ack-deadline",
        type=int,
        default=60,
        metavar="SECONDS",
        help="the subscriptions' own ack deadline (gcloud creates them with 10 s; the source leases for "
        "ackDeadlineSeconds, 60 by default, extending each answer on receipt when this is shorter)",
    )
    ap.add_argument(
        "--columns",
        metavar="NAMES",
        help="the source's columns option, e.g. kind,table_name,key,after,mvcc_timestamp,error (the default mode, "
        "PERMISSIVE, needs error): only these are built by the workers and projected by the JVM",
    )
    args = ap.parse_args(argv)
    options = dict(o.split("=", 1) for o in args.option)
    if args.columns:
        options["columns"] = args.columns
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub
    from fastpubsub import bench_server

    where = contextlib.nullcontext(None) if args.project else bench_server(args.emulator, PROJECT)
    with where as host, _Resources(host, args.project or PROJECT, args.subscription_ack_deadline) as res:
        # Names unique to this run: a long-lived server (PUBSUB_EMULATOR_HOST, e.g. fastpubsub, or the
        # service) keeps an earlier run's topics, and CreateTopic on an existing name fails.
        t = f"-{os.getpid()}-{int(time.time())}" if args.project or os.environ.get("PUBSUB_EMULATOR_HOST") else ""
        topic, sub_a = res.create("bench" + t, "bench-baseline" + t)
        _, sub_b = res.create("bench" + t, "bench-connector" + t)
        _, sub_cold = res.create("bench" + t, "bench-cold" + t)
        _, sub_r = res.create("bench" + t, "bench-receiver" + t)
        _, sub_s = res.create("bench" + t, "bench-streaming" + t)
        _, sub_c = res.create("bench" + t, "bench-executors" + t)
        _, sub_h = res.create("bench" + t, "bench-held" + t)
        bodies = _bodies(args.messages)
        t0 = time.perf_counter()
        _publish(host, topic, bodies)
        print(
            f"published {len(bodies):,} messages ({sum(map(len, bodies)) / len(bodies):.0f} B avg) "
            f"in {time.perf_counter() - t0:.1f} s to one topic with seven subscriptions; source options {options or 'none'}"
        )
        r = s_ = None
        if not args.skip_alone:
            r = receiver_alone(host, sub_r, len(bodies))
            s_ = streaming_subscriber(host, sub_s, len(bodies))

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench-stream")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        crdb_pubsub.register(spark)
        cpu = ProcCpu()

        emulator_before = cpu.jvm_seconds()[1]
        a = baseline(host, sub_a, len(bodies))
        emulator_a = cpu.jvm_seconds()[1] - emulator_before
        a_held = held_baseline(host, sub_h, len(bodies))
        emulator_a_held = cpu.jvm_seconds()[1] - emulator_before - emulator_a
        cold, cold_rows, cold_batches, cold_drv, cold_exe = connector(spark, host, sub_cold, len(bodies), options, cpu)
        # Warm-up on its own small backlog, then the measured run.
        wtopic, wsub = res.create("warmup" + t, "warmup-sub" + t)
        warm_n = 2000
        _publish(host, wtopic, bodies[:warm_n])
        _, _, _, warm_drv, _ = connector(spark, host, wsub, warm_n, options, cpu)
        b, rows, batches, drv, exe = connector(spark, host, sub_b, len(bodies), options, cpu)
        spark_jvm, emulator_jvm = cpu.last_jvms
        jvm_tasks = cpu.last_jvm_tasks
        # (c): the same backlog pulled by the tasks (receiver=executors), after its own warm-up.
        ex_options = {**options, "receiver": "executors"}
        ex_options.setdefault("numPartitions", str(os.cpu_count() or 2))
        xtopic, xsub = res.create("warmup-ex" + t, "warmup-ex-sub" + t)
        _publish(host, xtopic, bodies[:warm_n])
        _, _, _, warm_drv_c, _ = connector(spark, host, xsub, warm_n, ex_options, cpu)
        c, rows_c, batches_c, drv_c, exe_c = connector(spark, host, sub_c, len(bodies), ex_options, cpu)
        spark_jvm_c = cpu.last_jvms[0]
        jvm_tasks_c = cpu.last_jvm_tasks
        cpu.stop()
        spark.stop()

    rate_a, rate_b, rate_cold = len(bodies) / a, rows / b, cold_rows / cold
    if r is not None and s_ is not None:
        print(
            f"(r) crdb_pubsub receiver alone       : {r:7.2f} s  {len(bodies) / r:9,.0f} msg/s  (unary Pull, no Spark)"
        )
        print(
            f"(s) library streaming subscriber     : {s_:7.2f} s  {len(bodies) / s_:9,.0f} msg/s  (StreamingPull + FlowControl, no Spark)"
        )
    print(f"(a) plain pull(1000)+ack loop        : {a:7.2f} s  {rate_a:9,.0f} msg/s")
    rate_held = len(bodies) / a_held
    print(
        f"(a') the loop, acknowledging per 4,000: {a_held:7.2f} s  {rate_held:9,.0f} msg/s  (holds, as ack-on-commit must; "
        f"emulator CPU {emulator_a_held:.1f} s against {emulator_a:.1f} s for (a))"
    )
    print(
        f"(b) crdb_pubsub AvailableNow, warm   : {b:7.2f} s  {rate_b:9,.0f} msg/s  ({rows:,} rows decoded, {batches} batches)"
    )
    print(
        f"    crdb_pubsub AvailableNow, cold   : {cold:7.2f} s  {rate_cold:9,.0f} msg/s  (first query of the session, "
        f"{cold_batches} batches)"
    )
    print(
        f"driver CPU per message: {(drv - warm_drv) / max(1, rows - warm_n) * 1e6:.1f} us  (warm query's runner "
        f"{drv:.2f} s, minus its start-up as the 2,000-message warm-up query's runner: {warm_drv:.2f} s; "
        f"cold query's runner {cold_drv:.2f} s)"
    )
    print(
        f"executor CPU per message: {exe / max(1, rows) * 1e6:.1f} us  (Python workers {exe:.2f} s over the warm "
        f"query; cold query {cold_exe:.2f} s, {cold_exe / max(1, cold_rows) * 1e6:.1f} us per message)"
    )
    print(
        f"    other CPU over the warm query: Spark JVM {spark_jvm:.2f} s, emulator {emulator_jvm:.2f} s "
        f"(wall {b:.2f} s on {os.cpu_count()} cores shared with whatever else runs)"
    )
    per = {
        "runner": (drv - warm_drv) / max(1, rows - warm_n) * 1e6,
        "workers": exe / max(1, rows) * 1e6,
        "JVM": spark_jvm / max(1, rows) * 1e6,
    }
    print(
        "CPU per message over the warm query, by process kind: "
        + " + ".join(f"{k} {v:.1f}" for k, v in per.items())
        + f" = {sum(per.values()):.1f} us (the JVM's includes its JIT compiler and the query's start; of it "
        f"its task threads {jvm_tasks / max(1, rows) * 1e6:.1f} us)"
    )
    rate_c = rows_c / c
    print(
        f"(c) crdb_pubsub receiver=executors   : {c:7.2f} s  {rate_c:9,.0f} msg/s  ({rows_c:,} rows, {batches_c} batches, "
        f"numPartitions {ex_options['numPartitions']}; ratio (c)/(a) = {rate_c / rate_a:.2f})"
    )
    print(
        f"    (c) driver CPU per message: {(drv_c - warm_drv_c) / max(1, rows_c - warm_n) * 1e6:.1f} us  (runner "
        f"{drv_c:.2f} s minus its start-up as the warm-up query's {warm_drv_c:.2f} s); executor CPU per message: "
        f"{exe_c / max(1, rows_c) * 1e6:.1f} us  (pull + record + decode in the tasks); Spark JVM "
        f"{spark_jvm_c / max(1, rows_c) * 1e6:.1f} us (its task threads {jvm_tasks_c / max(1, rows_c) * 1e6:.1f} us)"
    )
    print(
        f"against (a'), the emulator's ceiling for any consumer that holds messages until a commit: (a')/(a) = "
        f"{rate_held / rate_a:.2f}; (b)/(a') warm = {rate_b / rate_held:.2f}, cold = {rate_cold / rate_held:.2f}"
    )
    print(f"ratio (b)/(a) warm = {rate_b / rate_a:.2f}, cold = {rate_cold / rate_a:.2f}  (goal >= 0.8)")
    if rows != len(bodies) or cold_rows != len(bodies) or rows_c != len(bodies):
        print(f"WARNING: connector produced {rows}/{cold_rows}/{rows_c} rows for {len(bodies)} messages")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
