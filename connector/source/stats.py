"""Decode counts from the executors to the driver-side reader, for the ``malformed`` metric.

Only the executors decode, and in DROPMALFORMED mode the rows they drop never reach Spark, so the
driver learns how many messages were malformed from the executors themselves: each task sends one
short line (batch, partition, messages, malformed) over TCP to a listener in the driver-side
reader process, whose addresses and a random token travel inside the input partition. A retried
task replaces its earlier report. Best effort: an executor that can't reach the driver logs it
once and the metric undercounts; nothing else depends on it.
"""

from __future__ import annotations

import json
import logging
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable

from .endpoints import Listening, connect

log = logging.getLogger("crdb_pubsub.stats")

CONNECT_TIMEOUT_SECONDS = 0.5
MAX_LINE = 512
MAX_CONNECTIONS = 64  # open at once; more wait in the listen backlog
IDLE_SECONDS = 2.0  # a connection that sends no full line within this is closed


class StatsServer:
    """Listens for executor reports; ``on_report(batch, partition, messages, malformed)``.

    It listens where the executors reach it (:mod:`.endpoints`) and serves every connection from
    one thread: a report is one short line, so a slow or silent peer costs a socket, not a thread.
    """

    def __init__(self, on_report: Callable[[int, int, int, int], None]) -> None:
        self.token = secrets.token_hex(16)
        self._on_report = on_report
        self._listening = Listening()
        self.addresses: tuple[str, ...] = self._listening.addresses
        self._selector = selectors.DefaultSelector()
        for sock in self._listening.sockets:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, None)
        self._open: dict[socket.socket, tuple[bytes, float]] = {}
        self._closed = False
        threading.Thread(target=self._serve, name="crdb-pubsub-stats", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listening.close()

    def _serve(self) -> None:
        while not self._closed:
            try:
                events = self._selector.select(0.5)
            except (OSError, ValueError):
                return
            now = time.monotonic()
            for key, _ in events:
                if key.data is None:
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                else:
                    self._read(key.fileobj, now)  # type: ignore[arg-type]
            for conn, (_, since) in list(self._open.items()):
                if now - since > IDLE_SECONDS:
                    self._drop(conn)

    def _accept(self, sock: socket.socket) -> None:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        if len(self._open) >= MAX_CONNECTIONS:
            conn.close()
            return
        conn.setblocking(False)
        self._open[conn] = (b"", time.monotonic())
        self._selector.register(conn, selectors.EVENT_READ, True)

    def _read(self, conn: socket.socket, now: float) -> None:
        data, since = self._open.get(conn, (b"", now))
        try:
            part = conn.recv(MAX_LINE)
        except OSError:
            part = b""
        data += part
        if part and not data.endswith(b"\n") and len(data) < MAX_LINE:
            self._open[conn] = (data, since)
            return
        self._drop(conn)
        try:
            msg = json.loads(data)
            if not secrets.compare_digest(str(msg.get("t", "")), self.token):
                return
            self._on_report(int(msg["b"]), int(msg["p"]), int(msg["n"]), int(msg["m"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            pass

    def _drop(self, conn: socket.socket) -> None:
        self._open.pop(conn, None)
        try:
            self._selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()


_warned = False


def send_report(
    addresses: tuple[str, ...], token: str, batch: int, partition: int, messages: int, malformed: int
) -> None:
    """Executor side: tell the driver what decoding one partition found (best effort)."""
    global _warned
    line = (json.dumps({"t": token, "b": batch, "p": partition, "n": messages, "m": malformed}) + "\n").encode()
    try:
        with connect(addresses, CONNECT_TIMEOUT_SECONDS) as s:
            s.sendall(line)
        return
    except OSError:
        pass
    if not _warned:
        _warned = True
        log.warning(
            "could not report decode counts to the driver at %s: the 'malformed' metric will undercount",
            ", ".join(addresses),
        )
