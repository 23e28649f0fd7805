"""The scheduler as the tests on a virtual clock use it (``tests/virtual_time.py``)."""

from __future__ import annotations

import time

import pytest

from sim import scheduler as S


def _run(main, **terms):
    sched = S.Scheduler(7, preempt=0.0, **terms)
    return sched, sched.run(lambda: main(sched, S.namespaces(sched, 7)), S.Process("test"), stuck_raises_in_main=True)


def test_an_hour_of_sleep_costs_no_real_time():
    def main(sched, ns):
        ns["time"].sleep(3600)
        return ns["time"].monotonic()

    t0 = time.perf_counter()
    _, now = _run(main, slice=0.005)
    assert now >= 3600 and time.perf_counter() - t0 < 1


def test_a_loop_that_polls_the_clock_lets_other_threads_run_and_time_pass():
    """A thread that polls without sleeping (a test's ``step=trigger`` loop) neither starves the
    others nor stops the clock: a timer of another thread fires while it spins."""

    def main(sched, ns):
        fired = []
        worker = ns["threading"].Thread(target=lambda: (ns["time"].sleep(0.05), fired.append(True)))
        worker.start()
        end = ns["time"].monotonic() + 5
        while not fired and ns["time"].monotonic() < end:
            pass
        return bool(fired)

    _, fired = _run(main, slice=0.002)
    assert fired


def test_a_test_that_waits_forever_fails_in_its_own_thread_and_goes_on():
    """A deadlock raises where the main thread waits (the test reports it; its teardown runs)."""

    def main(sched, ns):
        with pytest.raises(S.Deadlock, match="every thread is blocked"):
            ns["threading"].Event().wait()
        return "teardown ran"

    assert _run(main, slice=0.005)[1] == "teardown ran"


def test_a_test_that_waits_past_the_limit_fails_in_its_own_thread():
    def main(sched, ns):
        stop = ns["threading"].Event()
        ticker = ns["threading"].Thread(target=lambda: [ns["time"].sleep(1) for _ in iter(stop.is_set, True)])
        ticker.start()
        with pytest.raises(AssertionError, match="virtual time"):
            ns["threading"].Event().wait()
        stop.set()
        return sched.now

    sched = S.Scheduler(7, preempt=0.0, slice=0.005)
    now = sched.run(
        lambda: main(sched, S.namespaces(sched, 7)), S.Process("test"), max_time=60, stuck_raises_in_main=True
    )
    assert 59 <= now <= 61  # at the last timer before the limit
