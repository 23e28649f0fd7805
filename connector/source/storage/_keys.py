"""Helpers both implementations share: what a key and a prefix may be."""

from __future__ import annotations

from collections.abc import Mapping


def check_key(key: str) -> str:
    """``key`` if it is a valid key (see the package docstring), else ``ValueError``."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a storage key must be a non-empty str, not {key!r}")
    for part in key.split("/"):
        if not part or part.startswith(".") or "\\" in part or "\x00" in part:
            raise ValueError(
                f"invalid storage key {key!r}: parts are separated by one '/', are not empty and do not start with '.'"
            )
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` if every complete part of it is valid (its last part may be partial or empty)."""
    if not isinstance(prefix, str):
        raise ValueError(f"a storage prefix must be a str, not {prefix!r}")
    if prefix:
        head, _, last = prefix.rpartition("/")
        if head:
            check_key(head)
        if last.startswith(".") or "\\" in last or "\x00" in last:
            raise ValueError(f"invalid storage prefix {prefix!r}")
    return prefix


def check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Check ``metadata`` and return a copy with str keys and values, none of them using the reserved prefix."""
    out: dict[str, str] = {}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or not k:
            raise ValueError(f"object metadata is str -> str, not {k!r}: {v!r}")
        if k.startswith(RESERVED):
            raise ValueError(f"object metadata key {k!r}: the prefix {RESERVED!r} is reserved")
        out[k] = v
    return out


# Metadata keys starting with this are the implementations' own (never returned by stat).
RESERVED = "crdb-storage-"
