"""Each defect the simulation (or issue 30's review) found, in the world that showed it (tests/sim/findings.py).

Every world here failed on 11f59fe (the source before the fixes); the note beside each says how.
They run in this process (a few seconds in all); ``python -m sim --finding NAME -v`` replays one.
"""

from __future__ import annotations

import pytest

from .checker import check
from .findings import FINDINGS
from .world import simulate


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_the_world_that_showed_it_keeps_the_promise_now(name):
    sc = FINDINGS[name]()
    rec = simulate(sc.seed, sc.mode, sc.storage, scenario=sc)
    verdict = check(rec)
    assert verdict, (
        f"{name} ({sc.describe()}):\n  " + "\n  ".join(verdict.problems) + "\n" + "\n".join(rec.log_tail[-30:])
    )


def test_available_now_fails_loudly_during_a_long_outage():
    """Issue 30 finding 8: with receiver=executors an AvailableNow run planned empty batches for as
    long as Pub/Sub was unreachable (on 11f59fe: for the whole 1,000 s outage, never failing).
    Now it fails with ReceiverError after 120 s of tasks finding Pub/Sub unreachable, as the
    driver mode does; restarted after the outage, the next run reads everything."""
    sc = FINDINGS["available_now_during_an_outage_executors"]()
    rec = simulate(sc.seed, sc.mode, sc.storage, scenario=sc)
    _, ended, failure = rec.ends[0]
    assert failure == "ReceiverError" and ended < 200, f"the first run ended at {ended:.0f} s of {failure}"
    assert check(rec), check(rec).problems
