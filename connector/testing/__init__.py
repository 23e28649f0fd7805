"""Test your pipeline against the Pub/Sub emulator: fixtures, a changefeed written by hand, a runner.

The pytest plugin (:mod:`crdb_pubsub.testing.plugin`) comes with the package: a project's ``pytest``
finds the fixtures ``pubsub_emulator``, ``pubsub_subscription``, ``changefeed`` and ``crdb_spark``
with nothing to configure. Outside pytest, or for more control:

* :class:`Changefeed`: Python rows in (inserts, updates, deletes, resolved timestamps), the
  messages CockroachDB, Debezium or TiCDC would publish out, byte for byte, and the final state;
* :func:`publish_messages`: those messages to a topic on the emulator, with duplicates and
  disorder on request;
* :func:`run_available_now`: a streaming query run with ``Trigger.AvailableNow`` to its end,
  what it wrote returned, its own exception raised when it dies.

Nothing here is needed at run time; pytest is needed only by the plugin.
"""

from __future__ import annotations

from .feed import Changefeed
from .publishing import publish_messages
from .running import RunResult, run_available_now

__all__ = ["Changefeed", "RunResult", "publish_messages", "run_available_now"]
