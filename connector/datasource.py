"""The Spark glue: ``spark.readStream.format("crdb_pubsub")``.

Where each piece runs (NOTES.md section 3):

* ``CrdbPubSubDataSource`` is built in a short-lived planning process when ``load()`` runs; the
  options are validated there, so a bad option fails ``load()``.
* ``CrdbPubSubStreamReader``'s driver-side methods (``initialOffset``, ``latestOffset``,
  ``partitions``, ``commit``) run in one long-lived Python process per query. The receiver
  (``Planner`` -> ``Receiver``) is created lazily there on the first call, never in ``__init__``.
* The reader is pickled to the executors for ``read``; ``__getstate__`` drops the driver state, so
  everything ``read`` needs travels inside :class:`MessagesPartition` (Arrow IPC bytes).

Data flows one way: Pub/Sub -> receiver -> sealed batch -> Arrow IPC partitions -> ``read`` ->
``decode_messages`` -> Arrow record batches -> Spark.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, SupportsTriggerAvailableNow

from .options import SourceOptions, parse_options
from .schema import spark_schema

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from .planner import Planner

log = logging.getLogger("crdb_pubsub")

SHORT_NAME = "crdb_pubsub"


def _row_struct(options: SourceOptions) -> "StructType | None":
    if not options.rowSchema:
        return None
    from .ddl import parse_ddl

    return parse_ddl(options.rowSchema)


class CrdbPubSubDataSource(DataSource):
    """Streaming source of decoded CockroachDB / Debezium change events from Pub/Sub subscriptions.

    See the README for the options and the output columns.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Validate now: this runs inside ``load()``, which is where a bad option should fail.
        self.source_options = parse_options(dict(options))
        # Spark keeps ``self.options`` (it holds credentials); make sure no repr shows them.
        self.options = _RedactedOptions(options)

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> "StructType":
        return spark_schema(_row_struct(self.source_options))

    def streamReader(self, schema: "StructType") -> "CrdbPubSubStreamReader":
        return CrdbPubSubStreamReader(self.source_options, schema)

    def reader(self, schema: "StructType"):  # noqa: ANN201 - batch reads are deliberately unsupported
        raise NotImplementedError(
            "crdb_pubsub is a streaming source: use spark.readStream.format('crdb_pubsub'), "
            "with .trigger(availableNow=True) for a one-off drain of the backlog"
        )


class _RedactedOptions(dict):
    """Spark's option map, with credentials masked in ``repr``/``str``."""

    def __repr__(self) -> str:
        return repr({k: ("**********" if k.lower().startswith("credentials") else v) for k, v in self.items()})

    __str__ = __repr__


@dataclass
class MessagesPartition(InputPartition):
    """One slice of a micro-batch: the messages as Arrow IPC, plus what decoding needs."""

    batch_id: int
    index: int
    ipc: bytes

    def __repr__(self) -> str:  # keep Spark's plan strings and logs small
        return f"MessagesPartition(batch={self.batch_id}, index={self.index}, bytes={len(self.ipc)})"


class CrdbPubSubStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets are ``{"batch": N}``; see ``planner.py`` for the protocol."""

    def __init__(self, options: SourceOptions, schema: "StructType") -> None:
        self._options = options
        self._schema = schema
        self._planner: "Planner | None" = None  # driver process only, created on first use

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_planner"] = None  # threads, sockets and locks stay on the driver
        # The pickled reader only serves executors' ``read``, which needs no credentials.
        state["_options"] = self._options.model_copy(update={"credentialsJson": None, "credentialsFile": None})
        return state

    def _driver(self) -> "Planner":
        if self._planner is None:
            from .planner import Planner

            _configure_logging()
            self._planner = Planner(self._options, malformed_counter=self._count_malformed)
        return self._planner

    # ---- driver side ------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        self._driver().ensure_started()  # fail fast if Pub/Sub or the subscription is missing
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.maxMessagesPerTrigger is not None:
            return ReadMaxRows(self._options.maxMessagesPerTrigger)
        if self._options.maxBytesPerTrigger is not None:
            return ReadMaxBytes(self._options.maxBytesPerTrigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        max_messages = self._options.maxMessagesPerTrigger
        max_bytes = self._options.maxBytesPerTrigger
        if isinstance(limit, ReadAllAvailable):
            max_messages = max_bytes = None  # the engine overrides the options (e.g. Trigger.Once)
        elif isinstance(limit, ReadMaxRows):
            max_messages = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        return self._driver().latest(start, max_messages, max_bytes)

    def prepareForTriggerAvailableNow(self) -> None:
        self._driver().prepare_available_now()

    def partitions(self, start: dict, end: dict) -> list[MessagesPartition]:
        from .ledger import messages_to_arrow, to_ipc
        from .planner import _batch_id, split_evenly

        messages = self._driver().messages_for(start, end)
        bid = _batch_id(end) or 0
        return [
            MessagesPartition(bid, i, to_ipc(messages_to_arrow(chunk)))
            for i, chunk in enumerate(split_evenly(messages, self._options.numPartitions))
        ]

    def commit(self, end: dict) -> None:
        self._driver().commit(end)

    def reportLatestOffset(self) -> dict | None:
        if self._planner is None:
            return None
        return self._planner.report()

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.stop()

    def _count_malformed(self, messages: list) -> int:
        """Malformed messages of a committed batch, for the progress report.

        The executors decode (and may drop) rows where the driver can't see them, so the
        count is taken here with the same decoder, on the bodies the driver still holds.
        """
        from .decoding import DecodeStats, decode_messages

        stats = DecodeStats()
        decode_messages(
            [m.data for m in messages],
            envelope=self._options.envelope,
            mode="DROPMALFORMED",
            row_schema=self._options.rowSchema,
            stats=stats,
        )
        return stats.malformed

    # ---- executor side ----------------------------------------------------------------------

    def read(self, partition: MessagesPartition) -> Iterator["pa.RecordBatch"]:
        import pyarrow.compute as pc

        from .decoding import decode_messages
        from .ledger import from_ipc

        table = from_ipc(partition.ipc)
        n = table.num_rows
        if n == 0:
            return
        attrs = table.column("attributes").to_pylist()
        batch = decode_messages(
            table.column("data").to_pylist(),
            message_ids=table.column("message_id").to_pylist(),
            publish_times=table.column("publish_us").to_pylist(),
            attributes=[dict(a) if a else None for a in attrs],
            ordering_keys=table.column("ordering_key").to_pylist(),
            **self._options.decoder_kwargs(),
        )
        if not self._options.includeResolved and batch.num_rows:
            keep = pc.invert(pc.is_in(batch.column("kind"), value_set=_PROGRESS_KINDS()))
            batch = batch.filter(keep)
        if batch.num_rows:
            yield batch


def _PROGRESS_KINDS():  # noqa: N802 - a constant built lazily (pyarrow import on executors only)
    import pyarrow as pa

    return pa.array(["resolved", "watermark"])


def _configure_logging() -> None:
    """Give the driver-side reader process a log handler (Spark's Python worker has none)."""
    import sys

    logger = logging.getLogger("crdb_pubsub")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def register(spark: Any) -> None:
    """Register the ``crdb_pubsub`` format on ``spark`` (idempotent: a second call changes nothing)."""
    spark.dataSource.register(CrdbPubSubDataSource)
