"""``receiver=executors``: each task of a micro-batch pulls its own slice; the driver commits.

In the default mode one driver-side process pulls every message (:mod:`..driver`), which caps a
query near what one core can do. In this mode the work is split the way Beam's and Flink's Pub/Sub
readers split it:

* the driver (:mod:`.mode`) plans batch N as ``numPartitions`` slices (:mod:`.orders`), each with
  its share of the trigger's limits; it never touches a body. It leases the slices pulled but not
  committed and acknowledges a batch's slices once Spark's commit of it is proven, exactly as the
  driver mode acknowledges its batches;
* each task (:mod:`.task`) pulls from its subscription(s) until its share is full, a Pull comes
  back empty, or its time is up; writes what it pulled to ``<stateDir>/v2/slices/N/P.arrow``
  atomically (:mod:`.store`) *before* yielding any row; then decodes and yields it. A retried task
  finds the slice and replays it (the same rows); an attempt that finds another attempt's slice
  already written hands its own messages back and replays that one.

The stateDir is the only channel from the tasks to the driver, so it must be one directory that the
driver and every executor reach. Nothing here imports :mod:`..driver`.
"""

from .mode import ExecutorsMode

__all__ = ["ExecutorsMode"]
