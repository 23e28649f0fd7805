"""Throughput of ``crdb_pubsub.decode_messages`` beside a plain ``orjson.loads`` loop, same bodies.

    python examples/bench_decode.py [--envelope wrapped|typed|bare|enriched|debezium|all]
                                    [--messages 100000] [--repeat 3]

Each envelope gets its own bodies, laid out byte for byte as their producer writes them:

* ``wrapped``: CockroachDB's Pub/Sub v2 sink (``{"Key":...,"Value":...,"Topic":...}``, the compact
  wrapper around the JSON encoder's ``", "``/``": "`` layout, keys sorted, DECIMAL digits kept
  (``26.30``)) for a movr ``vehicles`` changefeed with ``updated``;
* ``typed``: the same wrapped layout with a BIGINT column, decoded with a ``row_schema``
  (STRINGs, ``BIGINT``, ``DECIMAL(12,2)``), so ``before``/``after`` become Arrow structs;
* ``bare``: ``envelope=bare`` through the v2 sink (``__crdb__`` holding ``updated`` inside the row);
* ``enriched``: ``envelope=enriched, enriched_properties='source'`` through the v2 sink (Key as an
  object, ``op``, ``source``, ``ts_ns``);
* ``debezium``: Debezium's JSON converter with schemas disabled (``before``/``after``/``source``/
  ``op``/``ts_ms``/``transaction``, compact), as Debezium Server publishes it.

``decode_messages`` gets the Pub/Sub metadata too (ids, publish times, empty attributes, no ordering
key) and its figure includes building the Arrow record batch. The baseline only parses
(``[orjson.loads(b) for b in bodies]``) and is measured in the same run, right before; the ratio
(decode msg/s over baseline msg/s) is what to compare across machines.
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
ENVELOPES = ("wrapped", "typed", "bare", "enriched", "debezium")
TYPED_SCHEMA = (
    "city STRING, creation_time STRING, ext STRING, id STRING, odometer BIGINT, price DECIMAL(12,2), type STRING"
)


def _q(text: str) -> str:
    return orjson.dumps(text).decode()


def _vehicle(rng: random.Random, odometer: bool = False) -> tuple[str, str, list[tuple[str, str]]]:
    """(city, id, [(column, JSON text)]) of a movr-like ``vehicles`` row, columns sorted."""
    city = rng.choice(CITIES)
    vid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    created = dt.datetime(2025, 1, 1) + dt.timedelta(seconds=rng.randrange(10_000_000))
    price = f"{rng.randrange(0, 100000) / 100:.2f}"  # DECIMAL(10,2): the trailing zero is kept
    cols = [
        ("city", _q(city)),
        ("creation_time", f'"{created.isoformat()}"'),
        ("ext", f'{{"color": {_q(rng.choice(COLORS))}}}'),
        ("id", f'"{vid}"'),
    ]
    if odometer:
        cols.append(("odometer", str(rng.randrange(0, 2**62))))
    cols += [("price", price), ("type", _q(rng.choice(TYPES)))]
    return city, vid, cols


def _crdb_object(cols: list[tuple[str, str]]) -> str:
    """CockroachDB's JSON encoder layout: ``{"a": 1, "b": 2}``."""
    return "{" + ", ".join(f"{_q(k)}: {v}" for k, v in cols) + "}"


def make_bodies(count: int, seed: int = 7, envelope: str = "wrapped") -> list[bytes]:
    """``count`` message bodies of ``envelope`` (see the module docstring), ~300-700 bytes each."""
    rng = random.Random(seed)
    out = []
    wall = 1_747_243_394_200_039_000
    for i in range(count):
        city, vid, cols = _vehicle(rng, odometer=envelope == "typed")
        wall += rng.randrange(1, 5_000_000)
        hlc = f"{wall}.{rng.randrange(3):010d}"
        key = f"[{_q(city)}, \"{vid}\"]"
        if envelope in ("wrapped", "typed"):
            value = f'{{"after": {_crdb_object(cols)}, "updated": "{hlc}"}}'
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"vehicles"}}'.encode())
        elif envelope == "bare":
            value = _crdb_object([("__crdb__", f'{{"updated": "{hlc}"}}')] + cols)
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"vehicles"}}'.encode())
        elif envelope == "enriched":
            source = _crdb_object([
                ("changefeed_sink", '"pubsub"'),
                ("cluster_id", '"585e6512-ea54-490a-8f1d-50c8d182a2e6"'),
                ("cluster_name", '""'),
                ("database_name", '"movr"'),
                ("db_version", '"v25.2.0"'),
                ("job_id", '"1072079179268751361"'),
                ("mvcc_timestamp", f'"{hlc}"'),
                ("node_id", '"1"'),
                ("node_name", '"localhost"'),
                ("origin", '"cockroachdb"'),
                ("primary_keys", '["city", "id"]'),
                ("schema_name", '"public"'),
                ("source_node_locality", '""'),
                ("table_name", '"vehicles"'),
                ("ts_hlc", f'"{hlc}"'),
                ("ts_ns", str(wall)),
            ])  # fmt: skip
            op = "c" if i % 3 == 0 else "u"
            value = _crdb_object([("after", _crdb_object(cols)), ("op", f'"{op}"'), ("source", source),
                                  ("ts_ns", str(wall + 686_192_000))])  # fmt: skip
            key = _crdb_object([("city", _q(city)), ("id", f'"{vid}"')])
            out.append(f'{{"Key":{key},"Value":{value},"Topic":"vehicles"}}'.encode())
        elif envelope == "debezium":
            ms = wall // 1_000_000
            lsn = 24_023_128 + i * 64
            row = "{" + ",".join(f"{_q(k)}:{v.replace(', ', ',').replace(': ', ':')}" for k, v in cols) + "}"
            source = (
                '{"version":"2.7.3.Final","connector":"postgresql","name":"movr","ts_ms":%d,"snapshot":"false",'
                '"db":"movr","sequence":"[\\"24023000\\",\\"%d\\"]","ts_us":%d,"ts_ns":%d,"schema":"public",'
                '"table":"vehicles","txId":%d,"lsn":%d,"xmin":null}' % (ms, lsn, wall // 1000, wall, 780 + i, lsn)
            )
            op = "c" if i % 3 == 0 else "u"
            before = "null" if op == "c" else row
            out.append((
                f'{{"before":{before},"after":{row},"source":{source},"op":"{op}","ts_ms":{ms + 7},'
                f'"ts_us":{(ms + 7) * 1000},"ts_ns":{(ms + 7) * 1_000_000},"transaction":null}}'
            ).encode())  # fmt: skip
        else:
            raise ValueError(f"unknown envelope {envelope!r}")
    return out


def bench(envelope: str, messages: int, repeat: int) -> tuple[float, float]:
    """(baseline msg/s, decode msg/s) for one envelope."""
    bodies = make_bodies(messages, envelope=envelope)
    n = len(bodies)
    ids = [str(10_000_000 + i) for i in range(n)]
    t0 = int(dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc).timestamp() * 1_000_000)
    publish = [t0 + i for i in range(n)]
    attrs: list[dict[str, str]] = [{} for _ in range(n)]
    ordering = [""] * n
    kw = {"row_schema": TYPED_SCHEMA} if envelope == "typed" else {}
    crdb_pubsub.decode_messages(bodies[:100], **kw)  # warm caches (pyspark schema conversion)

    def run_baseline() -> None:
        [orjson.loads(b) for b in bodies]

    def run_decode() -> None:
        batch = crdb_pubsub.decode_messages(
            bodies, message_ids=ids, publish_times=publish, attributes=attrs, ordering_keys=ordering, **kw
        )
        kinds = batch.column(batch.schema.get_field_index("kind"))
        assert batch.num_rows == n and kinds.null_count == 0
        assert kinds.to_pylist().count("malformed") == 0

    def best(fn) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    base = best(run_baseline)
    ours = best(run_decode)
    return n / base, n / ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelope", choices=ENVELOPES + ("all",), default="wrapped")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    parser.add_argument("--show", action="store_true", help="print one body of each envelope")
    args = parser.parse_args()

    envelopes = ENVELOPES if args.envelope == "all" else (args.envelope,)
    print(f"{args.messages} bodies per envelope, best of {args.repeat}; baseline = [orjson.loads(b) for b in bodies]")
    print(f"{'envelope':<10} {'bytes':>6} {'baseline msg/s':>15} {'decode msg/s':>13} {'ratio':>6}")
    for env in envelopes:
        sample = make_bodies(200, envelope=env)
        if args.show:
            print(sample[1].decode())
        mean = sum(map(len, sample)) / len(sample)
        base, ours = bench(env, args.messages, args.repeat)
        print(f"{env:<10} {mean:6.0f} {base:15,.0f} {ours:13,.0f} {ours / base:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
