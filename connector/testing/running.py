"""Run a streaming query with ``Trigger.AvailableNow`` to its end, and see what it wrote."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamWriter

__all__ = ["RunResult", "run_available_now"]


@dataclasses.dataclass
class RunResult:
    """What :func:`run_available_now` saw.

    ``rows``: what the query wrote, as one Arrow table (a DataFrame given: its rows of every batch;
    a writer given: None, its sink holds them); ``batches``: micro-batches that held rows;
    ``progress``: the query's ``recentProgress``.
    """

    rows: pa.Table | None
    batches: int
    progress: list[dict[str, Any]]

    def to_pylist(self) -> list[dict[str, Any]]:
        """Return the rows written, as dicts (empty when the query wrote none or a writer was given)."""
        return [] if self.rows is None else self.rows.to_pylist()


def run_available_now(
    stream: DataFrame | DataStreamWriter,
    *,
    checkpoint_dir: str | None = None,
    timeout: float = 300.0,
) -> RunResult:
    """Run ``stream`` with ``Trigger.AvailableNow`` until it has read everything there, then return.

    ``stream``: a streaming DataFrame (what it yields is collected and returned: the query's
    output as one Arrow table), or the ``writeStream`` of your pipeline, sink and all
    (``df.writeStream.foreachBatch(foreach_batch_apply(state_dir))``: then read the sink, e.g.
    :func:`crdb_pubsub.apply.read_state`). The checkpoint goes to ``checkpoint_dir`` (a fresh
    temporary directory by default; it replaces a ``checkpointLocation`` set on the writer).

    When the query dies, its own exception is raised (``StreamingQueryException``, whose message
    holds the cause), not a timeout; when it has not ended after ``timeout`` seconds it is
    stopped and ``TimeoutError`` says how far it got. Needs a classic (not Connect) session for a
    DataFrame: the batches are collected in this process.
    """
    from pyspark.sql import DataFrame

    collected: list[pa.Table] = []
    if isinstance(stream, DataFrame):
        if not stream.isStreaming:
            raise TypeError("run_available_now: a streaming DataFrame (spark.readStream...), got a batch one")

        def collect(batch_df: DataFrame, batch_id: int) -> None:
            table = batch_df.toArrow()
            if table.num_rows:
                collected.append(table)

        writer = stream.writeStream.foreachBatch(collect)
    else:
        writer = stream
    checkpoint = checkpoint_dir or tempfile.mkdtemp(prefix="crdb-pubsub-test-checkpoint-")
    query = writer.trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    try:
        ended = query.awaitTermination(int(timeout) or 1)  # raises StreamingQueryException if the query died
    finally:
        if query.isActive and query.exception() is None:
            query.stop()
    error = query.exception()
    if error is not None:
        raise error
    progress = [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]
    if not ended:
        last = progress[-1] if progress else {}
        raise TimeoutError(
            f"run_available_now: the query had not ended after {timeout:g} s (batches so far: "
            f"{last.get('batchId', 'none')}, last input rows {last.get('numInputRows', 0)}); it was stopped"
        )
    import pyarrow as pa

    rows = pa.concat_tables(collected, promote_options="permissive") if collected else None
    return RunResult(rows, sum(1 for p in progress if p.get("numInputRows")), progress)
