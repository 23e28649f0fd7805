"""Both storages for the interface's tests (``storage_url`` comes from ``tests/source/conftest.py``)."""

from __future__ import annotations

import pytest

from crdb_pubsub.source.storage import open_storage


@pytest.fixture
def storage(storage_url):
    return open_storage(storage_url)


@pytest.fixture
def kind(storage_url) -> str:
    return "gcs" if storage_url.startswith("gs://") else "posix"
