"""Executor-side CPU of the source's ``read()`` on one partition, beside a baseline in the same run.

    python examples/bench_read.py [--messages 25000] [--attributes]

(a) baseline: ``decode_messages`` on the partition's columns turned into Python lists (what
``read()`` did before it passed the Arrow columns through: ``to_pylist`` of every column and a
dict per message's attributes); (b) ``CrdbPubSubStreamReader.read()`` itself on the same Arrow
IPC payload. Realistic changefeed traffic from the simulator; ``--attributes`` adds the
``TABLE_NAME`` attribute to every message (``with_table_name_attribute=true``). No Spark, no
Pub/Sub: CPU time of this process, best of 5.
"""

from __future__ import annotations

import argparse
import time

from crdb_pubsub.decode import decode_messages
from crdb_pubsub.source.datasource import CrdbPubSubDataSource, MessagesPartition
from crdb_pubsub.source.wire import from_ipc, messages_batch, to_ipc
from crdb_pubsub.tools.simulator import ChangefeedSimulator


def best_cpu(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=25_000)
    p.add_argument("--attributes", action="store_true")
    args = p.parse_args()

    sim = ChangefeedSimulator(
        seed=1, updated=True, diff=True, resolved_every=200, with_table_name_attribute=args.attributes
    )
    msgs = list(sim.events(args.messages))[: args.messages]
    n = len(msgs)
    batch = messages_batch(
        [m.data for m in msgs],
        [str(i) for i in range(n)],
        [1_700_000_000_000_000 + i for i in range(n)],
        [list(m.attributes.items()) or None for m in msgs],
        [m.ordering_key or None for m in msgs],
    )
    ipc = to_ipc(batch)
    ds = CrdbPubSubDataSource({"subscription": "projects/p/subscriptions/bench", "emulatorHost": "127.0.0.1:1"})
    reader = ds.streamReader(ds.schema())
    part = MessagesPartition(1, 0, ipc, None)

    def lists() -> None:
        table = from_ipc(ipc)
        attrs = table.column("attributes").to_pylist()
        decode_messages(
            table.column("data").to_pylist(),
            message_ids=table.column("message_id").to_pylist(),
            publish_times=table.column("publish_us").to_pylist(),
            attributes=[dict(a) if a else None for a in attrs],
            ordering_keys=table.column("ordering_key").to_pylist(),
        )

    def read() -> None:
        for _ in reader.read(part):
            pass

    a = best_cpu(lists)
    b = best_cpu(read)
    print(f"{n} messages{' with TABLE_NAME attributes' if args.attributes else ''}, best of 5, CPU:")
    print(f"(a) decode_messages on Python lists: {a / n * 1e6:.2f} us/message")
    print(f"(b) read() on the Arrow partition:   {b / n * 1e6:.2f} us/message")
    print(f"ratio (a)/(b) = {a / b:.2f}")


if __name__ == "__main__":
    main()
