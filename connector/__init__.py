"""crdb-pubsub: a Google Cloud Pub/Sub streaming source for Apache Spark that decodes CockroachDB
(and Debezium-style) changefeed messages.

    import crdb_pubsub
    crdb_pubsub.register(spark)
    df = spark.readStream.format("crdb_pubsub").option("subscription", "...").load()
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
