"""Throughput of ``crdb_pubsub.decode_messages`` beside a plain ``orjson.loads`` loop, same bodies.

    python examples/bench_decode.py [--messages 200000] [--repeat 3]

Bodies are what CockroachDB's Pub/Sub v2 sink publishes for a movr ``vehicles`` changefeed with
``updated``: the compact ``{"Key":...,"Value":...,"Topic":...}`` wrapper around the JSON encoder's
``", "``/``": "`` layout, keys sorted, DECIMAL digits kept (``26.30``). ``decode_messages`` gets the
Pub/Sub metadata too (ids, publish times, empty attributes, no ordering key) and its figure includes
building the Arrow record batch. The baseline only parses (``[orjson.loads(b) for b in bodies]``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time
import uuid

import orjson

import crdb_pubsub

CITIES = ["amsterdam", "boston", "los angeles", "new york", "paris", "rome", "san francisco", "seattle"]
COLORS = ["black", "blue", "green", "red", "yellow"]
TYPES = ["bike", "scooter", "skateboard"]


def _q(text: str) -> str:
    return orjson.dumps(text).decode()


def make_bodies(count: int, seed: int = 7) -> list[bytes]:
    """``count`` Pub/Sub bodies laid out byte for byte as CockroachDB's v2 sink + JSON encoder do.

    A movr-like ``vehicles`` row (strings, UUIDs, a DECIMAL(10,2), a TIMESTAMP, a JSONB column),
    about 300 bytes per message.
    """
    rng = random.Random(seed)
    out = []
    wall = 1_747_243_394_200_039_000
    for _ in range(count):
        city = rng.choice(CITIES)
        vid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        created = dt.datetime(2025, 1, 1) + dt.timedelta(seconds=rng.randrange(10_000_000))
        price = f"{rng.randrange(0, 100000) / 100:.2f}"  # DECIMAL(10,2): the trailing zero is kept
        after = (
            "{"
            f'"city": {_q(city)}, '
            f'"creation_time": "{created.isoformat()}", '
            f'"ext": {{"color": {_q(rng.choice(COLORS))}}}, '
            f'"id": "{vid}", '
            f'"price": {price}, '
            f'"type": {_q(rng.choice(TYPES))}'
            "}"
        )
        wall += rng.randrange(1, 5_000_000)
        value = f'{{"after": {after}, "updated": "{wall}.{rng.randrange(3):010d}"}}'
        out.append(f'{{"Key":[{_q(city)}, "{vid}"],"Value":{value},"Topic":"vehicles"}}'.encode())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    args = parser.parse_args()

    bodies = make_bodies(args.messages)
    n = len(bodies)
    ids = [str(10_000_000 + i) for i in range(n)]
    t0 = int(dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc).timestamp() * 1_000_000)
    publish = [t0 + i for i in range(n)]
    attrs: list[dict[str, str]] = [{} for _ in range(n)]
    ordering = [""] * n
    print(f"{n} bodies, mean {sum(map(len, bodies)) / n:.0f} bytes; e.g.\n{bodies[0].decode()}\n")

    crdb_pubsub.decode_messages(bodies[:100])  # warm caches (pyspark schema conversion)

    def run_baseline() -> None:
        [orjson.loads(b) for b in bodies]

    def run_decode() -> None:
        batch = crdb_pubsub.decode_messages(
            bodies, message_ids=ids, publish_times=publish, attributes=attrs, ordering_keys=ordering
        )
        assert batch.num_rows == n and batch.column(batch.schema.get_field_index("kind")).null_count == 0

    def best(fn) -> float:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    base = best(run_baseline)
    ours = best(run_decode)
    print(f"baseline  [orjson.loads(b) for b in bodies]: {n / base:12,.0f} msg/s  ({base:.3f} s)")
    print(f"crdb_pubsub.decode_messages (RecordBatch):   {n / ours:12,.0f} msg/s  ({ours:.3f} s)")
    print(f"ratio decode/baseline: {base / ours:.2f}x")


if __name__ == "__main__":
    main()
