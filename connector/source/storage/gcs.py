""":class:`GcsStorage`: the :class:`~crdb_pubsub.source.storage.Storage` promises on Cloud Storage.

Built with ``google-cloud-storage`` (JSON API).

Object ``<key>`` is ``gs://<bucket>/<prefix>/<key>``; its version is its generation.

- :meth:`create` uploads with ``ifGenerationMatch=0`` (412: an object exists) and :meth:`swap` with
  ``ifGenerationMatch=<expected>``. Cloud Storage makes an upload visible only once it is complete,
  so a writer that dies mid-upload leaves nothing. Uploads up to 8 MiB are one multipart request;
  larger ones are resumable (the client library's rule), with the precondition sent when the
  session starts.
- The client retries a conditional upload whose answer was lost; the retry then meets its own first
  try's object and gets 412. Each create/swap therefore stores a random token in the object's
  metadata, and a 412 is checked against it (one metadata GET): a call reports what it did, not what
  its retry saw.
- Listing is strongly consistent on Cloud Storage; so are reads after writes and deletes.

Credentials: with ``STORAGE_EMULATOR_HOST`` set (the convention ``google-cloud-storage`` and
``gcsfs`` honour) the library talks to that emulator anonymously; otherwise Application Default
Credentials (``google.auth.default``: on Dataproc the VM's service account). Credentials and
clients are never logged, shown by ``repr`` or pickled: a pickled instance holds the URL and
builds its client again, lazily, where it is unpickled. A call borrows a client from a small pool
for its duration, so that concurrent calls never share one (not thread-local: pyarrow reads an
input file from threads of its own, whose Python thread state is new on every call).
"""

from __future__ import annotations

import io
import os
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from . import ObjectInfo
from ._keys import RESERVED, check_key, check_metadata, check_prefix

_WRITE_TOKEN = RESERVED + "write"
_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_CONTENT_TYPE = "application/octet-stream"


class GcsStorage:
    """Objects under ``gs://bucket/prefix`` (see the module docstring)."""

    listing_may_lag = False  # Cloud Storage lists strongly consistently

    #: Seconds for one HTTP request (the client retries within its own deadline).
    timeout: float = 60.0

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme.lower() != "gs":
            raise ValueError(f"not a gs:// URL: {url!r}")
        if "@" in parts.netloc or ":" in parts.netloc or parts.query or parts.fragment:
            raise ValueError("stateDir gs:// URL: give gs://bucket/prefix (no user, port, query or fragment)")
        bucket = parts.netloc
        if not _BUCKET.match(bucket):
            raise ValueError(
                f"stateDir {url!r}: {bucket!r} is not a Cloud Storage bucket name; accepted: gs://bucket/prefix"
            )
        prefix = parts.path.strip("/")
        if prefix:
            check_key(prefix)
        self.bucket_name = bucket
        self.prefix = prefix
        self.description = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        self._root = prefix + "/" if prefix else ""
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._free: list[Any] = []  # Bucket handles not in use, each with its own client
        self._lock = threading.Lock()
        self._credentials: Any = None
        self._project: str | None = None
        self._pool: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"GcsStorage({self.description!r})"

    def __getstate__(self) -> dict:
        return {"url": self.description}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["url"])

    # ---------------------------------------------------------------- clients

    @contextmanager
    def _bucket(self) -> Iterator[Any]:
        """Lend a ``Bucket`` handle whose client no other call uses meanwhile (made when none is free)."""
        with self._lock:
            bucket = self._free.pop() if self._free else None
        if bucket is None:
            bucket = self._new_bucket()
        try:
            yield bucket
        finally:
            with self._lock:
                self._free.append(bucket)

    def _new_bucket(self):
        try:
            from google.cloud import storage
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise ImportError(
                f"stateDir {self.description} needs google-cloud-storage (pip install google-cloud-storage)"
            ) from exc
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            client = storage.Client(project=None)  # the emulator's endpoint, anonymous
        else:
            credentials, project = self._default_credentials()
            client = storage.Client(project=project, credentials=credentials)
        return client.bucket(self.bucket_name)

    def _default_credentials(self):
        with self._lock:
            if self._credentials is None:
                import google.auth

                self._credentials, project = google.auth.default(scopes=list(_SCOPES))
                self._project = project or None
            return self._credentials, self._project

    def _name(self, key: str) -> str:
        return self._root + check_key(key)

    # ------------------------------------------------------------------ write

    def create(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> bool:
        return self._upload(self._name(key), data, 0, check_metadata(metadata)) is not None

    def swap(self, key: str, data: bytes, expected: int, *, metadata: Mapping[str, str] | None = None) -> int | None:
        if not isinstance(expected, int) or expected < 0:
            raise ValueError(f"expected must be a version (int > 0) or 0 for 'absent', not {expected!r}")
        return self._upload(self._name(key), data, expected, check_metadata(metadata))

    def _upload(self, name: str, data: bytes, expected: int, meta: dict[str, str]) -> int | None:
        from google.api_core.exceptions import PreconditionFailed

        token = uuid.uuid4().hex
        with self._bucket() as bucket:
            blob = bucket.blob(name)
            blob.metadata = {**meta, _WRITE_TOKEN: token}
            try:
                blob.upload_from_string(
                    bytes(data), content_type=_CONTENT_TYPE, if_generation_match=expected, timeout=self.timeout
                )
            except PreconditionFailed:
                # Another writer's object, or this call's own first try whose answer was lost.
                current = bucket.get_blob(name, timeout=self.timeout)
                if current is not None and (current.metadata or {}).get(_WRITE_TOKEN) == token:
                    return int(current.generation)
                return None
            return int(blob.generation)

    # ------------------------------------------------------------------- read

    def read(self, key: str) -> bytes | None:
        got = self.read_versioned(key)
        return None if got is None else got[0]

    def read_versioned(self, key: str) -> tuple[bytes, int] | None:
        from google.api_core.exceptions import NotFound

        name = self._name(key)
        with self._bucket() as bucket:
            blob = bucket.blob(name)
            try:
                data = blob.download_as_bytes(timeout=self.timeout)
            except NotFound:
                return None
        # The download's x-goog-generation header: the generation these bytes are.
        return data, int(blob.generation)

    def stat(self, key: str) -> ObjectInfo | None:
        name = self._name(key)
        with self._bucket() as bucket:
            blob = bucket.get_blob(name, timeout=self.timeout)
        if blob is None:
            return None
        meta = {k: v for k, v in (blob.metadata or {}).items() if not k.startswith(RESERVED)}
        return ObjectInfo(size=int(blob.size), version=int(blob.generation), metadata=meta)

    def open_input(self, key: str) -> GcsInputFile | None:
        name = self._name(key)
        with self._bucket() as bucket:
            blob = bucket.get_blob(name, timeout=self.timeout)
        if blob is None:
            return None
        return GcsInputFile(self, name, int(blob.size), int(blob.generation))

    # ------------------------------------------------------------ list/delete

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        n = len(self._root)
        with self._bucket() as bucket:
            blobs = bucket.client.list_blobs(
                bucket, prefix=self._root + prefix, fields="items(name),nextPageToken", timeout=self.timeout
            )
            return sorted(b.name[n:] for b in blobs if not b.name.endswith("/"))

    def delete(self, keys: Iterable[str]) -> None:
        names = [self._name(k) for k in keys]
        if len(names) <= 2:
            for name in names:
                self._delete_one(name)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="crdb-gcs-delete")
            pool = self._pool
        for _ in pool.map(self._delete_one, names):
            pass

    def _delete_one(self, name: str) -> None:
        from google.api_core.exceptions import NotFound

        with self._bucket() as bucket:
            try:
                bucket.blob(name).delete(timeout=self.timeout)
            except NotFound:
                pass

    def delete_prefix(self, prefix: str) -> None:
        self.delete(self.list(prefix))


class GcsInputFile(io.RawIOBase):
    """A read-only, seekable view of one generation of an object, read with ranged GETs.

    Each read that misses the cache fetches at least :attr:`block` bytes (from where it starts, or
    the object's last ``block`` bytes when it is that near the end) and the last few fetched ranges
    are kept: an Arrow reader's small reads (the footer, then per record batch its metadata and the
    chosen columns' buffers, which lie together) then cost one request for the footer and about one
    per record batch. ``requests`` and ``bytes_fetched`` count what was fetched.
    """

    block = 64 * 1024
    keep = 4

    def __init__(self, storage: GcsStorage, name: str, size: int, generation: int) -> None:
        super().__init__()
        self._storage = storage
        self._name = name
        self._size = size
        self.generation = generation
        self._pos = 0
        self._cache: list[tuple[int, bytes]] = []  # (offset, bytes), most recent last
        self.requests = 0
        self.bytes_fetched = 0

    def __repr__(self) -> str:
        return f"GcsInputFile({self._storage.description!r}, {self._name!r}, generation={self.generation})"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        pos = base + offset
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def readinto(self, b) -> int:
        out = memoryview(b).cast("B")
        n = min(len(out), self._size - self._pos)
        if n <= 0:
            return 0
        start = self._pos
        for off, chunk in reversed(self._cache):
            if off <= start and start + n <= off + len(chunk):
                out[:n] = chunk[start - off : start - off + n]
                self._pos += n
                return n
        end = min(self._size, start + max(n, self.block))
        first = max(0, min(start, end - self.block))
        chunk = self._fetch(first, end)
        self._cache.append((first, chunk))
        del self._cache[: -self.keep]
        out[:n] = chunk[start - first : start - first + n]
        self._pos += n
        return n

    def _fetch(self, start: int, end: int) -> bytes:
        with self._storage._bucket() as bucket:
            data = bucket.blob(self._name, generation=self.generation).download_as_bytes(
                start=start, end=end - 1, checksum=None, timeout=self._storage.timeout
            )
        if len(data) != end - start:
            raise OSError(
                f"short read of {self._storage.description}/{self._name}: {len(data)} of {end - start} bytes at {start}"
            )
        self.requests += 1
        self.bytes_fetched += len(data)
        return data


__all__ = ["GcsInputFile", "GcsStorage"]
