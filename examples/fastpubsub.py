#!/usr/bin/env python3
"""fastpubsub: an in-memory Pub/Sub gRPC server for the benchmarks, playing the service's terms.

Google's emulator answers at most 100 messages a Pull and, while messages are outstanding, pays
for the whole backlog on every Pull, so any benchmark of a consumer that holds messages until its
batch commits measures the emulator. This server does a constant amount of work per message
(each message is encoded once when published; a Pull's answer is the encoded messages joined), so
the consumer under test is what is measured. It is a measurement instrument, not a test double:
the tests use the official emulator.

    python examples/fastpubsub.py --port 8085            # or --port 0: prints "listening on 127.0.0.1:PORT"
    python examples/fastpubsub.py --port 0 --rtt-ms 25 --pull-cap 1000 --pull-fill 0.3   # the service's terms
    python examples/fastpubsub.py --selftest             # checks it with google-cloud-pubsub's own clients

    from fastpubsub import spawn, serve
    proc, host = spawn(rtt_ms=25)          # a process of its own (its CPU apart from the client's)
    with serve() as host: ...              # a thread of this process

Clients reach it as they reach the emulator: ``PUBSUB_EMULATOR_HOST=127.0.0.1:PORT``.

The service's terms (all off unless given). The real service is a network round trip away and
often answers fewer messages than asked; a receiver must absorb both.

* ``--rtt-ms MS`` (``--rtt-jitter-ms J``): every answer leaves MS ms (plus 0..J) after the server
  acted on its request; a sleep, no CPU. A StreamingPull response reaches the client that long
  after it was composed (up to 10 in flight a stream).
* ``--pull-cap N``: a Pull, and a StreamingPull response, carries at most N messages (the service:
  1,000).
* ``--pull-fill F`` (0 < F <= 1): a Pull that finds messages answers a uniformly drawn number of
  them between 1 and ``max(1, int(F * n))``, ``n`` the messages asked for after the cap; the draws
  come from a generator per subscription seeded with ``--seed`` and its name, so a client that
  pulls in the same order sees the same sizes from run to run.

What it implements: topics and subscriptions (create, get, list, delete), Publish, Pull,
Acknowledge, ModifyAckDeadline (0 hands a message back at once) and StreamingPull (the
subscription, the stream's ack deadline and its flow control from the first request; acks and
deadline changes on the stream or by unary call). Exactly-once subscriptions refuse an expired or
unknown ack id per id, as the service does (``ErrorInfo`` reason ``EXACTLY_ONCE_ACKID_FAILURE``),
and confirm a stream's acks; ordered subscriptions hold a key's later messages while one of it is
outstanding; a subscription with a dead-letter policy gets ``delivery_attempt``. Anything else
(Seek, snapshots, updates, schemas) answers UNIMPLEMENTED.

Where it differs from the service, which a reader of a benchmark should know:

* Delivery is first in, first out per subscription (a lapsed or handed-back message goes to the
  front); nothing is redelivered except after its lease lapsed or it was handed back.
* Leases lapse lazily: when a Pull, a stream or (exactly-once) an acknowledgement next looks.
  Until then an acknowledgement of a lapsed lease still counts on other subscriptions.
* On an ordered subscription a message handed back comes back alone (the service redelivers the
  key's later messages too); filters are stored, not applied (as the emulator); nothing is ever
  forwarded to a dead-letter topic; no retention limit (messages live until acknowledged).
* A Pull waits up to ``--pull-wait`` seconds (0.5) for messages, then answers empty.
* Ack deadlines of 1-600 s are accepted, like the emulator (the service: 10-600).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # gRPC's C core logs a GOAWAY and such at INFO: noise here
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc
from google.pubsub_v1.types import pubsub as _types

HERE = Path(__file__).resolve()
STREAM_BATCH = 1000  # most messages in one StreamingPull response (the service's)
STREAM_WINDOW = 10  # StreamingPull responses in flight a stream (composed, waiting out the round trip)
DEFAULT_ACK_DEADLINE = 10
_PB = {name: getattr(_types, name).pb() for name in (
    "Topic", "Subscription", "PubsubMessage", "PullRequest", "GetTopicRequest", "DeleteTopicRequest",
    "ListTopicsRequest", "ListTopicsResponse", "ListTopicSubscriptionsRequest", "ListTopicSubscriptionsResponse",
    "GetSubscriptionRequest", "DeleteSubscriptionRequest", "ListSubscriptionsRequest", "ListSubscriptionsResponse",
)}  # fmt: skip


# ------------------------------------------------------------------------------------ wire format
# Messages are encoded once, at Publish; answers are built by joining encoded pieces. Protobuf lets
# a field come after the others, so a message as the publisher sent it plus its message_id (3) and
# publish_time (4) is a valid PubsubMessage.


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint(i) for i in range(1 << 14)]


def _len(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else _varint(n)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte (field number << 3 | 2), its length, its bytes."""
    return bytes((tag,)) + _len(len(payload)) + payload


def _strings(tag: int, values: list[bytes]) -> bytes:
    return b"".join(bytes((tag,)) + _len(len(v)) + v for v in values)


def _raw_requests() -> dict[str, Any]:
    """Request classes whose repeated strings are ``bytes`` (the same wire format): upb parses a
    Publish's messages and an Acknowledge's ack ids into bytes in C, with no Python per item."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    shapes = {
        "Publish": [("topic", 1, F.TYPE_STRING, one), ("messages", 2, F.TYPE_BYTES, many)],
        "Acknowledge": [("subscription", 1, F.TYPE_STRING, one), ("ack_ids", 2, F.TYPE_BYTES, many)],
        "ModifyAckDeadline": [
            ("subscription", 1, F.TYPE_STRING, one),
            ("ack_deadline_seconds", 3, F.TYPE_INT32, one),
            ("ack_ids", 4, F.TYPE_BYTES, many),
        ],
        "StreamingPull": [
            ("subscription", 1, F.TYPE_STRING, one),
            ("ack_ids", 2, F.TYPE_BYTES, many),
            ("modify_deadline_seconds", 3, F.TYPE_INT32, many),
            ("modify_deadline_ack_ids", 4, F.TYPE_BYTES, many),
            ("stream_ack_deadline_seconds", 5, F.TYPE_INT32, one),
            ("max_outstanding_messages", 7, F.TYPE_INT64, one),
            ("max_outstanding_bytes", 8, F.TYPE_INT64, one),
        ],
    }
    proto = descriptor_pb2.FileDescriptorProto(name="fastpubsub_raw.proto", package="fastpubsub", syntax="proto3")
    for name, fields in shapes.items():
        msg = proto.message_type.add(name=name)
        for fname, number, ftype, label in fields:
            msg.field.add(name=fname, number=number, type=ftype, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"fastpubsub.{n}")) for n in shapes}


_RAW = _raw_requests()


# ------------------------------------------------------------------------------------ the terms


@dataclass
class Terms:
    """The service's terms this server plays: a round trip per answer, capped and partial Pulls."""

    rtt_ms: float = 0.0
    rtt_jitter_ms: float = 0.0
    pull_cap: int = 0
    pull_fill: float = 1.0
    seed: int = 0
    _jitter: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.pull_fill <= 1:
            raise ValueError(f"pull_fill must be in (0, 1], got {self.pull_fill}")
        self._jitter = random.Random(self.seed)

    def delay(self) -> float:
        """Seconds an answer waits before it leaves."""
        if not self.rtt_ms:
            return 0.0
        return (self.rtt_ms + (self._jitter.uniform(0, self.rtt_jitter_ms) if self.rtt_jitter_ms else 0)) / 1000

    def answer_size(self, asked: int, rng: random.Random) -> int:
        """How many messages an answer may carry when ``asked`` were asked for."""
        n = min(asked, self.pull_cap) if self.pull_cap else asked
        if self.pull_fill < 1:
            n = rng.randint(1, max(1, int(self.pull_fill * n)))
        return n

    def flags(self) -> list[str]:
        out = []
        for name in ("rtt_ms", "rtt_jitter_ms", "pull_cap", "pull_fill", "seed"):
            value = getattr(self, name)
            if value != Terms.__dataclass_fields__[name].default:
                out += [f"--{name.replace('_', '-')}", str(value)]
        return out


# ------------------------------------------------------------------------------------ state


class Abort(Exception):
    """An RPC's error answer."""

    def __init__(self, code: grpc.StatusCode, message: str, ack_failures: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.ack_failures = code, message, ack_failures


@dataclass(eq=False)
class Message:
    """One published message: its encoded PubsubMessage and what delivery needs to know of it."""

    number: int
    encoded: bytes
    size: int
    key: str


@dataclass(eq=False)
class Lease:
    message: Message
    deadline: float
    stream: Stream | None


@dataclass(eq=False)
class Stream:
    """One StreamingPull's flow control: what was sent on it and is not yet acked, handed back or lapsed."""

    subscription: Subscription
    ack_deadline: int
    max_messages: int
    max_bytes: int
    count: int = 0
    nbytes: int = 0
    closed: bool = False
    confirmations: list[bytes] = field(default_factory=list)

    def room(self) -> int:
        """How many more messages may be sent now (0: none)."""
        if self.closed or (self.max_bytes and self.nbytes >= self.max_bytes):
            return 0
        return max(0, self.max_messages - self.count) if self.max_messages else STREAM_BATCH


class Subscription:
    """A subscription's messages: ready ones in order, leased ones by ack id with their deadlines."""

    def __init__(self, pb: Any, topic: str, number: int, ack_id_len: int, seed: int) -> None:
        self.pb, self.name, self.topic = pb, pb.name, topic
        self.ordered = pb.enable_message_ordering
        self.exactly_once = pb.enable_exactly_once_delivery
        self.counts_attempts = bool(pb.dead_letter_policy.dead_letter_topic)
        self.rng = random.Random(f"{seed}/{self.name}")
        self.ready: deque[Message] = deque()  # unkeyed (or unordered) messages, next first
        self.keyed: dict[str, deque[Message]] = {}  # ordered subscriptions: a key's messages
        self.keys_ready: deque[str] = deque()  # keys that may have a message to deliver
        self.keys_out: dict[str, int] = {}  # a key's messages outstanding
        self.leases: dict[bytes, Lease] = {}
        self.expiry: list[tuple[float, bytes]] = []  # (deadline, ack id); stale entries skipped
        self.attempts: dict[int, int] = {}
        self._prefix = f"{number:x}-".encode().ljust(max(8, ack_id_len - 16), b"a")
        self._ack_ids = itertools.count(1)

    def add(self, message: Message, front: bool = False) -> None:
        if self.ordered and message.key:
            queue = self.keyed.setdefault(message.key, deque())
            queue.appendleft(message) if front else queue.append(message)
            if not self.keys_out.get(message.key):
                self.keys_ready.appendleft(message.key) if front else self.keys_ready.append(message.key)
        else:
            self.ready.appendleft(message) if front else self.ready.append(message)

    def backlog(self) -> int:
        return len(self.ready) + sum(map(len, self.keyed.values()))

    def _next(self, taking: set[str]) -> Message | None:
        if self.ready:
            return self.ready.popleft()
        while self.keys_ready:
            key = self.keys_ready[0]
            queue = self.keyed.get(key)
            if not queue or (self.keys_out.get(key) and key not in taking):
                self.keys_ready.popleft()  # drained, or waiting for its outstanding messages
                continue
            taking.add(key)  # several of a key may go in one answer, in order
            message = queue.popleft()
            if not queue:
                self.keys_ready.popleft()
            return message
        return None

    def take(self, n: int, now: float, deadline: int, stream: Stream | None = None) -> list[tuple[bytes, Lease]]:
        """Lease up to ``n`` messages (a stream: within its flow control)."""
        out: list[tuple[bytes, Lease]] = []
        taking: set[str] = set()
        while len(out) < n:
            if stream is not None and stream.max_bytes and stream.nbytes >= stream.max_bytes:
                break
            message = self._next(taking)
            if message is None:
                break
            ack_id = self._prefix + b"%016x" % next(self._ack_ids)
            lease = Lease(message, now + deadline, stream)
            self.leases[ack_id] = lease
            heapq.heappush(self.expiry, (lease.deadline, ack_id))
            if message.key and self.ordered:
                self.keys_out[message.key] = self.keys_out.get(message.key, 0) + 1
            if self.counts_attempts:
                self.attempts[message.number] = self.attempts.get(message.number, 0) + 1
            if stream is not None:
                stream.count += 1
                stream.nbytes += message.size
            out.append((ack_id, lease))
        return out

    def end(self, ack_id: bytes, lease: Lease, back: bool) -> None:
        """A lease is over: acknowledged (``back`` False), or handed back / lapsed (``back`` True)."""
        del self.leases[ack_id]
        message = lease.message
        if lease.stream is not None:
            lease.stream.count -= 1
            lease.stream.nbytes -= message.size
        if self.ordered and message.key:
            left = self.keys_out[message.key] - 1
            self.keys_out[message.key] = left
            if back:
                self.add(message, front=True)
            elif not left and self.keyed.get(message.key):
                self.keys_ready.append(message.key)
        elif back:
            self.ready.appendleft(message)
        if not back:
            self.attempts.pop(message.number, None)

    def expire(self, now: float) -> int:
        """Hand back every lease whose deadline passed; how many."""
        n = 0
        while self.expiry and self.expiry[0][0] <= now:
            deadline, ack_id = heapq.heappop(self.expiry)
            lease = self.leases.get(ack_id)
            if lease is not None and lease.deadline == deadline:
                self.end(ack_id, lease, back=True)
                n += 1
        return n

    def next_expiry(self) -> float | None:
        return self.expiry[0][0] if self.expiry else None

    def received(self, taken: list[tuple[bytes, Lease]]) -> bytes:
        """The ReceivedMessage fields (1) of a PullResponse or StreamingPullResponse."""
        parts = []
        for ack_id, lease in taken:
            body = (
                b"\x0a"
                + _len(len(ack_id))
                + ack_id
                + b"\x12"
                + _len(len(lease.message.encoded))
                + lease.message.encoded
            )
            if self.counts_attempts:
                body += b"\x18" + _varint(self.attempts.get(lease.message.number, 1))
            parts.append(b"\x0a" + _len(len(body)) + body)
        return b"".join(parts)

    def properties(self) -> bytes:
        """A StreamingPullResponse's subscription_properties (4), empty when neither is on."""
        inner = (b"\x08\x01" if self.exactly_once else b"") + (b"\x10\x01" if self.ordered else b"")
        return _field(0x22, inner) if inner else b""


class State:
    """Every topic and subscription, under one lock; a condition wakes Pulls and streams."""

    def __init__(self, terms: Terms, ack_id_len: int = 64) -> None:
        self.terms, self.ack_id_len = terms, ack_id_len
        self.lock = threading.Condition()
        self.topics: dict[str, bytes] = {}  # name -> the Topic as stored
        self.subs: dict[str, Subscription] = {}
        self.by_topic: dict[str, list[Subscription]] = {}
        self._numbers = itertools.count(1)
        self._subs_made = itertools.count(1)

    def subscription(self, name: str) -> Subscription:
        sub = self.subs.get(name)
        if sub is None:
            raise Abort(grpc.StatusCode.NOT_FOUND, f"Subscription does not exist (resource={name})")
        return sub

    # -- admin
    def create_topic(self, request: bytes) -> bytes:
        pb = _PB["Topic"].FromString(request)
        if not pb.name.startswith("projects/") or "/topics/" not in pb.name:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid topic name: {pb.name}")
        with self.lock:
            if pb.name in self.topics:
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, "Topic already exists")
            self.topics[pb.name] = pb.SerializeToString()
            self.by_topic[pb.name] = []
            return self.topics[pb.name]

    def create_subscription(self, request: bytes) -> bytes:
        pb = _PB["Subscription"].FromString(request)
        if not pb.name.startswith("projects/") or "/subscriptions/" not in pb.name:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid subscription name: {pb.name}")
        pb.ack_deadline_seconds = pb.ack_deadline_seconds or DEFAULT_ACK_DEADLINE
        if not 1 <= pb.ack_deadline_seconds <= 600:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid ack deadline: {pb.ack_deadline_seconds}")
        if not pb.HasField("message_retention_duration"):
            pb.message_retention_duration.seconds = 7 * 24 * 3600
        with self.lock:
            if pb.topic not in self.topics:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"Topic does not exist (resource={pb.topic})")
            if pb.name in self.subs:
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, "Subscription already exists")
            sub = Subscription(pb, pb.topic, next(self._subs_made), self.ack_id_len, self.terms.seed)
            self.subs[pb.name] = sub
            self.by_topic[pb.topic].append(sub)
            return pb.SerializeToString()

    def delete_topic(self, name: str) -> None:
        with self.lock:
            if self.topics.pop(name, None) is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"Topic does not exist (resource={name})")
            for sub in self.by_topic.pop(name):
                sub.pb.topic = "_deleted-topic_"

    def delete_subscription(self, name: str) -> None:
        with self.lock:
            sub = self.subscription(name)
            del self.subs[name]
            if sub.topic in self.by_topic:
                self.by_topic[sub.topic].remove(sub)
            self.lock.notify_all()

    # -- data
    def publish(self, request: bytes) -> bytes:
        req = _RAW["Publish"].FromString(request)
        now = time.time()
        stamp = b"\x08" + _varint(int(now)) + b"\x10" + _varint(int(now % 1 * 1e9))
        tail = _field(0x22, stamp)  # publish_time (4)
        with self.lock:
            subs = self.by_topic.get(req.topic)
            if subs is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"Topic does not exist (resource={req.topic})")
            keyed = any(s.ordered for s in subs)
            ids = []
            for raw in req.messages:
                number = next(self._numbers)
                mid = b"%d" % number
                key = _PB["PubsubMessage"].FromString(raw).ordering_key if keyed else ""
                message = Message(number, raw + b"\x1a" + _len(len(mid)) + mid + tail, len(raw), key)
                for sub in subs:
                    sub.add(message)
                ids.append(mid)
            self.lock.notify_all()
        return _strings(0x0A, ids)  # PublishResponse.message_ids (1)

    def pull(self, name: str, max_messages: int, immediately: bool, wait: float) -> bytes:
        if max_messages <= 0:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "max_messages must be positive")
        end = time.monotonic() + (0 if immediately else wait)
        with self.lock:
            sub = self.subscription(name)
            n = self.terms.answer_size(max_messages, sub.rng)
            while True:
                now = time.monotonic()
                sub.expire(now)
                taken = sub.take(n, now, sub.pb.ack_deadline_seconds)
                if taken or now >= end or self.subs.get(name) is not sub:
                    return sub.received(taken)
                nxt = sub.next_expiry()
                self.lock.wait(min(end, nxt if nxt is not None else end) - now)

    def _settle(self, sub: Subscription, ack_ids: list[bytes], seconds: int | None) -> list[bytes]:
        """Acknowledge (``seconds`` None) or change the deadline of ``ack_ids``; the ones an
        exactly-once subscription refuses (unknown, or their lease lapsed)."""
        now = time.monotonic()
        if sub.exactly_once:
            sub.expire(now)
        refused = []
        for ack_id in ack_ids:
            lease = sub.leases.get(ack_id)
            if lease is None:
                refused.append(ack_id)
            elif seconds is None or seconds == 0:
                sub.end(ack_id, lease, back=seconds == 0)
            else:
                lease.deadline = now + seconds
                heapq.heappush(sub.expiry, (lease.deadline, ack_id))
        self.lock.notify_all()
        return refused if sub.exactly_once else []

    def settle(self, name: str, ack_ids: list[bytes], seconds: int | None) -> None:
        if seconds is not None and not 0 <= seconds <= 600:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid ack deadline: {seconds}")
        with self.lock:
            refused = self._settle(self.subscription(name), ack_ids, seconds)
        if refused:
            failures = {a.decode(): "PERMANENT_FAILURE_INVALID_ACK_ID" for a in refused}
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "Some acknowledgement ids were invalid.", failures)


# ------------------------------------------------------------------------------------ gRPC


def _abort(context: grpc.ServicerContext, exc: Abort) -> None:
    if not exc.ack_failures:
        context.abort(exc.code, exc.message)
    from google.protobuf import any_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2
    from grpc_status import rpc_status

    info = error_details_pb2.ErrorInfo(
        reason="EXACTLY_ONCE_ACKID_FAILURE", domain="pubsub.googleapis.com", metadata=exc.ack_failures
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=exc.message, details=[detail])
    context.abort_with_status(rpc_status.to_status(status))


class Service:
    """The Publisher and Subscriber methods on one :class:`State`, each answer after the round trip."""

    def __init__(self, state: State, pull_wait: float) -> None:
        self.state, self.terms, self.pull_wait = state, state.terms, pull_wait

    def _unary(self, fn: Callable[[bytes, grpc.ServicerContext], bytes]) -> grpc.RpcMethodHandler:
        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                answer = fn(request, context)
            except Abort as exc:
                if delay := self.terms.delay():
                    time.sleep(delay)
                _abort(context, exc)
            if delay := self.terms.delay():
                time.sleep(delay)
            return answer

        return grpc.unary_unary_rpc_method_handler(handle)

    def handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        s = self.state

        def stored_topic(req: bytes, _: Any) -> bytes:
            name = _PB["GetTopicRequest"].FromString(req).topic
            with s.lock:
                if name not in s.topics:
                    raise Abort(grpc.StatusCode.NOT_FOUND, f"Topic does not exist (resource={name})")
                return s.topics[name]

        def list_topics(req: bytes, _: Any) -> bytes:
            project = _PB["ListTopicsRequest"].FromString(req).project + "/"
            with s.lock:
                topics = [_PB["Topic"].FromString(t) for n, t in s.topics.items() if n.startswith(project)]
            return _PB["ListTopicsResponse"](topics=topics).SerializeToString()

        def topic_subscriptions(req: bytes, _: Any) -> bytes:
            name = _PB["ListTopicSubscriptionsRequest"].FromString(req).topic
            with s.lock:
                subs = [x.name for x in s.by_topic.get(name, [])]
            return _PB["ListTopicSubscriptionsResponse"](subscriptions=subs).SerializeToString()

        def get_subscription(req: bytes, _: Any) -> bytes:
            name = _PB["GetSubscriptionRequest"].FromString(req).subscription
            with s.lock:
                return s.subscription(name).pb.SerializeToString()

        def list_subscriptions(req: bytes, _: Any) -> bytes:
            project = _PB["ListSubscriptionsRequest"].FromString(req).project + "/"
            with s.lock:
                subs = [x.pb for n, x in s.subs.items() if n.startswith(project)]
            return _PB["ListSubscriptionsResponse"](subscriptions=subs).SerializeToString()

        def pull(req: bytes, context: grpc.ServicerContext) -> bytes:
            pb = _PB["PullRequest"].FromString(req)
            wait = self.pull_wait
            left = context.time_remaining()
            if left is not None:  # answer before the client gives up, round trip included
                wait = max(0.0, min(wait, left - self.terms.rtt_ms / 1000 - 0.05))
            return s.pull(pb.subscription, pb.max_messages, pb.return_immediately, wait)

        def acknowledge(req: bytes, _: Any) -> bytes:
            pb = _RAW["Acknowledge"].FromString(req)
            s.settle(pb.subscription, list(pb.ack_ids), None)
            return b""

        def modify(req: bytes, _: Any) -> bytes:
            pb = _RAW["ModifyAckDeadline"].FromString(req)
            s.settle(pb.subscription, list(pb.ack_ids), pb.ack_deadline_seconds)
            return b""

        def delete_topic(req: bytes, _: Any) -> bytes:
            s.delete_topic(_PB["DeleteTopicRequest"].FromString(req).topic)
            return b""

        def delete_subscription(req: bytes, _: Any) -> bytes:
            s.delete_subscription(_PB["DeleteSubscriptionRequest"].FromString(req).subscription)
            return b""

        pub, sub = "/google.pubsub.v1.Publisher/", "/google.pubsub.v1.Subscriber/"
        unary = {
            pub + "CreateTopic": lambda r, _: s.create_topic(r),
            pub + "GetTopic": stored_topic,
            pub + "ListTopics": list_topics,
            pub + "ListTopicSubscriptions": topic_subscriptions,
            pub + "DeleteTopic": delete_topic,
            pub + "Publish": lambda r, _: s.publish(r),
            sub + "CreateSubscription": lambda r, _: s.create_subscription(r),
            sub + "GetSubscription": get_subscription,
            sub + "ListSubscriptions": list_subscriptions,
            sub + "DeleteSubscription": delete_subscription,
            sub + "Pull": pull,
            sub + "Acknowledge": acknowledge,
            sub + "ModifyAckDeadline": modify,
        }
        out = {name: self._unary(fn) for name, fn in unary.items()}
        out[sub + "StreamingPull"] = grpc.stream_stream_rpc_method_handler(self.streaming_pull)
        return out

    # -- StreamingPull
    def _stream_request(self, stream: Stream, req: Any) -> None:
        """Apply one StreamingPull request's acks and deadline changes (under the lock)."""
        sub = stream.subscription
        if len(req.modify_deadline_seconds) != len(req.modify_deadline_ack_ids):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "modify_deadline_seconds and ack ids differ in length")
        if req.ack_ids:
            refused = self.state._settle(sub, list(req.ack_ids), None)
            if sub.exactly_once:
                stream.confirmations.append(_confirmation(0x2A, list(req.ack_ids), refused))
        by_seconds: dict[int, list[bytes]] = {}
        for seconds, ack_id in zip(req.modify_deadline_seconds, req.modify_deadline_ack_ids):
            by_seconds.setdefault(seconds, []).append(ack_id)
        for seconds, ids in by_seconds.items():
            refused = self.state._settle(sub, ids, seconds)
            if sub.exactly_once:
                stream.confirmations.append(_confirmation(0x1A, ids, refused))

    def streaming_pull(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        s = self.state
        try:
            first = _RAW["StreamingPull"].FromString(next(requests))
        except StopIteration:
            return
        deadline = first.stream_ack_deadline_seconds
        if not 1 <= deadline <= 600:  # the service: 10-600
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid stream_ack_deadline_seconds: {deadline}")
        with s.lock:
            try:
                sub = s.subscription(first.subscription)
            except Abort as exc:
                context.abort(exc.code, exc.message)
            stream = Stream(sub, deadline, first.max_outstanding_messages, first.max_outstanding_bytes)
            self._stream_request(stream, first)

        def close() -> None:
            with s.lock:
                stream.closed = True
                s.lock.notify_all()

        def read() -> None:
            try:
                for raw in requests:
                    with s.lock:
                        self._stream_request(stream, _RAW["StreamingPull"].FromString(raw))
            except (Abort, grpc.RpcError, ValueError):
                pass
            close()

        context.add_callback(close)
        threading.Thread(target=read, name="fastpubsub-stream-reader", daemon=True).start()
        in_flight: deque[tuple[float, bytes, list[tuple[bytes, Lease]]]] = deque()
        head = sub.properties()
        try:
            while True:
                with s.lock:
                    item = None
                    while item is None:
                        if stream.closed or s.subs.get(sub.name) is not sub:
                            return
                        now = time.monotonic()
                        sub.expire(now)
                        for conf in stream.confirmations:
                            in_flight.append((now + self.terms.delay(), conf, []))
                        stream.confirmations.clear()
                        room = stream.room()
                        if len(in_flight) < STREAM_WINDOW and room:
                            # drawn from a full response, then trimmed to the room (as the service)
                            n = min(self.terms.answer_size(STREAM_BATCH, sub.rng), room)
                            taken = sub.take(n, now, stream.ack_deadline, stream)
                            if taken:
                                body, head = head + sub.received(taken), b""
                                in_flight.append((now + self.terms.delay(), body, taken))
                        if in_flight and in_flight[0][0] <= now:
                            item = in_flight.popleft()
                            break
                        waits = [0.5] + [in_flight[0][0] - now] if in_flight else [0.5]
                        if (nxt := sub.next_expiry()) is not None:
                            waits.append(nxt - now)
                        s.lock.wait(max(0.0, min(waits)))
                yield item[1]
        finally:
            with s.lock:  # composed but never sent: back to the front, at once
                for _, _, taken in reversed(in_flight):
                    for ack_id, lease in reversed(taken):
                        if sub.leases.get(ack_id) is lease:
                            sub.end(ack_id, lease, back=True)
                stream.closed = True
                s.lock.notify_all()


def _confirmation(tag: int, acks: list[bytes], refused: list[bytes]) -> bytes:
    """A StreamingPullResponse holding only an acknowledge_confirmation (5, tag 0x2A) or a
    modify_ack_deadline_confirmation (3, tag 0x1A): the ack ids that went through, the invalid ones."""
    bad = set(refused)
    inner = _strings(0x0A, [a for a in acks if a not in bad]) + _strings(0x12, refused)
    return _field(tag, inner)


class FastPubSub:
    """The server: ``start()`` answers its ``host:port``, ``stop()`` ends it."""

    def __init__(self, terms: Terms | None = None, *, pull_wait: float = 0.5, ack_id_len: int = 64,
                 max_workers: int | None = None, host: str = "127.0.0.1") -> None:  # fmt: skip
        self.terms = terms or Terms()
        self.state = State(self.terms, ack_id_len)
        # A call waiting out the round trip holds a handler thread: with a round trip, many more.
        workers = max_workers or (512 if self.terms.rtt_ms else 64)
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=options)
        handlers = Service(self.state, pull_wait).handlers()

        class Generic(grpc.GenericRpcHandler):
            def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
                return handlers.get(details.method)

        self.server.add_generic_rpc_handlers((Generic(),))
        self.host = host

    def start(self, port: int = 0) -> str:
        bound = self.server.add_insecure_port(f"{self.host}:{port}")
        if not bound:
            raise OSError(f"fastpubsub: cannot bind {self.host}:{port}")
        self.server.start()
        return f"{self.host}:{bound}"

    def stop(self, grace: float | None = 0.5) -> None:
        with self.state.lock:
            self.state.lock.notify_all()
        self.server.stop(grace).wait()


# ------------------------------------------------------------------------------------ helpers


def spawn(port: int = 0, *, pull_wait: float = 0.5, **terms: Any) -> tuple[subprocess.Popen, str]:
    """Start the server in a process of its own; ``(process, "host:port")``. ``terms``: :class:`Terms`'s fields."""
    args = [sys.executable, str(HERE), "--port", str(port), "--pull-wait", str(pull_wait), *Terms(**terms).flags()]
    env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split()[-1]
    proc.wait()
    raise RuntimeError(f"fastpubsub did not start (exit {proc.returncode}): {' '.join(args)}")


@contextlib.contextmanager
def serve(port: int = 0, *, process: bool = False, **terms: Any) -> Iterator[str]:
    """The server's ``host:port`` for the ``with`` block: in a thread, or with ``process=True`` in a process."""
    if process:
        proc, host = spawn(port, **terms)
        try:
            yield host
        finally:
            proc.terminate()
            proc.wait(10)
        return
    server = FastPubSub(Terms(**terms))
    try:
        yield server.start(port)
    finally:
        server.stop()


@contextlib.contextmanager
def bench_server(official_emulator: bool = False, project: str = "bench-project") -> Iterator[str]:
    """Where a benchmark runs: ``PUBSUB_EMULATOR_HOST`` when set; else Google's emulator when
    asked (``official_emulator``); else this server, in a process of its own."""
    if official_emulator or os.environ.get("PUBSUB_EMULATOR_HOST"):
        from crdb_pubsub.emulator import emulator

        with emulator(project=project) as host:
            yield host
    else:
        with serve(process=True) as host:
            yield host


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (from /proc)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------ self-test


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"fastpubsub selftest: {what}")
    print(f"  ok  {what}", flush=True)


def selftest() -> None:
    """Check the server with google-cloud-pubsub's own clients: what the benchmarks rely on."""
    from google.api_core import exceptions as gexc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1

    def clients(host: str) -> tuple[Any, Any]:
        opts = {"api_endpoint": host}
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

        pub = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
            transport=PublisherGrpcTransport(channel=grpc.insecure_channel(host), credentials=AnonymousCredentials()),
            client_options=opts,
        )
        sub = pubsub_v1.SubscriberClient(
            transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(host), credentials=AnonymousCredentials()),
            client_options=opts,
        )
        return pub, sub

    def setup(pub: Any, sub: Any, name: str, **settings: Any) -> tuple[str, str]:
        topic, path = f"projects/self/topics/{name}", f"projects/self/subscriptions/{name}"
        with contextlib.suppress(gexc.AlreadyExists):
            pub.create_topic(name=topic)
        sub.create_subscription(request={"name": path, "topic": topic, **settings})
        return topic, path

    def publish(pub: Any, topic: str, n: int, key: str = "") -> list[str]:
        futs = [pub.publish(topic, b"m%d" % i, ordering_key=key, i=str(i)) for i in range(n)]
        return [f.result(30) for f in futs]

    def drain(sub: Any, path: str, n: int, per_pull: int = 1000) -> list[Any]:
        got: list[Any] = []
        while len(got) < n:
            resp = sub.pull(subscription=path, max_messages=per_pull, timeout=10)
            if not resp.received_messages:
                break
            got += resp.received_messages
            sub.acknowledge(subscription=path, ack_ids=[m.ack_id for m in resp.received_messages])
        return got

    server = FastPubSub(Terms())
    host = server.start()
    pub, sub = clients(host)
    try:
        topic, path = setup(pub, sub, "plain", ack_deadline_seconds=1)
        ids = publish(pub, topic, 2500)
        got = drain(sub, path, 2500)
        _check(
            sorted(m.message.message_id for m in got) == sorted(ids),
            "2,500 published, pulled and acknowledged once each",
        )
        # By its id: the publisher's batches may reach the server in any order.
        first = next(m.message for m in got if m.message.message_id == ids[0])
        _check(first.data == b"m0" and first.attributes["i"] == "0" and first.publish_time.timestamp() > 0,
               "data, attributes, message id and publish time as published")  # fmt: skip
        _check(not sub.pull(subscription=path, max_messages=10, timeout=5).received_messages, "nothing left after")
        _check(sub.get_subscription(subscription=path).ack_deadline_seconds == 1, "GetSubscription: the settings")

        publish(pub, topic, 3)
        held = sub.pull(subscription=path, max_messages=10, timeout=5).received_messages
        sub.modify_ack_deadline(subscription=path, ack_ids=[held[0].ack_id], ack_deadline_seconds=0)
        again = sub.pull(subscription=path, max_messages=10, timeout=5).received_messages
        _check([m.message.message_id for m in again] == [held[0].message.message_id], "a hand-back comes back at once")
        time.sleep(1.2)
        lapsed = drain(sub, path, 3)
        _check(len(lapsed) == 3 and {m.ack_id for m in lapsed}.isdisjoint(m.ack_id for m in [*held, *again]),
               "lapsed leases come back with fresh ack ids")  # fmt: skip

        topic, path = setup(pub, sub, "eod", ack_deadline_seconds=1, enable_exactly_once_delivery=True)
        publish(pub, topic, 2)
        (old, *_) = sub.pull(subscription=path, max_messages=2, timeout=5).received_messages
        time.sleep(1.2)
        try:
            sub.acknowledge(subscription=path, ack_ids=[old.ack_id])
            refused = False
        except gexc.InvalidArgument as exc:
            refused = any(getattr(d, "reason", "") == "EXACTLY_ONCE_ACKID_FAILURE" for d in exc.details)
        _check(refused, "exactly-once: an ack id whose lease lapsed is refused per id")

        topic, path = setup(pub, sub, "ordered", enable_message_ordering=True)
        ids = publish(pub, topic, 5, key="k")
        one = sub.pull(subscription=path, max_messages=3, timeout=5).received_messages
        none = sub.pull(subscription=path, max_messages=3, return_immediately=True, timeout=5).received_messages
        _check([m.message.message_id for m in one] == ids[:3] and not none,
               "ordered: a key's messages in order, none more while they are outstanding")  # fmt: skip
        sub.acknowledge(subscription=path, ack_ids=[m.ack_id for m in one])
        rest = drain(sub, path, 2)
        _check([m.message.message_id for m in rest] == ids[3:], "ordered: the rest after the acknowledgement")

        topic, path = setup(pub, sub, "streamed", ack_deadline_seconds=10)
        ids = publish(pub, topic, 3000)
        seen: list[str] = []
        done = threading.Event()

        def callback(message: Any) -> None:
            seen.append(message.message_id)
            message.ack()
            if len(seen) >= 3000:
                done.set()

        future = sub.subscribe(path, callback, flow_control=pubsub_v1.types.FlowControl(max_messages=500))
        done.wait(60)
        future.cancel()
        with contextlib.suppress(Exception):
            future.result(10)
        time.sleep(0.5)
        left = sub.pull(subscription=path, max_messages=1000, return_immediately=True, timeout=5).received_messages
        _check(
            sorted(set(seen)) == sorted(ids) and not left,
            "StreamingPull: subscribe() drains 3,000 and acknowledges them",
        )
    finally:
        server.stop()

    terms = Terms(rtt_ms=50, pull_cap=100, pull_fill=0.5, seed=1)
    server = FastPubSub(terms)
    host = server.start()
    pub, sub = clients(host)
    try:
        topic, path = setup(pub, sub, "terms")
        publish(pub, topic, 1000)
        sizes, times = [], []
        for _ in range(5):
            t0 = time.monotonic()
            resp = sub.pull(subscription=path, max_messages=1000, timeout=10)
            times.append(time.monotonic() - t0)
            sizes.append(len(resp.received_messages))
            sub.acknowledge(subscription=path, ack_ids=[m.ack_id for m in resp.received_messages])
        _check(all(1 <= n <= 50 for n in sizes), f"--pull-cap 100 --pull-fill 0.5: answers of 1-50 ({sizes})")
        _check(min(times) >= 0.05, f"--rtt-ms 50: each call takes at least 50 ms ({min(times) * 1000:.0f} ms)")
    finally:
        server.stop()
    print("fastpubsub selftest: passed", flush=True)


# ------------------------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8085, help="0: a free port")
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="each answer leaves this long after the request acted")
    ap.add_argument("--rtt-jitter-ms", type=float, default=0.0, help="plus a uniform 0..this")
    ap.add_argument("--pull-cap", type=int, default=0, help="most messages an answer carries (0: as asked)")
    ap.add_argument("--pull-fill", type=float, default=1.0, help="answers of 1..fill x asked messages, drawn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pull-wait", type=float, default=0.5, help="seconds a Pull waits for messages")
    ap.add_argument("--ack-id-len", type=int, default=64)
    ap.add_argument("--max-workers", type=int, default=0)
    ap.add_argument("--selftest", action="store_true", help="check the server with google-cloud-pubsub's clients")
    args = ap.parse_args(argv)
    if args.selftest:
        selftest()
        return 0
    terms = Terms(args.rtt_ms, args.rtt_jitter_ms, args.pull_cap, args.pull_fill, args.seed)
    server = FastPubSub(terms, pull_wait=args.pull_wait, ack_id_len=args.ack_id_len,
                        max_workers=args.max_workers or None, host=args.host)  # fmt: skip
    print(f"listening on {server.start(args.port)}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
