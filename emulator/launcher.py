"""Find, start, wait for and stop the Google Cloud Pub/Sub emulator.

Backend resolution for ``backend="auto"`` (first match wins):

1. ``env``: ``PUBSUB_EMULATOR_HOST`` is set. It is used as is: nothing is started or
   stopped; we only wait until it answers a gRPC call.
2. ``sdk``: the official emulator from the Google Cloud SDK (Debian package
   ``google-cloud-cli-pubsub-emulator`` or ``gcloud components install pubsub-emulator``),
   run as a child process in its own session on a loopback port.
3. ``docker``: a Docker engine answers; the official ``google-cloud-cli:emulators``
   image is started with testcontainers.
4. Otherwise :class:`EmulatorUnavailable`, naming what to install and what was looked for.

There is deliberately no in-memory fake: a test that passes against a fake proves little
about Pub/Sub's redelivery and lease semantics, which this project depends on.

``CRDB_PUBSUB_EMULATOR_BACKEND`` (auto|env|sdk|docker) forces a backend when the caller
passes ``backend="auto"``; an explicit ``backend=`` argument wins over it.
``CLOUDSDK_ROOT_DIR``, when set, is the only SDK root searched (see :func:`find_sdk_emulator`).
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from . import reaper
from .reaper import terminate_group

logger = logging.getLogger("crdb_pubsub.emulator")

Backend = Literal["auto", "env", "sdk", "docker"]
BACKENDS: tuple[str, ...] = ("auto", "env", "sdk", "docker")

BACKEND_ENV = "CRDB_PUBSUB_EMULATOR_BACKEND"
HOST_ENV = "PUBSUB_EMULATOR_HOST"

DOCKER_IMAGE = "gcr.io/google.com/cloudsdktool/google-cloud-cli:emulators"
DOCKER_CONTAINER_PORT = 8085
SCRIPT_RELPATH = Path("platform/pubsub-emulator/bin/cloud-pubsub-emulator")
# Where installers put the SDK when gcloud is not on PATH (apt, snap, the tarball, Homebrew).
COMMON_SDK_ROOTS: tuple[str, ...] = (
    "/usr/lib/google-cloud-sdk",
    "/usr/share/google-cloud-sdk",
    "/snap/google-cloud-cli/current",
    "/snap/google-cloud-sdk/current",
    "~/google-cloud-sdk",
    "/opt/google-cloud-sdk",
    "/usr/local/Caskroom/google-cloud-sdk/latest/google-cloud-sdk",
    "/opt/homebrew/Caskroom/google-cloud-sdk/latest/google-cloud-sdk",
)

INSTALL_HINT = (
    "Install one of:\n"
    "  - the official emulator: `sudo apt-get install google-cloud-cli-pubsub-emulator` "
    "plus Java 17+ (e.g. `openjdk-17-jre-headless`), or `gcloud components install pubsub-emulator`;\n"
    f"  - or run a Docker engine (the image {DOCKER_IMAGE} is pulled automatically);\n"
    "  - or point PUBSUB_EMULATOR_HOST=host:port at an emulator that is already running."
)

READY_MARKER = "Server started, listening on"
_GRACE_SECONDS = reaper.GRACE_SECONDS


class EmulatorUnavailable(RuntimeError):
    """No usable emulator backend was found. The message says what to install and what was looked for.

    Distinct from :class:`EmulatorStartError`: "not installed" may be skipped by a test suite,
    "installed but broken" must not be.
    """


class EmulatorStartError(RuntimeError):
    """A backend was found but did not become ready (died, timed out, port taken, no answer).

    The message includes the tail of the emulator's log when there is one.
    """


# --------------------------------------------------------------------------- discovery


@dataclass
class SdkEmulator:
    """How to launch the SDK emulator: either the script directly or through ``gcloud``."""

    argv_prefix: list[str]
    via_gcloud: bool
    source: str  # how it was found, for logs and error messages


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _gcloud_info_root(gcloud: str) -> str | None:
    try:
        out = subprocess.run(
            [gcloud, "info", "--format=value(installation.sdk_root)"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    root = out.stdout.strip()
    return root if out.returncode == 0 and root else None


def find_sdk_emulator(looked: list[str] | None = None) -> SdkEmulator | None:
    """Locate the Cloud SDK emulator; return ``None`` if it is not installed.

    Order: ``CLOUDSDK_ROOT_DIR`` (if set, it is the *only* root searched: a user who names an SDK
    means that one, not whichever other copy happens to be installed); the root next to the
    ``gcloud`` found on PATH (symlinks resolved, no subprocess); :data:`COMMON_SDK_ROOTS`;
    ``gcloud info``; finally ``gcloud beta emulators pubsub start`` when gcloud exists but its root
    could not be determined. Java must be available (``JAVA_HOME`` or ``java`` on PATH) for the
    direct script, since the script only fails later, at launch, without it.

    ``looked`` (if given) receives one human-readable line per place inspected.
    """
    looked = looked if looked is not None else []
    explicit = os.environ.get("CLOUDSDK_ROOT_DIR")
    gcloud = None if explicit else shutil.which("gcloud")

    roots: list[tuple[str, str]] = []
    if explicit:
        roots.append((explicit, "CLOUDSDK_ROOT_DIR"))
    else:
        if gcloud:
            roots.append((str(Path(os.path.realpath(gcloud)).parent.parent), f"gcloud on PATH ({gcloud})"))
        roots.extend((r, "common location") for r in COMMON_SDK_ROOTS)

    def check(root: str, how: str) -> SdkEmulator | None:
        script = Path(root).expanduser() / SCRIPT_RELPATH
        if _is_executable(script):
            return SdkEmulator([str(script)], via_gcloud=False, source=f"{script} ({how})")
        looked.append(f"{script} ({how}): not found")
        return None

    seen: set[str] = set()
    found: SdkEmulator | None = None
    for root, how in roots:
        key = os.path.realpath(os.path.expanduser(root))
        if key in seen:
            continue
        seen.add(key)
        if found := check(root, how):
            break
    if found is None and gcloud:
        info_root = _gcloud_info_root(gcloud)
        if info_root is None:
            # gcloud works in ways we could not introspect; let it find its own emulator.
            looked.append("`gcloud info` gave no SDK root; will try `gcloud beta emulators pubsub start`")
            return SdkEmulator(
                [gcloud, "--quiet", "beta", "emulators", "pubsub", "start"],
                via_gcloud=True,
                source=f"{gcloud} beta emulators pubsub start",
            )
        if os.path.realpath(info_root) not in seen:
            found = check(info_root, "gcloud info")
    if found is None:
        return None
    if not _java_available():
        looked.append(f"{found.source}: found, but no Java (set JAVA_HOME or put java 17+ on PATH)")
        return None
    return found


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home:
        return _is_executable(Path(home) / "bin" / "java")
    return shutil.which("java") is not None


def docker_available(looked: list[str] | None = None) -> bool:
    """Return True if a Docker engine answers within a few seconds (SDK ping, then ``docker info``)."""
    looked = looked if looked is not None else []
    try:
        import docker  # testcontainers depends on it

        client = docker.from_env(timeout=3)
        try:
            client.ping()
            return True
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    cli = shutil.which("docker")
    if cli:
        # The CLI honours docker contexts (Docker Desktop, colima) that the SDK's from_env ignores.
        try:
            if (
                subprocess.run(
                    [cli, "info", "--format", "{{.ServerVersion}}"],
                    capture_output=True,
                    timeout=5,
                    stdin=subprocess.DEVNULL,
                ).returncode
                == 0
            ):
                return True
        except (OSError, subprocess.TimeoutExpired):
            pass
    looked.append(f"Docker engine: not reachable ({reason}; docker CLI: {'no answer' if cli else 'not installed'})")
    return False


# --------------------------------------------------------------------------- process control


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free a moment ago (there is an unavoidable race; callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _pdeathsig_preexec() -> Any:
    """Build a ``preexec_fn`` that makes the child get SIGTERM when its parent dies (Linux only).

    The kernel ties PR_SET_PDEATHSIG to the *thread* that forked, so it is only armed when the
    launch happens on the main thread; otherwise a worker thread exiting would kill the emulator.
    The watchdog process covers every case anyway; this is the zero-latency first line.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        # Resolved in the parent: the forked child must not import or allocate (fork + threads).
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def _start_watchdog(pgid: int) -> tuple[subprocess.Popen, int]:
    r, w = os.pipe()  # non-inheritable by default: no other subprocess gets the write end
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", reaper.__file__, str(pgid), str(_GRACE_SECONDS)],
            stdin=r,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal Ctrl-C must not take the watchdog down first
        )
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    return proc, w


def _tail(path: str | None, lines: int = 25) -> str:
    if not path:
        return "(no log)"
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    tail = "\n".join(text.rstrip().splitlines()[-lines:])
    return f"--- last lines of {path} ---\n{tail}" if tail else f"(log {path} is empty)"


# --------------------------------------------------------------------------- the handle


_LIVE: set[Emulator] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    # Backstop for callers that never reached stop() (e.g. an exception between start and `with`).
    with _LIVE_LOCK:
        live = list(_LIVE)
    for emu in live:
        try:
            emu.stop()
        except Exception:  # noqa: BLE001 - interpreter shutdown: best effort only
            pass


@dataclass(eq=False)
class Emulator:
    """A running (or borrowed) Pub/Sub emulator.

    :meth:`stop` is idempotent; for ``backend == "env"`` it does nothing (we did not start it).
    Usable as a context manager that stops on exit.

    Attributes
    ----------
    host_port : str
        ``"host:port"`` for clients (``PUBSUB_EMULATOR_HOST`` value, ``api_endpoint``).
    backend : str
        ``"env"``, ``"sdk"`` or ``"docker"``.
    project : str
        The project id the readiness probe used.
    pid : int or None
        Process id we launched (sdk backend; also its process-group id), else ``None``. It is the
        JVM itself when the script is run directly, ``gcloud`` when run through gcloud.
    pgid : int or None
        Process group that :meth:`stop` terminates (sdk backend), else ``None``.
    container_id : str or None
        Docker container id (docker backend), else ``None``.
    startup_seconds : float
        Wall time from launch to the first successful gRPC call.
    log_path : str or None
        The emulator's log file (sdk backend), else ``None``.
    detached : bool
        Started to outlive this process (CLI ``start``): no watchdog, no atexit stop.
    """

    host_port: str
    backend: str
    project: str = "local-project"
    pid: int | None = None
    pgid: int | None = None
    container_id: str | None = None
    startup_seconds: float = 0.0
    log_path: str | None = None
    detached: bool = False
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _watchdog: subprocess.Popen | None = field(default=None, repr=False)
    _watchdog_fd: int | None = field(default=None, repr=False)
    _container: Any = field(default=None, repr=False)
    _owns_log: bool = field(default=False, repr=False)
    _stopped: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def is_running(self) -> bool:
        """Return True while the emulator we started is alive (always True for ``env``)."""
        if self._stopped:
            return False
        if self.backend == "sdk" and self._proc is not None:
            return self._proc.poll() is None
        if self.backend == "docker" and self._container is not None:
            try:
                self._container.get_wrapped_container().reload()
                return self._container.get_wrapped_container().status == "running"
            except Exception:  # noqa: BLE001
                return False
        return True

    def stop(self, grace: float = _GRACE_SECONDS) -> None:
        """Stop what we started: the whole process group (TERM, then KILL after ``grace`` s) or the container.

        Idempotent and thread-safe. Returns when nothing of it is left running.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            if self.backend == "sdk" and self.pgid is not None:
                terminate_group(self.pgid, grace, reap=self._proc)
            elif self.backend == "docker" and self._container is not None:
                self._container.stop()
        finally:
            if self._watchdog_fd is not None:
                try:
                    os.write(self._watchdog_fd, b"d")
                except OSError:
                    pass
                os.close(self._watchdog_fd)
                self._watchdog_fd = None
            if self._watchdog is not None:
                try:
                    self._watchdog.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self._watchdog.kill()
                    self._watchdog.wait()
            if self._owns_log and self.log_path:
                Path(self.log_path).unlink(missing_ok=True)
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if self.backend != "env":
                logger.info("Pub/Sub emulator stopped (backend=%s, %s)", self.backend, self.host_port)

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- readiness


def _probe(host_port: str, project: str, timeout: float) -> Exception | None:
    """One gRPC ListTopics call; ``None`` on success, else the error."""
    from .clients import publisher_client

    publisher = publisher_client(host_port)
    try:
        # retry=None: the library default retries UNAVAILABLE for a minute, hiding our own deadline.
        publisher.list_topics(request={"project": f"projects/{project}", "page_size": 1}, timeout=timeout, retry=None)
        return None
    except Exception as exc:  # noqa: BLE001 - every failure just means "not ready yet"
        return exc
    finally:
        publisher.transport.close()


def _wait_grpc(
    host_port: str, project: str, deadline: float, what: str, log_path: str | None = None, alive: Any = None
) -> None:
    last: Exception | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EmulatorStartError(
                f"{what} at {host_port} did not answer a gRPC ListTopics call in time "
                f"(last error: {last!r})\n{_tail(log_path) if log_path else ''}".rstrip()
            )
        last = _probe(host_port, project, min(2.0, max(remaining, 0.1)))
        if last is None:
            return
        if alive is not None and not alive():
            raise EmulatorStartError(f"{what} exited while starting\n{_tail(log_path)}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- backends


def _start_env(project: str, timeout: float, t0: float) -> Emulator:
    host_port = os.environ[HOST_ENV].strip()
    if not host_port:
        raise EmulatorUnavailable(f"{HOST_ENV} is set but empty.\n{INSTALL_HINT}")
    # Not started by us, but a dead address would otherwise surface as a hang in the first test.
    _wait_grpc(host_port, project, t0 + timeout, f"the emulator named by {HOST_ENV}")
    return Emulator(host_port=host_port, backend="env", project=project)


def _start_sdk(
    found: SdkEmulator,
    *,
    port: int | None,
    project: str,
    timeout: float,
    t0: float,
    log_path: str | None,
    detached: bool,
) -> Emulator:
    host = "127.0.0.1"
    if port is not None and _port_in_use(host, port):
        raise EmulatorStartError(f"port {port} on {host} is already in use")
    attempts = 1 if port is not None else 3
    for attempt in range(attempts):
        chosen = port if port is not None else free_port(host)
        if found.via_gcloud:
            argv = [*found.argv_prefix, f"--host-port={host}:{chosen}", f"--project={project}"]
        else:
            argv = [*found.argv_prefix, f"--host={host}", f"--port={chosen}"]
        owns_log = log_path is None
        if log_path is None:
            fd, path = tempfile.mkstemp(prefix="crdb-pubsub-emulator-", suffix=".log")
            os.close(fd)
        else:
            path = str(Path(log_path).expanduser())
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: Ctrl-C in the terminal reaches us, not the JVM, so shutdown order is
                # ours; and the group id lets stop() reach every descendant.
                start_new_session=True,
                preexec_fn=None if detached else _pdeathsig_preexec(),
            )
        emu = Emulator(
            host_port=f"{host}:{chosen}",
            backend="sdk",
            project=project,
            pid=proc.pid,
            pgid=proc.pid,
            log_path=path,
            detached=detached,
            _proc=proc,
            _owns_log=owns_log,
        )
        if not detached:
            emu._watchdog, emu._watchdog_fd = _start_watchdog(proc.pid)
            with _LIVE_LOCK:
                _LIVE.add(emu)
        try:
            _wait_sdk_ready(emu, proc, chosen, t0 + timeout, found)
            return emu
        except _PortTaken:
            emu.stop()
            if attempt + 1 >= attempts:
                raise EmulatorStartError(f"port {chosen} was taken while the emulator started\n{_tail(path)}") from None
            logger.debug("port %s was taken during startup, retrying on another port", chosen)
        except BaseException:
            # Keep a failed run's log only when the user asked for one; the tail is in the error.
            emu.stop()
            raise
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _wait_sdk_ready(emu: Emulator, proc: subprocess.Popen, port: int, deadline: float, found: SdkEmulator) -> None:
    marker = f"{READY_MARKER} {port}"
    assert emu.log_path is not None
    while True:
        try:
            text = Path(emu.log_path).read_text(errors="replace")
        except OSError:
            text = ""
        if marker in text:
            break
        if proc.poll() is not None:
            if "Address already in use" in text or "Failed to bind" in text:
                raise _PortTaken()
            raise EmulatorStartError(
                f"the Pub/Sub emulator ({found.source}) exited with code {proc.returncode} "
                f"before it was ready\n{_tail(emu.log_path)}"
            )
        if time.monotonic() > deadline:
            raise EmulatorStartError(
                f"the Pub/Sub emulator ({found.source}) did not log '{marker}' in time\n{_tail(emu.log_path)}"
            )
        time.sleep(0.05)
    # The log line precedes the gRPC server accepting calls by a hair; confirm with a real call.
    _wait_grpc(
        emu.host_port, emu.project, deadline, "the Pub/Sub emulator", emu.log_path, alive=lambda: proc.poll() is None
    )


def _start_docker(*, port: int | None, project: str, timeout: float, t0: float, detached: bool) -> Emulator:
    try:
        from testcontainers.core.config import testcontainers_config
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs
    except ImportError as exc:
        # An extra, so that executors install only what reading and decoding need.
        raise EmulatorUnavailable(
            "a Docker engine answers, but testcontainers is not installed: pip install 'testcontainers>=4.0' (the emulator extra)"
        ) from exc

    if detached:
        # Ryuk reaps containers when this process exits; a detached emulator must outlive us.
        testcontainers_config.ryuk_disabled = True
    container = (
        DockerContainer(DOCKER_IMAGE)
        .with_command(
            f"gcloud beta emulators pubsub start --host-port=0.0.0.0:{DOCKER_CONTAINER_PORT} --project={project}"
        )
        .with_kwargs(labels={"crdb-pubsub.emulator": "1"})
    )
    if port is not None:
        container = container.with_bind_ports(DOCKER_CONTAINER_PORT, port)
    else:
        container = container.with_exposed_ports(DOCKER_CONTAINER_PORT)
    try:
        container.start()
    except Exception as exc:
        raise EmulatorStartError(f"could not start the Docker image {DOCKER_IMAGE}: {exc}") from exc
    emu = Emulator(host_port="", backend="docker", project=project, detached=detached, _container=container)
    try:
        emu.container_id = container.get_wrapped_container().id
        if not detached:
            with _LIVE_LOCK:
                _LIVE.add(emu)
        remaining = max(1.0, t0 + timeout - time.monotonic())
        try:
            wait_for_logs(
                container,
                f"{READY_MARKER} {DOCKER_CONTAINER_PORT}",
                timeout=remaining,
                interval=0.2,
                raise_on_exit=True,
            )
        except Exception as exc:
            logs = container.get_logs()
            tail = "\n".join((logs[0] + logs[1]).decode(errors="replace").splitlines()[-25:])
            raise EmulatorStartError(f"the emulator container did not become ready: {exc}\n{tail}") from exc
        host = container.get_container_host_ip()
        host = "127.0.0.1" if host in ("localhost", "0.0.0.0") else host
        emu.host_port = f"{host}:{container.get_exposed_port(DOCKER_CONTAINER_PORT)}"
        _wait_grpc(emu.host_port, project, t0 + timeout, "the emulator container")
        return emu
    except BaseException:
        emu.stop()
        raise


# --------------------------------------------------------------------------- public API


def resolve_backend(backend: str = "auto") -> str:
    """Apply ``CRDB_PUBSUB_EMULATOR_BACKEND`` to ``backend="auto"``; validate. Raises ``ValueError``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown emulator backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "auto":
        forced = os.environ.get(BACKEND_ENV, "").strip().lower()
        if forced:
            if forced not in BACKENDS:
                raise ValueError(f"{BACKEND_ENV}={forced!r} is not one of {', '.join(BACKENDS)}")
            backend = forced
    return backend


def start_emulator(
    *,
    port: int | None = None,
    backend: str = "auto",
    project: str = "local-project",
    timeout: float = 60.0,
    log_path: str | os.PathLike[str] | None = None,
    _detached: bool = False,
) -> Emulator:
    """Start (or borrow) a Pub/Sub emulator and return once it answers gRPC calls.

    Parameters
    ----------
    port : int, optional
        Fixed loopback port (sdk) or host port (docker); ``None`` picks a free one. Ignored by the
        ``env`` backend.
    backend : str
        ``"auto"`` (see module docstring), ``"env"``, ``"sdk"`` or ``"docker"``. With ``"auto"``,
        ``CRDB_PUBSUB_EMULATOR_BACKEND`` may force one.
    project : str
        Project id used for the readiness probe (the emulator accepts any).
    timeout : float
        Overall seconds allowed for startup, including the readiness probe.
    log_path : str or os.PathLike, optional
        Where the sdk emulator logs (kept after stop); default a temp file removed on stop.

    Returns
    -------
    Emulator
        A running :class:`Emulator`; the caller must :meth:`Emulator.stop` it (or use ``with``).
        An atexit hook, a watchdog process and (Linux) PR_SET_PDEATHSIG stop it if the caller can't.
        Nothing global is modified: ``PUBSUB_EMULATOR_HOST`` is not set for you.

    Raises
    ------
    EmulatorUnavailable
        No backend (or not the forced one) is installed/reachable.
    EmulatorStartError
        A backend was found but did not become ready within ``timeout``.
    ValueError
        Invalid ``backend`` or ``port``.
    """
    if port is not None and not (1 <= int(port) <= 65535):
        raise ValueError(f"port must be in 1..65535, got {port}")
    chosen = resolve_backend(backend)
    t0 = time.monotonic()
    log = str(log_path) if log_path is not None else None
    looked: list[str] = []

    emu: Emulator | None = None
    if chosen in ("auto", "env"):
        if os.environ.get(HOST_ENV):
            emu = _start_env(project, timeout, t0)
        elif chosen == "env":
            raise EmulatorUnavailable(f"backend 'env' was forced but {HOST_ENV} is not set.\n{INSTALL_HINT}")
        else:
            looked.append(f"{HOST_ENV}: not set")
    if emu is None and chosen in ("auto", "sdk"):
        found = find_sdk_emulator(looked)
        if found is not None:
            emu = _start_sdk(
                found, port=port, project=project, timeout=timeout, t0=t0, log_path=log, detached=_detached
            )
    if emu is None and chosen in ("auto", "docker") and docker_available(looked):
        emu = _start_docker(port=port, project=project, timeout=timeout, t0=t0, detached=_detached)
    if emu is None:
        forced = "" if chosen == "auto" else f" (backend {chosen!r} was forced)"
        raise EmulatorUnavailable(
            f"No Pub/Sub emulator available{forced}. Looked for:\n"
            + "".join(f"  - {line}\n" for line in looked)
            + INSTALL_HINT
        )
    emu.startup_seconds = time.monotonic() - t0
    logger.info(
        "Pub/Sub emulator ready: backend=%s host_port=%s startup=%.2fs%s",
        emu.backend,
        emu.host_port,
        emu.startup_seconds,
        f" pid={emu.pid}" if emu.pid else (f" container={emu.container_id[:12]}" if emu.container_id else ""),
    )
    return emu


@contextmanager
def emulator(
    *,
    port: int | None = None,
    backend: str = "auto",
    project: str = "local-project",
    timeout: float = 60.0,
    log_path: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Context manager around :func:`start_emulator` yielding ``"host:port"``; stops it on exit.

    Exit includes exceptions and KeyboardInterrupt. Sets no environment variable: pass the
    yielded address on (e.g. to :func:`crdb_pubsub.emulator.pubsub_clients`).
    """
    emu = start_emulator(port=port, backend=backend, project=project, timeout=timeout, log_path=log_path)
    try:
        yield emu.host_port
    finally:
        emu.stop()
