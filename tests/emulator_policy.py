"""The test suite's emulator policy: start the real emulator, or skip when none is installed.

With ``CRDB_PUBSUB_REQUIRE_EMULATOR=1`` (``.ci/run`` sets it) a missing emulator fails instead: CI
never goes green by skipping. Kept out of the shipped package so that it holds no pytest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from crdb_pubsub.emulator import Emulator, EmulatorUnavailable, start_emulator

REQUIRE_ENV = "CRDB_PUBSUB_REQUIRE_EMULATOR"


def emulator_required() -> bool:
    """True when ``CRDB_PUBSUB_REQUIRE_EMULATOR`` is set to a truthy value (CI sets ``1``)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def start_emulator_or_skip(**kwargs: Any) -> Emulator:
    """The test-suite policy: :func:`start_emulator`, or ``pytest.skip`` if none is installed.

    With ``CRDB_PUBSUB_REQUIRE_EMULATOR=1`` a missing emulator fails the test instead (CI must
    never go green by skipping). :class:`EmulatorStartError` (found but broken) always propagates:
    a broken install is a failure, not a skip. Keyword arguments go to :func:`start_emulator`.
    """
    try:
        return start_emulator(**kwargs)
    except EmulatorUnavailable as exc:
        if emulator_required():
            pytest.fail(f"{REQUIRE_ENV}=1 but no Pub/Sub emulator is available:\n{exc}", pytrace=False)
        pytest.skip(
            f"no Pub/Sub emulator available (set {REQUIRE_ENV}=1 to fail instead): "
            f"{str(exc).splitlines()[0]} -- install google-cloud-cli-pubsub-emulator + Java 17+, "
            "or run Docker"
        )


@contextmanager
def emulator_or_skip(**kwargs: Any) -> Iterator[str]:
    """Like :func:`emulator` but with the skip/require policy of :func:`start_emulator_or_skip`.

    Intended for a session fixture::

        @pytest.fixture(scope="session")
        def pubsub_emulator():
            with emulator_or_skip() as host_port:
                yield host_port
    """
    emu = start_emulator_or_skip(**kwargs)
    try:
        yield emu.host_port
    finally:
        emu.stop()
