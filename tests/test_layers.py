"""The package's import layers hold (tools -> apply -> source -> decode), checked by
import-linter with the contract in setup.cfg."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_imports_point_one_way():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    done = subprocess.run(
        [exe, "--config", str(ROOT / "setup.cfg")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
