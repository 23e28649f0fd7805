"""The acker: the one path by which acknowledgements and hand-backs reach Pub/Sub.

Requests are queued (a commit does not wait for the network) and sent by :data:`SENDERS` threads,
each bounded by the transport's stated deadlines. A sender takes every queued job of one kind and
subscription that fits one request (the service's limits, see ``transport.chunk_ack_ids``), so a
burst of small jobs becomes a few requests, and a request that waits on retries (an outage, a
transient failure) holds up one sender, not every acknowledgement behind it: an ack that comes too
late is refused by an exactly-once subscription (its message was delivered again meanwhile), and
an ordered key waits for it. A job larger than one request (a micro-batch's acknowledgements) is
queued as requests of its own, sent by the senders at once, not one after another by one sender
waiting each round trip; it learns one answer when the last of them is answered.

For every job the caller learns, per ack id, what Pub/Sub answered: confirmed, or failed with a
reason (an exactly-once subscription answers per ack id; any other failure fails the whole
request). :meth:`Acker.flush` waits, within a time bound, until everything queued has been answered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..transport import MAX_ID_BYTES_PER_REQUEST, MAX_IDS_PER_REQUEST, REQUESTS_IN_FLIGHT, AckResult, Rpc, chunk_ack_ids

log = logging.getLogger("crdb_pubsub.acker")

ACK = "ack"
NACK = "nack"  # ModifyAckDeadline(0): hand the messages back for immediate redelivery
SENDERS = REQUESTS_IN_FLIGHT  # one request in flight each


@dataclass
class Job:
    kind: str
    sub: str
    ack_ids: list[str]
    on_done: Callable[[AckResult], None] | None = None
    total: float | None = None  # a tighter deadline than the transport's (shutdown)
    # Until answered, its messages may hold back their ordering keys' next messages (see
    # :meth:`Acker.holding_back`). False for messages whose keys' next ones matter to no one yet:
    # those an AvailableNow run hands back as published after its cutoff.
    holds_keys: bool = True


class _Parts:
    """The answers of a job sent as several requests, given to its ``on_done`` once, when all came."""

    def __init__(self, parts: int, on_done: Callable[[AckResult], None] | None) -> None:
        self._left = parts
        self._on_done = on_done
        self._result = AckResult()
        self._lock = threading.Lock()  # a leaf lock: a part's answer comes from any sender

    def answered(self, result: AckResult) -> None:
        with self._lock:
            self._result.confirmed.extend(result.confirmed)
            self._result.failed.update(result.failed)
            self._left -= 1
            last = self._left == 0
        if last and self._on_done is not None:
            self._on_done(self._result)


class Acker:
    """Sends queued :class:`Job` s from :data:`SENDERS` threads of its own.

    ``_cond``'s lock guards ``_queue``, ``_pending`` (jobs not answered yet) and ``_holding`` (of
    those, the ones that hold keys, by subscription); it is a leaf lock, never held across an RPC
    or a callback.
    """

    def __init__(self, rpc: Rpc, *, senders: int = SENDERS) -> None:
        self._rpc = rpc
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._pending = 0
        self._holding: dict[str, int] = {}
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._run, name=f"crdb-pubsub-acker-{i}", daemon=True) for i in range(senders)
        ]
        self._started = False

    def start(self) -> None:
        self._started = True
        for t in self._threads:
            t.start()

    def submit(self, job: Job) -> None:
        if not job.ack_ids:
            if job.on_done is not None:
                job.on_done(AckResult())
            return
        jobs = [job]
        parts = list(chunk_ack_ids(job.ack_ids))
        if len(parts) > 1:
            done = _Parts(len(parts), job.on_done)
            jobs = [Job(job.kind, job.sub, p, done.answered, job.total, job.holds_keys) for p in parts]
        with self._cond:
            self._pending += len(jobs)
            if job.holds_keys:
                self._holding[job.sub] = self._holding.get(job.sub, 0) + len(jobs)
            self._queue.extend(jobs)
            self._cond.notify_all()

    def holding_back(self, sub: str) -> bool:
        """Return whether a job on ``sub`` that holds keys (:attr:`Job.holds_keys`) is not answered yet.

        On an ordered subscription Pub/Sub delivers a key's next messages only once the ones
        before are acknowledged or handed back: until then an answer shows nothing about them.
        """
        with self._cond:
            return self._holding.get(sub, 0) > 0

    def flush(self, timeout: float) -> bool:
        """Wait until every submitted job was answered; False if ``timeout`` ran out first."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = end - time.monotonic()
                if left <= 0 or not self._started:
                    return False
                self._cond.wait(left)
        return True

    def stop(self) -> None:
        """Let the senders end once the queue is empty (what was queued is still sent)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def _take(self) -> list[Job] | None:
        """Take the jobs of one request: the oldest queued job and the queued jobs of its kind and subscription."""
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            first = self._queue.popleft()
            jobs, ids, nbytes = [first], len(first.ack_ids), None
            rest: deque[Job] = deque()
            while self._queue:
                job = self._queue.popleft()
                same = job.kind == first.kind and job.sub == first.sub and job.total == first.total
                if same and ids + len(job.ack_ids) <= MAX_IDS_PER_REQUEST:
                    if nbytes is None:
                        nbytes = sum(map(len, first.ack_ids))
                    more = sum(map(len, job.ack_ids))
                    if nbytes + more <= MAX_ID_BYTES_PER_REQUEST:
                        jobs.append(job)
                        ids += len(job.ack_ids)
                        nbytes += more
                        continue
                rest.append(job)
            self._queue = rest
            return jobs

    def _run(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            self._process(jobs)
            # Not kept alive while this sender waits for the next request: ack ids of a sender are
            # otherwise held (four senders, four requests' worth).
            del jobs

    def _process(self, jobs: list[Job]) -> None:
        try:
            result = self._send(jobs[0].kind, jobs[0].sub, [a for j in jobs for a in j.ack_ids], jobs[0].total)
            for job in jobs:
                if job.on_done is not None:
                    mine = set(job.ack_ids)
                    job.on_done(
                        AckResult(
                            confirmed=[a for a in result.confirmed if a in mine],
                            failed={a: r for a, r in result.failed.items() if a in mine},
                        )
                        if len(jobs) > 1
                        else result
                    )
        except Exception:
            log.exception("acknowledgement bookkeeping failed")
        finally:
            with self._cond:
                self._pending -= len(jobs)
                holding = sum(j.holds_keys for j in jobs)
                if holding:
                    self._holding[jobs[0].sub] -= holding
                self._cond.notify_all()

    def _send(self, kind: str, sub: str, ack_ids: list[str], total: float | None) -> AckResult:
        try:
            if kind == ACK:
                result = self._rpc.acknowledge(sub, ack_ids, total=total)
            else:
                result = self._rpc.modify_ack_deadline(sub, ack_ids, 0, total=total)
        except Exception as exc:  # noqa: BLE001 - reported per ack id like any failure
            reason = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
            result = AckResult(failed=dict.fromkeys(ack_ids, reason))
        if result.failed:
            first = next(iter(result.failed.values()))
            log.warning(
                "%s of %d message(s) on %s failed (%s)%s",
                "acknowledging" if kind == ACK else "handing back",
                len(result.failed),
                sub,
                first,
                "; they stay remembered and are acknowledged when Pub/Sub delivers them again" if kind == ACK else "",
            )
        return result
