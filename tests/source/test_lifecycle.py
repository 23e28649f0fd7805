"""How the driver-side reader process ends when Spark sends it SIGTERM (:mod:`crdb_pubsub.source.lifecycle`).

Each test runs a stand-in for Spark's runner process: a script whose file is named like Spark's
``python_streaming_source_runner`` (the only process where the reader installs its handler),
terminated with SIGTERM while its main thread sleeps, as the real one waits for Spark's next call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WITHIN = 1.0

_RUNNER = r"""
import logging, sys, time
from crdb_pubsub.source.lifecycle import configure_logging, on_terminate

configure_logging()
log = logging.getLogger("crdb_pubsub.test")
marker, flood = sys.argv[1], sys.argv[2] == "flood"

def hand_back():
    if flood:
        # More than a pipe holds: with nobody reading stderr, this blocks inside the log handler,
        # holding its lock, as a reader whose stderr Spark stopped draining would.
        for i in range(20000):
            log.warning("held message %d handed back %s", i, "x" * 100)
    open(marker, "w").write("handed back")

assert on_terminate(hand_back, within=float(sys.argv[3]))
print("READY", flush=True)
while True:
    time.sleep(60)
"""


def _start(tmp_path: Path, flood: bool) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "python_streaming_source_runner.py"
    script.write_text(_RUNNER)
    marker = tmp_path / "handed-back"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marker), "flood" if flood else "quiet", str(WITHIN)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == b"READY", line + (proc.stderr.read() if proc.poll() is not None else b"")  # type: ignore[union-attr]
    return proc, marker


def _ended_within(proc: subprocess.Popen, seconds: float) -> float | None:
    t0 = time.monotonic()
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - t0


def test_sigterm_hands_back_then_exits(tmp_path: Path):
    proc, marker = _start(tmp_path, flood=False)
    try:
        proc.send_signal(signal.SIGTERM)
        took = _ended_within(proc, WITHIN + 10)
        assert took is not None, "the reader process outlived SIGTERM"
        assert proc.returncode == 128 + signal.SIGTERM, proc.returncode
        assert marker.read_text() == "handed back"
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_ends_the_process_even_when_its_log_blocks(tmp_path: Path):
    """The hand-back is stuck writing to a full stderr pipe and holds the log handler's lock: the
    process still ends within its bound (it would otherwise hold the stateDir and its messages'
    leases until someone kills it)."""
    proc, _ = _start(tmp_path, flood=True)
    try:
        proc.send_signal(signal.SIGTERM)
        took = _ended_within(proc, WITHIN + 10)
        state = ""
        if took is None:
            state = next(
                (ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ln.startswith("State:")), ""
            )
        assert took is not None, f"the reader process outlived SIGTERM by {WITHIN + 10:.0f} s ({state})"
        assert took <= WITHIN + 5, took
    finally:
        proc.kill()
        proc.wait()


def test_no_handler_outside_spark_runner():
    """A process that only imports the reader (a notebook, a test) keeps its own SIGTERM handling."""
    from crdb_pubsub.source.lifecycle import on_terminate

    before = signal.getsignal(signal.SIGTERM)
    assert on_terminate(lambda: None, within=WITHIN) is False
    assert signal.getsignal(signal.SIGTERM) is before
    assert os.getpid() > 0
