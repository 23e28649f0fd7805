"""What a micro-batch costs the ``stateDir``: storage operations and their time, per receiver mode,
on a folder and on Cloud Storage (the test server, or real GCS with a bucket you own).

    python examples/bench_state.py [--batches 20] [--messages 1000] [--partitions 4] [--gcs gs://bucket/prefix]

Spark's calls are played in-process (``tests/spark_calls.py``) against the test suite's in-memory
Pub/Sub (``tests/fake_pubsub.py``), so what is measured is the source's own work with its state:
every call on the storage is counted and timed (the lease renewals in their background threads
too), and the figures are per batch of ``--messages`` messages. Without ``--gcs`` the Cloud Storage
test server of the test suite (``fake-gcs-server``, loopback, in memory) is started: its latency
is a floor, real GCS adds tens of milliseconds per call (measure with ``--gcs``).
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import tempfile
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
SUB = "projects/bench/subscriptions/state-bench"
OPERATIONS = ("create", "read", "stat", "open_input", "list", "delete", "delete_prefix", "read_versioned", "swap")


class Counted:
    """Counts and times every storage call (all threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0

    def wrap(self, cls: type) -> None:
        for name in OPERATIONS:
            original = getattr(cls, name)

            @functools.wraps(original)
            def timed(self_, *a, __original=original, __name=name, **kw):
                t0 = time.perf_counter()
                try:
                    return __original(self_, *a, **kw)
                finally:
                    with self.lock:
                        self.calls[__name] += 1
                        self.seconds += time.perf_counter() - t0

            setattr(cls, name, timed)

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.seconds = 0.0


def body(i: int) -> bytes:
    return (
        f'{{"Key":["amsterdam", "{i:032x}"],"Value":{{"after": {{"city": "amsterdam", "id": "{i:032x}", '
        f'"rider_id": "{i:032x}", "revenue": 26.30}}, "updated": "1700000000000000000.0000000000"}},'
        f'"Topic":"rides"}}'
    ).encode()


def run(url: str, receiver: str, batches: int, messages: int, partitions: int, counted: Counted) -> dict:
    sys.path.insert(0, str(TESTS))
    import crdb_pubsub.source.transport as transport
    from crdb_pubsub.source.datasource import CrdbPubSubDataSource
    from fake_pubsub import FakePubSub
    from spark_calls import Logs, SparkCalls

    service = FakePubSub()
    transport.subscriber_client = lambda host=None, credentials=None, **kw: service.client()
    service.create_subscription(SUB, ack_deadline=30)
    options = {
        "subscription": SUB,
        "emulatorHost": "127.0.0.1:1",
        "stateDir": url,
        "receiver": receiver,
        "ackDeadlineSeconds": "30",
        "maxMessagesPerTrigger": str(messages),
    }
    if receiver == "executors":
        options["numPartitions"] = str(partitions)
    ds = CrdbPubSubDataSource(options)
    reader = ds.streamReader(ds.schema())
    calls = SparkCalls(reader, Logs())
    calls.start()
    n = 0

    def batch() -> None:
        nonlocal n
        service.publish(SUB, [body(n + i) for i in range(messages)])
        n += messages
        while not calls.trigger():
            time.sleep(0.01)
        calls.batches.clear()

    for _ in range(3):  # warm up: the lease, the first plan and commit records
        batch()
    counted.reset()
    t0 = time.perf_counter()
    for _ in range(batches):
        batch()
    wall = time.perf_counter() - t0
    with counted.lock:
        ops = dict(counted.calls)
        seconds = counted.seconds
    reader.stop()
    return {"ops": ops, "storage_ms": seconds * 1000 / batches, "wall_ms": wall * 1000 / batches}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--messages", type=int, default=1000, help="messages per batch")
    ap.add_argument("--partitions", type=int, default=4, help="numPartitions of receiver=executors")
    ap.add_argument("--gcs", help="gs://bucket/prefix to measure (default: the test server)")
    args = ap.parse_args(argv)

    from crdb_pubsub.source.storage.gcs import GcsStorage
    from crdb_pubsub.source.storage.posix import PosixStorage

    counted = Counted()
    counted.wrap(PosixStorage)
    counted.wrap(GcsStorage)
    server = None
    if args.gcs is None:
        sys.path.insert(0, str(TESTS))
        import os

        from gcs_server import start_gcs_server

        server = start_gcs_server()
        os.environ["STORAGE_EMULATOR_HOST"] = server.endpoint
    rows = []
    try:
        for storage in ("folder", "gs://"):
            for receiver in ("driver", "executors"):
                if storage == "folder":
                    url = tempfile.mkdtemp(prefix="bench-state-")
                else:
                    url = (args.gcs.rstrip("/") if args.gcs else server.url("bench")) + f"/{receiver}-{time.time_ns()}"
                rows.append(
                    (storage, receiver, run(url, receiver, args.batches, args.messages, args.partitions, counted))
                )
    finally:
        if server is not None:
            server.stop()
    print(
        f"per micro-batch of {args.messages} messages ({args.batches} batches; executors: "
        f"numPartitions {args.partitions}):"
    )
    print(
        f"{'storage':8} {'receiver':10} {'writes':>7} {'reads':>7} {'lists':>6} {'deletes':>8} {'CAS':>5} "
        f"{'storage ms':>11} {'batch ms':>9}"
    )
    for storage, receiver, r in rows:
        ops = collections.Counter(r["ops"])
        per = {k: v / args.batches for k, v in ops.items()}
        writes = per.get("create", 0)
        reads = per.get("read", 0) + per.get("open_input", 0) + per.get("stat", 0) + per.get("read_versioned", 0)
        lists = per.get("list", 0)
        deletes = per.get("delete", 0) + per.get("delete_prefix", 0)
        cas = per.get("swap", 0)
        print(
            f"{storage:8} {receiver:10} {writes:7.1f} {reads:7.1f} {lists:6.1f} {deletes:8.1f} {cas:5.1f} "
            f"{r['storage_ms']:11.1f} {r['wall_ms']:9.1f}"
        )
    print("(calls per batch; a delete of several keys is one call: one request per key on Cloud Storage)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
