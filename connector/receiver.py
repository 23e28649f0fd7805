"""The driver-side receiver: pulls from Pub/Sub, holds leases, acknowledges on request.

It lives in Spark's long-lived driver-side Python process (the one that runs ``latestOffset``,
``partitions`` and ``commit``) and is built lazily there: nothing here is created in the reader's
``__init__`` and nothing here is pickled.

Pieces, in the spirit of python-pubsub's subscriber internals:

* **pullers** (one thread per subscription) issue unary ``Pull`` requests with a short timeout,
  sized by flow control, and retry with backoff while Pub/Sub is unavailable;
* **flow control** bounds what is *held* (buffered or in a sealed, unacknowledged batch) by
  ``maxOutstandingMessages``/``maxOutstandingBytes``: pullers wait while it is full;
* the **leaser** thread extends the ack deadline of everything held, in groups (one group per pull
  response), before it expires, and gives up after ``maxLeaseDurationSeconds``;
* **dedupe**: a redelivery of a held message only adds its new ack id to that message; a redelivery
  of a message acknowledged within the dedupe window is acknowledged again and dropped;
* the **acker** thread sends Acknowledge requests queued by :meth:`Receiver.ack`, so a commit does
  not wait for them; :meth:`Receiver.flush_acks` waits until they are sent.

Nothing is acknowledged here unless the caller (the micro-batch planner, after Spark committed the
batch) asks for it.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from .pubsub import chunk_ack_ids, group_by_subscription

if TYPE_CHECKING:  # pragma: no cover
    from google.pubsub_v1 import SubscriberClient

log = logging.getLogger("crdb_pubsub.receiver")

PULL_TIMEOUT_SECONDS = 1.0  # an empty Pull blocks until this; it bounds shutdown and drain detection
MAX_PULL_MESSAGES = 1000  # Pub/Sub's own cap per Pull
# Two Pulls in flight per subscription keep the pipe full while the other waits on the network
# (gRPC releases the GIL), measured ~1.5x one puller against the emulator while Spark runs.
PULLERS_PER_SUBSCRIPTION = 2
LEASE_TICK_SECONDS = 0.25
DEDUPE_WINDOW_SECONDS = 600.0  # how long acknowledged message ids are remembered
RPC_TIMEOUT_SECONDS = 30.0
START_TIMEOUT_SECONDS = 15.0


class ReceiverError(RuntimeError):
    """Pub/Sub refused us for good (missing subscription, permissions, unreachable at start)."""


@dataclass(slots=True, eq=False)
class Received:
    """One message the receiver holds, from receipt until it is acknowledged."""

    sub: str  # full subscription path
    ack_id: str
    message_id: str
    data: bytes
    publish_us: int  # epoch microseconds
    attributes: dict[str, str] | None
    ordering_key: str
    received_at: float  # monotonic
    extra_ack_ids: list[str] | None = None  # ack ids of redeliveries that arrived while held
    done: bool = False

    @property
    def size(self) -> int:
        return len(self.data)

    def ack_ids(self) -> list[str]:
        return [self.ack_id, *self.extra_ack_ids] if self.extra_ack_ids else [self.ack_id]


@dataclass(eq=False)
class _LeaseGroup:
    sub: str
    messages: list[Received]
    expires_at: float  # monotonic time the current deadline runs out
    deadline: float  # seconds the last (re)lease granted
    first_received: float
    gave_up: bool = False


@dataclass
class ReceiverMetrics:
    received: int = 0
    redelivered_while_held: int = 0
    duplicates_dropped: int = 0
    acknowledged: int = 0
    ack_failures: int = 0
    leases_extended: int = 0
    lease_expired: int = 0
    pull_errors: int = 0
    deferred: int = 0


class _Backoff:
    def __init__(self, first: float = 0.1, cap: float = 10.0) -> None:
        self.first, self.cap, self.current = first, cap, 0.0

    def next(self) -> float:
        self.current = min(self.cap, self.current * 2 if self.current else self.first)
        return self.current * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.current = 0.0


def _is_transient(exc: BaseException) -> bool:
    from google.api_core import exceptions as gexc

    return isinstance(
        exc,
        (
            gexc.ServiceUnavailable,
            gexc.DeadlineExceeded,
            gexc.InternalServerError,
            gexc.Aborted,
            gexc.ResourceExhausted,
            gexc.Unknown,
            gexc.Cancelled,
            gexc.GatewayTimeout,
            gexc.TooManyRequests,
            gexc.BadGateway,
        ),
    ) or type(exc).__name__ in ("RetryError",)


class Receiver:
    """Pull-based receiver for one or more subscriptions.

    Thread-safety: every public method may be called from any thread. The caller owns batching:
    :meth:`take` moves buffered messages out of the buffer (they stay held and leased) and
    :meth:`ack` acknowledges and releases them.
    """

    def __init__(
        self,
        client: "SubscriberClient",
        subscriptions: Sequence[str],
        *,
        lease_seconds: int,
        max_lease_seconds: int,
        max_messages: int,
        max_bytes: int,
        endpoint_description: str = "Pub/Sub",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._subs = list(subscriptions)
        self._lease_seconds = lease_seconds
        self._max_lease_seconds = max_lease_seconds
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._endpoint = endpoint_description
        self._clock = clock

        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # buffer grew, room freed, drain or error news
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

        self._buffer: deque[Received] = deque()
        self._held: dict[tuple[str, str], Received] = {}
        self._held_bytes = 0
        self._reserved = 0  # messages that Pulls in flight may still bring (several pullers)
        self._groups: list[_LeaseGroup] = []
        self._recent: dict[tuple[str, str], float] = {}  # acknowledged ids -> forget-after (monotonic)
        self._sub_deadline: dict[str, int] = {}
        self._deferred: list[Received] = []  # AvailableNow: published after the cutoff, not ours
        self._cutoff_us: int | None = None
        self._cutoff_set_at = 0.0
        self._last_empty: dict[str, float] = {}  # sub -> monotonic end of the last empty pull
        self._last_message: dict[str, float] = {}
        self._fatal: BaseException | None = None
        self._unavailable_since: float | None = None
        self._last_error: str | None = None
        self._gave_up_logged = False
        self._ack_queue: queue.Queue[tuple[str, list[str]]] = queue.Queue()
        self.metrics = ReceiverMetrics()

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, create_on_topics: Sequence[str] | None = None) -> None:
        """Check every subscription (creating it on its topic when asked), then start the threads.

        Raises :class:`ReceiverError` when Pub/Sub can't be reached within
        ``START_TIMEOUT_SECONDS`` or refuses a subscription, so that a query fails with a clear
        message instead of waiting forever.
        """
        for i, sub in enumerate(self._subs):
            topic = create_on_topics[i] if create_on_topics else None
            self._sub_deadline[sub] = self._check_subscription(sub, topic)
        for sub in self._subs:
            for i in range(PULLERS_PER_SUBSCRIPTION):
                name = f"crdb-pubsub-pull-{sub.rsplit('/', 1)[-1]}-{i}"
                t = threading.Thread(target=self._pull_loop, args=(sub,), name=name, daemon=True)
                t.start()
                self._threads.append(t)
        for target, name in ((self._lease_loop, "crdb-pubsub-leaser"), (self._ack_loop, "crdb-pubsub-acker")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, *, nack: bool = True) -> None:
        """Stop the threads; with ``nack`` hand every held message back to Pub/Sub right away."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        # Join first: a Pull in flight may still deliver messages, which must be handed back too.
        # The acker drains its queue before it exits, so committed work is still acknowledged.
        for t in self._threads:
            t.join(timeout=PULL_TIMEOUT_SECONDS + RPC_TIMEOUT_SECONDS)
        if nack:
            self.nack_all()

    def _check_subscription(self, sub: str, topic: str | None) -> int:
        from google.api_core import exceptions as gexc

        deadline = self._clock() + START_TIMEOUT_SECONDS
        backoff = _Backoff(0.2, 2.0)
        while True:
            try:
                info = self._client.get_subscription(request={"subscription": sub}, timeout=5.0, retry=None)
                return int(info.ack_deadline_seconds or 10)
            except gexc.NotFound:
                if not topic:
                    raise ReceiverError(
                        f"subscription {sub} does not exist at {self._endpoint}; create it, or set option "
                        "'topic' to have it created on that topic"
                    ) from None
                try:
                    info = self._client.create_subscription(
                        request={"name": sub, "topic": topic, "ack_deadline_seconds": max(10, min(600, self._lease_seconds))},
                        timeout=10.0,
                        retry=None,
                    )
                    log.info("created subscription %s on %s", sub, topic)
                    return int(info.ack_deadline_seconds or 10)
                except gexc.AlreadyExists:
                    continue
                except gexc.NotFound:
                    raise ReceiverError(f"topic {topic} does not exist at {self._endpoint}, so subscription {sub} can't be created on it") from None
            except (gexc.PermissionDenied, gexc.Unauthenticated) as exc:
                raise ReceiverError(f"Pub/Sub refused access to {sub} at {self._endpoint}: {exc.message}") from None
            except gexc.InvalidArgument as exc:
                raise ReceiverError(f"Pub/Sub rejected subscription {sub}: {exc.message}") from None
            except Exception as exc:  # noqa: BLE001 - anything else is "not reachable yet"
                if not _is_transient(exc) or self._clock() > deadline:
                    raise ReceiverError(
                        f"cannot reach Pub/Sub at {self._endpoint} to open {sub} "
                        f"(gave up after {START_TIMEOUT_SECONDS:.0f} s): {type(exc).__name__}: {getattr(exc, 'message', exc)}"
                    ) from None
                time.sleep(backoff.next())

    # ------------------------------------------------------------------ flow control

    def _room(self) -> int:
        return max(0, min(MAX_PULL_MESSAGES, self._max_messages - len(self._held) - self._reserved))

    def _full(self) -> bool:
        return self._room() == 0 or self._held_bytes >= self._max_bytes

    # ------------------------------------------------------------------ pulling

    def _pull_loop(self, sub: str) -> None:
        from google.api_core import exceptions as gexc

        backoff = _Backoff()
        while not self._stop.is_set():
            with self._changed:
                while self._full() and not self._stop.is_set():
                    self._changed.wait(0.5)
                room = self._room()
                self._reserved += room
            if self._stop.is_set():
                self._release(room)
                return
            try:
                response = self._client.pull(
                    request={"subscription": sub, "max_messages": room}, timeout=PULL_TIMEOUT_SECONDS, retry=None
                )
            except gexc.DeadlineExceeded:
                self._release(room)
                self._note_empty(sub)  # the emulator blocks an empty pull until the deadline
                continue
            except Exception as exc:  # noqa: BLE001
                self._release(room)
                if self._stop.is_set():
                    return
                self.metrics.pull_errors += 1
                if not _is_transient(exc):
                    with self._changed:
                        self._fatal = exc
                        self._changed.notify_all()
                    log.error("pulling %s failed for good: %s", sub, exc)
                    return
                self._note_unavailable(exc)
                time.sleep(backoff.next())
                continue
            backoff.reset()
            self._note_available()
            pb = type(response).pb(response)  # raw protobuf: far cheaper per field than proto-plus
            if not pb.received_messages:
                self._release(room)
                self._note_empty(sub)
                continue
            self._accept(sub, pb.received_messages, reserved=room)

    def _release(self, reserved: int) -> None:
        with self._changed:
            self._reserved -= reserved
            self._changed.notify_all()

    def _accept(self, sub: str, received_messages: Any, *, reserved: int = 0) -> None:
        now = self._clock()
        fresh: list[Received] = []
        for rm in received_messages:
            m = rm.message
            pt = m.publish_time
            fresh.append(
                Received(
                    sub,
                    rm.ack_id,
                    m.message_id,
                    m.data,
                    pt.seconds * 1_000_000 + pt.nanos // 1000,
                    dict(m.attributes) if m.attributes else None,
                    m.ordering_key,
                    now,
                )
            )
        sub_deadline = self._sub_deadline.get(sub, 10)
        if sub_deadline < self._lease_seconds:
            # The subscription's own deadline is shorter than the lease we want: lengthen it at
            # once, before a slow batch elsewhere in this process lets it lapse.
            self._modack(sub, [r.ack_id for r in fresh], self._lease_seconds)
            granted = float(self._lease_seconds)
        else:
            granted = float(sub_deadline)
        to_ack: list[str] = []
        to_nack: list[str] = []
        with self._changed:
            self._reserved -= reserved
            if self._stop.is_set():
                # Stopping: whatever a last Pull brought goes straight back.
                to_nack_now = [r.ack_id for r in fresh]
                fresh = []
            else:
                to_nack_now = []
            kept: list[Received] = []
            for r in fresh:
                key = (sub, r.message_id)
                held = self._held.get(key)
                if held is not None:
                    # Pub/Sub redelivered something we still hold (its lease lapsed or it is a
                    # duplicate delivery): the newest ack id is the one that will work.
                    held.extra_ack_ids = [*(held.extra_ack_ids or ()), r.ack_id]
                    self.metrics.redelivered_while_held += 1
                    kept.append(held)
                    continue
                if key in self._recent:
                    to_ack.append(r.ack_id)
                    self.metrics.duplicates_dropped += 1
                    continue
                if self._cutoff_us is not None and r.publish_us > self._cutoff_us:
                    self._deferred.append(r)
                    self.metrics.deferred += 1
                    continue
                if self._held and self._held_bytes + r.size > self._max_bytes:
                    # Keep maxOutstandingBytes a hard bound (a Pull can't be sized in bytes);
                    # a lone message larger than the bound is still taken, or nothing would move.
                    to_nack.append(r.ack_id)
                    continue
                self._held[key] = r
                self._held_bytes += r.size
                self._buffer.append(r)
                kept.append(r)
                self.metrics.received += 1
            if kept:
                self._groups.append(_LeaseGroup(sub, kept, now + granted, granted, now))
                self._last_message[sub] = now
            self._changed.notify_all()
        if to_ack:
            self._ack_ids(sub, to_ack)
        if to_nack or to_nack_now:
            self._modack(sub, to_nack + to_nack_now, 0)

    def _note_empty(self, sub: str) -> None:
        with self._changed:
            self._last_empty[sub] = self._clock()
            self._changed.notify_all()

    def _note_unavailable(self, exc: BaseException) -> None:
        with self._changed:
            if self._unavailable_since is None:
                self._unavailable_since = self._clock()
                log.warning("Pub/Sub at %s unavailable, retrying with backoff: %s", self._endpoint, exc)
            self._last_error = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"

    def _note_available(self) -> None:
        if self._unavailable_since is not None:
            with self._changed:
                if self._unavailable_since is not None:
                    log.warning(
                        "Pub/Sub at %s reachable again after %.1f s", self._endpoint, self._clock() - self._unavailable_since
                    )
                self._unavailable_since = None

    # ------------------------------------------------------------------ leasing

    def _lease_loop(self) -> None:
        while not self._stop.wait(LEASE_TICK_SECONDS):
            try:
                self._extend_due()
            except Exception:  # noqa: BLE001 - the leaser must outlive any single failure
                log.exception("lease extension round failed")

    def _extend_due(self) -> None:
        now = self._clock()
        due: list[tuple[str, list[str]]] = []
        with self._changed:
            if self._stop.is_set():
                return
            live_groups = []
            for g in self._groups:
                live = [m for m in g.messages if not m.done]
                if not live:
                    continue
                g.messages = live
                live_groups.append(g)
                if g.gave_up:
                    continue
                # Renew when less than half the granted deadline (plus RPC slack) is left.
                if g.expires_at - now > g.deadline * 0.5 + 0.5:
                    continue
                if now - g.first_received + self._lease_seconds > self._max_lease_seconds:
                    g.gave_up = True
                    self.metrics.lease_expired += len(live)
                    if not self._gave_up_logged:
                        self._gave_up_logged = True
                        log.warning(
                            "messages held longer than maxLeaseDurationSeconds=%d: their leases are no longer "
                            "extended and Pub/Sub will redeliver them (at-least-once)",
                            self._max_lease_seconds,
                        )
                    continue
                ids = [a for m in live for a in m.ack_ids()]
                due.append((g.sub, ids))
                g.expires_at = now + self._lease_seconds
                g.deadline = float(self._lease_seconds)
            self._groups = live_groups
        for sub, ids in due:
            self._modack(sub, ids, self._lease_seconds)
            self.metrics.leases_extended += len(ids)

    # ------------------------------------------------------------------ acknowledging

    def _ack_loop(self) -> None:
        while True:
            try:
                sub, ids = self._ack_queue.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            try:
                self._ack_ids(sub, ids)
            finally:
                self._ack_queue.task_done()

    def flush_acks(self, timeout: float = RPC_TIMEOUT_SECONDS * 2) -> bool:
        """Wait until every queued acknowledgement was sent (or failed for good)."""
        end = self._clock() + timeout
        while self._ack_queue.unfinished_tasks:
            if self._clock() > end:
                return False
            time.sleep(0.01)
        return True

    # ------------------------------------------------------------------ RPCs

    def _modack(self, sub: str, ack_ids: Sequence[str], seconds: int, *, timeout: float = RPC_TIMEOUT_SECONDS) -> None:
        for chunk in chunk_ack_ids(ack_ids):
            try:
                self._client.modify_ack_deadline(
                    request={"subscription": sub, "ack_ids": chunk, "ack_deadline_seconds": seconds},
                    timeout=timeout,
                )
            except Exception as exc:  # noqa: BLE001 - a lost lease means a redelivery, not a loss
                log.warning("modifyAckDeadline(%d s) of %d ids on %s failed: %s", seconds, len(chunk), sub, exc)

    def _ack_ids(self, sub: str, ack_ids: Sequence[str]) -> bool:
        ok = True
        for chunk in chunk_ack_ids(ack_ids):
            backoff = _Backoff(0.1, 2.0)
            for attempt in range(5):
                try:
                    self._client.acknowledge(request={"subscription": sub, "ack_ids": chunk}, timeout=RPC_TIMEOUT_SECONDS)
                    break
                except Exception as exc:  # noqa: BLE001
                    if attempt == 4 or not _is_transient(exc):
                        ok = False
                        self.metrics.ack_failures += len(chunk)
                        log.error(
                            "acknowledging %d messages on %s failed (%s); Pub/Sub will redeliver them and the "
                            "dedupe window drops the copies it recognises",
                            len(chunk),
                            sub,
                            exc,
                        )
                        break
                    time.sleep(backoff.next())
        return ok

    # ------------------------------------------------------------------ the caller's side

    def take(self, max_messages: int | None = None, max_bytes: int | None = None) -> list[Received]:
        """Move up to the limits from the buffer, oldest first. Taken messages stay held and leased.

        At least one message is taken when any is buffered, however large, so a single message
        above ``max_bytes`` can't stall the stream.
        """
        out: list[Received] = []
        size = 0
        with self._changed:
            while self._buffer:
                nxt = self._buffer[0]
                if max_messages is not None and len(out) >= max_messages:
                    break
                if max_bytes is not None and out and size + nxt.size > max_bytes:
                    break
                out.append(self._buffer.popleft())
                size += nxt.size
        return out

    def adopt(self, messages: Iterable[Received]) -> None:
        """Hold messages recovered from a previous process (a batch to replay), and lease them.

        Their stored ack ids are probably stale; when Pub/Sub redelivers them, the new ack ids are
        attached to these objects, so acknowledging them later works.
        """
        now = self._clock()
        by_sub: dict[str, list[Received]] = {}
        with self._changed:
            for r in messages:
                key = (r.sub, r.message_id)
                if key in self._held:
                    continue
                r.received_at = now
                self._held[key] = r
                self._held_bytes += r.size
                by_sub.setdefault(r.sub, []).append(r)
            for sub, group in by_sub.items():
                self._groups.append(_LeaseGroup(sub, group, now, 0.0, now))  # due at the first tick

    def remember_acknowledged(self, keys: Iterable[tuple[str, str]], *, until: float | None = None) -> None:
        """Treat these (subscription, message id) pairs as already acknowledged (dedupe)."""
        forget_at = until if until is not None else self._clock() + DEDUPE_WINDOW_SECONDS
        with self._changed:
            for key in keys:
                self._recent[key] = forget_at

    def ack(self, messages: Sequence[Received]) -> None:
        """Acknowledge and release ``messages`` (every ack id each one was delivered with).

        The requests are queued for the acker thread (see :meth:`flush_acks`). One that fails for
        good leads to a redelivery, recognised by message id within the dedupe window.
        """
        if not messages:
            return
        forget_at = self._clock() + DEDUPE_WINDOW_SECONDS
        pairs: list[tuple[str, str]] = []
        with self._changed:
            for r in messages:
                pairs.extend((r.sub, a) for a in r.ack_ids())
                if not r.done:
                    r.done = True
                    key = (r.sub, r.message_id)
                    if self._held.pop(key, None) is not None:
                        self._held_bytes -= r.size
                    self._recent[key] = forget_at
            self._prune_recent()
            self._changed.notify_all()
        for sub, ids in group_by_subscription(pairs).items():
            self._ack_queue.put((sub, ids))
        self.metrics.acknowledged += len(messages)

    def has_buffered(self) -> bool:
        with self._changed:
            return bool(self._buffer)

    def release_deferred(self) -> None:
        """Hand messages published after the AvailableNow cutoff back to Pub/Sub now."""
        with self._changed:
            pairs = [(r.sub, r.ack_id) for r in self._deferred]
            self._deferred = []
        for sub, ids in group_by_subscription(pairs).items():
            self._modack(sub, ids, 0)

    def nack_all(self, *, timeout: float = RPC_TIMEOUT_SECONDS) -> None:
        """Give every held and deferred message back to Pub/Sub for immediate redelivery."""
        with self._changed:
            pairs = [(r.sub, a) for r in self._held.values() for a in r.ack_ids()]
            pairs += [(r.sub, r.ack_id) for r in self._deferred]
            self._deferred = []
        for sub, ids in group_by_subscription(pairs).items():
            self._modack(sub, ids, 0, timeout=timeout)

    def hand_back(self, timeout: float = 3.0) -> None:
        """Last words of a process being terminated: send queued acks, then nack everything held.

        Bounded by ``timeout`` per step so that Spark's kill is not held up. Whatever is not
        handed back is redelivered when its lease lapses, as after a crash.
        """
        self._stop.set()
        # Pullers and the leaser must be done first: a Pull or a lease extension landing after
        # the nack would take the messages back for a whole lease.
        end = self._clock() + PULL_TIMEOUT_SECONDS + 1
        for t in self._threads:
            if t.name != "crdb-pubsub-acker":
                t.join(timeout=max(0.0, end - self._clock()))
        self.flush_acks(timeout)
        self.nack_all(timeout=timeout)

    def _prune_recent(self) -> None:
        now = self._clock()
        recent = self._recent
        while recent:
            key = next(iter(recent))
            if recent[key] > now:
                break
            del recent[key]

    # ------------------------------------------------------------------ AvailableNow

    def set_cutoff(self, publish_us: int) -> None:
        """Leave messages published after ``publish_us`` to a later run (Trigger.AvailableNow)."""
        with self._changed:
            self._cutoff_us = publish_us
            self._cutoff_set_at = self._clock()

    def drained(self) -> bool:
        """True once every subscription answered an empty pull after its last message arrived."""
        with self._changed:
            return self._drained_locked()

    def _drained_locked(self) -> bool:
        if self._buffer:
            return False
        since = self._cutoff_set_at
        for sub in self._subs:
            empty = self._last_empty.get(sub)
            if empty is None or empty < since or empty < self._last_message.get(sub, 0.0):
                return False
        return True

    def wait_for_data_or_drain(self, timeout: float) -> None:
        """Block until something is buffered, the backlog is drained, or an error is fatal."""
        end = self._clock() + timeout
        with self._changed:
            while not self._buffer and not self._drained_locked() and self._fatal is None:
                left = end - self._clock()
                if left <= 0:
                    return
                self._changed.wait(min(left, 0.5))

    # ------------------------------------------------------------------ health and numbers

    def raise_if_failed(self) -> None:
        if self._fatal is not None:
            exc = self._fatal
            raise ReceiverError(f"pulling from Pub/Sub at {self._endpoint} failed: {type(exc).__name__}: {getattr(exc, 'message', exc)}")

    def unavailable_for(self) -> float:
        since = self._unavailable_since
        return 0.0 if since is None else self._clock() - since

    def snapshot(self) -> dict[str, Any]:
        """Counters and gauges for progress reports and logs."""
        now_us = int(time.time() * 1_000_000)
        with self._changed:
            held = len(self._held)
            buffered = len(self._buffer)
            oldest = min((r.publish_us for r in self._held.values()), default=None)
            out = {
                "received": self.metrics.received,
                "buffered": buffered,
                "inFlight": held - buffered,
                "heldBytes": self._held_bytes,
                "acknowledged": self.metrics.acknowledged,
                "ackFailures": self.metrics.ack_failures,
                "leasesExtended": self.metrics.leases_extended,
                "leasesExpired": self.metrics.lease_expired,
                "redeliveredWhileHeld": self.metrics.redelivered_while_held,
                "redeliveriesDropped": self.metrics.duplicates_dropped,
                "pullErrors": self.metrics.pull_errors,
                "oldestUnackedAgeSeconds": round((now_us - oldest) / 1e6, 3) if oldest is not None else 0.0,
            }
            if self._unavailable_since is not None:
                out["unavailableForSeconds"] = round(self._clock() - self._unavailable_since, 1)
                out["lastError"] = self._last_error
        return out

    @property
    def held_count(self) -> int:
        return len(self._held)
