"""The driver side alone: CPU per message of the planner and receiver, without Spark or Pub/Sub.

The offset protocol over the driver mode (no stateDir) whose receiver pulls from a stand-in for Pub/Sub that
answers every Pull at once with recorded Pull responses of 100 realistic changefeed messages each
(serialised, and parsed by protobuf on each Pull as gRPC would), then drives Spark's calls the way
a backlog drain does, once ``--batch`` messages are buffered: ``latestOffset`` (which acknowledges the previous batch and seals the next),
``partitions`` (pickled, as Spark's runner ships them) and ``commit``. Prints the process CPU per
message over the drain: the driver-side work of the connector without the gRPC calls and without
contention from an emulator or Spark on the same cores (``bench_stream.py``'s figure includes
both).

    python examples/bench_driver.py [--messages 200000]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SUB = "projects/bench-project/subscriptions/bench-driver"
PER_PULL = 100  # what the emulator answers; the real service gives up to 1,000


def _responses(n: int) -> list[bytes]:
    from google.pubsub_v1.types import pubsub

    from bench_stream import _bodies

    pb = pubsub.PullResponse.pb()
    out = []
    bodies = _bodies(n)
    for i in range(0, n, PER_PULL):
        r = pb()
        for j, body in enumerate(bodies[i : i + PER_PULL]):
            rm = r.received_messages.add()
            rm.ack_id = f"{SUB}:{i + j}-{'x' * 40}"
            rm.message.data = body
            rm.message.message_id = str(10_000_000 + i + j)
            rm.message.publish_time.seconds = 1_700_000_000 + (i + j) // 1000
            rm.message.publish_time.nanos = (i + j) % 1000 * 1000
        out.append(r.SerializeToString())
    return out


class RecordedPubSub:
    """Answers Pulls from recorded responses, confirms every acknowledgement and lease."""

    def __init__(self, responses: list[bytes]) -> None:
        from google.pubsub_v1.types import pubsub

        self._pb = pubsub.PullResponse.pb()
        self._responses = responses
        self._lock = threading.Lock()

    def pull(self, sub: str, max_messages: int, timeout: float, return_immediately: bool = False):
        with self._lock:
            raw = self._responses.pop(0) if self._responses else None
        if raw is None:
            time.sleep(0.05)
            return self._pb()
        return self._pb.FromString(raw)

    def acknowledge(self, sub: str, ack_ids, total=None):
        from crdb_pubsub.source.transport import AckResult

        return AckResult(confirmed=list(ack_ids))

    def modify_ack_deadline(self, sub: str, ack_ids, seconds: int, total=None):
        from crdb_pubsub.source.transport import AckResult

        return AckResult(confirmed=list(ack_ids))

    def get_subscription(self, sub: str):
        class Info:
            ack_deadline_seconds = 60
            filter = ""

        return Info()


def _thread_cpu() -> dict[int, float]:
    """CPU seconds so far of each thread of this process (threads that ended are not listed)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument(
        "--batch",
        type=int,
        default=5000,
        help="seal once this many are buffered (bench_stream's warm drains make batches of 3,000-7,000 here)",
    )
    args = ap.parse_args(argv)
    n = args.messages

    from crdb_pubsub.source.core.protocol import OffsetProtocol
    from crdb_pubsub.source.driver import DriverMode, Receiver
    from crdb_pubsub.source.metrics import Counters
    from crdb_pubsub.source.options import parse_options

    pubsub = RecordedPubSub(_responses(n))
    options = parse_options({"subscription": SUB, "emulatorHost": "127.0.0.1:1"})

    made: list[Receiver] = []

    def receiver(opts, counters):
        made.append(
            Receiver(
                pubsub,
                opts.subscription_paths,
                lease_seconds=60,
                max_lease_seconds=3600,
                max_messages=opts.maxOutstandingMessages,
                max_bytes=opts.maxOutstandingBytes,
                counters=counters,
            )
        )
        return made[0]

    counters = Counters()
    planner = OffsetProtocol(options, DriverMode(options, counters, receiver_factory=receiver), counters)
    planner.initial_offset()
    threads0 = _thread_cpu()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    start, got, batches = {"batch": 0}, 0, 0
    while got < n:
        while made[0].buffered()[0] < min(args.batch, n - got):
            time.sleep(0.002)
        end = planner.latest(start, None, None)
        if end == start:
            time.sleep(0.001)
            continue
        pickle.dumps(planner.partitions(start, end))
        got += planner.report()["awaitingCommit"]
        batches += 1
        planner.commit(end)
        start = end
    planner.latest(start, None, None)  # acknowledges the last batch
    made[0].acker.flush(10)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    names = {t.native_id: t.name for t in threading.enumerate()}
    by_name: dict[str, float] = {}
    for tid, seconds in _thread_cpu().items():
        name = names.get(tid, "Spark-less main" if tid == os.getpid() else "other")
        name = "MainThread (Spark's calls)" if tid == os.getpid() else name
        by_name[name] = by_name.get(name, 0.0) + seconds - threads0.get(tid, 0.0)
    print(
        f"{n:,} messages in {batches} batches, {wall:.2f} s; driver CPU per message: {cpu / n * 1e6:.2f} us "
        f"(planner and receiver, no Spark, no Pub/Sub)"
    )
    planner.shutdown(within=5)
    print(
        "  by thread: "
        + ", ".join(f"{k} {v / n * 1e6:.2f} us" for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v > 0)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
