"""Deterministic threads on a virtual clock: the source's own threads, run as greenlets, in a seeded order.

The source is threaded code (pullers, the leaser, the acker, lease renewers, Spark's thread). The
simulation runs that code unchanged with every ``threading``, ``time``, ``queue`` and ``random``
name it uses replaced by the ones here (:mod:`.world` installs them): each thread is a greenlet,
only one runs at a time, and it runs until it blocks (a lock held elsewhere, a wait, a sleep, an
RPC or storage call that takes time). The scheduler then picks the next runnable thread with its
seeded random generator, and when none is runnable, jumps the clock to the next timer. A run is a
function of its seed (given ``PYTHONHASHSEED``), and a minute of the source's time costs no waiting.

Processes: every thread belongs to a :class:`Process` (the driver-side reader, an executor). A
process killed (SIGKILL, a lost executor) runs nothing again: its threads are dropped where they
blocked, and any call of theirs that reaches the world raises :class:`Killed`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import queue as _real_queue
import random as _real_random
import threading as _real_threading
import time as _real_time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import greenlet

_getcurrent = greenlet.getcurrent

WALL_EPOCH = 1_800_000_000.0  # the simulated wall clock at virtual time 0 (2027-01-15)


class Killed(BaseException):
    """The calling thread's process is dead (or the simulation is over): nothing it does takes effect."""


class Deadlock(AssertionError):
    """Every thread is blocked and no timer is set."""


class Process:
    """A simulated OS process: a name, a pid, a host, a wall-clock skew, alive or not."""

    _pids = itertools.count(40_000)

    def __init__(self, name: str, host: str = "driver-host", skew: float = 0.0) -> None:
        self.name = name
        self.pid = next(Process._pids)
        self.host = host
        self.skew = skew
        self.alive = True
        self.threads: list[SimThread] = []
        # Virtual time until which the process is paused (a long GC, CPU starvation, a VM
        # migration): none of its threads runs, while the clock and every other process go on.
        self.paused_until = 0.0

    def __repr__(self) -> str:
        return f"Process({self.name}, pid={self.pid}, {'alive' if self.alive else 'dead'})"


class _Glet(greenlet.greenlet):
    thread: SimThread


class Scheduler:
    """Runs simulated threads one at a time; owns the virtual clock.

    ``preempt``: the chance that a thread is switched out when it takes a free lock (more
    interleavings between lock-protected regions, at a small cost). ``stall``: on a loaded machine
    a thread switched out gets the CPU back only after a while: this long on average (seconds,
    exponential), while the other threads run and the clock moves on (answers arrive, leases run
    down) with whatever locks it holds still held. 0: it is only passed over.

    ``slice`` (tests on a virtual clock, ``tests/virtual_time.py``; 0 in the simulated worlds, whose
    runs are functions of their seeds): the clock also moves with the real time the threads run,
    and a thread that runs longer than this many seconds without waiting is switched out at its
    next lock or clock reading. A loop that polls without sleeping then runs as it would for real;
    sleeps and waits still cost nothing.
    """

    def __init__(self, seed: int, *, preempt: float = 0.05, stall: float = 0.0, slice: float = 0.0) -> None:
        self.rng = _real_random.Random(f"scheduler-{seed}")
        self.now = 0.0
        self.preempt = preempt
        self.stall = stall
        self.slice = slice
        self._switched_in = 0.0
        self._until_preempt = 1 + int(self.rng.expovariate(preempt)) if preempt else 0
        self.closed = False
        self.switches = 0
        self.errors: list[tuple[str, BaseException]] = []  # uncaught exceptions of threads
        self._ready: list[SimThread] = []
        self._timers: list[tuple[float, int, SimThread, int]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self._hub: greenlet.greenlet | None = None
        self._graveyard: list[SimThread] = []
        self.threads: list[SimThread] = []  # every thread started, in order
        self._acting: set[SimThread] = set()  # threads calling into another process (acting_as)
        # (virtual time, fn): called from the scheduler itself once the clock reaches the time,
        # so that looking changes nothing (no thread, no random draw).
        self.probes: list[tuple[float, Callable[[], None]]] = []
        self.main_thread = SimThread(self, None, name="MainThread(real)")  # never runs: lifecycle's check

    # ---------------------------------------------------------------- threads

    def current(self) -> SimThread:
        t = getattr(_getcurrent(), "thread", None)
        if t is None:
            raise RuntimeError("not inside a simulated thread")
        return t

    def process(self) -> Process:
        return self.current().process

    def _start(self, t: SimThread) -> None:
        if self.closed or (t.process is not None and not t.process.alive):
            t._finished = True
            return
        g = _Glet(run=t._bootstrap, parent=self._hub)
        g.thread = t
        t._glet = g
        self._ready.append(t)

    def run(
        self,
        main: Callable[[], Any],
        process: Process,
        *,
        max_time: float = 1e9,
        max_switches: int = 10**8,
        stuck_raises_in_main: bool = False,
    ) -> Any:
        """Run ``main`` as the first thread of ``process`` until it returns; return its result.

        A run that is stuck (a deadlock, ``max_time`` passed) raises here, or, with
        ``stuck_raises_in_main``, in ``main``'s thread where it waits, so that ``main`` reports it and
        goes on (a test's teardown after its failure: ``tests/virtual_time.py``).
        """
        self._hub = greenlet.getcurrent()
        box: dict[str, Any] = {}

        def body() -> None:
            try:
                box["result"] = main()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box["error"] = exc

        root = SimThread(self, body, name="spark", process=process)
        root.start()
        limit = max_time
        try:
            while not root._finished:
                if self._ready:
                    t = self._ready.pop(self.rng.randrange(len(self._ready)))
                    if t._finished:
                        continue
                    if t.process is not None and t.process.paused_until > self.now:
                        # Runnable, but its process is paused: it runs once the pause is over.
                        # Whether it was woken or timed out is kept for when it resumes.
                        t._resume_woken = t._woken
                        t._gen += 1
                        t.waiting = True
                        t.blocked_on = "its process is paused"
                        heapq.heappush(self._timers, (t.process.paused_until, next(self._seq), t, t._gen))
                        continue
                    self.switches += 1
                    if self.switches > max_switches:
                        raise AssertionError(f"simulation ran {max_switches} switches without ending (livelock?)")
                    if self.slice:
                        self._switched_in = _real_time.perf_counter()
                        t._glet.switch()
                        self.now += _real_time.perf_counter() - self._switched_in
                        self._fire_timers()
                    else:
                        t._glet.switch()
                    continue
                stuck: BaseException | None = None
                if not self._timers:
                    blocked = [f"{t.name}: {t.blocked_on}" for p in self._processes() for t in p.threads if t.waiting]
                    stuck = Deadlock("every thread is blocked and no timer is set:\n  " + "\n  ".join(blocked))
                elif self._timers[0][0] > limit:
                    stuck = AssertionError(f"simulation passed {max_time:.0f} s of virtual time without ending")
                if stuck is not None:
                    if not stuck_raises_in_main or not root.waiting:
                        raise stuck
                    root.waiting = False
                    root._gen += 1
                    limit = self.now + max_time  # as long again for what main does next
                    self.switches += 1
                    root._glet.throw(stuck)
                    continue
                at = self._timers[0][0]
                while self.probes and self.probes[0][0] <= at:
                    self.probes.pop(0)[1]()  # a look at the world from outside it (replays)
                self.now = max(self.now, at)
                self._fire_timers()
        finally:
            self.close()
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def _fire_timers(self) -> None:
        while self._timers and self._timers[0][0] <= self.now:
            _, _, t, gen = heapq.heappop(self._timers)
            if t.waiting and t._gen == gen:
                t.waiting = False
                t._woken = t._resume_woken
                t._resume_woken = False
                self._ready.append(t)

    def tick(self) -> None:
        """With ``slice``: switch the calling thread out if it has run its slice (see the class)."""
        inside = getattr(_getcurrent(), "thread", None) is not None
        if self.slice and inside and _real_time.perf_counter() - self._switched_in > self.slice:
            self.yield_()

    def _processes(self) -> list[Process]:
        seen: dict[int, Process] = {}
        for t in self._all:
            if t.process is not None:
                seen.setdefault(id(t.process), t.process)
        return list(seen.values())

    @property
    def _all(self) -> list[SimThread]:
        return self.threads

    def _bury(self, t: SimThread) -> None:
        # Keep the greenlet referenced: collected now, it would run its finally blocks in the
        # middle of another thread. They run, uselessly, at close().
        self._graveyard.append(t)

    def close(self) -> None:
        """End the simulation: every thread still suspended is ended (its calls raise :class:`Killed`)."""
        if self.closed:
            return
        self.closed = True
        for t in list(self._all):
            g = t._glet
            if g is not None and not g.dead and g is not greenlet.getcurrent():
                try:
                    g.throw(Killed())
                except BaseException:  # noqa: BLE001 - whatever a dead thread's finally blocks raise
                    pass
        self.threads = []
        self._graveyard.clear()

    def kill(self, process: Process) -> None:
        """SIGKILL ``process``: its threads never run again; the caller, if one of them, raises :class:`Killed`.

        A thread of another process calling into it at that moment (the JVM in a call to the Python
        runner: :meth:`acting_as`) is woken: its call raises :class:`Killed`.
        """
        process.alive = False
        me = getattr(greenlet.getcurrent(), "thread", None)
        for t in process.threads:
            if t is me or t._finished or t.process is not process:
                continue
            t.waiting = False
            t._finished = True
            for j in t._joiners:
                self.wake(j)
            self._bury(t)
        for t in list(self._acting):
            if t is not me and t.process is process and t.waiting:
                t.waiting = False
                t._woken = True
                self._ready.append(t)
        if me is not None and me.process is process:
            raise Killed(f"{process.name} was killed")

    def pause(self, process: Process, seconds: float) -> None:
        """Pause ``process`` for ``seconds`` of virtual time (see :attr:`Process.paused_until`)."""
        process.paused_until = max(process.paused_until, self.now + seconds)

    @contextlib.contextmanager
    def acting_as(self, process: Process) -> Iterator[SimThread]:
        """Run the calling thread's code as ``process``'s (a call into another process: py4j to Python)."""
        t = self.current()
        own = t.process
        t.process = process
        self._acting.add(t)
        try:
            yield t
        finally:
            self._acting.discard(t)
            t.process = own

    # ---------------------------------------------------------------- blocking

    def check(self) -> None:
        """Raise :class:`Killed` if the calling thread may no longer act."""
        t = getattr(_getcurrent(), "thread", None)
        if self.closed or t is None or (t.process is not None and not t.process.alive):
            raise Killed("the simulation is over" if self.closed else "this process was killed")

    def block(self, timeout: float | None, what: str) -> bool:
        """Suspend the calling thread until :meth:`wake` (True) or ``timeout`` seconds (False)."""
        self.check()
        t = self.current()
        t._gen += 1
        t.waiting = True
        t._woken = False
        t.blocked_on = what
        if timeout is not None:
            heapq.heappush(self._timers, (self.now + max(0.0, timeout), next(self._seq), t, t._gen))
        self._hub.switch()
        self.check()
        return t._woken

    def wake(self, t: SimThread) -> None:
        if t.waiting:
            t.waiting = False
            t._woken = True
            self._ready.append(t)

    def sleep(self, seconds: float) -> None:
        self.block(max(0.0, seconds), "sleep")

    def yield_(self) -> None:
        """Let another runnable thread go first (the caller stays runnable)."""
        self.check()
        t = self.current()
        t._gen += 1
        self._ready.append(t)
        self._hub.switch()
        self.check()

    def maybe_preempt(self) -> None:
        # A countdown drawn geometrically: one random draw per preemption, not per lock.
        self._until_preempt -= 1
        if self.slice:
            self.tick()
        if self._until_preempt <= 0 and self.preempt:
            self._until_preempt = 1 + int(self.rng.expovariate(self.preempt))
            if self._hub is not None:
                if self.stall:
                    self.sleep(self.rng.expovariate(1.0 / self.stall))
                else:
                    self.yield_()


class SimThread:
    """``threading.Thread`` for a simulated thread."""

    def __init__(
        self,
        sched: Scheduler,
        target: Callable[..., Any] | None = None,
        name: str | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        daemon: bool | None = None,
        process: Process | None = None,
    ) -> None:
        self._sched = sched
        self._target = target
        self._args = args
        self._kwargs = kwargs or {}
        self.ident = next(sched._ids)
        self.name = name or f"Thread-{self.ident}"
        self.daemon = bool(daemon)
        if process is None and target is not None:
            process = sched.current().process
        self.process = process
        self.waiting = False
        self.blocked_on = ""
        self._gen = 0
        self._woken = False
        self._resume_woken = False  # a timer that ends a pause of the thread's process: what it had
        self._glet: _Glet | None = None
        self._started = False
        self._finished = False
        self._joiners: list[SimThread] = []
        if target is not None:
            sched.threads.append(self)
            if process is not None:
                process.threads.append(self)

    native_id = property(lambda self: self.ident)

    def __repr__(self) -> str:
        return f"<SimThread {self.name}>"

    def start(self) -> None:
        if self._started:
            raise RuntimeError("threads can only be started once")
        self._started = True
        self._sched._start(self)

    def _bootstrap(self) -> None:
        try:
            if self._target is not None:
                self._target(*self._args, **self._kwargs)
        except Killed:
            pass
        except BaseException as exc:  # noqa: BLE001 - what a real thread would print and die of
            if not self._sched.closed:
                self._sched.errors.append((self.name, exc))
        finally:
            self._finished = True
            for j in self._joiners:
                self._sched.wake(j)

    def is_alive(self) -> bool:
        return self._started and not self._finished

    def join(self, timeout: float | None = None) -> None:
        if not self._started:
            raise RuntimeError("cannot join thread before it is started")
        end = None if timeout is None else self._sched.now + timeout
        while not self._finished:
            me = self._sched.current()
            self._joiners.append(me)
            left = None if end is None else end - self._sched.now
            if left is not None and left <= 0:
                return
            self._sched.block(left, f"join {self.name}")


# -------------------------------------------------------------------- locks and conditions


class SimLock:
    """``threading.Lock``."""

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched
        self._owner: SimThread | None = None
        self._waiters: deque[SimThread] = deque()

    def locked(self) -> bool:
        return self._owner is not None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        s = self._sched
        me = s.current()
        if s.preempt or s.slice:
            s.maybe_preempt()
        end = None if timeout is None or timeout < 0 else s.now + timeout
        while self._owner is not None:
            if not blocking:
                return False
            left = None if end is None else end - s.now
            if left is not None and left <= 0:
                return False
            self._waiters.append(me)
            try:
                s.block(left, f"lock held by {self._owner.name}")
            finally:
                if me in self._waiters:
                    self._waiters.remove(me)
        self._owner = me
        return True

    def release(self) -> None:
        self._sched.check()
        if self._owner is None:
            raise RuntimeError("release unlocked lock")
        self._owner = None
        if self._waiters:
            self._sched.wake(self._waiters.popleft())

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # Condition's protocol
    def _release_save(self) -> Any:
        self.release()

    def _acquire_restore(self, state: Any) -> None:
        self.acquire()

    def _is_owned(self) -> bool:
        return self._owner is self._sched.current()


class SimRLock(SimLock):
    """``threading.RLock``."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__(sched)
        self._count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._owner is not None and self._owner is self._sched.current():
            self._count += 1
            return True
        if not super().acquire(blocking, timeout):
            return False
        self._count = 1
        return True

    __enter__ = acquire

    def release(self) -> None:
        self._sched.check()
        if self._owner is not self._sched.current():
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            super().release()

    def _release_save(self) -> Any:
        count, self._count = self._count, 1
        self.release()
        return count

    def _acquire_restore(self, state: Any) -> None:
        self.acquire()
        self._count = state


class SimCondition:
    """``threading.Condition``."""

    def __init__(self, sched: Scheduler, lock: SimLock | None = None) -> None:
        self._sched = sched
        self._lock = lock if lock is not None else SimRLock(sched)
        self._waiters: list[SimThread] = []

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def acquire(self, *a: Any, **k: Any) -> bool:
        return self._lock.acquire(*a, **k)

    def release(self) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        if not self._lock._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        me = self._sched.current()
        self._waiters.append(me)
        state = self._lock._release_save()
        try:
            woken = self._sched.block(timeout, "condition")
        finally:
            if me in self._waiters:
                self._waiters.remove(me)
            if not self._sched.closed and (me.process is None or me.process.alive):
                self._lock._acquire_restore(state)
        return woken

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        end = None if timeout is None else self._sched.now + timeout
        result = predicate()
        while not result:
            left = None if end is None else end - self._sched.now
            if left is not None and left <= 0:
                break
            self.wait(left)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        for t in self._waiters[:n]:
            self._sched.wake(t)
        del self._waiters[:n]

    def notify_all(self) -> None:
        self.notify(len(self._waiters))

    notifyAll = notify_all


class SimEvent:
    """``threading.Event``."""

    def __init__(self, sched: Scheduler) -> None:
        self._cond = SimCondition(sched, SimLock(sched))
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._cond:
            if not self._flag:
                self._cond.wait(timeout)
            return self._flag


class SimSemaphore:
    """``threading.Semaphore`` / ``BoundedSemaphore``."""

    def __init__(self, sched: Scheduler, value: int = 1) -> None:
        self._cond = SimCondition(sched, SimLock(sched))
        self._value = value
        self._sched = sched

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        end = None if timeout is None else self._sched.now + timeout
        with self._cond:
            while self._value <= 0:
                if not blocking:
                    return False
                left = None if end is None else end - self._sched.now
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            self._value -= 1
            return True

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._value += n
            self._cond.notify(n)

    def __exit__(self, *exc: Any) -> None:
        self.release()


class SimQueue:
    """``queue.Queue`` (unbounded)."""

    def __init__(self, sched: Scheduler, maxsize: int = 0) -> None:
        self._cond = SimCondition(sched, SimLock(sched))
        self._items: deque[Any] = deque()
        self._sched = sched

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def put_nowait(self, item: Any) -> None:
        self.put(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        end = None if timeout is None else self._sched.now + timeout
        with self._cond:
            while not self._items:
                if not block:
                    raise _real_queue.Empty
                left = None if end is None else end - self._sched.now
                if left is not None and left <= 0:
                    raise _real_queue.Empty
                self._cond.wait(left)
            return self._items.popleft()

    def get_nowait(self) -> Any:
        return self.get(False)

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)


# -------------------------------------------------------------------- the modules the source sees


class _Namespace:
    """A module stand-in: the given names, and the real module's for everything else."""

    def __init__(self, real: Any, **names: Any) -> None:
        self.__dict__.update(names)
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def namespaces(sched: Scheduler, seed: int) -> dict[str, Any]:
    """The stand-ins for ``threading``, ``time``, ``queue`` and ``random`` on ``sched``."""
    code_rng = _real_random.Random(f"code-{seed}")

    def wall() -> float:
        t = getattr(greenlet.getcurrent(), "thread", None)
        skew = t.process.skew if t is not None and t.process is not None else 0.0
        return WALL_EPOCH + sched.now + skew

    def now() -> float:
        sched.tick()  # a thread polling the clock in a loop lets the others run (``slice``)
        return sched.now

    if not sched.slice:
        now = lambda: sched.now  # noqa: E731 - the simulated worlds: reading the clock changes nothing

    class Thread(SimThread):  # a class, as ``threading.Thread`` is (``isinstance`` works)
        def __init__(self, target=None, name=None, args=(), kwargs=None, *, daemon=None) -> None:
            super().__init__(sched, target, name, args, kwargs, daemon=daemon)

    threading_ns = _Namespace(
        _real_threading,
        Thread=Thread,
        Lock=lambda: SimLock(sched),
        RLock=lambda: SimRLock(sched),
        Condition=lambda lock=None: SimCondition(sched, lock),
        Event=lambda: SimEvent(sched),
        Semaphore=lambda value=1: SimSemaphore(sched, value),
        BoundedSemaphore=lambda value=1: SimSemaphore(sched, value),
        current_thread=lambda: getattr(greenlet.getcurrent(), "thread", None) or sched.main_thread,
        main_thread=lambda: sched.main_thread,
        get_ident=lambda: sched.current().ident,
    )
    time_ns = _Namespace(
        _real_time,
        monotonic=now,
        perf_counter=now,
        thread_time=now,  # an answer costs no CPU in a world, as it costs no time
        time=wall,
        time_ns=lambda: int(wall() * 1e9),
        monotonic_ns=lambda: int(sched.now * 1e9),
        sleep=sched.sleep,
    )
    queue_ns = _Namespace(_real_queue, Queue=lambda maxsize=0: SimQueue(sched, maxsize))
    random_ns = _Namespace(
        _real_random,
        random=code_rng.random,
        uniform=code_rng.uniform,
        randint=code_rng.randint,
        randrange=code_rng.randrange,
        choice=code_rng.choice,
        shuffle=code_rng.shuffle,
        sample=code_rng.sample,
    )
    return {"threading": threading_ns, "time": time_ns, "queue": queue_ns, "random": random_ns}


REAL = {"threading": _real_threading, "time": _real_time, "queue": _real_queue, "random": _real_random}
