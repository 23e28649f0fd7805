"""A task's pull, where a claim's holder is gone: the retry of a task whose executor died (or whose
host was cut off, its lock on a shared file system never released) takes the claim over once it
expired, and records the slice; it does not wait and fail, batch after batch."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_calls import ids_of

SUB = "projects/p/subscriptions/claims"
TESTS = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # waits out a claim's expiry

# The first attempt of the task, in a process of its own: it talks to a Pub/Sub of its own whose
# first Pull freezes the process (SIGSTOP), after the attempt took its claim and before it recorded
# anything, as an executor lost mid-pull.
FIRST_ATTEMPT = """
import os, pickle, signal, sys
sys.path.insert(0, {tests!r})
from fake_pubsub import FakePubSub
import crdb_pubsub.source.transport as transport

service = FakePubSub()
service.create_subscription({sub!r}, ack_deadline=10)
service.publish({sub!r}, [b'{{"Key":[1],"Value":{{"after": {{"id": 1}}}},"Topic":"t"}}'])
real_pull = service.pull

def frozen_pull(*args, **kwargs):
    print("pulling", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    return real_pull(*args, **kwargs)

service.pull = frozen_pull
transport.subscriber_client = lambda host=None, credentials=None, **kw: service.client()
with open({blob!r}, "rb") as fh:
    reader, partition = pickle.load(fh)
list(reader.read(partition))
"""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_retry_takes_over_the_claim_of_an_attempt_that_died_holding_it(fake, make_reader, tmp_path):
    from pyspark import cloudpickle

    fake.create_subscription(SUB, ack_deadline=10)
    ids = fake.publish(
        SUB, [f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"t"}}'.encode() for i in range(20)]
    )
    reader = make_reader(SUB, receiver="executors", stateDir=tmp_path / "state", numPartitions=1, ackDeadlineSeconds=10)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    (partition,) = reader.partitions(start, end)
    blob = tmp_path / "task.pickle"
    blob.write_bytes(cloudpickle.dumps((reader, partition)))
    script = FIRST_ATTEMPT.format(tests=str(TESTS), sub=SUB, blob=str(blob))
    first = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "pulling"
        deadline = time.monotonic() + 10
        while _state(first.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(first.pid) == "T", "the first attempt did not freeze"
        retry = pickle.loads(pickle.dumps(reader))
        t0 = time.monotonic()
        got = ids_of(list(retry.read(partition)))
        took = time.monotonic() - t0
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    assert sorted(got) == sorted(ids), "the retry did not read the slice"
    assert took < 60, f"the retry took {took:.0f} s to take the claim over"
