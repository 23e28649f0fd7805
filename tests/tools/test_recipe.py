"""The README's five-line local recipe runs as written: emulator, simulate, tail, readStream.

The shell lines are taken from the README and run as the user runs them (the installed
``crdb-pubsub``), against the tests' emulator instead of a second one: ``emulator start`` becomes
``PUBSUB_EMULATOR_HOST`` pointing at it, ``emulator stop`` is left to the fixture. ``read_users.py``
is the README's Python block, run in the tests' SparkSession (its ``getOrCreate()`` returns it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pull_ids

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "### By hand, against the emulator: five lines"


def recipe() -> tuple[list[str], str]:
    """The recipe's shell lines (comments dropped) and its Python file's text."""
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, "the README's recipe section moved: update this test with it"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    lines = [line.split("  #", 1)[0].strip() for line in shell.strip().splitlines()]
    return lines, python


def test_the_recipe_is_five_lines_in_order():
    lines, python = recipe()
    assert len(lines) == 5
    assert lines[0] == 'eval "$(crdb-pubsub emulator start)"'
    assert lines[1].startswith("crdb-pubsub simulate ")
    assert lines[2].startswith("crdb-pubsub tail ")
    assert lines[3] == "python read_users.py" and python.startswith("# read_users.py\n")
    assert lines[4] == "crdb-pubsub emulator stop"
    compile(python, "read_users.py", "exec")


@pytest.mark.integration
def test_the_recipe_runs_as_written(spark, emulator_host, monkeypatch):
    lines, python = recipe()
    script = str(Path(sys.executable).with_name("crdb-pubsub"))
    env = dict(os.environ, PUBSUB_EMULATOR_HOST=emulator_host)  # what `eval "$(... emulator start)"` exports
    outputs = []
    for line in lines[1:3]:
        argv = shlex.split(line)
        res = subprocess.run([script, *argv[1:]], capture_output=True, text=True, timeout=120, env=env)
        assert res.returncode == 0, (line, res.stderr)
        outputs.append(res)
    sub = re.search(r"--subscription (\S+)", lines[2]).group(1)
    # simulate made the subscription before publishing; tail showed 5 changes and consumed none.
    table = outputs[1].stdout.splitlines()
    assert table[0].split()[:3] == ["publish_time", "table", "op"] and len(table) == 6, outputs[1].stdout
    assert all(" users " in row for row in table[1:])

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator_host)
    exec(compile(python, "read_users.py", "exec"), {"__name__": "__main__"})  # the README's own code
    # The query committed every batch: nothing is left to pull, all 100 were acknowledged.
    assert pull_ids(emulator_host, sub, timeout=3.0) == []
