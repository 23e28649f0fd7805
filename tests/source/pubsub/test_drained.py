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


def test_an_answer_to_a_later_pull_proves_nothing_while_an_earlier_pull_is_not_taken():
    """Pub/Sub may give a message to one Pull and answer a Pull sent after it with nothing: the
    empty answer shows only that the message was taken. On e54b009 an AvailableNow run ended
    while the answer that brought 47 messages of its backlog was still being taken (its puller
    waited for the receiver's lock): the empty answer to a later Pull, taken first, completed
    the evidence (finding drawn_driver_posix_5264)."""
    drain = Drain({"s": 60.0})
    drain.answered("s", 0, Answer(sent=5.0, oldest_us=None))
    drain.answered("s", 1, Answer(sent=6.0, oldest_us=None))
    drain.pulling("s", 0, 10.0)  # its answer will bring the backlog
    drain.pulling("s", 1, 11.0)
    drain.answered("s", 1, Answer(sent=11.0, oldest_us=None))
    assert not drain.quiet("s", [0, 1], CUTOFF, since=0.0), "evidence while an earlier Pull's answer was not taken"
    drain.answered("s", 0, Answer(sent=10.0, oldest_us=CUTOFF))
    assert not drain.quiet("s", [0, 1], CUTOFF, since=0.0)
    drain.pulling("s", 0, 12.0)
    drain.answered("s", 0, Answer(sent=12.0, oldest_us=None))
    assert drain.quiet("s", [0, 1], CUTOFF, since=0.0)
    # A Pull sent after the newest evidence does not hold it back; one that timed out ends.
    drain.pulling("s", 0, 13.0)
    assert drain.quiet("s", [0, 1], CUTOFF, since=0.0)
    drain.pulling("s", 1, 11.8)
    assert not drain.quiet("s", [0, 1], CUTOFF, since=0.0)
    drain.pull_ended("s", 1)
    assert drain.quiet("s", [0, 1], CUTOFF, since=0.0)
