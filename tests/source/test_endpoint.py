"""Option ``endpoint``: regional and Private Service Connect endpoints (TLS, with credentials), as
CockroachDB itself publishes to ``<region>-pubsub.googleapis.com`` (issue 14, item 3)."""

from __future__ import annotations

import pytest

from crdb_pubsub.source import transport
from crdb_pubsub.source.options import OptionError, parse_options

SUB = "projects/p/subscriptions/sub-x"


@pytest.fixture(autouse=True)
def _no_emulator(monkeypatch):
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)


def test_endpoint_is_validated_like_the_other_options():
    assert (
        parse_options({"subscription": SUB, "endpoint": "us-east1-pubsub.googleapis.com:443"}).endpoint
        == "us-east1-pubsub.googleapis.com:443"
    )
    for bad in ("us-east1-pubsub.googleapis.com", "host:0", "host:99999", "https://x:443"):
        with pytest.raises(OptionError, match="endpoint"):
            parse_options({"subscription": SUB, "endpoint": bad})
    with pytest.raises(OptionError, match=r"endpoint.*emulatorHost|emulatorHost.*endpoint"):
        parse_options({"subscription": SUB, "endpoint": "x.example:443", "emulatorHost": "127.0.0.1:8085"})


def test_the_client_is_built_for_the_endpoint_with_tls_and_credentials():
    from google.auth.credentials import AnonymousCredentials

    client = transport.subscriber_client(
        None, AnonymousCredentials(), endpoint="europe-west1-pubsub.googleapis.com:443"
    )
    try:
        assert client.api_endpoint == "europe-west1-pubsub.googleapis.com:443"
        assert client.transport._host == "europe-west1-pubsub.googleapis.com:443"
    finally:
        client.transport.close()
