"""Issue 9 scenario 6, end to end: the run ends while its acknowledgements can't reach Pub/Sub.

An AvailableNow run (with a stateDir) reads a backlog; as its last batch reaches the sink, Pub/Sub
becomes unreachable (the query talks to it through a proxy that starts refusing connections), so
the acknowledgements of the last batches fail. The run must still end within its bound, and the
next run must recognise the messages Pub/Sub delivers again (they were committed) and drop them:
lost 0, duplicated 0, nothing left on the subscription.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import pull_ids

from ._proxy import TcpProxy
from ._support import BatchFileSink, publish_many, report, row_body, scaled, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]


def test_acknowledgements_that_never_land(spark, emulator_host, make_subscription, tmp_path: Path):
    n = scaled(2000, 20_000)
    topic, sub = make_subscription(ack_deadline_seconds=5)
    ids = publish_many(emulator_host, topic, (row_body(i) for i in range(n)))
    host, port = emulator_host.split(":")
    proxy = TcpProxy((host, int(port)))

    def cut_when_done(batch_id: int, got: list[str]) -> None:
        if set(ids) <= set(sink.ids()) | set(got):
            # The last batch is in the sink. Let the source's Pulls see the drained subscription
            # first (an empty answer comes ~1 s into a 2 s Pull): cut earlier and the run can't
            # prove the backlog read, which is the other scenario (it fails after 120 s, clearly).
            time.sleep(4)
            proxy.cut()  # the last batch's acknowledgement will not get through

    sink = BatchFileSink(tmp_path / "sink", before=cut_when_done)

    def run(host_port: str) -> float:
        q = (
            spark.readStream.format("crdb_pubsub")
            .option("subscription", sub)
            .option("emulatorHost", host_port)
            .option("stateDir", str(tmp_path / "state"))
            .option("ackDeadlineSeconds", "5")
            .option("maxMessagesPerTrigger", "500")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        t0 = time.monotonic()
        ended = q.awaitTermination(240)
        if not ended:
            q.stop()
        assert ended and q.exception() is None, q.exception()
        return time.monotonic() - t0

    try:
        first = run(proxy.host_port)
    finally:
        proxy.close()
    time.sleep(6)  # the leases lapse: Pub/Sub delivers the unacknowledged messages again
    second = run(emulator_host)
    lost, duplicated, unexpected = tally(ids, sink.ids())
    time.sleep(6)
    left = pull_ids(emulator_host, sub, timeout=2.0)
    report(
        "acks-never-land-stateDir",
        published=len(ids),
        lost=lost,
        duplicated=duplicated,
        first_run_seconds=round(first, 1),
        second_run_seconds=round(second, 1),
        left_on_subscription=len(left),
    )
    assert not unexpected and lost == 0 and duplicated == 0
    assert left == [], f"{len(left)} messages still on the subscription after the second run"
