"""Run a resolved configuration end to end: build, step, track, write, resume.

:func:`simulate_config` is what ``meanfield simulate``, ``meanfield run`` and
:func:`meanfield.simulate` call.  A config becomes a
:class:`~meanfield.solvers.problem.Problem` (:func:`problem_from_config`) and a
solver (:func:`solver_from_config`); the solver builds the stepper and its
trackers exactly as :func:`meanfield.solve` does, and the config adds its own
trackers (``[track]``), the weight path of time-dependent heads, and the HDF5 writer.
"""
from __future__ import annotations

import json
import os
import math
import warnings
from dataclasses import replace
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.analysis.concentration import ConcentrationTracker, origin_target, single_head, tracker_from_head
from meanfield.build import build_model, initial_tokens
from meanfield.config import SCHEMA, ConfigNote
from meanfield.errors import ConfigError, RunFailed, RunInterrupted, TrackerError
from meanfield.geometry.mesh import initial_mass
from meanfield.io.runfile import RunReader, RunWriter, last_frame
from meanfield.io.source_frame import source_tokens, start_time
from meanfield.io.token_masses import stored_token_masses
from meanfield.kernels.jit import one_blas_thread
from meanfield.model import (EXP_OVERFLOW, VELOCITY_EXPONENT_LIMIT, Model, unshifted_exponent, unshifted_exponents,
                             unshifted_velocity_exponent)
from meanfield.noise import noise_from_config
from meanfield.run import Run
from meanfield.solvers import grid as grid_solver
from meanfield.solvers import jko as jko_solver
from meanfield.solvers.loop import RunResult, RunSetup, Tracker, run_loop, save_times
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, add_slope_tracker, run_status as final_status
from meanfield.solvers.signals import interruptible
from meanfield.solvers.trackers import CallbackTracker, ProgressTracker
from meanfield.solvers.zero_temperature import ZeroTemperatureSolver

__all__ = [
    "SOLVER_KINDS",
    "available_solver_kinds",
    "on_grid",
    "problem_from_config",
    "solver_from_config",
    "setup_run",
    "check_buildable",
    "concentration_tracker",
    "simulate_config",
]


def _particle(cfg: dict[str, Any]) -> ParticleSolver:
    s = cfg["solver"]
    return ParticleSolver(method=s["method"], dt=s["dt"], rtol=s["rtol"], atol=s["atol"], noise=noise_from_config(cfg),
                          norm=cfg["model"].get("norm", "post"), ngpt_alpha=cfg["model"].get("ngpt_alpha", 0.2))


def _zero_temperature(cfg: dict[str, Any]) -> ZeroTemperatureSolver:
    s = cfg["solver"]
    return ZeroTemperatureSolver(method=s["method"], dt=s["dt"], rtol=s["rtol"], atol=s["atol"])


#: solver options by ``solver.kind``: ``f(resolved config) -> solver``
SOLVER_KINDS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "particle": _particle,
    "grid": grid_solver.solver_from_config,
    "jko": jko_solver.solver_from_config,
    "zero-temperature": _zero_temperature,
}


def available_solver_kinds() -> list[str]:
    """The ``solver.kind`` values."""
    return sorted(SOLVER_KINDS)


def on_grid(cfg: dict[str, Any]) -> bool:
    """Whether the config's measure is a density on a mesh (the grid solver, or the grid JKO)."""
    solver = cfg["solver"]
    return solver["kind"] == "grid" or (solver["kind"] == "jko" and solver["variant"] == "grid")


def problem_from_config(cfg: dict[str, Any], model: Model | None = None, *, frame: Any = None) -> Problem:
    """The model and the initial measure of a resolved config (tokens, or cell masses on its mesh); ``frame``: the
    :func:`~meanfield.io.source_frame.source_tokens` of ``init.kind = "run"`` where the caller has read it already."""
    model = build_model(cfg) if model is None else model
    if on_grid(cfg):
        if model.d != 3:
            raise ConfigError("model.d", f"the grid solver works on S² (d = 3), got d={model.d}")
        msh = grid_solver.grid_mesh(cfg)
        kind, params = grid_solver.grid_init(cfg)
        return Problem(model, initial_mass(msh, kind, **params), mesh=msh)
    if cfg["init"]["kind"] == "run":  # a frame of a stored run: its tokens (a grid run's cells) with their masses
        frame = _source(cfg) if frame is None else frame
        return Problem(model, frame.tokens, weights=frame.weights)
    return Problem(model, initial_tokens(cfg))


def _source(cfg: dict[str, Any]) -> Any:
    """The frame a run with ``init.kind = "run"`` starts from (:func:`~meanfield.io.source_frame.source_tokens`; resolving
    ``cfg`` read it and gave its warnings)."""
    init = cfg["init"]
    return source_tokens(init["path"], init["time"], min_mass=float(init["min_mass"]), symmetry=init["symmetry"], warn=False)


def solver_from_config(cfg: dict[str, Any]) -> Any:
    """The solver options of ``[solver]`` (and ``[grid]``)."""
    kind = cfg["solver"]["kind"]
    if kind not in SOLVER_KINDS:
        raise ConfigError("solver.kind", f"unknown solver {kind!r}; choose from {', '.join(sorted(SOLVER_KINDS))}")
    return SOLVER_KINDS[kind](cfg)


def concentration_tracker(cfg: dict[str, Any], setup: RunSetup) -> ConcentrationTracker:
    """The tracker ``[track] concentration = true`` adds: W2 to Π♯ρ₀ and the eigenspace distances.

    Checks Assumption 1 per ``model.assumptions`` and builds Π♯ρ₀ from the run's
    initial state (tokens, or the masses on the mesh's ``points``).

    Raises
    ------
    ConfigError
        More than one head, or Assumption 1 fails under ``model.assumptions = "check"``.
    """
    head = single_head(cfg)
    if cfg["init"]["kind"] == "run":  # tokens from a stored frame: Π♯ρ₀ is that of the chain's first run
        tracker = tracker_from_head(head.Q, head.K, head.V, setup.state, weights=stored_token_masses(setup.static),
                                    method=cfg["track"]["w2_method"], policy=cfg["model"]["assumptions"])
        return replace(tracker, target=origin_target(cfg["init"]["path"], head.Q, head.K, head.V, init=cfg["init"]))
    from meanfield.geometry.grid_config import reconstructs_density

    points = setup.static.get("points") if setup.state_name == "mass" else None
    # the second-order grid reconstructs the density inside the cells: W2 integrates that, not atoms (the rule the
    # analysis of a stored run follows too)
    mesh = setup.stepper.mesh if setup.state_name == "mass" and reconstructs_density(cfg) else None
    return tracker_from_head(
        head.Q, head.K, head.V, setup.state, points=points, mesh=mesh,
        method=cfg["track"]["w2_method"], policy=cfg["model"]["assumptions"]
    )


def setup_run(cfg: dict[str, Any], *, trackers: Sequence[Tracker] = ()) -> RunSetup:
    """Build the problem, the solver, the initial state and every tracker of a config.

    ``trackers`` are the caller's own, run after the built-in ones.
    """
    frame = _source(cfg) if cfg["init"]["kind"] == "run" else None  # read once: the tokens and their fingerprint
    problem = problem_from_config(cfg, frame=frame)
    solver = solver_from_config(cfg)
    setup = solver.setup(problem, energy=cfg["track"]["energy"], speed=True, steady_tol=cfg["solver"]["steady_tol"])
    if frame is not None:  # the source frame's fingerprint: --resume and the chain check the source still holds it
        from meanfield.io.source_frame import SOURCE_DIGEST

        setup.static[SOURCE_DIGEST] = frame.digest
    if cfg["solver"].get("clock", "time") != "time":  # save times count the gradient clock (meanfield.analysis.landscape)
        from meanfield.analysis.landscape import gradient_clock

        gradient_clock(setup, clock=cfg["solver"]["clock"], merge=cfg["solver"]["clock_merge"], schedule=cfg["weights"]["schedule"], kind=cfg["solver"]["kind"])
    if cfg["weights"]["schedule"] != "constant":  # the weight path, so that the run can be replayed, and G²
        if "weights/t" not in setup.static:  # (not where the solver stored its path already)
            from meanfield.heads.schedules import weights_static

            with np.errstate(all="ignore"):  # a path that leaves the finite numbers is named just below
                setup.static.update(weights_static(setup.model.heads, cfg["solver"]["t_final"], dt=cfg["weights"]["dt"]))
        _check_weight_path(setup.static, cfg["weights"])
        _check_path_for_the_model(setup.static, cfg, start=setup.model.heads)
        add_slope_tracker(setup, kind=cfg["solver"]["kind"], weights=problem.weights)
    if cfg["track"]["concentration"]:
        setup.trackers.append(concentration_tracker(cfg, setup))
    setup.trackers.extend(CallbackTracker.of(tracker) for tracker in trackers)
    return setup


def check_buildable(cfg: dict[str, Any]) -> None:
    """Refuse a resolved config that :func:`setup_run` would refuse for its model, its particles' initial tokens or its
    weight path, without building the solver, a mesh or a run: the checks a resolved config cannot make alone.

    For callers that check many configs before they write anything (``meanfield sweep``: a β past the scores'
    resolution under a weight schedule, a ``weights.target`` that leaves the finite numbers, a ``weights.amplitude``
    or ``weights.sigma`` past the bounds had been refused only in each case's run, after the sweep had written its
    folder: every case failed, exit 1).  The weight path is sampled as the run samples it; its notes are the run's
    to give, so this gives none.

    Raises
    ------
    ConfigError
        Naming the key, as :func:`setup_run` does.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the run says its notes
        model = build_model(cfg)
        if not on_grid(cfg) and cfg["init"]["kind"] not in ("run", "sentence"):  # (a frame and a sentence: the config's
            initial_tokens(cfg)  # own checks read them)
        if cfg["weights"]["schedule"] == "constant":
            return
        from meanfield.heads.schedules import weights_static

        with np.errstate(all="ignore"):  # a path that leaves the finite numbers is named just below
            static = weights_static(model.heads, cfg["solver"]["t_final"], dt=cfg["weights"]["dt"])
        _check_weight_path(static, cfg["weights"])
        _check_path_for_the_model(static, cfg, start=model.heads)


def _check_weight_path(static: dict[str, np.ndarray], weights: dict[str, Any]) -> None:
    """Heads that leave the finite numbers on ``[0, t_final]`` are bad input, found before any file is made: a
    ``weights.target`` such as ``log(0.05 - t)`` had passed its check at t = 0 and ended the run as NaN tokens."""
    times = static["weights/t"]
    for name in ("B", "V", "w"):
        values = static.get(f"weights/{name}")
        if values is None or np.all(np.isfinite(values)):
            continue
        finite = np.isfinite(values).reshape(values.shape[0], -1).all(axis=1) if values.ndim > 1 else np.isfinite(values)
        first = float(times[np.argmin(finite)]) if values.shape[0] == times.shape[0] else math.nan
        from meanfield.heads.schedules import check_euler_step

        check_euler_step(weights)  # the recursion, not the target, diverged (the target had been named)
        key = "weights.target" if weights["schedule"] == "relaxation" else "weights"
        raise ConfigError(key, f"the heads of the weights.schedule = {weights['schedule']!r} path are not finite from "
                               f"t = {first:.6g} on (their {name} matrices); they must stay finite up to solver.t_final")


def _schedule_key(weights: dict[str, Any], *, beta: float, d: int) -> str:
    """The ``[weights]`` key that moves the heads of a schedule: where its path passes a limit that its start keeps."""
    schedule = weights["schedule"]
    if schedule == "oscillating":
        return "weights.amplitude"
    if schedule == "relaxation":
        return "weights.target"
    if schedule == "ou" and weights.get("mean") is not None:
        from meanfield.heads.schedules import matrix_value

        if beta * float(np.linalg.norm(matrix_value(weights["mean"], d, key="weights.mean"), 2)) > EXP_OVERFLOW:
            return "weights.mean"  # pulled towards heads past the limit (else its noise takes them there)
    return "weights.sigma" if schedule == "ou" else "model.beta"


def _check_path_for_the_model(static: dict[str, np.ndarray], cfg: dict[str, Any], *, start: Any) -> None:
    r"""What the config checks of the heads at t = 0, over the whole stored weight path on ``[0, t_final]``, before
    any file is made.

    The JKO scheme needs symmetric, value-aligned heads at all times (a relaxation towards a non-symmetric
    ``weights.target``, or an OU pull towards a non-symmetric ``weights.mean``, had left them and run on as a gradient
    flow that is none, or failed after ten halvings: exit 1 and a file), and :math:`\beta\|B_h(t)\|_2` at most
    :data:`~meanfield.model.EXP_OVERFLOW` (heads oscillating from 300 I to 900 I had ended in inf energies, exit 0):
    a :class:`ConfigError` naming the schedule's key.  Unnormalized attention gets the config's overflow note where
    the path, not its start, passes that exponent.  ``start`` is the model's schedule: the configured heads of an OU
    or oscillating schedule (its ``mean``), which the config's note read, count as its start."""
    model, weights = cfg["model"], cfg["weights"]
    jko = cfg["solver"]["kind"] == "jko"
    times, B, V = static["weights/t"], static["weights/B"], static["weights/V"]
    schedule = weights["schedule"]
    if jko:
        try:
            jko_solver.check_gradient_structure_path(times, B, V)
        except ValueError as exc:
            key = {"relaxation": "weights.target", "ou": "weights.mean"}.get(schedule, "weights.schedule")
            raise ConfigError(key, f"the weights.schedule = {schedule!r} path leaves the heads the JKO scheme takes: {exc} "
                                   f"(give a symmetric {key}, or run solver.kind = 'particle')") from None
    if not (jko or model["attention"] == "unnormalized") or model["beta"] == 0:
        return
    beta = float(model["beta"])
    exponents = unshifted_exponents(beta, B)
    top = int(np.argmax(exponents))
    key = _schedule_key(weights, beta=beta, d=int(model["d"]))
    mean = getattr(start, "mean", None)  # (an OU or oscillating schedule: the configured heads the config's notes read)
    if exponents[top] > EXP_OVERFLOW:
        where = (f"the weights.schedule = {schedule!r} path takes β·max‖B_h(t)‖₂ to {exponents[top]:.4g} at "
                 f"t = {float(times[top]):.6g} ({exponents[0]:.4g} at t = 0; model.beta = {beta:g})")
        if jko:
            raise ConfigError(key, f"{where}: the JKO scheme works with the energy and the mobility 1/b̂ as floats, which grow "
                                   f"like e^(β⟨x, By⟩) and pass the largest float from β‖B_h‖₂ ≈ {EXP_OVERFLOW:.2f}; lower "
                                   f"{'model.beta' if key == 'model.beta' else f'{key} or model.beta'}, or run solver.kind = "
                                   "'particle' (its velocity is the same pooled flow, in log scale)")
        first = max(float(exponents[0]), unshifted_exponent(beta, mean.B) if mean is not None else 0.0)
        if first <= EXP_OVERFLOW:  # (past it at the start: the config's note said so)
            warnings.warn(f"{where} ({key}): unnormalized attention takes e^(β⟨x, B y⟩) unshifted, which exceeds float64 "
                          "above β⟨x, B y⟩ = 709; the run stops on NaN/Inf where the tokens get there", ConfigNote, stacklevel=4)
        return
    # the config's velocity note, over the path (its conditions: the particle solver, the sphere's own step)
    if jko or cfg["solver"]["kind"] == "grid" or model.get("norm") in ("peri", "ngpt"):
        return
    velocity = unshifted_exponents(beta, B, V, above=VELOCITY_EXPONENT_LIMIT)
    top = int(np.argmax(velocity))
    first = max(float(velocity[0]), unshifted_velocity_exponent(beta, mean.B, mean.V) if mean is not None else 0.0)
    if velocity[top] > VELOCITY_EXPONENT_LIMIT and first <= VELOCITY_EXPONENT_LIMIT:
        warnings.warn(f"model.beta = {beta:g}: the weights.schedule = {schedule!r} path takes the unnormalized velocity, up to "
                      f"e^(β‖B_h‖₂)‖V_h‖_F, to e^{velocity[top]:.4g} at t = {float(times[top]):.6g} (e^{velocity[0]:.4g} at "
                      f"t = 0; {key}), past e^{VELOCITY_EXPONENT_LIMIT:.4g}, past which a step's tokens cannot be put back on "
                      "the sphere; the run stops on NaN/Inf where the tokens get near a head's top singular directions",
                      ConfigNote, stacklevel=4)


def _check_resumable(stored: dict[str, Any], cfg: dict[str, Any], path: Path) -> None:
    """A run may be resumed with the same config, or with a later ``solver.t_final``.

    The error names the first key that differs, ``[noise]`` first: whether a run is noisy sets the default of
    ``solver.method`` (Euler–Maruyama), and a noisy run resumed from a config without ``[noise]`` had been refused
    for its ``solver.method``; a missing or added ``[noise]`` section is named as such, and the other keys that
    differ are listed after it."""
    differ: list[tuple[str, str, Any, Any]] = []
    for section, keys in cfg.items():
        saved = stored.get(section, {})
        for key, value in keys.items():
            if section == "solver" and key == "t_final":
                continue
            spec = SCHEMA.get(section, {}).get(key)
            # a key (or a section, e.g. [noise]) newer than the stored run holds its default there
            old = saved[key] if key in saved else (spec.default if spec is not None else None)
            if json.dumps(old, sort_keys=True) != json.dumps(value, sort_keys=True):
                differ.append((section, key, old, value))
    if differ:
        differ.sort(key=lambda item: item[0] != "noise")  # stable: the config's order otherwise
        section, key, old, value = differ[0]
        if (section, key) == ("noise", "gamma") and (old is None) != (value is None):
            what = (f"the run in {path} is noisy (gamma = {old!r} there) and this config has no [noise] section" if value is None
                    else f"the run in {path} has no noise and this config adds a [noise] section (gamma = {value!r})")
            differ = [item for item in differ if item[0] != "noise"]  # the section's other keys follow from it
        else:
            what = f"differs from the run in {path} ({old!r} there, {value!r} now)"
            differ = differ[1:]
        also = f" (other keys differ too: {', '.join(f'{s}.{k}' for s, k, _, _ in differ)})" if differ else ""
        raise ConfigError(f"{section}.{key}", f"{what}; cannot resume with another config{also}")
    before, now = stored["solver"]["t_final"], cfg["solver"]["t_final"]
    if now < before:
        raise ConfigError("solver.t_final", f"{path} runs to t_final = {before:g}; resuming only extends a run (got {now:g})")


def _resume_point(path: Path, cfg: dict[str, Any], setup: RunSetup, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Where ``--resume`` continues ``path``: ``(remaining save times, state, committed frames)``; ``None`` to start afresh.

    Raises
    ------
    ConfigError
        Another config, a shorter ``t_final``, a failed run, a non-finite last frame, frames off the save times.
    """
    reader = RunReader(path, key="--resume")
    _check_resumable(reader.config, cfg, path)
    if cfg["init"]["kind"] == "run":  # a source replaced since: the run would go on from another start
        from meanfield.io.source_frame import SOURCE_DIGEST, check_source_unchanged, stored_source_digest

        # the frame setup_run read, its digest at hand: not read a second time
        check_source_unchanged(path, cfg["init"], stored_source_digest(path), now=setup.static.get(SOURCE_DIGEST))
    if reader.frames == 0:
        warnings.warn(f"{path} holds no committed frame; starting the run afresh", ConfigNote, stacklevel=3)
        return None
    if reader.status == "failed" and not reader.info.get("storage_failed"):  # a full disk: its frames are good, go on
        raise ConfigError(
            "--resume",
            f"the run in {path} failed ({reader.stop_reason}); its {reader.frames} committed frames are good, but the same "
            "config fails again at the same step, and --resume takes no other. Continue from its last good frame with "
            f"another config (e.g. a smaller solver.dt) in a new file: --set init.kind=run --set init.path={Path(path).resolve()} "
            f"--set init.time={float(reader.times()[-1])!r}; or fix the config and start afresh",
        )
    frames, t_last, state = last_frame(path, setup.state_name)
    from meanfield.kernels.jit import num_threads

    if reader.threads is not None and reader.threads != num_threads():  # (a resume on another count had said nothing)
        warnings.warn(f"{path} was written with {reader.threads} kernel thread(s) and this session runs {num_threads()}: the "
                      "kernels' sums may then round differently (on problems large enough for more than one thread), and the result "
                      f"may differ from the uninterrupted run's in the last digits (--threads {reader.threads} or MEANFIELD_NUM_THREADS={reader.threads} resumes it bit for bit)",
                      ConfigNote, stacklevel=3)
    restore = getattr(setup.stepper, "restore", None)
    if restore is not None:  # a stepper with its own state (the gradient clock's physical time) takes it from the last frame
        import h5py

        with h5py.File(path, "r") as f:
            group = f["diagnostics"]
            restore({name: float(group[name][frames - 1]) for name in group if group[name].shape[0] >= frames})
    rest = _remaining_times(reader.times()[:frames], times)
    if rest is None:
        raise ConfigError("--resume", f"{path} holds {frames} frames ending at t={t_last}, which do not match the save times")
    return rest, state, frames


def _a_save_time(t: float, times: np.ndarray) -> bool:
    """Whether ``t`` is one of the save ``times`` (a steady state found at an earlier ``t_final`` that is none is not
    found there again)."""
    return bool(np.any(np.abs(times - t) <= 1e-12 * max(1.0, abs(t))))


def _remaining_times(stored: np.ndarray, times: np.ndarray) -> np.ndarray | None:
    """The save times ``--resume`` still has to take after the committed frames at ``stored``: ``times`` from the last
    one on (which starts the list); ``None`` when the frames are not those of this run.

    The frames must hold every save time up to their last one, and may hold others between them: the ``t_final`` of
    earlier sessions that were not save times (extending a run that ended at 0.05 with ``save_every = 0.1`` continues
    from a frame at 0.05). The config's ``t_final`` cannot tell them apart: an extending session stores the new one
    before its first frame, and an extension interrupted there had been refused for frames "off the save times".
    """
    if len(stored) == 0 or np.any(np.diff(stored) <= 0):
        return None
    t_last = float(stored[-1])
    tol = 1e-12 * max(1.0, abs(t_last))
    # save_times' own distance within which a t_final replaces a save time (a float32 t_final = 0.3 is 0.30000001)
    near = max(1e-9 * max(1.0, abs(t_last)), 1e-6 * (float(times[1] - times[0]) if len(times) > 1 else 0.0))
    if not math.isclose(stored[0], times[0], rel_tol=0, abs_tol=tol):
        return None
    done = times[times <= t_last + near]
    at = np.clip(np.searchsorted(stored, done), 1, len(stored) - 1) if len(stored) > 1 else np.zeros(len(done), dtype=int)
    gap = np.minimum(np.abs(stored[at] - done), np.abs(stored[np.maximum(at - 1, 0)] - done))
    if np.any(gap > near):  # a save time without its frame
        return None
    if math.isclose(done[-1], t_last, rel_tol=0, abs_tol=tol):
        return times[len(done) - 1 :]  # the last frame is a save time: the rest of them, as the uninterrupted run
    return np.concatenate([[t_last], times[len(done):]])  # it is an earlier t_final: on from it to the next save time


def _check_source_is_not_output(cfg: dict[str, Any], out: Path, *, out_key: str = "out") -> None:
    """A run started from a stored frame (``init.kind = "run"``) cannot write into the file it starts from: that file
    would be replaced (``--overwrite``) or extended with a chain that loops back on itself (``--resume``).  ``out_key``
    names the output as the caller took it (``-o``, or :func:`meanfield.simulate`'s ``out``)."""
    init = cfg.get("init", {})
    if init.get("kind") != "run" or not init.get("path"):
        return
    source = Path(init["path"])
    same = source.exists() and out.exists() and os.path.samefile(source, out)
    if same or source.resolve() == out.resolve():
        output = f"{out_key} {out}" if out_key.startswith("-") else f"{out_key} = {str(out)!r}"  # (-o had been named in the API)
        raise ConfigError("init.path", f"{source} is also the output {output}: a run cannot start from the file it writes; "
                                       "give another output")


def simulate_config(
    cfg: dict[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    quiet: bool = False,
    keep_states: bool | None = None,
    trackers: Sequence[Tracker] = (),
    overwrite: bool = True,
    out_key: str = "out",
    resume_option: str = "--resume",
) -> Run:
    """Run a resolved config; frames go to ``out`` (HDF5) as they are saved.

    Parameters
    ----------
    cfg : dict
        Resolved config (:func:`meanfield.config.load_config`).
    out : path, optional
        HDF5 output; ``None`` keeps the run in memory only.
    resume : bool
        Continue the run stored in ``out`` from its last committed frame; the result
        equals an uninterrupted run's.  A missing file, or one without a committed
        frame, starts afresh; a later ``solver.t_final`` extends the run (and is stored).
    quiet : bool
        No progress bar.
    keep_states : bool, optional
        Keep the saved states in memory (default: only without ``out``).
    trackers : sequence of Tracker
        Extra trackers, run after the built-in ones.
    overwrite : bool
        Whether a file that appears at ``out`` while the run starts (another run's) may be replaced; the callers check
        an existing one first (``--overwrite``).  ``out_key`` names ``out`` in the error.
    out_key : str
    resume_option : str
        How the message of an interrupted run names the way to continue it (the Python API's ``resume=True``).

    Returns
    -------
    Run
        In memory, or (with ``out``) reading its frames from the file.
        ``run.info["already_complete"]`` is set when ``--resume`` found nothing to do.

    Raises
    ------
    RunFailed
        When a tracker stops the run as failed (NaN/Inf, …) or the disk is full;
        every committed frame stays in ``out``, and ``exc.run`` holds them.
    RunInterrupted
        SIGINT or SIGTERM ended the run (status ``interrupted``; ``--resume`` continues it).
    ConfigError
        Bad input, or another process writes ``out``.
    """
    solver = cfg["solver"]
    if out is not None:
        _check_source_is_not_output(cfg, Path(out), out_key=out_key)
    times = save_times(start_time(cfg), solver["t_final"], solver["save_every"])
    setup = setup_run(cfg, trackers=trackers)
    state = setup.state
    record_first = True
    writer: RunWriter | None = None
    earlier: dict[str, Any] = {}  # the counters of the sessions before this one (--resume)
    out_path = Path(out) if out is not None else None
    if out_path is not None and resume and out_path.exists():
        reader = RunReader(out_path, key="--resume")
        # the config's own stop at its steady state, which it makes again at the same frame for any later t_final (it had
        # taken one more frame at each --resume, a later t_final too); a stop by a caller's tracker is resumed
        steady = (reader.status == "stopped" and reader.stop_reason.startswith("steady state") and reader.frames > 0
                  and _a_save_time(float(reader.times()[reader.frames - 1]), times))
        complete = reader.status == "completed" and reader.config["solver"]["t_final"] == solver["t_final"]
        if reader.frames and (steady or complete):
            _check_resumable(reader.config, cfg, out_path)
            run = Run.load(out_path)
            run.info["already_complete"] = True  # nothing to resume: the caller says so
            return run
        point = _resume_point(out_path, cfg, setup, times)
        stored_series = set(reader.diagnostics())  # (what a caller's tracker recorded there, which this call may lack)
        if point is not None:
            times, state, frames = point
            record_first = False
            earlier = dict(reader.info or {})
            writer = RunWriter(out_path, config=cfg, state_name=setup.state_name, state_shape=state.shape,
                               static=setup.static, resume=True, resume_frames=frames, info=_unrecorded(earlier), key=out_key)
    if out_path is not None and resume and not out_path.exists():
        warnings.warn(f"{out_path} does not exist (a run killed before its first frame leaves none); "
                      "starting the run afresh", ConfigNote, stacklevel=2)
    if out_path is not None and writer is None:
        frameless = resume and out_path.exists()  # (--resume of a file without a committed frame starts it afresh)
        writer = RunWriter(out_path, config=cfg, state_name=setup.state_name, state_shape=state.shape, static=setup.static,
                           info=_unrecorded(earlier), replace=overwrite or frameless, key=out_key)
    try:  # (a signal here, the file reopened and its handler not yet in place, had left the status "running")
        progress = ProgressTracker(total=float(times[-1]), initial=float(times[0]), quiet=quiet)
    except BaseException:
        if writer is not None:
            writer.finish("interrupted", stop_reason="interrupted before the run started")
        raise
    if keep_states is None:
        keep_states = writer is None
    status, reason = "failed", "the run stopped before its first frame"
    result: RunResult | None = None
    tracker_error: TrackerError | None = None
    # the file is closed inside interruptible(): a signal after the loop's last check (while the last frame was
    # tracked or written) leaves the run its status and file, then acts (signals.py), rather than being dropped
    with interruptible():
        try:
            with one_blas_thread():  # trackers' products too: threaded BLAS only contends with our threads
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
            tracker_error = result.info.pop("tracker_error", None)
            result.info.update(whole_run_counters(earlier, result.info | setup.info() | {"sessions": 1, "unrecorded_sessions": 0}))
            reason = result.info["stop_reason"]
            status = "interrupted" if result.info["interrupted"] else final_status(result.info["failed"], reason)
        except KeyboardInterrupt:  # raised inside a tracker or by a second Ctrl-C: the frames so far can be resumed
            status, reason = "interrupted", "interrupted"
            raise
        except BaseException as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            progress.close()
            if writer is not None:
                writer.finish(status, stop_reason=reason, info=_jsonable_info(result.info) if result is not None else None)
    kept_older = writer is not None and writer.kept_older  # no frame committed: the file there is an older run's
    if writer is not None and not kept_older and not writer.discarded:
        run = Run.load(out_path)
        run.info.update(result.info)  # the counters, with the objects that stay in memory
        run._model = setup.model  # noqa: SLF001 - the model was built already
    else:
        run = Run.from_states(
            t=result.t,
            states=np.asarray(result.states) if result.states else np.zeros((0, *np.shape(setup.state))),
            state_name=setup.state_name,
            diagnostics=result.diagnostics,
            static=setup.static,
            config=cfg,
            status=status,
            stop_reason=reason,
            info=result.info,
            model=setup.model,
        )
    where = f"; {run.frames} frame{'' if run.frames == 1 else 's'} saved in {out_path}" if out_path is not None else ""
    if kept_older:  # the older run must not pass for this one (its frames had been reported as this run's)
        where = f"; no frame of this run was saved, and the older {out_path} was left as it was"
    elif writer is not None and writer.discarded:
        where = f"; no frame was saved, and no {out_path} was left behind"
    if not record_first and result.t.size:
        _note_unrecorded(stored_series - set(result.diagnostics), float(result.t[0]))
    if result.info["interrupted"]:
        at = run.t[-1] if run.frames else times[0]
        resumable = out_path is not None and writer is not None and not kept_older and not writer.discarded
        raise RunInterrupted(f"{reason} at t = {at:.6g}{where}" + (f"; {resume_option} continues" if resumable else ""),
                             run=run)
    if tracker_error is not None:  # the caller's tracker (mf.simulate(trackers=…)), with the frames before it
        raise TrackerError(f"{reason}{where}", run=run) from tracker_error.__cause__
    if result.info["failed"]:
        raise RunFailed(f"{reason}{where}", run=run)
    return run


def _note_unrecorded(names: set[str], t0: float) -> None:
    """Say which series of the resumed file no tracker of this session recorded: a caller's own tracker, not given
    again (its values are NaN from ``t0`` on; they had been so without a word)."""
    if names:
        from meanfield.errors import MeanfieldWarning

        warnings.warn(f"the stored series {', '.join(sorted(names))} had no tracker in this session (give the same "
                      f"trackers= again to resume them): NaN from t = {t0:g} on", MeanfieldWarning, stacklevel=3)


#: counters of a run that a resumed session adds to those of the sessions before it ...
ADDED_COUNTERS = ("sessions", "unrecorded_sessions", "steps", "wall_time", "rejected", "evaluations", "jko_steps", "jko_iterations", "jko_fallbacks", "halvings",
                  "grid_steps", "rejections", "velocity_evaluations")
#: ... and those of which it keeps the largest or the smallest
LARGEST_COUNTERS = ("jko_max_residual", "dt_max")
SMALLEST_COUNTERS = ("min_mass", "dt_min")


def whole_run_counters(earlier: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    """``session``'s counters (steps, evaluations, wall time, …) with those of the ``earlier`` sessions of a resumed run
    added (or their extremes kept): ``meanfield info`` had reported the last session's steps as the run's.  They count
    work done, as the wall time does: the steps after a session's last committed frame (interrupted, out of disk) are
    taken again by the next session and counted again; ``sessions`` says how many sessions are in the sum.  A session
    killed with SIGKILL, or one whose disk filled, wrote none (``unrecorded_sessions`` counts them, and they are not in
    the sums); the JKO line of ``info`` counts its steps from the frames instead."""
    merged = dict(session)
    for keys, combine in ((ADDED_COUNTERS, lambda a, b: a + b), (LARGEST_COUNTERS, max), (SMALLEST_COUNTERS, min)):
        for key in keys:
            before, now = earlier.get(key), session.get(key)
            if _number(before) and _number(now):
                merged[key] = combine(before, now)
    return merged


def _unrecorded(earlier: dict[str, Any]) -> dict[str, Any]:
    """The counters a session stores when it starts: the earlier sessions', and itself as a session that recorded none.
    :meth:`~meanfield.io.runfile.RunWriter.finish` replaces them with the session's own; a session that never gets
    there (killed, out of disk, a second Ctrl-C) is then counted in ``unrecorded_sessions``."""
    stored = {key: earlier.get(key, 0) for key in ("sessions", "unrecorded_sessions")}
    counts = {key: value if _number(value) else 0 for key, value in stored.items()}
    return {**earlier, "sessions": counts["sessions"], "unrecorded_sessions": counts["unrecorded_sessions"] + 1}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _jsonable_info(info: dict[str, Any]) -> dict[str, Any]:
    """The counters of a run that go into the file (per-step reports and objects stay in memory)."""
    return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool)) or v is None}
