"""Publishing simulated messages to Pub/Sub: delivery shuffle, duplicates, ordering keys, rate."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from .messages import SimMessage


@dataclasses.dataclass
class PublishReport:
    """What :meth:`ChangefeedSimulator.publish` sent.

    ``published``: messages accepted by Pub/Sub, duplicates included; ``row_messages`` and
    ``resolved_messages``: distinct messages by kind; ``duplicates``: extra copies;
    ``per_topic``: accepted messages per topic; ``message_ids``: the ids per topic in submission
    order; ``elapsed_s`` from first submission to last acknowledgement; ``stats``: the
    simulator's :meth:`~ChangefeedSimulator.stats` afterwards.
    """

    published: int
    row_messages: int
    resolved_messages: int
    duplicates: int
    per_topic: dict[str, int]
    message_ids: dict[str, list[str]]
    elapsed_s: float
    stats: dict[str, dict[str, int]]

    @property
    def messages_per_s(self) -> float:
        return self.published / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def ordering_enabled(publisher: Any) -> bool:
    opts = getattr(publisher, "publisher_options", None)
    return bool(getattr(opts, "enable_message_ordering", False))


def ensure_topics(publisher: Any, project: str, topics: Sequence[str]) -> None:
    from google.api_core import exceptions as gexc

    for topic in topics:
        try:
            publisher.create_topic(name=publisher.topic_path(project, topic))
        except gexc.AlreadyExists:
            pass


def delivery_plan(
    messages: list[SimMessage], window: int, dup_fraction: float, rng: random.Random
) -> tuple[list[SimMessage], int]:
    """Shuffle inside windows, then splice duplicates in a little after their originals."""
    plan = list(messages)
    if window > 1:
        for start in range(0, len(plan), window):
            chunk = plan[start : start + window]
            rng.shuffle(chunk)
            plan[start : start + window] = chunk
    n_dups = round(dup_fraction * len(plan))
    if not n_dups:
        return plan, 0
    later: dict[int, list[SimMessage]] = {}
    reach = max(window, 20)
    for i in sorted(rng.sample(range(len(plan)), n_dups)):
        later.setdefault(i + rng.randint(1, reach), []).append(plan[i])
    out: list[SimMessage] = []
    for i, msg in enumerate(plan):
        out.append(msg)
        out.extend(later.pop(i, ()))
    for pos in sorted(later):
        out.extend(later[pos])
    return out, n_dups


def publish_plan(
    publisher: Any,
    project: str,
    plan: list[SimMessage],
    rate: float | None,
    on_progress: Callable[[int, int], None] | None,
    timeout: float,
    rpc_timeout: float | None = None,
) -> PublishReport:
    """Submit ``plan`` in order, wait for every future; counts by kind are the caller's to fill.

    ``rpc_timeout`` bounds each publish RPC, its retries included (default: the client's own).
    """
    paths: dict[str, str] = {}
    bounded: dict[str, Any] = {} if rpc_timeout is None else _bounded(rpc_timeout)
    submitted: list[tuple[str, Any]] = []
    start = time.monotonic()
    for i, msg in enumerate(plan):
        if rate:
            # Pace against the start time rather than per message, so sleep jitter does not add up.
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        path = paths.get(msg.topic) or paths.setdefault(msg.topic, publisher.topic_path(project, msg.topic))
        kwargs: dict[str, Any] = dict(msg.attributes)
        if msg.ordering_key:
            kwargs["ordering_key"] = msg.ordering_key
        submitted.append((msg.topic, publisher.publish(path, msg.data, **bounded, **kwargs)))
        if on_progress and (i + 1) % 1000 == 0:
            on_progress(i + 1, len(plan))
    _done, not_done = concurrent.futures.wait([f for _, f in submitted], timeout=timeout)
    elapsed = time.monotonic() - start
    ids: dict[str, list[str]] = {}
    errors: list[str] = []
    for topic, fut in submitted:
        if fut in not_done:
            errors.append(f"{topic}: not acknowledged within {timeout}s")
            continue
        exc = fut.exception()
        if exc is not None:
            errors.append(f"{topic}: {type(exc).__name__}: {exc}")
        else:
            ids.setdefault(topic, []).append(fut.result())
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(plan)} publishes failed; first: {errors[0]}")
    if on_progress:
        on_progress(len(plan), len(plan))
    return PublishReport(
        published=len(plan),
        row_messages=0,
        resolved_messages=0,
        duplicates=0,
        per_topic={t: len(v) for t, v in ids.items()},
        message_ids=ids,
        elapsed_s=elapsed,
        stats={},
    )


def _bounded(seconds: float) -> dict[str, Any]:
    """``publish`` keywords: the client's retryable errors, retried for ``seconds`` in all."""
    from google.api_core import exceptions as gexc
    from google.api_core import retry as retries

    retry = retries.Retry(
        initial=0.1,
        maximum=2.0,
        multiplier=1.3,
        timeout=seconds,
        predicate=retries.if_exception_type(
            gexc.Aborted,
            gexc.Cancelled,
            gexc.DeadlineExceeded,
            gexc.InternalServerError,
            gexc.ResourceExhausted,
            gexc.ServiceUnavailable,
            gexc.Unknown,
        ),
    )
    return {"retry": retry, "timeout": seconds}


def make_publisher(
    host_port: str,
    *,
    ordering: bool = False,
    max_messages: int = 1000,
    max_bytes: int = 4 * 1024 * 1024,
    max_latency: float = 0.02,
) -> Any:
    """Make a ``PublisherClient`` for the Pub/Sub emulator at ``host_port``, tuned for throughput.

    Built by :func:`crdb_pubsub.emulator.publisher_client` (insecure channel, anonymous
    credentials; ``PUBSUB_EMULATOR_HOST`` is neither read nor set). Batches hold up to
    ``max_messages``/``max_bytes`` or wait ``max_latency`` seconds; ``ordering`` enables ordering
    keys, which ``legacy_wrapper`` needs. Call ``stop()`` then ``transport.close()`` when done.
    """
    from google.cloud import pubsub_v1

    from crdb_pubsub.emulator import publisher_client

    return publisher_client(
        host_port,
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=ordering),
        batch_settings=pubsub_v1.types.BatchSettings(
            max_bytes=max_bytes, max_latency=max_latency, max_messages=max_messages
        ),
    )


def make_subscriber(host_port: str) -> Any:
    """Make a ``SubscriberClient`` for the emulator at ``host_port`` (see :func:`make_publisher`)."""
    from crdb_pubsub.emulator import subscriber_client

    return subscriber_client(host_port)
