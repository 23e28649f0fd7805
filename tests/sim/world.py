"""One simulated world: the source's real code against simulated Pub/Sub, storage and Spark, from one seed.

:func:`simulate` draws a scenario from ``(seed, mode, storage)`` (:class:`Scenario`: the
subscriptions, what is published when, the options, the service's, the storage's and Spark's
freedoms, when the driver dies), runs it on the deterministic scheduler and returns the
:class:`Record` that :mod:`.checker` judges. The source runs unchanged: :func:`installed` puts the
simulated ``threading``/``time``/``queue``/``random`` into every ``crdb_pubsub.source`` module (and
into the defaults of functions that took the real clocks), the simulated client behind
``transport.subscriber_client`` and the simulated storage behind ``open_storage``; everything is put
back afterwards.

Replay one seed: ``PYTHONHASHSEED=0 PYTHONPATH=tests python -m sim --mode executors --storage gs --seed 17``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import logging
import pkgutil
import random
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from . import scheduler as S
from .pubsub import SimPubSub, Terms
from .spark import Logs, QueryFailed, RunnerDied, Sink, SinkFails, SparkApp, SparkTerms
from .storage import SimStorage, StorageTerms

PROJECT = "projects/sim-project"


@dataclass
class Scenario:
    seed: int
    mode: str
    storage: str
    rough: float
    subs: list[str]
    ordered: bool
    exactly_once: bool
    sub_deadline: int
    keys: int
    body_size: int  # bytes; each body between ``body_min`` and this
    backlog: int
    live: int
    live_seconds: float
    trigger: str  # "continuous" | "available_now"
    options: dict[str, str]
    partitions: list[int | None]  # numPartitions of each successive app (cycled)
    kills: list[int | None]  # per app: kill the whole app after this many of its calls (None: never)
    runner_only: list[bool]  # per app: the kill takes the Python runner only (the JVM survives)
    pubsub: Terms
    storage_terms: StorageTerms
    spark: SparkTerms
    body_min: int | None = None  # None: every body of ``body_size``
    # A loaded machine: a thread switched out waits this long for the CPU on average (seconds; see
    # Scheduler). Drawn apart from the rest, so that adding it left every earlier seed's world as it was.
    stall: float = 0.0
    # Processes paused for seconds (a long GC, CPU starvation, a VM migration): one every
    # ``pauses[0]`` seconds on average, each up to ``pauses[1]`` seconds; (0, 0): none. Drawn apart
    # from the rest, as ``stall`` is.
    pauses: tuple[float, float] = (0.0, 0.0)
    pause_tasks: bool = False  # the pauses fall on task attempts (mid-pull), not on any process
    # (chance a call, longest seconds): a process paused between noting a call's time and sending
    # it (see SimPubSub.call_pauses); drawn apart, with ``pauses``.
    call_pauses: tuple[float, float] = (0.0, 0.0)
    # A continuous app is stopped (gracefully or not) after this many triggers, traffic still live.
    stop_after: int | None = None
    focus: str | None = None  # the rare path the world was drawn to reach (see FOCUSES)

    def describe(self) -> str:
        o = {k: v for k, v in self.options.items() if k not in ("emulatorHost",)}
        return (
            f"seed {self.seed} mode={self.mode} storage={self.storage} Spark {self.spark.version} {self.trigger}; "
            f"{len(self.subs)} sub(s) deadline {self.sub_deadline}s{' ordered' if self.ordered else ''}"
            f"{' exactly-once' if self.exactly_once else ''}; {self.backlog} backlog + {self.live} live over "
            f"{self.live_seconds:.0f}s, {self.body_size} B bodies; options {o}; partitions {self.partitions}; "
            f"kills {self.kills} runner-only {self.runner_only}; pubsub {self.pubsub}; storage {self.storage_terms}; "
            f"spark {self.spark}{f'; threads stall {self.stall * 1000:.0f} ms' if self.stall else ''}"
            f"{f'; a process paused every {self.pauses[0]:.0f} s for up to {self.pauses[1]:.0f} s' if self.pauses[0] else ''}"
            f"{' (task attempts)' if self.pause_tasks else ''}"
            f"{f'; a call paused before it goes ({100 * self.call_pauses[0]:.0f} %)' if self.call_pauses[0] else ''}"
            f"{f'; apps stopped after {self.stop_after} triggers' if self.stop_after else ''}"
            f"{f'; focus {self.focus}' if self.focus else ''}"
        )


def draw(seed: int, mode: str, storage: str, *, rough: float | None = None, rare: bool = True) -> Scenario:
    """The world of ``seed``.

    ``rare``: with the freedoms added to reach the rarest paths (306330f: tasks a partial read
    cancels, task writes that freeze their process, hand-backs lost more often). The worlds pinned
    before them (:mod:`.findings`) are drawn without, so that each stays the world that showed its
    defect.
    """
    rng = random.Random(f"scenario-{seed}-{mode}-{storage}")
    rough = rng.choice([0.0, 0.5, 1.0, 1.0]) if rough is None else rough
    nsubs = 2 if rng.random() < 0.15 else 1
    subs = [f"{PROJECT}/subscriptions/sub-{i}" for i in range(nsubs)]
    ordered = rng.random() < 0.25
    exactly_once = rng.random() < 0.3
    spark = SparkTerms.draw(rng, rough=rough)
    trigger = "available_now" if rng.random() < 0.35 else "continuous"
    sub_deadline = rng.choice([10, 10, 20, 60])  # the service accepts 10-600 s
    options: dict[str, str] = {
        "subscription": ",".join(subs),
        "emulatorHost": "sim:1",
        "stateDir": "gs://sim-bucket/state" if storage == "gs" else "/sim/state",
        "receiver": mode,
        "ackDeadlineSeconds": str(lease := rng.choice([10, 30, 60])),
        "maxOutstandingMessages": str(rng.choice([15, 40, 120, 200_000])),
    }
    if mode == "driver":
        options["batchTransfer"] = "tasks"
    body_size = rng.choice([60, 60, 900, 3000])
    body_min = rng.choice([None, None, 60])
    if rng.random() < 0.3:
        options["maxOutstandingBytes"] = str(65536)
    # Spark 4.0/4.1 run Trigger.AvailableNow as one batch a run: a run reads one batch's worth.
    one_batch_runs = trigger == "available_now" and spark.old_api
    if rng.random() < 0.4 and not one_batch_runs:
        options["maxMessagesPerTrigger"] = str(rng.choice([5, 25, 100]))
    elif rng.random() < 0.3 and not one_batch_runs:
        options["maxBytesPerTrigger"] = str(rng.choice([1024, 4096, 65536]))
    if rng.random() < 0.2:
        options["maxLeaseDurationSeconds"] = str(lease * rng.choice([1, 2, 6]))
    choices = [None, 1, 2, 3, 4]
    partitions = [rng.choice(choices) for _ in range(4)]
    napps = rng.choice([1, 1, 2, 3, 4])
    kills = [
        rng.choice([None, rng.randint(1, 40), rng.randint(1, 400), rng.randint(1, 3000)]) if rough else None
        for _ in range(napps - 1)
    ]
    runner_only = [rng.random() < 0.3 for _ in kills]
    machine = random.Random(f"machine-{seed}-{mode}-{storage}")
    sc = Scenario(
        seed=seed,
        mode=mode,
        storage=storage,
        rough=rough,
        subs=subs,
        ordered=ordered,
        exactly_once=exactly_once,
        sub_deadline=sub_deadline,
        # An ordered subscription delivers a key's next messages only after its held ones were
        # acknowledged (a commit each): its scenarios are smaller and spread over more keys.
        keys=rng.choice([3, 8, 20]),
        body_size=body_size,
        body_min=body_min,
        backlog=rng.choice([0, 5, 40] if ordered or one_batch_runs else [0, 5, 40, 150, 400]),
        live=rng.choice([0, 0, 20, 60] if ordered or one_batch_runs else [0, 0, 20, 100, 300]),
        live_seconds=rng.uniform(1.0, 40.0),
        trigger=trigger,
        options=options,
        partitions=partitions,
        kills=kills,
        runner_only=runner_only,
        pubsub=Terms.draw(rng, rough=rough),
        storage_terms=StorageTerms.draw(rng, storage, rough=rough),
        spark=replace(spark, **SparkTerms.draw_more(random.Random(f"spark-more-{seed}-{mode}-{storage}"), rough=rough)),
        stall=machine.choice([0.0, 0.0, 0.002, 0.02, 0.1]),
        pauses=_pauses(random.Random(f"pauses-{seed}-{mode}-{storage}"), rough),
    )
    sc = replace(sc, call_pauses=_call_pauses(random.Random(f"call-pauses-{seed}-{mode}-{storage}"), sc.pauses))
    return _focused(sc, random.Random(f"focus-{seed}-{mode}-{storage}"), rare)


# Rare recovery paths (tests/sim/paths.py) that drawn worlds reach too seldom by chance; a share of
# the worlds is drawn to reach one of them (``python -m sim --paths`` counts how often each runs).
FOCUSES = {
    "driver": ["small_window", "restart_mid_batch", "stop_mid_stream", "lost_hand_backs"],
    "executors": [
        "paused_tasks",
        "small_window",
        "restart_mid_batch",
        "lost_hand_backs",
        "dead_tasks_available_now",
        "partial_reads",
        "listing_lag",
    ],
}
FOCUSED_SHARE = 0.5


def _focused(sc: Scenario, rng: random.Random, rare: bool = True) -> Scenario:
    """``sc``, changed so that it reaches one rare path, in :data:`FOCUSED_SHARE` of the worlds."""
    if rng.random() >= FOCUSED_SHARE:
        return sc
    focus = rng.choice(FOCUSES[sc.mode])
    options = dict(sc.options)
    changes: dict[str, Any] = {"focus": focus, "rough": max(sc.rough, 0.5)}
    if focus == "paused_tasks":
        # A task attempt paused mid-pull past its leases' proof: what it holds must go back.
        changes.update(pauses=(rng.choice([2.0, 5.0]), rng.choice([6.0, 12.0])), pause_tasks=True, sub_deadline=10)
        changes.update(call_pauses=_call_pauses(random.Random(f"call-pauses-{sc.seed}"), changes["pauses"]))
        changes.update(backlog=max(sc.backlog, 150))
        if rare:
            # A process frozen as it writes, seconds at a time (its own draw): an attempt that froze
            # writing its slice as its claim lapsed lands it after the retry took the claim over,
            # a speculative copy that waited for the claim.
            freeze = random.Random(f"stalls-{sc.seed}").choice([0.2, 0.3])
            changes.update(storage_terms=replace(sc.storage_terms, freeze_tasks=freeze, stall_seconds=(5.0, 15.0)))
            changes.update(spark=replace(sc.spark, speculation=max(sc.spark.speculation, 0.5)))
            losers = random.Random(f"losers-{sc.seed}")
            if losers.random() < 0.5:
                # AvailableNow with hand-backs often lost: what an attempt that lost its slice to
                # the frozen one could not hand back is waited out (from its claim's note).
                pubsub = replace(sc.pubsub, hand_back_dropped=losers.choice([0.5, 0.8]))
                spark = replace(changes["spark"], version=losers.choice(["4.2", "4.3"]))
                changes.update(trigger="available_now", pubsub=pubsub, spark=spark)
                options.pop("maxMessagesPerTrigger", None)
    elif focus == "small_window":
        # Trigger.AvailableNow on a live topic with little room: later messages fill it.
        options["maxOutstandingMessages"] = str(rng.choice([15, 40]))
        changes.update(trigger="available_now", backlog=max(sc.backlog, 40), live=max(sc.live, 60))
        changes.update(
            live_seconds=rng.uniform(10.0, 30.0), spark=replace(sc.spark, version=rng.choice(["4.2", "4.3"]))
        )
        options.pop("maxMessagesPerTrigger", None)
        if rare:  # later messages handed back for room, and at the run's end: some lost (its own draw)
            hand_backs = random.Random(f"hand-backs-{sc.seed}").choice([0.0, 0.3])
            changes.update(pubsub=replace(sc.pubsub, hand_back_dropped=hand_backs))
    elif focus == "restart_mid_batch":
        # The driver dies between the sink's write and the commit log: the batch is replayed.
        changes.update(spark=replace(sc.spark, die_after_sink=rng.choice([0.05, 0.2]), first_write=rng.random() < 0.5))
        changes.update(backlog=max(sc.backlog, 40))
    elif focus == "stop_mid_stream":
        # Apps stopped while traffic is live: Pulls in flight answer while the reader stops.
        changes.update(trigger="continuous", stop_after=rng.choice([3, 10]), live=max(sc.live, 100))
        changes.update(live_seconds=rng.uniform(10.0, 40.0))
    elif focus == "lost_hand_backs":
        # Hand-backs lost or answered late in AvailableNow runs: the leases they leave are waited out.
        pubsub = replace(sc.pubsub, ack_dropped=rng.choice([0.05, 0.15]), ack_late=rng.choice([0.05, 0.15]))
        if rare:
            # A run ends with a hand-back or two: lost often enough that the lease a failed one
            # leaves is waited out in a good share of these worlds (its own draw).
            pubsub = replace(pubsub, hand_back_dropped=random.Random(f"hand-backs-{sc.seed}").choice([0.5, 0.8]))
        options["maxOutstandingMessages"] = str(rng.choice([15, 40]))
        changes.update(
            pubsub=pubsub, trigger="available_now", live=max(sc.live, 60), live_seconds=rng.uniform(5.0, 20.0)
        )
        changes.update(spark=replace(sc.spark, version=rng.choice(["4.2", "4.3"])))
        options.pop("maxMessagesPerTrigger", None)
    elif focus == "dead_tasks_available_now":
        # Task attempts lost mid-pull in AvailableNow runs: the leases they held are waited out.
        changes.update(
            trigger="available_now", spark=replace(sc.spark, version=rng.choice(["4.2", "4.3"]), task_loss=0.3)
        )
        changes.update(backlog=max(sc.backlog, 40))
        options.pop("maxMessagesPerTrigger", None)
    elif focus == "partial_reads":
        # Sinks that read part of a batch, speculative copies: slices recorded and never registered;
        # a task the job cancels mid-pull (AvailableNow: its leases are waited out).
        extra = random.Random(f"cancel-{sc.seed}")
        spark = replace(sc.spark, partial_read=0.5, speculation=0.3, task_loss=0.1, cancel=1.0 if rare else 0.0)
        if rare and extra.random() < 0.9:  # AvailableNow: what a cancelled task leased is waited out
            spark = replace(spark, partial_read=0.8)
            spark = replace(spark, version=extra.choice(["4.2", "4.3"]))
            changes.update(trigger="available_now")
            options.pop("maxMessagesPerTrigger", None)
        changes.update(spark=spark)
        changes.update(backlog=max(sc.backlog, 40))
    elif focus == "listing_lag":
        # A shared file system's listing lags and the query restarts: plans read by their exact name.
        if sc.storage == "posix":
            changes.update(storage_terms=replace(sc.storage_terms, list_lag=3.0))
        changes.update(spark=replace(sc.spark, die_after_sink=0.3), kills=[rng.randint(5, 60) for _ in range(2)])
        changes.update(runner_only=[rng.random() < 0.5 for _ in range(2)], backlog=max(sc.backlog, 40))
    return replace(sc, options=options, **changes)


def _pauses(rng: random.Random, rough: float) -> tuple[float, float]:
    """How often a process is paused, and for how long at most (see :attr:`Scenario.pauses`)."""
    if rng.random() >= 0.3 * rough:
        return (0.0, 0.0)
    return (rng.choice([5.0, 20.0, 60.0]), rng.choice([2.0, 6.0, 15.0]))


def _call_pauses(rng: random.Random, pauses: tuple[float, float]) -> tuple[float, float]:
    """How often a call waits for a pause of its process before it goes (see :attr:`Scenario.call_pauses`)."""
    if not pauses[0]:
        return (0.0, 0.0)
    return (rng.choice([0.0, 0.01, 0.05]), pauses[1])


def calm(mode: str, storage: str, seed: int = 0, **overrides: Any) -> Scenario:
    """A scenario with no fault at all (one subscription, one app, Spark 4.3), changed by ``overrides``.

    ``options`` are merged into the defaults; the other fields replace them. For tests that pin one
    freedom at a time (tests/sim/test_findings.py).
    """
    options = {
        "subscription": f"{PROJECT}/subscriptions/sub-0",
        "emulatorHost": "sim:1",
        "stateDir": "gs://sim-bucket/state" if storage == "gs" else "/sim/state",
        "receiver": mode,
        "ackDeadlineSeconds": "10",
        "maxOutstandingMessages": "200000",
        **({"batchTransfer": "tasks"} if mode == "driver" else {}),
        **overrides.pop("options", {}),
    }
    subs = overrides.pop("subs", [f"{PROJECT}/subscriptions/sub-0"])
    options["subscription"] = ",".join(subs)
    base = dict(
        seed=seed,
        mode=mode,
        storage=storage,
        rough=0.0,
        subs=subs,
        ordered=False,
        exactly_once=False,
        sub_deadline=10,
        keys=3,
        body_size=60,
        backlog=100,
        live=0,
        live_seconds=10.0,
        trigger="continuous",
        options=options,
        partitions=[None],
        kills=[],
        runner_only=[],
        pubsub=Terms(partial=0.0),
        storage_terms=StorageTerms(),
        spark=SparkTerms(version="4.3"),
    )
    base.update(overrides)
    return Scenario(**base)


@dataclass
class AvailableNowRun:
    cutoff: float  # virtual time of prepareForTriggerAvailableNow (or the run's start on 4.0/4.1)
    before: set[str]  # ids published before the cutoff
    ended: bool = False
    finished_at: float = 0.0
    sink_at_end: set[str] = field(default_factory=set)
    late: set[str] = field(default_factory=set)  # passed over by an out-of-order answer
    died: bool = False


@dataclass
class Record:
    """What happened, for the checker."""

    scenario: Scenario
    published: dict[str, list[str]]  # sub -> ids in publish order
    key_of: dict[str, str]
    sink: Sink
    logs: Logs
    service: SimPubSub
    storage: SimStorage
    failures: list[BaseException]  # query deaths (what Spark would report)
    thread_errors: list[tuple[str, BaseException]]
    runs: list[AvailableNowRun]
    converged: bool
    end_time: float
    switches: int
    log_tail: list[str]
    story: list[str]  # what happened to the watched messages
    apps: list[str]
    ends: list[tuple[str, float, str | None]]  # (app, virtual time it ended, the failure it died of)
    note: str = ""


# ----------------------------------------------------------------------------- installing the world


def source_modules() -> list[Any]:
    """Every module of ``crdb_pubsub.source``, imported: what runs on the simulated threads and clock."""
    import crdb_pubsub.source as pkg

    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(info.name)
    return [m for name, m in sorted(sys.modules.items()) if name.startswith("crdb_pubsub.source") and m is not None]


@contextlib.contextmanager
def patching() -> Iterator[Callable[[Any, str, Any], None]]:
    """``patch(obj, attr, value)``: set an attribute; every one set is put back on exit, last first."""
    undo: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, attr: str, value: Any) -> None:
        undo.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, value)

    try:
        yield patch
    finally:
        for obj, attr, value in reversed(undo):
            setattr(obj, attr, value)


def virtualize(sched: S.Scheduler, seed: int, modules: list[Any], patch: Callable[[Any, str, Any], None]) -> None:
    """Run ``modules`` on ``sched``'s threads and clock: its ``threading``/``time``/``queue``/``random``
    in place of the real ones (and in the defaults of functions that took the real clocks), the
    source's three TCP listeners (the decode report's, receiver=executors' seen-ids server,
    batchTransfer=fetch's handoff) as calls.

    ``patch``: :func:`patching`'s. Shared by the simulated worlds and the tests on a virtual clock
    (``tests/virtual_time.py``).
    """
    ns = S.namespaces(sched, seed)
    real_clocks = {
        id(S.REAL["time"].monotonic): ns["time"].monotonic,
        id(S.REAL["time"].time): ns["time"].time,
        id(S.REAL["time"].sleep): ns["time"].sleep,
    }
    for mod in modules:
        for attr, real in S.REAL.items():
            if getattr(mod, attr, None) is real:
                patch(mod, attr, ns[attr])
        for fn in _functions(mod):
            if fn.__defaults__ and any(id(d) in real_clocks for d in fn.__defaults__):
                patch(fn, "__defaults__", tuple(real_clocks.get(id(d), d) for d in fn.__defaults__))
            if fn.__kwdefaults__ and any(id(d) in real_clocks for d in fn.__kwdefaults__.values()):
                patch(fn, "__kwdefaults__", {k: real_clocks.get(id(d), d) for k, d in fn.__kwdefaults__.items()})

    import crdb_pubsub.source.core.protocol as protocol

    patch(protocol, "StatsServer", _NoStats)
    # receiver=executors: a task asks the driver-side reader which messages it must not yield
    # (executors/seen.py, TCP in production): here a call, with a round trip, that fails when
    # the reader's process is gone.
    try:
        import crdb_pubsub.source.executors.mode as executors_mode
        import crdb_pubsub.source.executors.seen as seen
    except ImportError:  # an older source without it
        seen = None
    if seen is not None and hasattr(seen, "ask"):
        servers: dict[str, tuple[Any, S.Process]] = {}

        class SimSeenServer:
            def __init__(self, answer: Any) -> None:
                self.token = f"seen-{len(servers)}"
                self._answer = answer
                self.addresses = ("sim:0",)
                servers[self.token] = (self, sched.process())

            @property
            def where(self) -> tuple[tuple[str, ...], str]:
                return self.addresses, self.token

            def close(self) -> None:
                servers.pop(self.token, None)

        def ask(where: Any, batch: int, sub: str, mids: Any) -> Any:
            sched.check()
            sched.sleep(0.001)
            server = servers.get(where[1])
            if server is None or not server[1].alive:
                raise seen.SeenUnreachable(f"the driver-side reader at {where[0]} is gone (simulated)")
            return server[0]._answer(batch, sub, list(mids))

        patch(executors_mode, "SeenServer", SimSeenServer)
        patch(seen, "ask", ask)
    _virtual_handoff(sched, patch)


def _virtual_handoff(sched: S.Scheduler, patch: Callable[[Any, str, Any], None]) -> None:
    """batchTransfer=fetch: a task fetches its partition from the driver-side reader (driver/handoff.py,
    TCP in production): here a call that finds the payload the reader offered, with a round trip."""
    import crdb_pubsub.source.driver.handoff as handoff
    import crdb_pubsub.source.driver.mode as driver_mode

    served: dict[str, Any] = {}

    class SimBatchServer:
        def __init__(self) -> None:
            self.token = f"handoff-{len(served)}"
            self.addresses = ("sim:0",)
            self._payloads: dict[tuple[int, int], Any] = {}
            self._process = sched.process()
            served[self.token] = self

        def offer(self, batch_id: int, payloads: list[Any]) -> list[Any]:
            for i, payload in enumerate(payloads):
                self._payloads[(batch_id, i)] = payload
            return [
                handoff.Ticket(self.addresses, batch_id, i, p.size, self.token, b"", b"")
                for i, p in enumerate(payloads)
            ]

        def withdraw(self, batch_ids: list[int]) -> None:
            gone = set(batch_ids)
            for k in [k for k in self._payloads if k[0] in gone]:
                del self._payloads[k]

        def close(self) -> None:
            served.pop(self.token, None)

    def fetch(ticket: Any) -> Any:
        sched.check()
        sched.sleep(0.001)
        server = served.get(ticket.token)
        payload = None
        if server is not None and server._process.alive:
            payload = server._payloads.get((ticket.batch_id, ticket.index))
        if payload is None:
            raise handoff.HandoffError(
                f"crdb_pubsub: could not fetch batch {ticket.batch_id} partition {ticket.index} (simulated)"
            )
        return payload

    patch(driver_mode, "BatchServer", SimBatchServer)
    patch(handoff, "fetch", fetch)


@contextlib.contextmanager
def installed(sched: S.Scheduler, seed: int, service: SimPubSub, storage: SimStorage) -> Iterator[None]:
    """Run the source's modules on the simulated threads, clock, Pub/Sub and storage (restored on exit)."""
    with patching() as patch:
        virtualize(sched, seed, source_modules(), patch)
        _install_world(sched, service, storage, patch)
        yield


def _install_world(
    sched: S.Scheduler, service: SimPubSub, storage: SimStorage, patch: Callable[[Any, str, Any], None]
) -> None:
    """The simulated Pub/Sub and storage behind the source, and the processes' pids and hosts."""

    import crdb_pubsub.source.executors.task as task
    import crdb_pubsub.source.lifecycle as lifecycle
    import crdb_pubsub.source.state.ledger as ledger
    import crdb_pubsub.source.storage as storage_pkg
    import crdb_pubsub.source.storage.lease as lease
    import crdb_pubsub.source.transport as transport

    patch(transport, "subscriber_client", lambda host=None, credentials=None, **kw: service.client())
    for mod in (storage_pkg, ledger, task):
        patch(mod, "open_storage", lambda url: storage)
    patch(task, "_RPCS", {})
    patch(task, "_STORAGES", {})
    patch(task, "_LEARNED", {})
    if hasattr(task, "_SIZES"):  # an older source has none
        patch(task, "_SIZES", {})
    import crdb_pubsub.source.pubsub.acker as acker

    submit = acker.Acker.submit

    def submitted(self: Any, job: Any) -> None:
        service.let_go(
            job.sub, job.ack_ids, acked=job.kind == "ack"
        )  # what the source holds no more, from now (the checker's bounds)
        submit(self, job)

    patch(acker.Acker, "submit", submitted)
    here = S._Namespace(__import__("os"), getpid=lambda: sched.process().pid)
    patch(lease, "os", here)
    patch(lease, "socket", S._Namespace(__import__("socket"), gethostname=lambda: sched.process().host))
    patch(ledger, "socket", S._Namespace(__import__("socket"), gethostname=lambda: sched.process().host))

    def gone(holder: dict) -> bool:
        # A holder on this host whose process is gone: the lease is free at once, as a dead
        # process's lock would be.
        me = sched.process()
        if holder.get("host") != me.host or holder.get("pid") == me.pid:
            return False
        p = _PROCESSES.get(holder.get("pid"))
        return p is not None and not p.alive

    for mod in (lifecycle, ledger, task.__dict__.get("store") and sys.modules["crdb_pubsub.source.executors.store"]):
        if mod is not None and hasattr(mod, "gone_from_this_host"):
            patch(mod, "gone_from_this_host", gone)


_PROCESSES: dict[int, S.Process] = {}


def _reap(sched: S.Scheduler, process: S.Process, after: float) -> None:
    sched.sleep(after)
    if process.alive:
        sched.kill(process)


def _functions(mod: Any) -> Iterator[Any]:
    import types

    for obj in list(vars(mod).values()):
        if isinstance(obj, types.FunctionType) and obj.__module__ == mod.__name__:
            yield obj
        elif isinstance(obj, type) and obj.__module__ == mod.__name__:
            for member in vars(obj).values():
                if isinstance(member, types.FunctionType):
                    yield member


class _NoStats:
    """The decode-report listener: a TCP server, which has no place in the simulation."""

    def __init__(self, on_report: Any) -> None:
        self.addresses: tuple[str, ...] = ()
        self.token = "sim"

    def close(self) -> None:
        pass


class _LogTail(logging.Handler):
    def __init__(self, sched: S.Scheduler, size: int = 400) -> None:
        super().__init__(logging.DEBUG)
        self.sched = sched
        self.lines: deque[tuple[float, str, int]] = deque(maxlen=size)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            t = getattr(__import__("greenlet").getcurrent(), "thread", None)
            who = t.process.name if t is not None and t.process is not None else "-"
            text = f"{who:22s} {record.levelname:7s} {record.name}: {record.getMessage()}"
            if self.lines and self.lines[-1][1] == text:
                at, _, n = self.lines[-1]
                self.lines[-1] = (at, text, n + 1)  # a repeated line is counted, not kept again
            else:
                self.lines.append((self.sched.now, text, 1))
        except Exception:  # noqa: BLE001 - a log line is not worth failing a run
            pass

    def render(self) -> list[str]:
        return [f"{at:9.3f} {text}" + (f"  (x{n})" if n > 1 else "") for at, text, n in self.lines]


# ----------------------------------------------------------------------------- the run


def body(i: int, size: int, key: str) -> bytes:
    pad = "x" * max(0, size - 60)
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}, "k": "{key}", "p": "{pad}"}}}},"Topic":"t"}}'.encode()


MAX_VIRTUAL_SECONDS = 1500.0
# A world still progressing then (its last run added rows to the sink) goes on, up to this: one of
# small batches (maxBytesPerTrigger below one body) takes longer to drain than a stuck one does to
# show it is stuck.
MAX_PROGRESSING_SECONDS = 6000.0
# Processes are paused only this long into a world: a deadlock later is still reported as one (a
# pauser's timer would keep the clock going).
PAUSES_UNTIL_SECONDS = 300.0
IDLE_GIVE_UP_SECONDS = 300.0  # nothing new in the sink this long, with messages missing: stop and report
LINGER_SECONDS = 20.0  # a continuous query goes on this long after everything reached the sink
# A sink that fails batches, or a driver that dies after the sink's writes, is fixed after this many
# runs of the query (as its user would): a world of one-message batches would otherwise restart more
# often than it progresses, and never converge.
SINK_FIXED_AFTER_RUNS = 8


def simulate(
    seed: int,
    mode: str,
    storage: str,
    *,
    rough: float | None = None,
    scenario: Scenario | None = None,
    watch: set[str] | None = None,
) -> Record:
    sc = scenario or draw(seed, mode, storage, rough=rough)
    S.Process._pids = itertools.count(40_000)  # a run's pids do not depend on the runs before it
    _PROCESSES.clear()
    sched = S.Scheduler(seed, stall=sc.stall)
    service = SimPubSub(sched, seed, sc.pubsub)
    service.watch = set(watch or ())
    service.call_pauses = sc.call_pauses
    service.call_pauses_until = PAUSES_UNTIL_SECONDS
    store = SimStorage(sched, seed, storage, sc.storage_terms)
    store.on_taken_over = service.written_off.add
    rng = random.Random(f"world-{seed}")
    for sub in sc.subs:
        service.create_subscription(sub, ack_deadline=sc.sub_deadline, exactly_once=sc.exactly_once, ordered=sc.ordered)
    logs, sink = Logs(), Sink()
    published: dict[str, list[str]] = {s: [] for s in sc.subs}
    key_of: dict[str, str] = {}
    failures: list[BaseException] = []
    runs: list[AvailableNowRun] = []
    apps: list[SparkApp] = []
    ends: list[tuple[str, float, str | None]] = []
    app_of_process: dict[int, str] = {}
    service.app_of = lambda p: app_of_process.get(id(p)) if p is not None else None
    world = S.Process("world", host="world")
    tail = _LogTail(sched)
    logger = logging.getLogger("crdb_pubsub")
    saved_logger = (logger.level, logger.propagate, list(logger.handlers))
    logger.handlers[:] = [tail]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    state: dict[str, Any] = {"publishing": True, "calls": {}, "converged": False}
    counter = [0]

    def publish(n: int, sub_index: int | None = None) -> None:
        n = -(-n // len(sc.subs))  # the same traffic in all, spread over the subscriptions
        for _ in range(n):
            i = counter[0]
            counter[0] += 1
            key = f"k{rng.randrange(sc.keys)}" if sc.ordered else ""
            subs = sc.subs if sub_index is None else [sc.subs[sub_index]]
            for sub in subs:
                size = sc.body_size if sc.body_min is None else rng.randint(sc.body_min, sc.body_size)
                (mid,) = service.publish(sub, [body(i, size, key)], key)
                published[sub].append(mid)
                key_of[mid] = key

    def publisher() -> None:
        publish(sc.backlog)
        if sc.live:
            step = sc.live_seconds / sc.live
            for _ in range(sc.live):
                sched.sleep(rng.expovariate(1.0 / step))
                publish(1)
        state["publishing"] = False

    def all_ids() -> set[str]:
        return {m for ids in published.values() for m in ids}

    def reached() -> set[str]:
        got = set(sink.ids())
        for ids in sink.excused.values():
            got |= ids
        return got

    def on_call() -> None:
        me = sched.process()
        app_name = app_of_process.get(id(me))
        if app_name is None:
            return
        app = next(a for a in apps if a.name == app_name)
        calls = state["calls"][app_name] = state["calls"].get(app_name, 0) + 1
        limit = state.get(("kill", app_name))
        if limit is not None and calls >= limit and app.alive() and app.runner.alive:
            if state.get(("runner_only", app_name)):
                sched.kill(app.runner)
            else:
                app.kill()

    store.on_call = on_call
    service.on_call = on_call

    def make_reader(partitions: int | None) -> Any:
        from crdb_pubsub.source.datasource import CrdbPubSubDataSource

        opts = dict(sc.options)
        if partitions is not None:
            opts["numPartitions"] = str(partitions)
        ds = CrdbPubSubDataSource(opts)
        return ds.streamReader(ds.schema())

    def wire_ids(part: Any) -> list[str]:
        """What a partition Spark did not run would have yielded (read without going through the world)."""
        import json

        import pyarrow as pa

        from crdb_pubsub.source.wire import from_ipc

        messages = getattr(part, "messages", None)
        if messages is not None:
            return from_ipc(messages).column("message_id").to_pylist()
        order = part.order  # receiver=executors: the slice its task registered, if it did
        d = f"v3/slices/{order.batch_id:020d}/"
        register = store._objects.get(d + "register.json")
        slice_ = store._objects.get(f"{d}{order.index:05d}.arrow")
        if register is None or slice_ is None or order.index not in json.loads(register.data):
            return []
        table = pa.ipc.open_file(pa.BufferReader(slice_.data)).read_all()
        return [m for m, r in zip(table.column("message_id").to_pylist(), table.column("role").to_pylist()) if r == 0]

    def run_app(app: SparkApp, k: int) -> None:
        app.start()
        if sc.trigger == "available_now":
            cutoff = sched.now
            app.prepare_available_now()
            run = AvailableNowRun(cutoff, set(all_ids()))
            runs.append(run)
            # What Pub/Sub passed over and had not delivered when the trigger that ended the run
            # began, at some moment while its latestOffset decided the run was over, or when it
            # ended (a Pull in flight may deliver it in between: driver/posix seed 534 decided from
            # an answer that passed a message over, 1 ms before the answer that brought it arrived).
            late: list[set[str]] = [set()]
            app.after_latest = lambda began: late[-1].update(service.passed_over_between(run.cutoff, began, sched.now))
            try:
                while True:
                    late.append(service.delivered_late(run.cutoff))
                    if not app.trigger() or sc.spark.old_api:
                        break
            finally:
                run.finished_at = sched.now
                app.after_latest = None
            run.ended = True
            run.sink_at_end = reached()
            run.late = late[-1] | service.delivered_late(run.cutoff)
            return
        idle_since = sched.now
        have = len(reached())
        done_at: float | None = None
        triggers = 0
        while True:
            triggers += 1
            if sc.stop_after is not None and triggers > sc.stop_after and state["publishing"]:
                return  # stopped while traffic is live (Scenario.stop_after)
            if done_at is None and not state["publishing"] and all_ids() <= reached():
                # Everything is in the sink: go on a while, so that what Pub/Sub delivers again
                # late (after an acknowledgement) has its chance to be yielded twice.
                state["converged"] = True
                done_at = sched.now
            if done_at is not None and sched.now - done_at >= LINGER_SECONDS:
                return
            if app.trigger():
                now_have = len(reached())
                if now_have != have:
                    have, idle_since = now_have, sched.now
            else:
                sched.sleep(sc.spark.poll)
            if sched.now - idle_since > IDLE_GIVE_UP_SECONDS:
                return

    faults_end = max([b for _, b in sc.pubsub.outages + sc.storage_terms.brownouts], default=0.0)

    events = logging.getLogger("crdb_pubsub.sim")

    def pauser() -> None:
        """Pause a process of the running query now and then (:attr:`Scenario.pauses`)."""
        every, longest = sc.pauses
        prng = random.Random(f"pauser-{seed}")
        while sched.now < PAUSES_UNTIL_SECONDS:
            sched.sleep(prng.expovariate(1.0 / every))
            live = [p for a in apps if a.alive() for p in a.processes() if p.alive]
            if sc.pause_tasks:
                live = [
                    p for a in apps if a.alive() for p in a.workers if p.alive and any(t.is_alive() for t in p.threads)
                ]
            if live:
                p = prng.choice(live)
                seconds = prng.uniform(0.5, longest)
                events.info("%s paused for %.1f s", p.name, seconds)
                sched.pause(p, seconds)

    def orchestrate() -> None:
        pub = S.SimThread(sched, publisher, name="publisher", process=world)
        pub.start()
        if sc.pauses[0]:
            S.SimThread(sched, pauser, name="pauser", process=world).start()
        k = 0
        idle_runs = 0
        while True:
            name = f"app{k}"
            spark_rng = random.Random(f"spark-{seed}-{k}")
            more = random.Random(f"spark-more-{seed}-{k}")
            app = SparkApp(
                sched,
                spark_rng,
                sc.spark if k < SINK_FIXED_AFTER_RUNS else replace(sc.spark, sink_fails=0.0, die_after_sink=0.0),
                logs,
                sink,
                functools.partial(make_reader, sc.partitions[k % len(sc.partitions)]),
                name=name,
                wire_ids=wire_ids,
                more=more,
            )
            app.on_given_up = service.written_off.add
            apps.append(app)
            for p in (app.jvm, app.runner):
                app_of_process[id(p)] = name
                _PROCESSES[p.pid] = p
            kill_at = sc.kills[k] if k < len(sc.kills) else None
            state[("kill", name)] = kill_at
            state[("runner_only", name)] = sc.runner_only[k] if k < len(sc.kills) else False
            before = len(reached())
            app_failures = len(failures)

            def body_of(app: SparkApp = app, k: int = k) -> None:
                try:
                    run_app(app, k)
                except S.Killed:
                    raise
                except BaseException as exc:  # noqa: BLE001 - the query died; recorded for the checker
                    failures.append(exc.cause if isinstance(exc, QueryFailed) else exc)
                    if runs and not runs[-1].ended:
                        runs[-1].died = True

            th = S.SimThread(sched, body_of, name=f"{name}-spark", process=app.jvm)
            _track_workers(app)
            events.info(
                "%s starts (numPartitions %s, kill after %s calls%s)",
                name,
                sc.partitions[k % len(sc.partitions)],
                kill_at,
                " runner only" if state[("runner_only", name)] else "",
            )
            th.start()
            th.join()
            ends.append((name, sched.now, type(failures[-1]).__name__ if len(failures) > app_failures else None))
            events.info(
                "%s ended: %s; %d batches run, sink %d rows; %s",
                name,
                "killed" if not app.jvm.alive or not app.runner.alive else "stopped",
                app.batches_run,
                len(sink.ids()),
                f"{type(failures[-1]).__name__}: {failures[-1]}"
                if failures and len(failures) > app_failures
                else "no failure",
            )
            if runs and not runs[-1].ended:
                runs[-1].died = True  # the app was killed (or its query failed) during the run
                runs[-1].finished_at = runs[-1].finished_at or sched.now
            graceful = spark_rng.random() < 0.6
            linger = 0.0
            if sc.spark.zombie_runner and more.random() < sc.spark.zombie_runner:
                linger = more.choice([2.0, 10.0, 40.0])  # the runner outlives its query (a missed SIGTERM)
            app.stop(graceful and not linger, keep_runner=bool(linger))
            if linger:
                events.info("%s's runner lives on for %.0f s", name, linger)
                S.SimThread(
                    sched, functools.partial(_reap, sched, app.runner, linger), name=f"{name}-reaper", process=world
                ).start()
            k += 1
            done = not state["publishing"] and all_ids() <= reached()
            if done:
                state["converged"] = True
                return
            # A run that could not progress because a dead process's leases still hold messages
            # (seed 346 of executors/posix: two killed task attempts, 60 s leases, an ordered key)
            # is not the source's idleness: count from when they lapse.
            waiting = sched.now < faults_end or sched.now < service.leased_to_the_dead_until()
            idle_runs = 0 if len(reached()) > before or waiting else idle_runs + 1
            # Past the budget, a world goes on while it progresses: one run that brought nothing
            # does not end it (4.0/4.1 AvailableNow runs of one batch on an ordered subscription,
            # tasks frozen as they write: executors/gs seed 269 read 1-7 messages a run).
            if sched.now > MAX_VIRTUAL_SECONDS and (idle_runs >= 3 or sched.now > MAX_PROGRESSING_SECONDS):
                return
            if idle_runs >= 12 and not state["publishing"]:
                return
            sched.sleep(rng.choice([0.0, 1.0, 5.0, 20.0]))

    def _track_workers(app: SparkApp) -> None:
        original = app._attempt

        def attempt(*a: Any, **kw: Any) -> Any:
            th, worker = original(*a, **kw)
            app_of_process[id(worker)] = app.name
            _PROCESSES[worker.pid] = worker
            return th, worker

        app._attempt = attempt  # type: ignore[method-assign]

    note = ""
    try:
        with installed(sched, seed, service, store):
            try:
                sched.run(orchestrate, world, max_time=MAX_PROGRESSING_SECONDS * 1.5, max_switches=3_000_000)
            except (AssertionError, S.Deadlock) as exc:
                note = f"{type(exc).__name__}: {exc}"
    finally:
        logger.handlers[:] = saved_logger[2]
        logger.setLevel(saved_logger[0])
        logger.propagate = saved_logger[1]
    return Record(
        scenario=sc,
        published=published,
        key_of=key_of,
        sink=sink,
        logs=logs,
        service=service,
        storage=store,
        failures=failures,
        thread_errors=list(sched.errors),
        runs=runs,
        converged=state["converged"],
        end_time=sched.now,
        switches=sched.switches,
        log_tail=tail.render(),
        story=service.story,
        apps=[a.name for a in apps],
        ends=ends,
        note=note,
    )


__all__ = ["Record", "RunnerDied", "Scenario", "SinkFails", "draw", "simulate"]
