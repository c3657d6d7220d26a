"""Run a resolved configuration end to end: build, step, track, write, resume.

:func:`simulate_config` is what ``meanfield simulate`` and ``meanfield run``
call.  Solver families are registered by ``solver.kind`` in :data:`SOLVER_KINDS`;
each entry builds ``(stepper, initial_state, state_name, static_arrays, trackers)``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.build import build_model, initial_tokens
from meanfield.config import dumps
from meanfield.errors import ConfigError, RunFailed
from meanfield.io import RunWriter, last_frame, read_config, run_status
from meanfield.model import Model
from solvers.loop import RunResult, Tracker, run_loop, save_times
from solvers.particle import ParticleStepper
from solvers.trackers import EnergyTracker, FiniteTracker, ProgressTracker, SphereTracker, SteadyStateTracker

__all__ = ["RunSetup", "SOLVER_KINDS", "available_solver_kinds", "setup_run", "simulate_config"]


@dataclass
class RunSetup:
    """Everything a run needs, built from a config."""

    model: Model
    stepper: Any
    state: np.ndarray
    state_name: str
    static: dict[str, np.ndarray] = field(default_factory=dict)
    trackers: list[Tracker] = field(default_factory=list)
    info: Callable[[], dict[str, Any]] = dict


def _particle_setup(cfg: dict[str, Any], model: Model) -> RunSetup:
    solver = cfg["solver"]
    stepper = ParticleStepper(model, method=solver["method"], dt=solver["dt"], rtol=solver["rtol"], atol=solver["atol"])
    x0 = initial_tokens(cfg)
    trackers: list[Tracker] = [FiniteTracker(), SphereTracker()]
    if cfg["track"]["energy"]:
        trackers.append(EnergyTracker(model))
    trackers.append(SteadyStateTracker(model.velocity, tol=solver["steady_tol"]))
    return RunSetup(model, stepper, x0, "x", {}, trackers, info=lambda: dict(stepper.stats))


#: solver families by ``solver.kind``: ``f(cfg, model) -> RunSetup``
SOLVER_KINDS: dict[str, Callable[[dict[str, Any], Model], RunSetup]] = {"particle": _particle_setup}


def _register_optional() -> None:
    """Solver families that live in their own modules register here when present."""
    import importlib

    for kind, module in (("zero-temperature", "solvers.zero_temperature"), ("grid", "solvers.grid"), ("jko", "solvers.jko")):
        if kind in SOLVER_KINDS:
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        setup = getattr(mod, "run_setup", None)
        if setup is not None:
            SOLVER_KINDS[kind] = setup


def available_solver_kinds() -> list[str]:
    """The ``solver.kind`` values this installation can run."""
    _register_optional()
    return sorted(SOLVER_KINDS)


def setup_run(cfg: dict[str, Any]) -> RunSetup:
    """Build the model, the solver, the initial state and the trackers of a config."""
    _register_optional()
    kind = cfg["solver"]["kind"]
    if kind not in SOLVER_KINDS:
        raise ConfigError("solver.kind", f"solver {kind!r} is not available in this installation")
    setup = SOLVER_KINDS[kind](cfg, build_model(cfg))
    if cfg["weights"]["schedule"] != "constant" and "weights/t" not in setup.static:
        from meanfield.schedules import weights_static  # the weight path, so the run can be replayed

        setup.static.update(weights_static(setup.model.heads, cfg["solver"]["t_final"], dt=cfg["weights"]["dt"]))
    extra = _extra_trackers(cfg, setup)
    setup.trackers.extend(extra)
    return setup


def _extra_trackers(cfg: dict[str, Any], setup: RunSetup) -> list[Tracker]:
    """Optional trackers switched on in ``[track]`` (implemented in their own modules)."""
    trackers: list[Tracker] = []
    if cfg["track"]["concentration"]:
        from solvers.concentration import concentration_tracker

        trackers.append(concentration_tracker(cfg, setup))
    return trackers


def _check_resumable(stored: dict[str, Any], cfg: dict[str, Any], path: Path) -> None:
    """A run may be resumed with the same config, or with a later ``solver.t_final``."""
    for section, keys in cfg.items():
        for key, value in keys.items():
            if section == "solver" and key == "t_final":
                continue
            old = stored.get(section, {}).get(key)
            if json.dumps(old, sort_keys=True) != json.dumps(value, sort_keys=True):
                raise ConfigError(
                    f"{section}.{key}",
                    f"differs from the run in {path} ({old!r} there, {value!r} now); cannot resume with another config",
                )


def simulate_config(
    cfg: dict[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    quiet: bool = False,
    keep_states: bool | None = None,
) -> RunResult:
    """Run a resolved config; frames go to ``out`` (HDF5) as they are saved.

    Parameters
    ----------
    cfg : dict
        Resolved config (:func:`meanfield.config.load_config`).
    out : path, optional
        HDF5 output; ``None`` keeps the run in memory only.
    resume : bool
        Continue the run stored in ``out`` from its last saved frame.  The
        result equals an uninterrupted run's.  A missing file starts afresh.
    quiet : bool
        No progress bar.

    Raises
    ------
    RunFailed
        When a tracker stops the run as failed (NaN/Inf, …); every frame saved
        so far stays in ``out``.
    """
    solver = cfg["solver"]
    times = save_times(0.0, solver["t_final"], solver["save_every"])
    setup = setup_run(cfg)
    state = setup.state
    record_first = True
    writer: RunWriter | None = None
    out_path = Path(out) if out is not None else None
    if out_path is not None and resume and out_path.exists():
        _check_resumable(read_config(out_path), cfg, out_path)
        status_before, reason_before = run_status(out_path)
        if status_before == "failed" and reason_before != "interrupted":
            raise ConfigError(
                "--resume",
                f"the run in {out_path} failed ({reason_before}); resuming would continue from a bad frame. "
                "Fix the config and start afresh without --resume",
            )
        frames, t_last, state = last_frame(out_path, setup.state_name)
        done = times[times <= t_last + 1e-12 * max(1.0, abs(t_last))]
        if len(done) != frames or not math.isclose(done[-1], t_last, rel_tol=0, abs_tol=1e-12 * max(1.0, abs(t_last))):
            raise ConfigError("--resume", f"{out_path} holds {frames} frames ending at t={t_last}, which do not match the save times")
        times = times[len(done) - 1 :]
        record_first = False
        writer = RunWriter(out_path, config=cfg, state_name=setup.state_name, state_shape=state.shape, resume=True)
        writer.truncate(frames)
        for key, value in setup.static.items():  # e.g. a weight path extended to a later t_final
            writer.write_static(key, value)
    elif out_path is not None:
        writer = RunWriter(out_path, config=cfg, state_name=setup.state_name, state_shape=state.shape, static=setup.static)
    progress = ProgressTracker(total=float(times[-1]), initial=float(times[0]), quiet=quiet)
    if keep_states is None:
        keep_states = writer is None
    status, reason = "failed", "interrupted"
    result: RunResult | None = None
    try:
        result = run_loop(
            setup.stepper,
            state,
            times,
            trackers=setup.trackers,
            write=writer.append if writer is not None else None,
            progress=progress,
            keep_states=keep_states,
            record_first=record_first,
        )
        result.info.update(setup.info())
        reason = result.info["stop_reason"]
        status = "failed" if result.info["failed"] else ("completed" if reason == "t_final" else "stopped")
    finally:
        progress.close()
        if writer is not None:
            writer.finish(status, stop_reason=reason, info=result.info if result is not None else None)
    if result.info["failed"]:
        where = f"; frames so far are in {out_path}" if out_path is not None else ""
        raise RunFailed(f"{reason}{where}")
    result.info["config"] = dumps(cfg)
    return result
