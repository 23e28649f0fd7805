"""Pullers: threads that pull from one subscription each, sized and paced by flow control.

A Pull waits for messages up to ``PULL_TIMEOUT_SECONDS``. What comes back is an *answer*: a
response (possibly empty). A Pull that times out is not an answer: the real service may hold a
Pull until its deadline even with messages available, so a timeout proves nothing; the puller then
asks once more with ``return_immediately``, and that response is the answer. (The emulator
answers an empty Pull with an empty response about a second before the deadline.) A Pull that
timed out or failed may have leased messages to nobody (Pub/Sub answered after the client gave
up): the receiver is told, so that no empty answer counts as "drained" until that lease lapsed.
Errors are retried with backoff while Pub/Sub is unavailable; a permanent error stops the puller
and is reported to the query.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..pubsub.concurrency import START, cpu_seconds
from ..pubsub.pull import PULL_TIMEOUT_SECONDS
from ..transport import Backoff, Rpc, is_transient
from .flow import FlowControl

if TYPE_CHECKING:  # pragma: no cover
    from . import Receiver

log = logging.getLogger("crdb_pubsub.receiver")

PROBE_TIMEOUT_SECONDS = 5.0
# At first; more where the round trip is long (..pubsub.concurrency).
PULLERS_PER_SUBSCRIPTION = START
IMMEDIATE_PAUSE_SECONDS = 0.25


@dataclass(frozen=True)
class Sent:
    """When a Pull was sent (monotonic), and how.

    Also whether an ordered subscription's messages were outstanding then, and whether to ask with
    ``return_immediately`` (an AvailableNow run on a subscription whose Pulls time out: a long Pull
    that times out casts a new shadow).
    """

    at: float
    outstanding: bool
    immediate: bool = False


class Puller:
    """One thread pulling ``sub`` into ``receiver`` until ``stopping`` is set."""

    def __init__(
        self, receiver: Receiver, rpc: Rpc, flow: FlowControl, sub: str, index: int, stopping: threading.Event
    ) -> None:
        self._receiver = receiver
        self._rpc = rpc
        self._flow = flow
        self._sub = sub
        self._index = index
        self._stopping = stopping
        self.thread = threading.Thread(
            target=self._run, daemon=True, name=f"crdb-pubsub-pull-{sub.rsplit('/', 1)[-1]}-{index}"
        )

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        backoff = Backoff()
        while not self._stopping.is_set():
            if not self._receiver.wait_until_pulling(self._sub, self._index):
                continue
            reservation = self._flow.reserve(self._stopping)
            if reservation is None:
                return
            if not self._receiver.still_pulling(self._sub):
                # The run ended, or showed the subscription drained, while this puller waited for
                # room: that room may be the one of messages just handed back, which a Pull sent now
                # would take again (Pub/Sub redelivers them at once), a delivery attempt each.
                self._flow.cancel(reservation)
                continue
            try:
                response, sent = self._pull(reservation.messages)
            except Exception as exc:  # noqa: BLE001 - classified below
                self._flow.cancel(reservation)
                if self._stopping.is_set():
                    return
                if not is_transient(exc):
                    self._receiver.fail(exc, self._sub)
                    return
                self._receiver.note_unavailable(exc)
                self._stopping.wait(backoff.next())
                continue
            if response is None:  # timed out twice: no answer
                self._flow.cancel(reservation)
                continue
            backoff.reset()
            self._receiver.note_available()
            assert sent is not None
            answered, cpu = self._receiver.now(), cpu_seconds()
            n = self._receiver.accept(self._sub, response, reservation, self._index, sent)
            self._receiver.observed(self._sub, answered - sent.at, cpu_seconds() - cpu, n, reservation.held_back)

    def _pull(self, max_messages: int) -> tuple[Any, Sent | None]:
        """One answer and when its Pull was sent; ``(None, None)`` when both Pulls timed out."""
        from google.api_core import exceptions as gexc

        response = None
        for timeout, immediately in ((PULL_TIMEOUT_SECONDS, False), (PROBE_TIMEOUT_SECONDS, True)):
            if immediately and self._stopping.is_set():
                break
            sent = self._receiver.sending(self._sub, self._index)
            if sent.immediate and not immediately:
                # Waiting out a shadow: ask so that the answer comes at once, after a short pause
                # (an empty answer would otherwise come back in a tight loop).
                self._stopping.wait(IMMEDIATE_PAUSE_SECONDS)
                timeout, immediately = PROBE_TIMEOUT_SECONDS, True
            try:
                return self._rpc.pull(self._sub, max_messages, timeout, return_immediately=immediately), sent
            except gexc.DeadlineExceeded:
                self._receiver.timed_out(self._sub, sent, timeout, self._index)
            except Exception:
                self._receiver.timed_out(self._sub, sent, timeout, self._index)
                raise
        return response, None
