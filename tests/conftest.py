"""Shared fixtures: one emulator and one SparkSession per test session, fresh topics per test.

The emulator is the real one (``crdb_pubsub.emulator``); without it integration tests skip with a
reason, except under ``CRDB_PUBSUB_REQUIRE_EMULATOR=1`` (CI), where they fail.
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

PROJECT = "test-project"

# The tiers (docs/development.md): ``bash tests/run.sh --fast`` is ``-m "not integration"``.
# Whatever needs the emulator, the Cloud Storage test server or a SparkSession is integration by
# definition, whether or not its module says so: the fixtures it uses decide (``fixturenames`` holds
# every fixture a test needs, directly or through another fixture), and so do the spark and faults
# markers. A test that needs none of these but waits out seconds of real time says so itself.
_INTEGRATION_FIXTURES = {"spark", "emulator_host", "gcs_server", "gcs_state_url"}
_INTEGRATION_MARKERS = ("spark", "faults")


# Under pytest-xdist (``--dist loadgroup``, the full suite) tests go to whichever worker is free,
# except these modules' tests, which share a module-scoped fixture worth building once (the flood's
# bodies) or build the wheel in the source tree (setuptools' ``build/`` is not safe to share).
_ONE_WORKER = {
    "test_malformed_flood.py": "flood",
    "test_packaging.py": "wheel",
    "test_dataproc.py": "wheel",
}


# The simulation's sweeps are the fast tier's heaviest work (~35 s of a core each, half its
# worker-seconds), and xdist's workers take tests in collection order: there they go first, the
# longest first, so that short tests fill the end instead of one sweep running alone (3 min 10 s
# -> 3 min 2 s on two workers). In the full suite placing them among the fake-based tests of
# tests/source, whose waits leave a core idle, changed nothing (29 min 16 s, 29 min 17 s), so
# they keep their place there.
_SWEEP = "tests/sim/test_simulation.py::test_nothing_lost_nothing_twice_in_every_simulated_world"


def _fast_tier(config) -> bool:
    """Whether this run is the fast tier (``tests/run.sh --fast`` selects ``-m "not integration"``)."""
    return "not integration" in (config.getoption("markexpr", "") or "")


def _sweeps_first(items: list) -> None:
    sweeps = sorted((i for i in items if i.nodeid.startswith(_SWEEP)), key=lambda i: "[executors" not in i.nodeid)
    items[:] = sweeps + [i for i in items if not i.nodeid.startswith(_SWEEP)]


def pytest_collection_modifyitems(config, items):
    if _fast_tier(config):
        _sweeps_first(items)
    for item in items:
        group = _ONE_WORKER.get(os.path.basename(str(item.fspath)))
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if _INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())) or any(
            item.get_closest_marker(m) for m in _INTEGRATION_MARKERS
        ):
            item.add_marker(pytest.mark.integration)


def _on_virtual_time(item) -> bool:
    """A test marked ``virtual_time`` runs on the virtual clock (tests/virtual_time.py), unless it is
    also integration: it talks to a real server (its Cloud Storage variant, say) or says so itself
    (a test of a module marked virtual_time that must wait for real): then it waits for real."""
    return item.get_closest_marker("virtual_time") is not None and item.get_closest_marker("integration") is None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if not _on_virtual_time(item):
        return None
    from virtual_time import run_protocol

    run_protocol(item, nextitem)
    return True


# Spark's Python workers run `python3` from PATH unless told otherwise: point them at this venv.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_configure(config):
    """Before xdist's workers start: Spark drivers start from a class-data archive
    (tests/jvm_archive.py), built once, in the background, unless the run starts no Spark (the
    fast tier) or it is turned off."""
    import jvm_archive

    if os.environ.get("CRDB_PUBSUB_JVM_ARCHIVE_OPTS"):
        return  # an xdist worker: the controller already pointed the drivers at the archive
    controller = not hasattr(config, "workerinput")
    if jvm_archive.enabled() and not _fast_tier(config):
        path = jvm_archive.archive_path()
        if not path.exists():
            # A smoke run uses an archive that is there but builds none: where none is built yet
            # (CI's fresh machine), four smoke runs at once each building its own took 558 s, and
            # no build finished in time for a driver to use it; without building, 429 s (2026-11-28).
            if os.environ.get("CRDB_PUBSUB_SMOKE") == "1":
                return
            if controller:
                config._crdb_pubsub_jvm_archive = jvm_archive.build_in_background(path)
        jvm_archive.use(path)


def pytest_unconfigure(config):
    build = getattr(config, "_crdb_pubsub_jvm_archive", None)
    if build is not None:
        build.wait()  # the next run's drivers start from it


@pytest.fixture(scope="session")
def emulator_host() -> Iterator[str]:
    from emulator_policy import start_emulator_or_skip

    emu = start_emulator_or_skip(project=PROJECT)
    try:
        yield emu.host_port
    finally:
        emu.stop()


_counter = itertools.count()


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server on a free loopback port for the session (``tests/gcs_server.py``: skipped when
    it can't start here, failed under ``CRDB_PUBSUB_REQUIRE_EMULATOR=1``). ``STORAGE_EMULATOR_HOST``
    points at it meanwhile (every Cloud Storage client honours it) and is restored after."""
    from gcs_server import start_gcs_server_or_skip

    server = start_gcs_server_or_skip()
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = server.endpoint
    try:
        yield server
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
        server.stop()


@pytest.fixture
def gcs_state_url(gcs_server) -> str:
    """A fresh ``gs://bucket/prefix`` on the test server, unique per test."""
    return gcs_server.url(f"t{next(_counter)}-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def make_subscription(emulator_host: str) -> Callable[..., tuple[str, str]]:
    """``make_subscription(ack_deadline_seconds=10) -> (topic_path, subscription_path)``, unique per call."""
    from crdb_pubsub.emulator import create_topic_and_subscription

    def make(ack_deadline_seconds: int = 10, *, name: str | None = None) -> tuple[str, str]:
        stem = name or f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"
        return create_topic_and_subscription(
            emulator_host, PROJECT, f"topic-{stem}", f"sub-{stem}", ack_deadline_seconds=ack_deadline_seconds
        )

    return make


@pytest.fixture(scope="session")
def spark(request):
    """One local SparkSession for the whole run (start-up costs ~12 s).

    The Cloud Storage test server is started first when it can be, so that Spark's Python
    workers inherit ``STORAGE_EMULATOR_HOST`` (a ``gs://`` stateDir's tasks reach it); where it
    can't, Spark still starts and only the ``gs://`` tests skip (or fail in CI).
    """
    from pyspark.sql import SparkSession

    try:
        request.getfixturevalue("gcs_server")
    except pytest.skip.Exception:
        pass

    import crdb_pubsub

    session = (
        SparkSession.builder.master("local[2]")
        .appName("crdb-pubsub-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    crdb_pubsub.register(session)
    yield session
    session.stop()


def publish_bodies(host_port: str, topic: str, bodies: list[bytes], *, attributes: dict | None = None) -> list[str]:
    """Publish ``bodies`` to ``topic`` on the emulator; return their message ids in order."""
    from google.cloud.pubsub_v1.types import BatchSettings

    from crdb_pubsub.emulator import publisher_client

    publisher = publisher_client(host_port, batch_settings=BatchSettings(max_messages=500, max_latency=0.01))
    try:
        futures = [publisher.publish(topic, b, **(attributes or {})) for b in bodies]
        return [f.result(timeout=60) for f in futures]
    finally:
        publisher.stop()
        publisher.transport.close()


@pytest.fixture
def publish(emulator_host: str) -> Callable[..., list[str]]:
    def _publish(topic: str, bodies: list[bytes], **kw) -> list[str]:
        return publish_bodies(emulator_host, topic, bodies, **kw)

    return _publish


def pull_ids(host_port: str, subscription: str, *, timeout: float = 2.0, max_messages: int = 1000) -> list[str]:
    """Message ids a fresh consumer can pull right now (they are left unacknowledged)."""
    from google.api_core import exceptions as gexc

    from crdb_pubsub.emulator import subscriber_client

    sub = subscriber_client(host_port)
    try:
        resp = sub.pull(
            request={"subscription": subscription, "max_messages": max_messages}, timeout=timeout, retry=None
        )
        return [rm.message.message_id for rm in resp.received_messages]
    except gexc.DeadlineExceeded:
        return []
    finally:
        sub.close()


def publish_simulated(host_port: str, project: str, sim, stem: str, n_rows: int, **publish_kw):
    """Publish ``n_rows`` of ``sim``'s traffic to per-test copies of its topics (``<stem>-<topic>``),
    each with a subscription made first; returns ``(subscription_paths, PublishReport)``."""
    from crdb_pubsub.emulator import create_topic_and_subscription
    from crdb_pubsub.tools.simulator import make_publisher

    subs = [
        create_topic_and_subscription(host_port, project, f"{stem}-{t}", f"{stem}-{t}-sub", ack_deadline_seconds=30)[1]
        for t in sim.topics()
    ]
    # The simulator publishes to its own topic ids; renaming them keeps tests isolated.
    publisher = make_publisher(host_port)
    real_topic_path = publisher.topic_path
    publisher.topic_path = lambda proj, topic: real_topic_path(proj, f"{stem}-{topic}")
    try:
        report = sim.publish(publisher, project, n_rows, create_topics=False, **publish_kw)
    finally:
        publisher.stop()
        publisher.transport.close()
    return subs, report


def freeze_reader(state_dir) -> int:
    """SIGSTOP the driver-side reader process holding ``state_dir`` (its lease names its pid): it
    then answers neither Spark's SIGTERM nor its closed socket, as a reader that outlives its query.
    Its pid, for :func:`end_frozen`."""
    import json
    import signal

    from crdb_pubsub.source.storage import open_storage

    record, _ = open_storage(str(state_dir)).read_versioned("v3/LOCK")
    pid = int(json.loads(record)["holder"]["pid"])
    os.kill(pid, signal.SIGSTOP)
    return pid


def end_frozen(pid: int) -> None:
    """Kill a process :func:`freeze_reader` stopped, if it is still there."""
    import signal

    for sig in (signal.SIGKILL, signal.SIGCONT):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
