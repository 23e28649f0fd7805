"""The dead-letter topic: bodies that can't be decoded, published where a person can look at them.

Runs on the executors inside ``read()``, before the partition's rows reach Spark: the publish is
confirmed (or the task fails and Spark retries it) before the batch can commit, and the source
acknowledges a batch only after its commit. So a message leaves the subscription only once it is
either in the sink or in the dead-letter topic (at least once: a retried task may publish again;
``crdb_pubsub_message_id`` tells copies apart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .options import SourceOptions

MAX_MESSAGES_PER_PUBLISH = 1000  # Pub/Sub's cap per Publish request
MAX_BYTES_PER_PUBLISH = 9 * 1024 * 1024  # under the 10 MB request limit, with room for attributes
MAX_ERROR_CHARS = 1024  # attribute values may hold 1024 bytes; errors are ASCII-safe text
PUBLISH_TIMEOUT_SECONDS = 60.0


def publish_malformed(batch: pa.RecordBatch, options: SourceOptions) -> int:
    """Publish the ``malformed`` rows' bodies of ``batch``; return how many.

    Raises if Pub/Sub does not confirm them (the task fails, Spark retries it, nothing is
    acknowledged).
    """
    import pyarrow.compute as pc

    from . import transport

    bad = batch.filter(pc.equal(batch.column("kind"), "malformed"))
    if not bad.num_rows:
        return 0
    subs = ",".join(options.subscription_paths)  # the wire format does not carry a message's own subscription
    messages: list[dict[str, Any]] = []
    for data, mid, error in zip(
        bad.column("data").to_pylist(), bad.column("message_id").to_pylist(), bad.column("error").to_pylist()
    ):
        attributes = {"crdb_pubsub_error": (error or "")[:MAX_ERROR_CHARS], "crdb_pubsub_subscription": subs}
        if mid is not None:
            attributes["crdb_pubsub_message_id"] = mid
        messages.append({"data": data or b"", "attributes": attributes})
    credentials = transport.load_credentials(**options.credential_kwargs())
    client = transport.publisher_client(options.effective_emulator_host, credentials, endpoint=options.endpoint)
    try:
        for chunk in transport.chunked(messages, _size, MAX_MESSAGES_PER_PUBLISH, MAX_BYTES_PER_PUBLISH):
            client.publish(
                request={"topic": options.dead_letter_topic_path, "messages": chunk}, timeout=PUBLISH_TIMEOUT_SECONDS
            )
    finally:
        client.transport.close()
    return len(messages)


def _size(message: dict[str, Any]) -> int:
    return len(message["data"]) + sum(len(k) + len(v) for k, v in message["attributes"].items())
