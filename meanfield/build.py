"""From a resolved config to model objects: heads, their schedule, the model, the initial tokens.

Solvers build their numerical part on top (see :mod:`meanfield.solvers.run`); this
module knows nothing about time stepping.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError
from meanfield.heads import Head, heads_from_config, stack_heads
from meanfield.heads.head import replicate_specs
from meanfield.kernels.harmonic import HarmonicDegreeError
from meanfield.model import ConstantHeads, HeadSchedule, Model, ScoreOverflowError, UnshiftedOverflowWarning
from meanfield.geometry.sphere import sample

__all__ = ["build_heads", "build_schedule", "build_model", "initial_tokens", "replicate_heads"]


def build_heads(cfg: dict[str, Any]) -> list[Head]:
    """The heads of ``[model]`` (``[[model.heads]]`` tables or a checkpoint reference)."""
    model = cfg["model"]
    spec = model["heads"]
    if isinstance(spec, str):
        from meanfield.heads.checkpoint import heads_from_checkpoint_spec  # real-weights issue

        heads = heads_from_checkpoint_spec(spec)
        if heads and heads[0].d != model["d"]:
            raise ConfigError("model.d", f"the checkpoint's heads act in d={heads[0].d}, but model.d={model['d']}")
        return heads
    return heads_from_config(replicate_heads(spec, model.get("num_heads")), d=model["d"], seed=model["seed"])


def replicate_heads(specs: list[dict[str, Any]] | None, num_heads: int | None) -> list[dict[str, Any]] | None:
    """``model.num_heads = H``: one head table stands for H heads (:func:`meanfield.heads.head.replicate_specs`)."""
    return replicate_specs(specs, num_heads)  # in meanfield.heads.head, so that the layer redraws use the same rule


def build_schedule(cfg: dict[str, Any], heads: list[Head] | None = None) -> HeadSchedule:
    """Heads as a function of time, from ``[weights]`` (constant unless a schedule is set)."""
    heads = build_heads(cfg) if heads is None else heads
    schedule = cfg["weights"]["schedule"]
    if schedule == "constant":
        return ConstantHeads(stack_heads(heads))
    from meanfield.heads.schedules import schedule_from_config  # time-dependent weights issue

    return schedule_from_config(cfg, heads)


def build_model(cfg: dict[str, Any], *, schedule: HeadSchedule | None = None) -> Model:
    """The :class:`~meanfield.model.Model` of a resolved config (a β whose scores overflow: ``ConfigError`` naming
    ``model.beta``; backend ``"harmonic"`` at a β past its degree limit: one naming ``model.backend``)."""
    try:
        with warnings.catch_warnings():  # the config's check gave this as its own note, once, for the head tables, the
            warnings.simplefilter("ignore", UnshiftedOverflowWarning)  # default head and a checkpoint's alike (the
            model = _model(cfg, schedule)  # default head's had come twice; a grid run's velocity note is not the grid's)
    except ScoreOverflowError as exc:
        raise ConfigError("model.beta", str(exc)) from None
    except HarmonicDegreeError as exc:  # backend = "harmonic" at a β past its degree limit (memory and time like β)
        raise ConfigError("model.backend", str(exc)) from None
    _check_path_bounds(cfg, model)
    return model


def _check_path_bounds(cfg: dict[str, Any], model: Model) -> None:
    r"""Refuse a weight path whose heads leave the bounds of constant ones (:func:`~meanfield.model.score_bound_limit` on
    :math:`\beta\|B_h(t)\|_F`, :data:`VALUE_BOUND_LIMIT` on :math:`\|V_h(t)\|_F`).  Its first heads are checked (naming
    ``model.beta``), then how far the path moves them: by at most :math:`A\sqrt d` (oscillating), or by 40 standard
    deviations of the OU entries, :math:`40\,d\,s` with :math:`s^2=\sigma^2(1-e^{-2\kappa T})/2\kappa`
    (:math:`\sigma^2T` at :math:`\kappa=0`; the SDE of Massucco et al. with its drift's rate, plus its OU mean), naming
    ``weights.amplitude`` or ``weights.sigma``.  The Model checks constant heads.  An amplitude or a σ of 1e300, and
    β = 1e308 under the authors' SDE, had run to NaN after the first frame, exit 1, a file written."""
    from meanfield.heads.schedules import MatrixSDESchedule, OscillatingSchedule, OUSchedule
    from meanfield.model import VALUE_BOUND_LIMIT, score_bound_limit, value_bound

    schedule = model.heads
    if isinstance(schedule, ConstantHeads):
        return
    # the heads the path starts from: the configured ones of an oscillation or an OU path (an oscillation's heads at
    # t = 0 already carry A sin φ_h), else the path's at t = 0
    first = schedule.mean if isinstance(schedule, (OscillatingSchedule, OUSchedule)) else schedule.at(0.0)
    key, spread = None, 0.0
    if isinstance(schedule, OscillatingSchedule):
        key, spread = "weights.amplitude", schedule.amplitude * math.sqrt(first.d)
    elif isinstance(schedule, (OUSchedule, MatrixSDESchedule)):  # (the authors' SDE: D_h(t) = B_h = V_h)
        sde = isinstance(schedule, MatrixSDESchedule)
        span = float(cfg["solver"]["t_final"])
        kappa = (schedule.kappa if schedule.drift == "ou" else schedule.rate) if sde else schedule.kappa
        deviation = schedule.sigma * math.sqrt(-math.expm1(-2.0 * kappa * span) / (2.0 * kappa) if kappa > 0 else span)
        mean = value_bound(schedule.mean_matrix) if sde and schedule.drift == "ou" else 0.0
        key, spread = "weights.sigma", 40.0 * first.d * deviation + mean
    limit, written = score_bound_limit(model.precision)
    for name, reach in (("model.beta", 0.0), (key, spread)):
        if name is None:
            continue
        with np.errstate(over="ignore"):
            scores = float(model.beta) * (value_bound(first.B) + reach)
            values = value_bound(first.V) + reach
        if not (scores <= limit and values <= VALUE_BOUND_LIMIT):
            given = cfg[name.split(".")[0]][name.split(".")[1]]
            raise ConfigError(name, f"{given:g} makes the heads' scores or velocities overflow: β‖B_h(t)‖_F up to "
                                    f"{scores:.3g} (at most {written}), ‖V_h(t)‖_F up to {values:.3g} (at "
                                    f"most {VALUE_BOUND_LIMIT:.0e})")


def _model(cfg: dict[str, Any], schedule: HeadSchedule | None) -> Model:
    m = cfg["model"]
    return Model(
        d=m["d"],
        beta=float(m["beta"]),
        attention=m["attention"],
        heads=schedule if schedule is not None else build_schedule(cfg),
        direction=m["direction"],
        backend=m["backend"],
        precision=m["precision"],
        tolerance=float(m["tolerance"]),
        combine=m.get("combine", "sum"),
        mask=m.get("mask", "none"),
    )


def initial_tokens(cfg: dict[str, Any]) -> np.ndarray:
    """The initial token cloud of ``[init]``, shape ``(n, d)``."""
    init, d = cfg["init"], cfg["model"]["d"]
    kind, n, seed = init["kind"], init["n"], init["seed"]
    if kind == "sentence":
        from meanfield.heads.embeddings import tokens_from_config  # real-weights issue

        return tokens_from_config(cfg)
    try:
        if kind in ("uniform", "fibonacci"):
            return sample(kind, n, d, seed=seed)
        if kind == "vmf":
            return sample(kind, n, d, mean=init["mean"], kappa=init["kappa"], seed=seed)
        if kind == "equiangular":
            return sample(kind, n, d, gamma=init["gamma"], seed=seed)
        if kind == "orthogonal":
            return sample(kind, n, d, seed=seed)
        if kind == "clusters":
            return sample(kind, n, d, centers=init["centers"], spread=float(init["spread"]), seed=seed)
        if kind == "file":
            return sample(kind, None, d, path=str(Path(init["path"])))
    except ConfigError:
        raise  # names its key already
    except ValueError as exc:
        key = "path" if kind == "file" else "n" if kind == "fibonacci" and isinstance(n, int) and n < 4 else "kind"
        raise ConfigError(f"init.{key}", str(exc)) from None  # (a Fibonacci n below 4 had been named init.kind)
    raise ConfigError("init.kind", f"{kind!r} is not a particle initial measure")
