"""Pub/Sub clients and the few RPCs the receiver needs, with credentials from Google's standard places.

Credentials come from, in order: the emulator (anonymous, plaintext channel), ``credentialsJson``,
``credentialsFile``, or Application Default Credentials. Key material never reaches a log line or an
exception message: errors from google-auth are replaced by a description of what was wrong.

The emulator channel is built explicitly instead of through ``PUBSUB_EMULATOR_HOST`` so that two
clients in one process can talk to different endpoints (the environment is process-global).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from google.auth.credentials import Credentials
    from google.pubsub_v1 import PublisherClient, SubscriberClient

    from .options import SourceOptions

log = logging.getLogger("crdb_pubsub.pubsub")

SCOPES = ("https://www.googleapis.com/auth/pubsub",)

# Acknowledge/ModifyAckDeadline requests must stay below ~512 KB of ack ids; real ack ids are
# ~100-200 bytes, so both a count and a byte budget bound each request.
MAX_IDS_PER_REQUEST = 2500
MAX_ID_BYTES_PER_REQUEST = 400_000


class CredentialsError(RuntimeError):
    """Credentials could not be loaded (the message never contains key material)."""


def load_credentials(options: "SourceOptions") -> "Credentials | None":
    """Credentials for the real service, or ``None`` against the emulator."""
    if options.effective_emulator_host:
        return None
    import google.auth
    from google.auth import exceptions as auth_exceptions

    if options.credentialsJson is not None:
        try:
            info = json.loads(options.credentialsJson.get_secret_value())
        except ValueError:
            raise CredentialsError("credentialsJson is not valid JSON (content not shown)") from None
        try:
            creds, _ = google.auth.load_credentials_from_dict(info, scopes=SCOPES)
        except (auth_exceptions.GoogleAuthError, ValueError, KeyError, TypeError) as exc:
            raise CredentialsError(
                f"credentialsJson could not be loaded as Google credentials ({type(exc).__name__}; content not shown)"
            ) from None
        return creds
    if options.credentialsFile is not None:
        path = options.credentialsFile.get_secret_value()
        try:
            creds, _ = google.auth.load_credentials_from_file(path, scopes=SCOPES)
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


def subscriber_client(emulator_host: str | None, credentials: "Credentials | None" = None) -> "SubscriberClient":
    """A GAPIC ``SubscriberClient`` (unary Pull/Ack/ModifyAckDeadline; no streaming machinery)."""
    from google.pubsub_v1 import SubscriberClient
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

    if emulator_host:
        return SubscriberClient(transport=SubscriberGrpcTransport(channel=insecure_channel(emulator_host)))
    # The GAPIC transport already lifts gRPC's message-size limits for Pub/Sub.
    return SubscriberClient(credentials=credentials)


def publisher_client(emulator_host: str | None, credentials: "Credentials | None" = None) -> "PublisherClient":
    """A GAPIC ``PublisherClient`` built the same way as :func:`subscriber_client`."""
    from google.pubsub_v1 import PublisherClient
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    if emulator_host:
        return PublisherClient(transport=PublisherGrpcTransport(channel=insecure_channel(emulator_host)))
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
    chunk: list[str] = []
    size = 0
    for ack_id in ack_ids:
        n = len(ack_id)
        if chunk and (len(chunk) >= MAX_IDS_PER_REQUEST or size + n > MAX_ID_BYTES_PER_REQUEST):
            yield chunk
            chunk, size = [], 0
        chunk.append(ack_id)
        size += n
    if chunk:
        yield chunk


def group_by_subscription(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``[(subscription, ack_id), ...]`` -> ``{subscription: [ack_id, ...]}``."""
    out: dict[str, list[str]] = {}
    for sub, ack_id in pairs:
        out.setdefault(sub, []).append(ack_id)
    return out
