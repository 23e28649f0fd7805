"""The slice store of ``receiver=executors`` on both storages (no Spark): a slice is published once
and atomically, one attempt pulls at a time, a claim whose holder is gone is taken over, a replay
reads exactly what was recorded, the driver reads the small columns alone."""

from __future__ import annotations

import subprocess
import sys
import time

import pyarrow as pa
import pytest

from crdb_pubsub.source.executors import store as store_module
from crdb_pubsub.source.executors.orders import SliceOrder
from crdb_pubsub.source.executors.store import KEEP, REDELIVERY, SLICE_SCHEMA, SliceConflict, SliceInfo, SliceStore
from crdb_pubsub.source.executors.task import pulled_slice
from crdb_pubsub.source.options import parse_options
from crdb_pubsub.source.storage import open_storage
from crdb_pubsub.source.storage.lease import LeaseLost
from crdb_pubsub.source.wire import MESSAGE_SCHEMA, messages_batch

SUB = "projects/p/subscriptions/sub-slices"


def _slice(ids: list[str], roles: list[int] | None = None) -> pa.Table:
    n = len(ids)
    batch = messages_batch(
        [f"body-{i}".encode() for i in ids], ids, [1_700_000_000_000_000 + i for i in range(n)], [None] * n, [None] * n
    )
    return pa.Table.from_arrays(
        [
            pa.array([SUB] * n),
            pa.array([f"ack-{i}" for i in ids]),
            *batch.columns,
            pa.array(roles if roles is not None else [KEEP] * n, pa.int8()),
        ],
        schema=SLICE_SCHEMA,
    )


def _info(table: pa.Table) -> SliceInfo:
    kept = table.column("role").to_pylist().count(KEEP)
    return SliceInfo(
        rows=table.num_rows,
        kept=kept,
        oldest_us=None,
        pulled_at=time.time(),
        proven_until=time.time() + 10,
        handed_back=0,
    )


def _publish(store: SliceStore, bid: int, part: int, table: pa.Table) -> bool:
    claim = store.claim(bid, part, wait=0)
    try:
        return store.publish(claim, bid, part, table, _info(table))
    finally:
        claim.release()


def test_first_publish_wins_and_a_second_attempt_cannot_replace_it(storage_url):
    store = SliceStore(open_storage(storage_url))
    first, second = _slice(["1", "2"]), _slice(["3"])
    assert _publish(store, 5, 0, first)
    assert not _publish(store, 5, 0, second)
    assert store.read(5, 0).column("message_id").to_pylist() == ["1", "2"]
    assert store.listed(5) == [0]


def test_the_driver_reads_the_small_columns_and_the_metadata(storage_url):
    store = SliceStore(open_storage(storage_url))
    t = _slice(["1", "2", "3"], [KEEP, REDELIVERY, KEEP])
    assert _publish(store, 6, 2, t)
    acks, info = store.read_acks(6, 2)
    assert sorted(acks.column_names) == ["ack_id", "message_id", "role", "sub"]  # no bodies
    assert acks.column("role").to_pylist() == [KEEP, REDELIVERY, KEEP]
    assert info.kept == 2 and info.rows == 3
    assert store.read_acks(6, 3) is None


def test_one_attempt_pulls_at_a_time_and_a_dead_holder_releases(storage_url, monkeypatch):
    store = SliceStore(open_storage(storage_url))
    held = store.claim(3, 0, wait=0)
    with pytest.raises(SliceConflict, match="still holds its claim"):
        store.claim(3, 0, wait=0.3)
    store.claim(3, 1, wait=0).release()  # another partition is independent
    held.release()
    store.claim(3, 0, wait=0).release()
    # A holder that dies (an executor lost mid-pull) on this host releases its claim with its process.
    code = (
        "import sys, time; from crdb_pubsub.source.executors.store import SliceStore; "
        "from crdb_pubsub.source.storage import open_storage; "
        f"c = SliceStore(open_storage({storage_url!r})).claim(3, 0, wait=0); print('held', flush=True); "
        "time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(SliceConflict):
            store.claim(3, 0, wait=0.3)
        proc.kill()
        proc.wait(10)
        store.claim(3, 0, wait=2.0).release()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_claim_taken_over_fences_its_first_holder(storage_url, monkeypatch):
    """An attempt frozen past its claim's expiry (on another host: nothing says it is gone) is taken
    over; when it wakes, it can't publish its slice."""
    monkeypatch.setattr(store_module, "CLAIM_TTL_SECONDS", 1.0)
    monkeypatch.setattr(store_module, "CLAIM_MARGIN_SECONDS", 0.2)
    store = SliceStore(open_storage(storage_url))
    frozen = store.claim(4, 0, wait=0)
    frozen.stop_renewing()
    retry = store.claim(4, 0, wait=5)
    t = _slice(["9"])
    with pytest.raises(LeaseLost):
        store.publish(frozen, 4, 0, t, _info(t))
    assert store.publish(retry, 4, 0, t, _info(t))
    retry.release()


def test_a_retried_task_replays_its_recorded_slice_without_pulling(storage_url, monkeypatch):
    from crdb_pubsub.source.executors import task

    def no_pull(*_a, **_k):
        raise AssertionError("a recorded slice was pulled again")

    monkeypatch.setattr(task, "_rpc", no_pull)
    opts = parse_options(
        {"subscription": SUB, "emulatorHost": "127.0.0.1:1", "receiver": "executors", "stateDir": storage_url}
    )
    recorded = _slice(["1", "2", "3"], roles=[KEEP, REDELIVERY, KEEP])  # "2": recorded, not yielded
    assert _publish(SliceStore(open_storage(storage_url)), 9, 1, recorded)
    order = SliceOrder(
        batch_id=9,
        index=1,
        parts=2,
        subscriptions=(SUB,),
        max_messages=10,
        max_bytes=1 << 20,
        seconds=1.0,
        deadlines={SUB: 10},
        lease_seconds=10,
    )
    with pulled_slice(opts, order) as first, pulled_slice(opts, order) as again:
        pass
    assert first.schema == MESSAGE_SCHEMA
    assert first.column("message_id").to_pylist() == ["1", "3"]
    assert again.equals(first)


def test_forget_and_drop_delete_committed_batches_only(storage_url):
    store = SliceStore(open_storage(storage_url))
    for bid in (1, 2, 3):
        assert _publish(store, bid, 0, _slice([str(bid)]))
    store.forget(1, parts=1)
    assert store.listed(1) == [] and store.listed(2) == [0]
    store.drop(2)
    assert store.listed(2) == [] and store.listed(3) == [0]
