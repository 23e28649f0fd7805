"""The decoder's words, defined once: envelopes, modes and the kinds of output row.

The ``envelope`` and ``mode`` options, the ``crdb-pubsub tail`` command and the decoder all take
their choices from here. The envelopes are the names the envelope families declare
(:mod:`.envelopes.registry`), so a new envelope module is accepted everywhere with no other edit.
"""

from __future__ import annotations

from .envelopes.registry import NAMES

# What the ``envelope`` option accepts; ``auto`` detects each body's envelope.
ENVELOPES = ("auto", *NAMES)

# What happens to a body that can't be decoded: a ``malformed`` row, dropped, or the query fails.
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

# The ``kind`` column.
KINDS = ("row", "resolved", "ddl", "watermark", "message", "transaction", "tombstone", "malformed")

# Kinds that mark the stream's progress rather than a change; dropped unless ``includeResolved``.
PROGRESS_KINDS = ("resolved", "watermark")
