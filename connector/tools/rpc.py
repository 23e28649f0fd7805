"""Deadlines and one-line reasons for the RPCs the ``crdb-pubsub`` commands make.

Every call a command makes has a total deadline (:data:`RPC_SECONDS`, no retry beyond it), and an
emulator's ``host:port`` is probed with a plain TCP connection first, so that a wrong port says
"connection refused" in a second instead of gRPC retrying for minutes. Failures become
:class:`Unreachable`, whose text is one line naming the host, the flag it came from and the cause.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["PROBE_SECONDS", "RPC_SECONDS", "Unreachable", "check_reachable", "emulator_source", "rpc_failure"]

PROBE_SECONDS = 5.0
# One admin call (get/create a topic or subscription, hand messages back): the emulator answers in
# milliseconds, the service in tens of them; a host silent for this long is not going to answer.
RPC_SECONDS = 8.0


class Unreachable(Exception):
    """Pub/Sub (or the emulator) at the address the command was given cannot be used: one line."""


def emulator_source(flag_value: str | None, env_value: str | None) -> str:
    """Which of ``--emulator-host`` / ``$PUBSUB_EMULATOR_HOST`` the host came from, for messages."""
    return "--emulator-host" if flag_value else "PUBSUB_EMULATOR_HOST" if env_value else "--emulator-host"


def check_reachable(host_port: str, origin: str, seconds: float = PROBE_SECONDS) -> None:
    """Open (and close) a TCP connection to ``host_port``; raise :class:`Unreachable` saying why not."""
    host, _, port = host_port.rpartition(":")
    where = f"the emulator at {host_port} ({origin})"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except socket.gaierror:
        raise Unreachable(f"cannot reach {where}: unknown host {host!r}") from None
    except ConnectionRefusedError:
        raise Unreachable(
            f"cannot reach {where}: connection refused (nothing listens there; "
            'start one with eval "$(crdb-pubsub emulator start)")'
        ) from None
    except TimeoutError:
        raise Unreachable(f"cannot reach {where}: no answer to a connection within {seconds:g} s") from None
    except OSError as exc:
        raise Unreachable(f"cannot reach {where}: {exc.strerror or type(exc).__name__}") from None


def rpc_failure(exc: BaseException, where: str, seconds: float = RPC_SECONDS) -> Unreachable:
    """Describe a failed RPC to ``where`` ("the emulator at H:P (--emulator-host)") in one line."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.RetryError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, gexc.DeadlineExceeded):
        return Unreachable(f"{where} did not answer within {seconds:g} s (is it a Pub/Sub emulator?)")
    return Unreachable(f"cannot reach {where}: {_cause(exc)}")


def _cause(exc: BaseException) -> str:
    # gRPC's details end with the cause: "failed to connect to all addresses; last error:
    # UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused".
    message: Any = getattr(exc, "message", None) or str(exc)
    text = " ".join(str(message).split())
    cause = text.rsplit(": ", 1)[-1] if "last error" in text else text
    return f"{type(exc).__name__}: {cause}" if cause else type(exc).__name__
