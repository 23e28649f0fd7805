"""Topic grouping: the bodies of a batch in the v2 Pub/Sub wrapper, grouped by their topic.

Bodies of one topic are one table's (or column family's) messages, one layout in the common case;
matching each topic on its own spares the learned layouts (:mod:`.matching`) the decode errors,
one per body of another layout, that a mixed batch costs (~2.6 us each). The grouping is only a
heuristic, read from the bodies' tails without parsing them: a body is proven whatever its group.
"""

from __future__ import annotations

import itertools

import numpy as np

_TOPIC_AT = b',"Topic":'
_MAX_TOPICS = 8
_MIN_TOPIC = 32


def by_topic(bodies: list[bytes]) -> list[np.ndarray]:
    """Group the bodies by the tail of their v2 wrapper (``,"Topic":"t"}``): positions, largest first.

    Up to _MAX_TOPICS topics of at least _MIN_TOPIC bodies get a group of their own; the rest share
    one.
    """
    n = len(bodies)
    first = bodies[0][bodies[0].rfind(_TOPIC_AT) :] if n else b""
    if sum(map(bytes.endswith, bodies, itertools.repeat(first))) == n:  # one topic: no tail cut out
        return [np.arange(n)]
    tails = [b[b.rfind(_TOPIC_AT) :] for b in bodies]
    number = {tail: i for i, tail in enumerate(dict.fromkeys(tails))}
    codes = np.fromiter(map(number.__getitem__, tails), dtype=np.int64, count=n)
    counts = np.bincount(codes)
    order = np.argsort(codes, kind="stable")
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    largest = np.argsort(-counts, kind="stable")
    own = [c for c in largest[:_MAX_TOPICS].tolist() if counts[c] >= _MIN_TOPIC]
    parts = [order[starts[c] : starts[c + 1]] for c in own]
    if len(own) < len(counts):
        rest = np.ones(n, dtype=bool)
        for part in parts:
            rest[part] = False
        parts.append(np.flatnonzero(rest))
    return parts
