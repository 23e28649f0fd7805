"""What must hold after every simulated run (:func:`check` returns what did not).

With a ``stateDir`` (every simulated run has one):

* **nothing lost**: every message published before the end reached the sink, or was in a batch
  whose sink chose not to read it (a partial read);
* **nothing twice**: no message in two batches of the sink (each batch id kept once, as an
  idempotent sink keeps it);
* **nothing acknowledged early**: every acknowledgement that took effect came after Spark wrote
  the commit of a batch that yielded the message (or that the sink chose not to read);
* **order**: on an ordered subscription, each key's messages reach the sink in publish order
  (batch, then partition, then row);
* **bounds**: what the query's processes held at once stays within ``maxOutstandingMessages``;
* **AvailableNow** (4.2+): every run ends, having read everything published before it began that
  Pub/Sub could deliver to it (not what an earlier run's Pull still leases);
* **loud failures**: a query that dies names what went wrong (``StateDirError``,
  ``ReceiverError``, ... or the fault the world injected), no thread of the source dies of an
  unexpected exception, and the world converges (restarted as a user would restart it).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from .spark import RunnerDied, SinkFails
from .world import Record

# What a query may die of, loudly: the source's own named errors, and the faults the world made.
LOUD = {
    "StateDirError",
    "ReceiverError",
    "SliceConflict",
    "LeaseLost",
    RunnerDied.__name__,
    SinkFails.__name__,
    "_TaskFailed",
    "SeenUnreachable",  # a task could not reach the driver-side reader (the runner died under it)
    # The storage itself failed for longer than its client retries (a brownout the world made).
    "OSError",
    "ServiceUnavailable",
}


@dataclass
class Verdict:
    problems: list[str]

    def __bool__(self) -> bool:
        return not self.problems


def check(rec: Record) -> Verdict:
    sc = rec.scenario
    problems: list[str] = []
    sink = rec.sink
    excused: set[str] = set().union(*sink.excused.values()) if sink.excused else set()
    got = sink.ids()
    counts = collections.Counter(got)
    everything = {m for ids in rec.published.values() for m in ids}

    missing = everything - counts.keys() - excused
    acked = {m for s in rec.service.subs.values() for m, msg in s.messages.items() if msg.ever_acked}
    lost = missing & acked  # acknowledged, never in the sink: gone for good
    if lost:
        problems.append(
            f"lost {len(lost)} of {len(everything)} messages (acknowledged, never in the sink), e.g. {sorted(lost)[:5]}"
        )
    pending = missing - acked
    if pending and not rec.note:
        problems.append(
            f"{len(pending)} of {len(everything)} messages never reached the sink in {rec.end_time:.0f} s "
            f"(not acknowledged either: the world did not converge), e.g. {sorted(pending)[:5]}"
        )
    doubled = {m: c for m, c in counts.items() if c > 1}
    if doubled:
        where = {m: [n for n, ids in sink.batches.items() if m in ids] for m in list(doubled)[:5]}
        problems.append(f"{len(doubled)} messages reached the sink more than once, e.g. {where}")

    # Nothing acknowledged before a committed batch yielded it.
    first_commit: dict[str, float] = {}
    for n, ids in sink.batches.items():
        at = rec.logs.commits.get(n)
        if at is None:
            continue
        for m in set(ids) | sink.excused.get(n, set()):
            first_commit[m] = min(first_commit.get(m, at), at)
    early = [e for e in rec.service.acks if e.mid not in first_commit or first_commit[e.mid] > e.at]
    if early:
        e = early[0]
        problems.append(
            f"{len(early)} acknowledgement(s) took effect before any committed batch yielded the message, "
            f"e.g. {e.mid} at {e.at:.3f}s by {e.process.name if e.process else '?'} (committed: {first_commit.get(e.mid)})"
        )

    if sc.ordered:
        seen: set[str] = set()
        last: dict[tuple[str, str], int] = {}
        index = {m: i for ids in rec.published.values() for i, m in enumerate(ids)}
        sub_of = {m: s for s, ids in rec.published.items() for m in ids}
        wrong = []
        for m in got:
            if m in seen:
                continue
            seen.add(m)
            key = rec.key_of.get(m, "")
            if not key:
                continue
            k = (sub_of[m], key)
            if index[m] < last.get(k, -1):
                wrong.append(m)
            last[k] = max(last.get(k, -1), index[m])
        if wrong:
            problems.append(
                f"{len(wrong)} messages reached the sink after a later message of their key, e.g. {wrong[:5]}"
            )

    bound = int(sc.options["maxOutstandingMessages"])
    over = {app: n for app, n in rec.service.max_held.items() if n > bound}
    if over:
        problems.append(f"held more than maxOutstandingMessages={bound} at once: {over}")

    if sc.trigger == "available_now" and not sc.spark.old_api:
        for i, run in enumerate(rec.runs):
            if run.died:
                continue
            if not run.ended:
                problems.append(f"AvailableNow run {i} (began at {run.cutoff:.1f}s) did not end")
                continue
            # What Pub/Sub passed over for newer messages is excused (delivered late, out of order:
            # the documented limit; an answer of only newer messages is the evidence a run ends
            # on). What an earlier process of the query leased is not: a run waits it out.
            missing = run.before - run.sink_at_end - run.late
            if missing:
                problems.append(
                    f"AvailableNow run {i} (began at {run.cutoff:.1f}s, ended at {run.finished_at:.1f}s) ended "
                    f"with {len(missing)} of {len(run.before)} messages published before it unread, e.g. {sorted(missing)[:5]}"
                )

    for exc in rec.failures:
        name = type(exc).__name__
        if name not in LOUD:
            problems.append(f"the query died of {name}: {exc}")
    for thread, exc in rec.thread_errors:
        problems.append(f"thread {thread} died of {type(exc).__name__}: {exc}")
    if rec.note:
        problems.append(rec.note)
    if not rec.converged and not missing and not rec.note:
        problems.append(f"the world did not converge within {rec.end_time:.0f} s of virtual time")
    return Verdict(problems)
