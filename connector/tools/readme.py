"""The documentation's generated tables: the options (from the option model) and the metrics.

``python -m crdb_pubsub.tools.readme FILE...`` rewrites each region between
``<!-- generated: NAME ... -->`` and ``<!-- end: NAME -->`` in the files named (the README holds the
option table, ``docs/metrics.md`` the metric table); without arguments it rewrites ``README.md``
and every ``docs/*.md`` of the current directory. ``tests/source/test_docs.py`` fails when a page
differs from what this would write, or when a table is in no page.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from ..source.metrics import metric_table
from ..source.options import option_table

TABLES: dict[str, Callable[[], str]] = {"options": option_table, "metrics": metric_table}


def _region(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {name} [^\n]*-->\n)(.*?)(<!-- end: {name} -->)", re.S)


def regions(text: str) -> dict[str, str]:
    """Return what each generated region ``text`` has holds now (a page holds any of the tables, or none)."""
    out = {}
    for name in TABLES:
        m = _region(name).search(text)
        if m is not None:
            out[name] = m.group(2)
    return out


def rewrite(text: str) -> str:
    """``text`` with every generated region it has holding its table."""
    for name in regions(text):
        table = TABLES[name]()

        def fill(m: re.Match[str], t: str = table) -> str:
            return m.group(1) + t + m.group(3)

        text = _region(name).sub(fill, text)
    return text


def pages(root: Path) -> list[Path]:
    """List the pages that may hold generated tables: the README and the docs/ pages."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or [p for p in pages(Path(".")) if p.exists()]
    for path in paths:
        text = path.read_text()
        if args and not regions(text):
            names = ", ".join(TABLES)
            raise SystemExit(
                f"{path} has no region `<!-- generated: NAME ... -->` ... `<!-- end: NAME -->` (NAME: {names})"
            )
        new = rewrite(text)
        if new != text:
            path.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
