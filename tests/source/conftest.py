"""Fixtures for the source's tests: a fake Pub/Sub behind the source's client factory, and readers
built the way Spark builds them (``DataSource(options).streamReader(schema)``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fake_pubsub import FakePubSub

FAKE_HOST = "127.0.0.1:1"  # never dialled: the client factory is replaced by the fake


@pytest.fixture
def fake(monkeypatch) -> FakePubSub:
    """A :class:`FakePubSub` that every reader built in the test talks to."""
    import importlib

    import crdb_pubsub.source.transport as transport

    service = FakePubSub()
    monkeypatch.setattr(transport, "subscriber_client", lambda host=None, credentials=None, **kw: service.client())
    # The executors' tasks keep one client per worker process: here every test's tasks run in this
    # process, so each test starts without the clients of the tests before it.
    for name in ("crdb_pubsub.source.executors.task", "crdb_pubsub.source.slices.pull"):
        try:
            monkeypatch.setattr(importlib.import_module(name), "_RPCS", {})
        except ImportError:
            pass
    return service


@pytest.fixture(params=["posix", pytest.param("gcs", marks=pytest.mark.integration)])
def storage_url(request, tmp_path) -> str:
    """A fresh, empty ``stateDir`` value on each storage: a folder, or ``gs://bucket/prefix`` on the
    Cloud Storage test server."""
    if request.param == "posix":
        return str(tmp_path / "state")
    return request.getfixturevalue("gcs_state_url")


def build_reader(subscription: str, **options: Any) -> Any:
    """A stream reader as Spark builds it in the driver: options validated at load()."""
    from crdb_pubsub.source.datasource import CrdbPubSubDataSource

    opts = {"subscription": subscription, "emulatorHost": FAKE_HOST}
    opts.update({k: str(v) for k, v in options.items()})
    ds = CrdbPubSubDataSource(opts)
    return ds.streamReader(ds.schema())


@pytest.fixture
def make_reader() -> Callable[..., Any]:
    readers: list[Any] = []

    def make(subscription: str, **options: Any) -> Any:
        r = build_reader(subscription, **options)
        readers.append(r)
        return r

    yield make
    for r in readers:
        try:
            r.stop()
        except Exception:  # noqa: BLE001 - a reader a test already stopped
            pass


def until(cond: Callable[[], bool], timeout: float, what: str, step: Callable[[], Any] | None = None) -> None:
    """Poll ``cond`` (running ``step`` between polls) until true, or fail naming ``what``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        if step is not None:
            step()
        else:
            time.sleep(0.05)
    assert cond(), f"timed out after {timeout:.0f} s waiting for {what}"
