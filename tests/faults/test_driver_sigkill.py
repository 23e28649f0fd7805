"""Scenario 1: the driver SIGKILLed at random points, restarted from its checkpoint each time.

The job (``tests/stream_job.py``: crdb_pubsub -> parquet file sink) runs as its own process
group; a seeded RNG picks, for each round, where to kill the whole group:

* ``pull``: a random delay after the query started (the receiver is pulling and buffering),
* ``plan``: Spark wrote ``offsets/N`` (the source sealed batch N) but not ``commits/N`` yet,
* ``ack``: Spark just wrote ``commits/N``; the source's ``commit`` (the acknowledgement) follows.

Every round publishes a fresh chunk first, so each run has work in flight when it dies. A last
run with Trigger.AvailableNow drains what is left. With ``stateDir``: lost = 0 and duplicated = 0.
Without: lost = 0, duplicates counted and reported (at-least-once).

Spark's own window: a kill while Spark writes its very first offset log file (``offsets/0`` is
written to a hidden temporary file, then renamed) leaves that temporary file behind, and Spark 4.1+
then refuses to start the query on that checkpoint (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``).
Nothing of the source is involved and no batch was ever planned, so when exactly that happens the
test applies the remedy docs/guarantees.md gives users (delete what is in ``offsets/`` and
``commits/`` when neither holds a numbered file), starts the job again and counts it
(``spark_window`` in the report), instead of failing by chance on where the random kill landed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stream_job import job_command

from ._support import publish_many, report, row_body, scaled, sink_column, tally

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.spark]

ACK_DEADLINE = 5
SEED = int(os.environ.get("CRDB_PUBSUB_FAULT_SEED", "20240606"))


def _kill_rounds(
    host: str,
    topic: str,
    sub: str,
    tmp: Path,
    log: Path,
    rounds: int,
    per_round: int,
    rng: random.Random,
    *,
    state: bool | str,
    **job: object,
) -> tuple[list[str], list[str]]:
    """``rounds`` times: publish ``per_round`` messages, start the job, SIGKILL it at a point of a
    shuffled mix of pull/plan/ack; (every id published, where each kill landed)."""
    modes = (["pull", "plan", "ack"] * ((rounds + 2) // 3))[:rounds]
    rng.shuffle(modes)
    published: list[str] = []
    kills: list[str] = []
    for r, mode in enumerate(modes):
        published += publish_many(host, topic, (row_body(i) for i in range(r * per_round, (r + 1) * per_round)))
        for attempt in range(2):  # a second refusal in a row would not be the kill's chance
            since = log.stat().st_size if log.exists() else 0
            proc = _start(host, sub, tmp, log, state=state, available_now=False, **job)
            try:
                kills.append(_kill_at(proc, mode, rng, tmp, log, since))
                break
            except SparkWindow:
                if attempt:
                    raise AssertionError(f"Spark refused the checkpoint twice in a row:\n{_tail(log)}") from None
                kills.append(f"Spark's window: removed {_user_remedy(tmp)}, started again")
    return published, kills


def _final_drain(
    host: str, sub: str, tmp: Path, log: Path, kills: list[str], *, state: bool | str, **job: object
) -> list[str]:
    """An AvailableNow run on the same checkpoint that must succeed (once more after Spark's window,
    noted in ``kills``); every message id in the sink."""
    for attempt in range(2):
        since = log.stat().st_size if log.exists() else 0
        final = _start(host, sub, tmp, log, state=state, available_now=True, **job)
        try:
            final.wait(timeout=300)
        finally:
            if final.poll() is None:
                os.killpg(final.pid, signal.SIGKILL)
                final.wait(30)
        if final.returncode != 0 and attempt == 0 and _in_spark_window(tmp, log, since):
            kills.append(f"Spark's window: removed {_user_remedy(tmp)}, drained again")
            continue
        break
    assert final.returncode == 0, _tail(log)
    return sink_column(tmp / "out")["message_id"].to_pylist()


def _start(
    host: str, sub: str, tmp: Path, log: Path, *, state: bool | str, available_now: bool, **job: object
) -> subprocess.Popen:
    cmd = job_command(host, sub, tmp, state=state, available_now=available_now, ack_deadline=ACK_DEADLINE, **job)
    with open(log, "ab") as fh:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, start_new_session=True, stdout=fh, stderr=subprocess.STDOUT)


def _numbered(d: Path) -> set[int]:
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def _tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else ""


# Spark 4.1+ (spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart, on by default): a checkpoint
# whose offset log holds no batch must have empty offsets/, commits/ and state/ folders.
SPARK_WINDOW = "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"


class SparkWindow(Exception):
    """The job refused to start in Spark's own window (see the module docstring); nothing was planned."""


def _in_spark_window(tmp: Path, log: Path, since: int) -> bool:
    """Whether the job that logged from byte ``since`` on ended with Spark's refusal of a checkpoint
    that never planned a batch: its exact error, and no numbered file in ``offsets/`` or ``commits/``."""
    chk = tmp / "chk"
    said = SPARK_WINDOW in log.read_bytes()[since:].decode(errors="replace")
    return said and not _numbered(chk / "offsets") and not _numbered(chk / "commits")


def _user_remedy(tmp: Path) -> list[str]:
    """docs/guarantees.md's remedy: no batch was ever planned, so delete the files left in the
    checkpoint's ``offsets/`` and ``commits/`` (a killed write's temporary file and its checksum)."""
    left = []
    for d in (tmp / "chk" / "offsets", tmp / "chk" / "commits"):
        for f in sorted(d.iterdir()) if d.exists() else ():
            left.append(f"{d.name}/{f.name}")
            f.unlink()
    return left


def _kill_at(
    proc: subprocess.Popen, mode: str, rng: random.Random, tmp: Path, log: Path, since: int, timeout: float = 240
) -> str:
    """Wait for the kill point ``mode``, SIGKILL the group; returns what was observed at the kill."""
    offsets, commits = tmp / "chk" / "offsets", tmp / "chk" / "commits"
    committed_before = _numbered(commits)
    end = time.monotonic() + timeout
    started_at = None
    delay = rng.uniform(0.0, 4.0) if mode == "pull" else rng.uniform(0.0, 0.2)
    try:
        while time.monotonic() < end:
            if proc.poll() is not None:
                if _in_spark_window(tmp, log, since):
                    raise SparkWindow()
                raise AssertionError(f"job exited with {proc.returncode} before the kill point:\n{_tail(log)}")
            if started_at is None:
                if b"STARTED" in log.read_bytes():
                    started_at = time.monotonic()
                else:
                    time.sleep(0.05)
                    continue
            if mode == "pull":
                if time.monotonic() - started_at >= delay:
                    return f"pull +{delay:.2f}s"
            elif mode == "plan":
                pending = _numbered(offsets) - _numbered(commits)
                if pending and max(_numbered(offsets)) > max(committed_before, default=-1):
                    time.sleep(delay)
                    return f"plan batch {max(pending)} (+{delay:.2f}s)"
            else:  # ack
                new = _numbered(commits) - committed_before
                if new:
                    time.sleep(delay)
                    return f"ack after commit {max(new)} (+{delay:.2f}s)"
            time.sleep(0.005)
        raise AssertionError(f"kill point {mode} not reached in {timeout:.0f} s:\n{_tail(log)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)


@pytest.mark.parametrize("state", ["posix", "gcs", None], ids=["stateDir", "stateDir-gs", "no-stateDir"])
def test_driver_sigkill_at_random_points(request, emulator_host, make_subscription, tmp_path, state):
    # CI: each kind of kill point once per storage (a round costs a JVM start, ~30 s here);
    # CRDB_PUBSUB_FAULTS_FULL=1 kills twelve times.
    rounds = scaled(3, 12, "CRDB_PUBSUB_SIGKILL_ROUNDS")
    per_round = scaled(1000, 2500)
    rng = random.Random(SEED + (1 if state else 0))
    state = request.getfixturevalue("gcs_state_url") if state == "gcs" else state == "posix"
    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    log = tmp_path / "job.log"
    published, kills = _kill_rounds(emulator_host, topic, sub, tmp_path, log, rounds, per_round, rng, state=state)

    # What the last victim held comes back once its leases lapse; then drain the rest.
    time.sleep(ACK_DEADLINE + 2)
    got = _final_drain(emulator_host, sub, tmp_path, log, kills, state=state)
    lost, duplicated, unexpected = tally(published, got)
    report(
        "driver-sigkill" + ("-stateDir-gs" if isinstance(state, str) else "-stateDir" if state else "-no-stateDir"),
        published=len(published),
        lost=lost,
        duplicated=duplicated,
        kills=sum(not k.startswith("Spark's window") for k in kills),
        spark_window=sum(k.startswith("Spark's window") for k in kills),
        kill_points=kills,
        sink_rows=len(got),
        seed=SEED,
    )
    assert not unexpected
    assert lost == 0, f"{lost} messages lost after kills at {kills}"
    if state:
        assert duplicated == 0, f"{duplicated} duplicates with stateDir after kills at {kills}"


@pytest.mark.parametrize("partitions, storage", [(2, "gcs"), (4, "posix")], ids=["2-gs", "4"])
def test_executors_receiver_driver_sigkill(request, emulator_host, make_subscription, tmp_path, partitions, storage):
    """receiver=executors: the driver SIGKILLed while tasks pull, after a batch was planned, and
    right after a commit; restarted on the same checkpoint and stateDir each time."""
    rounds = scaled(3, 6, "CRDB_PUBSUB_SIGKILL_ROUNDS")
    per_round = scaled(1000, 2500)
    rng = random.Random(SEED + 10 + partitions)
    job = {"receiver": "executors", "num_partitions": partitions}
    state = request.getfixturevalue("gcs_state_url") if storage == "gcs" else True

    topic, sub = make_subscription(ack_deadline_seconds=ACK_DEADLINE)
    log = tmp_path / "job.log"
    published, kills = _kill_rounds(
        emulator_host, topic, sub, tmp_path, log, rounds, per_round, rng, state=state, **job
    )

    time.sleep(ACK_DEADLINE + 2)
    got = _final_drain(emulator_host, sub, tmp_path, log, kills, state=state, **job)
    lost, duplicated, unexpected = tally(published, got)
    report(
        f"driver-sigkill-executors-{partitions}" + ("-gs" if storage == "gcs" else ""),
        published=len(published),
        lost=lost,
        duplicated=duplicated,
        kills=sum(not k.startswith("Spark's window") for k in kills),
        spark_window=sum(k.startswith("Spark's window") for k in kills),
        kill_points=kills,
        sink_rows=len(got),
        seed=SEED,
    )
    assert not unexpected
    assert lost == 0, f"{lost} messages lost after kills at {kills}"
    assert duplicated == 0, f"{duplicated} duplicates after kills at {kills}"
