"""The rare recovery paths the simulation counts (tests/sim/paths.py) are all lines of the source."""

from __future__ import annotations

from .paths import PATHS, resolve


def test_every_path_names_a_line_of_the_source():
    # A path whose line moved or went would count 0 worlds and read as never reached.
    found = set(resolve().values())
    assert found == {p.name for p in PATHS}
