"""``spark.readStream.format("crdb_pubsub")`` without ``crdb_pubsub.register(spark)``.

Installed as the top-level module ``pyspark_crdb_pubsub``: Spark's data source lookup imports every
installed module whose name starts with ``pyspark_`` and registers its ``DefaultSource`` under
``DefaultSource.name()``, in every new session. ``register()`` stays (a second registration of the
same class is harmless).
"""

from crdb_pubsub.source.datasource import CrdbPubSubDataSource as DefaultSource

__all__ = ["DefaultSource"]
