"""From a resolved config to model objects: heads, their schedule, the model, the initial tokens.

Solvers build their numerical part on top (see :mod:`meanfield.solvers.run`); this
module knows nothing about time stepping.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError
from meanfield.heads import Head, heads_from_config, stack_heads
from meanfield.heads.head import replicate_specs
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
    ``model.beta``)."""
    try:
        with warnings.catch_warnings():
            if isinstance(cfg["model"]["heads"], list):  # the config's check gave this as its own note, once (heads
                warnings.simplefilter("ignore", UnshiftedOverflowWarning)  # given as tables; the default head and
            return _model(cfg, schedule)  # a checkpoint's get the Model's warning: they had got neither)
    except ScoreOverflowError as exc:
        raise ConfigError("model.beta", str(exc)) from None


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
        raise ConfigError(f"init.{'path' if kind == 'file' else 'kind'}", str(exc)) from None
    raise ConfigError("init.kind", f"{kind!r} is not a particle initial measure")
