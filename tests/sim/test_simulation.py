"""The promise against everything Pub/Sub, Spark and the stateDir's storage may do: seeded worlds, judged.

Each (receiver mode, storage) pair runs ``CRDB_PUBSUB_SIM_SEEDS`` seeds (default 500) in worker
processes with ``PYTHONHASHSEED=0``, so that a failing seed prints one command that replays it
exactly. The runs need no emulator, no Spark and no real waiting: the fast tier runs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import background

TESTS = Path(__file__).resolve().parents[1]
SEEDS = int(os.environ.get("CRDB_PUBSUB_SIM_SEEDS", "500"))
FIRST = int(os.environ.get("CRDB_PUBSUB_SIM_FIRST_SEED", "0"))


def _sim(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(TESTS))
    return subprocess.run(
        [sys.executable, "-m", "sim", *args], env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("storage", ["posix", "gs"])
@pytest.mark.parametrize("mode", ["driver", "executors"])
def test_nothing_lost_nothing_twice_in_every_simulated_world(mode, storage):
    folder = os.environ.get(background.ENV)
    if folder:  # the full suite: the sweep ran beside it (tests/sim/background.py)
        returncode, report = background.verdict(folder, mode, storage, timeout=3500)
        stderr = ""
    else:
        # Under pytest-xdist the other worker runs tests that wait on real time: one core for the
        # simulation leaves them theirs.
        cores = 1 if os.environ.get("PYTEST_XDIST_WORKER") else (os.cpu_count() or 1)
        jobs = str(max(1, min(4, cores)))
        done = _sim("--mode", mode, "--storage", storage, "--seeds", f"{FIRST}:{FIRST + SEEDS}", "--jobs", jobs)
        returncode, report, stderr = done.returncode, done.stdout, done.stderr
    assert returncode == 0, f"failing seeds (each line says how to replay it):\n{report}\n{stderr[-3000:]}"
    print(report.strip().splitlines()[-1])


def test_a_seed_replays_exactly():
    """The same seed gives the same world, run after other seeds in one process or alone."""
    done = _sim("--mode", "executors", "--storage", "posix", "--seeds", "0:12", "--twice")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    done = _sim("--mode", "driver", "--storage", "gs", "--seeds", "0:12", "--twice")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
