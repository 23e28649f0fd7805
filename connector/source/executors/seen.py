"""Which of the messages a task pulled it must not yield: asked of the driver, for exactly those ids.

A task must not yield a message that an earlier batch yielded (Pub/Sub delivers again after an
acknowledgement, answered or not) or that a slice of another uncommitted batch holds. The driver
knows both: the ids it acknowledged (proven ones for the dedupe window, the others for as long as
Pub/Sub keeps a message) and the slices it leases. Rather than ship those ids in every task's
order (8 B an id, one copy per task: millions of ids at a sustained rate), each task asks, once per
subscription, about the ids it pulled, and the driver answers with one byte each: yield or not.

The driver-side reader listens where the executors reach it (:mod:`..endpoints`), with a random
token the orders carry. A request is ``token, batch, subscription, N, L`` (a JSON line) and the
N message ids, one per line, L bytes in all; the answer is N bytes (``1``: do not yield). A task
that cannot reach the driver fails (Spark runs it again): yielding without the answer could yield
a message twice.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ..endpoints import Listening, connect

log = logging.getLogger("crdb_pubsub.seen")

CONNECT_TIMEOUT_SECONDS = 5.0
ANSWER_TIMEOUT_SECONDS = 30.0
MAX_CONNECTIONS = 64
MAX_HEADER = 4096

Answer = Callable[[int, str, list[str]], np.ndarray]
"""``answer(batch, subscription, message ids) -> bool array``: which a task of ``batch`` must not yield."""


class SeenServer:
    """The driver side: answers tasks' questions with ``answer`` from threads of its own."""

    def __init__(self, answer: Answer) -> None:
        self.token = secrets.token_hex(16)
        self._answer = answer
        self._listening = Listening()
        self.addresses: tuple[str, ...] = self._listening.addresses
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._closed = False
        for sock in self._listening.sockets:
            threading.Thread(target=self._accept, args=(sock,), name="crdb-pubsub-seen", daemon=True).start()

    @property
    def where(self) -> tuple[tuple[str, ...], str]:
        """What a task needs to ask: the addresses and the token."""
        return self.addresses, self.token

    def close(self) -> None:
        self._closed = True
        self._listening.close()

    def _accept(self, sock: socket.socket) -> None:
        while not self._closed:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self._slots.acquire()
            threading.Thread(target=self._serve, args=(conn,), name="crdb-pubsub-seen-answer", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(ANSWER_TIMEOUT_SECONDS)
                reader = conn.makefile("rb")
                head = json.loads(reader.readline(MAX_HEADER))
                if not secrets.compare_digest(str(head.get("t", "")), self.token):
                    return
                n, size = int(head["n"]), int(head["l"])
                mids = reader.read(size).decode().split("\n")[:n]
                if len(mids) != n:
                    raise ValueError(f"{len(mids)} message ids where the question said {n}")
                answer = self._answer(int(head["b"]), str(head["s"]), mids)
                conn.sendall(np.asarray(answer, dtype=np.uint8).tobytes())
        except Exception as exc:  # noqa: BLE001 - the task's question fails; it asks again when Spark retries it
            log.warning("answering a task about redelivered messages failed: %s", exc)
        finally:
            self._slots.release()


class SeenUnreachable(RuntimeError):
    """A task could not ask the driver-side reader which messages it must not yield."""


def ask(where: tuple[tuple[str, ...], str], batch: int, sub: str, mids: Sequence[str]) -> np.ndarray:
    """Task side: which of ``mids`` (pulled from ``sub`` by a task of ``batch``) must not be yielded.

    Raises :class:`SeenUnreachable` when the driver-side reader can't be reached or does not answer.
    """
    if not mids:
        return np.zeros(0, dtype=bool)
    addresses, token = where
    ids = ("\n".join(mids) + "\n").encode()
    head = json.dumps({"t": token, "b": batch, "s": sub, "n": len(mids), "l": len(ids)})
    body = (head + "\n").encode() + ids
    try:
        with connect(addresses, CONNECT_TIMEOUT_SECONDS) as s:
            s.settimeout(ANSWER_TIMEOUT_SECONDS)
            s.sendall(body)
            got = bytearray()
            while len(got) < len(mids):
                part = s.recv(len(mids) - len(got))
                if not part:
                    raise ConnectionError("the connection closed before the answer")
                got.extend(part)
    except OSError as exc:
        raise SeenUnreachable(
            f"crdb_pubsub: the task of batch {batch} could not ask the driver-side reader at {', '.join(addresses)} "
            f"which messages were delivered before ({type(exc).__name__}: {exc}); it fails so as not to yield a "
            "message twice (Spark runs it again). With receiver=executors the executors must reach the driver's host"
        ) from None
    return np.frombuffer(bytes(got), dtype=np.uint8).astype(bool)
