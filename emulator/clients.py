"""Pub/Sub clients wired to an emulator address, without touching ``os.environ``.

``PUBSUB_EMULATOR_HOST`` is process-global: setting it temporarily would race with every other
thread building a client (Spark's driver-side threads, the receiver). Instead each client gets an
explicit insecure gRPC channel and anonymous credentials, which also wins over a
``PUBSUB_EMULATOR_HOST`` that happens to point elsewhere.
"""

from __future__ import annotations

import grpc
from google.api_core.exceptions import AlreadyExists
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports.grpc import SubscriberGrpcTransport


def _channel(host_port: str) -> grpc.Channel:
    # One channel recipe for the whole package: the source's receiver builds its own the same way.
    from crdb_pubsub.source.transport import insecure_channel

    return insecure_channel(host_port)


def publisher_client(
    host_port: str,
    *,
    publisher_options: pubsub_v1.types.PublisherOptions | None = None,
    batch_settings: pubsub_v1.types.BatchSettings | None = None,
) -> pubsub_v1.PublisherClient:
    """Make a PublisherClient talking plaintext gRPC to ``host_port`` with anonymous credentials.

    Pass ``publisher_options=PublisherOptions(enable_message_ordering=True)`` to publish with
    ordering keys. Close with ``client.transport.close()`` (after ``client.stop()`` if you published).
    """
    transport = PublisherGrpcTransport(host=host_port, channel=_channel(host_port), credentials=AnonymousCredentials())
    return pubsub_v1.PublisherClient(
        publisher_options=publisher_options or (),
        batch_settings=batch_settings or (),
        transport=transport,
        client_options={"api_endpoint": host_port},
    )


def subscriber_client(host_port: str) -> pubsub_v1.SubscriberClient:
    """Make a SubscriberClient talking plaintext gRPC to ``host_port``. Close with ``client.close()``."""
    transport = SubscriberGrpcTransport(host=host_port, channel=_channel(host_port), credentials=AnonymousCredentials())
    return pubsub_v1.SubscriberClient(transport=transport, client_options={"api_endpoint": host_port})


def pubsub_clients(
    host_port: str,
    *,
    publisher_options: pubsub_v1.types.PublisherOptions | None = None,
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
    """Return ``(publisher, subscriber)`` for the emulator at ``host_port`` (``"host:port"``).

    Thread-safe to call from anywhere: no environment variable is read or written. Each client has
    its own channel; the caller closes them (``publisher.transport.close()``, ``subscriber.close()``).
    """
    return publisher_client(host_port, publisher_options=publisher_options), subscriber_client(host_port)


def create_topic_and_subscription(
    host_port: str,
    project: str,
    topic: str,
    subscription: str,
    *,
    ack_deadline_seconds: int = 10,
    enable_message_ordering: bool = False,
    exist_ok: bool = False,
    timeout: float = 10.0,
) -> tuple[str, str]:
    """Create ``topic`` and a pull ``subscription`` on it; return their full paths.

    Returns ``("projects/P/topics/T", "projects/P/subscriptions/S")``. The emulator accepts ack
    deadlines of 1-600 s (the real service 10-600), which keeps redelivery tests short.
    With ``exist_ok=False`` an existing topic or subscription raises
    ``google.api_core.exceptions.AlreadyExists``; with ``exist_ok=True`` existing ones are kept
    as they are (their settings are not checked or changed).
    """
    publisher, subscriber = pubsub_clients(host_port)
    topic_path = publisher.topic_path(project, topic)
    sub_path = subscriber.subscription_path(project, subscription)
    try:
        try:
            publisher.create_topic(request={"name": topic_path}, timeout=timeout)
        except AlreadyExists:
            if not exist_ok:
                raise
        try:
            subscriber.create_subscription(
                request={
                    "name": sub_path,
                    "topic": topic_path,
                    "ack_deadline_seconds": ack_deadline_seconds,
                    "enable_message_ordering": enable_message_ordering,
                },
                timeout=timeout,
            )
        except AlreadyExists:
            if not exist_ok:
                raise
    finally:
        publisher.transport.close()
        subscriber.close()
    return topic_path, sub_path
