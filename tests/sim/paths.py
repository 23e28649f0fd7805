"""Which of the source's rare recovery paths a world runs: each named by a line of the source.

A path is the line that runs only when it does: a hand-back before a slice is recorded, a batch a
restart replays, a lease taken over, ... :func:`traced` counts, for one run of the simulation,
which of them ran, by a trace function on the code objects of those lines alone (no hook in the
source). ``python -m sim --paths`` prints, for a range of seeds, in how many worlds each ran: a
path that CI's worlds reach rarely is one whose defects pass CI by chance.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

S = "crdb_pubsub.source."


@dataclass(frozen=True)
class Path:
    name: str
    module: str
    function: str  # a function's qualified name in the module
    marker: str  # text of the lines that run only on the path (any of them)

    @property
    def modes(self) -> tuple[str, ...]:
        """The receiver modes whose worlds may run it."""
        for mode in ("driver", "executors"):
            if self.name.startswith(mode + ":") or (mode == "executors" and self.name.startswith("task:")):
                return (mode,)
        return ("driver", "executors")


PATHS = [
    # receiver=executors: a task
    Path(
        "task: unproven leases handed back before recording", S + "executors.task", "_Pulled.drop_unproven", "gone = ["
    ),
    Path(
        "task: a failed pull handed back",
        S + "executors.task",
        "_pull_and_record",
        "leased_until = _let_go(keeper, pulled, rpc)  # nothing",
    ),
    Path(
        "task: another attempt recorded the slice first",
        S + "executors.task",
        "_pull_and_record",
        "other = store.read(",
    ),
    Path("task: a dead attempt's claim taken over", S + "executors.task", "_pull_and_record", "released = bool("),
    Path(
        "task: a replay's unrecorded slice recorded empty",
        S + "executors.task",
        "pulled_slice",
        "table = SLICE_SCHEMA.empty_table()",
    ),
    Path("task: a message delivered again to the task", S + "pubsub.held", "Held.sort", "out.refreshed.append(c)"),
    # receiver=executors: the driver side
    Path(
        "executors: unrecorded or stale slices handed back at a commit",
        S + "executors.mode",
        "ExecutorsMode._hand_back",
        "for sub in {c.sub for c in chunks}:",
    ),
    Path(
        "executors: later rows handed back for room",
        S + "executors.mode",
        "ExecutorsMode._room_beside_later",
        "n = self._hand_back_later()",
    ),
    Path(
        "executors: a dead task's leases waited out",
        S + "executors.mode",
        "ExecutorsMode._shadow_claims",
        "self._drain.shadow(sub, now + longest)",
    ),
    Path(
        "executors: what an attempt that lost its slice could not hand back waited out",
        S + "executors.mode",
        "ExecutorsMode._shadow_claims",
        "self._drain.shadow(sub, noted)",
    ),
    Path(
        "executors: a registered slice's claim another attempt held, read again",
        S + "executors.mode",
        "ExecutorsMode._shadow_claims",
        "self._held_claims[(b, p)] = claim_subs",
    ),
    Path(
        "executors: an attempt that died holding a registered slice's claim waited out",
        S + "executors.mode",
        "ExecutorsMode._shadow_claims",
        "self._drain.shadow(sub, expiry + longest)",
    ),
    Path(
        "executors: a batch replayed from its plan",
        S + "executors.mode",
        "ExecutorsMode.inputs",
        'self.counters.add("batchesReplayed")',
    ),
    Path(
        "executors: a subscription left idle until its shadow ends",
        S + "pubsub.drained",
        "Drain.idle_until",
        "return shadow",
    ),
    # receiver=driver
    Path(
        "driver: a Pull answered while stopping handed back",
        S + "driver.receiver",
        "Receiver.accept",
        "self.holding.hand_back_ids(sub, ack_ids, total=2.0)",
    ),
    Path(
        "driver: later messages handed back for room",
        S + "driver.receiver",
        "Receiver.hand_back_later",
        "later, self._later = self._later, []",
    ),
    Path("driver: a batch replayed from the stateDir", S + "driver.mode", "DriverMode._replay", "batch = SealedBatch("),
    Path(
        "driver: a message delivered again while held",
        S + "pubsub.held",
        "Held.sort",
        "c.refresh(mid, ack_ids[i], proven)",
    ),
    # both
    Path(
        "a hand-back released once a renewal landed",
        S + "pubsub.leaser",
        "Leaser._landed",
        "self._on_released(returned)",
    ),
    Path("a lease given up (maxLeaseDurationSeconds)", S + "pubsub.leaser", "Leaser._tick", "c.given_up = True"),
    Path(
        "an acknowledgement not proven",
        S + "pubsub.acknowledgements",
        "Acknowledgements._answer.<locals>.done",
        "if self._on_unproven is not None:",
    ),
    Path(
        "unproven acknowledgements of an earlier process sent again",
        S + "pubsub.acknowledgements",
        "Acknowledgements.resend",
        "self.acker.submit(",
    ),
    Path(
        "a hand-back that failed casts a shadow",
        S + "pubsub.drained",
        "Drain.handed_back",
        "self.shadow(sub, leased_until)",
    ),
    Path("the stateDir's lease taken over", S + "storage.lease", "Lease.acquire", "taken over from"),
    Path("a holder found its lease lost", S + "storage.lease", "Lease.check", "raise LeaseLost("),
    Path(
        "latestOffset asked again with one start",
        S + "core.protocol",
        "OffsetProtocol.latest",
        "self._spark_latest = self._answered[1]",
    ),
]


def _function(module: Any, qualname: str) -> Any:
    obj = module
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        if part == "<locals>":
            # A nested function: its code object is a constant of the enclosing one.
            code = obj.__code__
            name = parts[i + 1]
            return next(c for c in code.co_consts if isinstance(c, CodeType) and c.co_name == name)
        obj = getattr(obj, part)
    return obj


def resolve(paths: list[Path] = PATHS) -> dict[tuple[CodeType, int], str]:
    """Map each path's (code object, line number) pairs to its name; a marker not found is an error."""
    out: dict[tuple[CodeType, int], str] = {}
    for p in paths:
        fn = _function(importlib.import_module(p.module), p.function)
        fn = getattr(fn, "__wrapped__", fn)  # a context manager's generator
        code = fn if isinstance(fn, CodeType) else fn.__code__
        lines, first = inspect.getsourcelines(code)
        hits = [first + i for i, text in enumerate(lines) if p.marker in text]
        if not hits:
            raise LookupError(f"path {p.name!r}: no line of {p.module}.{p.function} holds {p.marker!r}")
        out.update(dict.fromkeys(((code, line) for line in hits), p.name))
    return out


@contextlib.contextmanager
def traced(targets: dict[tuple[CodeType, int], str]) -> Iterator[set[str]]:
    """Collect the names of the paths whose lines run inside the ``with`` (on every greenlet)."""
    codes = {code for code, _ in targets}
    ran: set[str] = set()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            name = targets.get((frame.f_code, frame.f_lineno))
            if name is not None:
                ran.add(name)
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code in codes else None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield ran
    finally:
        sys.settrace(old)
