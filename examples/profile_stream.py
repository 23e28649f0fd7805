"""Where a warm micro-batch query's time goes: Spark's per-phase durations, CPU per process kind,
and optionally the JVM's and the Python processes' profiles.

    python examples/profile_stream.py --messages 200000 \\
        [--jfr /tmp/warm.jfr] [--pyspy /tmp/pyspy] [--option key=value ...] [--repeat 1]

Against ``examples/fastpubsub.py`` in a process of its own (``PUBSUB_EMULATOR_HOST`` when set,
Google's emulator with ``--emulator``). One backlog per measured query on one topic, a
2,000-message warm-up query first, then ``--repeat`` warm queries (Trigger.AvailableNow into the
noop sink), each reported with: msg/s, batches, the sum over its batches of Spark's
``durationMs`` phases (``latestOffset``, ``queryPlanning``, ``walCommit``, ``addBatch``,
``commitOffsets``, ``triggerExecution``), and CPU per message of the driver-side runner, the
Python workers and Spark's JVM (from /proc, as ``bench_stream.py``).

``--jfr F``: JDK Flight Recorder over the (first) warm query only (``jcmd JFR.start``/``JFR.stop``),
then the top frames of its execution samples (self and with callers folded to Spark/Arrow/...
packages). ``--pyspy DIR``: ``py-spy record`` of the runner and of the workers' daemon
(``--subprocesses``) over that query, flame files and the top functions, in ``DIR``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_stream import PROJECT, RUNNER_MODULE, ProcCpu, _bodies, _publish

PHASES = (
    "startToFirstTrigger",
    "lastTriggerToEnd",
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def _java_pid(cpu: ProcCpu) -> int:
    for pid, cmd, _, _ in cpu._procs():
        if "java" in cmd.split(" ", 1)[0] and ("org.apache.spark" in cmd or "pyspark" in cmd):
            return pid
    raise RuntimeError("no Spark JVM below this process")


def jvm_threads(pid: int) -> collections.Counter:
    """CPU seconds so far of each thread (by name, digits folded) of process ``pid``, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: collections.Counter[str] = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = re.sub(r"\d+", "N", f.read().strip())
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _pids(cpu: ProcCpu, needle: str, exclude: tuple[str, ...] = ()) -> list[int]:
    return [pid for pid, cmd, _, _ in cpu._procs() if needle in cmd and not any(x in cmd for x in exclude)]


class PySpy:
    """``py-spy record`` of the query's runner (once it appears) and of the workers' daemon."""

    def __init__(self, cpu: ProcCpu, out: str, known_runners: set[int]) -> None:
        self.cpu, self.out, self.known = cpu, out, known_runners
        self.procs: list[subprocess.Popen] = []
        self._stop = threading.Event()
        os.makedirs(out, exist_ok=True)
        daemons = _pids(cpu, "pyspark.daemon", ("lookup_data_sources", "create_data_source", "plan_data_source_read"))
        for pid in daemons[:1]:
            self._record(pid, "workers", subprocesses=True)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _record(self, pid: int, name: str, subprocesses: bool = False) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
        cmd = [exe, "record", "-p", str(pid), "-r", "200", "-f", "raw", "-o", os.path.join(self.out, f"{name}.txt")]
        if subprocesses:
            cmd.append("--subprocesses")
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            new = [p for p in _pids(self.cpu, RUNNER_MODULE) if p not in self.known]
            if new:
                self._record(new[0], "runner")
                return

    def stop(self) -> None:
        self._stop.set()
        for p in self.procs:
            p.send_signal(2)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def top_pyspy(path: str, n: int = 25) -> list[str]:
    """Self and inclusive sample counts per function of a py-spy raw (folded) file."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            c = int(count)
            frames = [re.sub(r" \(.*?([^/]+\.py):\d+\)", r" (\1)", fr) for fr in stack.split(";")]
            frames = [fr for fr in frames if not fr.startswith("process ") and not fr.startswith("thread ")]
            if not frames:
                continue
            total += c
            own[frames[-1]] += c
            for fr in set(frames):
                incl[fr] += c
    lines = [f"  samples {total}; self:"]
    lines += [f"    {100 * c / total:5.1f}%  {fr}" for fr, c in own.most_common(n)]
    lines.append("  inclusive:")
    lines += [f"    {100 * c / total:5.1f}%  {fr}" for fr, c in incl.most_common(n)]
    return lines


def top_jfr(path: str, n: int = 30) -> list[str]:
    """Top self frames and top 'first frame in a package' of the JFR execution samples."""
    text = subprocess.run(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for ev in text.split("jdk.ExecutionSample")[1:]:
        frames = re.findall(r"^\s+([\w$.<>/]+)\(.*?line:", ev, re.M)
        m = re.search(r'sampledThread = "([^"]*)"', ev)
        if not frames:
            continue
        total += 1
        threads[re.sub(r"\d+", "N", m.group(1)) if m else "?"] += 1
        own[frames[0]] += 1
        for fr in set(frames):
            incl[fr] += 1
    lines = [f"  samples {total}; sampled threads:"]
    lines += [f"    {100 * c / total:5.1f}%  {t}" for t, c in threads.most_common(8)]
    # Every thread's CPU (compiler and GC threads included, which execution samples never show).
    loads = subprocess.run(
        ["jfr", "print", "--events", "jdk.ThreadCPULoad", path], capture_output=True, text=True, check=True
    ).stdout
    cpu: collections.Counter[str] = collections.Counter()
    for ev in loads.split("jdk.ThreadCPULoad")[1:]:
        u = re.search(r"user = ([\d.]+)%", ev)
        s = re.search(r"system = ([\d.]+)%", ev)
        t = re.search(r'eventThread = "([^"]*)"', ev)
        if u and s and t:
            cpu[re.sub(r"\d+", "N", t.group(1))[:60]] += float(u.group(1)) + float(s.group(1))
    whole = sum(cpu.values()) or 1.0
    lines.append("  CPU by thread (jdk.ThreadCPULoad):")
    lines += [f"    {100 * c / whole:5.1f}%  {t}" for t, c in cpu.most_common(10)]
    lines.append("  self:")
    lines += [f"    {100 * c / total:5.1f}%  {fr}" for fr, c in own.most_common(n)]
    lines.append("  inclusive:")
    lines += [f"    {100 * c / total:5.1f}%  {fr}" for fr, c in incl.most_common(n)]
    return lines


def run_query(spark, host: str, sub: str, options: dict[str, str], cpu: ProcCpu) -> dict:
    runners_before = cpu.runners()
    jpid = _java_pid(cpu)
    threads_before = jvm_threads(jpid)
    exe_before = cpu.executor_seconds()
    jvm_before = cpu.jvm_seconds()[0]
    with tempfile.TemporaryDirectory(prefix="profile-stream-", ignore_cleanup_errors=True) as tmp:
        reader = spark.readStream.format("crdb_pubsub").option("subscription", sub).option("emulatorHost", host)
        for k, v in options.items():
            reader = reader.option(k, v)
        if options.get("receiver") == "executors" and "stateDir" not in options:
            reader = reader.option("stateDir", os.path.join(tmp, "state"))
        df = reader.load()
        t0, wall0 = time.perf_counter(), time.time()
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", os.path.join(tmp, "chk"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        elapsed = time.perf_counter() - t0
        wall1 = time.time()
        progress = list(q.recentProgress)
    jvm = cpu.jvm_seconds()[0] - jvm_before
    threads = jvm_threads(jpid)
    threads.subtract(threads_before)
    time.sleep(0.2)
    runner = cpu.runner_seconds(cpu.runners() - runners_before)
    import datetime

    def ts(p: dict) -> float:
        return datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    first = ts(progress[0]) if progress else wall1
    last_end = ts(progress[-1]) + progress[-1]["durationMs"].get("triggerExecution", 0) / 1e3 if progress else wall1
    phases = collections.Counter()
    phases["startToFirstTrigger"] = round((first - wall0) * 1e3)
    phases["lastTriggerToEnd"] = round((wall1 - last_end) * 1e3)
    for p in progress:
        for k, v in (p["durationMs"] or {}).items():
            phases[k] += v
    return {
        "seconds": elapsed,
        "rows": sum(p["numInputRows"] for p in progress),
        "batches": [p["numInputRows"] for p in progress if p["numInputRows"]],
        "phases": phases,
        "runner": runner,
        "workers": cpu.executor_seconds() - exe_before,
        "jvm": jvm,
        "threads": threads,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each round: (a), then every variant once")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:K=V,K=V",
        help="a set of source options to compare (default: one variant, 'default', with --option)",
    )
    ap.add_argument("--jfr", help="JFR recording of one warm query (--at) to this file")
    ap.add_argument("--pyspy", help="py-spy recordings of one warm query (--at) into this folder")
    ap.add_argument("--at", type=int, default=0, help="which warm query --jfr/--pyspy record (0: the first)")
    ap.add_argument("--jfc", default="profile", help="JFR settings (a .jfc file, or 'profile')")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="option of every variant")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark conf")
    ap.add_argument("--no-baseline", action="store_true", help="skip (a), the plain pull(1000)+ack loop")
    ap.add_argument("--emulator", action="store_true", help="Google's Pub/Sub emulator instead of fastpubsub")
    args = ap.parse_args(argv)
    common = dict(o.split("=", 1) for o in args.option)
    variants: list[tuple[str, dict[str, str]]] = []
    for v in args.variant or ["default:"]:
        name, _, rest = v.partition(":")
        variants.append((name, {**common, **dict(kv.split("=", 1) for kv in rest.split(",") if kv)}))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import crdb_pubsub
    from bench_stream import baseline
    from crdb_pubsub.emulator import create_topic_and_subscription
    from fastpubsub import bench_server

    with bench_server(args.emulator, PROJECT) as host:
        tag = f"{os.getpid()}-{int(time.time())}"  # a long-lived fastpubsub keeps earlier runs' topics
        names = [f"a{r}" for r in range(args.repeat)] if not args.no_baseline else []
        names += [f"{name}-{r}" for r in range(args.repeat) for name, _ in variants]
        topic = None
        subs: dict[str, str] = {}
        for name in names:
            topic, subs[name] = create_topic_and_subscription(
                host, PROJECT, f"prof-{tag}", f"prof-{tag}-{name}", ack_deadline_seconds=60, exist_ok=True
            )
        bodies = _bodies(args.messages)
        _publish(host, topic, bodies)
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("profile-stream")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
        )
        for c in args.conf:
            k, v = c.split("=", 1)
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        crdb_pubsub.register(spark)
        cpu = ProcCpu()
        # Warm-up: one 2,000-message query per variant (its runner's CPU is the start-up subtracted).
        warm: dict[str, dict] = {}
        for name, options in variants:
            wtopic, wsub = create_topic_and_subscription(
                host, PROJECT, f"prof-w-{tag}-{name}", f"prof-w-{tag}-{name}", ack_deadline_seconds=60
            )
            _publish(host, wtopic, bodies[:2000])
            warm[name] = run_query(spark, host, wsub, options, cpu)
            print(
                f"warm-up {name}: {warm[name]['rows']} rows in {warm[name]['seconds']:.2f} s, "
                f"runner {warm[name]['runner']:.2f} s"
            )
        table: list[tuple[int, str, float, float, float, float, float, int]] = []
        k = 0
        for r in range(args.repeat):
            rate_a = None
            if not args.no_baseline:
                rate_a = len(bodies) / baseline(host, subs[f"a{r}"], len(bodies))
                print(f"round {r}: (a) pull(1000)+ack loop {rate_a:,.0f} msg/s")
            for name, options in variants:
                spy = None
                if k == args.at and args.jfr:
                    subprocess.run(
                        [
                            "jcmd",
                            str(_java_pid(cpu)),
                            "JFR.start",
                            "name=warm",
                            f"settings={args.jfc}",
                            f"filename={args.jfr}",
                        ],
                        check=True,
                        capture_output=True,
                    )
                if k == args.at and args.pyspy:
                    spy = PySpy(cpu, args.pyspy, cpu.runners())
                q = run_query(spark, host, subs[f"{name}-{r}"], options, cpu)
                if k == args.at and args.jfr:
                    subprocess.run(
                        ["jcmd", str(_java_pid(cpu)), "JFR.stop", "name=warm"], check=True, capture_output=True
                    )
                if spy is not None:
                    spy.stop()
                k += 1
                n = max(1, q["rows"])
                rate = q["rows"] / q["seconds"]
                runner = (q["runner"] - warm[name]["runner"]) / n * 1e6
                workers, jvm = q["workers"] / n * 1e6, q["jvm"] / n * 1e6
                table.append((r, name, rate, rate / rate_a if rate_a else 0.0, runner, workers, jvm, len(q["batches"])))
                print(
                    f"round {r} {name}: {q['rows']:,} rows in {q['seconds']:.2f} s = {rate:,.0f} msg/s"
                    + (f" ({rate / rate_a:.2f} of (a))" if rate_a else "")
                    + f"; {len(q['batches'])} batches "
                    f"{q['batches']}"
                )
                print(
                    f"  CPU us/msg: runner {runner:.1f} (raw {q['runner']:.2f} s), workers {workers:.1f}, "
                    f"JVM {jvm:.1f}; total {runner + workers + jvm:.1f}"
                )
                print("  durationMs summed: " + ", ".join(f"{p} {q['phases'].get(p, 0)}" for p in PHASES))
                print(
                    "  JVM threads us/msg: "
                    + ", ".join(f"{t} {c / n * 1e6:.1f}" for t, c in q["threads"].most_common(8))
                )
        cpu.stop()
        spark.stop()
    print("summary (median over rounds): variant, msg/s, ratio to (a), CPU us/msg runner/workers/JVM/total, batches")
    for name, _ in variants:
        rows = [t for t in table if t[1] == name]

        def med(i: int, rows: list = rows) -> float:
            return statistics.median(t[i] for t in rows)

        print(
            f"  {name:24s} {med(2):9,.0f} {med(3):5.2f}  {med(4):5.1f} {med(5):5.1f} {med(6):5.1f} "
            f"{med(4) + med(5) + med(6):6.1f}  {med(7):.0f}"
        )
    if args.jfr:
        print(f"JFR {args.jfr}:")
        print("\n".join(top_jfr(args.jfr)))
    if args.pyspy:
        for f in sorted(glob.glob(os.path.join(args.pyspy, "*.txt"))):
            print(f"py-spy {f}:")
            print("\n".join(top_pyspy(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
