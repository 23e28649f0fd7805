"""Remembered ids: each until its own expiry, compactly, bounded in size."""

from __future__ import annotations

from crdb_pubsub.source.pubsub.remembered import MAX_GENERATIONS, Remembered


def test_remembered_remembers_each_id_until_its_own_expiry():
    h = Remembered()
    h.add("s", ["1", "2", "3"], expires_at=10.0)
    h.add("s", ["4", "0"], expires_at=20.0)
    h.add("other", ["5"], expires_at=20.0)
    assert h.seen("s", ["1", "4", "5", "0", "9"], now=5.0) == [True, True, False, True, False]
    assert h.seen("s", ["1", "4"], now=15.0) == [False, True]
    h.prune(15.0)
    assert h.count() == 3


def test_remembered_keeps_ids_that_are_not_plain_numbers():
    h = Remembered()
    h.add("s", ["007", "abc", "12345678901234567890", "42"], expires_at=10.0)
    assert h.seen("s", ["7", "007", "abc", "12345678901234567890", "42", "43"], now=1.0) == [
        False,
        True,
        True,
        True,
        True,
        False,
    ]


def test_remembered_merges_generations_without_forgetting_early():
    h = Remembered()
    for g in range(MAX_GENERATIONS * 3):
        h.add("s", [str(g * 10 + i) for i in range(10)], expires_at=100.0 + g)
    assert len(h._subs["s"].generations) <= MAX_GENERATIONS
    n = MAX_GENERATIONS * 3
    assert all(h.seen("s", [str(i) for i in range(n * 10)], now=99.0))  # nothing expired yet
    for g in range(n):  # each id is remembered at least until its own expiry
        assert all(h.seen("s", [str(g * 10 + i) for i in range(10)], now=100.0 + g - 0.5))
    assert h.nbytes() <= 8 * n * 10
