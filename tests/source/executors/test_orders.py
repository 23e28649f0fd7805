"""How a batch is split into its tasks' orders (``executors/orders.py``)."""

from __future__ import annotations

from crdb_pubsub.source.executors.orders import Plan, orders_of

SUBS = ["projects/p/subscriptions/a", "projects/p/subscriptions/b"]


def _pulled_by(plan: Plan) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for order in orders_of(3, plan, SUBS, dict.fromkeys(SUBS, 10), 60, None, ordered=frozenset(plan.ordered)):
        for sub in order.subscriptions:
            out.setdefault(sub, []).append(order.index)
    return out


def test_an_ordered_subscription_is_pulled_by_one_task_of_a_batch():
    # Pub/Sub may deliver a key again from its first unacknowledged message while a task holds it:
    # two tasks of a batch holding one key would put its messages in the order of their partitions.
    plan = Plan(parts=5, max_messages=100, max_bytes=1 << 20, ordered=(SUBS[0],))
    assert _pulled_by(plan) == {SUBS[0]: [0], SUBS[1]: [1, 2, 3, 4]}


def test_unordered_subscriptions_spread_over_every_task():
    assert _pulled_by(Plan(parts=5, max_messages=100, max_bytes=1 << 20)) == {SUBS[0]: [0, 2, 4], SUBS[1]: [1, 3]}


def test_a_plan_replays_as_it_was_recorded():
    plan = Plan(parts=5, max_messages=100, max_bytes=1 << 20, cutoff_us=7, ordered=(SUBS[0],))
    assert Plan.of(plan.as_json()) == plan
    # A plan recorded before ordered subscriptions were pulled by one task replays as it was split then.
    old = {"parts": 4, "max_messages": 100, "max_bytes": 1 << 20, "cutoff_us": None}
    assert Plan.of(old).subscriptions(2, SUBS) == (SUBS[0],)


def test_the_shares_add_up_to_the_room_left_when_it_is_less_than_the_plan():
    """Spark may commit a batch only after the next one's tasks ran (a commit may come late): the earlier
    batch's messages are then still held, and the tasks take only what is left of
    ``maxOutstandingMessages`` (none at all when nothing is); the finding drawn_executors_posix_2719
    held 16 of 15 on e54b009."""
    plan = Plan(parts=4, max_messages=15, max_bytes=1000)
    whole = orders_of(3, plan, SUBS, dict.fromkeys(SUBS, 10), 60, None)
    assert sum(o.max_messages for o in whole) == 15
    assert orders_of(3, plan, SUBS, dict.fromkeys(SUBS, 10), 60, None, room=(20, 5000)) == whole
    some = orders_of(3, plan, SUBS, dict.fromkeys(SUBS, 10), 60, None, room=(6, 400))
    assert [o.max_messages for o in some] == [2, 2, 1, 1]
    assert sum(o.max_bytes for o in some) <= 400 + plan.parts
    none = orders_of(3, plan, SUBS, dict.fromkeys(SUBS, 10), 60, None, room=(0, 1000))
    assert [o.max_messages for o in none] == [0, 0, 0, 0]
