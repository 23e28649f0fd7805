"""How many Pulls of one subscription to keep in flight: Little's law, with each step measured.

Both receiver modes apply this rule: the driver's pullers (one thread and one Pull in flight each)
and a ``receiver=executors`` task's Pulls of its slice. A Pull spends its time waiting on the
network (the round trip, ``W``) and then its share of the process's CPU sorting the answer
(``S``). With ``c`` Pulls in flight a subscription brings ``c x answer / W`` messages a second
until the CPU, not the network, is what they wait for: at ``c = W / S``. Locally ``W`` is about
``S`` and :data:`START` Pulls are enough; against the service, 25 ms away, with answers of a few
hundred messages, ``W / S`` is in the tens.

So a subscription starts with :data:`START` Pulls in flight and doubles them while three things
hold:

* ``W / S`` says more would help: ``W`` is the shortest time a Pull that found messages waiting
  took (of the last :data:`LATENCY_MEMORY`), so time spent waiting for messages to be published
  never counts as network;
* the last doubling paid: over a window of at least :data:`WINDOW_ROUND_TRIPS` round trips (and
  :data:`WINDOW_FLOOR_SECONDS`) and :data:`WINDOW_ANSWERS` answers, the subscription brought
  :data:`GAIN` times what it brought before (a server whose own CPU is the bottleneck, like the
  emulator on the same machine, shows no gain, and the doubling stops there);
* the room did not hold a Pull back during that window (the driver's flow control, a task's share:
  a full window is Spark's pace, not the network's, and such a window is not judged).

``S`` is the CPU the thread spent on an answer (:func:`cpu_seconds`), not the wall time it took:
with several pullers on a process's cores a thread waits milliseconds for the GIL or a lock (the
interpreter's switch interval is 5 ms), and counting that wait made ``W / S`` look small exactly
when more Pulls were starting to help: on the service's terms they stalled at 4 or 8 of 16. Whether
the CPU is the bottleneck is the doubling's own test (it must pay).

Never more than :data:`MOST` a subscription, and it never shrinks: the driver's pullers are threads
an AvailableNow run counts on for evidence, and a task's count ends with its pull. Not thread-safe:
its owner serialises the calls (the receiver's lock, a task's own thread).
"""

from __future__ import annotations

import math
import time
from collections import deque

# Two Pulls in flight keep the pipe full while one waits on a local network (gRPC releases the
# GIL); measured ~1.5x one puller against the emulator while Spark runs.
START = 2
MOST = 16  # 16 x 300 messages / 25 ms: ~190,000 messages a second, well above what one process sorts
LATENCY_MEMORY = 32
# A receiver=executors task pulls its share for about a second: with 1 s windows it never doubled,
# and a drain on the service's terms spent its first 3 s ramping 2 -> 4 -> 8 (docs/performance.md).
# A window is judged once the Pulls a doubling added have answered a few times over (their round
# trips, not a fixed time: 0.25 s windows took 2 -> 16 0.8 s of a 1.7 s task at 25 ms), on at least
# 20 answers (answers vary in size: fewer would judge noise). 20 answers from 2 Pulls at 25 ms
# take 0.25 s; from 8, 0.1 s.
WINDOW_ROUND_TRIPS = 4
WINDOW_FLOOR_SECONDS = 0.05
WINDOW_ANSWERS = 20
GAIN = 1.15
SERVICE_FLOOR_SECONDS = 1e-4


def cpu_seconds() -> float:
    """Return the calling thread's CPU time in seconds (differences of it measure ``S``)."""
    return time.thread_time()


class Concurrency:
    """The number of pullers one subscription wants; :meth:`answered` learns from each answer."""

    def __init__(self, start: int, now: float) -> None:
        self.pullers = start
        self.settled = start >= MOST
        self._latencies: deque[float] = deque(maxlen=LATENCY_MEMORY)
        self._service = 0.0  # moving average of S, seconds an answer
        self._window_start = now
        self._window_messages = 0
        self._window_answers = 0
        self._held_back = False
        self._before: float | None = None  # messages a second before the last doubling

    def answered(self, now: float, latency: float, service: float, messages: int, held_back: bool) -> int:
        """Learn from one answer; return the pullers wanted now.

        ``latency``: its Pull's round trip; ``service``: the CPU spent sorting it; ``messages``:
        what it brought; ``held_back``: its puller waited for room in the flow control first.
        """
        if messages:
            self._service = service if not self._latencies else 0.8 * self._service + 0.2 * service
            self._latencies.append(latency)
        self._window_messages += messages
        self._window_answers += 1
        self._held_back = self._held_back or held_back
        if self.settled:
            return self.pullers
        elapsed = now - self._window_start
        window = max(WINDOW_FLOOR_SECONDS, WINDOW_ROUND_TRIPS * self.round_trip())
        if elapsed < window or self._window_answers < WINDOW_ANSWERS:
            return self.pullers
        rate = self._window_messages / elapsed
        judged = not self._held_back and self._window_messages > 0
        self._window_start, self._window_messages, self._window_answers = now, 0, 0
        self._held_back = False
        if not judged:
            return self.pullers
        if self._before is not None and rate < GAIN * self._before:
            self.settled = True  # the last doubling did not pay: keep it, stop here
            return self.pullers
        if self.wanted() <= self.pullers:
            self._before = None  # not now: a later window may show the network waits longer
            return self.pullers
        self._before = rate
        self.pullers = min(MOST, 2 * self.pullers)
        self.settled = self.pullers >= MOST
        return self.pullers

    def round_trip(self) -> float:
        """``W``: the shortest round trip of a Pull that found messages waiting (0.0: none yet)."""
        return min(self._latencies, default=0.0)

    def wanted(self) -> int:
        """``W / S`` rounded up: the Pulls in flight that keep the CPU, not the network, busy."""
        if not self._latencies:
            return self.pullers
        return math.ceil(self.round_trip() / max(self._service, SERVICE_FLOOR_SECONDS))
