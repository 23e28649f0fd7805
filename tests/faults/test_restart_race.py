"""Scenario 5 of issue 9: a query with a stateDir stopped and started again at once.

Spark stops a query by terminating its driver-side reader process, which hands its held messages
back while it dies; the JVM does not wait for it. A query started again at once (same checkpoint,
same stateDir) must start, not fail because the dying process still holds the stateDir, and
deliver every message exactly once. To make the race certain, each run reaches Pub/Sub through its
own proxy, which refuses connections from the moment its query is stopped: the old process's
hand-back can't reach Pub/Sub and takes its whole time bound while the next run starts.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from polling import wait_for

from ._proxy import TcpProxy
from ._support import BatchFileSink, report, row_body, scaled, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_query_restarted_at_once_with_state_dir(spark, emulator_host, make_subscription, publish, tmp_path: Path):
    n = scaled(2000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish(topic, [row_body(i) for i in range(n)])
    host, port = emulator_host.split(":")
    proxies: list[TcpProxy] = []
    sink = BatchFileSink(tmp_path / "sink", before=lambda bid, got: time.sleep(0.2) if got else None)

    def start():
        proxies.append(TcpProxy((host, int(port))))
        return (
            spark.readStream.format("crdb_pubsub")
            .option("subscription", sub)
            .option("emulatorHost", proxies[-1].host_port)
            .option("stateDir", str(tmp_path / "state"))
            .option("ackDeadlineSeconds", "10")
            .option("maxMessagesPerTrigger", "200")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    restarts = 2
    try:
        for i in range(restarts):
            q = start()
            want = (i + 1) * n // (restarts + 1)
            wait_for(lambda want=want: len(sink.ids()) >= want, 120, f"progress before stop #{i + 1}", query=q)
            proxies[-1].cut()  # the old process's hand-back can't reach Pub/Sub: it takes its whole bound
            q.stop()
        t0 = time.monotonic()
        q = start()  # at once
        try:
            wait_for(lambda: set(ids) <= set(sink.ids()), 180, "every message in the sink", query=q)
        finally:
            q.stop()
        took = time.monotonic() - t0
    finally:
        for p in proxies:
            p.close()
    lost, duplicated, unexpected = tally(ids, sink.ids())
    report(
        "restart-at-once-stateDir",
        published=len(ids),
        lost=lost,
        duplicated=duplicated,
        restarts=restarts,
        seconds_after_last_restart=round(took, 1),
    )
    assert not unexpected and lost == 0 and duplicated == 0


def test_two_drivers_racing_for_one_gs_state_dir(request, emulator_host, make_subscription, tmp_path: Path):
    """Two queries (two checkpoints) configured with one ``gs://`` stateDir by mistake start at the
    same moment: one takes the stateDir and reads everything exactly once; the other fails with an
    error naming the stateDir and its holder, and writes nothing to it."""
    import subprocess

    from stream_job import job_command

    from ._support import publish_many, sink_column

    url = request.getfixturevalue("gcs_state_url")
    n = scaled(2000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=10)
    ids = publish_many(emulator_host, topic, (row_body(i) for i in range(n)))
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "job.log", "wb") as log:  # the child keeps its own descriptor
            procs.append(
                (
                    name,
                    subprocess.Popen(
                        job_command(
                            emulator_host, sub, tmp_path / name, state=url, available_now=True, ack_deadline=10
                        ),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    ),
                )
            )
    codes = {}
    for name, proc in procs:
        try:
            codes[name] = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    winners = [name for name, code in codes.items() if code == 0]
    assert len(winners) == 1, f"exit codes {codes}"
    loser = "b" if winners == ["a"] else "a"
    said = (tmp_path / loser / "job.log").read_text(errors="replace")
    assert url in said and ("in use by another running query" in said or "belongs to another query" in said), said[
        -3000:
    ]
    got = sink_column(tmp_path / winners[0] / "out")["message_id"].to_pylist()
    lost, duplicated, unexpected = tally(ids, got)
    report(
        "two-drivers-one-gs-state-dir",
        published=n,
        lost=lost,
        duplicated=duplicated,
        winner=winners[0],
        exit_codes=codes,
    )
    assert not unexpected and lost == 0 and duplicated == 0
    assert not sink_column(tmp_path / loser / "out").num_rows, "the refused query wrote to its sink"
