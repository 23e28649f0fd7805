"""Spark as its contract lets it drive a Python streaming source, for the simulation.

One :class:`SparkApp` is one run of the streaming query: a driver JVM (the thread that calls the
reader, in its process), the driver-side Python runner (its own process: the reader's driver-side
state and threads live there), and one process per task attempt (a Python worker on an executor).
The checkpoint (:class:`Logs`) and the sink outlive it; the next app restarts from them.

Spark's call order is each version's (``tests/spark_calls.py``, from each version's pyspark
``python_streaming_source_runner`` and ``PythonMicroBatchStream``): 4.2+
``latestOffset(start, limit)``; 4.0/4.1 ``latestOffset()`` and, after a restart,
``partitions(X, X)`` for the newest offset-log entry first. The freedoms it plays, drawn per run
(:class:`SparkTerms`):

* a batch's tasks run at once, in any order; an attempt may fail mid-task (an executor lost) and
  run again, or run twice (speculation: the first to finish counts, the other is killed);
* a sink may read only part of a batch (``limit``, ``show``): some tasks never run, one may be
  stopped after its first rows; a sink may fail a batch (the query dies);
* ``commit(end)`` late (after the next batch's tasks), twice, or never;
* Trigger.AvailableNow: 4.2+ runs batches until the source says the run is over; 4.0/4.1 run one
  batch and end before telling the source it committed.
"""

from __future__ import annotations

import json
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .scheduler import Killed, Process, Scheduler


class RunnerDied(RuntimeError):
    """The driver-side Python runner died under a call (the JVM sees a broken connection)."""


class QueryFailed(RuntimeError):
    """The query stopped with an error (what Spark would report as the query's exception)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


class SinkFails(RuntimeError):
    pass


@dataclass
class Logs:
    """Spark's checkpoint: the offset log and the commit log (batch id -> virtual time written)."""

    offsets: dict[int, dict] = field(default_factory=dict)
    commits: dict[int, float] = field(default_factory=dict)


@dataclass
class Sink:
    """An idempotent sink: a replay of batch N replaces batch N's rows, or leaves the first write.

    ``batches[n]``: the message ids it received, in partition order then row order.
    ``excused[n]``: ids of batch ``n`` that the sink chose not to read (a partial read).
    """

    batches: dict[int, list[str]] = field(default_factory=dict)
    excused: dict[int, set[str]] = field(default_factory=dict)
    writes: int = 0
    # Each time a batch's tasks ran: (batch, what the partitions read whole yielded, whether every
    # partition was). A batch run again, in a replay after a restart or by a foreachBatch's second
    # action, must yield the same (the partitions may be split otherwise: numPartitions changed).
    runs: list[tuple[int, frozenset[str], bool]] = field(default_factory=list)

    def write(self, n: int, rows: list[str], excused: set[str], *, first_wins: bool) -> None:
        """Batch ``n``'s rows: replace an earlier write, or (``first_wins``) keep it."""
        self.writes += 1
        if first_wins and n in self.batches:
            return
        self.batches[n] = rows
        if excused:
            self.excused[n] = excused
        else:
            self.excused.pop(n, None)

    def ids(self) -> list[str]:
        return [i for n in sorted(self.batches) for i in self.batches[n]]


@dataclass
class SparkTerms:
    version: str = "4.3"
    speculation: float = 0.0
    task_loss: float = 0.0  # chance an attempt's executor is lost mid-task
    partial_read: float = 0.0
    sink_fails: float = 0.0
    skip_commit: float = 0.0
    repeat_commit: float = 0.0
    late_commit: float = 0.0
    poll: float = 0.2  # seconds between latestOffset calls that brought nothing
    batch_overhead: float = 0.3  # Spark's own time per micro-batch (planning, task launch, logs)
    # Drawn apart from the above (:meth:`draw_more`), so that adding them left every earlier
    # world's draws as they were.
    twice: float = 0.0  # chance a batch's tasks run twice, both successfully (foreachBatch, two actions)
    die_after_sink: float = 0.0  # chance the driver dies after the sink wrote a batch, before the commit log
    zombie_task: float = 0.0  # chance an attempt whose executor Spark lost keeps running (a partition)
    # Chance latestOffset(start, limit) is called again within a trigger (4.2+; on 4.0/4.1 Spark
    # calls latestOffset() once a trigger, and the no-argument call is what proves a commit there).
    latest_again: float = 0.0
    zombie_runner: float = 0.0  # chance the driver-side runner outlives its stopped query for seconds
    first_write: bool = False  # the sink keeps a batch's first write (Delta's txnVersion, the file sink)
    # Chance a partial read (limit(), show()) cancels the last task it ran while that task still
    # runs, once it has what it needs: the attempt is killed at once, mid-pull, and never retried,
    # and the batch commits without its partition. Set by a focus only (tests/sim/world.py).
    cancel: float = 0.0

    @classmethod
    def draw(cls, rng: Any, *, rough: float, version: str | None = None) -> SparkTerms:
        def maybe(p: float) -> float:
            return p * rough if rng.random() < 0.5 else 0.0

        return cls(
            version=version or rng.choice(["4.0", "4.1", "4.2", "4.3"]),
            speculation=maybe(0.15),
            task_loss=maybe(0.08),
            partial_read=maybe(0.1),
            sink_fails=maybe(0.03),
            skip_commit=maybe(0.5),
            repeat_commit=maybe(0.2),
            late_commit=maybe(0.3),
            poll=rng.choice([0.1, 0.5, 2.0]),
            batch_overhead=rng.choice([0.05, 0.3, 0.6]),
        )

    @staticmethod
    def draw_more(rng: Any, *, rough: float) -> dict[str, Any]:
        """The freedoms added later, drawn from a generator of their own (see the fields)."""

        def maybe(p: float) -> float:
            return p * rough if rng.random() < 0.3 else 0.0

        return {
            "twice": maybe(0.3),
            "die_after_sink": maybe(0.1),
            "zombie_task": maybe(1.0),
            "latest_again": maybe(0.3),
            "zombie_runner": maybe(0.5),
            "first_write": rng.random() < 0.5,
        }

    @property
    def old_api(self) -> bool:
        return self.version in ("4.0", "4.1")


MAX_TASK_ATTEMPTS = 4  # spark.task.maxFailures


class _TaskFailed(RuntimeError):
    pass


class SparkApp:
    """One run of the query: calls the reader as Spark's driver does and runs its tasks."""

    def __init__(
        self,
        sched: Scheduler,
        rng: Any,
        terms: SparkTerms,
        logs: Logs,
        sink: Sink,
        make_reader: Callable[[], Any],
        *,
        name: str,
        wire_ids: Callable[[Any], list[str]],
        more: Any = None,
    ) -> None:
        self.sched = sched
        self.rng = rng
        self.terms = terms
        self.logs = logs
        self.sink = sink
        self.name = name
        self.jvm = Process(f"{name}-jvm")
        self.runner = Process(f"{name}-runner")
        self.workers: list[Process] = []
        self._make_reader = make_reader
        self._wire_ids = wire_ids
        # The freedoms added later draw from a generator of their own (see SparkTerms.draw_more).
        self.more = random.Random(f"{name}-more") if more is None else more
        self.cancels = random.Random(f"{name}-cancels")  # its own: the other draws stay as they were
        self.reader: Any = None
        self._start: dict | None = None
        self._pending: int | None = None
        self._deferred_commit: dict | None = None
        self.batches_run = 0
        self.task_attempts = 0
        # after_latest(began): each time latestOffset returned, with when it was called. The source
        # decided within (what the batch holds, or that nothing is new); the world notes what
        # Pub/Sub had passed over meanwhile.
        self.after_latest: Callable[[float], None] | None = None
        # on_given_up(pid): Spark gave a task attempt up (its executor lost) while its process runs
        # on; the query cannot tell it from a dead one (see SimPubSub.written_off).
        self.on_given_up: Callable[[int], None] | None = None

    # ---------------------------------------------------------------- processes

    def processes(self) -> list[Process]:
        return [self.jvm, self.runner, *self.workers]

    def alive(self) -> bool:
        return self.jvm.alive

    def kill(self) -> None:
        """The driver's host dies: the JVM, the runner and every task attempt, at once."""
        me = self.sched.current().process
        for p in self.processes():
            if p is not me:
                self.sched.kill(p)
        if me in self.processes():
            self.sched.kill(me)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the reader's driver-side method in the runner process (py4j to Python, in effect)."""
        try:
            with self.sched.acting_as(self.runner):
                return fn(*args)
        except Killed:
            if not self.jvm.alive:
                raise
            raise RunnerDied(f"the driver-side Python runner of {self.name} died") from None

    # ---------------------------------------------------------------- the query

    def start(self) -> None:
        """What Spark does when the query starts on the logs (fresh or restart)."""
        self.reader = self._call(self._make_reader)
        latest = max(self.logs.offsets) if self.logs.offsets else None
        if latest is None:
            if not self.terms.old_api:
                self._call(self.reader.initialOffset)
            self._start = None
            return
        end = self.logs.offsets[latest]
        if self.terms.old_api:
            self._call(self.reader.partitions, end, end)  # setLatestSeenOffset
        if latest in self.logs.commits:
            self._start = end
        else:
            self._start = self.logs.offsets.get(latest - 1) if latest > 0 else None
            self._pending = latest

    def prepare_available_now(self) -> None:
        if not self.terms.old_api:
            self._call(self.reader.prepareForTriggerAvailableNow)

    def _latest(self, *args: Any) -> Any:
        began = self.sched.now
        end = self._call(self.reader.latestOffset, *args)
        if self.after_latest is not None:
            self.after_latest(began)
        return end

    def trigger(self) -> bool:
        """One trigger: run the pending batch, or plan the next and run it. False when nothing is new."""
        if self._pending is None:
            if self.terms.old_api:
                end = self._latest()
                if self._start is None:
                    self._start = self._call(self.reader.initialOffset)
            else:
                if self._start is None:
                    self._start = self._call(self.reader.initialOffset)
                end = self._latest(self._start, self._call(self.reader.getDefaultReadLimit))
                if self.terms.latest_again and self.more.random() < self.terms.latest_again:
                    end = self._latest(self._start, self._call(self.reader.getDefaultReadLimit))
            if _same(end, self._start):
                self._flush_deferred_commit()
                return False
            n = (max(self.logs.offsets) + 1) if self.logs.offsets else 0
            self.logs.offsets[n] = end
            if n > 0 and (n - 1) in self.logs.offsets:
                self._commit(self.logs.offsets[n - 1])
            self._pending = n
        n = self._pending
        end = self.logs.offsets[n]
        start = self.logs.offsets[n - 1] if n > 0 else self._start
        if start is None:
            start = self._call(self.reader.initialOffset)
        parts = self._call(self.reader.partitions, start, end)
        self.sched.sleep(self.terms.batch_overhead)
        rows, unread = self._run_tasks(n, parts)
        if self.terms.twice and self.more.random() < self.terms.twice:
            self._run_tasks(n, parts)  # a foreachBatch with two actions: the tasks run again, as new attempts
        # What the sink chose not to read is what those partitions yield once the batch is done (a
        # second action may run a task the first did not).
        excused = self._excused(parts, rows, unread)
        self._flush_deferred_commit()
        if self.terms.sink_fails and self.rng.random() < self.terms.sink_fails:
            raise SinkFails(f"the sink failed batch {n} (simulated)")
        self.sink.write(n, rows, excused, first_wins=self.terms.first_write)
        if self.terms.die_after_sink and self.more.random() < self.terms.die_after_sink:
            self.kill()  # the driver's host dies between the sink's write and the commit log
        self.sched.check()
        self.logs.commits[n] = self.sched.now
        self.batches_run += 1
        self._pending = None
        self._start = end
        return True

    def _commit(self, end: dict) -> None:
        t = self.terms
        r = self.rng.random()
        if r < t.skip_commit:
            return
        if r < t.skip_commit + t.late_commit:
            self._deferred_commit = end
            return
        self._call(self.reader.commit, end)
        if self.rng.random() < t.repeat_commit:
            self._call(self.reader.commit, end)

    def _flush_deferred_commit(self) -> None:
        if self._deferred_commit is not None:
            end, self._deferred_commit = self._deferred_commit, None
            self._call(self.reader.commit, end)

    # ---------------------------------------------------------------- tasks

    def _run_tasks(self, n: int, parts: list[Any]) -> tuple[list[str], set[int]]:
        """Run a batch's tasks as Spark may; return the rows the sink reads and the partitions it did
        not read whole (some tasks never run, one may stop early: a partial read).

        What the partitions read whole yielded is noted in the sink's ``runs``.
        """
        partial = bool(parts) and self.terms.partial_read and self.rng.random() < self.terms.partial_read
        order = list(range(len(parts)))
        self.rng.shuffle(order)
        run = order
        stop_after: dict[int, int] = {}
        if partial:
            # limit()/show(): some tasks never run, the last one that does may stop after its first batch.
            run = order[: self.rng.randint(0, len(order))]
            if run and self.rng.random() < 0.5:
                stop_after[run[-1]] = 1
        cancel_after: dict[int, float] = {}
        if partial and run and self.terms.cancel and self.cancels.random() < self.terms.cancel:
            cancel_after[run[-1]] = self.cancels.uniform(0.05, 1.5)
        outputs: dict[int, list[str]] = {}
        yielded: dict[int, list[str]] = {}
        errors: list[BaseException] = []
        threads = []
        for i in run:
            th = _spawn(
                self.sched,
                self.jvm,
                f"{self.name}-task-{n}.{i}",
                self._task,
                n,
                i,
                parts[i],
                stop_after.get(i),
                outputs,
                yielded,
                errors,
                cancel_after.get(i),
            )
            threads.append(th)
        for th in threads:
            th.join()
        self.sched.check()
        if errors:
            raise errors[0]
        whole = {i: frozenset(ids) for i, ids in outputs.items() if i not in stop_after}
        self.sink.runs.append((n, frozenset().union(*whole.values()), len(whole) == len(parts)))
        rows = [r for i in range(len(parts)) for r in outputs.get(i, [])]
        return rows, {i for i in range(len(parts)) if i not in whole}

    def _excused(self, parts: list[Any], rows: list[str], unread: set[int]) -> set[str]:
        """What the partitions the sink did not read whole yield (as far as it is known now), less what it read."""
        out: set[str] = set()
        for i in unread:
            out.update(self._wire_ids(parts[i]))
        return out - set(rows)

    def _task(
        self,
        n: int,
        i: int,
        part: Any,
        stop_after: int | None,
        outputs: dict,
        yielded: dict,
        errors: list,
        cancel_after: float | None = None,
    ) -> None:
        """One task: attempts until one succeeds (retries, speculative copies), as Spark's scheduler runs them.

        ``cancel_after``: the job cancels the task after that many seconds if it still runs (its
        attempts are killed, none follows).
        """
        cancelled: list[bool] = []  # [True] once the job cancelled the task
        workers: list[Process] = []
        if cancel_after is not None:

            def cancel() -> None:
                self.sched.sleep(cancel_after)
                if i in outputs:
                    return
                cancelled.append(True)
                for w in workers:
                    if w.alive:
                        self.sched.kill(w)

            _spawn(self.sched, self.jvm, f"{self.name}-cancel-{n}.{i}", cancel)
        for attempt in range(MAX_TASK_ATTEMPTS):
            if cancelled:
                return
            result: dict[str, Any] = {}
            attempts = [self._attempt(n, i, attempt, part, stop_after, result)]
            if self.terms.speculation and self.rng.random() < self.terms.speculation:
                attempts.append(self._attempt(n, i, attempt, part, stop_after, result, speculative=True))
            workers.extend(w for _, w in attempts)
            while not result and any(th.is_alive() for th, _ in attempts):
                for th, _ in attempts:
                    th.join(0.05)
                    if result:
                        break
            for th, worker in attempts:
                if th.is_alive() and worker.alive:
                    self.sched.kill(worker)  # the copy that lost the race is killed
            if "rows" in result:
                outputs[i] = result["rows"]
                yielded[i] = result["yielded"]
                return
            if cancelled:
                return
        errors.append(result.get("error") or _TaskFailed(f"task {n}.{i} failed {MAX_TASK_ATTEMPTS} times"))

    def _attempt(
        self,
        n: int,
        i: int,
        attempt: int,
        part: Any,
        stop_after: int | None,
        result: dict,
        *,
        speculative: bool = False,
    ) -> tuple[Any, Process]:
        worker = Process(
            f"{self.name}-worker-{n}.{i}.{attempt}{'s' if speculative else ''}",
            host=f"executor-{self.rng.randrange(2)}",
            skew=self.rng.uniform(-0.5, 0.5),
        )
        self.workers.append(worker)
        self.task_attempts += 1
        lose_at = None
        if self.terms.task_loss and self.rng.random() < self.terms.task_loss:
            lose_at = self.rng.uniform(0.0, 3.0)
        # Spark lost the attempt's executor but the process goes on (a network partition): its
        # outcome is ignored, a retry runs, and it is killed some time later, or never.
        zombie = lose_at is not None and self.terms.zombie_task and self.more.random() < self.terms.zombie_task
        lost = {"lost": False}

        def body() -> None:
            reader = pickle.loads(pickle.dumps(self.reader))
            got: list[str] = []
            gen = reader.read(part)
            batches = 0
            try:
                for batch in gen:
                    got.extend(_ids(batch))
                    batches += 1
                    if stop_after is not None and batches >= stop_after:
                        break
            except Killed:
                raise
            except Exception as exc:  # noqa: BLE001 - the attempt failed; Spark retries it
                result.setdefault("error", exc)
                return
            finally:
                gen.close()
            if "rows" not in result and not lost["lost"]:
                result["rows"] = list(got)
                result["yielded"] = list(got)

        th = _spawn(self.sched, worker, worker.name, body)
        if lose_at is not None:
            zombie_for = self.more.choice([2.0, 20.0, None]) if zombie else 0.0
            _spawn(self.sched, self.jvm, f"{worker.name}-loss", self._lose, worker, lose_at, lost, zombie_for)
        return _Attempt(th, lost), worker

    def _lose(self, worker: Process, after: float, lost: dict, zombie_for: float | None) -> None:
        self.sched.sleep(after)
        if not worker.alive:
            return
        lost["lost"] = True
        if zombie_for == 0.0:
            self.sched.kill(worker)
            return
        if self.on_given_up is not None:
            self.on_given_up(worker.pid)
        if zombie_for is not None:
            self.sched.sleep(zombie_for)
            if worker.alive:
                self.sched.kill(worker)

    def stop(self, graceful: bool, *, keep_runner: bool = False) -> None:
        """Spark stops the query: the runner is SIGTERMed (hands back within 5 s) or just gone.

        ``keep_runner``: the runner missed the signal and lives on, its threads running, until
        the caller kills it.
        """
        if graceful and self.reader is not None and self.runner.alive and self.jvm.alive:
            done = _spawn(self.sched, self.runner, f"{self.name}-sigterm", self.reader.stop)
            done.join(6.0)
        for p in self.processes():
            if p.alive and not (keep_runner and p is self.runner):
                self.sched.kill(p) if p is not self.sched.current().process else None
        if not keep_runner:
            self.runner.alive = False
        for w in self.workers:
            w.alive = False


class _Attempt:
    """A task attempt's thread, as Spark sees it: an attempt whose executor it lost is over."""

    def __init__(self, thread: Any, lost: dict) -> None:
        self.thread = thread
        self._lost = lost

    def is_alive(self) -> bool:
        return self.thread.is_alive() and not self._lost["lost"]

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)


def _spawn(sched: Scheduler, process: Process, name: str, fn: Callable[..., Any], *args: Any) -> Any:
    from .scheduler import SimThread

    th = SimThread(sched, lambda: fn(*args), name=name, process=process)
    th.start()
    return th


def _ids(batch: pa.RecordBatch) -> list[str]:
    return batch.column(batch.schema.get_field_index("message_id")).to_pylist()


def _same(a: dict, b: dict | None) -> bool:
    return b is not None and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
