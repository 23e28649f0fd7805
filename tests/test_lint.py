"""The house's checks, in the fast suite (and so in CI): ruff's lint and format on the code, the
tests and the examples, and mypy on the package (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["connector", "emulator", "tests", "examples"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", *PATHS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_code_is_formatted():
    done = _run("ruff", "format", "--check", *PATHS)
    assert done.returncode == 0, "run `ruff format` on:\n" + done.stdout + done.stderr


def test_mypy_finds_nothing():
    done = _run("mypy")  # files and settings: [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr
