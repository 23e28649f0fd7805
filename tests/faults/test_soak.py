"""Scenario 6: soak. Many messages through one query with bounded buffers.

``CRDB_PUBSUB_SOAK_MESSAGES`` sets the count (CI default below; 1,000,000 with
``CRDB_PUBSUB_FAULTS_FULL=1``). A background publisher keeps at most ``BACKLOG`` messages ahead of
the sink (the emulator holds its backlog in memory). Measured:

* the RSS of the driver-side reader process (the Python process running
  ``pyspark.sql.streaming.python_streaming_source_runner`` under this test's JVM), sampled every
  second: it must stay under ``RSS_BASE_MB + n * RSS_PER_MESSAGE_B`` (300 MB + 250 B per message;
  the per-message part is the 600 s dedupe window of acknowledged ids, which holds every message of
  a run this short). Measured: ~245 MB at 100,000, ~390 MB at 1,000,000;
* throughput per quarter of the messages (from Spark's progress reports), wall clock and
  processing rate (rows / time spent in the quarter's batches, the source's own pace, free of
  waits for the publisher): the last quarter's processing rate must be >= 0.5x the first's
  (loose: the machine is shared);
* lost = 0, duplicated = 0 against the parquet sink.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from polling import wait_for

from ._support import (
    MetricsSampler,
    cmdline,
    descendants,
    publish_many,
    report,
    row_body,
    rss_mb,
    scaled,
    sink_column,
    tally,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

BACKLOG = 60_000
MAX_OUTSTANDING = 20_000
PER_TRIGGER = 5_000
# Bound on the reader process's RSS: a base (interpreter, pyarrow, gRPC, google clients, a full
# flow-control window) plus the dedupe window, which remembers every acknowledged message id for
# 600 s (~100-150 B each): within one soak run that is every message, so it grows with the count.
RSS_BASE_MB = 300
RSS_PER_MESSAGE_B = 250
RUNNER = "python_streaming_source_runner"


def _find_runner(exclude: set[int]) -> int | None:
    for pid in descendants(os.getpid()):
        if pid not in exclude and RUNNER in cmdline(pid):
            return pid
    return None


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_soak_bounded_memory_and_stable_throughput(spark, emulator_host, make_subscription, tmp_path: Path, receiver):
    n = scaled(100_000, 1_000_000, "CRDB_PUBSUB_SOAK_MESSAGES")
    topic, sub = make_subscription(ack_deadline_seconds=30)
    before = {pid for pid in descendants(os.getpid()) if RUNNER in cmdline(pid)}
    published: list[str] = []
    sink_rows = [0]
    pub_error: list[BaseException] = []

    def publisher() -> None:
        try:
            for start in range(0, n, 5000):
                while len(published) - sink_rows[0] > BACKLOG:
                    time.sleep(0.2)
                published.extend(
                    publish_many(emulator_host, topic, (row_body(i) for i in range(start, min(n, start + 5000))))
                )
        except BaseException as exc:  # noqa: BLE001
            pub_error.append(exc)

    r = (
        spark.readStream.format("crdb_pubsub")
        .option("subscription", sub)
        .option("emulatorHost", emulator_host)
        .option("maxOutstandingMessages", str(MAX_OUTSTANDING))
        .option("maxMessagesPerTrigger", str(PER_TRIGGER))
        .option("ackDeadlineSeconds", "30")
        .option("receiver", receiver)
    )
    if receiver == "executors":
        r = r.option("stateDir", str(tmp_path / "state")).option("numPartitions", "2")
    q = (
        r.load()
        .select("message_id", "kind")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    rss: list[tuple[int, float]] = []  # (rows committed, MB)
    runner = None
    t0 = time.monotonic()
    try:
        with MetricsSampler(q, interval=0.5) as sampler:
            pub = threading.Thread(target=publisher, daemon=True)
            pub.start()
            end = time.monotonic() + max(600, n / 200)
            while time.monotonic() < end:
                assert not pub_error, pub_error
                assert q.exception() is None, q.exception()
                sink_rows[0] = sum(r for _, r, _ in sampler.batches.values())
                if runner is None:
                    runner = _find_runner(before)
                if runner is not None:
                    mb = rss_mb(runner)
                    if mb is not None:
                        rss.append((sink_rows[0], mb))
                if sink_rows[0] >= n and not pub.is_alive():
                    break
                time.sleep(1.0)
            assert sink_rows[0] >= n, f"only {sink_rows[0]} of {n} rows in {time.monotonic() - t0:.0f} s"
            wait_for(lambda: sampler.last().get("awaitingCommit", 1) == 0, 60, "the last batch acknowledged", query=q)
            last = sampler.last()
    finally:
        q.stop()
    elapsed = time.monotonic() - t0

    # Throughput per quarter of the messages, from the progress reports (batch end times).
    from datetime import datetime

    def end_time(ts: str, ms: int) -> float:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() + ms / 1000

    # Wall-clock rate per quarter (includes waits for the publisher) and processing rate per
    # quarter (rows / time Spark spent in those batches: the source's own pace). A batch belongs
    # to the quarter its middle row falls in.
    cum, marks = 0, []
    batches = sorted((b, v) for b, v in sampler.batches.items() if v[1] > 0)
    first_start = datetime.fromisoformat(batches[0][1][0].replace("Z", "+00:00")).timestamp()
    quarter_edges = [n * k / 4 for k in range(1, 5)]
    busy = [[0, 0.0] for _ in range(4)]
    for _, (ts, rows, ms) in batches:
        quarter = min(3, int((cum + rows / 2) * 4 // n))
        busy[quarter][0] += rows
        busy[quarter][1] += ms / 1000
        cum += rows
        while quarter_edges and cum >= quarter_edges[0]:
            marks.append(end_time(ts, ms))
            quarter_edges.pop(0)
    edges = [first_start, *marks]
    rates = [round((n / 4) / max(1e-3, edges[i + 1] - edges[i])) for i in range(len(edges) - 1)]
    processing = [round(r / s) if s else 0 for r, s in busy]

    got = sink_column(tmp_path / "out")["message_id"].to_pylist()
    lost, duplicated, unexpected = tally(published, got)
    q1 = [mb for rows, mb in rss if rows <= n / 4] or [rss[0][1]]
    q4 = [mb for rows, mb in rss if rows >= 3 * n / 4] or [rss[-1][1]]
    peak = max(mb for _, mb in rss)
    bound = RSS_BASE_MB + n * RSS_PER_MESSAGE_B / 2**20
    report(
        f"soak-{receiver}",
        published=len(published),
        lost=lost,
        duplicated=duplicated,
        seconds=round(elapsed, 1),
        msgs_per_s_by_quarter=rates,
        processing_msgs_per_s_by_quarter=processing,
        batches=len(batches),
        rss_mb_first_quarter_max=round(max(q1)),
        rss_mb_last_quarter_max=round(max(q4)),
        rss_mb_peak=round(peak),
        rss_bound_mb=round(bound),
        rss_samples=len(rss),
        max_held=sampler.max_held(),
        maxOutstandingMessages=MAX_OUTSTANDING,
        redelivered_while_held=last.get("redeliveredWhileHeld"),
    )
    assert rss, "the reader process was never found: no RSS measured"
    assert not unexpected and lost == 0 and duplicated == 0
    assert len(rates) == 4 and all(processing)
    assert processing[3] >= 0.5 * processing[0], f"throughput fell from {processing[0]} to {processing[3]} msg/s"
    assert peak <= bound, f"reader process RSS peaked at {peak:.0f} MB > {bound:.0f} MB"
    assert sampler.max_held() <= MAX_OUTSTANDING
