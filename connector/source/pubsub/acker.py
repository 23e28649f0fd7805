"""The acker: the one path by which acknowledgements and hand-backs reach Pub/Sub.

Requests are queued (a commit does not wait for the network) and sent in order by one thread,
each bounded by the transport's stated deadlines. For every request the caller learns, per ack
id, what Pub/Sub answered: confirmed, or failed with a reason (an exactly-once subscription
answers per ack id; any other failure fails the whole request). :meth:`Acker.flush` waits, within
a time bound, until everything queued has been answered.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..transport import AckResult, Rpc

log = logging.getLogger("crdb_pubsub.acker")

ACK = "ack"
NACK = "nack"  # ModifyAckDeadline(0): hand the messages back for immediate redelivery


@dataclass
class Job:
    kind: str
    sub: str
    ack_ids: list[str]
    on_done: Callable[[AckResult], None] | None = None
    total: float | None = None  # a tighter deadline than the transport's (shutdown)


class Acker:
    """Sends queued :class:`Job` s from its own thread.

    ``_pending`` counts unanswered jobs and is guarded by ``_idle``'s lock.
    """

    def __init__(self, rpc: Rpc) -> None:
        self._rpc = rpc
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="crdb-pubsub-acker", daemon=True)
        self._started = False

    def start(self) -> None:
        self._started = True
        self._thread.start()

    def submit(self, job: Job) -> None:
        if not job.ack_ids:
            if job.on_done is not None:
                job.on_done(AckResult())
            return
        with self._idle:
            self._pending += 1
        self._queue.put(job)

    def busy(self) -> bool:
        """Return whether some submitted job is not answered yet."""
        with self._idle:
            return self._pending > 0

    def flush(self, timeout: float) -> bool:
        """Wait until every submitted job was answered; False if ``timeout`` ran out first."""
        end = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = end - time.monotonic()
                if left <= 0 or not self._started:
                    return False
                self._idle.wait(left)
        return True

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                result = self._send(job)
                if job.on_done is not None:
                    job.on_done(result)
            except Exception:
                log.exception("acknowledgement bookkeeping failed")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _send(self, job: Job) -> AckResult:
        try:
            if job.kind == ACK:
                result = self._rpc.acknowledge(job.sub, job.ack_ids, total=job.total)
            else:
                result = self._rpc.modify_ack_deadline(job.sub, job.ack_ids, 0, total=job.total)
        except Exception as exc:  # noqa: BLE001 - reported per ack id like any failure
            reason = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
            result = AckResult(failed=dict.fromkeys(job.ack_ids, reason))
        if result.failed:
            first = next(iter(result.failed.values()))
            log.warning(
                "%s of %d message(s) on %s failed (%s)%s",
                "acknowledging" if job.kind == ACK else "handing back",
                len(result.failed),
                job.sub,
                first,
                "; they stay remembered and are acknowledged when Pub/Sub delivers them again"
                if job.kind == ACK
                else "",
            )
        return result
