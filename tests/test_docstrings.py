"""The public API has docstrings (read with ``ast``: no import, no Spark).

The house style (``pyproject.toml``): prose docstrings, identifiers in ``double backticks``; a
one-line summary ending with a period, a blank line, then the body. No numpydoc sections.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (file, the names in it that must say what they do); a class listed with "Class.*" needs one on
# every public method it defines as well.
PUBLIC = {
    "connector/__init__.py": ["<module>", "register"],
    "connector/decode/__init__.py": ["<module>"],
    "connector/decode/decoder.py": ["decode_messages", "DecodeStats", "MalformedMessageError"],
    "connector/decode/inference.py": ["schema_from_enriched"],
    "connector/apply/__init__.py": ["<module>", "apply_batch", "foreach_batch_apply", "read_state"],
    "connector/source/datasource.py": ["<module>", "register", "CrdbPubSubDataSource.*", "CrdbPubSubStreamReader.*"],
    "connector/tools/cli.py": ["<module>", "main", "build_parser", "tail"],
    "connector/tools/simulator/command.py": ["main"],
    "emulator/__main__.py": ["<module>", "main", "dispatch", "cmd_start", "cmd_env", "cmd_stop", "cmd_run"],
}


def _targets():
    for path, names in PUBLIC.items():
        for name in names:
            yield pytest.param(path, name, id=f"{path}::{name}")


def _find(tree: ast.Module, name: str):
    node: ast.AST = tree
    for part in name.split("."):
        node = next(
            n
            for n in node.body  # type: ignore[attr-defined]
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
        )
    return node


def _missing(path: str, name: str) -> list[str]:
    tree = ast.parse((ROOT / path).read_text())
    if name == "<module>":
        return [] if ast.get_docstring(tree) else ["the module"]
    whole_class = name.endswith(".*")
    node = _find(tree, name.removesuffix(".*"))
    missing = [] if ast.get_docstring(node) else [name.removesuffix(".*")]
    if whole_class:
        missing += [
            f"{node.name}.{m.name}"
            for m in node.body
            if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
            and not m.name.startswith("_")
            and not ast.get_docstring(m)
        ]
    return missing


@pytest.mark.parametrize("path, name", list(_targets()))
def test_the_public_api_says_what_it_does(path, name):
    assert not _missing(path, name), f"{path}: no docstring on {', '.join(_missing(path, name))}"
