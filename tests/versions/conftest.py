"""The smoke run for every Spark version the README claims (``bash tests/run.sh --pyspark X``).

These tests run in a venv holding that pyspark version; on the pinned version the main suite
covers the same promises in depth, so a plain ``bash tests/run.sh`` leaves them out
(``CRDB_PUBSUB_SMOKE=1``, set by ``--pyspark``, includes them).
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if os.environ.get("CRDB_PUBSUB_SMOKE") == "1":
        return
    keep = [i for i in items if "/tests/versions/" not in str(i.fspath).replace("\\", "/")]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
