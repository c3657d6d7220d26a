"""SIGINT and SIGTERM end a run cleanly: the frames so far are committed, the status is ``interrupted``, no traceback.

While :func:`interruptible` is active, the two signals only raise a flag;
steppers and the run loop call :func:`check` between steps and stop with
:class:`Interrupted` there.  A signal therefore never lands inside a compiled
kernel (where it would surface as numba's ``SystemError``), and the writer gets
to close its file.  A second signal of the same kind while the first is handled
restores the default behaviour (a user insisting on Ctrl-C gets it).

A signal that no :func:`check` answered (it came after the last one: while the
last frame was tracked or written, or the file closed) is not dropped: once the
context exits, with the handlers it found put back, the signal is raised again
and takes its usual effect (``KeyboardInterrupt`` for Ctrl-C, the end of the
process for a default SIGTERM), so that a script running one run after another
stops.  Callers keep their file-closing code inside the context: the run keeps
the status it ended with, and its file is closed before the signal acts.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Interrupted", "interruptible", "check", "requested"]

_requested: list[str] = []
_answered: list[bool] = []  # a check() raised Interrupted for the request (the run ended on it)


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
        _answered.append(True)
        raise Interrupted(f"interrupted by {_requested[0]}")


@contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into a request to stop at the next step (main thread only; elsewhere a no-op).

    A signal that is ignored on entry (``SIG_IGN``, as a shell leaves SIGINT for a job started with ``&``) stays ignored.

    A request no :func:`check` answered is raised again when the context exits without an exception (see the module).
    """
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
        if signal.getsignal(sig) is signal.SIG_IGN:  # ignored by whoever started us (``cmd &`` in a script): kept so
            continue  # (the handler had been installed over it, and the run stopped on a Ctrl-C meant for the shell)
        previous[sig] = signal.signal(sig, handler)
    _requested.clear()
    _answered.clear()
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        # (it had been cleared with the rest: a Ctrl-C while the last frame was written ended the run "completed", and
        # a script looping over runs went on with the next one)
        unanswered = _requested[0] if _requested and not _answered else None
        _requested.clear()
        _answered.clear()
    if unanswered is not None:  # (not reached while an exception leaves the context: the caller stops with it anyway)
        signal.raise_signal(signal.Signals[unanswered])
