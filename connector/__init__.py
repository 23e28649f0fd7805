"""crdb-pubsub: a Google Cloud Pub/Sub streaming source for Apache Spark that decodes CockroachDB
(and Debezium-style) changefeed messages.

    import crdb_pubsub
    crdb_pubsub.register(spark)
    df = spark.readStream.format("crdb_pubsub").option("subscription", "...").load()
"""

from __future__ import annotations

from typing import Any

from . import apply  # CDC apply: crdb_pubsub.apply.apply_batch / foreach_batch_apply / read_state
from ._version import __version__
from .apply import apply_batch, foreach_batch_apply, read_state
from .decode import DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched

__all__ = [
    "DecodeStats",
    "MalformedMessageError",
    "__version__",
    "apply",
    "apply_batch",
    "decode_messages",
    "foreach_batch_apply",
    "read_state",
    "register",
    "schema_from_enriched",
]


def register(spark: Any) -> None:
    """Register the ``crdb_pubsub`` streaming format on a SparkSession (calling it twice is harmless)."""
    from .source.datasource import register as _register

    _register(spark)
