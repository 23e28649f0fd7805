"""Tests on a virtual clock: a lease that lapses after 30 s costs the test no waiting.

A test marked ``@pytest.mark.virtual_time`` runs whole (its fixtures' setup, its body, their
teardown) as the first thread of the simulation's scheduler (``tests/sim/scheduler.py``): the
simulated ``threading``, ``time``, ``queue`` and ``random`` replace the real ones in every
``crdb_pubsub.source`` module, in the fake Pub/Sub, in the test helpers below and in the test's own
module, exactly as the simulated worlds install them (``sim.world.virtualize``). The source's
threads are greenlets; when every one of them waits, the clock jumps to the next timer. What the
test asserts is unchanged; only the waiting is gone.

Where it does not apply: a test that talks to a real server (the emulator, the Cloud Storage test
server), starts a subprocess or Spark, or measures real time or memory. Such a test waits for real
and stays ``integration``. A test that deadlocks or passes an hour of virtual time fails with the
scheduler's account of which thread waits on what.
"""

from __future__ import annotations

import sys
import zlib

import pytest

# Helpers whose waits are the test's: they wait on the same clock as the source.
HELPER_MODULES = ("fake_pubsub", "spark_calls", "polling", "source.executors.one_task")
MAX_VIRTUAL_SECONDS = 3600.0
SLICE_SECONDS = 0.005  # a thread that runs this long without waiting lets the others run


def run_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Run ``item``'s setup, call and teardown (pytest's ``runtestprotocol``) on a virtual clock."""
    from _pytest.runner import runtestprotocol

    from sim import scheduler as S
    from sim.world import patching, source_modules, virtualize

    seed = zlib.crc32(item.nodeid.encode())
    sched = S.Scheduler(seed, preempt=0.0, slice=SLICE_SECONDS)
    helpers = [sys.modules[name] for name in HELPER_MODULES if name in sys.modules]
    modules = source_modules() + helpers + [item.module]
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    with patching() as patch:
        virtualize(sched, seed, modules, patch)
        sched.run(
            lambda: runtestprotocol(item, nextitem=nextitem, log=True),
            S.Process("test"),
            max_time=MAX_VIRTUAL_SECONDS,
            stuck_raises_in_main=True,
        )
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
