"""Publishing a :class:`~crdb_pubsub.testing.Changefeed` to a topic, with duplicates and disorder on request."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from ..tools.simulator.messages import SimMessage
from ..tools.simulator.publish import delivery_plan, make_publisher, publish_plan

__all__ = ["publish_messages"]


def publish_messages(
    host_port: str,
    topic: str,
    messages: Sequence[SimMessage],
    *,
    duplicates: float = 0.0,
    shuffle: bool | int = False,
    seed: int = 0,
    timeout: float = 60.0,
) -> list[str]:
    """Publish ``messages`` to ``topic`` (``projects/P/topics/T``) on the emulator at ``host_port``.

    ``shuffle``: ``True`` delivers them in any order, an int shuffles inside windows of that many;
    ``duplicates``: this fraction is published a second time a little later (new message ids, the
    same bytes, as a producer's retry or restart does). Each message keeps its attributes and
    ordering key. Returns the message ids in publish order.
    """
    if not topic.startswith("projects/") or "/topics/" not in topic:
        raise ValueError(f"topic: expected projects/P/topics/T, got {topic!r}")
    project, topic_id = topic.split("/")[1], topic.split("/topics/")[1]
    window = len(messages) if shuffle is True else int(shuffle or 0)
    plan, _ = delivery_plan(
        [dataclasses.replace(m, topic=topic_id) for m in messages], window, duplicates, random.Random(seed)
    )
    publisher = make_publisher(host_port, ordering=any(m.ordering_key for m in plan), max_latency=0.01)
    try:
        report = publish_plan(publisher, project, plan, None, None, timeout, rpc_timeout=timeout)
    finally:
        publisher.stop()
        publisher.transport.close()
    return report.message_ids.get(topic_id, [])
