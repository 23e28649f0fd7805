"""An in-memory Pub/Sub with the emulator's semantics, for tests where timing must be exact.

It answers the four RPCs the source uses (``get_subscription``, ``pull``, ``acknowledge``,
``modify_ack_deadline``) on the generated client's interface, in real time:

* a Pull waits for messages up to ``timeout - 1`` s and then returns an empty response, as the
  emulator does (measured: it answers ~1 s before the client's deadline); ``empty="deadline"``
  raises DeadlineExceeded at the deadline instead, as the real service often does;
* every delivery gets a fresh ack id; an ack deadline that lapses makes the message available
  again (a new delivery attempt); ModifyAckDeadline 0 hands it back at once;
* an acknowledgement with a superseded or expired ack id is accepted without effect (the
  emulator's behaviour), or, for an exactly-once subscription, rejected per ack id with the
  error details the service sends (``ErrorInfo`` metadata ``{ack_id: reason}``);
* counters per message (deliveries, nacks) and per RPC let tests assert what happened.

Faults are injected with ``fail_acks`` (an exception to raise from every Acknowledge),
``drop_acks`` (Acknowledge answers OK but nothing is acknowledged: a lost ack), ``slow_pulls``
(the next N Pulls hang until their deadline, as a slow service would), ``lost_pulls`` (the next N
Pulls that find messages lease them and then fail with DeadlineExceeded: the answer came after
the client's deadline, so the messages are leased to nobody; ``lose_pull_after`` arms one such
Pull once that many deliveries were made), :meth:`outage` (every RPC fails
with UNAVAILABLE for a while) and :meth:`redeliver` (a duplicate delivery of a leased message,
which Pub/Sub may send at any time). ``create_subscription(ordered=True)`` delivers as the
emulator does with message ordering: a Pull brings at most one message of a key, and a key's
messages wait while one of them is delivered and not acknowledged. ``shuffle`` delivers in random order, as the service may.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.pubsub_v1.types import PullResponse


@dataclass
class _Msg:
    mid: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    publish_us: int
    ack_id: str | None = None  # current delivery
    lease_until: float = 0.0  # monotonic
    acked: bool = False


@dataclass
class _Sub:
    name: str
    ack_deadline: int
    exactly_once: bool = False
    ordered: bool = False
    messages: dict[str, _Msg] = field(default_factory=dict)


class FakePubSub:
    """The service: subscriptions and their messages. Thread-safe."""

    def __init__(self, *, empty: str = "response") -> None:
        assert empty in ("response", "deadline")
        self.empty = empty
        self._lock = threading.Condition()
        self._subs: dict[str, _Sub] = {}
        self._ids = itertools.count(1)
        self._ack_ids = itertools.count(1)
        self.deliveries: Counter[str] = Counter()  # message id -> deliveries
        self.nacks: Counter[str] = Counter()  # message id -> ModifyAckDeadline(0)
        self.calls: Counter[str] = Counter()
        self.pull_sizes: list[int] = []  # max_messages of every Pull
        self.modacks: list[tuple[float, str, int]] = []  # (monotonic, message id, seconds)
        self.fail_acks: BaseException | None = None
        self.drop_acks = False
        self.ack_hook: Callable[[list[str]], None] | None = None  # called before acks land
        self.slow_pulls = 0
        self.lost_pulls = 0
        self.lose_pull_after: int | None = None
        self.shuffle = False  # deliver available messages in random order (as the service may)
        self._down_until = 0.0  # monotonic: every RPC fails with UNAVAILABLE before this

    # ---------------------------------------------------------------- test side

    def create_subscription(
        self, name: str, *, ack_deadline: int = 10, exactly_once: bool = False, ordered: bool = False
    ) -> str:
        with self._lock:
            self._subs[name] = _Sub(name, ack_deadline, exactly_once, ordered)
        return name

    def outage(self, seconds: float) -> None:
        """Every RPC fails with UNAVAILABLE for ``seconds`` from now (leases keep running out)."""
        with self._lock:
            self._down_until = time.monotonic() + seconds

    def _check_up(self) -> None:
        if time.monotonic() < self._down_until:
            raise gexc.ServiceUnavailable("Pub/Sub is unreachable (fake outage)")

    def publish(
        self,
        sub: str,
        bodies: list[bytes],
        *,
        attributes: dict[str, str] | None = None,
        publish_us: int | None = None,
        ordering_key: str = "",
    ) -> list[str]:
        out = []
        with self._lock:
            s = self._subs[sub]
            for body in bodies:
                mid = str(next(self._ids))
                pub = publish_us if publish_us is not None else int(time.time() * 1_000_000)
                s.messages[mid] = _Msg(mid, body, dict(attributes or {}), ordering_key, pub)
                out.append(mid)
            self._lock.notify_all()
        return out

    def unacked(self, sub: str) -> list[str]:
        with self._lock:
            return [m.mid for m in self._subs[sub].messages.values() if not m.acked]

    def acked(self, sub: str) -> list[str]:
        with self._lock:
            return [m.mid for m in self._subs[sub].messages.values() if m.acked]

    def redeliver(self, sub: str, mid: str) -> None:
        """Make a leased message available again now (a duplicate delivery)."""
        with self._lock:
            m = self._subs[sub].messages[mid]
            m.lease_until = 0.0
            self._lock.notify_all()

    def client(self) -> FakeSubscriberClient:
        return FakeSubscriberClient(self)

    # ---------------------------------------------------------------- service side

    def _available(self, s: _Sub, now: float) -> list[_Msg]:
        free = [m for m in s.messages.values() if not m.acked and (m.ack_id is None or m.lease_until <= now)]
        if not s.ordered:
            return free
        # A key's next messages wait while one of its messages is out (delivered, not acknowledged);
        # one Pull brings the first waiting message of each free key (measured on the emulator).
        busy = {
            m.ordering_key
            for m in s.messages.values()
            if m.ordering_key and not m.acked and m.ack_id is not None and m.lease_until > now
        }
        out = []
        for m in free:
            if m.ordering_key:
                if m.ordering_key in busy:
                    continue
                busy.add(m.ordering_key)
            out.append(m)
        return out

    def pull(self, sub: str, max_messages: int, timeout: float | None, return_immediately: bool) -> list[_Msg]:
        self.calls["pull"] += 1
        self.pull_sizes.append(max_messages)
        self._check_up()
        start = time.monotonic()
        timeout = 60.0 if timeout is None else timeout
        with self._lock:
            slow = self.slow_pulls > 0 and not return_immediately
            if slow:
                self.slow_pulls -= 1
        if slow:
            time.sleep(timeout)
            raise gexc.DeadlineExceeded("Deadline Exceeded")
        wait_until = start + (
            0.0 if return_immediately else max(0.0, timeout - 1.0 if self.empty == "response" else timeout)
        )
        with self._lock:
            s = self._subs.get(sub)
            if s is None:
                raise gexc.NotFound(f"Subscription does not exist (resource={sub})")
            while True:
                now = time.monotonic()
                avail = self._available(s, now)
                if avail or now >= wait_until:
                    break
                nxt = min(
                    (m.lease_until for m in s.messages.values() if not m.acked and m.ack_id is not None),
                    default=wait_until,
                )
                self._lock.wait(max(0.001, min(wait_until, nxt) - now))
            if not avail and self.empty == "deadline" and not return_immediately:
                raise gexc.DeadlineExceeded("Deadline Exceeded")
            if self.shuffle:
                import random

                avail = random.sample(avail, len(avail))
            if self.lose_pull_after is not None and sum(self.deliveries.values()) >= self.lose_pull_after:
                self.lose_pull_after = None
                self.lost_pulls += 1
            out = avail[:max_messages]
            for m in out:
                m.ack_id = f"{sub}:ack{next(self._ack_ids)}"
                m.lease_until = now + s.ack_deadline
                self.deliveries[m.mid] += 1
            lost = bool(out) and self.lost_pulls > 0 and not return_immediately
            if lost:
                self.lost_pulls -= 1
            else:
                return [(_copy(m)) for m in out]
        # The answer arrived after the client's deadline: its messages are leased to nobody.
        time.sleep(max(0.0, start + timeout - time.monotonic()))
        raise gexc.DeadlineExceeded("Deadline Exceeded")

    def acknowledge(self, sub: str, ack_ids: list[str]) -> None:
        self.calls["acknowledge"] += 1
        self._check_up()
        if self.ack_hook is not None:
            self.ack_hook(list(ack_ids))
        if self.fail_acks is not None:
            raise self.fail_acks
        if self.drop_acks:
            return
        failures: dict[str, str] = {}
        with self._lock:
            s = self._subs[sub]
            now = time.monotonic()
            by_ack = {m.ack_id: m for m in s.messages.values() if m.ack_id is not None}
            for a in ack_ids:
                m = by_ack.get(a)
                if m is None or m.acked or m.lease_until <= now:
                    failures[a] = "PERMANENT_FAILURE_INVALID_ACK_ID"
                    continue
                m.acked = True
        if failures and self._subs[sub].exactly_once:
            raise _exactly_once_error(failures)

    def modify_ack_deadline(self, sub: str, ack_ids: list[str], seconds: int) -> None:
        self.calls["modify_ack_deadline"] += 1
        self._check_up()
        with self._lock:
            s = self._subs[sub]
            now = time.monotonic()
            by_ack = {m.ack_id: m for m in s.messages.values() if m.ack_id is not None}
            for a in ack_ids:
                m = by_ack.get(a)
                if m is None or m.acked or m.lease_until <= now:
                    continue
                m.lease_until = now + seconds
                self.modacks.append((now, m.mid, seconds))
                if seconds == 0:
                    self.nacks[m.mid] += 1
            self._lock.notify_all()


def _copy(m: _Msg) -> _Msg:
    return _Msg(m.mid, m.data, m.attributes, m.ordering_key, m.publish_us, m.ack_id, m.lease_until)


def _exactly_once_error(failures: dict[str, str]) -> gexc.InvalidArgument:
    """What the service (and the emulator) raise for an exactly-once subscription."""
    from google.rpc import error_details_pb2

    info = error_details_pb2.ErrorInfo(
        reason="EXACTLY_ONCE_ACKID_FAILURE", domain="pubsub.googleapis.com", metadata=failures
    )
    return gexc.InvalidArgument("", details=[info])


class _SubInfo:
    def __init__(self, s: _Sub) -> None:
        self.ack_deadline_seconds = s.ack_deadline
        self.enable_exactly_once_delivery = s.exactly_once
        self.enable_message_ordering = s.ordered
        self.name = s.name


def _field(request: Any, name: str, default: Any = None) -> Any:
    if isinstance(request, dict):
        return request.get(name, default)
    return getattr(request, name, default)


class FakeSubscriberClient:
    """The generated ``SubscriberClient``'s four methods, answered by a :class:`FakePubSub`."""

    def __init__(self, service: FakePubSub) -> None:
        self.service = service

    def get_subscription(
        self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any
    ) -> _SubInfo:
        name = _field(request, "subscription")
        s = self.service._subs.get(name)
        if s is None:
            raise gexc.NotFound(f"Subscription does not exist (resource={name})")
        return _SubInfo(s)

    def pull(self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any) -> Any:
        msgs = self.service.pull(
            _field(request, "subscription"),
            int(_field(request, "max_messages", 1000)),
            timeout,
            bool(_field(request, "return_immediately", False)),
        )
        # The raw protobuf response, as gRPC hands it to the source's raw Pull: proto-plus
        # wrappers built from many threads at once crashed the interpreter in a garbage
        # collection (seen once in a run of the suite).
        out = PullResponse.pb()()
        for m in msgs:
            rm = out.received_messages.add()
            rm.ack_id = m.ack_id
            rm.message.data = m.data
            rm.message.message_id = m.mid
            rm.message.publish_time.seconds = m.publish_us // 1_000_000
            rm.message.publish_time.nanos = (m.publish_us % 1_000_000) * 1000
            for k, v in m.attributes.items():
                rm.message.attributes[k] = v
            if m.ordering_key:
                rm.message.ordering_key = m.ordering_key
        return out

    def acknowledge(self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any) -> None:
        self.service.acknowledge(_field(request, "subscription"), list(_field(request, "ack_ids")))

    def modify_ack_deadline(
        self, request: Any = None, *, timeout: float | None = None, retry: Any = None, **_: Any
    ) -> None:
        self.service.modify_ack_deadline(
            _field(request, "subscription"),
            list(_field(request, "ack_ids")),
            int(_field(request, "ack_deadline_seconds")),
        )

    def close(self) -> None:
        pass

    @property
    def transport(self) -> Any:
        return self
