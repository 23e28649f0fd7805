"""The suite's one polling helper: wait for a condition, never a silent timeout.

A test that waits on a streaming query passes it as ``query=``: when the query died, the wait fails
at once with the query's own error (``query.exception()``) instead of running out its time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    cond: Callable[[], Any],
    timeout: float,
    what: str | Callable[[], str] = "the condition",
    *,
    query: Any = None,
    step: Callable[[], Any] | None = None,
    interval: float = 0.1,
) -> None:
    """Poll ``cond`` until it is true, or fail with an ``AssertionError`` that names ``what``.

    ``query``: a ``StreamingQuery`` the condition depends on; once it is no longer active (and the
    condition still false) the wait fails with ``query.exception()``, or says that the query stopped.
    ``step``: called between polls instead of sleeping ``interval`` (a test that drives the code
    under test itself, e.g. one trigger per poll). ``what`` may be a callable, evaluated only when
    the wait fails (a message that shows the state at the end).
    """
    end = time.monotonic() + timeout
    while True:
        if cond():
            return
        if query is not None and not query.isActive:
            exc = query.exception()
            if cond():  # the query ended right after doing what was awaited
                return
            cause = exc if isinstance(exc, BaseException) else None
            raise AssertionError(f"the query stopped while waiting for {_text(what)}: {exc}") from cause
        if time.monotonic() > end:
            if cond():
                return
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {_text(what)}")
        if step is not None:
            step()
        else:
            time.sleep(interval)


def _text(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what
