"""The evidence that a subscription is drained (``pubsub/drained.py``)."""

from __future__ import annotations

from crdb_pubsub.source.pubsub.drained import Answer, Drain

CUTOFF = 1_000


def test_a_slot_whose_answer_is_evidence_but_for_a_shadow_waits_for_its_end():
    drain = Drain({"s": 60.0})
    drain.shadow("s", 100.0)
    drain.answered("s", 0, Answer(sent=50.0, oldest_us=None))  # nothing: evidence, but before the shadow's end
    drain.answered("s", 1, Answer(sent=50.0, oldest_us=CUTOFF))  # a message of the backlog: pull on
    assert drain.idle_until("s", 0, CUTOFF) == 100.0
    assert drain.idle_until("s", 1, CUTOFF) == 0.0
    assert drain.idle_until("s", 2, CUTOFF) == 0.0  # no answer yet
    assert not drain.quiet("s", [0], CUTOFF, since=0.0)
    drain.answered("s", 0, Answer(sent=101.0, oldest_us=None))
    assert drain.idle_until("s", 0, CUTOFF) == 0.0
    assert drain.quiet("s", [0], CUTOFF, since=0.0)
