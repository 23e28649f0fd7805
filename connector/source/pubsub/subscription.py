"""Opening a subscription: check it (creating it on its topic when asked) and learn what it is.

What it is comes from GetSubscription, which needs ``pubsub.subscriptions.get`` (``roles/pubsub.viewer``
or ``roles/pubsub.editor``). ``roles/pubsub.subscriber`` alone, the least a reader needs, lacks it.
Refused, the source takes the safe side of each setting and says so in one warning line:

* **ack deadline**: the shortest lease Pub/Sub grants (10 s; below that only against the emulator,
  with an ``ackDeadlineSeconds`` below it). The deadline proves leases alive from a delivery until
  the first renewal (a shorter one only renews sooner), and sizes the shadows an AvailableNow run
  waits out after a Pull that timed out or an acknowledgement not proven: a subscription whose
  deadline is longer may leave such messages to the next run, the documented limit.
* **exactly-once delivery off**: an acknowledgement then counts as proven only when answered while
  its lease was proven alive; per-id failures, which only an exactly-once subscription sends, are
  read as they come either way.
* **message ordering on**: an AvailableNow run trusts no answer that came while messages were held
  or being acknowledged (a key's next messages wait for those on an ordered subscription).

A subscription that does not exist, or that the credentials cannot consume, still fails at start:
TestIamPermissions, which needs no permission, tells (where the server answers it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..transport import Rpc

log = logging.getLogger("crdb_pubsub.subscription")

START_TIMEOUT_SECONDS = 15.0
PROBE_TIMEOUT_SECONDS = 5.0  # TestIamPermissions, one attempt
SHORTEST_ACK_DEADLINE = 10  # seconds: the least Pub/Sub grants (the emulator: 1)
CONSUME = "pubsub.subscriptions.consume"


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

    Raises :class:`ReceiverError` when Pub/Sub refuses it or can't be reached. Without the right to
    read it (GetSubscription refused), its settings are assumed (see the module).
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
            info = _create(rpc, sub, topic, wanted_filter, lease_seconds, endpoint) or rpc.get_subscription(sub)
        except gexc.PermissionDenied:
            # Not allowed to read it (roles/pubsub.subscriber alone): create it if asked and allowed,
            # else take what it is to be on the safe side.
            info = None
            if topic:
                try:
                    info = _create(rpc, sub, topic, wanted_filter, lease_seconds, endpoint)
                except gexc.PermissionDenied:
                    pass
            if info is None:
                return _assumed(rpc, sub, wanted_filter, lease_seconds, endpoint)
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


def _create(rpc: Rpc, sub: str, topic: str, wanted_filter: str | None, lease_seconds: int, endpoint: str) -> Any:
    """Create ``sub`` on ``topic``; None when it exists already."""
    from google.api_core import exceptions as gexc

    try:
        info = rpc.create_subscription(sub, topic, max(10, min(600, lease_seconds)), wanted_filter)
    except gexc.AlreadyExists:
        return None
    except gexc.NotFound:
        raise ReceiverError(
            f"topic {topic} does not exist at {endpoint}, so subscription {sub} can't be created on it"
        ) from None
    log.info("created subscription %s on %s", sub, topic)
    return info


def _assumed(rpc: Rpc, sub: str, wanted_filter: str | None, lease_seconds: int, endpoint: str) -> Subscription:
    """Return what ``sub`` is taken to be when the credentials may consume it but not read its settings."""
    if not _may_consume(rpc, sub):
        raise ReceiverError(
            f"Pub/Sub refused access to {sub} at {endpoint}: the subscription does not exist, or these "
            f"credentials lack {CONSUME} on it (grant roles/pubsub.subscriber on the subscription)"
        )
    if wanted_filter is not None:
        raise ReceiverError(
            f"subscription {sub} exists, and without pubsub.subscriptions.get (in roles/pubsub.viewer or "
            f"roles/pubsub.editor) its filter can't be checked against option 'filter' {wanted_filter!r}; "
            "grant that role on it, or drop option 'filter'"
        )
    deadline = min(SHORTEST_ACK_DEADLINE, lease_seconds)
    log.warning(
        "subscription %s: Pub/Sub refused GetSubscription, which needs pubsub.subscriptions.get (in "
        "roles/pubsub.viewer, not in roles/pubsub.subscriber), so its settings are assumed, the safe side "
        "of each: ack deadline %d s, exactly-once delivery off, message ordering on; grant "
        "roles/pubsub.viewer on the subscription to have them read instead",
        sub,
        deadline,
    )
    return Subscription(sub, deadline, exactly_once=False, ordered=True)


def _may_consume(rpc: Rpc, sub: str) -> bool:
    """Whether the credentials may consume ``sub``: False when Pub/Sub says they may not.

    TestIamPermissions needs no permission and answers an empty set for a subscription that does
    not exist. Where it can't answer (the emulator does not implement it, or it failed) the
    first Pull tells instead, so the answer is True.
    """
    client = getattr(rpc, "client", None)
    if client is None:
        return True
    try:
        held = client.test_iam_permissions(
            request={"resource": sub, "permissions": [CONSUME]}, timeout=PROBE_TIMEOUT_SECONDS, retry=None
        )
    except Exception as exc:  # noqa: BLE001 - a probe: Pull reports what it could not
        log.debug("TestIamPermissions on %s did not answer: %s", sub, exc)
        return True
    return CONSUME in list(getattr(held, "permissions", ()))
