"""SIGINT and SIGTERM end a run cleanly: the frames so far are committed, the status is ``interrupted``, no traceback.

While :func:`interruptible` is active, the two signals only raise a flag;
steppers and the run loop call :func:`check` between steps and stop with
:class:`Interrupted` there.  A signal therefore never lands inside a compiled
kernel (where it would surface as numba's ``SystemError``), and the writer gets
to close its file.  A second signal of the same kind while the first is handled
restores the default behaviour (a user insisting on Ctrl-C gets it).
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Interrupted", "interruptible", "check", "requested"]

_requested: list[str] = []


class Interrupted(Exception):
    """The run was asked to stop by a signal; the run loop ends it with status ``interrupted``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def requested() -> str | None:
    """The name of the signal that asked the run to stop, if any."""
    return _requested[0] if _requested else None


def check() -> None:
    """Raise :class:`Interrupted` when a signal asked the run to stop (cheap: call it every step)."""
    if _requested:
        raise Interrupted(f"interrupted by {_requested[0]}")


@contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into a request to stop at the next step (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
        name = signal.Signals(signum).name
        if name in _requested:  # asked twice: give the signal its usual effect
            signal.signal(signum, previous.get(signum, signal.SIG_DFL))
            raise KeyboardInterrupt
        _requested.append(name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    _requested.clear()
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _requested.clear()
