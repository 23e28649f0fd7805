"""A lease: one holder at a time for a key of a :class:`~crdb_pubsub.source.storage.Storage`, with an expiry.

It is built only on :meth:`~.Storage.read_versioned` and :meth:`~.Storage.swap` (so it works alike
on POSIX and Cloud Storage). Used for a stateDir's single-writer lock and for slice claims.

The lease object (JSON) records the holder (pid, host, since, a random token), the expiry (wall-clock
seconds) and whether it was released; its version (Cloud Storage: generation) is the *lease
generation*. Every change is a compare-and-swap on the version the changer read, so of two
processes that race for a lease exactly one gets it, and a holder whose renewal fails knows it lost.

Time and clocks:

- The holder writes ``expiry = now + ttl`` on acquiring and on every :meth:`Lease.renew`.
- Another process takes the lease over only once its own clock is past ``expiry + margin``.
- The holder stops writing (:meth:`Lease.check` raises :class:`LeaseLost`) once its own clock is
  past ``expiry - margin``. So with clocks less than ``margin`` apart, the holder has stopped
  ``2 * margin - skew`` seconds before anyone else can start.

Fencing: a write made through the lease (:meth:`Lease.create`, :meth:`Lease.swap`,
:meth:`Lease.delete`) first calls :meth:`Lease.check`, and records the lease key and generation in
the object's metadata (:data:`FENCE_KEY`, :data:`FENCE_GENERATION`; see :meth:`.Storage.stat`). A
holder that froze after its check can still land one write after losing the lease (no storage can
refuse it across objects); a reader that must exclude such writes compares the recorded generation
with the lease's current one.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from . import Storage

log = logging.getLogger("crdb_pubsub.storage.lease")

FENCE_KEY = "lease"
FENCE_GENERATION = "lease-generation"


class LeaseError(RuntimeError):
    """Base of the lease's errors."""


class LeaseHeld(LeaseError):
    """Another holder kept the lease for as long as :meth:`Lease.acquire` waited."""

    def __init__(self, message: str, holder: dict) -> None:
        super().__init__(message)
        self.holder = holder


class LeaseLost(LeaseError):
    """The lease is not (or may no longer be) held by this process: it must not write."""


class Lease:
    """The lease at ``key`` of ``storage``.

    Parameters
    ----------
    ttl
        Seconds a grant or renewal lasts. Renew well within it (:meth:`start_renewing` renews every
        ``ttl / 3`` by default).
    margin
        Seconds allowed for clock skew between hosts, on each side of the expiry (must be below
        ``ttl / 2``).
    clock
        Wall-clock seconds (``time.time``); a test gives its own, with ``sleep`` to advance it.
    sleep
        How to wait between polls in :meth:`acquire` (``time.sleep``).
    """

    def __init__(
        self,
        storage: Storage,
        key: str,
        *,
        ttl: float = 30.0,
        margin: float = 5.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 <= margin < ttl / 2:
            raise ValueError(f"lease margin {margin} s must be >= 0 and below half the ttl ({ttl} s)")
        self.storage = storage
        self.key = key
        self.ttl = float(ttl)
        self.margin = float(margin)
        self._clock = clock
        self._sleep = sleep
        # Guards the holder's fields below. A renewal's swap goes without it (see renew()), so that
        # check() and the fenced writes never wait for a storage call of the renewer's.
        self._mutex = threading.RLock()
        self._token = uuid.uuid4().hex
        self._generation: int | None = None
        self._expiry = 0.0
        self._since = 0.0
        self._lost: str | None = None
        # Why the last renewal failed, while none has succeeded since (the storage unreachable):
        # what check() says once it must refuse writes, since nobody took the lease over.
        self._renew_failed: str | None = None
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        # The record of another holder that :meth:`acquire` replaced (released or not: a holder
        # that did not release it crashed), with the note it released with.
        self.previous: dict | None = None

    def __repr__(self) -> str:
        return f"Lease({self.storage.description!r}, {self.key!r}, generation={self._generation})"

    # --------------------------------------------------------------- holding

    @property
    def generation(self) -> int | None:
        """The lease generation held (the version of the lease object this holder wrote last)."""
        return self._generation

    @property
    def expiry(self) -> float:
        return self._expiry

    def _record(self, expiry: float, *, released: bool = False, note: dict | None = None) -> bytes:
        return json.dumps(
            {
                "holder": {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": self._since,
                    "token": self._token,
                },
                "expiry": expiry,
                "released": released,
                **(note or {}),
            },
            separators=(",", ":"),
        ).encode()

    def acquire(self, wait: float, *, poll: float = 0.5, gone: Callable[[dict], bool] | None = None) -> Lease:
        """Take the lease, waiting up to ``wait`` seconds for the current holder's lease to expire or be released.

        Returns ``self``. ``gone(holder)`` may say that an unexpired holder is known to have ended
        (its process is gone from this host): its lease is taken at once, as a kernel releases a
        dead process's lock.

        Raises
        ------
        LeaseHeld
            Still held by another process when ``wait`` ran out; the message names the holder (pid,
            host, since when, until when) and the key.
        """
        with self._mutex:
            if self._generation is not None and self._lost is None:
                raise LeaseError(f"lease {self._where()} is already held by this object")
        deadline = self._clock() + wait
        while True:
            current = self.storage.read_versioned(self.key)
            now = self._clock()
            holder: dict = {}
            record: dict = {}
            expected: int | None = 0
            if current is not None:
                data, version = current
                record = _parse(data, self._where())
                holder = record.get("holder") or {}
                free = (
                    record.get("released")
                    or now > float(record.get("expiry", 0)) + self.margin
                    or (gone is not None and bool(holder) and gone(holder))
                )
                mine = holder.get("token") == self._token  # our own earlier try whose answer was lost
                expected = version if (free or mine) else None
            if expected is not None:
                with self._mutex:
                    self._since = now
                    expiry = now + self.ttl
                    generation = self.storage.swap(self.key, self._record(expiry), expected)
                    if generation is not None:
                        self._generation, self._expiry, self._lost = generation, expiry, None
                        if current is not None and holder.get("token") != self._token:
                            log.info("lease %s taken over from %s", self._where(), _describe(holder, record))
                            self.previous = record
                        return self
                continue  # someone else changed it between our read and swap: look again
            if now >= deadline:
                raise LeaseHeld(
                    f"lease {self._where()} is held by {_describe(holder, record)}; waited {wait:.0f} s",
                    holder={k: v for k, v in holder.items() if k != "token"},
                )
            self._sleep(max(0.0, min(poll, deadline - now)))

    def renew(self) -> None:
        """Extend the expiry to ``now + ttl`` with a compare-and-swap on the generation held.

        Raises
        ------
        LeaseLost
            Not held, released, or the swap failed: another process took the lease (this holder
            must stop writing; every later :meth:`check` raises too).
        """
        # The swap goes without the mutex: a write can stall for longer than the lease (its process
        # froze, its request queued), and check() must meanwhile answer from the last renewal that
        # landed, not wait; only the stop_renewing()/release() path waits for it (they join).
        with self._mutex:
            if self._generation is None or self._lost is not None:
                raise LeaseLost(f"lease {self._where()} is not held: {self._lost or 'never acquired'}")
            held = self._generation
            expiry = self._clock() + self.ttl
            record = self._record(expiry)
        try:
            generation = self.storage.swap(self.key, record, held)
        except Exception as exc:
            with self._mutex:
                self._renew_failed = f"the last renewal, at {_iso(self._clock())}, failed: {type(exc).__name__}: {exc}"
            raise
        with self._mutex:
            if self._generation != held or self._lost is not None:
                # Released meanwhile (release() swapped on this generation after this swap landed,
                # or before it and this one failed): nothing of this renewal is kept.
                raise LeaseLost(f"lease {self._where()} is not held: {self._lost or 'never acquired'}")
            self._renew_failed = None
            if generation is None:
                self._lost = "a renewal found the lease changed (another process took it over)"
                raise LeaseLost(f"lease {self._where()} was lost: {self._lost}")
            self._generation, self._expiry = generation, expiry

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless this holder may still write.

        It may while it holds the lease, no renewal failed, and by its own clock the lease is not
        within ``margin`` of expiring.
        """
        with self._mutex:
            if self._generation is None or self._lost is not None:
                raise LeaseLost(f"lease {self._where()} is not held: {self._lost or 'never acquired'}")
            now = self._clock()
            if now >= self._expiry - self.margin:
                raise LeaseLost(
                    f"lease {self._where()} may have expired: renewed until {_iso(self._expiry)}, "
                    f"and writes stop {self.margin:g} s before that (clock margin)"
                    + (f"; {self._renew_failed}" if self._renew_failed else "")
                )

    def holds(self) -> bool:
        """Return whether :meth:`check` would pass, without its mutex.

        For a caller that asks often from another thread (a leaser, every round): a read that races
        a renewal sees the expiry before it or after it, both of them times the lease held.
        """
        generation, lost, expiry = self._generation, self._lost, self._expiry
        return generation is not None and lost is None and self._clock() < expiry - self.margin

    def release(self, *, note: dict | None = None) -> None:
        """Stop renewing and give the lease up.

        A compare-and-swap to a released record on the generation held; it stays unreleased if
        another process had taken it. Idempotent. ``note`` (JSON fields) is left in the record for
        the next holder (:attr:`previous`).

        A released record, not a delete: the next holder takes it at once all the same, its message
        can say who released, and the CAS is one the test server enforces (fake-gcs-server 1.54.0
        ignores ``ifGenerationMatch`` on deletes, so a conditional delete could not be tested).
        """
        self.stop_renewing()
        with self._mutex:
            if self._generation is not None and self._lost is None:
                try:
                    self.storage.swap(self.key, self._record(self._clock(), released=True, note=note), self._generation)
                finally:
                    self._lost = "released"
                    self._generation = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # ---------------------------------------------------------------- renewer

    def start_renewing(self, every: float | None = None) -> None:
        """Renew every ``every`` seconds (``ttl / 3``) on a daemon thread.

        It renews until :meth:`stop_renewing`, :meth:`release`, or a renewal that finds the lease
        lost. A renewal that fails for another reason (the storage unreachable) is retried at the
        next tick; meanwhile :meth:`check` refuses writes once the expiry draws near.
        """
        every = self.ttl / 3 if every is None else every
        with self._mutex:
            if self._renewer is not None and self._renewer.is_alive():
                return
            self._stop = threading.Event()
            stop = self._stop
            self._renewer = threading.Thread(
                target=self._renew_loop, args=(every, stop), daemon=True, name=f"crdb-lease-renewer-{self.key}"
            )
            self._renewer.start()

    def _renew_loop(self, every: float, stop: threading.Event) -> None:
        while not stop.wait(every):
            try:
                self.renew()
            except LeaseLost as exc:
                log.error("%s; stopped renewing", exc)
                return
            except Exception as exc:  # noqa: BLE001 - retried at the next tick, check() fences meanwhile
                log.warning("renewing lease %s failed (retrying in %.1f s): %s", self._where(), every, exc)

    def stop_renewing(self) -> None:
        """Stop the renewer thread (if any) and wait for it to end."""
        with self._mutex:
            thread, self._renewer = self._renewer, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # ---------------------------------------------------------- fenced writes

    def fence(self, metadata: Mapping[str, str] | None = None) -> dict[str, str]:
        """:meth:`check`, then ``metadata`` plus the lease key and generation, for a write."""
        with self._mutex:
            self.check()
            return {**(metadata or {}), FENCE_KEY: self.key, FENCE_GENERATION: str(self._generation)}

    def create(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> bool:
        """:meth:`.Storage.create`, only while the lease is held (:class:`LeaseLost` otherwise)."""
        return self.storage.create(key, data, metadata=self.fence(metadata))

    def swap(self, key: str, data: bytes, expected: int, *, metadata: Mapping[str, str] | None = None) -> int | None:
        """:meth:`.Storage.swap`, only while the lease is held (:class:`LeaseLost` otherwise)."""
        return self.storage.swap(key, data, expected, metadata=self.fence(metadata))

    def delete(self, keys: Iterable[str]) -> None:
        """:meth:`.Storage.delete`, only while the lease is held (:class:`LeaseLost` otherwise)."""
        self.check()
        self.storage.delete(keys)

    def _where(self) -> str:
        return f"{self.key!r} in {self.storage.description}"

    def __getstate__(self):
        raise TypeError("a Lease belongs to the process that acquired it and cannot be pickled")


def _parse(data: bytes, where: str) -> dict:
    try:
        record = json.loads(data)
        float(record.get("expiry", 0))
        return record
    except (ValueError, TypeError, AttributeError) as exc:
        raise LeaseError(f"lease {where} holds something that is not a lease record") from exc


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _describe(holder: dict, record: dict) -> str:
    since = holder.get("since")
    return (
        f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
        f"since {_iso(float(since)) if since else '?'} (renewed until {_iso(float(record.get('expiry', 0)))})"
    )


__all__ = ["FENCE_GENERATION", "FENCE_KEY", "Lease", "LeaseError", "LeaseHeld", "LeaseLost"]
