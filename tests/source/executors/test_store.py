"""The slice store of ``receiver=executors`` (pure file logic, no Spark): a slice is published
once and atomically, one attempt pulls at a time, a replay reads exactly what was recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from crdb_pubsub.source.options import parse_options
from crdb_pubsub.source.executors.orders import SliceOrder
from crdb_pubsub.source.executors.store import KEEP, REDELIVERY, SLICE_SCHEMA, SliceInfo, SliceStore
from crdb_pubsub.source.executors.task import pulled_slice
from crdb_pubsub.source.wire import MESSAGE_SCHEMA, messages_batch

SUB = "projects/p/subscriptions/sub-slices"


def _slice(ids: list[str], roles: list[int] | None = None) -> pa.Table:
    n = len(ids)
    batch = messages_batch([f"body-{i}".encode() for i in ids], ids, [1_700_000_000_000_000 + i for i in range(n)],
                           [None] * n, [None] * n)
    return pa.Table.from_arrays([pa.array([SUB] * n), pa.array([f"ack-{i}" for i in ids]), *batch.columns,
                                 pa.array(roles if roles is not None else [KEEP] * n, pa.int8())], schema=SLICE_SCHEMA)


def _info(table: pa.Table) -> SliceInfo:
    kept = table.column("role").to_pylist().count(KEEP)
    return SliceInfo(rows=table.num_rows, kept=kept, oldest_us=None, pulled_at=time.time(),
                     proven_until=time.time() + 10, handed_back=0)


def test_first_publish_wins_and_a_second_attempt_cannot_replace_it(tmp_path: Path):
    store = SliceStore(str(tmp_path))
    first, second = _slice(["1", "2"]), _slice(["3"])
    assert store.publish(5, 0, first, _info(first))
    assert not store.publish(5, 0, second, _info(second))
    assert store.read(5, 0).column("message_id").to_pylist() == ["1", "2"]
    assert [p.name for p in (tmp_path / "v2" / "slices" / f"{5:020d}").iterdir()] == ["00000.arrow"], \
        "a losing attempt left files behind"


def test_a_writer_killed_mid_write_leaves_nothing_a_replay_trusts(tmp_path: Path):
    store = SliceStore(str(tmp_path))
    # What a task killed during the write leaves: a partial temporary file of its own name.
    d = tmp_path / "v2" / "slices" / f"{7:020d}"
    d.mkdir(parents=True)
    (d / "00001.deadbeef.tmp").write_bytes(b"ARROW1\x00\x00partial")
    assert store.read(7, 1) is None
    assert store.listed(7) == []
    t = _slice(["a"])
    assert store.publish(7, 1, t, _info(t))
    assert store.read(7, 1).column("message_id").to_pylist() == ["a"]


def test_one_attempt_pulls_at_a_time_and_a_dead_holder_releases(tmp_path: Path):
    store = SliceStore(str(tmp_path))
    held = store.claim(3, 0, wait=0)
    assert held is not None
    assert store.claim(3, 0, wait=0.2) is None, "a second attempt claimed a slice still being pulled"
    assert store.claim(3, 1, wait=0) is not None, "another partition is independent"
    held.release()
    again = store.claim(3, 0, wait=0)
    assert again is not None
    again.release()
    # A holder that dies (an executor lost mid-pull) releases the claim with its process.
    code = ("import sys, time; from crdb_pubsub.source.executors.store import SliceStore; "
            f"c = SliceStore({str(tmp_path)!r}).claim(3, 0, wait=0); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert store.claim(3, 0, wait=0.2) is None
        proc.kill()
        proc.wait(10)
        assert store.claim(3, 0, wait=2.0) is not None
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_retried_task_replays_its_recorded_slice_without_pulling(tmp_path: Path, monkeypatch):
    from crdb_pubsub.source.executors import task as pull

    def no_pull(*_a, **_k):
        raise AssertionError("a recorded slice was pulled again")

    monkeypatch.setattr(pull, "_rpc", no_pull)
    opts = parse_options({"subscription": SUB, "emulatorHost": "127.0.0.1:1", "receiver": "executors",
                          "stateDir": str(tmp_path)})
    recorded = _slice(["1", "2", "3"], roles=[KEEP, REDELIVERY, KEEP])  # "2": recorded, not yielded
    SliceStore(str(tmp_path)).publish(9, 1, recorded, _info(recorded))
    order = SliceOrder(batch_id=9, index=1, parts=2, subscriptions=(SUB,), max_messages=10, max_bytes=1 << 20,
                       seconds=1.0, deadlines={SUB: 10}, lease_seconds=10)
    with pulled_slice(opts, order) as first, pulled_slice(opts, order) as again:
        pass
    assert first.schema == MESSAGE_SCHEMA
    assert first.column("message_id").to_pylist() == ["1", "3"]
    assert again.equals(first)


def test_drop_forgets_committed_batches_only(tmp_path: Path):
    store = SliceStore(str(tmp_path))
    for bid in (1, 2, 3):
        t = _slice([str(bid)])
        store.publish(bid, 0, t, _info(t))
    store.drop(2)
    assert store.listed(1) == store.listed(2) == [] and store.listed(3) == [0]
    assert os.path.exists(store.path(3, 0))
