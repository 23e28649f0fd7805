"""Building source batches for the apply tests without Spark: Arrow tables with the source's columns."""

from __future__ import annotations

import itertools
import random

import pyarrow as pa

from crdb_pubsub import decode_messages
from crdb_pubsub.decode.schema import arrow_schema

_ids = itertools.count()
BASE = 1_745_000_000_000_000_000
SCHEMA = {"accounts": "id BIGINT, name STRING, balance DECIMAL(12,2), big BIGINT, ext STRING"}


def hlc(wall: int, logical: int = 0) -> str:
    return "%d.%010d" % (wall, logical)


def change(key: int, at: str, op: str = "u", table: str = "accounts", drop: tuple[str, ...] = (), **after) -> dict:
    """One decoded row change as the source emits it (``after`` as exact JSON text).

    Like CockroachDB, a row names every column of the table (``SCHEMA``; null unless given),
    except the columns in ``drop`` (a dropped column).
    """
    cols = {c.split()[0]: "null" for c in SCHEMA["accounts"].split(", ")[1:]} if table != "vehicles" else {}
    cols.update(after)
    body = (
        None
        if op == "d"
        else '{"id": %d' % key + "".join(f', "{k}": {v}' for k, v in cols.items() if k not in drop) + "}"
    )
    return {
        "kind": "row",
        "envelope": "wrapped",
        "table_name": table,
        "topic": table,
        "key": f"[{key}]",
        "op": op,
        "after": body,
        "updated": at,
        "message_id": f"m{next(_ids):06d}",
    }


def batch(rows: list[dict]) -> pa.Table:
    schema = arrow_schema()
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)


def decoded(messages, message_ids=None) -> pa.Table:
    """Simulator messages through the real decoder, as the source's executors decode them."""
    messages = list(messages)
    ids = message_ids or [f"p{next(_ids)}" for _ in messages]
    return pa.Table.from_batches(
        [
            decode_messages(
                [m.data for m in messages], message_ids=ids, attributes=[m.attributes or None for m in messages]
            )
        ]
    )


def shuffled_with_duplicates(messages, seed: int, dup_fraction: float = 0.1) -> list:
    """Out of order (fully shuffled) and with re-emitted copies: what Pub/Sub may deliver."""
    rng = random.Random(seed)
    out = list(messages)
    out += rng.sample(out, int(len(out) * dup_fraction))
    rng.shuffle(out)
    return out


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]
