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
import socket
import threading
from typing import Callable

log = logging.getLogger("crdb_pubsub.stats")

CONNECT_TIMEOUT_SECONDS = 0.5
MAX_LINE = 512


class StatsServer:
    """Listens for executor reports; ``on_report(batch, partition, messages, malformed)``."""

    def __init__(self, on_report: Callable[[int, int, int, int], None]) -> None:
        self.token = secrets.token_hex(16)
        self._on_report = on_report
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Executors may run on other hosts: listen on every interface; reports need the token.
        self._sock.bind(("0.0.0.0", 0))
        self._sock.listen(64)
        port = self._sock.getsockname()[1]
        hosts = []
        try:
            ip = socket.gethostbyname(socket.gethostname())
            if not ip.startswith("127."):
                hosts.append(ip)
        except OSError:
            pass
        hosts.append("127.0.0.1")
        self.addresses: tuple[str, ...] = tuple(f"{h}:{port}" for h in hosts)
        self._closed = False
        threading.Thread(target=self._serve, name="crdb-pubsub-stats", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(2.0)
            data = b""
            while not data.endswith(b"\n") and len(data) < MAX_LINE:
                part = conn.recv(MAX_LINE)
                if not part:
                    break
                data += part
            msg = json.loads(data)
            if not secrets.compare_digest(str(msg.get("t", "")), self.token):
                return
            self._on_report(int(msg["b"]), int(msg["p"]), int(msg["n"]), int(msg["m"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        finally:
            conn.close()


_working: dict[tuple[str, ...], str] = {}
_warned = False


def send_report(addresses: tuple[str, ...], token: str, batch: int, partition: int, messages: int, malformed: int) -> None:
    """Executor side: tell the driver what decoding one partition found (best effort)."""
    global _warned
    line = (json.dumps({"t": token, "b": batch, "p": partition, "n": messages, "m": malformed}) + "\n").encode()
    order = [_working[addresses]] if addresses in _working else list(addresses)
    for address in order:
        host, port = address.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_SECONDS) as s:
                s.sendall(line)
            _working[addresses] = address
            return
        except OSError:
            continue
    _working.pop(addresses, None)
    if not _warned:
        _warned = True
        log.warning("could not report decode counts to the driver at %s: the 'malformed' metric will undercount",
                    ", ".join(addresses))
