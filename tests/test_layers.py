"""The package's import layers hold (tools -> apply -> source -> decode), checked by
import-linter with the contract in setup.cfg; and the source takes its clock and threads from the
modules the simulation swaps."""

from __future__ import annotations

import ast
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


SWAPPED = ("time", "threading", "queue", "random")  # the modules tests/sim/world.py virtualizes


def _bindings(tree: ast.Module) -> list[tuple[int, str]]:
    """Where a module binds a function of a swapped module by name (it would keep the real one)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in SWAPPED and not node.level:
            found.append((node.lineno, f"from {node.module} import {', '.join(a.name for a in node.names)}"))
    for node in tree.body:  # module level: ``now = time.monotonic`` is bound once, at import
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for sub in ast.walk(node.value):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id in SWAPPED
                    and not any(isinstance(p, ast.Call) and p.func is sub for p in ast.walk(node.value))
                ):
                    found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_source_module_binds_a_clock_or_thread_function_by_name():
    bound = []
    for path in sorted((ROOT / "connector").rglob("*.py")):
        for line, text in _bindings(ast.parse(path.read_text(), str(path))):
            bound.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert not bound, "import the module and call through it (docs/development.md):\n" + "\n".join(bound)


def test_the_binding_check_sees_both_ways_of_binding():
    tree = ast.parse("from time import monotonic\nimport time\nNOW = time.monotonic\nT = time.monotonic()\n")
    assert [line for line, _ in _bindings(tree)] == [1, 3]
