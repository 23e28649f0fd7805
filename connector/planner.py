"""Micro-batch planning: turns what the receiver holds into Spark offsets, and commits into acks.

Offsets are ``{"batch": N}``: N counts the batches this source has planned for the query. Spark
drives the calls (see NOTES.md section 3); the rules that make ack-on-commit hold are:

* ``latest(start)`` seals what is buffered into batch ``start + 1`` (durably first, with a state
  directory). When nothing new arrived but an earlier batch still awaits its acknowledgement, it
  seals an *empty* batch: Spark only calls ``commit`` for batch N once it plans N+1, so without
  this the last batch of a burst would stay unacknowledged. It never seals an empty batch when
  nothing awaits acknowledgement, so an idle stream runs no batches.
* ``commit(end)`` acknowledges exactly the messages of batches ``<= end``. Nothing else acks.
* ``latest(start)`` also proves that Spark committed every batch ``<= start`` (it asks for the
  next batch only after committing the previous one); after a restart that is how batches
  committed by Spark but never acknowledged by the dead process get acknowledged.
* A batch Spark asks for that this process never planned (a restart without a state directory)
  yields nothing and is never acknowledged, so Pub/Sub redelivers its messages.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from .ledger import Ledger
from .receiver import DEDUPE_WINDOW_SECONDS, Received, Receiver, ReceiverError

if TYPE_CHECKING:  # pragma: no cover
    from .options import SourceOptions

log = logging.getLogger("crdb_pubsub.planner")

AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS = 120.0
SUMMARY_EVERY_SECONDS = 30.0


def _batch_id(offset: dict | None) -> int | None:
    if offset is None:
        return None
    try:
        return int(offset["batch"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"crdb_pubsub: offset {offset!r} was not written by this source (expected {{'batch': N}}); "
            "was the checkpoint location used by another source?"
        ) from None


class Planner:
    """The driver-side state of one streaming query: receiver, ledger and planned batches."""

    def __init__(
        self,
        options: "SourceOptions",
        *,
        receiver_factory: Callable[["SourceOptions"], Receiver] | None = None,
        malformed_counter: Callable[[list[Received]], int] | None = None,
    ) -> None:
        self._opts = options
        self._lock = threading.RLock()
        self._receiver_factory = receiver_factory or _make_receiver
        self._malformed_counter = malformed_counter
        self._receiver: Receiver | None = None
        self._ledger: Ledger | None = None
        self._sealed: dict[int, list[Received]] = {}  # planned and not yet acknowledged
        self._synced = False
        self._last_id = 0
        self._available_now = False
        self._warned_unreplayable: set[int] = set()
        self._batches_planned = 0
        self._empty_batches = 0
        self._replayed = 0
        self._malformed = 0
        self._metrics_pool: ThreadPoolExecutor | None = None
        self._last_summary = time.monotonic()

    # ---------------------------------------------------------------- lifecycle

    def ensure_started(self) -> Receiver:
        with self._lock:
            if self._receiver is not None:
                return self._receiver
            ledger = Ledger(self._opts.stateDir, dedupe_window_seconds=DEDUPE_WINDOW_SECONDS)
            receiver = self._receiver_factory(self._opts)
            recovered = ledger.recover()
            for bid, msgs in sorted(recovered.pending.items()):
                self._sealed[bid] = msgs
                receiver.adopt(msgs)
            if recovered.pending:
                log.info("state directory holds %d planned batch(es) not known to be acknowledged: %s",
                         len(recovered.pending), sorted(recovered.pending))
            now_wall, now_mono = time.time(), time.monotonic()
            receiver.remember_acknowledged(
                [key for key, _ in recovered.acknowledged],
                until=now_mono + DEDUPE_WINDOW_SECONDS - (now_wall - min((t for _, t in recovered.acknowledged), default=now_wall)),
            )
            receiver.start(create_on_topics=self._opts.topic_paths or None)
            self._ledger, self._receiver = ledger, receiver
            _hand_back_on_sigterm(receiver)
            return receiver

    def stop(self) -> None:
        with self._lock:
            if self._receiver is not None:
                self._receiver.stop(nack=True)
            if self._ledger is not None:
                self._ledger.close()

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: read what was published until now, then report no new data."""
        receiver = self.ensure_started()
        receiver.set_cutoff(int(time.time() * 1_000_000))
        self._available_now = True

    # ---------------------------------------------------------------- Spark's calls

    def latest(self, start: dict | None, max_messages: int | None, max_bytes: int | None) -> dict:
        receiver = self.ensure_started()
        with self._lock:
            receiver.raise_if_failed()
            sid = _batch_id(start)
            if sid is None:  # Spark < 4.2 passes no start offset
                sid = self._last_id
            self._sync(sid)
            self._maybe_summarise()

            later = sorted(b for b in self._sealed if b > sid)
            if later:
                # Planned by a previous process and never seen by Spark: offer the same content.
                self._replayed += 1
                return self._offset(later[0])

            awaiting = any(msgs for b, msgs in self._sealed.items() if b <= sid)
            if self._available_now and not awaiting:
                self._wait_for_data_or_drain(receiver)
            msgs = receiver.take(max_messages, max_bytes)
            if msgs:
                bid = sid + 1
                assert self._ledger is not None
                self._ledger.record(bid, msgs)  # durable before Spark learns the offset
                self._sealed[bid] = msgs
                self._batches_planned += 1
                return self._offset(bid)
            if awaiting:
                bid = sid + 1
                self._sealed[bid] = []
                self._empty_batches += 1
                return self._offset(bid)
            if self._available_now:
                # The query ends after this answer: acknowledgements must leave the process first.
                receiver.flush_acks()
                receiver.release_deferred()
            return self._offset(sid)

    def messages_for(self, start: dict, end: dict) -> list[Received]:
        """The messages of batches in ``(start, end]``; empty for batches this process can't replay."""
        self.ensure_started()
        sid, eid = _batch_id(start), _batch_id(end)
        assert sid is not None and eid is not None
        with self._lock:
            self._sync(sid)
            out: list[Received] = []
            for bid in range(sid + 1, eid + 1) if eid - sid <= 1000 else sorted(b for b in self._sealed if sid < b <= eid):
                msgs = self._sealed.get(bid)
                if msgs is None:
                    if bid not in self._warned_unreplayable:
                        self._warned_unreplayable.add(bid)
                        log.warning(
                            "batch %d was planned by an earlier process and %s: it yields no rows now; its messages "
                            "were never acknowledged, so Pub/Sub redelivers them into later batches",
                            bid,
                            "the state directory has no record of it" if self._opts.stateDir else "no stateDir is set",
                        )
                    continue
                out.extend(msgs)
            return out

    def commit(self, end: dict) -> None:
        """Spark committed every batch ``<= end``: acknowledge their messages."""
        eid = _batch_id(end)
        assert eid is not None
        with self._lock:
            self._ack_through(eid)

    def report(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {"batch": self._last_id}
            if self._receiver is not None:
                out.update(self._receiver.snapshot())
            out["malformed"] = self._malformed
            out["batchesPlanned"] = self._batches_planned
            out["emptyBatches"] = self._empty_batches
            out["awaitingAck"] = sum(len(m) for m in self._sealed.values())
            return out

    # ---------------------------------------------------------------- internals

    def _offset(self, bid: int) -> dict:
        self._last_id = bid
        return {"batch": bid}

    def _sync(self, sid: int) -> None:
        """First call of this process: batches up to ``sid`` were committed by Spark already."""
        if self._synced:
            return
        self._synced = True
        self._last_id = max(self._last_id, sid)
        stale = [b for b in self._sealed if b <= sid]
        if stale:
            log.info("acknowledging batch(es) %s: Spark committed them before this process started", sorted(stale))
            self._ack_through(sid)

    def _ack_through(self, eid: int) -> None:
        done = sorted(b for b in self._sealed if b <= eid)
        if not done:
            return
        msgs = [m for b in done for m in self._sealed[b]]
        if msgs:
            if self._malformed_counter is not None:
                self._count_malformed_later(msgs)
            assert self._receiver is not None and self._ledger is not None
            self._receiver.ack(msgs)
            self._ledger.acknowledged(done, msgs)
        for b in done:
            del self._sealed[b]

    def _count_malformed_later(self, msgs: list[Received]) -> None:
        # Spark waits for ``commit``; the count is only a metric, so it runs beside the stream.
        if self._metrics_pool is None:
            self._metrics_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crdb-pubsub-metrics")
        counter = self._malformed_counter
        assert counter is not None

        def run() -> None:
            try:
                n = counter(msgs)
            except Exception:  # noqa: BLE001 - a metric must never break the stream
                log.exception("counting malformed messages failed")
                return
            with self._lock:
                self._malformed += n

        self._metrics_pool.submit(run)

    def _wait_for_data_or_drain(self, receiver: Receiver) -> None:
        while True:
            receiver.wait_for_data_or_drain(1.0)
            receiver.raise_if_failed()
            if receiver.has_buffered() or receiver.drained():
                return
            if receiver.unavailable_for() > AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS:
                raise ReceiverError(
                    f"Pub/Sub has been unavailable for {AVAILABLE_NOW_UNAVAILABLE_LIMIT_SECONDS:.0f} s while "
                    "Trigger.AvailableNow was draining the backlog; nothing was acknowledged that Spark did not commit"
                )

    def _maybe_summarise(self) -> None:
        now = time.monotonic()
        if now - self._last_summary < SUMMARY_EVERY_SECONDS:
            return
        self._last_summary = now
        log.info("crdb_pubsub source: %s", self.report())


def _hand_back_on_sigterm(receiver: Receiver) -> None:
    """Spark stops a query by SIGTERMing this process (``stop()`` is not called): before dying,
    send the acknowledgements already due and hand held messages back, so that the next run gets
    them at once instead of after their lease. Only possible from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    handling = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        if handling.is_set():  # a second SIGTERM while handing back: the first one finishes
            return
        handling.set()
        try:
            receiver.hand_back()
        finally:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def _make_receiver(options: "SourceOptions") -> Receiver:
    from .pubsub import load_credentials, subscriber_client

    host = options.effective_emulator_host
    client = subscriber_client(host, load_credentials(options))
    return Receiver(
        client,
        options.subscription_paths,
        lease_seconds=options.ackDeadlineSeconds,
        max_lease_seconds=options.maxLeaseDurationSeconds,
        max_messages=options.maxOutstandingMessages,
        max_bytes=options.maxOutstandingBytes,
        endpoint_description=f"the emulator at {host}" if host else "pubsub.googleapis.com",
    )


def split_evenly(items: list, parts: int | None, *, per_part: int = 20_000, max_parts: int = 8) -> list[list]:
    """Contiguous, near-equal slices; with ``parts=None`` one slice per ``per_part`` items."""
    if not items:
        return []
    if parts is None:
        parts = min(max_parts, max(1, math.ceil(len(items) / per_part)))
    parts = min(parts, len(items))
    size, extra = divmod(len(items), parts)
    out, i = [], 0
    for p in range(parts):
        n = size + (1 if p < extra else 0)
        out.append(items[i : i + n])
        i += n
    return out
