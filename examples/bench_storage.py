"""Latency of the stateDir storage operations on the Cloud Storage test server, per client.

Starts fake-gcs-server (``tests/gcs_server.py``, in memory on a free loopback port; a fresh one per
client, since its in-memory backend slows down with the number of objects it holds) and runs the
operations the storage interface needs with ``google-cloud-storage`` and with ``gcsfs`` side by side,
plus this package's ``GcsStorage`` (built on google-cloud-storage) and ``PosixStorage`` (a tmp
folder) for reference; prints the median and p90 of N runs per operation, in milliseconds, and
whether each client's preconditions held (a second create refused, a stale compare-and-swap refused).

    $PY -m pip install gcsfs                 # not a dependency: only this comparison uses it
    $PY examples/bench_storage.py            # N=30
    $PY examples/bench_storage.py -n 100

gcsfs probes the bucket type over gRPC (~60 s per call against an HTTP server) unless
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``, which this script sets before importing it. gcsfs has
no public compare-and-swap (``mode="create"`` is its only precondition): its CAS row is a multipart
upload with ``ifGenerationMatch`` through its internal ``_call``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

KB, MB = b"k" * 1024, os.urandom(2**20)


def arrow_file() -> bytes:
    import pyarrow as pa

    rows, batches = 500, 4
    schema = pa.schema([("sub", pa.string()), ("ack_id", pa.string()), ("body", pa.binary())])
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, schema) as w:
        for b in range(batches):
            w.write_table(
                pa.table(
                    {
                        "sub": ["projects/p/subscriptions/s"] * rows,
                        "ack_id": [f"ack-{b}-{i}" for i in range(rows)],
                        "body": [os.urandom(2000) for _ in range(rows)],
                    },
                    schema=schema,
                )
            )
    return sink.getvalue()


def read_two_columns(f) -> int:
    import pyarrow as pa

    t = pa.ipc.open_file(f, options=pa.ipc.IpcReadOptions(included_fields=[0, 1])).read_all()
    assert t.num_columns == 2 and t.num_rows == 2000
    return t.num_rows


def timed(n: int, setup: Callable[[int], object] | None, op: Callable[..., object]) -> list[float]:
    out = []
    for i in range(n):
        arg = setup(i) if setup else i
        t = time.perf_counter()
        op(arg)
        out.append((time.perf_counter() - t) * 1000)
    return out


class GcsClient:
    name = "google-cloud-storage"

    def __init__(self, bucket: str, root: str) -> None:
        from google.cloud import storage

        self.bucket = storage.Client().bucket(bucket)
        self.root = root

    def create(self, key, data) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self.bucket.blob(self.root + key).upload_from_string(data, if_generation_match=0)
            return True
        except PreconditionFailed:
            return False

    def read(self, key):
        return self.bucket.blob(self.root + key).download_as_bytes()

    def generation(self, key) -> int:
        return self.bucket.get_blob(self.root + key).generation

    def ranged_columns(self, key):
        from crdb_pubsub.source.storage.gcs import GcsInputFile

        blob = self.bucket.get_blob(self.root + key)  # size and generation, then ranged GETs
        return read_two_columns(GcsInputFile(_Adapter(self.bucket), self.root + key, blob.size, blob.generation))

    def list(self, prefix):
        return [b.name for b in self.bucket.client.list_blobs(self.bucket, prefix=self.root + prefix)]

    def cas(self, key, data, expected) -> int | None:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(self.root + key)
        try:
            blob.upload_from_string(data, if_generation_match=expected)
            return blob.generation
        except PreconditionFailed:
            return None

    def delete(self, key):
        self.bucket.blob(self.root + key).delete()


class _Adapter:
    """Lets GcsInputFile fetch through a plain google-cloud-storage bucket."""

    description = "bench"
    timeout = 60

    def __init__(self, bucket):
        self._b = bucket

    @contextlib.contextmanager
    def _bucket(self):
        yield self._b


class GcsfsClient:
    name = "gcsfs"

    def __init__(self, bucket: str, root: str) -> None:
        import gcsfs

        self.fs = gcsfs.GCSFileSystem(token="anon", use_listings_cache=False, skip_instance_cache=True)
        self.base = f"{bucket}/{root}"
        self.bucket = bucket

    def create(self, key, data) -> bool:
        try:
            self.fs.pipe_file(self.base + key, data, mode="create")
            return True
        except FileExistsError:
            return False

    def read(self, key):
        return self.fs.cat_file(self.base + key)

    def generation(self, key) -> int:
        return int(self.fs.info(self.base + key)["generation"])

    def ranged_columns(self, key):
        with self.fs.open(self.base + key, "rb", block_size=64 * 1024, cache_type="readahead") as f:
            return read_two_columns(f)

    def list(self, prefix):
        return self.fs.find(self.base + prefix)

    def cas(self, key, data, expected) -> int | None:
        meta = json.dumps({"name": self.base.split("/", 1)[1] + key})
        body = (
            (
                f"--==0==\nContent-Type: application/json; charset=UTF-8\n\n{meta}\n--==0==\n"
                f"Content-Type: application/octet-stream\n\n"
            ).encode()
            + data
            + b"\n--==0==--"
        )
        try:
            out = self.fs.call(
                "POST",
                f"{self.fs._location}/upload/storage/v1/b/{self.bucket}/o",
                uploadType="multipart",
                ifGenerationMatch=str(expected),
                json_out=True,
                headers={"Content-Type": 'multipart/related; boundary="==0=="'},
                data=body,
            )
            return int(out["generation"])
        except (FileExistsError, OSError, ValueError) as exc:
            if "412" in str(exc) or isinstance(exc, FileExistsError) or "recondition" in str(exc):
                return None
            raise

    def delete(self, key):
        self.fs.rm_file(self.base + key)


class OurStorage:
    def __init__(self, storage, name: str) -> None:
        self.s = storage
        self.name = name

    def create(self, key, data) -> bool:
        return self.s.create(key, data)

    def read(self, key):
        return self.s.read(key)

    def generation(self, key) -> int:
        return self.s.stat(key).version

    def ranged_columns(self, key):
        with self.s.open_input(key) as f:
            return read_two_columns(f)

    def list(self, prefix):
        return self.s.list(prefix)

    def cas(self, key, data, expected):
        return self.s.swap(key, data, expected)

    def delete(self, key):
        self.s.delete([key])


def bench(client, n: int, arrow: bytes) -> tuple[dict[str, list[float]], dict[str, bool]]:
    r: dict[str, list[float]] = {}
    ok: dict[str, bool] = {}
    r["create 1 KB"] = timed(n, None, lambda i: client.create(f"small/{i}", KB))
    r["create 1 MB"] = timed(n, None, lambda i: client.create(f"large/{i}", MB))
    refused = []
    r["create existing (412)"] = timed(n, None, lambda i: refused.append(client.create(f"small/{i}", b"again")))
    ok["second create refused"] = not any(refused) and client.read("small/0") == KB
    r["read 1 KB"] = timed(n, None, lambda i: client.read(f"small/{i}"))
    r["read 1 MB"] = timed(n, None, lambda i: client.read(f"large/{i}"))
    client.create("slice.arrow", arrow)
    r["2 Arrow columns (4 MB file)"] = timed(n, None, lambda i: client.ranged_columns("slice.arrow"))
    for i in range(100):
        client.create(f"list/{i:03d}", b"x")
    r["list 100 keys"] = timed(n, None, lambda i: client.list("list/"))
    client.create("lock", b"0")
    gen = [client.generation("lock")]

    def cas(i):
        g = client.cas("lock", str(i).encode(), gen[0])
        assert g is not None
        gen[0] = g

    r["CAS (generation match)"] = timed(n, None, cas)
    stale = client.cas("lock", b"stale", gen[0] - 1 if gen[0] > 1 else 12345)
    ok["stale CAS refused"] = stale is None
    r["delete"] = timed(n, None, lambda i: client.delete(f"small/{i}"))
    return r, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=30, help="runs per operation (default 30)")
    args = ap.parse_args()
    try:
        import gcsfs
    except ImportError:
        sys.exit("bench_storage: pip install gcsfs first (only this comparison uses it)")
    from crdb_pubsub.source.storage import open_storage
    from gcs_server import start_gcs_server

    makers = [
        ("google-cloud-storage", lambda srv, run: GcsClient(srv.bucket, f"gcs-{run}/")),
        ("gcsfs", lambda srv, run: GcsfsClient(srv.bucket, f"gcsfs-{run}/")),
        (
            "GcsStorage (ours)",
            lambda srv, run: OurStorage(open_storage(f"gs://{srv.bucket}/ours-{run}"), "GcsStorage (ours)"),
        ),
        ("PosixStorage (tmp)", None),
    ]
    arrow = arrow_file()
    results = []
    for name, make in makers:
        if make is None:
            with tempfile.TemporaryDirectory() as tmp:
                results.append(bench(OurStorage(open_storage(tmp), name), args.n, arrow))
            continue
        server = start_gcs_server()
        os.environ["STORAGE_EMULATOR_HOST"] = server.endpoint
        try:
            results.append(bench(make(server, uuid.uuid4().hex[:6]), args.n, arrow))
        finally:
            server.stop()
    clients = [type("C", (), {"name": name}) for name, _ in makers]
    import gcsfs
    import google.cloud.storage

    print(
        f"fake-gcs-server 1.54.0 in memory on 127.0.0.1; google-cloud-storage {google.cloud.storage.__version__}, "
        f"gcsfs {gcsfs.__version__}; median / p90 of {args.n} runs, ms"
    )
    width = 30
    print("operation".ljust(width) + "".join(c.name.rjust(24) for c in clients))
    for op in results[0][0]:
        cells = []
        for r, _ in results:
            xs = sorted(r[op])
            cells.append(f"{statistics.median(xs):7.2f} / {xs[int(0.9 * (len(xs) - 1))]:7.2f}".rjust(24))
        print(op.ljust(width) + "".join(cells))
    for check in results[0][1]:
        print(check.ljust(width) + "".join(("yes" if ok[check] else "NO").rjust(24) for _, ok in results))


if __name__ == "__main__":
    main()
