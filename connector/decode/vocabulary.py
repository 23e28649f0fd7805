"""The decoder's words, defined once: envelopes, modes and the kinds of output row.

The ``envelope`` and ``mode`` options, the ``crdb-pubsub tail`` command and the decoder all take
their choices from here, so that a new envelope is accepted everywhere by one edit.
"""

from __future__ import annotations

# What the ``envelope`` option accepts; ``auto`` detects each body's envelope.
ENVELOPES = ("auto", "wrapped", "bare", "key_only", "row", "enriched", "webhook", "debezium", "csv")

# What happens to a body that can't be decoded: a ``malformed`` row, dropped, or the query fails.
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

# The ``kind`` column.
KINDS = ("row", "resolved", "ddl", "watermark", "message", "transaction", "tombstone", "malformed")

# Kinds that mark the stream's progress rather than a change; dropped unless ``includeResolved``.
PROGRESS_KINDS = ("resolved", "watermark")
