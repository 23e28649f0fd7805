"""A detached emulator that outlives the command that started it (the shell workflow).

``start`` launches it in its own session and records it in a small JSON state file,
``${XDG_STATE_HOME:-~/.local/state}/crdb-pubsub/emulator.json``; ``env`` and ``stop`` find it
there. These functions hold the logic so that any CLI (``python -m crdb_pubsub.emulator``, a
later ``crdb-pubsub emulator`` command) can reuse it; they print nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from .launcher import HOST_ENV, Emulator, start_emulator
from .reaper import group_alive, terminate_group

STATE_FILE_NAME = "emulator.json"
LOG_FILE_NAME = "emulator.log"


@dataclass
class DetachedState:
    """What the state file records about a running emulator.

    ``owner`` is ``"start"`` (detached) or ``"run"`` (a foreground ``run`` in another terminal).
    ``pid``/``pgid`` are set for the sdk backend, ``container_id`` for docker.
    """

    host_port: str
    backend: str
    project: str
    pid: int | None = None
    pgid: int | None = None
    container_id: str | None = None
    log_path: str | None = None
    owner: str = "start"
    started_at: float = 0.0


def state_dir() -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/crdb-pubsub`` (not created)."""
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "crdb-pubsub"


def state_path() -> Path:
    """Path of the state file (may not exist)."""
    return state_dir() / STATE_FILE_NAME


def export_line(host_port: str) -> str:
    """Return the shell line that points clients at ``host_port``."""
    return f"export {HOST_ENV}={host_port}"


@contextmanager
def _locked() -> Iterator[None]:
    # Serialises concurrent start/stop so two `start`s cannot both launch an emulator.
    state_dir().mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, last writer wins
        yield
        return
    with open(state_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_state() -> DetachedState | None:
    try:
        data = json.loads(state_path().read_text())
        return DetachedState(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        # A corrupt or foreign file: nothing we can act on safely, treat as stale.
        return None


def write_state(state: DetachedState) -> None:
    """Atomically write ``state`` to :func:`state_path`."""
    state_dir().mkdir(parents=True, exist_ok=True)
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    os.replace(tmp, state_path())


def remove_state(only_if: DetachedState | None = None) -> None:
    """Delete the state file; with ``only_if``, only while it still describes that emulator."""
    if only_if is not None and _read_state() != only_if:
        return
    state_path().unlink(missing_ok=True)


def _looks_like_emulator(pid: int) -> bool:
    # Guards against pid reuse: never signal an unrelated process that inherited the number.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        cmdline = ""
    if not cmdline and not Path("/proc").is_dir():
        import subprocess

        out = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
        cmdline = out.stdout
    return "pubsub" in cmdline


def _container(container_id: str):
    import docker

    return docker.from_env(timeout=10).containers.get(container_id)


def _is_alive(state: DetachedState) -> bool:
    if state.backend == "sdk" and state.pgid is not None and state.pid is not None:
        return _looks_like_emulator(state.pid) and group_alive(state.pgid)
    if state.backend == "docker" and state.container_id:
        try:
            return _container(state.container_id).status == "running"
        except Exception:  # noqa: BLE001 - engine gone or container gone: not running
            return False
    return False


def running_state() -> DetachedState | None:
    """Return the recorded emulator if it is still alive; a stale state file is removed."""
    state = _read_state()
    if state is None:
        if state_path().exists():
            remove_state()
        return None
    if not _is_alive(state):
        remove_state(only_if=state)
        return None
    return state


def start_detached(
    *, port: int | None = None, backend: str = "auto", project: str = "local-project", timeout: float = 60.0
) -> tuple[DetachedState, bool]:
    """Start an emulator that survives this process; return ``(state, started)``.

    ``started`` is False when one recorded in the state file is already running (it is returned
    as is, whatever ``port`` says) or when ``PUBSUB_EMULATOR_HOST`` was used (backend ``env``; no
    state is written since we own nothing). The sdk emulator logs to ``state_dir()/emulator.log``.
    Raises what :func:`start_emulator` raises.
    """
    with _locked():
        existing = running_state()
        if existing is not None:
            return existing, False
        log_path = state_dir() / LOG_FILE_NAME
        log_path.unlink(missing_ok=True)
        emu = start_emulator(
            port=port, backend=backend, project=project, timeout=timeout, log_path=log_path, _detached=True
        )
        state = state_from(emu, owner="start")
        if emu.backend == "env":
            return state, False
        write_state(state)
        return state, True


def state_from(emu: Emulator, owner: str) -> DetachedState:
    """Return the :class:`DetachedState` describing ``emu``."""
    return DetachedState(
        host_port=emu.host_port,
        backend=emu.backend,
        project=emu.project,
        pid=emu.pid,
        pgid=emu.pgid,
        container_id=emu.container_id,
        log_path=emu.log_path,
        owner=owner,
        started_at=time.time(),
    )


def stop_detached(grace: float = 5.0) -> DetachedState | None:
    """Stop the recorded emulator (whole process group, or the container) and remove the state.

    Returns the state that was stopped, or ``None`` if nothing was running (idempotent).
    """
    with _locked():
        state = running_state()
        if state is None:
            return None
        if state.backend == "sdk" and state.pgid is not None:
            terminate_group(state.pgid, grace)
        elif state.backend == "docker" and state.container_id:
            try:
                _container(state.container_id).remove(force=True)
            except Exception:  # noqa: BLE001 - already gone is the goal
                pass
        remove_state(only_if=state)
        return state
