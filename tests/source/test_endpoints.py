"""Where the driver-side reader listens, and how a task reaches it."""

from __future__ import annotations

import socket

import pytest

from crdb_pubsub.source import endpoints


def _dead_address() -> str:
    """A loopback address nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_it_listens_on_loopback_and_never_on_every_interface():
    listening = endpoints.Listening()
    try:
        hosts = [a.rsplit(":", 1)[0] for a in listening.addresses]
        assert "127.0.0.1" in hosts and "0.0.0.0" not in hosts
        assert len(set(hosts)) == len(hosts)
    finally:
        listening.close()


def test_a_task_tries_the_addresses_in_order_and_remembers_the_one_that_answered():
    listening = endpoints.Listening()
    dead = _dead_address()
    loopback = next(a for a in listening.addresses if a.startswith("127."))
    addresses = (dead, loopback)
    try:
        with endpoints.connect(addresses, timeout=2.0) as s:
            assert s.getpeername()[1] == int(loopback.rsplit(":", 1)[1])
        assert endpoints._working[addresses] == loopback
        listening.close()
        with pytest.raises(OSError):
            endpoints.connect(addresses, timeout=2.0)
        assert addresses not in endpoints._working
    finally:
        listening.close()
