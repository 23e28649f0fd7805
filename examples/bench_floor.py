"""The floor a Python receiver stands on: CPU per message of the least work any consumer does, beside the connector's own steps.

Against ``examples/fastpubsub.py`` (its own process, so its CPU is not counted) at no round trip, on one backlog
per figure (realistic changefeed messages, as ``bench_stream.py`` publishes):

  (0) the least a Python consumer does: raw Pull(1,000) and Acknowledge calls (no client library
      layer), reading only each message's ack id. The baseline;
  (1) the same, reading every field into the Arrow batch the connector holds (``wire.pulled_batch``
      on the answer's bytes, what the driver-side runner and a ``receiver=executors`` task do with
      each answer);
  (2) decoding those batches as a partition's ``read()`` does (``decode_messages`` on the Arrow
      columns), what Spark's Python workers do with each message.

Prints each in us a message (CPU of this process, best of ``--rounds``) and (1) and (2) as a ratio
of (0). Beside ``bench_stream.py``'s CPU per message by process kind (runner, workers, JVM), it
says how much of each is the floor: (0) + (1) for the runner, (2) for the workers. The JVM's share
is Spark's and is not measured here.

    python examples/bench_floor.py [--messages 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MAX_PER_PULL = 1000
ACKS_PER_REQUEST = 2500


def _drain(channel, sub: str, n: int, work: Callable[[object], list[str]], raw: bool = False) -> float:
    """Pull and acknowledge ``n`` messages of ``sub``, ``work`` reading each answer; return the CPU seconds.

    ``raw``: ``work`` is handed the answer's bytes (as the connector's Pull stub hands them over),
    else upb's parse of them.
    """
    from google.pubsub_v1.types import pubsub

    pull_pb, ack_pb = pubsub.PullRequest.pb(), pubsub.AcknowledgeRequest.pb()
    pull = channel.unary_unary(
        "/google.pubsub.v1.Subscriber/Pull",
        request_serializer=pull_pb.SerializeToString,
        response_deserializer=None if raw else pubsub.PullResponse.pb().FromString,
    )
    ack = channel.unary_unary(
        "/google.pubsub.v1.Subscriber/Acknowledge",
        request_serializer=ack_pb.SerializeToString,
        response_deserializer=lambda raw: raw,
    )
    got = 0
    started = time.process_time()
    while got < n:
        ids = work(pull(pull_pb(subscription=sub, max_messages=MAX_PER_PULL), timeout=10))
        got += len(ids)
        for i in range(0, len(ids), ACKS_PER_REQUEST):
            ack(ack_pb(subscription=sub, ack_ids=ids[i : i + ACKS_PER_REQUEST]), timeout=10)
    return time.process_time() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    from bench_stream import _bodies, _publish, _Resources
    from bench_terms import _server
    from crdb_pubsub.decode import decode_messages
    from crdb_pubsub.source.transport import subscriber_client
    from crdb_pubsub.source.wire import pulled_batch

    n = args.messages
    bodies = _bodies(n)
    held: list = []

    def ack_ids_only(response) -> list[str]:
        return [rm.ack_id for rm in response.received_messages]

    def into_arrow(response) -> list[str]:
        ack_ids, _, batch = pulled_batch(response)
        held.append(batch)
        return ack_ids

    proc, host = _server({})
    os.environ["PUBSUB_EMULATOR_HOST"] = host
    try:
        best = {"0": float("inf"), "1": float("inf"), "2": float("inf")}
        with _Resources(host, "bench-floor") as res:
            client = subscriber_client(host)
            channel = client._transport._grpc_channel  # the raw channel: no client library layer per call
            for r in range(args.rounds):
                stem = f"-{os.getpid()}-{r}-{int(time.time())}"
                topic, sub0 = res.create("floor" + stem, "floor-ids" + stem)
                _, sub1 = res.create("floor" + stem, "floor-arrow" + stem)
                _publish(host, topic, bodies)
                best["0"] = min(best["0"], _drain(channel, sub0, n, ack_ids_only))
                held.clear()
                best["1"] = min(best["1"], _drain(channel, sub1, n, into_arrow, raw=True))
                started = time.process_time()
                for batch in held:
                    decode_messages(
                        batch.column(0),
                        message_ids=batch.column(1),
                        publish_times=batch.column(2),
                        attributes=batch.column(3),
                        ordering_keys=batch.column(4),
                    )
                best["2"] = min(best["2"], time.process_time() - started)
    finally:
        proc.kill()
    us = {k: v / n * 1e6 for k, v in best.items()}
    print(
        f"{n:,} messages ({sum(map(len, bodies)) / n:.0f} B avg), fastpubsub at no round trip, best of {args.rounds}:"
    )
    print(f"(0) raw Pull + Acknowledge, ack ids only : {us['0']:5.2f} us/message  (the baseline)")
    print(f"(1) the same, every field into Arrow     : {us['1']:5.2f} us/message  ({us['1'] / us['0']:.2f}x (0))")
    print(f"(2) decoding those batches               : {us['2']:5.2f} us/message  ({us['2'] / us['0']:.2f}x (0))")
    print(f"floor of a driver-side runner (1): {us['1']:.2f} us; of the Python workers (2): {us['2']:.2f} us")


if __name__ == "__main__":
    main()
