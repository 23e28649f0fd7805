"""Pub/Sub clients, credentials, and the four RPCs the source makes, each with a real time bound.

Credentials come from, in order: the emulator (anonymous, plaintext channel), a key given as JSON
content, a key file, or Application Default Credentials. Key material never reaches a log line or
an exception message: errors from google-auth are replaced by a description of what was wrong.

Every RPC goes through :class:`Rpc`, which passes ``retry=None`` to the generated client (its
default Retry would otherwise wrap each call for 60 s and reset our ``timeout`` per attempt) and
retries transient errors itself within a stated total deadline (:class:`Policy`). The emulator
channel is built explicitly instead of through ``PUBSUB_EMULATOR_HOST`` so that two clients in one
process can talk to different endpoints (the environment is process-global).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:  # pragma: no cover
    from google.auth.credentials import Credentials
    from google.pubsub_v1 import PublisherClient, SubscriberClient

    from .options import SourceOptions

log = logging.getLogger("crdb_pubsub.transport")

SCOPES = ("https://www.googleapis.com/auth/pubsub",)

# Acknowledge/ModifyAckDeadline requests must stay below ~512 KB of ack ids; real ack ids are
# ~100-200 bytes, so both a count and a byte budget bound each request.
MAX_IDS_PER_REQUEST = 2500
MAX_ID_BYTES_PER_REQUEST = 400_000
# Requests of acknowledgements, hand-backs or lease renewals a caller keeps in flight at once: 25 ms
# from the service, one request after another bounds a caller at 100,000 ack ids a second.
REQUESTS_IN_FLIGHT = 4


class CredentialsError(RuntimeError):
    """Credentials could not be loaded (the message never contains key material)."""


def load_credentials(
    *, emulator_host: str | None, credentials_json: str | None = None, credentials_file: str | None = None
) -> Credentials | None:
    """Credentials for the real service, or ``None`` against the emulator."""
    if emulator_host:
        return None
    import google.auth
    from google.auth import exceptions as auth_exceptions

    if credentials_json is not None:
        try:
            info = json.loads(credentials_json)
        except ValueError:
            raise CredentialsError("credentialsJson is not valid JSON (content not shown)") from None
        try:
            creds, _ = google.auth.load_credentials_from_dict(info, scopes=SCOPES)
        except (auth_exceptions.GoogleAuthError, ValueError, KeyError, TypeError) as exc:
            raise CredentialsError(
                f"credentialsJson could not be loaded as Google credentials ({type(exc).__name__}; content not shown)"
            ) from None
        return creds
    if credentials_file is not None:
        try:
            creds, _ = google.auth.load_credentials_from_file(credentials_file, scopes=SCOPES)
        except FileNotFoundError:
            raise CredentialsError("credentialsFile does not exist or is not readable (path not shown)") from None
        except (auth_exceptions.GoogleAuthError, ValueError, KeyError, TypeError, OSError) as exc:
            raise CredentialsError(
                f"credentialsFile could not be loaded as Google credentials ({type(exc).__name__}; content not shown)"
            ) from None
        return creds
    try:
        creds, _ = google.auth.default(scopes=SCOPES)
    except auth_exceptions.DefaultCredentialsError:
        raise CredentialsError(
            "no Google credentials found: set credentialsFile or credentialsJson, run "
            "`gcloud auth application-default login`, or run where a service account is attached "
            "(Application Default Credentials); for the emulator set emulatorHost or PUBSUB_EMULATOR_HOST"
        ) from None
    return creds


def subscriber_client(
    emulator_host: str | None, credentials: Credentials | None = None, *, endpoint: str | None = None
) -> SubscriberClient:
    """Make a GAPIC ``SubscriberClient`` (unary Pull/Ack/ModifyAckDeadline; no streaming machinery).

    Plaintext to an emulator, else TLS with ``credentials`` to ``endpoint`` (default: the global one).
    """
    from google.pubsub_v1 import SubscriberClient
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

    if emulator_host:
        return SubscriberClient(transport=SubscriberGrpcTransport(channel=insecure_channel(emulator_host)))
    # The GAPIC transport already lifts gRPC's message-size limits for Pub/Sub.
    if endpoint:
        return SubscriberClient(credentials=credentials, client_options={"api_endpoint": endpoint})
    return SubscriberClient(credentials=credentials)


def publisher_client(
    emulator_host: str | None, credentials: Credentials | None = None, *, endpoint: str | None = None
) -> PublisherClient:
    """Make a GAPIC ``PublisherClient`` the same way as :func:`subscriber_client`."""
    from google.pubsub_v1 import PublisherClient
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    if emulator_host:
        return PublisherClient(transport=PublisherGrpcTransport(channel=insecure_channel(emulator_host)))
    if endpoint:
        return PublisherClient(credentials=credentials, client_options={"api_endpoint": endpoint})
    return PublisherClient(credentials=credentials)


# Pulls return up to 1000 messages of up to 10 MB each; the default 4 MB receive limit would
# reject a single large message.
_GRPC_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)


def insecure_channel(host_port: str):
    """Plaintext gRPC channel to an emulator, with Pub/Sub's message-size limits lifted."""
    import grpc

    return grpc.insecure_channel(host_port, options=_GRPC_OPTIONS)


def chunk_ack_ids(ack_ids: Sequence[str]) -> Iterator[list[str]]:
    """Split ack ids into request-sized lists (count and byte budget)."""
    if len(ack_ids) <= MAX_IDS_PER_REQUEST and sum(map(len, ack_ids)) <= MAX_ID_BYTES_PER_REQUEST:
        # The usual case, one request: the budget checked in C rather than id by id (every
        # acknowledgement, hand-back and renewal asks; the acker asks once more per job).
        return iter([list(ack_ids)] if ack_ids else [])
    return chunked(ack_ids, len, MAX_IDS_PER_REQUEST, MAX_ID_BYTES_PER_REQUEST)


def chunked(
    items: Iterable[T],
    size: Callable[[T], int],
    max_count: int,
    max_bytes: int,
    count: Callable[[T], int] | None = None,
) -> Iterator[list[T]]:
    """Split ``items`` into request-sized lists.

    At most ``max_count`` by ``count`` (one each unless given) and ``max_bytes`` by ``size`` each
    (an item larger than either goes alone).
    """
    chunk: list[T] = []
    total = counted = 0
    for item in items:
        n = size(item)
        k = 1 if count is None else count(item)
        if chunk and (counted + k > max_count or total + n > max_bytes):
            yield chunk
            chunk, total, counted = [], 0, 0
        chunk.append(item)
        total += n
        counted += k
    if chunk:
        yield chunk


def chunk_ack_id_groups(groups: Iterable[T], ack_ids: Callable[[T], Sequence[str]]) -> Iterator[list[T]]:
    """Split groups of ack ids (e.g. a chunk's) into request-sized lists of whole groups.

    A group larger than one request goes alone (its ids are then split by the call itself).
    """
    sized = [(g, ack_ids(g)) for g in groups]  # each group's ids built once, for both budgets
    for part in chunked(
        sized,
        lambda p: sum(map(len, p[1])),
        MAX_IDS_PER_REQUEST,
        MAX_ID_BYTES_PER_REQUEST,
        count=lambda p: len(p[1]),
    ):
        yield [g for g, _ in part]


# ------------------------------------------------------------------------------------------ RPCs


def _request(name: str, **fields: Any) -> Any:
    """Build a request message as the raw protobuf and wrap it for the generated client.

    Its repeated fields are filled in C: proto-plus would convert a list of ack ids one by one
    (~0.9 us an id against ~0.05 us).
    """
    from google.pubsub_v1.types import pubsub

    cls = getattr(pubsub, name)
    return cls.wrap(cls.pb()(**fields))


@dataclass(frozen=True)
class Policy:
    """How one kind of RPC is bounded: each attempt by ``attempt``, all of them by ``total``."""

    attempt: float
    total: float


# The bounds every caller relies on (stated in the README's Guarantees section).
GET_SUBSCRIPTION = Policy(attempt=5.0, total=15.0)
ACKNOWLEDGE = Policy(attempt=10.0, total=30.0)
MODIFY_DEADLINE = Policy(attempt=5.0, total=10.0)


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: the service or the network, not our request."""
    from google.api_core import exceptions as gexc

    return isinstance(
        exc,
        (
            gexc.ServiceUnavailable,
            gexc.DeadlineExceeded,
            gexc.InternalServerError,
            gexc.Aborted,
            gexc.ResourceExhausted,
            gexc.Unknown,
            gexc.Cancelled,
            gexc.GatewayTimeout,
            gexc.TooManyRequests,
            gexc.BadGateway,
        ),
    )


class Backoff:
    """Exponential backoff with full jitter between ``first`` and ``cap`` seconds."""

    def __init__(self, first: float = 0.1, cap: float = 10.0) -> None:
        self.first, self.cap, self.current = first, cap, 0.0

    def next(self) -> float:
        self.current = min(self.cap, self.current * 2 if self.current else self.first)
        return self.current * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.current = 0.0


@dataclass
class AckResult:
    """What Pub/Sub answered for the ack ids of one request: confirmed, or failed with a reason."""

    confirmed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def per_id_failures(exc: BaseException) -> dict[str, str] | None:
    """Return the ``{ack_id: reason}`` map an exactly-once subscription sends with a refused request.

    Pub/Sub answers an Acknowledge/ModifyAckDeadline on such a subscription per ack id: the RPC
    fails, and its ``ErrorInfo`` details list the ack ids that failed (``PERMANENT_FAILURE_*`` or
    ``TRANSIENT_FAILURE_*``); ack ids not listed succeeded. ``None`` when the error carries no
    such map (the whole request failed).
    """
    for detail in getattr(exc, "details", None) or ():
        metadata = getattr(detail, "metadata", None)
        reason = getattr(detail, "reason", "")
        if metadata is not None and "ACKID" in str(reason).upper():
            return dict(metadata)
    return None


class Rpc:
    """The source's RPCs on one ``SubscriberClient``, each bounded by its :class:`Policy`."""

    def __init__(
        self,
        client: SubscriberClient,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self._sleep = sleep
        self._clock = clock
        self._pull_stub = _raw_pull_stub(client)

    def pull(self, subscription: str, max_messages: int, timeout: float, *, return_immediately: bool = False) -> Any:
        """One Pull, no retry: the caller decides what an error or a timeout means.

        On a generated client the response is the serialized ``PullResponse`` (see
        :func:`_raw_pull_stub`; ``wire.pulled_batch`` reads either); errors are the same
        ``google.api_core`` exceptions either way.
        """
        if self._pull_stub is not None:
            return self._pull_stub(subscription, max_messages, timeout, return_immediately)
        request: dict[str, Any] = {"subscription": subscription, "max_messages": max_messages}
        if return_immediately:
            request["return_immediately"] = True
        return self.client.pull(request=request, timeout=timeout, retry=None)

    def get_subscription(self, subscription: str) -> Any:
        return self._call(
            lambda t: self.client.get_subscription(request={"subscription": subscription}, timeout=t, retry=None),
            GET_SUBSCRIPTION,
        )

    def create_subscription(self, subscription: str, topic: str, ack_deadline: int, filter: str | None = None) -> Any:
        request = {"name": subscription, "topic": topic, "ack_deadline_seconds": ack_deadline}
        if filter:
            request["filter"] = filter
        return self.client.create_subscription(request=request, timeout=GET_SUBSCRIPTION.attempt, retry=None)

    def acknowledge(self, subscription: str, ack_ids: Sequence[str], *, total: float | None = None) -> AckResult:
        """Acknowledge ``ack_ids``; per ack id, what Pub/Sub answered within the deadline."""
        return self._per_id(
            lambda ids, t: self.client.acknowledge(
                request=_request("AcknowledgeRequest", subscription=subscription, ack_ids=ids), timeout=t, retry=None
            ),
            ack_ids,
            ACKNOWLEDGE if total is None else Policy(ACKNOWLEDGE.attempt, total),
        )

    def modify_ack_deadline(
        self, subscription: str, ack_ids: Sequence[str], seconds: int, *, total: float | None = None
    ) -> AckResult:
        """Set the lease of ``ack_ids`` to ``seconds`` (0 hands the messages back at once)."""
        return self._per_id(
            lambda ids, t: self.client.modify_ack_deadline(
                request=_request(
                    "ModifyAckDeadlineRequest", subscription=subscription, ack_ids=ids, ack_deadline_seconds=seconds
                ),
                timeout=t,
                retry=None,
            ),
            ack_ids,
            MODIFY_DEADLINE if total is None else Policy(MODIFY_DEADLINE.attempt, total),
        )

    # ------------------------------------------------------------------ retry machinery

    def _call(self, fn: Callable[[float], Any], policy: Policy) -> Any:
        end = self._clock() + policy.total
        backoff = Backoff(0.1, 2.0)
        while True:
            left = end - self._clock()
            try:
                return fn(max(0.05, min(policy.attempt, left)))
            except Exception as exc:
                pause = backoff.next()
                if not is_transient(exc) or self._clock() + pause >= end:
                    raise
                self._sleep(pause)

    def _per_id(self, fn: Callable[[list[str], float], Any], ack_ids: Sequence[str], policy: Policy) -> AckResult:
        out = AckResult()
        for chunk in chunk_ack_ids(list(ack_ids)):
            end = self._clock() + policy.total
            backoff = Backoff(0.1, 2.0)
            todo = chunk
            while todo:
                left = end - self._clock()
                try:
                    fn(todo, max(0.05, min(policy.attempt, left)))
                    out.confirmed.extend(todo)
                    break
                except Exception as exc:  # noqa: BLE001 - classified below
                    failures = per_id_failures(exc)
                    if failures is not None:
                        # Exactly-once delivery: the ids not listed went through.
                        out.confirmed.extend(a for a in todo if a not in failures)
                        retry = [a for a in todo if a in failures and failures[a].startswith("TRANSIENT")]
                        for a in todo:
                            if a in failures and a not in retry:
                                out.failed[a] = failures[a]
                        transient = bool(retry)
                    else:
                        retry = todo
                        transient = is_transient(exc)
                    pause = backoff.next()
                    if not transient or self._clock() + pause >= end:
                        reason = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
                        for a in retry:
                            out.failed[a] = (failures or {}).get(a, reason)
                        break
                    todo = retry
                    self._sleep(pause)
        return out


def _raw_pull_stub(client: Any) -> Callable[[str, int, float, bool], bytes] | None:
    """Pull straight on a generated client's gRPC channel, for the hot path.

    The generated method costs ~0.3 ms of Python per call (proto-plus request, retry and timeout
    wrappers, logging interceptor, routing header) and Pub/Sub answers with at most 1,000 messages
    (the emulator: 100), so at tens of thousands of messages a second it was a large part of the
    driver's CPU. The same channel (its credentials included), the same routing header, gRPC
    errors mapped to ``google.api_core`` exceptions as the generated client does. The response is
    left as its bytes: ``wire.pulled_batch`` reads them column-wise (``pull_parse``), where
    reading upb's parse field by field cost some 1.4 us a message. ``None`` for anything but a
    generated client.
    """
    try:
        from google.pubsub_v1 import SubscriberClient
        from google.pubsub_v1.types import pubsub
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(client, SubscriberClient):
        return None
    channel = getattr(client.transport, "grpc_channel", None)
    if channel is None:  # pragma: no cover - a REST transport
        return None
    import grpc
    from google.api_core import exceptions as gexc

    request_pb = pubsub.PullRequest.pb()
    call = channel.unary_unary(
        "/google.pubsub.v1.Subscriber/Pull", request_serializer=request_pb.SerializeToString, response_deserializer=None
    )
    from urllib.parse import quote

    headers: dict[str, tuple[tuple[str, str], ...]] = {}

    def pull(subscription: str, max_messages: int, timeout: float, return_immediately: bool) -> bytes:
        metadata = headers.get(subscription)
        if metadata is None:
            metadata = headers[subscription] = (
                ("x-goog-request-params", f"subscription={quote(subscription, safe='')}"),
            )
        request = request_pb(
            subscription=subscription, max_messages=max_messages, return_immediately=return_immediately
        )
        try:
            return call(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc

    return pull


def rpc_for(options: SourceOptions) -> Rpc:
    """Make the :class:`Rpc` the options describe: their endpoint (or emulator) and credentials."""
    credentials = load_credentials(**options.credential_kwargs())
    return Rpc(subscriber_client(options.effective_emulator_host, credentials, endpoint=options.endpoint))


def group_by_subscription(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``[(subscription, ack_id), ...]`` -> ``{subscription: [ack_id, ...]}``."""
    out: dict[str, list[str]] = {}
    for sub, ack_id in pairs:
        out.setdefault(sub, []).append(ack_id)
    return out
