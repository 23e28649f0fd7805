"""Opening a subscription: check it (creating it on its topic when asked) and learn what it is."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..transport import Rpc

log = logging.getLogger("crdb_pubsub.subscription")

START_TIMEOUT_SECONDS = 15.0


class ReceiverError(RuntimeError):
    """Pub/Sub refused us for good (missing subscription, permissions, unreachable at start)."""


@dataclass(frozen=True)
class Subscription:
    """What the source needs to know of a subscription."""

    path: str
    ack_deadline: int  # seconds Pub/Sub leases a message for on delivery
    exactly_once: bool  # acknowledgements are answered per ack id (a confirmation is proof)
    ordered: bool  # a key's next messages wait while one of them is outstanding


def open_subscription(
    rpc: Rpc, sub: str, topic: str | None, wanted_filter: str | None, *, lease_seconds: int, endpoint: str
) -> Subscription:
    """Check ``sub`` (creating it on ``topic`` when given and missing).

    Raises :class:`ReceiverError` when Pub/Sub refuses it or can't be reached.
    """
    from google.api_core import exceptions as gexc

    try:
        try:
            info = rpc.get_subscription(sub)
        except gexc.NotFound:
            if not topic:
                raise ReceiverError(
                    f"subscription {sub} does not exist at {endpoint}; create it, or set option "
                    "'topic' to have it created on that topic"
                ) from None
            try:
                info = rpc.create_subscription(sub, topic, max(10, min(600, lease_seconds)), wanted_filter)
                log.info("created subscription %s on %s", sub, topic)
            except gexc.AlreadyExists:
                info = rpc.get_subscription(sub)
            except gexc.NotFound:
                raise ReceiverError(
                    f"topic {topic} does not exist at {endpoint}, so subscription {sub} can't be created on it"
                ) from None
    except ReceiverError:
        raise
    except (gexc.PermissionDenied, gexc.Unauthenticated) as exc:
        raise ReceiverError(f"Pub/Sub refused access to {sub} at {endpoint}: {exc.message}") from None
    except gexc.InvalidArgument as exc:
        raise ReceiverError(f"Pub/Sub rejected subscription {sub}: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - transient errors outlasted the start deadline
        raise ReceiverError(
            f"cannot reach Pub/Sub at {endpoint} to open {sub} (gave up after "
            f"{START_TIMEOUT_SECONDS:.0f} s): {type(exc).__name__}: {getattr(exc, 'message', exc)}"
        ) from None
    have = getattr(info, "filter", "") or None
    if wanted_filter is not None and have != wanted_filter:
        # Pub/Sub filters can't be changed: reading it anyway would read other messages.
        raise ReceiverError(
            f"subscription {sub} exists with filter {have!r}, not the option's filter "
            f"{wanted_filter!r}; filters are immutable: use another subscription name"
        )
    return Subscription(
        sub,
        int(getattr(info, "ack_deadline_seconds", 0) or 10),
        bool(getattr(info, "enable_exactly_once_delivery", False)),
        bool(getattr(info, "enable_message_ordering", False)),
    )
