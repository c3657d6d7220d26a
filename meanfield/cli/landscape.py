"""``meanfield landscape``: critical configurations of the energy, their Hessian and its verdict.

``meanfield landscape classify OUT.h5 [--frame K]`` tells whether a particle run's frame is a
critical point of E and whether it is a maximum, a minimum, a saddle or degenerate (eigenvalues
of the Riemannian Hessian with the rotation zero modes removed).  ``meanfield landscape search
CONFIG.toml --mode max|min`` runs Riemannian gradient ascent or descent with an Armijo line search
from the config's initial tokens (with ``init.kind = "run"``: a stored frame's, with their masses) and
classifies what it reaches (:mod:`meanfield.analysis.landscape`).
"""
from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.cli.options import emit, load_config_noted, parse_float, parse_int, table_path
from meanfield.errors import ConfigError

__all__ = ["add_parser", "main"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``meanfield landscape``."""
    p = subparsers.add_parser(
        "landscape",
        help="critical points of the energy: classify a run's frame, or search maximisers/minimisers",
        description="The energy landscape of E = (1/2β) Σ_h Σ_ij a_i a_j exp(β x_iᵀB_h x_j) on the product of spheres "
        "(symmetric B_h): the Riemannian gradient and Hessian in the mass metric, with the rotation zero modes "
        "removed. 'classify OUT.h5' says whether a frame is critical and whether it is a maximum, a minimum, a "
        "saddle or degenerate; 'search CONFIG.toml --mode max|min' runs Riemannian gradient ascent or descent "
        "(Armijo line search) from the config's initial tokens and classifies the result.",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    c = sub.add_parser("classify", help="classify one frame of a particle run",
                       description="Whether one frame of a particle run is a critical point of the energy (|grad E| "
                       "against --gtol) and its type from the Hessian's eigenvalues in the mass metric, rotation zero "
                       "modes removed: maximum, minimum, saddle or degenerate.")
    c.add_argument("run", metavar="OUT.h5", help="a particle run file")
    c.add_argument("--frame", default="-1", metavar="K", help="frame index (default -1: the last)")
    s = sub.add_parser("search", help="search a maximiser or minimiser from a config's initial tokens",
                       description="Riemannian gradient ascent (--mode max) or descent (--mode min) of the energy, with "
                       "an Armijo line search, from the config's initial tokens; the configuration reached is "
                       "classified as by 'classify' (and saved with --out).")
    s.add_argument("config", metavar="CONFIG.toml", help="the model and the initial tokens (init.kind = 'run': a stored "
                                                          "frame's, init.path at init.time, with their masses)")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    s.add_argument("--mode", default="max", choices=("max", "min"), help="ascent to a maximiser (default) or descent to a minimiser")
    s.add_argument("--max-iter", default="5000", metavar="N", help="largest number of iterations (default 5000)")
    s.add_argument("--out", metavar="X.npy", help="save the configuration reached")
    for q in (c, s):
        q.add_argument("--gtol", default="1e-6", metavar="G",
                       help="critical when |grad E| <= G |w|, w_i = Σ_j a_j e^(β s_ij) |B x_j| >= |u_i| the size of the "
                            "terms of u (default 1e-6)")
        q.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main, interrupted="interrupted; nothing was written (the search saves its tokens at the end)")


def _heads(model: Any, t: float) -> tuple[np.ndarray, float, float]:
    """The symmetric score matrices of ``model`` at ``t``, β, and the factor of the model's energy over that of the heads'
    sum: 1/H for ``combine = "mean"``, which averages the heads' velocities (and energies) outside the exponentials.

    The factor moves no critical point and changes no verdict; it scales the energy, the gradient and the Hessian's
    eigenvalues.  (It had divided ``B`` inside the exponentials, a landscape of another model: a reported minimum
    where the run's own velocity was 0.44.)"""
    from meanfield.analysis.landscape import symmetric_heads

    attention = getattr(model, "attention", "softmax")
    if attention == "relu":  # its energy is another model's: a critical run had read "not critical"
        raise ConfigError("model.attention", "the landscape is that of the exponential energy (unnormalized and pooled "
                                             "attention, and softmax with one head, share its critical points); relu "
                                             "attention has another")
    if getattr(model, "mask", "none") != "none":  # a masked run at rest (speed 2.6e-10) had read "not critical" (0.35)
        raise ConfigError("model.mask", "the causal mask's flow is not the gradient flow of the energy (Karagodin, "
                                        "Polyanskiy and Rigollet, arXiv 2411.04990): its rest points are not the energy's "
                                        "critical points; the landscape is that of the unmasked model (model.mask = 'none')")
    stack = model.heads.at(t)
    if attention == "softmax" and stack.H > 1:  # a run at rest had read "not critical" (relative gradient 3e-3)
        raise ConfigError("model.attention", f"softmax with {stack.H} heads divides each head's term by its own sum Z_i^h, "
                                             "so its rest points are not the critical points of the energy; the landscape "
                                             "is that of unnormalized or pooled attention, or of softmax with one head")
    try:
        B = symmetric_heads(stack)
    except ValueError as exc:
        raise ConfigError("model.heads", str(exc)) from None
    if not np.allclose(stack.V, stack.B, rtol=1e-12, atol=1e-12 * max(1.0, float(np.max(np.abs(stack.B))))):
        raise ConfigError("model.heads", "the energy landscape is that of value-aligned heads (V = QᵀK); set V = 'aligned'")
    return B, float(model.beta), (1.0 / stack.H if getattr(model, "combine", "sum") == "mean" else 1.0)


def _on_the_sphere(norm: str) -> None:
    r"""Refuse tokens that leave the sphere (``model.norm`` ``pre`` or ``peri``): the landscape lives on
    :math:`(S^{d-1})^n` (a peri-LN run, its tokens of norm 2.9, had been given a verdict, and a pre-LN one an
    overflow blamed on β).  nGPT's tokens stay on the sphere and rest where :math:`P^\perp A = 0`, as Post-LN's: the
    same critical points (it had been refused)."""
    if norm not in ("post", "ngpt"):
        raise ConfigError("model.norm", f"the energy landscape lives on the product of spheres (norm = 'post' or 'ngpt'), "
                                        f"got {norm!r}")


def _constant_heads(cfg: Any) -> None:
    """Refuse time-dependent heads for ``search``: a maximiser of E(·, t) at t = 0 is not one of the flow (it had been
    searched in silence)."""
    schedule = cfg.get("weights", {}).get("schedule", "constant")
    if schedule != "constant":
        raise ConfigError("weights.schedule", f"the search takes constant heads (the energy of time-dependent ones changes "
                                              f"with t), got schedule = {schedule!r}; 'classify' takes a frame of such a run at its time")


#: the printed values that scale with the energy
_SCALED = ("energy", "energy_start", "gradient_norm", "lambda_min", "lambda_max")


def _scaled(values: dict[str, Any], factor: float) -> dict[str, Any]:
    return {key: value * factor if key in _SCALED else value for key, value in values.items()}


def _spectrum(x: np.ndarray, B: np.ndarray, beta: float, gtol: float, weights: np.ndarray | None = None) -> Any:
    from meanfield.analysis.landscape import hessian_spectrum

    try:
        return hessian_spectrum(x, B, beta=beta, gtol=gtol, weights=weights)
    except OverflowError as exc:
        raise ConfigError("model.beta", str(exc)) from None


def main(args: argparse.Namespace) -> int:
    """Run ``meanfield landscape``."""
    from meanfield.analysis.landscape import optimize

    if not getattr(args, "action", None):
        raise ConfigError("ACTION", "expected 'classify' or 'search' (meanfield landscape --help)")
    gtol = parse_float(args.gtol, "--gtol", positive=True)
    if args.action == "classify":
        from meanfield.run import load

        run = load(args.run, key="OUT.h5")
        if run.kind != "particle":
            raise ConfigError("OUT.h5", f"{args.run} holds a grid density; classify takes a particle run")
        frames = run.frames
        k = parse_int(args.frame, "--frame")
        if not -frames <= k < frames:
            raise ConfigError("--frame", f"{args.run} has {frames} frames, got {k}")
        k %= frames
        _on_the_sphere(run.norm)
        x = np.asarray(run.frame(k), dtype=float)
        B, beta, factor = _heads(run.model, float(run.t[k]))
        weights = run.token_masses  # token masses (a run continued from a grid frame): they had been read as 1/n
        if weights is not None:
            weights = np.asarray(weights, dtype=float)
            if not np.all(weights > 0):
                raise ConfigError("OUT.h5", f"{args.run} has {int(np.sum(weights <= 0))} tokens of zero mass; the landscape's "
                                            "metric weighs each token by its mass (continue the grid frame with init.min_mass > 0)")
        spectrum = _spectrum(x, B, beta, gtol, weights)
        emit({"frame": k, "t": float(run.t[k]), "n": x.shape[0], "d": x.shape[1], **_scaled(spectrum.as_dict(), factor)},
             as_json=args.json)
        return 0
    from meanfield.build import build_model

    try:
        cfg = load_config_noted(args.config, args.overrides)
    except ConfigError as exc:
        if exc.key == "solver.t_final" and "(init.time)" in exc.message:  # init.kind = "run": a frame after t_final
            raise ConfigError(exc.key, f"{exc.message} (the search only reads that frame: any later t_final will do)") from None
        raise
    max_iter = parse_int(args.max_iter, "--max-iter", minimum=1)
    if args.out is not None and not str(args.out).endswith(".npy"):
        raise ConfigError("--out", f"expected a .npy file name, got {args.out!r}")
    table_path(args.out, "--out", allow=(".npy",))  # a folder, an unwritable place or a run: refused before the search
    _on_the_sphere(cfg["model"]["norm"])
    _constant_heads(cfg)
    B, beta, factor = _heads(build_model(cfg), 0.0)
    x0, weights = _start(cfg)
    try:
        result = optimize(x0, B, beta=beta, weights=weights, mode=args.mode, gtol=gtol * 1e-2, max_iter=max_iter)
    except OverflowError as exc:
        raise ConfigError("model.beta", str(exc)) from None
    spectrum = _spectrum(result.x, B, beta, gtol, weights)
    if args.out is not None:
        _save_tokens(Path(args.out), result.x)
    emit({"mode": args.mode, "converged": result.converged, "iterations": result.iterations,
          **_scaled({"energy_start": float(result.energy[0]), **spectrum.as_dict()}, factor), **({"out": args.out} if args.out else {})},
         as_json=args.json)
    return 0


def _start(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """The search's initial tokens and their masses (``None``: equal): the config's ``[init]``, or with ``init.kind = "run"``
    the frame of ``init.path`` at ``init.time`` with its token masses (a grid run's cells with theirs), as ``simulate``
    starts from it.  (That kind had been refused as "not a particle initial measure".)"""
    from meanfield.build import initial_tokens

    init = cfg["init"]
    if init["kind"] != "run":
        return initial_tokens(cfg), None
    from meanfield.io.source_frame import source_tokens

    frame = source_tokens(init["path"], init["time"], min_mass=float(init["min_mass"]), symmetry=init["symmetry"], warn=False)
    weights = None if frame.weights is None else np.asarray(frame.weights, dtype=float)
    if weights is not None and not np.all(weights > 0):
        raise ConfigError("init.min_mass", f"the frame of {init['path']} at t = {frame.time:g} has {int(np.sum(weights <= 0))} "
                                           "tokens of zero mass; the landscape's metric weighs each token by its mass "
                                           "(leave them out with init.min_mass > 0)")
    return np.asarray(frame.tokens, dtype=float), weights


def _save_tokens(path: Path, x: np.ndarray) -> None:
    """Write ``x`` to ``path`` through a temporary file beside it (an interrupted save had left a truncated .npy over
    the old one); a file system that refuses it is named as ``--out`` (it had been a traceback, after the search)."""
    tmp = path.with_name(f".{path.name}.new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a new folder had failed here, after the search
        with open(tmp, "wb") as handle:
            np.save(handle, x)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise ConfigError("--out", f"cannot write {path}: {exc.strerror or exc}") from None
