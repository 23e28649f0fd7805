"""Fixtures of the ``receiver=executors`` tests."""

from __future__ import annotations

import pytest

from crdb_pubsub.source.executors import task


@pytest.fixture(autouse=True)
def _fresh_worker(monkeypatch):
    """Each test is a fresh Python worker: nothing learned by an earlier task."""
    monkeypatch.setattr(task, "_LEARNED", {})
    monkeypatch.setattr(task, "_SIZES", {})
