"""Exceptions shared by the model, the solvers and the CLI.

The CLI maps :class:`ConfigError` (and any ``ValueError`` raised while a
configuration is validated) to exit status 2, and :class:`RunFailed` to exit
status 1.  Every message names the offending option or config key.
"""
from __future__ import annotations

__all__ = ["ConfigError", "ConfigNote", "MeanfieldWarning", "RunFailed", "StorageFailed", "RunInterrupted", "TrackerError"]


class ConfigError(ValueError):
    """Bad input: a config key, a CLI option or a file that cannot be used.

    Parameters
    ----------
    key : str
        Dotted name of the offending key or option, e.g. ``"model.heads[1].Q"``.
    message : str
        What is wrong, in words a user can act on.

    Examples
    --------
    >>> import meanfield as mf
    >>> try:
    ...     mf.load_config(beta=-1.0)
    ... except mf.ConfigError as error:
    ...     print(error.key)
    model.beta
    """

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


class ConfigNote(UserWarning):
    """A choice made for the user (e.g. the grid's default integrator, a sentence cut to the checkpoint's positions);
    the CLI prints it as a note.  Also :data:`meanfield.config.ConfigNote`."""


class MeanfieldWarning(RuntimeWarning):
    """Something a result depends on is not as it should be (damaged frames, terms that leave float64); the CLI prints
    it as ``warning: …``."""


class RunFailed(RuntimeError):
    """A run that started but could not finish (NaN/Inf, solver stall).

    Every frame saved before the failure stays on disk; ``run``, when set, is
    the :class:`meanfield.Run` with the frames up to the failure.
    """

    def __init__(self, message: str, *, run: object = None) -> None:
        super().__init__(message)
        self.run = run


class TrackerError(RuntimeError):
    """A tracker of the caller's raised, or returned something other than a dict of names and numbers, or a
    name that one of the run's own trackers records; the caller's exception is its ``__cause__``.

    The run stops there as failed; ``run``, when set, is the :class:`meanfield.Run` with the frames before it (they had
    been lost with the exception in a notebook's run without a file).

    Examples
    --------
    >>> import meanfield as mf
    >>> def late(t, x):
    ...     if t > 0.5:
    ...         raise ValueError("no")
    ...     return {"first": float(x[0, 0])}
    >>> try:
    ...     mf.simulate(t_final=1.0, save_every=0.25, trackers=[late], **{"init.n": 16})
    ... except mf.TrackerError as error:
    ...     print(error.run.status, error.run.t.tolist(), type(error.__cause__).__name__)
    failed [0.0, 0.25, 0.5] ValueError
    """

    def __init__(self, message: str, *, run: object = None) -> None:
        super().__init__(message)
        self.run = run


class StorageFailed(RunFailed):
    """The run file could not be written (a full disk, a vanished folder); the committed frames are intact."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM: its frames are saved, its status is ``interrupted``, ``--resume`` continues it.

    A :class:`KeyboardInterrupt`, so that a notebook's interrupt behaves as usual; ``run``
    is the :class:`meanfield.Run` up to the interruption.
    """

    def __init__(self, message: str, *, run: object = None) -> None:
        super().__init__(message)
        self.run = run
