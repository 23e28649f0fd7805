"""The Spark glue: ``spark.readStream.format("crdb_pubsub")``.

Where each piece runs (measured on pyspark 4.0.5 to 4.3.0):

* :class:`CrdbPubSubDataSource` is built in a short-lived planning process when ``load()`` runs;
  the options are validated there, so a bad option fails ``load()``.
* :class:`CrdbPubSubStreamReader`'s driver-side methods (``initialOffset``, ``latestOffset``,
  ``partitions``, ``commit``) run in one long-lived Python process per query. The offset protocol
  (:class:`~crdb_pubsub.source.core.protocol.OffsetProtocol`) over the chosen receiver mode
  (:mod:`.driver` or :mod:`.executors`) is created lazily there on the first call, never in
  ``__init__``; Spark stops that process with SIGTERM (``stop()`` is not called), and the
  hand-back in :mod:`.lifecycle` runs then.
* The reader is pickled to the executors for ``read``; ``__getstate__`` drops the driver state,
  so everything ``read`` needs travels inside :class:`MessagesPartition`.

Spark 4.2 added admission control (``latestOffset(start, limit)``, read limits,
``Trigger.AvailableNow``, ``reportLatestOffset``); on 4.0/4.1 Spark calls ``latestOffset()``
without arguments, the reader applies ``maxMessagesPerTrigger``/``maxBytesPerTrigger`` itself,
and AvailableNow runs as a single batch.

Errors: Spark writes a Python error as its own prefix, then the Python traceback, then the
message, so the line that says what to do used to be the ~25th of 30. The source's own exception
types (``crdb_pubsub.*``: a bad option, unreachable Pub/Sub, a stateDir held by another query...)
carry one line written for the user, so for them the traceback is dropped (:func:`_plainly`): the
first line of the error ``load()`` raises, or of ``query.exception()``, ends with that line.
Anything else (a bug) keeps its traceback.

Data flows one way: Pub/Sub -> receiver -> sealed batch -> Arrow IPC partitions (fetched by the
task from this process, or inside the partition) -> ``read`` -> decoder -> Arrow record batches ->
Spark. With ``receiver=executors`` the partitions carry orders
instead of messages: Pub/Sub -> ``read`` (pull, record the slice in the stateDir) -> decoder ->
Spark, and the driver acknowledges from the recorded slices (:mod:`.executors`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._spark import require_pyspark

require_pyspark()  # without pyspark >= 4.0: one line saying so, not an ImportError from deep inside

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402

from .options import SourceOptions, option_table, parse_options  # noqa: E402

try:  # Spark 4.2+
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    _READER_BASES: tuple[type, ...] = (DataSourceStreamReader, SupportsTriggerAvailableNow)
except ImportError:  # Spark 4.0/4.1: no admission control
    ReadAllAvailable = ReadLimit = ReadMaxBytes = ReadMaxRows = None  # type: ignore[assignment,misc]
    _READER_BASES = (DataSourceStreamReader,)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from .core.protocol import OffsetProtocol

log = logging.getLogger("crdb_pubsub")

SHORT_NAME = "crdb_pubsub"
HAND_BACK_SECONDS = 5.0  # how long a terminated reader may take to hand its messages back


# pyspark's worker formats an error without its traceback when this is set in the worker's
# environment (pyspark.util.handle_worker_exception, 4.0 to 4.3); the worker then exits, so it
# affects that one error.
_HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"


@contextlib.contextmanager
def _plainly() -> Iterator[None]:
    """Let the source's own errors reach the user as their one line, right after Spark's prefix.

    Used only where an error ends the Python process that raised it: ``load()``'s planning worker
    and the driver-side reader's process (both exit after reporting it). Anywhere else (a test, or
    a program calling the reader itself) the environment is left alone: a Spark started later
    would inherit the setting.
    """
    try:
        yield
    except Exception as exc:
        if type(exc).__module__.startswith("crdb_pubsub.") and _in_a_spark_worker():
            os.environ[_HIDE_TRACEBACK] = "1"
        raise


def _in_a_spark_worker() -> bool:
    # Spark's Python workers run as pyspark.daemon's children or as a pyspark module (the
    # streaming source runner): their __main__ is pyspark's.
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return str(getattr(spec, "name", "") or "").startswith("pyspark.")


def _said_plainly(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _plainly():
            return method(*args, **kwargs)

    return wrapper


def _row_struct(options: SourceOptions) -> StructType | None:
    if not options.rowSchema:
        return None
    from ..decode.ddl import parse_ddl

    return parse_ddl(options.rowSchema)


class CrdbPubSubDataSource(DataSource):
    """Streaming source of decoded CockroachDB / Debezium change events from Pub/Sub subscriptions.

    See the README for the options and the output columns.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Validate now: this runs inside ``load()``, which is where a bad option should fail.
        with _plainly():
            self.source_options = parse_options(dict(options))
        # Spark keeps ``self.options`` (it holds credentials); make sure no repr shows them.
        self.options = _RedactedOptions(options)

    @classmethod
    def name(cls) -> str:
        """Return the format's name, ``crdb_pubsub`` (``spark.readStream.format("crdb_pubsub")``)."""
        return SHORT_NAME

    @_said_plainly
    def schema(self) -> StructType:
        """Return the change-event columns, those ``columns`` names in its order if set.

        ``after``/``before`` are structs of ``rowSchema`` when it is set.
        """
        from ..decode.schema import spark_schema

        options = self.source_options
        return spark_schema(_row_struct(options), options.output_columns)

    def streamReader(self, schema: StructType) -> CrdbPubSubStreamReader:
        """Return the stream reader Spark drives from its driver, with the options validated at ``load()``."""
        return CrdbPubSubStreamReader(self.source_options, schema)

    def reader(self, schema: StructType):
        """Refuse a batch read: this is a streaming source (``trigger(availableNow=True)`` drains once)."""
        raise NotImplementedError(
            "crdb_pubsub is a streaming source: use spark.readStream.format('crdb_pubsub'), "
            "with .trigger(availableNow=True) for a one-off drain of the backlog"
        )


assert CrdbPubSubDataSource.__doc__ is not None  # the class has a docstring
CrdbPubSubDataSource.__doc__ = f"""{CrdbPubSubDataSource.__doc__.rstrip()}

    Options (case-insensitive; validated when ``load()`` runs):

{option_table()}"""


class _RedactedOptions(dict):
    """Spark's option map, with credentials masked in ``repr``/``str``."""

    def __repr__(self) -> str:
        return repr({k: ("**********" if k.lower().startswith("credentials") else v) for k, v in self.items()})

    __str__ = __repr__


@dataclass
class MessagesPartition(InputPartition):
    """One slice of a micro-batch: its messages as one Arrow IPC stream, or the ticket to fetch them.

    With ``batchTransfer=fetch`` the task fetches the stream from the driver-side reader
    (:mod:`.driver.handoff`); with ``tasks`` it travels inside the partition. It also carries
    where to report the decode counts (the driver-side reader's stats listener).
    """

    batch_id: int
    index: int
    messages: Any  # a handoff Ticket, or a pyarrow.Buffer (bytes after a round trip through pickle)
    stats: tuple[tuple[str, ...], str] | None = None

    def __repr__(self) -> str:  # keep Spark's plan strings and logs small, and the ticket's secrets out
        size = getattr(self.messages, "size", None)
        return f"MessagesPartition(batch={self.batch_id}, index={self.index}, bytes={size if size is not None else len(self.messages)})"


@dataclass
class SlicePartition(InputPartition):
    """``receiver=executors``: one task's order to pull (or replay) its slice of a micro-batch."""

    batch_id: int
    index: int
    order: Any  # crdb_pubsub.source.executors.orders.SliceOrder
    stats: tuple[tuple[str, ...], str] | None = None

    def __repr__(self) -> str:
        return f"SlicePartition(batch={self.batch_id}, index={self.index})"


class CrdbPubSubStreamReader(*_READER_BASES):  # type: ignore[misc]
    """Micro-batch reader. Offsets are ``{"batch": N, "run": R}``; see :mod:`.core.protocol`."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._planner: OffsetProtocol | None = None  # driver process only, created on first use

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_planner"] = None  # threads, sockets and locks stay on the driver
        if self._options.receiver == "driver":
            # The pickled reader only serves executors' ``read``, which then needs no credentials.
            # With receiver=executors the tasks pull: the credentials options travel in the
            # serialised task (never in a plan string or a log: their repr is masked).
            state["_options"] = self._options.model_copy(update={"credentialsJson": None, "credentialsFile": None})
        return state

    def _driver(self) -> OffsetProtocol:
        if self._planner is None:
            from .core.protocol import protocol_for
            from .lifecycle import configure_logging, on_terminate

            configure_logging()
            if self._options.receiver == "executors":
                from .executors import ExecutorsMode

                self._planner = protocol_for(self._options, ExecutorsMode)
            else:
                from .driver import DriverMode

                self._planner = protocol_for(self._options, DriverMode)
            planner = self._planner
            on_terminate(lambda: planner.shutdown(within=HAND_BACK_SECONDS), within=HAND_BACK_SECONDS + 1.0)
        return self._planner

    # ---- driver side ------------------------------------------------------------------------

    @_said_plainly
    def initialOffset(self) -> dict:
        """Return the offset before the first batch of a new query (a fresh checkpoint).

        Without a stateDir it also opens the subscriptions, so that a missing subscription or
        unreachable Pub/Sub fails the query at once. With one, that waits for the next call: it
        names the query run, by which a reader of the same run that outlived its query is told
        apart from another query holding the stateDir (see :mod:`.lifecycle`).
        """
        return self._driver().initial_offset()

    def getDefaultReadLimit(self) -> Any:
        """Spark 4.2+: the per-batch limit from ``maxMessagesPerTrigger``/``maxBytesPerTrigger``."""
        if self._options.maxMessagesPerTrigger is not None:
            return ReadMaxRows(self._options.maxMessagesPerTrigger)
        if self._options.maxBytesPerTrigger is not None:
            return ReadMaxBytes(self._options.maxBytesPerTrigger)
        return ReadAllAvailable()

    @_said_plainly
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """Return the end offset of the next batch (``start`` when there is nothing new).

        Spark calls it once the previous batch committed, so it first acknowledges every batch up
        to ``start`` (4.2+; on 4.0/4.1, called without arguments, up to the newest offset Spark
        holds). It then seals what is buffered, within the read limit, into the next batch,
        durably first with a stateDir. It returns at once when nothing is buffered, except on the
        first call of a process (it waits, bounded, for what the subscriptions hold) and during
        Trigger.AvailableNow (it waits until the backlog is drained: returning ``start`` ends the
        run).
        """
        max_messages = self._options.maxMessagesPerTrigger
        max_bytes = self._options.maxBytesPerTrigger
        if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            max_messages = max_bytes = None  # the engine overrides the options (e.g. Trigger.Once)
        elif ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_messages = limit.max_rows
        elif ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        return self._driver().latest(start, max_messages, max_bytes)

    @_said_plainly
    def prepareForTriggerAvailableNow(self) -> None:
        """Spark 4.2+, Trigger.AvailableNow: read what was published before now, then end."""
        self._driver().prepare_available_now()

    @_said_plainly
    def partitions(self, start: dict, end: dict) -> list[MessagesPartition] | list[SlicePartition]:
        """Return the input partitions of the batches in ``(start, end]``, ``[]`` when ``start == end``.

        Never acknowledges anything: after a restart Spark 4.0/4.1 call ``partitions(X, X)`` with a
        batch X that may not have committed. A batch planned by an earlier process is replayed
        from the stateDir with the same messages, or yields nothing without one.
        """
        planner = self._driver()
        stats = planner.stats_address()
        if self._options.receiver == "executors":
            return [SlicePartition(bid, i, order, stats) for bid, i, order in planner.partitions(start, end)]
        return [MessagesPartition(bid, i, payload, stats) for bid, i, payload in planner.partitions(start, end)]

    @_said_plainly
    def commit(self, end: dict) -> None:
        """Spark committed every batch up to ``end``: acknowledge their messages."""
        self._driver().commit(end)

    def reportLatestOffset(self) -> dict | None:
        """Spark 4.2+: the source's counters, shown in the query progress as ``latestOffset``."""
        if self._planner is None:
            return None
        return self._planner.report()

    def stop(self) -> None:
        """Rarely called by Spark (it terminates the process instead); hands messages back."""
        if self._planner is not None:
            self._planner.shutdown(within=HAND_BACK_SECONDS)

    # ---- executor side ----------------------------------------------------------------------

    def read(self, partition: MessagesPartition | SlicePartition) -> Iterator[pa.RecordBatch]:
        """Decode one partition's messages into record batches of the output schema.

        With ``receiver=executors`` the task first pulls its slice and records it in the stateDir
        (or replays the recorded one), and keeps its leases until Spark consumed the rows: see
        :mod:`.executors`.
        """
        if isinstance(partition, SlicePartition):
            from .executors.task import pulled_slice

            with pulled_slice(self._options, partition.order) as table:
                yield from self._decoded(table, partition)
        else:
            from .driver.handoff import Ticket, fetch
            from .wire import from_ipc

            messages = partition.messages
            yield from self._decoded(from_ipc(fetch(messages) if isinstance(messages, Ticket) else messages), partition)

    def _decoded(self, table: pa.Table, partition: MessagesPartition | SlicePartition) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from ..decode import DecodeStats, decode_messages
        from .stats import send_report

        n = table.num_rows
        if n == 0:
            return
        stats = DecodeStats()
        options = self._options
        columns = options.decode_columns
        # The metadata columns go to the decoder as they are: no Python object per message.
        batch = decode_messages(
            table.column("data"),
            message_ids=table.column("message_id"),
            publish_times=table.column("publish_us"),
            attributes=table.column("attributes"),
            ordering_keys=table.column("ordering_key"),
            stats=stats,
            columns=columns,
            **options.decoder_kwargs(),
        )
        if self._options.deadLetterTopic and stats.malformed:
            from .dead_letter import publish_malformed

            publish_malformed(batch, self._options)
            if self._options.mode == "DROPMALFORMED":
                batch = batch.filter(pc.not_equal(batch.column("kind"), "malformed"))
        if partition.stats is not None:
            send_report(partition.stats[0], partition.stats[1], partition.batch_id, partition.index, n, stats.malformed)
        if not self._options.includeResolved and batch.num_rows:
            keep = pc.invert(pc.is_in(batch.column("kind"), value_set=_PROGRESS_KINDS()))
            batch = batch.filter(keep)
        if len(columns) > len(options.output_columns):  # what only the source read goes before Spark sees it
            batch = batch.select(list(options.output_columns))
        if batch.num_rows:
            yield batch


def _PROGRESS_KINDS():
    import pyarrow as pa

    from ..decode.vocabulary import PROGRESS_KINDS

    return pa.array(PROGRESS_KINDS)


def register(spark: Any) -> None:
    """Register the ``crdb_pubsub`` format on ``spark`` (idempotent: a second call changes nothing)."""
    spark.dataSource.register(CrdbPubSubDataSource)
