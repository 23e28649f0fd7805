"""The fault-injection suite (issue 6). Shared fixtures (``spark``, ``emulator_host``,
``make_subscription``, ``publish``) come from ``tests/conftest.py``; helpers from ``_support``."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Scenario modules declare ``pytestmark = [pytest.mark.faults, ...]``; a scenario added without
    # it still runs with ``-m faults``. The security checks are ordinary tests of the main suite.
    for item in items:
        path = str(item.fspath).replace("\\", "/")
        if "/tests/faults/" in path and not path.endswith("test_security.py") and not item.get_closest_marker("faults"):
            item.add_marker(pytest.mark.faults)
