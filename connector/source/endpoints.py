"""Where the driver-side reader listens for the executors, and how a task reaches it.

The driver-side reader serves the executors over plain TCP: their decode counts (:mod:`.stats`)
and, with ``receiver=driver``, the batches they decode (:mod:`.driver.handoff`). It listens on
this host's addresses that other hosts reach and on loopback (local mode), never on every
interface; the addresses travel to the tasks inside the input partitions, and a task tries them in
order, remembering the one that answered.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

BACKLOG = 64


def _host_addresses() -> list[str]:
    """Return this host's IPv4 addresses that executors elsewhere may reach, best first.

    Spark's own override (``SPARK_LOCAL_IP``), the host name's address, and the address of the
    interface that routes off this host (hosts whose name resolves to loopback, as Debian's
    ``127.0.1.1``, have one; nothing is sent).
    """
    found: list[str] = []
    candidates: list[str] = []
    if os.environ.get("SPARK_LOCAL_IP"):
        candidates.append(os.environ["SPARK_LOCAL_IP"])
    try:
        candidates.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 9))
            candidates.append(probe.getsockname()[0])
    except OSError:
        pass
    for ip in candidates:
        if ip and not ip.startswith("127.") and ip != "0.0.0.0" and ip not in found:
            found.append(ip)
    return found


class Listening:
    """Listening sockets on this host's reachable addresses and on loopback; ``addresses`` as ``host:port``."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        addresses: list[str] = []
        for host in [*_host_addresses(), "127.0.0.1"]:
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, 0))
                sock.listen(BACKLOG)
            except OSError:
                continue
            self.sockets.append(sock)
            addresses.append(f"{host}:{sock.getsockname()[1]}")
        self.addresses: tuple[str, ...] = tuple(addresses)

    def close(self) -> None:
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


_working: dict[tuple[str, ...], str] = {}


def connect(addresses: tuple[str, ...], timeout: float) -> socket.socket:
    """Connect to the first of ``addresses`` that answers (the one that answered last time first).

    Raises the last ``OSError`` when none does.
    """
    error: OSError = ConnectionRefusedError(f"no address among {addresses!r}")
    for address in _in_order(addresses):
        host, port = address.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except OSError as exc:
            error = exc
            continue
        _working[addresses] = address
        return sock
    _working.pop(addresses, None)
    raise error


def _in_order(addresses: tuple[str, ...]) -> Iterator[str]:
    first = _working.get(addresses)
    if first is not None:
        yield first
    yield from (a for a in addresses if a != first)
