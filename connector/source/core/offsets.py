"""Offsets: ``{"batch": N, "run": R}``.

N counts the batches this source planned for the query; R names the query run (a fresh
checkpoint starts a new run; it ties a ``stateDir`` to its checkpoint). Batch 0 is the initial
offset, the same in every run (Spark recomputes it), so it names no run.
"""

from __future__ import annotations


def run_of(offset: dict | None) -> str | None:
    """R of an offset ``{"batch": N, "run": R}`` (``None`` when it names no run)."""
    run = offset.get("run") if isinstance(offset, dict) else None
    return str(run) if run is not None else None


def batch_of(offset: dict | None) -> int | None:
    """N of an offset ``{"batch": N, ...}`` (``None`` for ``None``)."""
    if offset is None:
        return None
    try:
        return int(offset["batch"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"crdb_pubsub: offset {offset!r} was not written by this source (expected {{'batch': N}}); "
            "was the checkpoint location used by another source?"
        ) from None


def offset_of(batch_id: int, run: str | None) -> dict:
    """Return the offset of ``batch_id`` in ``run``."""
    if batch_id == 0 or run is None:
        return {"batch": batch_id}
    return {"batch": batch_id, "run": run}
