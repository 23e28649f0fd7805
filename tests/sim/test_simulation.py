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

TESTS = Path(__file__).resolve().parents[1]
SEEDS = int(os.environ.get("CRDB_PUBSUB_SIM_SEEDS", "500"))
FIRST = int(os.environ.get("CRDB_PUBSUB_SIM_FIRST_SEED", "0"))


def _sim(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(TESTS))
    return subprocess.run(
        [sys.executable, "-m", "sim", *args], env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("storage", ["posix", "gs"])
@pytest.mark.parametrize("mode", ["driver", "executors"])
def test_nothing_lost_nothing_twice_in_every_simulated_world(mode, storage):
    # Under pytest-xdist (the full suite) the other worker runs Spark tests that wait on real time:
    # one core for the simulation leaves them theirs.
    cores = 1 if os.environ.get("PYTEST_XDIST_WORKER") else (os.cpu_count() or 1)
    jobs = str(max(1, min(4, cores)))
    done = _sim("--mode", mode, "--storage", storage, "--seeds", f"{FIRST}:{FIRST + SEEDS}", "--jobs", jobs)
    assert done.returncode == 0, (
        f"failing seeds (each line says how to replay it):\n{done.stdout}\n{done.stderr[-3000:]}"
    )
    print(done.stdout.strip().splitlines()[-1])


def test_a_seed_replays_exactly():
    """The same seed gives the same world, run after other seeds in one process or alone."""
    done = _sim("--mode", "executors", "--storage", "posix", "--seeds", "0:12", "--twice")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    done = _sim("--mode", "driver", "--storage", "gs", "--seeds", "0:12", "--twice")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
