"""The full suite's simulation, run beside the suite on the CPU its other tests leave idle.

The simulation is pure computation (~11 core-minutes for 500 seeds of each of the four pairs),
while most of the suite's Spark tests wait on leases, deadlines and triggers. As an ordinary test
the simulation held one of the two xdist workers for all of that time; run here instead, at the
lowest CPU priority (nice 19), it takes only the cycles the two workers' tests do not, and a test
that waits on real time gets the CPU it would get without it. Its four tests, placed last, then
read its verdicts (``tests/sim/test_simulation.py``).

``tests/conftest.py`` starts it, on the xdist controller, only for the whole suite (no paths, no
``-k``, no ``-m``); other runs, the fast tier among them, run the simulation inside its tests.

    python -m sim.background DIR FIRST SEEDS   # what the conftest starts: one pair after another
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PAIRS = [("driver", "posix"), ("driver", "gs"), ("executors", "posix"), ("executors", "gs")]
ENV = "CRDB_PUBSUB_SIM_BACKGROUND"  # the folder of the sweep's verdicts, set for the workers
TESTS = Path(__file__).resolve().parents[1]


def start(first: int, seeds: int) -> subprocess.Popen:
    """Start the sweep in a process group of its own (``stop`` ends it) and tell the workers where
    its verdicts go (``ENV``, inherited by the xdist workers started after this)."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="crdb-pubsub-sim-")
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(TESTS))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.background", folder, str(first), str(seeds)],
        env=env,
        cwd=TESTS.parent,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(folder, "stderr"), "wb"),  # noqa: SIM115 (the child keeps it)
    )
    (Path(folder) / "pid").write_text(str(proc.pid))
    os.environ[ENV] = folder
    return proc


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def verdict(folder: str, mode: str, storage: str, timeout: float) -> tuple[int, str]:
    """Wait for one pair's verdict: (the sweep's exit code, its report). Fails at once if the
    sweep died without giving it."""
    base = Path(folder)
    done, report = base / f"{mode}-{storage}.rc", base / f"{mode}-{storage}.out"
    pid = int((base / "pid").read_text())
    end = time.monotonic() + timeout
    while not done.exists():
        if not _alive(pid) and not done.exists():
            err = (base / "stderr").read_text(errors="replace")[-3000:]
            raise AssertionError(f"the background simulation ended without a verdict for {mode}/{storage}:\n{err}")
        if time.monotonic() > end:
            raise AssertionError(f"no verdict for {mode}/{storage} from the background simulation in {timeout:.0f} s")
        time.sleep(0.5)
    return int(done.read_text()), report.read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A finished child the controller has not reaped yet is a zombie: dead all the same.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    return True


def _sweep(folder: str, first: int, seeds: int) -> None:
    from .__main__ import main

    os.nice(19)
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    for mode, storage in PAIRS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["--mode", mode, "--storage", storage, "--seeds", f"{first}:{first + seeds}", "--jobs", jobs])
        base = Path(folder) / f"{mode}-{storage}"
        base.with_suffix(".out").write_text(out.getvalue())
        tmp = base.with_suffix(".rc.tmp")
        tmp.write_text(str(rc))
        tmp.rename(base.with_suffix(".rc"))  # the verdict appears whole, after its report


if __name__ == "__main__":
    _sweep(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
