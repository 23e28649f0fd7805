"""Helpers of the fault-injection suite: counts, sinks that can't duplicate, metrics, RSS, reports.

Every scenario ends the same way: the set of message ids Pub/Sub accepted is compared with the
message ids that reached an exactly-once sink, giving ``lost`` (published, never in the sink) and
``duplicated`` (rows beyond the first per message id). Each scenario prints one line and appends it
as a JSON line to ``$CRDB_PUBSUB_FAULT_REPORT`` (default: ``crdb-pubsub-fault-report.jsonl`` in the
temp directory).
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

FULL = os.environ.get("CRDB_PUBSUB_FAULTS_FULL", "") not in ("", "0", "false", "no")


def scaled(ci: int, full: int, env: str | None = None) -> int:
    """A count: ``$env`` if set, else ``full`` with CRDB_PUBSUB_FAULTS_FULL=1, else ``ci``."""
    if env and os.environ.get(env):
        return int(os.environ[env])
    return full if FULL else ci


def report_path() -> Path:
    return Path(
        os.environ.get("CRDB_PUBSUB_FAULT_REPORT") or Path(tempfile.gettempdir()) / "crdb-pubsub-fault-report.jsonl"
    )


def report(scenario: str, **fields: Any) -> dict:
    """Print the scenario's one-line result and append it as a JSON line to the report file."""
    line = {"scenario": scenario, "full": FULL, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields}
    text = json.dumps(line, sort_keys=False, default=str)
    print(f"\nFAULT-RESULT {text}", flush=True)
    try:
        with open(report_path(), "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError:
        pass
    return line


def row_body(i: int, pad: int = 0) -> bytes:
    """A canonical CockroachDB v2 wrapped row whose primary key is ``i``."""
    filler = f', "pad": "{"p" * pad}"' if pad else ""
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}{filler}}}}},"Topic":"faults"}}'.encode()


def tally(published: Iterable[str], got: Iterable[str]) -> tuple[int, int, set[str]]:
    """(lost, duplicated, unexpected ids) of the sink's message ids against the published ones."""
    counts = collections.Counter(got)
    published = set(published)
    lost = len(published - counts.keys())
    duplicated = sum(c - 1 for c in counts.values())
    return lost, duplicated, set(counts) - published


# ------------------------------------------------------------------------- Spark file sink output


def committed_files(out_dir: Path) -> list[Path]:
    """Data files of a Spark file sink that its ``_spark_metadata`` log lists (committed batches).

    Files of a batch that was killed before it committed lie in the directory too; Spark's
    readers ignore them and so does this.
    """
    meta = Path(out_dir) / "_spark_metadata"
    if not meta.exists():
        return []
    paths: set[str] = set()
    deleted: set[str] = set()
    for log in sorted(meta.iterdir()):
        if log.name.startswith(".") or log.name.endswith(".tmp"):
            continue
        lines = log.read_text().splitlines()
        for line in lines[1:]:  # first line: the log version ("v1")
            if not line.strip():
                continue
            entry = json.loads(line)
            (deleted if entry.get("action") == "delete" else paths).add(entry["path"])
    out = []
    for p in sorted(paths - deleted):
        out.append(Path(p.removeprefix("file://").removeprefix("file:")))
    return out


def sink_column(out_dir: Path, columns: tuple[str, ...] = ("message_id",)):
    """The committed rows of a parquet file sink as a pyarrow Table (only ``columns``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p, columns=list(columns)) for p in committed_files(out_dir)]
    if not tables:
        return pa.table({c: pa.array([], pa.string()) for c in columns})
    return pa.concat_tables(tables)


def committed_batches(out_dir: Path) -> int:
    meta = Path(out_dir) / "_spark_metadata"
    if not meta.exists():
        return 0
    return len({p.name.split(".")[0] for p in meta.iterdir() if p.name.split(".")[0].isdigit()})


# ------------------------------------------------------------------------- foreachBatch sink


class BatchFileSink:
    """A ``foreachBatch`` sink that is exactly-once per batch id: batch N replaces file N.

    ``before(batch_id, ids)`` runs first and may sleep or raise (a slow or failing sink). A batch
    that raises writes nothing, so duplicates across files come from the source, never the sink.
    """

    def __init__(self, directory: Path, before: Callable[[int, list[str]], None] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.before = before
        self.calls: list[tuple[int, int, float]] = []  # (batch id, rows, monotonic end)

    def __call__(self, batch_df, batch_id: int) -> None:
        ids = [r.message_id for r in batch_df.select("message_id").collect()]
        if self.before is not None:
            self.before(batch_id, ids)
        tmp = self.dir / f".{batch_id}.tmp"
        tmp.write_text("\n".join(ids))
        os.replace(tmp, self.dir / f"{batch_id:08d}.ids")
        self.calls.append((batch_id, len(ids), time.monotonic()))

    def ids(self) -> list[str]:
        out: list[str] = []
        for p in sorted(self.dir.glob("*.ids")):
            text = p.read_text()
            if text:
                out.extend(text.split("\n"))
        return out


# ------------------------------------------------------------------------- progress metrics


def source_metrics(query) -> dict:
    """The receiver/planner counters of the last progress report (they trail by one planning step)."""
    p = query.lastProgress
    if not p or not p.get("sources"):
        return {}
    raw = p["sources"][0].get("latestOffset")
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {}


class MetricsSampler:
    """Samples ``source_metrics`` of a query every ``interval`` seconds in a thread."""

    def __init__(self, query, interval: float = 0.25) -> None:
        self.query = query
        self.interval = interval
        self.samples: list[dict] = []
        self.batches: dict[int, tuple[str, int, int]] = {}  # batch id -> (timestamp, input rows, trigger ms)
        self._seen_ts: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fault-metrics")

    def __enter__(self) -> MetricsSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for p in self.query.recentProgress:
                    ts = p.get("timestamp") if isinstance(p, dict) else p["timestamp"]
                    if ts in self._seen_ts:
                        continue
                    self._seen_ts.add(ts)
                    dur = (p["durationMs"] or {}).get("triggerExecution", 0)
                    self.batches[p["batchId"]] = (ts, p["numInputRows"], dur)
                    raw = p["sources"][0].get("latestOffset") if p["sources"] else None
                    if raw:
                        self.samples.append(json.loads(raw))
            except Exception:  # noqa: BLE001 - a stopped query has no progress to read
                pass

    def last(self) -> dict:
        return self.samples[-1] if self.samples else {}

    def max_of(self, key: str) -> int:
        return max((s.get(key, 0) for s in self.samples), default=0)

    def max_held(self) -> int:
        return max((s.get("buffered", 0) + s.get("inFlight", 0) for s in self.samples), default=0)


def _nothing_awaits_commit(metrics: dict) -> bool:
    return metrics.get("awaitingCommit", 1) == 0


def settle(
    query,
    settled: Callable[[dict], bool] = _nothing_awaits_commit,
    what: str = "the restarted query to settle",
    timeout: float = 60,
) -> dict:
    """Wait until the query's source metrics say ``settled`` (by default: nothing awaits its
    commit), sampling them as it runs; the last metrics. Fails at once if the query dies."""
    from polling import wait_for

    with MetricsSampler(query) as sampler:  # let acknowledgements of the last batches happen
        wait_for(lambda: settled(sampler.last()), timeout, what, query=query)
        return sampler.last()


def until_everything_arrives(
    query,
    ids,
    got: Callable[[], Iterable[str]],
    *,
    settled: Callable[[dict], bool] = _nothing_awaits_commit,
    timeout: float = 240,
) -> dict:
    """Wait until every id of ``ids`` is in the sink (``got()``), then :func:`settle` the query; the
    last metrics. Fails at once if the query dies."""
    from polling import wait_for

    wait_for(
        lambda: set(ids) <= set(got()),
        timeout,
        "every message in the sink after the restart",
        query=query,
        interval=1.0,
    )
    return settle(query, settled)


# ------------------------------------------------------------------------- processes


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(x) for x in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def publish_many(
    host: str, topic: str, bodies: Iterable[bytes], *, attributes: dict | None = None, window: int = 20_000
) -> list[str]:
    """Publish with a bounded number of outstanding futures (for large counts); ids in order."""
    from google.cloud.pubsub_v1.types import BatchSettings

    from crdb_pubsub.emulator import publisher_client

    publisher = publisher_client(
        host, batch_settings=BatchSettings(max_messages=1000, max_bytes=9_000_000, max_latency=0.02)
    )
    ids: list[str] = []
    pending = collections.deque()
    try:
        for b in bodies:
            pending.append(publisher.publish(topic, b, **(attributes or {})))
            if len(pending) >= window:
                while len(pending) > window // 2:
                    ids.append(pending.popleft().result(timeout=120))
        while pending:
            ids.append(pending.popleft().result(timeout=120))
        return ids
    finally:
        publisher.stop()
        publisher.transport.close()


# ------------------------------------------------------------------------- dead-letter policy


def dead_letter_subscription(
    host: str, project: str, stem: str, *, ack_deadline: int, max_attempts: int = 5
) -> tuple[str, str, str]:
    """A topic and subscription whose messages go to a dead-letter topic after ``max_attempts``
    deliveries (Pub/Sub's minimum is 5), and a subscription on that dead-letter topic.

    Every lapsed lease and every hand-back counts as a delivery attempt: what the source does to
    a message more than it should shows up as messages in the dead-letter subscription.
    Returns ``(topic, subscription, dead_letter_subscription)``.
    """
    from crdb_pubsub.emulator import create_topic_and_subscription, pubsub_clients

    dead_topic, dead_sub = create_topic_and_subscription(
        host, project, f"{stem}-dead", f"{stem}-dead-sub", ack_deadline_seconds=10
    )
    publisher, subscriber = pubsub_clients(host)
    try:
        topic = publisher.topic_path(project, stem)
        sub = subscriber.subscription_path(project, f"{stem}-sub")
        publisher.create_topic(request={"name": topic})
        subscriber.create_subscription(
            request={
                "name": sub,
                "topic": topic,
                "ack_deadline_seconds": ack_deadline,
                "dead_letter_policy": {"dead_letter_topic": dead_topic, "max_delivery_attempts": max_attempts},
            }
        )
    finally:
        publisher.transport.close()
        subscriber.close()
    return topic, sub, dead_sub
