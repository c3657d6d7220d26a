"""A :class:`~meanfield.run.Run` held in memory written to a run file, in the layout of ``meanfield simulate``.

:meth:`meanfield.Run.save` writes a run of :func:`meanfield.simulate` (without ``out=``) with its config, and a run of
:func:`meanfield.solve` with a config made from its model and solver (:func:`config_of_solved_run`), so that
:func:`meanfield.load` and the commands that read run files (``meanfield info``, ``diagnose``, ``concentration``)
take it as they take a file of ``meanfield simulate``.  Its ``init.kind`` is ``"stored"``: the initial measure is
the file's own first frame (a particle run starts from it with ``init.kind = "run"`` and ``init.path`` the file).
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["save_run", "config_of_solved_run", "STORED_INIT"]

#: ``init.kind`` of a run saved from :func:`meanfield.solve`: its initial measure is the file's first frame
STORED_INIT = "stored"


def _unsaved(what: str) -> ValueError:
    return ValueError(f"this run of mf.solve cannot be saved as a run file: {what}, which no config describes; keep its "
                      "arrays with run.to_xarray(), or run it from a config with mf.simulate(..., out=PATH)")


def _head_tables(model: Any) -> list[dict[str, Any]]:
    r"""``[[model.heads]]`` tables that rebuild the model's constant heads exactly: ``Q = B_hᵀ`` and ``K = I`` give
    :math:`Q^\top K = B_h`; the head weights must be the config's, ``1/H``."""
    from meanfield.model import ConstantHeads

    if not isinstance(model.heads, ConstantHeads):
        raise _unsaved(f"its heads change in time ({type(model.heads).__name__} built in Python)")
    stack = model.heads.at(0.0)
    if not np.allclose(stack.w, 1.0 / stack.H, rtol=1e-15, atol=0.0):
        raise _unsaved(f"its head weights w = {np.round(stack.w, 6).tolist()} are not 1/H")
    return [{"Q": np.asarray(B).T.tolist(), "K": "identity", "V": np.asarray(V).tolist()} for B, V in zip(stack.B, stack.V)]


def config_of_solved_run(run: Any) -> dict[str, Any]:
    """The resolved config of a run of :func:`meanfield.solve`, from its model, its solver's options and its frames.

    Every key the run used is its own: the model's (its heads as matrices), the solver's options, ``[noise]``, the
    grid's cells, order and limiter; ``solver.t_final`` is the one asked for, ``save_every`` the spacing of its frames;
    ``init.kind`` is :data:`STORED_INIT`.

    Raises
    ------
    ValueError
        Heads that change in time, head weights other than ``1/H``, a mesh that is not a Fibonacci or icosahedral one
        of ``grid.cells``, or a solver option no config key holds.
    """
    from meanfield.config import SCHEMA, load_config
    from meanfield.errors import ConfigNote

    if run.info.get("solver_options") is None:  # (Run.from_states: the defaults had been written as its solver's)
        raise _unsaved("it records no solver options (a Run made by Run.from_states or read by Run.from_xarray)")
    try:
        model = run.model
    except AttributeError:  # (Run.from_xarray: an AttributeError had come out)
        raise _unsaved("it keeps no model (a Run read back by Run.from_xarray)") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigNote)
        cfg = load_config(None)  # every default, resolved
    options = dict(run.info["solver_options"])
    kind = str(options.pop("kind", run.info.get("solver", "particle")))
    if kind not in ("particle", "grid", "jko", "zero-temperature"):
        raise _unsaved(f"its solver {kind!r} is not one of the package's")
    cfg["model"].update(d=int(model.d), beta=float(model.beta), attention=model.attention, direction=model.direction,
                        backend=model.backend, precision=model.precision, tolerance=float(model.tolerance),
                        combine=model.combine, mask=model.mask, heads=_head_tables(model), num_heads=None)
    for key in ("norm", "ngpt_alpha"):  # the normalised solver's (the particle solver's options carry them too)
        if key in options:
            cfg["model"][key] = options.pop(key)
    noise = options.pop("noise", None)
    if noise is not None:
        unknown = sorted(set(noise) - set(SCHEMA["noise"]))
        if unknown:
            raise _unsaved(f"its noise options {unknown}")
        cfg["noise"].update(noise)
    t = np.asarray(run.t, dtype=float)
    t_final = float(options.pop("t_final", t[-1]))  # the one asked for (a run that stopped or failed ends before it)
    options.pop("keep_reports", None)  # (the JKO scheme's bookkeeping: run.info, not the run's numbers)
    cfg["solver"].update(kind=kind, t_final=t_final,
                         save_every=float(t[1] - t[0]) if t.size > 1 else cfg["solver"]["save_every"])
    for key, value in options.items():
        section = "grid" if key in ("order", "limiter", "dt_max") else "solver"
        if key not in SCHEMA[section]:
            raise _unsaved(f"its solver option {key} = {value!r}")
        cfg[section][key] = value
    if run.kind == "grid":
        mesh = run.mesh()
        if mesh.family not in ("fibonacci", "icosahedral"):
            raise _unsaved(f"its {mesh.family} mesh")
        cfg["grid"].update(cells=int(mesh.N), family=mesh.family)
    cfg["init"].update(kind=STORED_INIT, n=int(run.shape[0]) if run.kind == "particle" else cfg["init"]["n"])
    cfg["track"].update(energy="energy" in run.diagnostics, concentration="w2_target" in run.diagnostics)
    return json.loads(json.dumps(cfg))


def save_run(run: Any, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``run`` to ``path`` (see :meth:`meanfield.Run.save`): into a hidden file beside it, moved onto ``path``
    once every frame is written, under the writer lock of ``path``; an error, a damaged frame of the source or an
    interrupt leaves ``path`` as it was."""
    import contextlib
    import os

    from meanfield.io.lock import WriterLock, followed
    from meanfield.io.output import SAVE_SIBLINGS, check_output
    from meanfield.errors import StorageFailed
    from meanfield.io.runfile import DamagedFrameWarning, RunWriter

    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError("path", f"expected a file path (str or os.PathLike), got {type(path).__name__}")
    if not isinstance(overwrite, (bool, np.bool_)):  # (as mf.simulate's: a ValueError had come out here)
        raise ConfigError("overwrite", f"expected True or False, got {overwrite!r}")
    overwrite = bool(overwrite)
    if run.frames == 0:
        raise ConfigError("run", "the run holds no frame to save")
    config = run.config if run.config is not None else config_of_solved_run(run)
    target = Path(path)
    if target.exists() and not target.is_dir():
        if run.path is not None and Path(run.path).exists() and os.path.samefile(target, run.path):
            raise ConfigError("path", f"{target} is the file this run is read from; save it under another name")
        if not overwrite:
            raise ConfigError("path", f"{target} already exists; use overwrite=True to replace it")
    # only a run file is replaced (not a config, a picture, a table or another program's HDF5 file), a damaged one too,
    # as --overwrite does (a truncated run file had been refused)
    check_output(target, overwrite=overwrite, key="path", options=("overwrite=True", "resume=True"), siblings=SAVE_SIBLINGS)
    reader = getattr(run, "_reader", None)
    if reader is not None:  # every frame of the source checked (its warning comes once a file: a damaged frame read
        damaged = reader.damaged_frames()  # before had been copied with a fresh checksum)
        if damaged:
            raise ConfigError("run", f"{run.path}: {reader.named_frames(damaged)} of the source "
                                     f"{'does' if len(damaged) == 1 else 'do'} not match the checksums written with them "
                                     "(their bytes changed on disk); the run is not saved")
    info = json.loads(json.dumps({k: v for k, v in run.info.items() if k != "reports"}, default=_plain))  # (the JKO
    final = followed(target) or target  # scheme's step reports stay in memory, as a file of meanfield simulate has them)
    hidden = final.with_name(f".{final.name}.saving")
    with WriterLock(target, key="path"):  # (another process writing path is refused before anything is made)
        if not overwrite and final.exists():
            raise ConfigError("path", f"{target} was written by another process meanwhile; use overwrite=True to "
                                      "replace it")  # (a run that finished between the check and the lock)
        try:
            writer = RunWriter(hidden, config=config, state_name=run.state_name, state_shape=tuple(run.shape),
                               static=dict(run.static), info=info, replace=True, key="path")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", DamagedFrameWarning)  # (a damaged frame had got a fresh checksum)
                    for index, time in enumerate(run.t):
                        values = {name: float(series[index]) for name, series in run.diagnostics.items()}
                        writer.append(float(time), np.asarray(run.frame(index)), values)
            except DamagedFrameWarning as exc:
                writer.finish("failed", stop_reason="damaged source frame", info=info)
                raise ConfigError("run", f"{exc}; the run is not saved") from None
            except BaseException:
                writer.finish("interrupted", stop_reason="Run.save did not finish", info=info)
                raise
            status, reason = run.status, run.stop_reason
            if status == "running":  # a complete, closed copy: "running" had been read as a writer killed
                status, reason = "interrupted", (f"saved by Run.save while its run was still being written "
                                                 f"({run.frames} frame{'' if run.frames == 1 else 's'})")
            writer.finish(status, stop_reason=reason, info=info)
            os.replace(hidden, final)
        except StorageFailed as exc:  # (its words had named the hidden file, and --resume)
            cause = str(exc).split(";")[0].replace(str(hidden), str(target))
            raise StorageFailed(f"cannot save the run to {target}: {cause}; {target} is left as it was") from None
        finally:
            with contextlib.suppress(OSError):  # (an error here had hidden the one that ended the save)
                hidden.unlink(missing_ok=True)
    return target


def _plain(value: Any) -> Any:
    """A JSON value for what ``run.info`` may hold beside plain ones (NumPy numbers; a report object as its text)."""
    if isinstance(value, (np.integer, np.floating)):
        number = value.item()
        return number if not isinstance(number, float) or math.isfinite(number) else str(number)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
