"""Both storages for the interface's tests: POSIX (a tmp folder) and Cloud Storage (the test server,
marked integration)."""

from __future__ import annotations

import pytest

from crdb_pubsub.source.storage import open_storage


@pytest.fixture(params=["posix", pytest.param("gcs", marks=pytest.mark.integration)])
def storage_url(request, tmp_path) -> str:
    """A fresh, empty ``stateDir`` value: a folder, or ``gs://bucket/prefix`` on the test server."""
    if request.param == "posix":
        return str(tmp_path / "state")
    return request.getfixturevalue("gcs_state_url")


@pytest.fixture
def storage(storage_url):
    return open_storage(storage_url)


@pytest.fixture
def kind(storage_url) -> str:
    return "gcs" if storage_url.startswith("gs://") else "posix"
