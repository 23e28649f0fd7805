"""Fixtures for the source's tests: a fake Pub/Sub behind the source's client factory, and readers
built the way Spark builds them (``DataSource(options).streamReader(schema)``)."""

from __future__ import annotations

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
    monkeypatch.setattr(importlib.import_module("crdb_pubsub.source.executors.task"), "_RPCS", {})
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
