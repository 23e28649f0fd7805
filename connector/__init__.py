"""crdb-pubsub: a Google Cloud Pub/Sub streaming source for Apache Spark that decodes CockroachDB
(and Debezium-style) changefeed messages.

    import crdb_pubsub
    crdb_pubsub.register(spark)
    df = spark.readStream.format("crdb_pubsub").option("subscription", "...").load()
"""

from __future__ import annotations

from typing import Any

from ._version import __version__
from .decode import DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched
from . import apply  # CDC apply: crdb_pubsub.apply.apply_batch / foreach_batch_apply / read_state
from .apply import apply_batch, foreach_batch_apply, read_state

__all__ = [
    "__version__",
    "register",
    "decode_messages",
    "schema_from_enriched",
    "DecodeStats",
    "MalformedMessageError",
    "apply",
    "apply_batch",
    "foreach_batch_apply",
    "read_state",
]


def register(spark: Any) -> None:
    """Register the ``crdb_pubsub`` streaming format on a SparkSession (calling it twice is harmless)."""
    from .source.datasource import register as _register

    _register(spark)
