"""crdb-pubsub: a Google Cloud Pub/Sub streaming source for Apache Spark.

It decodes CockroachDB (and Debezium-style) changefeed messages.

    import crdb_pubsub
    crdb_pubsub.register(spark)
    df = spark.readStream.format("crdb_pubsub").option("subscription", "...").load()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._spark import require_pyspark as _require_pyspark
from ._version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from . import apply
    from .apply import apply_batch, foreach_batch_apply, read_state
    from .decode import DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched

# pyspark is not a dependency (a cluster brings its own; the ``spark`` extra brings one elsewhere):
# importing the package needs none, and what needs Spark says in one line when it is missing or
# older than 4.0 (``_spark``). The public names are imported when first used (PEP 562): Spark's
# driver-side runner imports ``crdb_pubsub.source`` once per query and never decodes, and the
# decoder's first ``pa.array`` imports pandas (~0.5 s of a query's start-up there).
_LAZY = {
    "decode_messages": ".decode",
    "schema_from_enriched": ".decode",
    "DecodeStats": ".decode",
    "MalformedMessageError": ".decode",
    "apply_batch": ".apply",
    "foreach_batch_apply": ".apply",
    "read_state": ".apply",
}

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


def __getattr__(name: str) -> Any:
    if name == "apply":  # CDC apply: crdb_pubsub.apply.apply_batch / foreach_batch_apply / read_state
        _require_pyspark()
        return importlib.import_module(".apply", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _require_pyspark()  # the decoder and the apply build on pyspark's types
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def register(spark: Any) -> None:
    """Register the ``crdb_pubsub`` streaming format on a SparkSession (calling it twice is harmless)."""
    from .source.datasource import register as _register

    _register(spark)
