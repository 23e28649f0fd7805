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
import math
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


def _bounds(rec: Record) -> list[str]:
    """What the options bound: messages and bytes held at once, and each batch's messages and bytes.

    The count bounds are hard. The byte bounds allow what the documentation allows, where bodies
    are all of one size: with ``receiver=driver`` one message (a lone message larger than the room
    still moves); with ``receiver=executors`` one message a task. Pulls are sized by the largest
    message of recent answers: where sizes vary, each Pull in flight may bring larger ones than
    its reservation counted (seen: the driver's 4 Pulls after a 12 s pause, 2 messages over, the
    driver/posix seed 414), a soft bound, not checked.

    A task attempt frozen as it wrote its slice, past its claim, is written off, but its write
    lands when it wakes and the driver leases what it records, while the attempt that took the
    claim over holds its own Pull until it finds that slice and hands the Pull back (no storage
    fences a write already sent): in a world where such a write landed late, the count bound
    allows one task's share more (the executors/gs seed 302: 51 of 40).
    """
    sc, o, problems = rec.scenario, rec.scenario.options, []
    size = {m: len(msg.data) for s in rec.service.subs.values() for m, msg in s.messages.items()}
    largest = max(size.values(), default=0)
    tasks = max((p or max(2, len(sc.subs))) for p in sc.partitions) if sc.mode == "executors" else 1
    slack = tasks * largest if sc.body_min is None else None
    bound = int(o["maxOutstandingMessages"])
    late_slice = bool(rec.service.written_off) and any(
        op == "create" and "/slices/" in k and k.endswith(".arrow") for op, k in rec.storage.late_writes
    )
    share = math.ceil(bound / min(p or max(2, len(sc.subs)) for p in sc.partitions)) if late_slice else 0
    over = {app: n for app, n in rec.service.max_held.items() if n > bound + share}
    if over:
        problems.append(f"held more than maxOutstandingMessages={bound} at once: {over}")
    if "maxOutstandingBytes" in o and slack is not None:
        bound = int(o["maxOutstandingBytes"])
        over = {app: n for app, n in rec.service.max_held_bytes.items() if n > bound + slack}
        if over:
            problems.append(f"held more than maxOutstandingBytes={bound} (+{slack} B) at once: {over}")
    per_batch = {n: set(ids) | rec.sink.excused.get(n, set()) for n, ids in rec.sink.batches.items()}
    if "maxMessagesPerTrigger" in o:
        limit = int(o["maxMessagesPerTrigger"])
        over = {n: len(ids) for n, ids in per_batch.items() if len(ids) > limit}
        if over:
            problems.append(f"batches of more than maxMessagesPerTrigger={limit} messages: {over}")
    if "maxBytesPerTrigger" in o and slack is not None:
        limit = int(o["maxBytesPerTrigger"])
        nbytes = {n: sum(size[m] for m in ids) for n, ids in per_batch.items() if len(ids) > 1}
        over = {n: b for n, b in nbytes.items() if b > limit + slack}
        if over:
            problems.append(f"batches of more than maxBytesPerTrigger={limit} (+{slack} B): {over}")
    return problems


def _replays(rec: Record) -> list[str]:
    """A batch yields the same rows each time it runs (a replay after a restart, a second action).

    Two runs that read every partition whole yield the same; a run that read part of the batch
    yields part of what a whole run yields.
    """
    whole: dict[int, frozenset[str]] = {}
    for n, ids, complete in rec.sink.runs:
        if complete:
            whole.setdefault(n, ids)
    differ = []
    for n, ids, complete in rec.sink.runs:
        full = whole.get(n)
        if full is not None and (ids != full if complete else not ids <= full):
            differ.append((n, len(full), len(ids), sorted(ids ^ full)[:3]))
    if not differ:
        return []
    n, a, b, e = differ[0]
    return [
        f"{len(differ)} run(s) of a batch yielded other rows than a whole run of it, e.g. batch {n}: {a} rows, then {b} (e.g. {e})"
    ]


def _leases(rec: Record) -> list[str]:
    """No lease lapses while a live process holds its message, in a world that lets the source renew.

    A lapse shows as a delivery again (the dedupe absorbs it, so nothing else would show it): a
    lease renewed late, or not at all. Outages, lost renewals, paused processes, stalled storage
    calls and ``maxLeaseDurationSeconds`` excuse it.
    """
    sc, t = rec.scenario, rec.scenario.pubsub
    excused = (
        t.outages
        or t.ack_dropped
        or t.ack_lost
        or t.ack_late
        or t.transient_eod
        or sc.pauses[0]
        or sc.storage_terms.stall
        or sc.storage_terms.brownouts
        or "maxLeaseDurationSeconds" in sc.options
    )
    lapsed = rec.service.lapsed_while_held
    if excused or not lapsed:
        return []
    at, mid, holder = lapsed[0]
    return [
        f"{len(lapsed)} lease(s) lapsed while their holder held the message, e.g. {mid} held by {holder} (delivered again at {at:.2f}s)"
    ]


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

    problems.extend(_replays(rec))
    problems.extend(_bounds(rec))
    problems.extend(_leases(rec))

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
