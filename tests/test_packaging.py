"""What the installed package declares: the dependencies Spark's Python workers need."""

from __future__ import annotations

from importlib.metadata import requires

from packaging.requirements import Requirement


def test_pyarrow_as_spark_4_2_needs_it():
    """Spark 4.2+ declares pyarrow>=18 for its SQL workers; a lower floor would let pip pick a
    pyarrow that the data source worker rejects (issue 14, item 7)."""
    reqs = {r.name: r for r in map(Requirement, requires("crdb-pubsub") or []) if r.marker is None}
    assert "pyarrow" in reqs
    assert not reqs["pyarrow"].specifier.contains("17.0.0") and reqs["pyarrow"].specifier.contains("18.0.0")
