"""The testing kit's own tests: pytester for the plugin, and the kit's fixtures are integration."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# The kit's fixtures start the emulator or Spark: tests using them leave the fast tier (the suite's
# conftest decides by its own fixtures' names; these are the plugin's).
_KIT_FIXTURES = {"pubsub_emulator", "pubsub_subscription", "changefeed", "crdb_spark"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _KIT_FIXTURES & set(getattr(item, "fixturenames", ())) or "pytester" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
