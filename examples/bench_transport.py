"""Benchmark of the transport alone: unary Pulls in flight vs. StreamingPull, at no round trip and on the service's terms.

No Spark, no decoding: how fast a client drains a backlog from ``examples/fastpubsub.py`` (an
in-memory Pub/Sub server, a measurement instrument outside the package, run in a process of its own) and what it costs this process's CPU a
message, for each way of pulling a receiver could use:

  (a) the plain loop: one unary Pull(1000), then Acknowledge its ack ids, in turn (the baseline);
  (b) K unary Pulls(1000) in flight (K threads, one Pull each), their ack ids acknowledged
      asynchronously by sender threads in calls of up to 2,500 (the shape of the connector's
      receiver: ``driver/pullers.py`` and ``pubsub/acker.py``; K = 2, 4, 8, 16 here, where the
      receiver finds K itself by ``pubsub/concurrency.py``);
  (c) S raw StreamingPulls with their own acknowledgement control: opened with the generated
      client (``google.pubsub_v1.SubscriberClient.streaming_pull``), first request with the
      subscription, ``stream_ack_deadline_seconds`` 60 and ``max_outstanding_messages`` M; each
      response's ack ids go back on its stream in one request (S = 1, 2, 4; M = 1,000, 5,000,
      20,000; requests and responses handled as the raw protobuf, as the connector's Pulls are);
  (d) google-cloud-pubsub's own streaming subscriber: ``SubscriberClient.subscribe()`` with its
      default flow control (1,000 messages), ``message.ack()`` in the callback.

Each consumer drains a subscription of its own holding the same backlog (``--messages`` of
``--size`` bytes, published once to the topic of all the subscriptions) from two servers started
side by side: one at no round trip, one on the service's terms (``--rtt-ms``, ``--pull-cap``,
``--pull-fill``: see fastpubsub's docstring), each consumer against both back to back, so that its
ratio compares two runs minutes apart at most. A drain is timed from its first request to the
moment every message came and its acknowledgement was answered (unary) or read by the server (a
stream, half-closed: its end). Client CPU is this process's (user + system, all threads), server
CPU fastpubsub's, both per message; what a drain leaves on its subscription (a Pull afterwards) is
printed when not nothing (a message delivered twice would leave one).

Prints every drain, then per consumer the medians over the rounds (with their range): msg/s at rtt 0
and at the terms, client CPU per message at each, the rate at the terms over the rate at rtt 0 and
over the plain loop's at the terms. The shared 2-core machine makes absolute rates noisy: the
ratios measured in one round are the figures.

    python examples/bench_transport.py --messages 100000 --rounds 2 --rtt-ms 25 --pull-cap 1000 --pull-fill 0.3
"""

from __future__ import annotations

import argparse
import os
import queue
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = "bench"
TOPIC = f"projects/{PROJECT}/topics/transport"
PULL_MAX = 1000
ACK_IDS_PER_CALL = 2500  # transport.MAX_IDS_PER_REQUEST
ACK_SENDERS = 4  # pubsub/acker.py's SENDERS
STREAM_ACK_DEADLINE = 60
CALL_TIMEOUT = 60.0
DRAIN_TIMEOUT = 900.0
GRPC_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


@dataclass(frozen=True)
class Drain:
    """One consumer's drain of one subscription."""

    messages: int
    seconds: float
    client_cpu: float
    server_cpu: float
    left: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def client_us(self) -> float:
        return self.client_cpu / max(1, self.messages) * 1e6

    @property
    def server_us(self) -> float:
        return self.server_cpu / max(1, self.messages) * 1e6


class Server:
    """One fastpubsub process: its address, its clients' channel, and the raw calls on it."""

    def __init__(self, tool: ModuleType, terms: dict[str, Any]) -> None:
        import grpc
        from google.pubsub_v1.types import pubsub

        self.tool = tool
        self.terms = terms
        self.proc, self.host = tool.spawn(0, **terms)
        self.channel = grpc.insecure_channel(self.host, options=GRPC_OPTIONS)
        self._pull_pb, self._ack_pb = pubsub.PullRequest.pb(), pubsub.AcknowledgeRequest.pb()
        self._pull = self.channel.unary_unary(
            "/google.pubsub.v1.Subscriber/Pull",
            request_serializer=self._pull_pb.SerializeToString,
            response_deserializer=pubsub.PullResponse.pb().FromString,
        )
        self._ack = self.channel.unary_unary(
            "/google.pubsub.v1.Subscriber/Acknowledge", request_serializer=self._ack_pb.SerializeToString
        )

    def pull(self, sub: str, immediately: bool = False) -> list[str]:
        """The ack ids of one Pull(1000) (the messages' bodies are parsed, and left)."""
        request = self._pull_pb(subscription=sub, max_messages=PULL_MAX, return_immediately=immediately)
        return [m.ack_id for m in self._pull(request, timeout=CALL_TIMEOUT).received_messages]

    def ack(self, sub: str, ack_ids: list[str]) -> None:
        self._ack(self._ack_pb(subscription=sub, ack_ids=ack_ids), timeout=CALL_TIMEOUT)

    def cpu(self) -> float:
        return self.tool.cpu_seconds(self.proc.pid)

    def setup(self, subs: list[str], messages: int, size: int) -> None:
        """The topic, one subscription a consumer, and the backlog published once to all of them."""
        from google.pubsub_v1 import PublisherClient, SubscriberClient
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport
        from google.pubsub_v1.types import pubsub

        PublisherClient(transport=PublisherGrpcTransport(channel=self.channel)).create_topic(name=TOPIC)
        admin = SubscriberClient(transport=SubscriberGrpcTransport(channel=self.channel))
        for sub in subs:
            admin.create_subscription(name=sub, topic=TOPIC, ack_deadline_seconds=STREAM_ACK_DEADLINE)
        body = os.urandom(size // 2 + 1).hex().encode()[:size]
        publish = self.channel.unary_unary("/google.pubsub.v1.Publisher/Publish")
        requests: dict[int, bytes] = {}
        for start in range(0, messages, 1000):
            k = min(1000, messages - start)
            if k not in requests:
                pb = pubsub.PublishRequest.pb()(topic=TOPIC)
                for _ in range(k):
                    pb.messages.add(data=body)
                requests[k] = pb.SerializeToString()
            publish(requests[k], timeout=CALL_TIMEOUT)

    def close(self) -> None:
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(10)


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(server: Server, sub: str, n: int, drain: Callable[[Server, str, int], int]) -> Drain:
    """Run ``drain`` (it returns the messages it got, once all are acknowledged) with the clocks."""
    c0, s0, t0 = _process_cpu(), server.cpu(), time.perf_counter()
    got = drain(server, sub, n)
    t1, c1, s1 = time.perf_counter(), _process_cpu(), server.cpu()
    left = len(server.pull(sub, immediately=True))
    return Drain(got, t1 - t0, c1 - c0, s1 - s0, left)


def plain_loop(server: Server, sub: str, n: int) -> int:
    """(a): Pull(1000), Acknowledge, in turn."""
    got = 0
    while got < n:
        ids = server.pull(sub)
        if ids:
            server.ack(sub, ids)
            got += len(ids)
    return got


def pulls_in_flight(server: Server, sub: str, n: int, k: int, senders: int = ACK_SENDERS) -> int:
    """(b): ``k`` threads each keeping one Pull in flight; ``senders`` threads acknowledging what
    they queue in calls of up to 2,500 ids. Returns when all ``n`` are acknowledged (the Pulls
    still in flight then end unmeasured: nothing is left for them)."""
    acks: queue.Queue[list[str] | None] = queue.Queue()
    lock = threading.Lock()
    done, acked_all = threading.Event(), threading.Event()
    got = acked = 0

    def puller() -> None:
        nonlocal got
        while not done.is_set():
            ids = server.pull(sub)
            if ids:
                acks.put(ids)
                with lock:
                    got += len(ids)
                    if got >= n:
                        done.set()

    def sender() -> None:
        nonlocal acked
        while (ids := acks.get()) is not None:
            batch = list(ids)
            while len(batch) < ACK_IDS_PER_CALL:
                try:
                    more = acks.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    acks.put(None)  # for the next sender: this one sends its batch first
                    break
                batch += more
            server.ack(sub, batch)
            with lock:
                acked += len(batch)
                if acked >= n:
                    acked_all.set()

    threads = [threading.Thread(target=puller, daemon=True) for _ in range(k)]
    threads += [threading.Thread(target=sender, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    if not acked_all.wait(DRAIN_TIMEOUT):
        raise RuntimeError(f"(b) K={k}: {acked} of {n} acknowledged in {DRAIN_TIMEOUT} s")
    done.set()
    for _ in range(senders):
        acks.put(None)
    return got


def streaming_pulls(server: Server, sub: str, n: int, streams: int, outstanding: int) -> int:
    """(c): ``streams`` StreamingPulls with ``max_outstanding_messages`` ``outstanding`` each, every
    response's ack ids sent back on its stream in one request. Once all ``n`` came, each stream is
    half-closed after its last acknowledgements and the drain ends when every stream has ended (the
    server read every acknowledgement)."""
    from google.pubsub_v1 import SubscriberClient
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport
    from google.pubsub_v1.types import pubsub

    client = SubscriberClient(transport=SubscriberGrpcTransport(channel=server.channel))
    request_pb, wrap = pubsub.StreamingPullRequest.pb(), pubsub.StreamingPullRequest.wrap
    lock = threading.Lock()
    done = threading.Event()
    got = 0
    errors: list[BaseException] = []

    def requests(q: queue.Queue[Any]) -> Iterator[Any]:
        yield wrap(
            request_pb(
                subscription=sub,
                stream_ack_deadline_seconds=STREAM_ACK_DEADLINE,
                max_outstanding_messages=outstanding,
            )
        )
        yield from iter(q.get, None)

    def stream(q: queue.Queue[Any]) -> None:
        nonlocal got
        try:
            for response in client.streaming_pull(requests=requests(q), retry=None, timeout=DRAIN_TIMEOUT):
                ids = [m.ack_id for m in response._pb.received_messages]
                if ids:
                    q.put(wrap(request_pb(ack_ids=ids)))
                    with lock:
                        got += len(ids)
                        if got >= n:
                            done.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            done.set()

    queues: list[queue.Queue[Any]] = [queue.Queue() for _ in range(streams)]
    threads = [threading.Thread(target=stream, args=(q,), daemon=True) for q in queues]
    for t in threads:
        t.start()
    if not done.wait(DRAIN_TIMEOUT):
        raise RuntimeError(f"(c) {streams} streams x {outstanding}: {got} of {n} in {DRAIN_TIMEOUT} s")
    for q in queues:
        q.put(None)  # half-close, after the acknowledgements already queued
    for t in threads:
        t.join(CALL_TIMEOUT)
    if errors:
        raise RuntimeError(f"(c) {streams} streams x {outstanding}: {errors[0]!r}")
    return got


def library_subscriber(server: Server, sub: str, n: int) -> int:
    """(d): ``SubscriberClient.subscribe()``, default flow control, ``message.ack()`` in the callback;
    timed to the n-th callback (its acknowledgements go out in the following 0.1 s or so), on a
    channel of its own."""
    import grpc
    from google.cloud import pubsub_v1
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

    channel = grpc.insecure_channel(server.host, options=GRPC_OPTIONS)
    client = pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=channel))
    lock, finished = threading.Lock(), threading.Event()
    got = 0

    def callback(message: Any) -> None:
        nonlocal got
        message.ack()
        with lock:
            got += 1
            if got >= n:
                finished.set()

    future = client.subscribe(sub, callback)
    try:
        if not finished.wait(DRAIN_TIMEOUT):
            raise RuntimeError(f"(d): {got} of {n} in {DRAIN_TIMEOUT} s")
        return got
    finally:
        future.cancel()
        future.result(timeout=CALL_TIMEOUT)
        channel.close()


@dataclass(frozen=True)
class Consumer:
    key: str
    label: str
    run: Callable[[Server, str, int], int]


def consumers(ks: list[int], streams: list[int], outstanding: list[int], library: bool) -> list[Consumer]:
    out = [Consumer("a", "(a) Pull(1000)+ack loop", plain_loop)]
    for k in ks:
        out.append(Consumer(f"b{k}", f"(b) {k} Pulls in flight", lambda s, sub, n, k=k: pulls_in_flight(s, sub, n, k)))
    for m in outstanding:
        for s_ in streams:
            out.append(
                Consumer(
                    f"c{s_}x{m}",
                    f"(c) {s_} stream{'s' if s_ > 1 else ''} x {m:,}",
                    lambda s, sub, n, s_=s_, m=m: streaming_pulls(s, sub, n, s_, m),
                )
            )
    if library:
        out.append(Consumer("d", "(d) library subscribe()", library_subscriber))
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=400, help="bytes a message body")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rtt-ms", type=float, default=25.0)
    ap.add_argument("--pull-cap", type=int, default=1000)
    ap.add_argument("--pull-fill", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pulls", type=_ints, default=[2, 4, 8, 16], help="(b): Pulls in flight, comma-separated")
    ap.add_argument("--streams", type=_ints, default=[1, 2, 4], help="(c): streams, comma-separated")
    ap.add_argument(
        "--outstanding", type=_ints, default=[1000, 5000, 20000], help="(c): max_outstanding_messages a stream"
    )
    ap.add_argument("--no-library", action="store_true", help="leave out (d)")
    args = ap.parse_args(argv)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    sys.path.insert(0, str(HERE))
    import fastpubsub as tool

    terms = dict(rtt_ms=args.rtt_ms, pull_cap=args.pull_cap, pull_fill=args.pull_fill, seed=args.seed)
    shown = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in terms.items())
    todo = consumers(args.pulls, args.streams, args.outstanding, not args.no_library)
    print(
        f"{args.messages:,} x {args.size} B a consumer; terms: {shown}; load {os.getloadavg()[0]:.2f}, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    results: dict[str, list[tuple[Drain, Drain]]] = {c.key: [] for c in todo}
    for r in range(args.rounds):
        local, remote = Server(tool, {}), Server(tool, terms)
        try:
            for server in (local, remote):
                server.setup([f"projects/{PROJECT}/subscriptions/{c.key}" for c in todo], args.messages, args.size)
            print(f"round {r + 1} (load {os.getloadavg()[0]:.2f}):", flush=True)
            for c in todo:
                sub = f"projects/{PROJECT}/subscriptions/{c.key}"
                at0 = _measure(local, sub, args.messages, c.run)
                at = _measure(remote, sub, args.messages, c.run)
                results[c.key].append((at0, at))
                left = f"; left {at0.left} / {at.left}" if at0.left or at.left else ""
                print(
                    f"  {c.label:26} rtt 0 {at0.rate:9,.0f} msg/s {at0.client_us:5.1f} us | terms {at.rate:9,.0f} "
                    f"msg/s {at.client_us:5.1f} us (server {at0.server_us:.1f} / {at.server_us:.1f} us){left}",
                    flush=True,
                )
        finally:
            local.close()
            remote.close()

    def med(values: list[float], fmt: str = ",.0f") -> str:
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    base = [at.rate for _, at in results["a"]] if "a" in results else None
    print(f"\nmedian of {args.rounds} round(s) (range); load now {os.getloadavg()[0]:.2f}")
    print("consumer | msg/s at rtt 0 | msg/s at the terms | client us/msg rtt 0 / terms | terms / rtt 0 | terms / (a)")
    for c in todo:
        rows = results[c.key]
        rate0, rate = [p[0].rate for p in rows], [p[1].rate for p in rows]
        us0, us = [p[0].client_us for p in rows], [p[1].client_us for p in rows]
        ratio = [b / a for a, b in zip(rate0, rate)]
        vs_a = med([x / y for x, y in zip(rate, base)], ".2f") + "x" if base else "-"
        print(
            f"{c.label} | {med(rate0)} | {med(rate)} | {statistics.median(us0):.1f} / {statistics.median(us):.1f} "
            f"| {med(ratio, '.2f')}x | {vs_a}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
