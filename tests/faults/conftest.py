"""The fault-injection suite (issue 6). Shared fixtures (``spark``, ``emulator_host``,
``make_subscription``, ``publish``) come from ``tests/conftest.py``; helpers from ``_support``."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    # Every scenario module declares ``pytestmark = [pytest.mark.faults, ...]``; make sure a test
    # added without it still runs with ``-m faults`` and stays out of ``-m "not faults"``.
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/") and "test_security" not in item.name and not item.get_closest_marker("faults"):
            if item.fspath.basename != "test_security.py":
                item.add_marker(pytest.mark.faults)
