"""A loopback TCP proxy that can refuse clients: the query's view of a Pub/Sub outage.

The emulator keeps everything in memory, so after it is killed and restarted its topic and
subscription must be recreated. The query talks to the emulator through this proxy, which refuses
(resets) every connection from the kill until the new emulator is ready and recreated: the
receiver sees UNAVAILABLE for the whole outage and never a half-restarted emulator (a Pull that hit
the new emulator before the subscription was recreated would get NOT_FOUND, a permanent error).
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, backend: tuple[str, int]) -> None:
        self.backend = backend
        self._open = threading.Event()
        self._open.set()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.host_port = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True, name="fault-proxy").start()

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until :meth:`resume`."""
        self._open.clear()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for s in conns:
            _close(s)

    def resume(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.backend, timeout=2)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)


def _close(s: socket.socket) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST, not FIN
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
