"""The README's generated tables: the options (from the option model) and the metrics.

``python -m crdb_pubsub.tools.readme README.md`` rewrites each region between
``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``; ``tests/source/test_docs.py`` fails when
the README differs from what this would write.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable

from ..source.metrics import metric_table
from ..source.options import option_table

TABLES: dict[str, Callable[[], str]] = {"options": option_table, "metrics": metric_table}


def _region(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {name} [^\n]*-->\n)(.*?)(<!-- end: {name} -->)", re.S)


def regions(text: str) -> dict[str, str]:
    """What each generated region of ``text`` holds now."""
    out = {}
    for name in TABLES:
        m = _region(name).search(text)
        if m is None:
            raise ValueError(f"README has no region `<!-- generated: {name} ... -->` ... `<!-- end: {name} -->`")
        out[name] = m.group(2)
    return out


def rewrite(text: str) -> str:
    """``text`` with every generated region holding its table."""
    regions(text)  # raises naming a missing region
    for name, table in TABLES.items():
        text = _region(name).sub(lambda m, t=table(): m.group(1) + t + m.group(3), text)
    return text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "README.md")
    path.write_text(rewrite(path.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
