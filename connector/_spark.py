"""The Spark this package runs on: pyspark >= 4.0, whether a pip package or a cluster's own.

``pyspark`` is not a dependency of ``crdb-pubsub``: on a cluster (Dataproc's images put Spark's
``python/`` on the path, not a pip package) installing the package must never bring a second Spark.
The ``spark`` extra (``pip install '.[spark]'`` in a clone) brings one where there is none, and so
does ``pip install 'pyspark>=4.0,<5'`` (what the error says: it works however the package was
installed). What needs Spark (the data source, the decoder, the CDC apply) calls
:func:`require_pyspark` before it imports pyspark, so that a missing or older Spark fails with one
line that says what is missing and how to get it, instead of a ``ModuleNotFoundError`` deep inside
an import.
"""

from __future__ import annotations

import os
import re

MINIMUM = (4, 0)
HOW = (
    "pip install 'pyspark>=4.0,<5', or run where Spark 4 is installed (e.g. Dataproc image 3.0, Serverless runtime 3.0)"
)


def require_pyspark() -> None:
    """Raise ``ImportError`` with one line unless pyspark >= 4.0 can be imported."""
    try:
        import pyspark
    except ImportError as exc:
        if getattr(exc, "name", None) == "pyspark":  # not there at all
            raise ImportError(f"crdb-pubsub needs pyspark >= 4.0, and none is installed here: {HOW}") from None
        raise ImportError(f"crdb-pubsub needs pyspark >= 4.0, and importing pyspark failed ({exc}): {HOW}") from None
    version = str(getattr(pyspark, "__version__", "") or "")
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found.group(1)), int(found.group(2))) < MINIMUM:
        where = os.path.dirname(getattr(pyspark, "__file__", None) or "") or "an unknown path"
        raise ImportError(
            f"crdb-pubsub needs pyspark >= 4.0 (its Python Data Source API), and found pyspark "
            f"{version or '(no version)'} at {where}: {HOW}"
        )
