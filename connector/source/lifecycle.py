"""How the driver-side reader process ends, and how a new one ends a predecessor that did not.

Spark stops a query by destroying its driver-side Python process with SIGTERM (``stop()`` is not
called), and does not wait for it. Before dying, the reader hands its held messages back so that
the next run gets them at once instead of after their lease, and releases the stateDir. That work
runs in a helper thread with a hard time bound. The handler itself runs on the main thread,
wherever the signal interrupted it (possibly holding a lock the handler's own steps need, or
with the hand-back stuck writing to a stderr nobody drains), so the kernel is made to end the
process once the bound has passed (``alarm``), whatever happens in Python after that.

The handler is installed only in Spark's streaming-source runner process, never in a process
that merely imports the reader (a test, a notebook).

A reader process that outlives its query anyway (seen once in CI: alive and sleeping 35 s after
its query failed, holding the stateDir) is ended by the next run of the same query:
:func:`stale_sibling` decides whether a process holding the stateDir may be ended,
:func:`end_process` ends it.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("crdb_pubsub")

RUNNER_MODULE = "python_streaming_source_runner"
KILL_MARGIN_SECONDS = 2  # after the hand-back bound, before the kernel ends the process


def in_spark_runner() -> bool:
    main = sys.modules.get("__main__")
    return RUNNER_MODULE in str(getattr(main, "__file__", "") or "")


def on_terminate(hand_back: Callable[[], None], *, within: float) -> bool:
    """Run ``hand_back`` (bounded by ``within`` seconds) when Spark terminates this process."""
    if not in_spark_runner() or threading.current_thread() is not threading.main_thread():
        return False
    begin, done = threading.Event(), threading.Event()

    def work() -> None:
        begin.wait()
        _safely(hand_back)
        done.set()

    # Started now, not in the handler: starting a thread takes threading's own lock, which the
    # interrupted main thread may hold.
    threading.Thread(target=work, name="crdb-pubsub-hand-back", daemon=True).start()

    def handler(signum: int, frame: object) -> None:
        if begin.is_set():
            return
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(math.ceil(within) + KILL_MARGIN_SECONDS)
        try:
            begin.set()
            if not done.wait(within):
                log.warning(
                    "handing held messages back took longer than %.0f s; exiting anyway (they are "
                    "delivered again when their leases lapse)",
                    within,
                )
            sys.stderr.flush()
        finally:
            os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    return True


def _safely(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("handing held messages back failed")


def stale_sibling(pid: int) -> bool:
    """Whether ``pid`` is another streaming-source runner of the Spark driver that runs this one.

    Both processes are children of the same driver JVM. The caller adds what makes such a
    process stale: it serves the run of the query that this process serves, and Spark never runs
    two runs of one query at once in one driver, so its run has ended.
    """
    if pid == os.getpid() or not in_spark_runner():
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return (
        state not in ("Z", "X")
        and int(ppid) == os.getppid()
        and any(a.decode(errors="replace").removesuffix(".py").endswith(RUNNER_MODULE) for a in argv)
    )


def gone_from_this_host(holder: dict) -> bool:
    """Return whether the lease ``holder`` (``{"pid", "host"}``) ran on this host and its process is gone.

    Its lease is then free at once, as a dead process's lock would be.
    """
    import socket

    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def end_process(pid: int, *, kill: bool) -> None:
    """Ask ``pid`` to end (SIGTERM, and SIGCONT should it be stopped), or ``kill`` it."""
    for sig in (signal.SIGKILL,) if kill else (signal.SIGTERM, signal.SIGCONT):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            return


def configure_logging() -> None:
    """Give the driver-side reader process a log handler (Spark's Python worker has none)."""
    logger = logging.getLogger("crdb_pubsub")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
