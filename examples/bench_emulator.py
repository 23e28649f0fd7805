"""What the Pub/Sub emulator charges for holding messages: the ceiling of any ack-on-commit consumer.

For each backlog size, one topic and two subscriptions holding the same backlog, drained without
Spark by the same synchronous pull(1,000) loop:

  (a)  acknowledging each Pull's messages before the next Pull (nothing is ever outstanding);
  (a') acknowledging every 4,000 messages (a micro-batch's worth stays outstanding meanwhile, as
       with any consumer that acknowledges only after its batch committed).

Prints each rate, the emulator's CPU per message (from /proc), and the CPU per message of the loop's
thread (the client; gRPC's own threads are not counted). While any message is outstanding, each
Pull of the emulator (at most 100 messages) copies the subscription's whole set of undelivered
messages (``MessageBacklog.updateExpiredAckDeadlines`` in ``cloud-pubsub-emulator-*.jar``), so
(a')'s emulator CPU per message grows with the backlog (draining B messages costs it O(B^2 / 100)),
while (a) never pays it; on a small machine that work also competes for the cores with everything
else. The real service answers a Pull with up to 1,000 messages and does not work this way. Not a
test: the figures are for the README and the notes.

    python examples/bench_emulator.py [--sizes 25000,50000,100000,200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_stream import PROJECT, ProcCpu, _bodies, _publish, baseline, held_baseline

HELD = "(a')"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25000,50000,100000,200000", help="backlog sizes, comma-separated")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    from crdb_pubsub.emulator import create_topic_and_subscription, emulator

    bodies = _bodies(max(sizes))
    print(
        f"{'backlog':>8}  {'(a) msg/s':>10} {'emulator':>9} {'client':>8}   {HELD + ' msg/s':>10} {'emulator':>9} "
        f"{'client':>8}   (a')/(a)   [CPU per message]"
    )
    for k, n in enumerate(sizes):
        # A fresh emulator per size: its JIT warms up on a small drain first, then both loops run.
        with emulator(project=PROJECT) as host:
            wtopic, wsub = create_topic_and_subscription(host, PROJECT, "warm", "warm-sub", ack_deadline_seconds=60)
            _publish(host, wtopic, bodies[:5000])
            baseline(host, wsub, 5000)
            topic, sub_a = create_topic_and_subscription(
                host, PROJECT, f"backlog-{k}", f"backlog-{k}-acked", ack_deadline_seconds=60
            )
            _, sub_h = create_topic_and_subscription(
                host, PROJECT, f"backlog-{k}", f"backlog-{k}-held", ack_deadline_seconds=60, exist_ok=True
            )
            _publish(host, topic, bodies[:n])
            cpu = ProcCpu()
            try:
                figures = []
                for run, sub in ((baseline, sub_a), (held_baseline, sub_h)):
                    e0, c0 = cpu.jvm_seconds()[1], time.thread_time()
                    seconds = run(host, sub, n)
                    figures.append(
                        (n / seconds, (cpu.jvm_seconds()[1] - e0) / n * 1e6, (time.thread_time() - c0) / n * 1e6)
                    )
            finally:
                cpu.stop()
        (ra, ea, ca), (rh, eh, ch) = figures
        print(
            f"{n:>8,}  {ra:>10,.0f} {ea:>7.1f}us {ca:>6.1f}us   {rh:>10,.0f} {eh:>7.1f}us {ch:>6.1f}us   {rh / ra:8.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
