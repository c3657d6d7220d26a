"""The front door for notebooks: a config in, a :class:`~meanfield.run.Run` out.

>>> import meanfield as mf
>>> run = mf.simulate("data/default.toml", beta=9, t_final=5)            # doctest: +SKIP
>>> run = mf.simulate({"model": {"beta": 9}}, **{"init.n": 64})          # doctest: +SKIP
>>> mf.simulate("data/default.toml", out="run.h5"); mf.load("run.h5")    # doctest: +SKIP

Overrides use the config's keys: bare (``beta``, ``t_final``) when one section
has the key, dotted (``"init.seed"``) otherwise, each once (``beta`` and ``"model.beta"``
together are refused).  Where TOML has an array, a tuple or a NumPy array does too
(``**{"init.mean": (0, 0, 1.0)}``), and NumPy scalars are numbers: the resolved config
holds lists and Python numbers (:func:`meanfield.config.plain_value`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.config import load_config as _load
from meanfield.errors import ConfigError
from meanfield.run import Run

__all__ = ["load_config", "simulate"]


def load_config(source: str | Path | Mapping[str, Any] | None = None, /, **overrides: Any) -> dict[str, Any]:
    """The resolved config (every default filled in) of a TOML path, a mapping or nothing, with keyword overrides.

    Parameters
    ----------
    source : path, mapping or None
        A TOML file, a config mapping (raw or resolved), or nothing (the built-in defaults).
    **overrides
        Config keys: bare where one section has the key (``beta=4.0``), dotted otherwise (``**{"init.n": 32}``), each
        once; an override replaces the source's value.  A tuple or a NumPy array stands for a TOML array.

    Returns
    -------
    dict
        Section → key → value, every key of the schema present (``python -m meanfield.config`` lists them).

    Raises
    ------
    ConfigError
        Naming the bad key, as the CLI does (exit status 2 there).

    Examples
    --------
    >>> import meanfield as mf
    >>> cfg = mf.load_config(beta=4.0, **{"init.n": 32})
    >>> cfg["model"]["beta"], cfg["init"]["n"], cfg["solver"]["kind"]
    (4.0, 32, 'particle')
    >>> mf.load_config(betta=4.0)
    Traceback (most recent call last):
    ...
    meanfield.errors.ConfigError: betta: ...
    """
    return _load(source, values=overrides, source_key="source")


def simulate(
    config: str | Path | Mapping[str, Any] | None = None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    trackers: Sequence[Any] = (),
    **overrides: Any,
) -> Run:
    """Solve one configuration, as ``meanfield simulate`` does, and return the :class:`Run`.

    Parameters
    ----------
    config : path, mapping or None
        A TOML file, a config mapping (raw or resolved), or nothing: the defaults, or with ``resume=True`` the
        config stored in ``out`` (so ``simulate(out="run.h5", resume=True, t_final=8)`` extends that run).
    out : path, optional
        Write the run to this HDF5 file, exactly as the CLI does; the returned
        run then reads its frames from there.
    resume : bool
        Continue the run stored in ``out`` (its config, when ``config`` is not given; overrides such as a later
        ``t_final`` apply on top).
    overwrite : bool
        Replace an existing ``out`` (refused otherwise).
    progress : bool
        Show a tqdm bar on stderr.
    trackers : sequence, or one callable
        Your own trackers (callables ``(t, state) -> dict | None``), run on every saved frame.
    **overrides
        Config keys: ``beta=9``, ``t_final=5``, ``**{"init.seed": 3}``, as in :func:`load_config`.

    Returns
    -------
    Run
        The frames (``run.t``, ``run.states``), the recorded diagnostics and the resolved config; ``run.plot()``
        draws it.

    Raises
    ------
    ConfigError
        A bad key or value (nothing is run, no file is touched).
    RunFailed
        The run ended on NaN/Inf or a solver failure; ``exc.run`` has the frames so far.

    Examples
    --------
    >>> import meanfield as mf
    >>> run = mf.simulate(beta=4.0, t_final=0.5, save_every=0.25, **{"init.n": 32})
    >>> run
    Run(particle, n=32, d=3, 3 frames, t=0..0.5, completed)
    >>> run.states.shape, [float(t) for t in run.t]
    ((3, 32, 3), [0.0, 0.25, 0.5])
    """
    from meanfield.io.output import check_output
    from meanfield.io.source_frame import DamagedSource, damaged_source_of
    from meanfield.solvers.run import simulate_config

    for name, flag in (("resume", resume), ("overwrite", overwrite), ("progress", progress)):
        if not isinstance(flag, (bool, np.bool_)):  # overwrite="False" had replaced the file: a string is true
            raise ConfigError(name, f"expected True or False, got {flag!r}")
    if not (callable(trackers) or (isinstance(trackers, Iterable) and not isinstance(trackers, (str, bytes, Mapping)))):
        raise ConfigError("trackers", f"expected a callable or a sequence of callables, got {type(trackers).__name__}")
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise ConfigError("out", f"expected a path (str or os.PathLike), got {type(out).__name__}")
    if resume and out is None:
        raise ConfigError("resume", "resume=True continues the run stored in out; give out=PATH")
    source = config  # (given by name, config= had been taken for an unknown config key)
    if resume and source is None and Path(out).is_file():  # the run's own config (the defaults had been refused)
        source = _stored_config(out)
    try:
        cfg = _load(source, values=overrides, source_key="config")
    except DamagedSource as exc:  # the source of the run to resume: restore it (resume=True takes no other init.time)
        raise damaged_source_of(exc, out) if resume else exc from None
    if callable(trackers):
        trackers = [trackers]  # one callable: the only tracker
    if out is not None:
        check_output(out, overwrite=overwrite, resume=resume, key="out", options=("overwrite=True", "resume=True"))
    try:
        return simulate_config(cfg, out, resume=resume, quiet=not progress, trackers=trackers, overwrite=overwrite,
                               resume_option="resume=True")
    except ConfigError as exc:  # the writer and the resume name the command line's options: here, the keywords
        if exc.key in _KEYWORDS:
            raise ConfigError(_KEYWORDS[exc.key], exc.message) from None
        raise


def _stored_config(out: str | os.PathLike[str]) -> dict[str, Any]:
    """The resolved config a run file holds, for ``resume=True`` without a source (a file that cannot be read: named
    as ``out``)."""
    from meanfield.io.runfile import read_config

    try:
        stored = read_config(out)
    except ConfigError as exc:
        raise ConfigError("out", exc.message) from None
    from meanfield.io.saved_run import STORED_INIT

    if stored.get("init", {}).get("kind") == STORED_INIT:  # (the config's words had listed the init kinds)
        raise ConfigError("resume", f"{out} holds a run of mf.solve saved by Run.save, whose model and solver are Python "
                                    "objects: continue it with mf.solve(..., t_start=run.t[-1]) from mf.load(out).final, or "
                                    "start a particle run from one of its frames with init.kind = 'run' and init.path = that file")
    return stored


#: the command line's names of :func:`simulate`'s keywords, in the messages of the code they share
_KEYWORDS = {"-o": "out", "--out": "out", "--resume": "resume", "--overwrite": "overwrite"}
