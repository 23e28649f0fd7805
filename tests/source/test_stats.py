"""The decode-report listener: reachable by the executors, not by the world, bounded in threads."""

from __future__ import annotations

import socket
import threading
import time

from crdb_pubsub.source.stats import StatsServer, send_report


def _listening(ports: set[int]) -> set[str]:
    """Local addresses this host listens on at ``ports`` (from /proc/net/tcp)."""
    out = set()
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.split(":")
            if state == "0A" and int(port, 16) in ports:
                out.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return out


def test_the_listener_binds_where_executors_reach_it_and_holds_few_threads():
    got = []
    server = StatsServer(lambda *report: got.append(report))
    try:
        ports = {int(a.rsplit(":", 1)[1]) for a in server.addresses}
        listening = _listening(ports)
        assert listening and "0.0.0.0" not in listening, f"listening on {listening}"
        before = threading.active_count()
        host, port = server.addresses[-1].rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=2) for _ in range(60)]
        time.sleep(0.5)
        assert threading.active_count() - before < 10, "a thread per connection"
        send_report(server.addresses, server.token, 3, 1, 10, 2)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got == [(3, 1, 10, 2)], "a report did not arrive while idle connections were open"
        for s in idle:
            s.close()
    finally:
        server.close()
