"""The pytest plugin of :mod:`crdb_pubsub.testing`: its fixtures, found by any ``pytest`` run.

Installed with the package (entry point ``pytest11``), so a project's tests use them with nothing
to import or configure (``pytest --fixtures`` lists them):

``pubsub_emulator`` (session)
    A Pub/Sub emulator for the test session: ``PUBSUB_EMULATOR_HOST`` when set, else the Cloud
    SDK's emulator, else Docker through testcontainers (``crdb-pubsub[emulator]``). ``.host_port``,
    ``.project``. Without any, the tests that use it are skipped saying what to install, or fail
    with ``--crdb-pubsub-require-emulator`` (or ``CRDB_PUBSUB_REQUIRE_EMULATOR=1``), as CI wants.
``pubsub_subscription``
    ``pubsub_subscription(ack_deadline_seconds=10) -> (topic, subscription)``: a new topic and a
    subscription on it, names unique to the call.
``changefeed``
    ``changefeed("users", key=["id"], producer=..., **options)``: a
    :class:`~crdb_pubsub.testing.Changefeed` on a new topic and subscription; ``.publish()`` sends
    what it holds (``duplicates=``, ``shuffle=``), ``.subscription`` is what your query reads.
``crdb_spark`` (session)
    A local SparkSession (``local[2]``, UTC, the ``crdb_pubsub`` format registered, Python workers
    on this interpreter). Needs pyspark (``crdb-pubsub[spark]``) and Java 17+.
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = ["changefeed", "crdb_spark", "pubsub_emulator", "pubsub_subscription"]

REQUIRE_ENV = "CRDB_PUBSUB_REQUIRE_EMULATOR"
PROJECT = "crdb-pubsub-test"
_names = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crdb-pubsub")
    group.addoption(
        "--crdb-pubsub-require-emulator",
        action="store_true",
        default=False,
        help=f"fail (instead of skipping) tests that need the Pub/Sub emulator when none can start (or {REQUIRE_ENV}=1)",
    )


def _required(config: pytest.Config) -> bool:
    flag = os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return flag or bool(config.getoption("--crdb-pubsub-require-emulator", default=False))


class EmulatorHandle:
    """The session's emulator: ``host_port`` (``127.0.0.1:PORT``) and the ``project`` to use on it."""

    def __init__(self, host_port: str, project: str) -> None:
        self.host_port = host_port
        self.project = project

    def __repr__(self) -> str:
        return f"EmulatorHandle({self.host_port!r}, project={self.project!r})"


@pytest.fixture(scope="session")
def pubsub_emulator(request: pytest.FixtureRequest) -> Iterator[EmulatorHandle]:
    """Start a Pub/Sub emulator for the test session (see the module docstring for the backends)."""
    from crdb_pubsub.emulator import EmulatorUnavailable, start_emulator

    try:
        emu = start_emulator(project=PROJECT)
    except EmulatorUnavailable as exc:
        message = f"no Pub/Sub emulator could start: {exc}"
        if _required(request.config):
            pytest.fail(message, pytrace=False)
        pytest.skip(message + f"\n(--crdb-pubsub-require-emulator or {REQUIRE_ENV}=1 fails instead)")
    try:
        yield EmulatorHandle(emu.host_port, PROJECT)
    finally:
        emu.stop()


@pytest.fixture
def pubsub_subscription(pubsub_emulator: EmulatorHandle) -> Callable[..., tuple[str, str]]:
    """``pubsub_subscription(ack_deadline_seconds=10, ordering=False) -> (topic, subscription)``: new names each call."""
    from crdb_pubsub.emulator import create_topic_and_subscription

    def make(ack_deadline_seconds: int = 10, *, ordering: bool = False) -> tuple[str, str]:
        stem = f"t{next(_names)}-{uuid.uuid4().hex[:8]}"
        return create_topic_and_subscription(
            pubsub_emulator.host_port,
            pubsub_emulator.project,
            f"topic-{stem}",
            f"sub-{stem}",
            ack_deadline_seconds=ack_deadline_seconds,
            enable_message_ordering=ordering,
        )

    return make


class PublishedChangefeed:
    """A :class:`~crdb_pubsub.testing.Changefeed` bound to a topic and subscription on the emulator.

    Every Changefeed method works on it (``insert``, ``update``, ``delete``, ``resolved``,
    ``state``, ``messages``); :meth:`publish` sends the messages not yet sent.
    """

    def __init__(self, feed: Any, emulator: EmulatorHandle, topic: str, subscription: str) -> None:
        self.feed = feed
        self.emulator = emulator
        self.topic = topic
        self.subscription = subscription
        self._sent = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.feed, name)

    def publish(self, *, duplicates: float = 0.0, shuffle: bool | int = False, seed: int = 0) -> list[str]:
        """Publish the messages made since the last publish; returns their message ids.

        ``duplicates``: a fraction published twice; ``shuffle``: ``True`` (any order) or a window.
        """
        from crdb_pubsub.testing.publishing import publish_messages

        messages = self.feed.messages()
        new, self._sent = messages[self._sent :], len(messages)
        return publish_messages(
            self.emulator.host_port, self.topic, new, duplicates=duplicates, shuffle=shuffle, seed=seed
        )


@pytest.fixture
def changefeed(
    pubsub_emulator: EmulatorHandle, pubsub_subscription: Callable[..., tuple[str, str]]
) -> Callable[..., PublishedChangefeed]:
    """``changefeed(table, key, producer="cockroachdb", **options)``: a Changefeed on a new topic and subscription."""
    from crdb_pubsub.testing.feed import Changefeed

    def make(table: str, key: list[str], **options: Any) -> PublishedChangefeed:
        ack = options.pop("ack_deadline_seconds", 10)
        feed = Changefeed(table, key, **options)
        topic, subscription = pubsub_subscription(ack)
        return PublishedChangefeed(feed, pubsub_emulator, topic, subscription)

    return make


@pytest.fixture(scope="session")
def crdb_spark() -> Iterator[Any]:
    """Start a local SparkSession for the test session, with the ``crdb_pubsub`` format registered."""
    try:
        from crdb_pubsub._spark import require_pyspark

        require_pyspark()
    except ImportError as exc:
        pytest.fail(f"crdb_spark: {exc}", pytrace=False)
    # Spark's Python workers run `python3` from PATH unless told: this interpreter has the packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import crdb_pubsub

    existing = SparkSession.getActiveSession()
    session = existing or (
        SparkSession.builder.master("local[2]")
        .appName("crdb-pubsub-testing")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    crdb_pubsub.register(session)
    yield session
    if existing is None:
        session.stop()
