"""One storage interface for a ``stateDir``, on a POSIX file system or on Cloud Storage.

:func:`open_storage` picks the implementation from the ``stateDir`` option: ``gs://bucket/prefix``
is Cloud Storage (:class:`.gcs.GcsStorage`), a path or a ``file://`` URL is a local or mounted file
system (:class:`.posix.PosixStorage`). Both keep the same promises, listed on :class:`Storage`;
``tests/source/storage/test_conformance.py`` runs one set of tests over both.

Keys are relative names under the storage's root, their parts separated by ``/`` (``batches/7.arrow``).
A part is never empty, ``.`` or ``..``, and never starts with ``.`` (names starting with a dot are the
POSIX implementation's own temporary and lock files). Objects are small to medium (KB to tens of MB).

Versions (:meth:`Storage.read_versioned`, :meth:`Storage.swap`) are opaque positive integers, unique
per write of a key: Cloud Storage's generation, or a number the POSIX implementation stores with the
data. A key that was deleted and written again never gets a version it had before.

Leases (one holder at a time, with an expiry) are built once over ``read_versioned``/``swap`` in
:mod:`.lease`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ObjectInfo", "Storage", "StorageError", "open_storage"]


class StorageError(RuntimeError):
    """An object exists but cannot be read as one this storage wrote."""


@dataclass(frozen=True)
class ObjectInfo:
    """What :meth:`Storage.stat` knows of an object without reading its bytes."""

    size: int  # bytes of data (as :meth:`Storage.read` returns them)
    version: int  # the version :meth:`Storage.read_versioned` would return
    metadata: Mapping[str, str] = field(default_factory=dict)  # as given to create/swap


@runtime_checkable
class Storage(Protocol):
    """Write-once objects, compare-and-swap objects, listing and deletion under one root.

    Every method may raise ``OSError`` (POSIX) or ``google.api_core.exceptions.GoogleAPIError``
    (Cloud Storage) when the storage itself fails; the results below are what a call that returns
    promises. Instances are safe to share between threads and can be pickled (to Spark executors):
    a pickle holds the location only, never a client or credentials.
    """

    #: The root as the user gave it (a path or ``gs://bucket/prefix``), for messages. Never holds
    #: credentials.
    description: str

    #: Whether a :meth:`list` may miss objects written moments ago (a shared file system's client
    #: caches folders: NFS attribute caching). Reads by exact name are always current; a caller that
    #: must see every object looks those up by name.
    listing_may_lag: bool

    def create(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> bool:
        """Store ``data`` at ``key`` only if no object is there (write-once; first writer wins).

        Returns
        -------
        bool
            True when this call created the object; False when an object already existed (it is
            left as it was: a create never overwrites). When this returns, the object is durable.
            A writer that dies mid-call leaves nothing readable under ``key``: readers see either
            no object or all of ``data``. Of any number of concurrent creates of one key (threads,
            processes, hosts), exactly one returns True.

        Notes
        -----
        ``metadata`` (short str -> str pairs) is stored with the object, atomically with it, and
        returned by :meth:`stat`.
        """
        ...

    def read(self, key: str) -> bytes | None:
        """Return the object's data, or None when there is no object at ``key``."""
        ...

    def stat(self, key: str) -> ObjectInfo | None:
        """Size, version and metadata of the object at ``key`` (its data is not read), or None."""
        ...

    def open_input(self, key: str) -> Any | None:
        """Open a random-access readable file of the object's data, or return None when there is none.

        The file suits ``pyarrow.ipc.open_file``: with
        ``pyarrow.ipc.IpcReadOptions(included_fields=...)`` only the footer, the batches' metadata
        and the chosen columns' buffers are read (POSIX: from a memory map; Cloud Storage: ranged
        reads of that one generation, so a concurrent rewrite is never mixed in). Close it when done
        (it is a context manager).
        """
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Keys that start with ``prefix`` (a string prefix, not only a folder), sorted.

        Strongly consistent unless :attr:`listing_may_lag`: every create/swap that returned before
        the call is listed, every delete that returned is not. Where it may lag, a listing is the
        folder as it was a few seconds ago: newer objects are missing, objects deleted since may
        still be listed (reading one by name returns None).
        """
        ...

    def delete(self, keys: Iterable[str]) -> None:
        """Delete the objects at ``keys``; keys with no object are fine."""
        ...

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object whose key starts with ``prefix`` (``""``: everything under the root)."""
        ...

    def read_versioned(self, key: str) -> tuple[bytes, int] | None:
        """Return the object's data and version, or None when there is no object at ``key``.

        Read the objects that :meth:`swap` writes with this (their versions are what ``swap``
        compares); it works on objects written by :meth:`create` too.
        """
        ...

    def swap(self, key: str, data: bytes, expected: int, *, metadata: Mapping[str, str] | None = None) -> int | None:
        """Compare-and-swap: replace the object at ``key`` with ``data`` only if its version is ``expected``.

        ``expected=0``: only if there is no object.

        Returns
        -------
        int | None
            The new version when this call wrote; None when the precondition failed (the object is
            left as it was). Of concurrent swaps with the same ``expected`` at most one returns a
            version. Durable, and atomic for readers, as :meth:`create`.
        """
        ...


_RELATIVE_STATE_DIR = (
    "a relative path is another directory for every process and node (each resolves it against its own "
    "working directory)"
)


def check_state_dir(url_or_path: str) -> str:
    """Return the ``stateDir`` value stripped, or raise ``ValueError`` saying why no storage serves it.

    The one rule: ``gs://bucket[/prefix]``, an absolute path, or ``file:///path``. The option's
    validation and :func:`open_storage` both apply it. Messages never quote a ``user:password@``.
    """
    import os
    from urllib.parse import unquote, urlsplit

    value = str(url_or_path).strip()
    if not value:
        raise ValueError("stateDir is empty: give a path, file:///path or gs://bucket/prefix")
    if "://" not in value:
        if not os.path.isabs(value):
            raise ValueError(_RELATIVE_STATE_DIR)  # the value is named by whoever reports it
        return value
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"stateDir {_safe(value)!r}: a file:// URL names a local path "
                "(file:///path); for Cloud Storage use gs://bucket/prefix"
            )
        if not unquote(parts.path).startswith("/"):
            raise ValueError(_RELATIVE_STATE_DIR)  # the value is named by whoever reports it
        return value
    if scheme == "gs" and parts.netloc:
        return value
    raise ValueError(
        f"{_safe(value)!r} is not a stateDir this source can use: give gs://bucket/prefix (Cloud Storage), a "
        "path, or file:///path (a local disk, or a mount every node reaches); hdfs:// and s3a:// are not supported"
    )


def open_storage(url_or_path: str) -> Storage:
    """Open the :class:`Storage` for a ``stateDir`` value (:func:`check_state_dir` says which).

    ``gs://bucket[/prefix]`` -> Cloud Storage (credentials: Application Default Credentials, or the
    emulator's anonymous access when ``STORAGE_EMULATOR_HOST`` is set); an absolute path or
    ``file:///path`` -> a POSIX file system.
    """
    from urllib.parse import unquote, urlsplit

    value = check_state_dir(url_or_path)
    if "://" not in value:
        from .posix import PosixStorage

        return PosixStorage(value)
    parts = urlsplit(value)
    if parts.scheme.lower() == "file":
        from .posix import PosixStorage

        return PosixStorage(unquote(parts.path))
    from .gcs import GcsStorage

    return GcsStorage(value)


def _safe(value: str) -> str:
    """``value`` without any user:password@ part, for messages."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
    except ValueError:
        return "<unparseable>"
    if "@" in parts.netloc:
        return value.replace(parts.netloc, "***@" + parts.netloc.rsplit("@", 1)[1], 1)
    return value
