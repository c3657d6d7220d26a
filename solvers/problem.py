r"""One entry point for every solver: ``solve(problem, solver)``.

.. math::

    \partial_t\mu + \operatorname{div}_S(\mu\,X[\mu]) = 0,\qquad \mu_0 = \text{the initial measure}

A :class:`Problem` holds the model (the vector field: dimension, β, attention
kind, heads, direction) and the initial measure; it knows nothing numerical.
A solver is configured only by numerical parameters:

* :class:`~meanfield.solvers.particle.ParticleSolver` — tokens, Runge–Kutta on the sphere;
* :class:`~meanfield.solvers.grid.GridSolver` — a density on a spherical Voronoi mesh, finite volumes;
* :class:`~meanfield.solvers.jko.JKOSolver` — minimizing movements in the weighted Wasserstein
  metric (tokens or a grid density);
* :class:`~meanfield.solvers.zero_temperature.ZeroTemperatureSolver` — the β → ∞ limit.

:func:`solve` runs one of them on a problem and returns a :class:`meanfield.Run`,
the same type that :func:`meanfield.simulate` and :func:`meanfield.load` give.

Examples
--------
>>> import meanfield as mf
>>> model = mf.Model(d=3, beta=4.0, heads=mf.heads.identity(3))
>>> problem = mf.Problem(model, mf.sample_uniform(64, 3, seed=0))
>>> run = mf.solve(problem, mf.ParticleSolver(dt=0.05), t_final=1.0, save_every=0.5)
>>> run.t.tolist()
[0.0, 0.5, 1.0]
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from meanfield.checks import check_flag
from meanfield.errors import RunFailed, RunInterrupted, TrackerError
from meanfield.geometry.mesh import SphericalMesh
from meanfield.geometry.sphere import normalize, sphere_error
from meanfield.model import ConstantHeads, Model
from meanfield.resources import MAX_FRAMES, MAX_STEPS
from meanfield.kernels.jit import one_blas_thread
from meanfield.run import Run
from meanfield.solvers.loop import RunSetup, Tracker, run_loop, save_times
from meanfield.solvers.signals import interruptible
from meanfield.solvers.trackers import CallbackTracker, ProgressTracker

__all__ = ["Problem", "Solver", "solve", "run_status", "CELL_MASS_TOTAL_TOLERANCE"]

#: the initial cell masses of a grid measure are normalised to total 1 where they are this close to it (float32
#: masses: 1 ± N·6e-8), and refused farther off (density values given for masses)
CELL_MASS_TOTAL_TOLERANCE = 1e-5
#: cell masses whose total is this close to 1 are taken as they are (a grid run's frames: 1 ± a few ulps)
CELL_MASS_ROUNDOFF = 1e-9


@dataclass(frozen=True)
class Problem:
    r"""The model and the initial measure: what to solve, not how.

    Parameters
    ----------
    model : Model
        The vector field :math:`X[\mu]`.
    initial : array
        Tokens ``(n, d)`` on :math:`S^{d-1}` (normalised here when they are not
        unit vectors), or, with ``mesh``, the cell masses ``(N,)`` of a density on
        :math:`S^2` (non-negative, total 1).
    mesh : SphericalMesh, optional
        The mesh of a grid measure.
    weights : (n,) array, optional
        Token masses (default uniform :math:`1/n`), normalised to total 1; particles only.

    Examples
    --------
    >>> import numpy as np
    >>> import meanfield as mf
    >>> model = mf.Model(d=3, beta=2.0, attention="softmax", heads=mf.heads.identity(3))
    >>> tokens = mf.Problem(model, mf.sample_uniform(8, 3), weights=np.arange(1.0, 9.0))
    >>> round(float(tokens.weights.sum()), 12)  # masses normalised to total 1
    1.0
    >>> grid = mf.Problem(model, mf.initial_mass(mf.mesh(300), "vmf", kappa=2.0), mesh=mf.mesh(300))
    >>> grid.initial.shape
    (300,)
    """

    model: Model
    initial: np.ndarray
    mesh: SphericalMesh | None = None
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not (isinstance(getattr(self.model, "d", None), (int, np.integer)) and callable(getattr(self.model, "velocity", None))):
            raise TypeError(f"model must be a meanfield.Model (or have d and velocity), got {type(self.model).__name__}")
        try:  # a copy: the run must not share the caller's array (a tracker's edit at t = 0 had reached it)
            complex_input = bool(np.iscomplexobj(self.initial))
            state = np.array(self.initial, dtype=complex if complex_input else float)
        except (TypeError, ValueError):  # a ragged list had given NumPy's words, without naming initial
            raise ValueError(f"initial must be an array of numbers (tokens (n, d), or a grid's cell masses (N,)), "
                             f"got {type(self.initial).__name__} {self.initial!r:.60}") from None
        try:  # (ragged weights had been blamed on initial)
            complex_input = complex_input or bool(np.iscomplexobj(self.weights))
        except (TypeError, ValueError):
            raise ValueError(f"weights must be an array of numbers, got {type(self.weights).__name__} {self.weights!r:.60}") from None
        if complex_input:  # (their imaginary parts had been dropped)
            raise TypeError("initial and weights must be real numbers, got complex ones")
        if self.mesh is None:
            if state.ndim != 2 or state.shape[1] != self.model.d or state.shape[0] < 1:
                raise ValueError(f"initial tokens must have shape (n, {self.model.d}), got {state.shape}")
            if not np.all(np.isfinite(state)) or not np.all(np.max(np.abs(state), axis=1) > 0):
                raise ValueError("initial tokens must be finite and non-zero")
            with np.errstate(over="ignore"):  # rows of 1e300: their norm overflows, and they are normalised below
                off = sphere_error(state)
            if off > 1e-15:  # unit input is kept bit for bit (replays, resumed runs)
                with np.errstate(over="ignore", under="ignore"):
                    norms = np.linalg.norm(state, axis=1)
                if not (np.all(np.isfinite(norms)) and np.all(norms > 1e-150)):
                    # rows scaled by their largest entry first: 1e300 had overflowed to zero vectors, 1e-200 underflowed
                    state = state / np.max(np.abs(state), axis=1, keepdims=True)
                state = normalize(state)
            if self.weights is not None:
                try:
                    w = np.asarray(self.weights, dtype=float)
                except (TypeError, ValueError):
                    raise ValueError(f"weights must be {state.shape[0]} numbers, got {self.weights!r:.60}") from None
                if w.shape != (state.shape[0],) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
                    raise ValueError(f"weights must be {state.shape[0]} finite non-negative masses, not all zero, got "
                                     f"{'shape ' + str(w.shape) if w.shape != (state.shape[0],) else 'masses out of range'}")
                if not np.isfinite(w.sum()):  # a total of 1e308 masses had overflowed, leaving masses of zero
                    w = w / w.max()
                object.__setattr__(self, "weights", w / w.sum())
        else:
            if not isinstance(self.mesh, SphericalMesh):  # ("abc" had been an AttributeError on 'N')
                raise TypeError(f"mesh must be a SphericalMesh (meanfield.mesh(...)), got {type(self.mesh).__name__}")
            if self.model.d != 3:
                raise ValueError(f"a grid measure lives on S² (d = 3), but the model has d = {self.model.d}")
            if self.weights is not None:
                raise ValueError("weights are token masses; a grid measure carries its masses as `initial`")
            if state.shape != (self.mesh.N,):
                raise ValueError(f"initial cell masses must have shape ({self.mesh.N},), got {state.shape}")
            if not np.all(np.isfinite(state)) or np.any(state < 0):
                raise ValueError("initial cell masses must be finite and non-negative")
            total = float(state.sum())
            if not abs(total - 1.0) <= CELL_MASS_TOTAL_TOLERANCE:
                raise ValueError(f"initial cell masses must sum to 1 (within {CELL_MASS_TOTAL_TOLERANCE:g}), got {total:.17g}: "
                                 "they are masses, not density values (masses = density × mesh.areas); divide them by "
                                 "their sum to normalise")
            if abs(total - 1.0) > CELL_MASS_ROUNDOFF:  # float32 masses (1 + 2e-8) had been refused: normalised, as
                state = state / total  # token weights are; a total within round-off is kept bit for bit (continuations)
        object.__setattr__(self, "initial", state)

    def __repr__(self) -> str:
        """``Problem(Model(...), tokens (256, 3), masses uniform)``: shapes, not entries (a problem of 256 tokens had
        printed every coordinate)."""
        if self.mesh is None:
            what = f"tokens {self.initial.shape}, masses {'uniform' if self.weights is None else 'given'}"
        else:
            what = f"cell masses on {self.mesh!r}"
        return f"Problem({self.model!r}, {what})"

    @property
    def on_grid(self) -> bool:
        """Whether the measure is a density on a mesh (else a token cloud)."""
        return self.mesh is not None


class Solver(Protocol):
    """What :func:`solve` needs of a solver: numerical options that build a :class:`RunSetup`."""

    kind: str

    def setup(self, problem: Problem, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:
        """Stepper, initial state and the solver's own trackers for ``problem``."""
        ...


def run_status(failed: bool, stop_reason: str) -> str:
    """The status a run ends with: ``failed``, ``completed`` (reached ``t_final``) or ``stopped`` (a tracker ended it)."""
    if failed:
        return "failed"
    return "completed" if stop_reason == "t_final" else "stopped"


def add_slope_tracker(setup: RunSetup, *, kind: str, weights: np.ndarray | None, callers: Sequence[Tracker] = (),
                      yields: bool = False) -> None:
    r"""The tracker of :math:`G^2`, the metric slope and :math:`\partial_t E` (``authors_G2``, ``slope2``,
    ``dE_dt_explicit``: :class:`~meanfield.solvers.trackers.SlopeTracker`, Massucco et al., arXiv 2605.18870) for
    time-dependent heads; not for the zero-temperature solver, nor where the solver's own tracker records them (the JKO
    scheme's) or the caller's (``callers``: :class:`~meanfield.solvers.jko.EnergyDissipationTracker`).  With ``yields``
    a caller's tracker that records the same names replaces its values (``SlopeTracker.yields_to_caller``)."""
    if isinstance(setup.model.heads, ConstantHeads) or kind == "zero-temperature" or any(
            getattr(tracker, "name", "") in ("edi", "slope") for tracker in (*setup.trackers, *callers)):
        return
    from meanfield.solvers.trackers import SlopeTracker

    points = setup.static.get("points") if setup.state_name == "mass" else None
    setup.trackers.append(SlopeTracker(setup.model, weights=weights if points is None else None, points=points,
                                       yields_to_caller=yields))


def solver_options(solver: Any, kind: str, *, on_grid: bool, t_final: float) -> dict[str, Any]:
    """The solver's scalar options as a ``[solver]`` section (``kind``, ``t_final``, ``method``, ``dt`` …), a noise
    schedule as a ``[noise]`` one: what the summary of a :func:`solve` run shows in place of a config's."""
    options: dict[str, Any] = {"kind": kind, "t_final": t_final}
    if dataclasses.is_dataclass(solver):
        for item in dataclasses.fields(solver):
            value = getattr(solver, item.name)
            if isinstance(value, (str, bool, int, float)):
                options[item.name] = value
            elif isinstance(value, Mapping) and value:  # the JKO scheme's stepper options (a saved run had lost them)
                options[item.name] = {str(key): entry for key, entry in value.items()}
    if kind == "jko":
        options["variant"] = "grid" if on_grid else "particle"
    noise = getattr(solver, "noise", None)
    if dataclasses.is_dataclass(noise):
        options["noise"] = {k: v for k, v in dataclasses.asdict(noise).items() if k != "t_check"}
    return options


def solve(
    problem: Problem,
    solver: Solver,
    *,
    t_final: float,
    save_every: float | None = None,
    t_start: float = 0.0,
    trackers: Sequence[Tracker] = (),
    energy: bool = True,
    speed: bool = True,
    steady_tol: float = 0.0,
    progress: bool = False,
) -> Run:
    r"""Solve ``problem`` with ``solver`` from ``t_start`` (default 0) to ``t_final``.

    Parameters
    ----------
    problem : Problem
    solver : ParticleSolver, GridSolver, JKOSolver or ZeroTemperatureSolver
    t_final : float
        Final time, at least ``t_start`` (equal: the initial frame only, as :func:`meanfield.simulate`).
    save_every : float, optional
        Time between saved frames (default: only the first and the last frame).
    t_start : float
        The time of ``problem.initial`` (to continue a run: the result equals the uninterrupted one bit for bit from one of
        its save times, which are the decimals of ``t_start`` and ``save_every`` (from t = 0.3 with save_every = 0.1 the
        save times are 0.4, 0.5, … as the run's from 0), and to round-off otherwise: from a t = 0.30000000000000004 of a
        file saved at float sums they are its sums of steps, 0.4, 0.5, 0.6000000000000001, …, and the final state round-off away).
    trackers : sequence of Tracker, or one
        Your own trackers, run on every saved frame after the solver's: any callable
        ``tracker(t, state) -> dict[str, float] | None``; the scalars it returns
        become ``run.diagnostics[name]``, and raising
        :class:`meanfield.solvers.loop.StopRun` ends the run. Anything else it raises, a result that is
        not a dict of real numbers, or a name the solver's trackers record raises
        :class:`meanfield.errors.TrackerError` (:class:`~meanfield.solvers.trackers.CallbackTracker`).
    energy : bool
        Record the energies (``energy``, ``energy_h0`` …) at every frame.
    speed : bool
        Record ``max_speed`` (one extra velocity evaluation per frame).
    steady_tol : float
        Stop once the largest speed falls below this (0: never).
    progress : bool
        Show a tqdm bar on stderr.

    Returns
    -------
    Run

    Raises
    ------
    RunFailed
        When the run ends on NaN/Inf, leaves the sphere, or the stepper gives up;
        ``exc.run`` holds the frames up to the failure.
    RunInterrupted
        Ctrl-C (SIGINT) or SIGTERM stopped it; ``exc.run`` holds the frames so far.

    Examples
    --------
    >>> import meanfield as mf
    >>> model = mf.Model(d=3, beta=4.0, attention="softmax", heads=mf.heads.identity(3))
    >>> problem = mf.Problem(model, mf.sample_uniform(64, 3, seed=0))
    >>> run = mf.solve(problem, mf.ParticleSolver(method="rk4", dt=0.05), t_final=1.0, save_every=0.5)
    >>> run.t.tolist(), run.x.shape
    ([0.0, 0.5, 1.0], (3, 64, 3))
    """
    if not isinstance(problem, Problem):  # a dict had failed with AttributeError 'on_grid', a class or None with 'setup'
        raise TypeError(f"problem must be a Problem (meanfield.Problem(model, initial, …)), got {type(problem).__name__}")
    if isinstance(solver, type) or not callable(getattr(solver, "setup", None)):
        what = f"the class {solver.__name__}: make one, {solver.__name__}()" if isinstance(solver, type) else type(solver).__name__
        raise TypeError(f"solver must be a solver (ParticleSolver(), GridSolver(), JKOSolver(), ZeroTemperatureSolver()), got {what}")
    for name, value in (("t_final", t_final), ("t_start", t_start), ("save_every", save_every), ("steady_tol", steady_tol)):
        if value is None and name == "save_every":
            continue  # (only save_every may be None: steady_tol=None had failed inside NumPy)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must be a number, got {value!r}")
    if not (np.isfinite(steady_tol) and steady_tol >= 0):  # -1 had been taken (and never stopped a run)
        raise ValueError(f"steady_tol must be a finite number ≥ 0 (0: never stop early), got {steady_tol!r}")
    for name, flag in (("energy", energy), ("speed", speed), ("progress", progress)):
        check_flag(name, flag)  # (a string had been true)
    if callable(trackers):
        trackers = [trackers]  # one callable: the only tracker (as mf.simulate takes it)
    if isinstance(trackers, (str, bytes)) or not isinstance(trackers, Iterable):
        raise TypeError(f"trackers must be a callable or a sequence of callables, got {type(trackers).__name__}")
    if not (np.isfinite(t_final) and np.isfinite(t_start) and t_final >= t_start):  # equal: the initial frame, as mf.simulate
        raise ValueError(f"need finite times with t_final >= t_start, got t_start={t_start!r}, t_final={t_final!r}")
    if save_every is not None and not (np.isfinite(save_every) and save_every > 0):
        raise ValueError(f"save_every must be a positive finite number (or None: the end only), got {save_every!r}")
    # a fixed step: dt, or the JKO scheme's tau (whose τ = 1e-12 had run for ever)
    name, step = "dt", getattr(solver, "dt", None)
    if step is None:
        name, step = "tau", getattr(solver, "tau", None)
    elif getattr(solver, "method", "rk45") == "rk45":  # adaptive steps
        step = None
    if step is not None and not (float(t_final) - float(t_start)) / float(step) <= MAX_STEPS:
        raise ValueError(f"{name} = {step:g} takes {(float(t_final) - float(t_start)) / float(step):.3g} steps to t_final = "
                         f"{t_final:g}; the limit is {MAX_STEPS:.0e} steps (the config's too)")
    if save_every and (float(t_final) - float(t_start)) / float(save_every) > MAX_FRAMES:  # (a raw MemoryError of 7 GiB)
        raise ValueError(f"save_every = {save_every:g} saves {(float(t_final) - float(t_start)) / float(save_every):.3g} frames "
                         f"up to t_final = {t_final:g}; the limit is {MAX_FRAMES:.0e} frames (the config's too)")
    callers = [CallbackTracker.of(tracker) for tracker in trackers]
    setup = solver.setup(problem, energy=energy, speed=speed or steady_tol > 0, steady_tol=steady_tol)
    kind = getattr(solver, "kind", type(solver).__name__)  # the picture's title names it
    add_slope_tracker(setup, kind=kind, weights=problem.weights, callers=callers, yields=True)  # G², as a config's run
    span = float(t_final) - float(t_start)
    times = save_times(float(t_start), float(t_final), float(save_every) if save_every else (span or 1.0))
    bar = ProgressTracker(total=float(times[-1]), initial=float(times[0]), quiet=not progress)
    try:
        with interruptible(), one_blas_thread():  # Ctrl-C ends the run cleanly; the trackers' products stay on one BLAS thread
            result = run_loop(setup.stepper, setup.state, times, trackers=[*setup.trackers, *callers], progress=bar)
    finally:
        bar.close()
    tracker_error = result.info.pop("tracker_error", None)
    options = solver_options(solver, kind, on_grid=problem.on_grid, t_final=float(t_final))
    if steady_tol > 0:  # (Run.save's config had lost it: a re-run of a run that stopped went on to t_final)
        options["steady_tol"] = float(steady_tol)
    result.info.update(setup.info(), solver=kind, solver_options=options)
    status = "interrupted" if result.info["interrupted"] else run_status(result.info["failed"], result.info["stop_reason"])
    run = Run.from_states(
        t=result.t,
        states=np.asarray(result.states) if result.states else np.zeros((0, *np.shape(setup.state))),
        state_name=setup.state_name,
        diagnostics=result.diagnostics,
        static=setup.static,
        status=status,
        stop_reason=result.info["stop_reason"],
        info=result.info,
        model=problem.model,
        mesh=problem.mesh,
    )
    if status == "interrupted":
        raise RunInterrupted(f"{result.info['stop_reason']} at t = {run.t[-1]:.6g}", run=run)
    if tracker_error is not None:  # the caller's tracker, with the frames before it
        raise TrackerError(str(tracker_error), run=run) from tracker_error.__cause__
    if status == "failed":
        raise RunFailed(result.info["stop_reason"], run=run)
    return run
