"""How many Pulls a subscription keeps in flight (pubsub/concurrency.py), on answers made up here."""

from __future__ import annotations

from crdb_pubsub.source.pubsub.concurrency import MOST, Concurrency


def _run(
    c: Concurrency, *, latency: float, service: float, rate_of, seconds: float = 12.0, held_back=False
) -> list[int]:
    """Feed ``c`` answers for ``seconds``: each puller answers every ``latency``, bringing what
    ``rate_of(pullers)`` messages a second make; return the puller counts it went through."""
    seen, now = [c.pullers], 0.0
    while now < seconds:
        step = latency / c.pullers
        now += step
        n = max(1, int(rate_of(c.pullers) * step))
        got = c.answered(now, latency, service, n, held_back)
        if got != seen[-1]:
            seen.append(got)
    return seen


def test_a_long_round_trip_doubles_the_pullers_while_it_pays():
    # 25 ms away, 0.5 ms of sorting an answer: W / S = 50, each puller brings 300 / 25 ms.
    c = Concurrency(2, 0.0)
    assert _run(c, latency=0.025, service=0.0005, rate_of=lambda p: p * 12_000) == [2, 4, 8, 16]
    assert c.pullers == MOST and c.settled


def test_a_local_server_keeps_two():
    # The round trip about the time it takes to sort an answer: more pullers would wait on the CPU.
    c = Concurrency(2, 0.0)
    assert _run(c, latency=0.002, service=0.0015, rate_of=lambda p: p * 50_000) == [2]


def test_a_doubling_that_does_not_pay_is_the_last():
    # A server whose own CPU is the bottleneck (the emulator beside the query): no gain from 4.
    c = Concurrency(2, 0.0)
    assert _run(c, latency=0.02, service=0.0003, rate_of=lambda p: 5_000) == [2, 4]
    assert c.settled


def test_windows_where_the_flow_control_held_pullers_back_are_not_judged():
    # Spark's pace, not the network's: nothing is learned, nothing changes.
    c = Concurrency(2, 0.0)
    assert _run(c, latency=0.025, service=0.0005, rate_of=lambda p: p * 12_000, held_back=True) == [2]
    assert not c.settled


def test_a_pull_of_about_a_second_still_ramps_up():
    # A receiver=executors task pulls its share for about a second: on the service's terms its
    # Pulls in flight must double within that second, not after it.
    c = Concurrency(2, 0.0)
    assert _run(c, latency=0.025, service=0.0005, rate_of=lambda p: p * 12_000, seconds=1.0) == [2, 4, 8, 16]


def test_a_doubling_is_judged_after_a_few_round_trips_not_a_fixed_time():
    # 25 ms away a window of four round trips is 0.1 s: the ramp to 16 takes about half a second
    # (0.25 s windows took 0.75 s, most of a task's pull on the service's terms).
    c = Concurrency(2, 0.0)
    assert _run(c, latency=0.025, service=0.0005, rate_of=lambda p: p * 12_000, seconds=0.55) == [2, 4, 8, 16]
