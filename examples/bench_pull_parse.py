"""What reading one Pull response into the source's Arrow batch costs, from its bytes or from upb's parse.

One response of ``--messages`` CockroachDB-shaped messages (JSON bodies of ``--body`` bytes, ack ids of
176 characters as the service's, no ordering key; with ``--table-name-attribute`` a ``TABLE_NAME``
attribute on each, as CockroachDB's option of that name sends) read by ``wire.pulled_batch``:

  (old) upb's parse (``PullResponse.FromString``, what gRPC handed over before) and the walk of its
        messages in Python, field by field;
  (new) the serialized response itself, read column-wise by ``pull_parse`` (from ``pull_parse.FEWEST``
        messages on; fewer are left to upb);
  (upb) upb's parse alone, for scale.

Prints each in us a message (wall time of this process, best of ``--rounds``, the three interleaved)
and old / new as a ratio measured in the same run.

    python examples/bench_pull_parse.py [--messages 1000] [--body 200] [--table-name-attribute]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable


def _response(n: int, body: int, table_name: bool) -> bytes:
    from google.pubsub_v1.types import pubsub

    rng = random.Random(48)
    pb = pubsub.PullResponse.pb()()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i in range(n):
        rm = pb.received_messages.add()
        rm.ack_id = "".join(rng.choice(alphabet) for _ in range(176))
        envelope = {
            "after": {"id": 1000 + i, "city": "new york", "rider_id": f"{rng.getrandbits(64):016x}", "revenue": 12.5},
            "key": [1000 + i],
            "updated": f"{1_700_000_000_000_000_000 + i}.0000000000",
        }
        data = json.dumps(envelope).encode()
        rm.message.data = (data[: body - 2] + b"}").ljust(body, b" ") if len(data) >= body else data.ljust(body, b" ")
        rm.message.message_id = str(10_000_000_000_000_000 + i)
        rm.message.publish_time.seconds = 1_700_000_000 + i // 100
        rm.message.publish_time.nanos = rng.randrange(10**9)
        if table_name:
            rm.message.attributes["TABLE_NAME"] = "rides"
    return pb.SerializeToString()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--body", type=int, default=200)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--table-name-attribute", action="store_true")
    args = p.parse_args()

    from google.pubsub_v1.types import pubsub

    from crdb_pubsub.source import pull_parse
    from crdb_pubsub.source.wire import pulled_batch

    raw = _response(args.messages, args.body, args.table_name_attribute)
    response = pubsub.PullResponse.pb()
    if args.messages >= pull_parse.FEWEST:
        assert pull_parse.parse(raw) is not None, "the response is not in the layout pull_parse reads"
    old_acks, old_mids, old_batch = pulled_batch(response.FromString(raw))
    new_acks, new_mids, new_batch = pulled_batch(raw)
    assert (old_acks, old_mids) == (new_acks, new_mids) and old_batch.equals(new_batch), "the two readings differ"

    steps: dict[str, Callable[[], object]] = {
        "old": lambda: pulled_batch(response.FromString(raw)),
        "new": lambda: pulled_batch(raw),
        "upb": lambda: response.FromString(raw),
    }
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(args.rounds):
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            best[name] = min(best[name], time.perf_counter() - started)
    us = {k: v / args.messages * 1e6 for k, v in best.items()}
    attribute = ", a TABLE_NAME attribute each" if args.table_name_attribute else ""
    print(f"one response of {args.messages:,} messages ({len(raw):,} B, bodies of {args.body} B{attribute}), ", end="")
    print(f"best of {args.rounds}:")
    print(f"(old) upb's parse + the walk in Python : {us['old']:5.2f} us/message")
    print(
        f"(new) the bytes read column-wise       : {us['new']:5.2f} us/message  ({us['old'] / us['new']:.2f}x faster)"
    )
    print(f"(upb) upb's parse alone                : {us['upb']:5.2f} us/message")
    if args.messages < pull_parse.FEWEST:
        print(f"(new) is upb's reading, and the split that counts the messages: fewer than {pull_parse.FEWEST}")


if __name__ == "__main__":
    main()
