"""Launcher for Google's Pub/Sub emulator, for tests, demos and the shell.

Python::

    from crdb_pubsub.emulator import emulator, pubsub_clients, create_topic_and_subscription

    with emulator() as host_port:            # "127.0.0.1:PORT"; nothing global is set
        topic, sub = create_topic_and_subscription(host_port, "local-project", "t", "s")
        publisher, subscriber = pubsub_clients(host_port)

Shell: ``python -m crdb_pubsub.emulator start|env|stop|run`` (see ``--help``).

Backends, in order: ``PUBSUB_EMULATOR_HOST`` (used as is), the Cloud SDK emulator, Docker;
otherwise :class:`EmulatorUnavailable` with install instructions. Never a fake.
"""

from .clients import (
    create_topic_and_subscription,
    publisher_client,
    pubsub_clients,
    subscriber_client,
)
from .detached import (
    DetachedState,
    export_line,
    running_state,
    start_detached,
    state_path,
    stop_detached,
)
from .launcher import (
    BACKENDS,
    DOCKER_IMAGE,
    INSTALL_HINT,
    Emulator,
    EmulatorStartError,
    EmulatorUnavailable,
    emulator,
    find_sdk_emulator,
    start_emulator,
)

__all__ = [
    "BACKENDS",
    "DOCKER_IMAGE",
    "INSTALL_HINT",
    "DetachedState",
    "Emulator",
    "EmulatorStartError",
    "EmulatorUnavailable",
    "create_topic_and_subscription",
    "emulator",
    "export_line",
    "find_sdk_emulator",
    "publisher_client",
    "pubsub_clients",
    "running_state",
    "start_detached",
    "start_emulator",
    "state_path",
    "stop_detached",
    "subscriber_client",
]
