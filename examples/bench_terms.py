"""Benchmark on the service's terms: bench_stream.py against fastpubsub with a round trip and partial Pulls, beside the same at no round trip.

The real service answers a Pull after a network round trip (tens of milliseconds from a Dataproc
cluster in the same region), often with fewer messages than asked. ``examples/fastpubsub.py`` (an
in-memory Pub/Sub server, a measurement instrument outside the package) plays those terms: ``--rtt-ms``, ``--pull-cap``,
``--pull-fill``. For each round this script starts two fastpubsub servers, each in its own process,
one with the given terms and one with none, and runs ``examples/bench_stream.py`` against each;
then prints, per round and as medians: the connector's warm drain (b), ``receiver=executors``
(c), the plain pull(1000)+ack loop (a) and, at the given terms, the library's streaming
subscriber (s), the ratio of (b) and (c) at the terms to the same at no round trip, and the CPU
per message by process kind.

    python examples/bench_terms.py --rtt-ms 25 --pull-cap 1000 --pull-fill 0.3 --messages 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RATE = re.compile(r"([\d,]+) msg/s")
FIGURES = {
    "a": "(a) plain pull(1000)+ack loop",
    "b": "(b) crdb_pubsub AvailableNow, warm",
    "c": "(c) crdb_pubsub receiver=executors",
    "s": "(s) library streaming subscriber",
}
CPU = re.compile(r"by process kind: runner ([\d.-]+) \+ workers ([\d.-]+) \+ JVM ([\d.-]+) = ([\d.-]+) us")


def _server(terms: dict[str, float]) -> tuple[subprocess.Popen, str]:
    """fastpubsub in a process of its own (its CPU apart from the measured processes')."""
    from fastpubsub import spawn

    return spawn(0, **terms)


def _bench(host: str, messages: int, alone: bool, extra: list[str]) -> dict[str, float]:
    env = dict(os.environ, PUBSUB_EMULATOR_HOST=host)
    args = [sys.executable, str(HERE / "bench_stream.py"), "--messages", str(messages), *extra]
    if not alone:
        args.append("--skip-alone")
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(f"bench_stream.py failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    got: dict[str, float] = {}
    for line in out.stdout.splitlines():
        for key, head in FIGURES.items():
            if line.startswith(head):
                got[key] = float(RATE.search(line).group(1).replace(",", ""))
        m = CPU.search(line)
        if m:
            got.update(zip(("runner", "workers", "jvm", "cpu"), map(float, m.groups())))
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt-ms", type=float, default=25.0)
    ap.add_argument("--pull-cap", type=int, default=1000)
    ap.add_argument("--pull-fill", type=float, default=0.3)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="passed to bench_stream.py")
    ap.add_argument("--subscription-ack-deadline", type=int, default=60, help="passed to bench_stream.py")
    args = ap.parse_args(argv)
    terms = {"rtt_ms": args.rtt_ms, "pull_cap": args.pull_cap, "pull_fill": args.pull_fill}
    shown = f"--rtt-ms {args.rtt_ms} --pull-cap {args.pull_cap} --pull-fill {args.pull_fill}"
    extra = [f"--option={o}" for o in args.option]
    extra.append(f"--subscription-ack-deadline={args.subscription_ack_deadline}")
    rows: list[tuple[dict[str, float], dict[str, float]]] = []
    for i in range(args.rounds):
        runs = []
        for server_terms, alone in ((terms, True), ({}, False)):
            proc, host = _server(server_terms)
            try:
                runs.append(_bench(host, args.messages, alone, extra))
            finally:
                proc.terminate()
                proc.wait(10)
        at, local = runs
        rows.append((at, local))
        print(
            f"round {i + 1}: at {shown}: (b) {at['b']:,.0f} (c) {at['c']:,.0f} (a) {at['a']:,.0f} "
            f"(s) {at.get('s', 0):,.0f} msg/s; at rtt 0: (b) {local['b']:,.0f} (c) {local['c']:,.0f} "
            f"(a) {local['a']:,.0f}; (b) {at['b'] / local['b']:.2f}x, (c) {at['c'] / local['c']:.2f}x of rtt 0; "
            f"CPU/msg at the terms: runner {at['runner']:.1f} + workers {at['workers']:.1f} + JVM {at['jvm']:.1f} "
            f"= {at['cpu']:.1f} us",
            flush=True,
        )

    def med(f) -> str:
        values = [f(at, local) for at, local in rows]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(f"median of {len(rows)} rounds (range):")
    print(f"  (b) at the terms / (b) at rtt 0: {med(lambda at, lo: at['b'] / lo['b'])}")
    print(f"  (c) at the terms / (c) at rtt 0: {med(lambda at, lo: at['c'] / lo['c'])}")
    print(f"  (b) at the terms / (a) at the terms: {med(lambda at, lo: at['b'] / at['a'])}")
    print(f"  (b) at the terms / (s) at the terms: {med(lambda at, lo: at['b'] / max(1.0, at.get('s', 0)))}")
    print(f"  CPU per message at the terms, us: {med(lambda at, lo: at['cpu'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
