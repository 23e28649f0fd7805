"""The stateDir ledger on its own, on both storages (a folder, and ``gs://`` on the Cloud Storage test
server): what a new process recovers, what it refuses, what a crash leaves, and that a process that
lost the stateDir can no longer write to it."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from crdb_pubsub.source.state.ledger import BATCH_SCHEMA, Ledger, StateDirError

SUB = "projects/p/subscriptions/orders"
WINDOW = 600.0
UNCONFIRMED = 7 * 24 * 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def open_ledger(path, clock=None, wait=0.2) -> Ledger:
    return Ledger(
        str(path), wait_seconds=wait, window_seconds=WINDOW, unconfirmed_seconds=UNCONFIRMED, wall=clock or Clock()
    )


def batch(ids: range) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "sub": [SUB] * n,
            "ack_id": [f"ack{i}" for i in ids],
            "data": [b"{}"] * n,
            "message_id": [str(i) for i in ids],
            "publish_us": [0] * n,
            "attributes": pa.array([None] * n, pa.map_(pa.string(), pa.string())),
            "ordering_key": [None] * n,
        },
        schema=BATCH_SCHEMA,
    )


def test_a_planned_batch_is_recovered_until_its_commit_is_recorded(storage_url):
    ledger = open_ledger(storage_url)
    ledger.claim("run-1", [SUB], fresh=True)
    ledger.record(1, batch(range(0, 3)))
    ledger.record(2, batch(range(3, 6)))
    ledger.committed(1, [(SUB, str(i), f"ack{i}") for i in range(0, 3)])
    ledger.close()

    again = open_ledger(storage_url)
    got = again.recover()
    assert list(got.pending) == [2]
    assert got.pending[2].column("message_id").to_pylist() == ["3", "4", "5"]
    # Committed but never answered by Pub/Sub: kept as unconfirmed, to be acknowledged again.
    assert got.unconfirmed == [(SUB, [(str(i), f"ack{i}") for i in range(0, 3)])]


def test_answered_acknowledgements_are_remembered_for_the_window_then_pruned(storage_url):
    clock = Clock()
    ledger = open_ledger(storage_url, clock)
    ledger.claim("run-1", [SUB], fresh=True)
    ledger.committed(1, [(SUB, "1", "a1"), (SUB, "2", "a2")])
    ledger.answered(1, unconfirmed=[(SUB, "2", "a2")])
    got = ledger.recover()
    assert got.remembered == [(SUB, ["1", "2"], WINDOW)]
    assert got.unconfirmed == [(SUB, [("2", "a2")])]

    clock.now += WINDOW + 1
    ledger.committed(2, [(SUB, "3", "a3")])
    ledger.answered(2, unconfirmed=[])  # pruning runs on every answer
    got = ledger.recover()
    assert [mids for _, mids, _ in got.remembered] == [["3"]], "the confirmed ids outlived their window"
    assert got.unconfirmed == [(SUB, [("2", "a2")])], "an unconfirmed id must outlive the confirmed window"


def test_a_second_process_is_refused_while_the_first_holds_the_directory(storage_url):
    first = open_ledger(storage_url)
    with pytest.raises(StateDirError, match="in use by another running query"):
        open_ledger(storage_url, wait=0.3)
    first.close()
    open_ledger(storage_url).close()


def test_the_refusal_names_the_process_that_holds_the_directory(storage_url):
    """Which process to look at (or stop) is the first thing a user needs when a restart is refused."""
    import socket
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from crdb_pubsub.source.state.ledger import Ledger; "
            f"Ledger({storage_url!r}, wait_seconds=0, window_seconds=1, unconfirmed_seconds=1); "
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateDirError) as refused:
            open_ledger(storage_url, wait=0.2)
        text = str(refused.value)
        assert f"pid {holder.pid}" in text and socket.gethostname() in text, text
        assert "state" in text and "python" in text, text  # what the holder is and what it is doing
    finally:
        holder.kill()
        holder.wait()
    open_ledger(storage_url).close()  # a holder on this host whose process is gone releases at once


def test_another_query_with_committed_batches_is_refused(storage_url):
    ledger = open_ledger(storage_url)
    ledger.claim("run-1", [SUB], fresh=True)
    ledger.committed(1, [(SUB, "1", "a1")])
    with pytest.raises(StateDirError, match="belongs to another query"):
        ledger.claim("run-2", [SUB], fresh=True)
    with pytest.raises(StateDirError, match="subscription"):
        ledger.claim("run-1", ["projects/p/subscriptions/other"])


def test_a_process_lost_between_the_unconfirmed_record_and_the_answered_marker_forgets_nothing(tmp_path):
    """A commit's answers are recorded in two writes: the ids not proven acknowledged, then the
    "answered" marker. A process that lost the stateDir between the two (finding
    drawn_executors_gs_5838) left a commit whose proven ids the next process neither remembered
    nor acknowledged again: Pub/Sub delivered them again and they were yielded a second time."""
    state = tmp_path / "state"
    ledger = open_ledger(state)
    ledger.claim("run-1", [SUB], fresh=True)
    ledger.committed(1, [(SUB, "1", "a1"), (SUB, "2", "a2")])
    ledger.answered(1, unconfirmed=[(SUB, "2", "a2")])
    ledger.close()
    markers = list((state / "v3" / "acked").glob("*.answered.*"))
    assert len(markers) == 1
    markers[0].unlink()  # what the lost process left

    got = open_ledger(state).recover()
    assert got.remembered == [(SUB, ["1", "2"], WINDOW)]
    assert got.unconfirmed == [(SUB, [("2", "a2")])]
    assert len(list((state / "v3" / "acked").glob("*.answered.*"))) == 1, "recorded as answered, to be pruned"


def test_a_write_cut_short_leaves_nothing_a_replay_would_trust(tmp_path):
    state = tmp_path / "state"
    ledger = open_ledger(state)
    ledger.claim("run-1", [SUB], fresh=True)
    ledger.record(1, batch(range(0, 3)))
    # A crash mid-write leaves only the storage's hidden temporary file (the link never happened).
    tmp = state / "v3" / "batches" / f".{2:020d}.arrow.deadbeef.tmp"
    tmp.write_bytes(b"ARROW1\x00\x00half")
    ledger.close()
    got = open_ledger(state).recover()
    assert list(got.pending) == [1]


def test_a_process_that_lost_the_state_dir_can_no_longer_write(storage_url, monkeypatch):
    """A reader frozen past its lease (a stopped process, a paused VM): another process takes the
    stateDir over; when the first wakes up, its writes are refused instead of landing."""
    from crdb_pubsub.source.state import ledger as L

    monkeypatch.setattr(L, "LOCK_TTL_SECONDS", 1.0)
    monkeypatch.setattr(L, "LOCK_MARGIN_SECONDS", 0.2)
    frozen = open_ledger(storage_url)
    frozen.claim("run-1", [SUB], fresh=True)
    frozen._lease.stop_renewing()  # what a frozen process does
    t0 = time.monotonic()
    taker = open_ledger(storage_url, wait=10)
    assert time.monotonic() - t0 < 5
    taker.claim("run-1", [SUB])
    with pytest.raises(StateDirError, match="no longer holds it"):
        frozen.record(1, batch(range(0, 3)))
    taker.record(1, batch(range(3, 6)))
    taker.close()
    assert list(open_ledger(storage_url).recover().pending[1].column("message_id").to_pylist()) == ["3", "4", "5"]


def test_a_process_whose_renewals_fail_stops_writing_and_says_why(storage_url, monkeypatch):
    """The stateDir's storage does not answer the lease's renewals (a brownout longer than the
    margin): the writes stop with a message naming the failed renewal, not one that blames another
    process, since none took the stateDir over."""
    from crdb_pubsub.source.state import ledger as L

    monkeypatch.setattr(L, "LOCK_TTL_SECONDS", 1.0)
    monkeypatch.setattr(L, "LOCK_MARGIN_SECONDS", 0.2)
    ledger = open_ledger(storage_url)
    ledger.claim("run-1", [SUB], fresh=True)
    lease = ledger._lease
    lease.stop_renewing()
    swap = lease.storage.swap

    def brownout(*args, **kwargs):
        raise OSError("503 Service Unavailable")

    monkeypatch.setattr(lease.storage, "swap", brownout)
    with pytest.raises(OSError):
        lease.renew()
    time.sleep(0.9)
    with pytest.raises(StateDirError) as refused:
        ledger.record(1, batch(range(0, 3)))
    message = str(refused.value)
    assert "503 Service Unavailable" in message and "took it over" not in message
    monkeypatch.setattr(lease.storage, "swap", swap)


# ------------------------------------------------------------------ a stale reader of the same run

# Stand-ins for two of Spark's runner processes of one driver (both children of this process):
# named like Spark's runner, the only process where the reader ends another one.
_HOLDER = r"""
import signal, sys, time
from crdb_pubsub.source.state.ledger import Ledger
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a reader that no longer handles Spark's SIGTERM
ledger = Ledger(sys.argv[1], wait_seconds=0, window_seconds=1, unconfirmed_seconds=1)
ledger.claim(sys.argv[2], ["projects/p/subscriptions/orders"], fresh=True)
print("held", flush=True)
while True:
    time.sleep(60)
"""
_TAKER = r"""
import json, sys, time
from crdb_pubsub.source.state import ledger as L
L.TAKEOVER_AFTER_SECONDS, L.KILL_AFTER_SECONDS = 0.5, 1.0
t0 = time.monotonic()
try:
    L.Ledger(sys.argv[1], wait_seconds=float(sys.argv[3]), window_seconds=1, unconfirmed_seconds=1,
             run=sys.argv[2] or None)
    print(json.dumps({"took": time.monotonic() - t0}))
except L.StateDirError as e:
    print(json.dumps({"refused": str(e)}))
"""


def _runner_script(tmp_path, name: str, text: str):
    d = tmp_path / name
    d.mkdir()
    (d / "python_streaming_source_runner.py").write_text(text)
    return d / "python_streaming_source_runner.py"


def _holder_and_taker(tmp_path, holder_run: str, taker_run: str, wait: float) -> tuple[dict, bool]:
    """(what the taker reported, whether the holder is still alive afterwards)."""
    import json
    import subprocess
    import sys

    state = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, str(_runner_script(tmp_path, "a", _HOLDER)), str(state), holder_run],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        done = subprocess.run(
            [sys.executable, str(_runner_script(tmp_path, "b", _TAKER)), str(state), taker_run, str(wait)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        try:
            holder.wait(2)
        except subprocess.TimeoutExpired:
            pass
        return json.loads(done.stdout), holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_reader_of_the_same_run_is_ended(tmp_path):
    """It ignores SIGTERM: asked, then killed; the directory is taken over well within the wait."""
    got, alive = _holder_and_taker(tmp_path, "run-1", "run-1", wait=20)
    assert "took" in got, got
    assert got["took"] < 10, got
    assert not alive


@pytest.mark.integration  # waits out 3 s of a holder's renewals
def test_a_holder_serving_another_run_is_left_alone(tmp_path):
    """Another query (another checkpoint) on the same stateDir: refused, as before; nothing ended."""
    got, alive = _holder_and_taker(tmp_path, "run-1", "run-2", wait=3)
    assert "in use by another running query" in got.get("refused", ""), got
    assert alive


@pytest.mark.integration  # waits out 3 s of a holder's renewals
def test_a_holder_is_left_alone_while_the_run_is_unknown(tmp_path):
    """A fresh checkpoint names no run: whoever holds the directory may be another query."""
    got, alive = _holder_and_taker(tmp_path, "run-1", "", wait=3)
    assert "in use by another running query" in got.get("refused", ""), got
    assert alive


def test_unconfirmed_acknowledgements_on_disk_are_bounded(storage_url):
    """An hour of failing acknowledgements must not fill the disk: past ``max_unconfirmed`` rows
    the oldest are forgotten (their messages are read again if Pub/Sub delivers them again)."""
    clock = Clock()
    ledger = Ledger(
        storage_url,
        wait_seconds=0.2,
        window_seconds=WINDOW,
        unconfirmed_seconds=UNCONFIRMED,
        wall=clock,
        max_unconfirmed=5,
    )
    ledger.claim("run-1", [SUB], fresh=True)
    for bid in range(1, 5):
        rows = [(SUB, f"{bid}-{i}", f"a{bid}-{i}") for i in range(2)]
        ledger.committed(bid, rows)
        clock.now += 31  # the prune runs at most every 30 s
        ledger.answered(bid, unconfirmed=rows)
    kept = [m for _, pairs in ledger.recover().unconfirmed for m, _ in pairs]
    assert kept == ["3-0", "3-1", "4-0", "4-1"], kept


def test_a_listing_that_lags_does_not_hide_the_batch_planned_last(tmp_path):
    """A restart on a shared file system whose listing of ``batches/`` is a snapshot from before
    the last batch was written, while every earlier batch's object was deleted at its commit: the
    listing shows nothing at all. Recovery looked for ids past the newest the *same* folder showed
    (none: from 0, 32 ids, and gave up), missed batch 41, and the next process yielded its messages
    again when Pub/Sub delivered them (found by the simulation, seed 361 of driver/posix on
    7772b89). It looks past the newest id any folder shows."""
    ledger = open_ledger(tmp_path)
    ledger.claim("run-1", [SUB], fresh=True)
    for b in range(1, 41):  # past a lookahead's reach from 0
        ledger.record(b, batch(range(3 * b, 3 * b + 3)))
        ledger.committed(b, [(SUB, str(i), f"ack{i}") for i in range(3 * b, 3 * b + 3)])
    ledger.record(41, batch(range(123, 126)))
    ledger.close()

    again = open_ledger(tmp_path)
    storage = again.storage
    listed = storage.list

    def stale_list(prefix: str) -> list[str]:
        return [] if prefix.endswith("batches/") or prefix.endswith("plans/") else listed(prefix)

    storage.list = stale_list  # the snapshot from before batch 41 was written
    storage.listing_may_lag = True
    got = again.recover()
    assert list(got.pending) == [41]
