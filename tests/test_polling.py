"""The suite's polling helper (``tests/polling.py``): a dead query fails the wait at once, with its error."""

from __future__ import annotations

import time

import pytest

from polling import wait_for


class DeadQuery:
    isActive = False

    def exception(self):
        return RuntimeError("the sink failed batch 3")


class LiveQuery:
    isActive = True

    def exception(self):
        return None


def test_a_dead_query_fails_the_wait_at_once_with_its_error():
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match="the query stopped while waiting for rows: the sink failed batch 3"):
        wait_for(lambda: False, 60, "rows", query=DeadQuery())
    assert time.monotonic() - t0 < 1


def test_a_condition_met_as_the_query_ends_is_met():
    wait_for(lambda: True, 1, "rows", query=DeadQuery())


def test_a_timeout_names_what_was_awaited_evaluated_at_the_end():
    state = {"n": 0}

    def cond():
        state["n"] += 1
        return False

    with pytest.raises(AssertionError, match=r"timed out after 0 s waiting for rows \(polled \d+ times\)"):
        wait_for(cond, 0.2, lambda: f"rows (polled {state['n']} times)", query=LiveQuery(), interval=0.01)
    assert state["n"] > 2


def test_step_runs_between_polls_instead_of_sleeping():
    steps = []
    wait_for(lambda: len(steps) >= 3, 5, "three steps", step=lambda: steps.append(1))
    assert len(steps) == 3
