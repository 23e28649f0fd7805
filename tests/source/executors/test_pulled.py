"""What a task keeps of what it pulled (``task._Pulled``) before it records its slice: the rules on its
rows and their leases, with each answer's Pull sent when the test says."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from google.pubsub_v1.types import PullResponse

from crdb_pubsub.source.executors import task
from crdb_pubsub.source.executors.orders import SliceOrder
from crdb_pubsub.source.executors.store import KEEP, REDELIVERY
from crdb_pubsub.source.pubsub.leaser import Leaser
from crdb_pubsub.source.transport import AckResult

SUB = "projects/p/subscriptions/pulled"
PUBLISHED_US = 1_800_000_000_000_000


def _answer(*deliveries: tuple[str, str]) -> PullResponse:
    """A Pull's answer: ``(message id, ack id)`` each."""
    out = PullResponse.pb()()
    for mid, ack_id in deliveries:
        rm = out.received_messages.add()
        rm.ack_id = ack_id
        rm.message.data = f'{{"Key":[{mid}],"Value":{{"after": {{"id": {mid}}}}},"Topic":"t"}}'.encode()
        rm.message.message_id = mid
        rm.message.publish_time.seconds = PUBLISHED_US // 1_000_000
    return out


class _Rpc:
    """Answers the task's hand-backs, and remembers them."""

    def __init__(self) -> None:
        self.handed_back: list[str] = []

    def modify_ack_deadline(self, sub, ack_ids, seconds, total=None) -> AckResult:
        if seconds == 0:
            self.handed_back.extend(ack_ids)
        return AckResult(confirmed=list(ack_ids))


def _pulled() -> task._Pulled:
    """A task's pull whose keeper is not started: leases are as their Pulls proved them."""
    order = SliceOrder(
        batch_id=1,
        index=0,
        parts=1,
        subscriptions=(SUB,),
        max_messages=100,
        max_bytes=1 << 20,
        seconds=4.0,
        deadlines={SUB: 10},
        lease_seconds=10,
    )
    keeper = Leaser(lambda sub, ids, seconds: AckResult(confirmed=list(ids)), lease_seconds=10, max_lease_seconds=3600)
    return task._Pulled(order, keeper)


def _roles(pulled: task._Pulled) -> dict[str, list[int]]:
    table = pulled.table()
    out: dict[str, list[int]] = {}
    for mid, role in zip(table.column("message_id").to_pylist(), table.column("role").to_pylist()):
        out.setdefault(mid, []).append(role)
    return out


def test_a_message_delivered_twice_is_yielded_or_handed_back_with_all_its_ack_ids():
    # Pub/Sub delivered message 7 a second time while the task held it (as it may), and the first
    # delivery's lease can't be proven to outlive the recording (its renewal failed, or the worker
    # was paused for seconds): that delivery goes back. Every recorded row but a later one is
    # acknowledged when the batch commits, so the message must either be yielded by a row of the
    # slice, or leave the slice whole: every ack id it was delivered with handed back.
    pulled = _pulled()
    now = time.monotonic()
    # The first answer's Pull went 9.5 s ago: its lease (10 s) is proven for half a second more.
    pulled.accept(SUB, _answer(("7", "a1"), ("8", "a2")), now - 9.5, time.time() - 9.5)
    pulled.accept(SUB, _answer(("7", "a3")), now, time.time())
    rpc = _Rpc()
    pulled.drop_unproven(rpc)
    roles = _roles(pulled)
    assert "8" not in roles, "message 8's lease was not proven: it must be handed back, not recorded"
    if "7" in roles:
        assert KEEP in roles["7"], f"message 7 is recorded as {roles['7']} (0 is yielded): acknowledged, never yielded"
    else:
        assert {"a1", "a3"} <= set(rpc.handed_back), f"message 7 left the slice, handed back as {rpc.handed_back}"


def test_a_message_delivered_twice_is_one_row_yielded_and_one_acknowledged():
    pulled = _pulled()
    now = time.monotonic()
    pulled.accept(SUB, _answer(("7", "a1"), ("8", "a2")), now, time.time())
    pulled.accept(SUB, _answer(("7", "a3"), ("7", "a4")), now, time.time())
    table = pulled.table()
    rows = sorted(
        zip(
            table.column("message_id").to_pylist(), table.column("ack_id").to_pylist(), table.column("role").to_pylist()
        )
    )
    assert rows == [("7", "a1", REDELIVERY), ("7", "a3", REDELIVERY), ("7", "a4", KEEP), ("8", "a2", KEEP)]


def test_a_message_delivered_twice_whose_every_lease_lapsed_is_not_recorded():
    pulled = _pulled()
    now = time.monotonic()
    pulled.accept(SUB, _answer(("7", "a1")), now - 9.5, time.time() - 9.5)
    pulled.accept(SUB, _answer(("7", "a3")), now - 9.6, time.time() - 9.6)
    rpc = _Rpc()
    pulled.drop_unproven(rpc)
    assert _roles(pulled) == {}
    assert sorted(rpc.handed_back) == ["a1", "a3"]
    assert int(np.sum([len(c) for c in pulled.chunks])) == 0


def test_the_first_pull_asks_for_no_more_than_the_byte_share_holds():
    # Before a task knows how large messages are, its first Pull asked for 10 whatever its byte
    # share (maxBytesPerTrigger of 1 KB and 900 B messages gave batches of 9 KB a task): now for no
    # more than the share holds at Pub/Sub's largest message.
    small = task._Pulled(
        SliceOrder(1, 0, 1, (SUB,), 100, 1024, 4.0, {SUB: 10}, 10),
        Leaser(lambda *a: AckResult(), lease_seconds=10, max_lease_seconds=60),
    )
    assert small.room() == 1
    large = task._Pulled(
        SliceOrder(1, 0, 1, (SUB,), 100, 1 << 30, 4.0, {SUB: 10}, 10),
        Leaser(lambda *a: AckResult(), lease_seconds=10, max_lease_seconds=60),
    )
    assert large.room() == task.FIRST_PULL_MESSAGES


def test_the_proof_a_slice_records_outlives_no_renewal_the_task_may_send_after_it():
    """A subscription whose ack deadline (20 s) is longer than the task's lease (ackDeadlineSeconds
    10): a Pull leases its messages for 20 s, and every renewal the task's keeper sends from now
    on, before or after the slice is recorded, sets the lease to end 10 s after it. The proof the
    slice records, by which the driver judges the acknowledgement's answer at the commit, is then
    at most 10 s from the recording. On 928a414 it was the Pull's 20 s: the driver judged an
    acknowledgement sent 12.4 s after the recording proven on a standard subscription (the lease
    had lapsed; Pub/Sub answers OK all the same), and the message, delivered again 770 s later,
    was yielded a second time (sim executors/posix seed 1238)."""
    pulled = _pulled()
    pulled.order = replace(pulled.order, deadlines={SUB: 20})
    now = time.monotonic()
    pulled.accept(SUB, _answer(("7", "a1"), ("8", "a2")), now, time.time())
    recorded = pulled.info()
    assert recorded.proven_until <= time.time() + 10.0, "the recorded proof outlives the task's next renewal"
