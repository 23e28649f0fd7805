""":class:`PosixStorage`: the :class:`~crdb_pubsub.source.storage.Storage` promises on a POSIX file system.

The file system is local disk, or a mount that honours ``link``, ``rename``, ``fsync`` and
``flock``.

Each object is one file, ``<root>/<key>``, holding the data followed by a trailer::

    data | metadata (JSON, UTF-8) | version (u64 LE) | metadata length (u32 LE) | b"CRDBOBJ1"

so that data, version and metadata are published together by one ``link`` or ``rename``. Files are
written to a hidden temporary name in the same folder (``.<name>.<random>.tmp``) and fsynced before
they get their name; the folder is fsynced after. :meth:`create` publishes with ``link``, which fails
when the name exists (first writer wins, no lock taken); an EEXIST whose file is the temporary's own
inode is this call's link retransmitted (NFS) and counts as done. :meth:`swap` compares and replaces under an
``flock`` on a hidden sidecar (``.<name>.lock``), held only for the read-compare-rename. A writer
killed at any point leaves at most a hidden temporary file, which nothing reads or lists (and
:meth:`delete_prefix` removes).

A version is the time of the write in microseconds, or the previous version + 1 when that is not
greater: versions only grow for a key, also across a delete, as long as the wall clock does not step
back by more than the key's lifetime.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from . import ObjectInfo, StorageError
from ._keys import check_key, check_metadata, check_prefix

_TRAILER = struct.Struct("<QI8s")
_MAGIC = b"CRDBOBJ1"


class PosixStorage:
    """Objects as files under a folder (see the module docstring for the format and guarantees)."""

    #: A folder on a shared file system (NFS, Filestore) may be listed from a client's cache.
    listing_may_lag = True

    def __init__(self, path: str | os.PathLike) -> None:
        self.description = str(path)
        self.root = Path(os.path.abspath(os.path.expanduser(str(path))))

    def __repr__(self) -> str:
        return f"PosixStorage({self.description!r})"

    # ------------------------------------------------------------------ write

    def create(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> bool:
        return self._link_new(check_key(key), data, check_metadata(metadata)) is not None

    def swap(self, key: str, data: bytes, expected: int, *, metadata: Mapping[str, str] | None = None) -> int | None:
        check_key(key)
        meta = check_metadata(metadata)
        if not isinstance(expected, int) or expected < 0:
            raise ValueError(f"expected must be a version (int > 0) or 0 for 'absent', not {expected!r}")
        if expected == 0:
            return self._link_new(key, data, meta)
        path = self._path(key)
        with self._locked(path, create=True):
            current = self._version(path)
            if current != expected:
                return None
            version = max(current + 1, time.time_ns() // 1000)
            tmp = self._write_tmp(path, data, version, meta)
            try:
                os.replace(tmp, path)
            except BaseException:
                _unlink(tmp)
                raise
            _fsync_dir(path.parent)
            return version

    def _link_new(self, key: str, data: bytes, meta: dict[str, str]) -> int | None:
        path = self._path(key)
        _ensure_dir(path.parent)
        version = time.time_ns() // 1000
        tmp = self._write_tmp(path, data, version, meta)
        try:
            os.link(tmp, path)
        except FileExistsError:
            # On NFS a retransmitted link whose first try landed answers EEXIST: the file there is
            # then this call's own (the same inode as tmp), and the create did happen.
            if not _same_file(tmp, path):
                return None
        finally:
            _unlink(tmp)
        _fsync_dir(path.parent)
        return version

    @staticmethod
    def _write_tmp(path: Path, data: bytes, version: int, meta: dict[str, str]) -> Path:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        meta_bytes = json.dumps(meta, separators=(",", ":")).encode() if meta else b""
        try:
            with open(tmp, "xb") as fh:
                fh.write(data)
                fh.write(meta_bytes)
                fh.write(_TRAILER.pack(version, len(meta_bytes), _MAGIC))
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            _unlink(tmp)
            raise
        return tmp

    # ------------------------------------------------------------------- read

    def read(self, key: str) -> bytes | None:
        got = self._read(self._path(check_key(key)), with_data=True)
        return None if got is None else got[0]

    def read_versioned(self, key: str) -> tuple[bytes, int] | None:
        got = self._read(self._path(check_key(key)), with_data=True)
        return None if got is None else (got[0], got[1].version)

    def stat(self, key: str) -> ObjectInfo | None:
        got = self._read(self._path(check_key(key)), with_data=False)
        return None if got is None else got[1]

    def open_input(self, key: str):
        import pyarrow as pa

        path = self._path(check_key(key))
        try:
            mm = pa.memory_map(str(path))
        except FileNotFoundError:
            return None
        try:
            size = mm.size()
            _version, meta_len = self._parse_trailer(
                path, size, mm.read_at(min(size, _TRAILER.size), max(0, size - _TRAILER.size))
            )
            # A zero-copy view of the mapped data; the mapping lives as long as the view.
            return pa.BufferReader(mm.read_at(size - _TRAILER.size - meta_len, 0))
        finally:
            mm.close()

    def _read(self, path: Path, *, with_data: bool) -> tuple[bytes, ObjectInfo] | None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - only the open may find no file; the read is a with below
        except FileNotFoundError:
            return None
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size >= _TRAILER.size:
                fh.seek(size - _TRAILER.size)
            version, meta_len = self._parse_trailer(path, size, fh.read(_TRAILER.size))
            data_len = size - _TRAILER.size - meta_len
            fh.seek(data_len)
            meta = json.loads(fh.read(meta_len)) if meta_len else {}
            data = b""
            if with_data:
                fh.seek(0)
                data = fh.read(data_len)
            return data, ObjectInfo(size=data_len, version=version, metadata=meta)

    def _parse_trailer(self, path: Path, size: int, raw: bytes) -> tuple[int, int]:
        if size < _TRAILER.size or len(raw) != _TRAILER.size:
            raise StorageError(f"{path} is not an object written by this storage (too short)")
        version, meta_len, magic = _TRAILER.unpack(raw)
        if magic != _MAGIC or meta_len > size - _TRAILER.size:
            raise StorageError(f"{path} is not an object written by this storage (no trailer)")
        return version, meta_len

    def _version(self, path: Path) -> int:
        got = self._read(path, with_data=False)
        return 0 if got is None else got[1].version

    # ------------------------------------------------------------ list/delete

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return []
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if name.startswith("."):
                    continue
                key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                if key.startswith(prefix):
                    out.append(key)
        return sorted(out)

    def delete(self, keys: Iterable[str]) -> None:
        touched: set[Path] = set()
        for key in keys:
            path = self._path(check_key(key))
            if not path.exists():
                continue
            # Under the sidecar lock: a swap in progress either completes first or finds nothing.
            with self._locked(path, create=True, remove=True):
                _unlink(path)
            touched.add(path.parent)
        for d in touched:
            _fsync_dir(d)

    def delete_prefix(self, prefix: str) -> None:
        check_prefix(prefix)
        self.delete(self.list(prefix))
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        # Left-overs: temporary files of killed writers, lock sidecars, and folders now empty.
        for dirpath, _dirnames, filenames in os.walk(base, topdown=False):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in filenames:
                if name.startswith(".") and (rel + name[1:]).startswith(prefix):
                    _unlink(Path(dirpath) / name)
            if Path(dirpath) != self.root and rel.startswith(prefix) and rel:
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass  # not empty: another writer's objects arrived meanwhile

    # ---------------------------------------------------------------- helpers

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    @contextmanager
    def _locked(self, path: Path, *, create: bool, remove: bool = False) -> Iterator[None]:
        """Hold ``flock`` on ``path``'s sidecar; ``remove``: unlink the sidecar before letting go.

        Lockers check that the name still refers to the file they locked, and retry if not.
        """
        lock = path.with_name(f".{path.name}.lock")
        if create:
            _ensure_dir(path.parent)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(lock).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    try:
                        yield
                    finally:
                        if remove:
                            _unlink(lock)
                    return
            finally:
                os.close(fd)

    def __getstate__(self) -> dict:
        return {"description": self.description, "root": str(self.root)}

    def __setstate__(self, state: dict) -> None:
        self.description = state["description"]
        self.root = Path(state["root"])


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def _ensure_dir(d: Path) -> None:
    """Create ``d`` and its missing parents, fsyncing each parent so that the folders survive a crash."""
    if d.is_dir():
        return
    _ensure_dir(d.parent)
    try:
        os.mkdir(d)
    except FileExistsError:
        return
    _fsync_dir(d.parent)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["PosixStorage"]
