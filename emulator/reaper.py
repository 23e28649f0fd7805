"""Ending a process group: the emulator's and, from the watchdog, after its launcher died.

Standard library only and no relative imports: the watchdog runs this file as a script
(``python -I -S reaper.py PGID GRACE``), isolated from site-packages so that it starts fast and
nothing it imports can fail. The watchdog outlives an abrupt death of the launching process
(SIGKILL, OOM) and then ends the whole group, including grandchildren that PR_SET_PDEATHSIG would
not reach (e.g. the JVM under ``gcloud beta emulators pubsub start``). It learns of the death by EOF
on its stdin, a pipe whose only write end the launcher holds; the byte ``b"d"`` means "stopped
normally, stand down".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_SECONDS = 5.0


def group_alive(pgid: int) -> bool:
    """Return True while a non-zombie process is in the group (zombies are dead: their reaper may be slow)."""
    if os.path.isdir("/proc"):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # Fields after the ")" closing comm: state ppid pgrp ...
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def terminate_group(pgid: int, grace: float = GRACE_SECONDS, reap: subprocess.Popen | None = None) -> None:
    """SIGTERM the whole process group, SIGKILL whatever is left after ``grace`` seconds.

    ``reap`` is our own child (if any): it is waited for so it does not linger as a zombie.
    Returns once no live process remains in the group (or after a further 5 s of SIGKILL).
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if reap is not None:
                reap.poll()
            if not group_alive(pgid):
                if reap is not None:
                    try:
                        reap.wait(timeout=1)
                    except subprocess.TimeoutExpired:
                        pass
                return
            time.sleep(0.05)
    if reap is not None:
        reap.poll()


def _watchdog(pgid: int, grace: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        data = os.read(0, 1)
    except OSError:
        data = b""
    if data != b"d":
        terminate_group(pgid, grace)


if __name__ == "__main__":
    _watchdog(int(sys.argv[1]), float(sys.argv[2]))
