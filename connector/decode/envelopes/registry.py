"""The envelope registry: every module in :mod:`.families` declares one :class:`Family`.

A new envelope is one new module there, defining ``FAMILY``. It is found by name, tried in
``order`` on every JSON object value, and the names it declares become values the ``envelope``
option, the ``tail`` command and ``decode_messages`` accept
(:data:`~crdb_pubsub.decode.vocabulary.ENVELOPES` is built from them). A family may also bring a
fast path (:class:`FastPath`), which the decoder runs on whole batches before the general path.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..columns import Part
from . import families
from .common import Bad, Context, Row

Value = dict[str, bytes]


class FastPath(Protocol):
    """A family's fast path: a whole batch decoded at once, for the bodies it can prove.

    Those are the bodies it can prove come out exactly as the family's ``decode`` (and the general
    path around it) makes them one by one: the same rows, values and columns. It leaves every other
    body to the general path.

    ``envelopes``: the ``envelope`` option values it runs under. ``likely(first)``: how surely a
    batch is this family's, judged by its first body (0: no sign, 1: its framing, 2: its exact
    signature); the decoder runs the most likely first, each on the bodies the others left.
    ``run(bodies, envelope)``: [(positions in ``bodies``, output columns)] of the bodies it proved,
    decoded under the ``envelope`` option (one of ``envelopes``).
    """

    @property
    def envelopes(self) -> tuple[str, ...]: ...

    def likely(self, first: bytes) -> int: ...

    def run(self, bodies: list[bytes], envelope: str) -> list[Part]: ...


@dataclass(frozen=True)
class BatchFast:
    """A :class:`FastPath` given as its two functions."""

    envelopes: tuple[str, ...]
    likely: Callable[[bytes], int]
    run: Callable[[list[bytes], str], list[Part]]


def _never(d: Value, keys: set[str], env: str) -> bool:
    return False


def _body_only(d: Value, raw: bytes, ctx: Context, env: str) -> list[Row]:  # pragma: no cover - never claims
    raise AssertionError("a family that claims no value decodes none")


@dataclass(frozen=True)
class Family:
    """One envelope family.

    ``claims(d, keys, env)`` says whether this family decodes the JSON object ``d`` (with keys
    ``keys``) under the ``envelope`` option ``env`` (``auto`` detects); the first family in
    ``order`` that claims it decodes it with ``decode(d, raw, ctx, env)``. ``names`` are the
    ``envelope`` option values that force this family; when one is forced and no family claims the
    value, ``refuse(d)`` gives the reason. ``body(body, env, ctx)`` runs before the body is parsed
    as a JSON object (for bodies that are not one: CSV records, key arrays); it returns rows, or
    ``None`` to pass. ``fast``: the family's fast path, if it has one.
    """

    order: int
    names: tuple[str, ...]
    decode: Callable[[Value, bytes, Context, str], list[Row]] = _body_only
    claims: Callable[[Value, set[str], str], bool] = _never
    refuse: Callable[[Value], str] | None = None
    body: Callable[[bytes, str, Context], list[Row] | None] | None = None
    fast: FastPath | None = None


def _discover() -> tuple[Family, ...]:
    found: list[Family] = []
    for info in pkgutil.iter_modules(families.__path__):
        module = importlib.import_module(f"{families.__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family):
            raise ImportError(f"{module.__name__} must define FAMILY = Family(...)")
        found.append(family)
    return tuple(sorted(found, key=lambda f: f.order))


FAMILIES = _discover()
NAMES: tuple[str, ...] = tuple(name for f in FAMILIES for name in f.names)
BODY_HOOKS = tuple(f.body for f in FAMILIES if f.body is not None)


def decode_value(d: Value, raw: bytes, ctx: Context, env: str) -> list[Row]:
    """Decode a CockroachDB or Debezium value object under envelope ``env`` (or ``auto``)."""
    keys = set(d)
    for family in FAMILIES:
        if family.claims(d, keys, env):
            return family.decode(d, raw, ctx, env)
    for family in FAMILIES:
        if env in family.names and family.refuse is not None:
            raise Bad(family.refuse(d))
    raise Bad(f"envelope={env}: the message does not have that shape")
