"""What Spark's driver-side runner imports: it starts once per query, so every import is start-up.

The runner (``python_streaming_source_runner``) unpickles the reader, pulls, plans batches and
acknowledges them; it never decodes. Neither the decoder nor pandas belong on that path (pyarrow
imports pandas on its first conversion of Python values, or of an Arrow column to numpy: 0.3-0.5 s
of a query's start). The envelope families are imported, for the names the ``envelope`` option
accepts.
Checked in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

from conftest import pull_ids
from crdb_pubsub.source.datasource import CrdbPubSubDataSource

from .test_wire import _response

RUNNER_PATH = textwrap.dedent(
    """
    import pickle, sys, threading, time
    from crdb_pubsub.source import transport
    from crdb_pubsub.source.core.protocol import OffsetProtocol
    from crdb_pubsub.source.driver import DriverMode, Receiver
    from crdb_pubsub.source.metrics import Counters
    from crdb_pubsub.source.options import parse_options
    from crdb_pubsub.source.transport import AckResult

    reader = pickle.loads(READER)  # as the runner gets it from Spark

    class Recorded:  # Pub/Sub answering one Pull with RESPONSE, then nothing
        def __init__(self):
            self.left, self.lock = [RESPONSE], threading.Lock()

        def pull(self, sub, max_messages, timeout, return_immediately=False):
            with self.lock:
                response = self.left.pop() if self.left else None
            if response is None:
                time.sleep(0.05)
                return type(RESPONSE)()
            return response

        def acknowledge(self, sub, ack_ids, total=None):
            return AckResult(confirmed=list(ack_ids))

        def modify_ack_deadline(self, sub, ack_ids, seconds, total=None):
            return AckResult(confirmed=list(ack_ids))

        def get_subscription(self, sub):
            class Info:
                ack_deadline_seconds = 10  # shorter than the lease: extended on receipt too
                filter = ""
            return Info()

    options = parse_options(OPTIONS)

    def receiver(opts, counters):
        return Receiver(Recorded(), opts.subscription_paths, lease_seconds=60, max_lease_seconds=600,
                        max_messages=opts.maxOutstandingMessages, max_bytes=opts.maxOutstandingBytes,
                        counters=counters)

    counters = Counters()
    planner = OffsetProtocol(options, DriverMode(options, counters, receiver_factory=receiver), counters)
    start = planner.initial_offset()
    end = planner.latest(start, None, None)  # waits for the backlog, then seals the batch
    assert end != start, "no batch was planned"
    pickle.dumps(planner.partitions(start, end))
    planner.commit(end)
    planner.latest(end, None, None)  # acknowledges it
    planner.shutdown(within=2)
    print(" ".join(m for m in ("pandas", "crdb_pubsub.decode.decoder") if m in sys.modules))
    """
)


def test_the_runner_path_imports_neither_the_decoder_nor_pandas():
    # The response travels as bytes: a raw PullResponse with two messages, attributes on one.
    raw = _response(
        [
            {"ack_id": "a0", "message_id": "0"},
            {"ack_id": "a1", "message_id": "1", "attributes": {"TABLE_NAME": "t"}, "ordering_key": "k"},
        ]
    ).SerializeToString()
    # The reader is built and pickled here, as in Spark's planning process.
    options = {"subscription": "projects/proj/subscriptions/orders", "emulatorHost": "127.0.0.1:1"}
    ds = CrdbPubSubDataSource(options)
    reader = pickle.dumps(ds.streamReader(ds.schema()))
    script = (
        "from google.pubsub_v1.types import pubsub\n"
        f"RESPONSE = pubsub.PullResponse.pb().FromString({raw!r})\n"
        f"READER = {reader!r}\n"
        f"OPTIONS = {options!r}\n" + RUNNER_PATH
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"the runner's path imported {out.stdout.strip()}"


# receiver=executors: the runner plans the slices, and once Spark commits, reads what the tasks
# recorded and acknowledges it. Its tasks run here in processes of their own, as on executors.
EXECUTORS_RUNNER_PATH = textwrap.dedent(
    """
    import pickle, subprocess, sys

    reader = pickle.loads(READER)
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    end = reader.latestOffset(start, limit)
    assert end != start, "no batch was planned"
    for p in reader.partitions(start, end):
        task = subprocess.run([sys.executable, "-c", TASK], input=pickle.dumps((reader, p)), capture_output=True)
        assert task.returncode == 0, task.stderr.decode()
    reader.commit(end)
    reader.latestOffset(end, limit)  # acknowledges the batch
    reader.stop()
    print(" ".join(m for m in ("pandas", "crdb_pubsub.decode.decoder") if m in sys.modules))
    """
)

TASK = textwrap.dedent(
    """
    import pickle, sys
    reader, partition = pickle.loads(sys.stdin.buffer.read())
    for _ in reader.read(partition):
        pass
    """
)


@pytest.mark.integration
def test_the_runner_path_of_receiver_executors_imports_neither_the_decoder_nor_pandas(
    emulator_host, make_subscription, publish, tmp_path
):
    topic, sub = make_subscription(ack_deadline_seconds=30)
    ids = publish(topic, [f'{{"after": {{"k": {i}}}, "key": [{i}]}}'.encode() for i in range(20)])
    options = {
        "subscription": sub,
        "emulatorHost": emulator_host,
        "receiver": "executors",
        "numPartitions": "2",
        "stateDir": str(tmp_path / "state"),
    }
    ds = CrdbPubSubDataSource(options)
    reader = pickle.dumps(ds.streamReader(ds.schema()))
    script = f"READER = {reader!r}\nTASK = {TASK!r}\n" + EXECUTORS_RUNNER_PATH
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"the runner's path imported {out.stdout.strip()}"
    assert pull_ids(emulator_host, sub, timeout=1.0) == [], f"the batch of {len(ids)} was not acknowledged"
