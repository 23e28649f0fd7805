"""What the build needs code for; every other piece of metadata lives in setup.cfg.

The package index shows README.md as the project's description, and there its relative links (to
docs/, the examples, the tests) lead nowhere: they are made absolute to the repository here, and
the project's URLs point there too. The README itself keeps relative links, which work in a clone
and on the repository's pages (tests/source/test_docs.py checks them).
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent
_CFG = configparser.ConfigParser()
_CFG.read(HERE / "setup.cfg", encoding="utf-8")
# The repository's address lives once, as setup.cfg's `url`; the project URLs and the README's
# links on the package index page follow it.
REPOSITORY_URL = _CFG["metadata"]["url"].rstrip("/")
BRANCH = "main"

_LINK = re.compile(r"(\]\s?)\(([^)\s]+)\)")  # ](target) of an inline link or image
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # http:, https:, mailto:, ...


def absolute_links(markdown: str, base: str = REPOSITORY_URL, branch: str = BRANCH) -> str:
    """Return ``markdown`` with every relative link made absolute to the repository at ``branch``."""

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if _SCHEME.match(target):
            return m.group(0)
        if target.startswith("#"):  # a heading of the README: the repository's front page shows it
            return f"{m.group(1)}({base}{target})"
        return f"{m.group(1)}({base}/blob/{branch}/{target.removeprefix('./')})"

    return _LINK.sub(fix, markdown)


setup(
    long_description=absolute_links((HERE / "README.md").read_text(encoding="utf-8")),
    project_urls={
        "Source": REPOSITORY_URL,
        "Documentation": f"{REPOSITORY_URL}/tree/{BRANCH}/docs",
        "Changelog": f"{REPOSITORY_URL}/blob/{BRANCH}/CHANGELOG.md",
        "Issues": f"{REPOSITORY_URL}/issues",
    },
)
