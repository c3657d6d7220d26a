"""Run configurations: TOML in, a validated and fully resolved ``dict`` out.

Every key has a type, a default and a check.  Validation happens before any
work and stops at the first problem with a :class:`~meanfield.errors.ConfigError`
naming the key (the CLI turns it into exit status 2), e.g.
``model.heads[1].Q: expected a 3×3 matrix, got 3×2``.

The resolved config (all defaults filled in) is what runs store beside their
arrays, as JSON, so that a run can be repeated or resumed exactly.  The keys
are documented in ``README.md`` (section *Configuration*) and listed by
:data:`SCHEMA`.
"""
from __future__ import annotations

import copy
import difflib
import json
import math
import os
import tomllib
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meanfield.errors import ConfigError, ConfigNote
from meanfield.io.signature import HDF5_SIGNATURE

__all__ = ["SCHEMA", "Key", "ConfigNote", "load_config", "plain_value", "read_toml", "resolve", "override_key", "apply_override", "config_hash", "dumps", "schema_markdown"]


@dataclass(frozen=True)
class Key:
    """One config key: accepted types, default (``None``: optional), and an extra check."""

    types: tuple[type, ...]
    default: Any = None
    check: Callable[[Any, str], None] | None = None
    doc: str = ""


def _choice(*options: str) -> Callable[[Any, str], None]:
    def check(value: Any, key: str) -> None:
        if value not in options:
            raise ConfigError(key, f"expected one of {', '.join(repr(o) for o in options)}, got {value!r}")

    return check


#: the JKO scheme's ``solver.tol``, absolute: not below round-off, and far below one step's displacement
JKO_TOL_RANGE = (1e-14, 1e-6)


def _at_least(bound: float, *, strict: bool = False) -> Callable[[Any, str], None]:
    def check(value: Any, key: str) -> None:
        if not math.isfinite(value):
            raise ConfigError(key, f"must be finite, got {value!r}")
        if value < bound or (strict and value == bound):
            raise ConfigError(key, f"must be {'>' if strict else '>='} {bound:g}, got {value!r}")

    return check


def _between(low: float, high: float) -> Callable[[Any, str], None]:
    def check(value: Any, key: str) -> None:
        if not (math.isfinite(value) and low <= value <= high):
            raise ConfigError(key, f"must lie in [{low:g}, {high:g}], got {value!r}")

    return check


def _finite(value: Any, key: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be finite, got {value!r}")
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ConfigError(f"{key}[{index}]", f"expected a number, got {item!r}")
            _finite(float(item), f"{key}[{index}]")


def _nonnegative_list(*, increasing: bool = False) -> Callable[[Any, str], None]:
    """A non-empty list of distinct finite numbers ≥ 0 (strictly increasing when asked)."""

    def check(value: Any, key: str) -> None:
        if not value:
            raise ConfigError(key, "expected a non-empty list of numbers")
        _finite(value, key)
        for index, item in enumerate(value):
            if item < 0:
                raise ConfigError(f"{key}[{index}]", f"must be >= 0, got {item!r}")
        if increasing and any(b <= a for a, b in zip(value, value[1:])):
            raise ConfigError(key, f"entries must increase strictly, got {value!r}")
        repeated = sorted({float(v) for i, v in enumerate(value) if float(v) in {float(u) for u in value[:i]}})
        if repeated:  # phase.betas = [1.0, 1.0] had doubled the work and the table's rows (sweep grids refuse this too)
            raise ConfigError(key, f"{', '.join(f'{v:g}' for v in repeated)} appears twice in {value!r}; give each value once")

    return check


NUM = (int, float)
#: odd moments of a source frame (:func:`meanfield.io.source_frame.odd_moments`) above which ``init.symmetry = "antipodal"``
#: gets a note: the source is not symmetric up to its discretisation (two clusters of masses 0.55 and 0.45 give 0.1)
ANTIPODAL_NOTE_ABOVE = 0.1
#: every accepted key, by section; ``model.heads`` is checked by :mod:`meanfield.heads`
SCHEMA: dict[str, dict[str, Key]] = {
    "model": {
        "d": Key((int,), 3, _at_least(2), "ambient dimension (tokens on S^{d-1})"),
        "beta": Key(NUM, 4.0, _at_least(0), "inverse temperature β ≥ 0"),
        "attention": Key((str,), "softmax", _choice("softmax", "unnormalized", "relu", "pooled"), "velocity law: softmax, unnormalized, relu or pooled (see meanfield.kernels.attention)"),
        "direction": Key((str,), "ascent", _choice("ascent", "descent"), "ascent of the energy (forward pass) or descent (the public code of Massucco et al., arXiv 2605.18870)"),
        "norm": Key((str,), "post", _choice("post", "pre", "peri", "ngpt"), "normalisation scheme (Karagodin, Ge, Polyanskiy and Rigollet, arXiv 2510.22026): post (tokens on the sphere), pre (tokens r·θ in R^d with a radius), peri, ngpt; see meanfield.normalization"),
        "ngpt_alpha": Key(NUM, 0.2, _at_least(0, strict=True), "norm = 'ngpt': the step α along the attention output's direction (0.2 as in the authors' public code)"),
        "heads": Key((list, str), None, None, "array of head tables, or 'checkpoint:PATH#layer=L'"),
        "seed": Key((int,), 0, _at_least(0), "seed of 'random' head matrices (head h uses seed + 1000 h unless it sets its own; drawn from default_rng([HEADS_STREAM, seed]), independent of init.seed's tokens) and of weights.initial = 'random-symmetric' (default_rng(seed): with ou noise keep it unlike weights.seed, whose noise draws from the same stream; a note says so)"),
        "combine": Key((str,), "sum", _choice("sum", "mean"), "how the heads' fields combine: their sum, or their mean (1/H of the sum; Massucco et al., arXiv 2605.18870); softmax, unnormalized and relu only"),
        "mask": Key((str,), "none", _choice("none", "causal"), "attention mask: 'causal' lets token i attend only to tokens j ≤ i in the order of the initial tokens (Karagodin, Polyanskiy and Rigollet, arXiv 2411.04990; particle solver only)"),
        "num_heads": Key((int,), None, _at_least(1), "H: one [[model.heads]] table (or the default identity head) stands for H heads, each with its own random draws (head h: seed + 1000 h)"),
        "backend": Key((str,), "auto", _choice("auto", "blas", "fused", "harmonic", "local", "numba", "numpy"), "attention kernel (auto: on S² the fastest of harmonic, local and dense by measured cost models; elsewhere fused one-pass softmax for d ≤ 8 in float64 (on AVX-512 processors from 512² pairs the blas kernel's flash tiles), the numba row kernel for the other float64 laws on up to 48 tokens with n·d ≤ 512 and no mask, fused pooled for d ≤ 8 on 49–384 tokens (and on fewer under a mask or for the row sums), else blas)"),
        "tolerance": Key(NUM, 1e-12, _between(1e-15, 1e-2), "relative accuracy per row of the harmonic and local kernels on S², from 1e-15 to 1e-2 (the dense kernels are exact to round-off)"),
        "precision": Key((str,), "float64", _choice("float64", "float32"), "score/exp arithmetic of the dense kernels: float32 runs the fused float32 kernel (d ≤ 8, every law; on AVX-512 processors from 512² pairs the blas kernel's flash tiles) or the blas kernel's float32 buffers, error within 1e-6·(1 + β‖B‖₂) of the summed terms' size (‖V‖₂ for softmax; where the velocities cancel far below it, as for antipodal tokens at small β, the error relative to max‖v‖ is larger); on S² with backend auto, a harmonic or local kernel that beats the float32 dense one runs instead, in float64"),
        "assumptions": Key((str,), "check", _choice("check", "warn", "skip"), "Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) Assumption 1 on (Q, K, V) when W2 to Π♯ρ₀ is tracked"),
    },
    "init": {
        "kind": Key((str,), "uniform", _choice("uniform", "vmf", "fibonacci", "equiangular", "orthogonal", "file", "mixture", "function", "sentence", "clusters", "run"), "initial measure (fibonacci: quasi-uniform points on S², rotated at random when seed > 0; run: a frame of a stored run, init.path and init.time, as the tokens of a particle run)"),
        "n": Key((int,), 256, _at_least(1), "number of tokens (particles)"),
        "seed": Key((int,), 0, _at_least(0), "sampler seed"),
        "path": Key((str,), None, None, "kind='file': an (n, d) .npy array (grid: an (N,) mass array); kind='run': an HDF5 run of meanfield simulate, whose frame at init.time becomes the tokens (a grid run's cells: tokens at the cell points carrying the cell masses); the run stores the source's absolute path and reads it again on --resume and in its analysis (meanfield concentration), so the source must stay at that path"),
        "time": Key(NUM, None, _at_least(0), "kind='run': the time of the stored frame to start from (default: its last committed frame); the run's clock starts there"),
        "min_mass": Key(NUM, 0.0, _between(0, 1e-3), "kind='run': leave out the tokens whose mass is below this share of the total, at most 1e-3 (default 0: every token; a grid run late in a clustering keeps all but 1e-8 of its mass on a third of its cells)"),
        "symmetry": Key((str,), "none", _choice("none", "antipodal"), "kind='run': 'antipodal' adds the image -x of every token, each with half the mass, (ρ + (−id)♯ρ)/2: a symmetry the flow keeps exactly (the scores ⟨Qx, Ky⟩ are even in the joint reflection x, y ↦ −x, −y, so the field is odd; unmasked attention), which the source run's discretisation broke at the level of its errors (a source far from symmetric, its odd moments above 0.1 and above its sampling noise, gets a note: the image then makes another measure)"),
        "mean": Key((list,), None, _finite, "kind='vmf': mean direction"),
        "kappa": Key(NUM, 4.0, _between(0, 1e12), "kind='vmf': concentration κ (at most 1e12: a cluster of width 1e-6)"),
        "gamma": Key(NUM, 0.0, _finite, "kind='equiangular': ⟨x_i,x_j⟩ = γ"),
        "components": Key((list,), None, None, "kind='mixture' (grid): list of {weight, kind, mean, kappa}"),
        "expr": Key((str,), None, None, "kind='function' (grid): density as an expression in x, y, z"),
        "sentence": Key((str,), None, None, "kind='sentence': text whose token embeddings (word + position, LayerNorm, normalised) are the initial tokens"),
        "centers": Key((list, str), "octahedron", None, "kind='clusters': 'octahedron' (the 2d vertices ±e_i) or a list of unit vectors of length d"),
        "spread": Key(NUM, 0.05, _between(0, 1e6), "kind='clusters': Gaussian σ of the noise added to the chosen center before normalisation (at most 1e6: far past 1 the points are uniform already; 1e160 had overflowed)"),
        "checkpoint": Key((str,), None, None, "kind='sentence': checkpoint for tokenizer and embeddings (PATH or 'minilm'; default: that of model.heads)"),
    },
    "solver": {
        "kind": Key((str,), "particle", _choice("particle", "grid", "jko", "zero-temperature"), "which solver"),
        "method": Key((str,), "rk4", _choice("euler", "heun", "rk4", "rk45", "ssprk2", "ssprk3"), "time integrator"),
        "dt": Key(NUM, 0.01, _at_least(0, strict=True), "time step (initial step for rk45)"),
        "t_final": Key(NUM, 10.0, _at_least(0), "final time"),
        "save_every": Key(NUM, 0.1, _at_least(0, strict=True), "time between saved frames"),
        "rtol": Key(NUM, 1e-8, _at_least(0, strict=True), "rk45 relative tolerance"),
        "atol": Key(NUM, 1e-10, _at_least(0, strict=True), "rk45 absolute tolerance"),
        "steady_tol": Key(NUM, 0.0, _at_least(0), "stop when max_i |ẋ_i| < steady_tol (0: never; not the JKO scheme, which records no speed, nor noisy tokens, which never stand still, nor model.norm = 'pre' or 'peri', whose radii keep growing)"),
        "cfl": Key(NUM, 0.5, _at_least(1e-6), "grid: CFL number (at least 1e-6: 1e-13 had run until a step fell below round-off, the file written)"),
        "tau": Key(NUM, 0.05, _at_least(0, strict=True), "jko: step τ"),
        "variant": Key((str,), "particle", _choice("particle", "grid"), "jko: particle or grid"),
        "mobility": Key((str,), "frozen", _choice("frozen", "implicit"), "jko: mobility frozen at μ_k (frozen) or iterated to the new measure (implicit)"),
        "tol": Key(NUM, 1e-10, _between(*JKO_TOL_RANGE), "jko: inner-solver tolerance, a displacement in radians (particles) or an L¹ change of the cell masses (grid), between 1e-14 (its residual cannot go below round-off: a smaller one failed the run after ten halvings) and 1e-6 (a tolerance near one step's displacement τ‖v‖ had accepted steps that did not move)"),
        "clock": Key((str,), "time", _choice("time", "gradient"), "particle: what the save times count: physical time, or the gradient clock ds = ‖ẋ‖ dt (arc length in the mass metric; Geshkovski, Koubbi, Polyanskiy and Rigollet, arXiv 2410.06833), with the physical time in diagnostics clock_time"),
        "clock_merge": Key(NUM, 0.0, _at_least(0), "clock = 'gradient': the merge radius r (geodesic): after each step a group of tokens is identified where every token lies within r of the group's centre (none moves further) (0: 2·dt·√(2/min token mass), twice the distance at which an explicit step stalls a collapsing pair, at most 0.05·β^(-1/2); a note where that cap binds)"),
    },
    "grid": {
        "cells": Key((int,), 2000, _at_least(12), "number of cells N, at least 12 (graded: the mesh outside the fine caps is that of N Fibonacci cells, spacing sqrt(4π/N); the whole mesh has more)"),
        "family": Key((str,), "fibonacci", _choice("fibonacci", "icosahedral", "graded"), "generators of the Voronoi mesh (graded: fine caps around grid.refine_centres inside a Fibonacci mesh of grid.cells cells)"),
        "refine_centres": Key((list,), None, None, "graded: the centres of the fine caps, a list of 3-vectors (normalised), e.g. [[1, 0, 0], [-1, 0, 0]] (the atoms of Π♯ρ₀ of data/concentration.toml)"),
        "refine_radius": Key(NUM, 0.12, _at_least(0), "graded: radius R (radians) of the caps of fine spacing h_c/F around each centre"),
        "refine_factor": Key(NUM, 8.0, _at_least(1), "graded: F, the coarse spacing sqrt(4π/grid.cells) over the fine one"),
        "grading": Key(NUM, 0.25, _at_least(0, strict=True), "graded: γ, the growth of the spacing per radian beyond R, up to the coarse spacing"),
        "dt_max": Key(NUM, 0.0, _at_least(0), "largest time step of the grid solver (0: only the CFL condition, the save times and time-dependent heads limit it: one tenth of 1/ω for an oscillation, weights.dt for ou and relaxation)"),
        "order": Key((int,), 2, _choice(1, 2), "spatial order: 2 (limited linear reconstruction, velocity at centroids and edge midpoints) or 1 (upwind cell averages)"),
        "limiter": Key((str,), "barth-jespersen", _choice("barth-jespersen", "none"), "slope limiter of the second-order scheme ('none' is not positive)"),
    },
    "weights": {
        "schedule": Key((str,), "constant", _choice("constant", "ou", "oscillating", "relaxation", "layers"), "time dependence of the heads (relaxation: dD = rate (F(t) − D) dt toward weights.target; layers: the random head matrices redrawn at every integer time k from default_rng([HEADS_STREAM, s_h, k]), s_h the head's seed, constant in between; particle solver)"),
        "kappa": Key(NUM, 1.0, _at_least(0), "ou: mean-reversion rate κ"),
        "sigma": Key(NUM, 0.1, _at_least(0), "ou: noise σ"),
        "seed": Key((int,), 0, _at_least(0), "ou: noise seed"),
        "dt": Key(NUM, 0.01, _at_least(0, strict=True), "ou, relaxation, oscillating: time step of the stored weight path (oscillating: of its record, t_final / weights.dt points, replayed linearly in between)"),
        "initial": Key((str,), "mean", _choice("mean", "random-symmetric"), "ou, relaxation: heads at t = 0: the configured heads, or D_h = Z + Zᵀ with Z standard normal (from model.seed; V_h = D_h)"),
        "mean": Key((list, str, int, float), None, None, "ou: the mean M of dD = κ(M − D) dt + σ dW: a d×d matrix, 'identity', or a number λ (λ·I); unset: the configured heads"),
        "noise": Key((str,), "isotropic", _choice("isotropic", "symmetric"), "ou: dW of independent free entries, or the symmetric dW_sym = √dt (Z + Zᵀ)/2 of Massucco et al."),
        "integrator": Key((str,), "auto", _choice("auto", "exact", "euler-maruyama"), "ou, relaxation: weight path by the exact Gaussian transition or by Euler–Maruyama on the weights.dt grid (auto: exact for ou, euler-maruyama for relaxation)"),
        "rate": Key(NUM, 1.0, _at_least(0), "relaxation: rate r of dD = r (F(t) − D) dt"),
        "target": Key((list,), None, None, "relaxation: F(t), a d×d matrix of numbers or expressions in t and the head's phase phi (e.g. '2+1.5*cos(t+phi)')"),
        "amplitude": Key(NUM, 0.5, _at_least(0), "oscillating: amplitude A"),
        "omega": Key(NUM, 1.0, _finite, "oscillating: angular frequency ω"),
        "phases": Key((str,), "spread", _choice("spread", "equal", "same", "random"), "oscillating, relaxation: phases φ_h = 2πh/H, all 0 ('equal' or 'same'), or uniform from weights.seed"),
    },
    "noise": {
        "gamma": Key(NUM, None, _at_least(0, strict=True), "noisy tokens: dx = P⊥v dt + √(2/γ) P⊥∘dW, Stratonovich (grid: + (1/γ)Δ_S μ); γ > 0, unset: deterministic (Shalova and Schlichting, arXiv 2412.14813)"),
        "seed": Key((int,), 0, _at_least(0), "seed of the Brownian increments (particles; the interval [t0, t1] draws from (seed, t0))"),
        "anneal": Key((str,), "none", _choice("none", "linear", "exponential", "logarithmic", "expression"), "time dependence of γ: none, linear (to gamma_final over duration), exponential (to gamma_final at anneal_rate), logarithmic (γ ln(e + anneal_rate t)), expression (anneal_expr)"),
        "gamma_final": Key(NUM, None, _at_least(0, strict=True), "anneal = 'linear' or 'exponential': the γ the schedule goes to"),
        "duration": Key(NUM, None, _at_least(0, strict=True), "anneal = 'linear': time T_a at which γ reaches gamma_final"),
        "anneal_rate": Key(NUM, None, _at_least(0, strict=True), "anneal = 'exponential' or 'logarithmic': the rate r"),
        "anneal_expr": Key((str,), None, None, "anneal = 'expression': γ(t) as an expression in t and gamma, e.g. 'gamma*(1 + t)' (checked > 0 at 10^5 times of [0, t_final] when read, and at every step)"),
    },
    "track": {
        "energy": Key((bool,), True, None, "record E_multi and E_h at every frame"),
        "concentration": Key((bool,), False, None, "record W2(ρ_t, Π♯ρ₀) and the distance to V's dominant eigenspace"),
        "w2_method": Key((str,), "exact", _choice("exact", "sinkhorn", "sliced"), "estimator for the concentration tracker"),
    },
    "phase": {  # `meanfield phase`: Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2312.10794
        "betas": Key((list,), [0.1, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], _nonnegative_list(), "phase diagram: the inverse temperatures β (its rows)"),
        "times": Key((list,), None, _nonnegative_list(increasing=True), "phase diagram: the times t (its columns); unset: 0, solver.save_every, …, solver.t_final"),
        "samples": Key((int,), 256, _at_least(1), "phase diagram: random initialisations per β (init.seed + 0, 1, …; the same for every β)"),
        "batch": Key((int,), 256, _at_least(1), "phase diagram: systems per batch (one kernel call, one Dask task)"),
        "cluster_angle": Key(NUM, math.acos(0.999), _between(0, math.pi), "phase diagram: tokens at geodesic distance ≤ this (radians) are linked; clusters are the connected components (default arccos 0.999)"),
        "rank_tol": Key(NUM, 1e-3, _at_least(0, strict=True), "phase diagram: the Gram matrix's numerical rank counts its eigenvalues > rank_tol (those of X Xᵀ, which sum to n)"),
    },
}


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", bool: "true or false"}
    if types == NUM:
        return "a number"
    return " or ".join(names.get(t, t.__name__) for t in types)


def plain_value(value: Any, key: str) -> Any:
    """A Python value as the value a TOML file gives: where Python input enters a config (:func:`load_config`'s
    mapping and keyword values, :func:`resolve`, a sweep's mapping).

    Tuples and NumPy arrays become lists (nested for a matrix; a 0-d array is its scalar), NumPy scalars Python
    ones, mappings dicts, all the way down; strings stay strings.  The resolved config is then the one of the list
    form, and JSON takes it (it is stored as JSON).  (``init.mean = (0, 0, 1)`` and ``model.heads`` as a tuple had
    been refused as "expected a list", a sweep's ``np.logspace`` grid too, and its ``np.float64`` values had been
    written to TOML as ``np.float64(1.0)``; ``np.int64(8)`` from ``np.arange`` had been "not an integer".)

    Parameters
    ----------
    value : any
        What the caller gave.
    key : str
        Where it is (``"model.heads[0].Q"``), for the error; ``""`` for a whole config, whose sections name themselves.

    Raises
    ------
    ConfigError
        For a NumPy array of Python objects or of records (its entries are no TOML values), naming ``key``.
    """
    if type(value).__module__.partition(".")[0] == "numpy" and hasattr(value, "tolist"):  # arrays and scalars
        kind = getattr(getattr(value, "dtype", None), "kind", "")
        if kind in ("O", "V"):  # (an object array's entries: anything, a ragged list's rows among them)
            raise ConfigError(key or "config", f"expected numbers or strings, got a NumPy array of dtype {value.dtype} "
                                               f"and shape {getattr(value, 'shape', ())} (give a numeric array or a list)")
        return value.tolist()  # nested lists of Python scalars (a string array: of str)
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain_value(item, f"{key}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {name: plain_value(item, f"{key}.{name}" if key else str(name)) for name, item in value.items()}
    return value


def _refuse_listed_bools(value: Any, key: str, *, listed: bool = False) -> None:
    """Refuse a TOML ``true``/``false`` among the entries of a list (a matrix, a vector), naming its place, e.g.
    ``model.heads[0].Q[0][0]``: they had been read as 1 and 0 where a boolean scalar is refused (a head table's own
    scalars are checked by their readers)."""
    if isinstance(value, bool):
        if listed:
            raise ConfigError(key, f"expected a number, got {value!r}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_listed_bools(item, f"{key}[{index}]", listed=True)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            _refuse_listed_bools(item, f"{key}.{name}")


def _check_value(spec: Key, value: Any, key: str) -> Any:
    value = plain_value(value, key)
    if isinstance(value, bool) and bool not in spec.types:
        raise ConfigError(key, f"expected {_type_name(spec.types)}, got {value!r}")
    if not isinstance(value, spec.types):
        raise ConfigError(key, f"expected {_type_name(spec.types)}, got {type(value).__name__} {value!r}")
    if bool not in spec.types:
        _refuse_listed_bools(value, key)
    if spec.types == NUM:
        value = float(value) + 0.0  # (-0.0 is 0: init.spread = -0.0 had been NumPy's "scale < 0", named init.kind)
    if spec.check is not None:
        spec.check(value, key)
    return value


def resolve(raw: Mapping[str, Any], *, base: Path | None = None, switched_from: Collection[str] = ()) -> dict[str, Any]:
    """Validate a raw config mapping and fill in every default.

    ``switched_from``: the ``[solver]`` keys a file set for the solver kind an override switched away from
    (:func:`load_config`); they are not noted as unused by the new kind.

    Raises
    ------
    ConfigError
        For an unknown section or key, a wrong type, a non-finite number, or
        a value out of range; the message names the key.
    """
    resolved: dict[str, Any] = {}
    for section in raw:
        if section not in SCHEMA:
            raise ConfigError(section, f"unknown section; expected one of {', '.join(SCHEMA)}{_did_you_mean(section)}")
        if not isinstance(raw[section], Mapping):
            raise ConfigError(section, "expected a table")
    for section, keys in SCHEMA.items():
        given = raw.get(section, {})
        out: dict[str, Any] = {}
        for key in given:
            if key not in keys:
                raise ConfigError(f"{section}.{key}", f"unknown key; allowed keys are {', '.join(keys)}{_did_you_mean(f'{section}.{key}')}")
        for key, spec in keys.items():
            if key in given and not (given[key] is None and spec.default is None):  # None: unset (a resolved config again)
                out[key] = _check_value(spec, given[key], f"{section}.{key}")
            else:
                out[key] = copy.deepcopy(spec.default)
        resolved[section] = out
    _integrator_for_kind(resolved["solver"], given="method" in raw.get("solver", {}))
    _noise_checks(resolved, method_given="method" in raw.get("solver", {}))
    _unused_solver_keys(resolved["solver"], given={k: v for k, v in raw.get("solver", {}).items() if k not in switched_from})
    _unused_weights_keys(resolved["weights"], given=raw.get("weights", {}))
    _unused_grid_keys(resolved["grid"], given=raw.get("grid", {}))
    _unused_init_keys(resolved["init"], given=raw.get("init", {}))
    _icosahedral_size_note(resolved)
    _cfl_note(resolved)
    if isinstance(resolved["model"]["heads"], list) and not resolved["model"]["heads"] and "heads" in raw.get("model", {}):
        raise ConfigError("model.heads", "an empty list of heads; give at least one [[model.heads]] table "
                                         "(or leave model.heads out for one identity head)")
    from meanfield.resources import check_resources, weight_path_note  # sizes before anything is built (the heads are d×d)

    check_resources(resolved)
    if (note := weight_path_note(resolved)) is not None:  # (a path of 117 MB had been written without a word)
        warnings.warn(note, ConfigNote, stacklevel=3)
    _cross_checks(resolved, base=base, init_given=raw.get("init", {}), beta_given="beta" in raw.get("model", {}))
    return resolved


#: integrators of the particle-type solvers, and of the grid
PARTICLE_METHODS = ("euler", "heun", "rk4", "rk45")
GRID_METHODS = ("ssprk2", "ssprk3")


def _integrator_for_kind(solver: dict[str, Any], *, given: bool) -> None:
    """Pick the solver's default integrator when ``solver.method`` is one the solver does not take, and say so."""
    kind, method = solver["kind"], solver["method"]
    if kind == "grid" and method not in GRID_METHODS:
        solver["method"] = "ssprk3"
        if given:
            warnings.warn(f"solver.method = {method!r} is not a grid method; the grid uses its default 'ssprk3'", ConfigNote, stacklevel=3)
    elif kind in ("particle", "zero-temperature") and method in GRID_METHODS:
        solver["method"] = "rk4"
        warnings.warn(f"solver.method = {method!r} is a grid method; the {kind} solver uses its default 'rk4'", ConfigNote, stacklevel=3)


#: the ``[solver]`` keys each solver kind reads (kind, t_final and save_every: every kind; steady_tol: all but jko)
SOLVER_KEYS_USED = {
    "particle": ("method", "dt", "rtol", "atol", "clock", "clock_merge"),
    "zero-temperature": ("method", "dt", "rtol", "atol"),
    "grid": ("method", "cfl"),
    "jko": ("tau", "variant", "mobility", "tol"),
}


def _unused_solver_keys(solver: dict[str, Any], *, given: Mapping[str, Any]) -> None:
    """Note the ``[solver]`` keys set away from their defaults that the chosen solver does not read.

    rtol and atol count only for ``method = "rk45"``, clock_merge only for the gradient clock.
    """
    kind = solver["kind"]
    used = set(SOLVER_KEYS_USED[kind]) | {"kind", "t_final", "save_every"} | ({"steady_tol"} if kind != "jko" else set())
    clock = kind == "particle" and solver["clock"] == "gradient"
    if solver["method"] != "rk45" or clock:  # the clock's steps are fixed, rk45's too (rtol had been ignored in silence)
        used -= {"rtol", "atol"}
    if solver["clock"] == "time":
        used.discard("clock_merge")
    unused = _unused_keys("solver", solver, given=given, used=used)
    tolerances = (" (the gradient clock takes fixed steps of solver.dt, rk45's without error control)" if clock
                  else " (rtol and atol serve method = 'rk45')")
    why = {"grid": " (its step follows solver.cfl and grid.dt_max)", "jko": " (its step is solver.tau)"}.get(
        kind, tolerances if {"rtol", "atol"} & set(unused)
        else " (it serves clock = 'gradient')" if unused == ["clock_merge"] else "")
    _note_unused("solver", unused, f"the {kind} solver{why}")


#: the ``[weights]`` keys each schedule reads (``seed``: the OU noise, and the phases = "random" of the others)
WEIGHTS_KEYS_USED = {
    "constant": (),
    "layers": (),
    "ou": ("kappa", "sigma", "seed", "dt", "initial", "mean", "noise", "integrator"),
    "oscillating": ("amplitude", "omega", "phases", "dt"),  # dt: the step of the stored path (its size, the replay)
    "relaxation": ("rate", "target", "dt", "initial", "integrator", "phases"),
}


def _unused_weights_keys(weights: dict[str, Any], *, given: Mapping[str, Any]) -> None:
    """Note the ``[weights]`` keys set away from their defaults that the chosen schedule does not read."""
    schedule = weights["schedule"]
    used = set(WEIGHTS_KEYS_USED[schedule]) | {"schedule"}
    if weights["phases"] == "random" and "phases" in used:
        used.add("seed")
    used.add("target")  # refused outside 'relaxation' (_cross_checks), as are these outside 'ou' and 'relaxation':
    if schedule not in ("ou", "relaxation"):
        used |= {"initial", "noise", "integrator", "mean"}
    _note_unused("weights", _unused_keys("weights", weights, given=given, used=used), f"schedule = {schedule!r}")


def _unused_grid_keys(grid: dict[str, Any], *, given: Mapping[str, Any]) -> None:
    """Note the refinement keys of a mesh that is not graded (set without ``grid.family = "graded"``, they had been
    dropped without a word, and the run took a uniform mesh)."""
    if grid["family"] == "graded":
        return
    refinement = {"refine_centres", "refine_radius", "refine_factor", "grading"}
    unused = _unused_keys("grid", grid, given=given, used=set(SCHEMA["grid"]) - refinement)
    _note_unused("grid", unused, f"the {grid['family']} mesh (they refine grid.family = 'graded')")


#: the ``[init]`` keys of one kind each initial measure reads (kind, n and seed aside; init.time, init.min_mass and
#: init.symmetry outside kind = 'run' are refused in the cross-checks)
INIT_KEYS_USED = {
    "uniform": (), "fibonacci": (), "orthogonal": (),
    "vmf": ("mean", "kappa"),
    "equiangular": ("gamma",),
    "clusters": ("centers", "spread"),
    "file": ("path",),
    "mixture": ("components",),
    "function": ("expr",),
    "sentence": ("sentence", "checkpoint"),
    "run": ("path", "time", "min_mass", "symmetry"),
}


def _unused_init_keys(init: dict[str, Any], *, given: Mapping[str, Any]) -> None:
    """Note the ``[init]`` keys of another kind, set away from their defaults (``init.path`` given and the kind
    forgotten had run uniform tokens without a word)."""
    kind = init["kind"]
    used = set(INIT_KEYS_USED[kind]) | {"kind", "n", "seed", "time", "min_mass", "symmetry"}
    _note_unused("init", _unused_keys("init", init, given=given, used=used), f"init.kind = {kind!r}")


def _cfl_note(cfg: dict[str, Any]) -> None:
    """Say that a grid run's ``solver.cfl`` above 1 has steps rejected and halved (it had been taken without a word,
    costing more work than cfl = 1)."""
    solver = cfg["solver"]
    if solver["kind"] == "grid" and solver["cfl"] > 1.0:
        warnings.warn(f"solver.cfl = {solver['cfl']:g} > 1: a forward-Euler stage of that step can empty a cell, so most "
                      "steps are rejected and halved (more work than cfl = 1); 1 or below keeps the steps", ConfigNote,
                      stacklevel=4)


def _icosahedral_size_note(cfg: dict[str, Any]) -> None:
    """Say the cells of the icosahedral mesh a grid run gets, where they are not ``grid.cells`` (5000 had become 2562
    cells, 6000 10242, without a word)."""
    grid, solver = cfg["grid"], cfg["solver"]
    on_grid = solver["kind"] == "grid" or (solver["kind"] == "jko" and solver.get("variant") == "grid")
    if not on_grid or grid["family"] != "icosahedral":
        return
    from meanfield.geometry.mesh import icosahedral_cells  # local: the geometry imports SciPy

    cells = icosahedral_cells(int(grid["cells"]))
    if cells != grid["cells"]:
        warnings.warn(f"grid.cells = {grid['cells']}: the icosahedral mesh has 10·4^L + 2 cells, the nearest {cells} "
                      "(in log scale)", ConfigNote, stacklevel=4)


def _unused_keys(section: str, values: Mapping[str, Any], *, given: Mapping[str, Any], used: set[str]) -> list[str]:
    """The keys of ``given`` outside ``used`` whose values are not the defaults (a resolved config holds every
    key, at its default or the user's value: only the user's are noted)."""
    return [key for key in given if key not in used and values[key] != SCHEMA[section][key].default]


def _note_unused(section: str, unused: list[str], reader: str) -> None:
    if unused:
        keys = ", ".join(f"{section}.{key}" for key in unused)
        warnings.warn(f"{keys} not used by {reader}; ignored", ConfigNote, stacklevel=4)


def _noise_checks(cfg: dict[str, Any], *, method_given: bool) -> None:
    """``[noise]``: the schedule's keys, the solvers that take noise, and the particle integrator (Euler–Maruyama)."""
    from meanfield.noise import check_noise_section

    solver = cfg["solver"]
    if check_noise_section(cfg["noise"], t_final=solver["t_final"]) is None:
        return
    kind = solver["kind"]
    if kind not in ("particle", "grid"):
        raise ConfigError("noise.gamma", f"noisy tokens run on solver.kind = 'particle' or 'grid', got {kind!r}")
    if solver["steady_tol"] > 0:  # the drift alone had been tested: a run stopped at t = 0 as "steady" (all tokens at one point)
        why = ("noisy tokens never stand still: their law tends to the equilibrium of drift and noise, not to a state "
               "without drift" if kind == "particle" else
               "the grid's test measures the drift alone, which need not vanish at the equilibrium of drift and diffusion "
               "and vanishes far from it (all the mass in one cap)")
        raise ConfigError("solver.steady_tol", f"{solver['steady_tol']:g} stops a run where the drift is slower than it, and {why} "
                                               "(use 0 and a t_final)")
    if kind == "grid" and cfg["noise"]["seed"] != SCHEMA["noise"]["seed"].default:
        _note_unused("noise", ["seed"], "the grid solver (it solves the Fokker–Planck equation, with no random draws)")
    norm = cfg["model"].get("norm", "post")
    if norm != "post":  # named first: the scheme, not the integrator, is what takes no noise (it had named solver.method)
        raise ConfigError("model.norm", f"norm = {norm!r} takes no [noise]: noisy tokens follow the sphere model (norm = 'post')")
    if kind == "particle" and solver["method"] != "euler":
        if method_given:
            raise ConfigError("solver.method", f"noisy tokens take geometric Euler–Maruyama steps: use method = 'euler' "
                                               f"(the only stochastic scheme), got {solver['method']!r}")
        solver["method"] = "euler"
        warnings.warn("with [noise] the particle solver takes Euler–Maruyama steps: solver.method = 'euler'", ConfigNote, stacklevel=4)


def _cross_checks(cfg: dict[str, Any], *, base: Path | None, init_given: Mapping[str, Any] | None = None,
                  beta_given: bool = True) -> None:
    from meanfield.heads import heads_from_config  # local: heads imports numpy only

    model, init, solver = cfg["model"], cfg["init"], cfg["solver"]
    init_given = init_given or {}
    d = model["d"]
    heads = model["heads"]
    on_grid = solver["kind"] == "grid" or (solver["kind"] == "jko" and solver["variant"] == "grid")
    if isinstance(heads, list):
        for index, spec in enumerate(heads):
            if not isinstance(spec, Mapping):
                raise ConfigError(f"model.heads[{index}]", "expected a table with keys Q, K, V")
        built = heads_from_config(heads, d=d, seed=model["seed"], base=base)  # raises ConfigError naming the key
        _check_unshifted_overflow(cfg, built)
        _check_score_limit(cfg, built)
        from meanfield.model import VALUE_BOUND_LIMIT, value_bound  # local: the model module imports NumPy

        for index, head in enumerate(built):  # (V = 1e308 had run to NaN, exit 1, a file written)
            size = value_bound(head.V[None])
            if not size <= VALUE_BOUND_LIMIT:
                raise ConfigError(f"model.heads[{index}].V", f"‖V‖_F = {size:.3g} makes the velocities overflow (at most "
                                                             f"{VALUE_BOUND_LIMIT:.0e})")
        if base is not None:  # store `file:` matrices by absolute path, so runs and sweeps find them anywhere
            for spec in heads:
                for name in ("Q", "K", "V"):
                    value = spec.get(name)
                    if isinstance(value, str) and value.startswith("file:") and not Path(value[5:]).expanduser().is_absolute():
                        spec[name] = f"file:{base / value[5:]}"
    elif isinstance(heads, str):
        if not heads.startswith("checkpoint:"):
            raise ConfigError("model.heads", f"expected an array of head tables or 'checkpoint:PATH#layer=L', got {heads!r}")
        from meanfield.heads.checkpoint import parse_checkpoint_spec  # a malformed spec fails before any work

        spec = parse_checkpoint_spec(heads)
        if base is not None and spec.path.lower() != "minilm" and not Path(spec.path).expanduser().is_absolute():  # (~/ck had
            # become <config folder>/~/ck)
            model["heads"] = f"checkpoint:{base / spec.path}#{heads.rpartition('#')[2]}"
        layer_heads = _checkpoint_heads_checks(model, beta_given=beta_given)
        _check_unshifted_overflow(cfg, layer_heads)
        _check_score_limit(cfg, layer_heads)
    else:  # the default head, B = I (each of model.num_heads)
        from meanfield.heads import identity

        _check_unshifted_overflow(cfg, [identity(d)])
        _check_score_limit(cfg, [identity(d)])
    _authors_checks(cfg, on_grid=on_grid)
    _mask_checks(cfg, on_grid=on_grid)
    _graded_checks(cfg)
    if on_grid and model["beta"] > 0:
        _kernel_width_note(cfg)
    if init["mean"] is not None and len(init["mean"]) != d:
        raise ConfigError("init.mean", f"expected a vector of length d={d}, got length {len(init['mean'])}")
    if init["mean"] is not None and not any(float(v) != 0.0 for v in init["mean"]):
        raise ConfigError("init.mean", "must be a non-zero direction")
    if init["kind"] in ("equiangular", "orthogonal") and not on_grid and init["n"] > d:
        raise ConfigError("init.n", f"kind={init['kind']!r} needs n <= d={d}, got n={init['n']}")
    if init["kind"] == "equiangular":
        n = init["n"]
        lower = -1.0 / (n - 1) if n > 1 else -1.0
        if not lower < init["gamma"] < 1.0:
            raise ConfigError("init.gamma", f"must lie in ({lower:.6g}, 1) for n={n}, got {init['gamma']}")
    if init["kind"] == "sentence":
        if on_grid:
            raise ConfigError("init.kind", "kind='sentence' gives particles; it needs a particle solver")
        if not init["sentence"]:
            raise ConfigError("init.sentence", 'kind=\'sentence\' needs sentence = "some text"')
        checkpoint = init["checkpoint"]
        if checkpoint and base is not None and checkpoint.lower() != "minilm" and not Path(checkpoint).expanduser().is_absolute():
            init["checkpoint"] = str(base / checkpoint)
        from meanfield.heads.embeddings import tokens_from_config  # the checkpoint, its tokenizer and the sentence:
        # refused here, before any file (a sweep had written its folder and failed every case, each twice)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigNote)  # (a sentence cut to the positions: noted once, when it is built)
            tokens_from_config(cfg)
    if init["kind"] == "file":
        if not init["path"]:
            raise ConfigError("init.path", "kind='file' needs path = \"x0.npy\"")
        path = Path(init["path"]).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        if not path.exists():
            raise ConfigError("init.path", f"file not found: {path}")
        init["path"] = str(path)
        if not on_grid:
            from meanfield.io.arrays import load_npy

            tokens = load_npy(path, "init.path", mmap=True, real=True)
            if tokens.ndim != 2 or tokens.shape[0] == 0:
                raise ConfigError("init.path", f"{path} holds an array of shape {tokens.shape}, not (n, d) tokens with n >= 1")
            rows = int(tokens.shape[0])
            if init_given.get("n") is not None and init_given["n"] != rows:
                raise ConfigError("init.n", f"n={init_given['n']} but {path} holds {rows} tokens")
            init["n"] = rows  # the stored config says how many tokens the run has
            del tokens
            from meanfield.geometry.sphere import load_points

            try:  # the tokens as the run reads them: d columns, finite, no zero row (a sweep had written its folder
                load_points(path, d=d)  # and then failed every case on them, exit 1)
            except ConfigError:
                raise
            except ValueError as exc:
                raise ConfigError("init.path", str(exc)) from None
    if init["kind"] == "run":
        _source_run_checks(cfg, base=base, init_given=init_given)
    else:
        for key, default in (("time", None), ("min_mass", 0.0), ("symmetry", "none")):
            if init[key] != default:
                raise ConfigError(f"init.{key}", f"applies to init.kind = 'run' (the frame of a stored run), got kind = {init['kind']!r}")
    if init["kind"] == "fibonacci" and d != 3:
        raise ConfigError("init.kind", f"kind='fibonacci' places particles on S² (d = 3), got d={d}")
    if init["kind"] == "fibonacci" and not on_grid and init["n"] < 4:  # (refused when the points were built, naming
        raise ConfigError("init.n", f"a Fibonacci mesh needs at least 4 points, got {init['n']}")  # init.kind)
    if init["kind"] == "fibonacci" and on_grid:
        init["kind"] = "uniform"  # the density the quasi-uniform points sample
        warnings.warn("init.kind = 'fibonacci' places particles; the grid starts from the density they sample, kind = 'uniform'", ConfigNote, stacklevel=3)
    if init["kind"] in ("mixture", "function") and not on_grid:
        raise ConfigError("init.kind", f"kind={init['kind']!r} describes a density; it needs a grid solver (solver.kind = 'grid', or 'jko' with variant = 'grid')")
    if init["kind"] in ("mixture", "function") and on_grid:
        from meanfield.geometry.mesh import check_density  # local: the geometry imports SciPy

        check_density(init["kind"], expr=init["expr"], components=init["components"])
    if on_grid and d != 3:
        raise ConfigError("model.d", f"the grid solver works on S² (d = 3), got d={d}")
    if model["precision"] == "float32" and model["backend"] not in ("auto", "blas", "fused"):
        raise ConfigError("model.precision", f"float32 is available with backend = 'fused', 'blas' or 'auto' only, got backend = {model['backend']!r}")
    if model["backend"] in ("harmonic", "local"):
        if d != 3:
            raise ConfigError("model.backend", f"{model['backend']!r} attention works on S² (d = 3), got d={d}")
        if model["attention"] == "relu":
            raise ConfigError("model.backend", f"{model['backend']!r} computes the exponential laws (softmax, unnormalized, pooled), not 'relu'")
        if model["precision"] != "float64":
            raise ConfigError("model.precision", f"{model['backend']!r} attention is float64 only")
    if model["backend"] == "fused" and model["attention"] not in ("softmax", "pooled") and model["precision"] == "float64":
        raise ConfigError("model.backend", f"'fused' in float64 computes the softmax and pooled laws (precision = 'float32' has every law), got attention = {model['attention']!r}")
    _norm_checks(cfg)
    weights = cfg["weights"]
    if (weights["schedule"] in ("ou", "relaxation") and solver["kind"] == "particle" and cfg["noise"]["gamma"] is None
            and solver["method"] in ("rk4", "heun", "rk45") and solver["dt"] > weights["dt"] * (1 + 1e-9)):
        warnings.warn(f"solver.dt = {solver['dt']:g} is longer than weights.dt = {weights['dt']:g}: the weight path bends "
                      f"at every weights.dt, and {solver['method']} steps are cut there to keep their order (one across "
                      f"a bend is second order), so the steps are at most {weights['dt']:g}", ConfigNote, stacklevel=4)
    if cfg["weights"]["schedule"] == "layers":  # piecewise-constant heads: only the particle stepper cuts its steps at the layer boundaries
        if solver["kind"] != "particle":
            raise ConfigError("weights.schedule", f"'layers' runs with solver.kind = 'particle', got {solver['kind']!r}")
        if cfg["noise"]["gamma"] is not None:  # the Euler–Maruyama stepper does not cut its steps at the layer switches
            raise ConfigError("weights.schedule", "'layers' does not combine with [noise] (the noisy steps would cross the layer switches); drop one of them")
        from meanfield.heads.schedules import SCHEDULES

        SCHEDULES["layers"](cfg, None)  # raises ConfigError when no head has a random matrix


def _checkpoint_heads_checks(model: dict[str, Any], *, beta_given: bool = True) -> list[Any]:
    r"""``model.heads = "checkpoint:PATH#layer=L…"``: the file is read (the loader caches it), and its layer, its heads
    and its ``d`` are checked (the heads are returned), so that a missing, broken or mismatched checkpoint is refused while the config is
    resolved, before any file is written.

    (Resolution had only parsed the reference: ``meanfield sweep`` wrote its folder and then failed every case,
    each twice, with exit status 1.)

    ``beta_given``: whether the config sets ``model.beta``.  Where it does not, a
    :class:`~meanfield.errors.ConfigNote` says that the generic default is used, and gives the checkpoint's own
    :math:`\beta = 1/\sqrt{d_h}` and :math:`\beta_{\mathrm{LN}} = r^2/\sqrt{d_h}` (the heads hold no
    :math:`1/\sqrt{d_h}`, so the temperature is ``model.beta`` alone; the default had run MiniLM at β = 4, 23 times
    its own, without a word).
    """
    from meanfield.heads.checkpoint import load_checkpoint, parse_checkpoint_spec

    spec = parse_checkpoint_spec(model["heads"])
    ckpt = load_checkpoint(spec.path, num_heads=spec.num_heads, key="model.heads")
    layer = ckpt.layer(spec.layer, key="model.heads")
    for h in spec.heads or ():
        if not h < layer.num_heads:
            raise ConfigError("model.heads", f"head {h} does not exist; layer {spec.layer} has heads 0..{layer.num_heads - 1}")
    if ckpt.d != model["d"]:
        raise ConfigError("model.d", f"the checkpoint's heads act in d={ckpt.d}, but model.d={model['d']}")
    if not beta_given:
        radius = ckpt.token_radius(spec.layer)  # two vectors of d, from the cached file
        ln = ("" if radius is None else
              f" (β_LN = r²/√d_h = {radius ** 2 * ckpt.beta:.3g} for tokens of norm r = {radius:.3g}, that of the "
              f"LayerNorm layer {spec.layer} reads)")
        warnings.warn(f"model.beta is not given: the run takes the generic default β = {model['beta']:g}; the heads of "
                      f"{spec.path} hold no 1/√d_h, and this checkpoint's own β is 1/√{ckpt.head_dim} = {ckpt.beta:.3g}"
                      f"{ln}; set model.beta", ConfigNote, stacklevel=5)
    return layer.heads(spec.heads)


def _source_run_checks(cfg: dict[str, Any], *, base: Path | None, init_given: Mapping[str, Any]) -> None:
    """``init.kind = "run"``: a readable frame of a stored run, for a particle run that starts at its time.

    Resolves ``init.path`` (absolute), ``init.time`` (the frame's time) and ``init.n`` (its tokens),
    so that the stored config names the frame exactly.
    """
    init, model, solver = cfg["init"], cfg["model"], cfg["solver"]
    if solver["kind"] != "particle":
        raise ConfigError("init.kind", f"kind='run' gives tokens; it needs solver.kind = 'particle', got {solver['kind']!r} "
                                       "(a grid run continues on its own mesh with --resume)")
    if model["norm"] != "post":
        raise ConfigError("model.norm", f"init.kind = 'run' starts tokens on the sphere (norm = 'post'), got {model['norm']!r}")
    if solver["clock"] != "time":
        raise ConfigError("solver.clock", "init.kind = 'run' starts the clock at the frame's physical time; it needs clock = 'time'")
    if not init["path"]:
        raise ConfigError("init.path", "kind='run' needs path = \"run.h5\", a run of meanfield simulate")
    path = Path(init["path"])
    if base is not None and not path.is_absolute():
        path = base / path
    from meanfield.io.source_frame import source_tokens  # local: the reader imports h5py

    if init["symmetry"] == "antipodal" and model["mask"] != "none":
        raise ConfigError("init.symmetry", f"the image tokens have no place in the order a mask reads (model.mask = {model['mask']!r}); use symmetry = 'none'")
    frame = source_tokens(path, init["time"], min_mass=float(init["min_mass"]), symmetry=init["symmetry"])
    if frame.asymmetry > max(ANTIPODAL_NOTE_ABOVE, frame.sampling_floor):  # not the discretisation's error: another measure
        warnings.warn(f"init.symmetry = 'antipodal': the frame of {path} at t = {frame.time:g} is far from antipodally "
                      f"symmetric (odd moments {frame.asymmetry:.3g}; 0 for a symmetric measure, about "
                      f"{frame.sampling_floor / 3:.2g} for as many uniform tokens), so (μ + (−id)♯μ)/2 is another measure "
                      "than the source's, not the source with its discretisation's asymmetry taken out", ConfigNote, stacklevel=4)
    if frame.tokens.shape[1] != model["d"]:
        raise ConfigError("model.d", f"{path} holds tokens in d = {frame.tokens.shape[1]}, the config has d = {model['d']}")
    rows = frame.tokens.shape[0]
    if init_given.get("n") is not None and init_given["n"] != rows:  # (a config's n for its own initial measure)
        warnings.warn(f"init.n = {init_given['n']} is replaced by the {rows} tokens of the frame of {path}", ConfigNote, stacklevel=4)
    if not solver["t_final"] > frame.time:
        raise ConfigError("solver.t_final", f"the run starts at the frame's time t = {frame.time:g} (init.time); "
                                            f"t_final = {solver['t_final']:g} must come after it")
    init["path"], init["time"], init["n"] = str(path.resolve()), frame.time, rows


def _check_score_limit(cfg: dict[str, Any], heads: list[Any]) -> None:
    r"""Constant heads: :math:`\beta\|B_h\|_F` within the scores' resolution
    (:func:`~meanfield.model.score_bound_limit`), the :class:`~meanfield.model.ScoreOverflowError` of the Model, here
    named ``model.beta`` while the config is read (a sweep over ``model.beta = [1, 1e16]`` had written its folder and
    then failed every case, exit 1).  A weight path's heads are checked when the run is built."""
    model = cfg["model"]
    if cfg["weights"]["schedule"] != "constant" or model["attention"] == "relu" or not heads:
        return  # (ReLU attention takes no β)
    import numpy as np

    from meanfield.model import score_bound, score_bound_limit, score_overflow_message

    beta, limit = float(model["beta"]), score_bound_limit(model["precision"])[0]
    with np.errstate(over="ignore"):  # β‖Q‖_F‖K‖_F ≥ β‖QᵀK‖_F: B is formed only where that bound passes the limit
        # (a checkpoint's twelve 384×384 products had tripled the time minilm.toml takes to load)
        wide = [head for head in heads  # (einsum: the BLAS norm had taken milliseconds on a busy machine)
                if not beta * math.sqrt(np.einsum("ij,ij->", head.Q, head.Q) * np.einsum("ij,ij->", head.K, head.K)) <= limit]
    if wide and not (bound := score_bound(beta, [head.B for head in wide])) <= limit:
        raise ConfigError("model.beta", score_overflow_message(model["beta"], bound, model["precision"]))


def _check_unshifted_overflow(cfg: dict[str, Any], heads: list[Any]) -> None:
    r"""Note an unnormalized-attention run whose terms :math:`e^{\beta\langle x, B_h y\rangle}` leave float64 where
    tokens reach the top singular directions of a head: it takes them as they are (softmax shifts them by the row's
    largest).  The run stops there on NaN/Inf, its frames kept.  A note too where the terms stay finite but the
    velocity, up to :math:`e^{\beta\|B_h\|_2}\|V_h\|_F`, passes :data:`~meanfield.model.VELOCITY_EXPONENT_LIMIT`.

    The JKO scheme (either variant) is refused instead: its step minimises the energy itself, which it evaluates
    at the start, and uniform tokens come near enough the top directions for it to overflow at once (an
    ``OverflowError`` in its first step had failed the run, exit 1, with a file written).
    """
    model, solver = cfg["model"], cfg["solver"]
    jko = solver["kind"] == "jko"
    unshifted = model["attention"] == "unnormalized" or jko
    if not unshifted or not heads or model["beta"] == 0:
        return
    from meanfield.model import EXP_OVERFLOW, VELOCITY_EXPONENT_LIMIT, unshifted_exponent, unshifted_velocity_exponent

    exponent = unshifted_exponent(model["beta"], [head.B for head in heads])
    top = exponent / model["beta"]
    if jko and exponent > EXP_OVERFLOW:  # (meanfield.solvers.jko refuses the same β for mf.solve)
        raise ConfigError("model.beta", f"{model['beta']:g} with a head of ‖B‖₂ = {top:.3g}: the JKO scheme minimises the energy "
                                        f"(1/2β) Σ a_i a_j e^(β⟨x_i, B x_j⟩) with mobilities up to e^(β‖B‖₂), which leave "
                                        f"float64 above β‖B‖₂ ≈ 709 (here {exponent:.4g}); the particle solver runs this β "
                                        "(solver.kind = 'particle')")
    if exponent > EXP_OVERFLOW:  # (a JKO run past this was refused above: unnormalized attention only)
        warnings.warn(f"model.beta = {model['beta']:g} with a head of ‖B‖₂ = {top:.3g}: unnormalized attention takes e^(β⟨x, B y⟩) "
                      f"unshifted, which exceeds float64 above β⟨x, B y⟩ = 709; the run stops on NaN/Inf where the "
                      f"tokens get there (β‖B‖₂ = {exponent:.3g})", ConfigNote, stacklevel=4)
        return
    velocity = unshifted_velocity_exponent(model["beta"], [head.B for head in heads], [head.V for head in heads])
    on_grid = solver["kind"] == "grid"  # (its density is not put back on the sphere: it meets its step floor first)
    scale_free = model.get("norm") in ("peri", "ngpt")  # (their step takes A/‖A‖: a huge but finite A is no trouble)
    if velocity > VELOCITY_EXPONENT_LIMIT and not jko and not on_grid and not scale_free:  # (β = 600 with V = 1e140, and V = I, had run to NaN)
        warnings.warn(f"model.beta = {model['beta']:g}: unnormalized attention takes e^(β⟨x, B y⟩) unshifted, and its "
                      f"velocity, up to e^(β‖B_h‖₂)‖V_h‖_F = e^{velocity:.4g}, passes e^{VELOCITY_EXPONENT_LIMIT:.4g}, past which "
                      "a step's tokens cannot be put back on the sphere; the run stops on NaN/Inf where the tokens get "
                      "near a head's top singular directions (scale V_h or β down)", ConfigNote, stacklevel=4)


def _graded_checks(cfg: dict[str, Any]) -> None:
    """``grid.family = "graded"`` needs its centres, and builds (the geometry is checked before any work)."""
    grid = cfg["grid"]
    if grid["family"] != "graded":
        return
    if grid["refine_centres"] is None:
        raise ConfigError("grid.refine_centres", "grid.family = 'graded' needs the centres of its fine caps, "
                          "e.g. refine_centres = [[1, 0, 0], [-1, 0, 0]]")
    if cfg["model"]["d"] != 3:
        raise ConfigError("grid.family", f"graded meshes are meshes of S² (model.d = 3), got model.d = {cfg['model']['d']}")
    from meanfield.geometry.graded import graded_points  # local: the geometry imports numpy and scipy

    graded_points(grid["cells"], grid["refine_centres"], radius=float(grid["refine_radius"]),
                  factor=float(grid["refine_factor"]), grading=float(grid["grading"]))


def _norm_checks(cfg: dict[str, Any]) -> None:
    """``model.norm`` ≠ "post" (:mod:`meanfield.normalization`) runs with the particle solver, with tokens W2 can read
    (noiseless: :func:`_noise_checks`)."""
    model, solver = cfg["model"], cfg["solver"]
    norm = model["norm"]
    if model["ngpt_alpha"] != SCHEMA["model"]["ngpt_alpha"].default and norm != "ngpt":
        raise ConfigError("model.ngpt_alpha", f"applies to norm = 'ngpt', got norm = {norm!r}")
    if norm == "post":
        return
    if solver["kind"] != "particle":
        raise ConfigError("model.norm", f"norm = {norm!r} is simulated by the particle solver (solver.kind = 'particle'), got solver.kind = {solver['kind']!r}")
    if norm in ("pre", "peri") and solver["steady_tol"] > 0:  # the test had read θ̇ alone: "steady" while ṙ ≈ 1
        raise ConfigError("solver.steady_tol", f"{solver['steady_tol']:g}: the tokens of norm = {norm!r} (ẋ = {'A' if norm == 'pre' else 'A/‖A‖'}) "
                                               "keep moving once their directions have settled, their radii growing, so the speed "
                                               "test would stop a run that is not at rest (use 0 and a t_final)")
    if norm in ("pre", "peri") and cfg["track"]["concentration"]:
        raise ConfigError("track.concentration", f"W2 to Π♯ρ₀ is measured on the sphere; the tokens of norm = {norm!r} have radii (use norm = 'post' or 'ngpt')")


def _kernel_width_note(cfg: dict[str, Any]) -> None:
    r"""A note where the mesh is coarser than the kernel (:func:`kernel_width_message`; the JKO grid variant at β = 256
    on 50 cells had run to energies of 1e160 without a word)."""
    from meanfield.geometry.grid_config import cells_of_grid  # local: the geometry imports numpy and scipy

    message = kernel_width_message(float(cfg["model"]["beta"]), cells_of_grid(cfg["grid"]), key="grid.cells")
    if message is not None:
        warnings.warn(message, ConfigNote, stacklevel=4)


def kernel_width_message(beta: float, cells: int, *, key: str, mesh: str = "the mesh's") -> str | None:
    r"""What to say where a mesh of ``cells`` cells is coarser than the kernel: a mean spacing :math:`\sqrt{4\pi/N}`
    above twice its width :math:`\beta^{-1/2}`, where a grid run follows its cells more than the flow; ``None`` where it
    is not (a mesh near the kernel's width is the user's choice) or :math:`\beta \le 0`.  ``key`` names where the cells are given."""
    spacing = math.sqrt(4 * math.pi / cells)
    if not beta > 0 or not spacing > 2.0 * beta ** -0.5:  # (β = 0: no kernel width)
        return None
    return (f"{mesh} {cells} cells are {spacing:.3g} apart, wider than the kernel (β^(-1/2) = {beta ** -0.5:.3g} at "
            f"β = {beta:g}): the grid does not resolve this flow; about {math.ceil(4 * math.pi * beta)} cells do ({key})")


def mask_refusal(kind: str, *, on_grid: bool) -> str | None:
    """Why a solver of ``kind`` (``solver.kind``) cannot integrate a causal mask, or ``None`` where it can.

    Shared by the config's checks and the solvers' own (``mf.solve`` takes no config)."""
    if on_grid:
        return (f"mask = 'causal' needs an order of the tokens; the grid {'JKO scheme' if kind == 'jko' else 'solver'} evolves "
                "a density on a mesh, which has none (use solver.kind = 'particle')")
    if kind == "jko":
        return ("mask = 'causal': the JKO scheme is a minimizing movement of the interaction energy, and the causal system is "
                "no gradient flow (Karagodin, Polyanskiy and Rigollet, arXiv 2411.04990); use solver.kind = 'particle'")
    if kind == "zero-temperature":
        return ("mask = 'causal': the zero-temperature field is the β → ∞ limit for a measure of full support, which token i's "
                "causal prefix is not; use solver.kind = 'particle'")
    return None


def check_mask(mask: str, kind: str, *, on_grid: bool) -> None:
    """``model.mask = "causal"`` needs tokens in an order and a solver that integrates the masked field: a
    :class:`ConfigError` naming ``model.mask`` otherwise (the config's check, and the solvers' for ``mf.solve``)."""
    if mask == "none":
        return
    why = mask_refusal(kind, on_grid=on_grid)
    if why is not None:
        raise ConfigError("model.mask", why)


def _mask_checks(cfg: dict[str, Any], *, on_grid: bool) -> None:
    check_mask(cfg["model"]["mask"], cfg["solver"]["kind"], on_grid=on_grid)


def _authors_checks(cfg: dict[str, Any], *, on_grid: bool) -> None:
    """Checks of the keys of the experiments of Massucco et al. (arXiv 2605.18870): clusters, combine, num_heads, [weights]."""
    from meanfield.build import replicate_heads
    from meanfield.heads import heads_from_config

    model, init, weights = cfg["model"], cfg["init"], cfg["weights"]
    d = model["d"]
    if model["combine"] == "mean" and model["attention"] == "pooled":
        raise ConfigError("model.combine", "'mean' applies to attention = 'softmax', 'unnormalized' or 'relu'; pooled attention already normalises over the heads (use 'sum')")
    if model["num_heads"] is not None:
        if isinstance(model["heads"], str):
            raise ConfigError("model.num_heads", "a checkpoint fixes its heads; num_heads applies to [[model.heads]] tables")
        heads_from_config(replicate_heads(model["heads"], model["num_heads"]), d=d, seed=model["seed"])
    if init["kind"] == "clusters":
        from meanfield.geometry.sphere import cluster_centers

        if on_grid:
            raise ConfigError("init.kind", "kind='clusters' gives particles; it needs a particle solver")
        try:
            cluster_centers(init["centers"], d)
        except (TypeError, ValueError) as exc:
            raise ConfigError("init.centers", str(exc)) from None
    schedule = weights["schedule"]
    moving = schedule in ("ou", "relaxation")
    for key, default in (("initial", "mean"), ("noise", "isotropic"), ("integrator", "auto"), ("mean", None)):
        if weights[key] != default and not moving:
            raise ConfigError(f"weights.{key}", f"applies to schedule = 'ou' or 'relaxation', got schedule = {schedule!r}")
    if weights["mean"] is not None:
        from meanfield.heads.schedules import matrix_value

        matrix_value(weights["mean"], d, key="weights.mean")
    if schedule == "relaxation":
        from meanfield.heads.schedules import relaxation_target

        if weights["integrator"] == "exact":
            raise ConfigError("weights.integrator", "schedule = 'relaxation' has no exact transition; use 'euler-maruyama' (or 'auto')")
        if weights["target"] is None:
            raise ConfigError("weights.target", "schedule = 'relaxation' needs target = [[…], …], a d×d matrix of numbers or expressions in t, phi")
        relaxation_target(weights["target"], d)
    elif weights["target"] is not None:
        raise ConfigError("weights.target", f"applies to schedule = 'relaxation', got schedule = {schedule!r}")
    if moving:  # an explicit Euler weight path with rate × dt > 2 diverges whatever t_final (it had run on while finite)
        from meanfield.heads.schedules import check_euler_step

        check_euler_step(weights, note_overshoot=True)
    if moving and weights["initial"] == "mean" and (weights["schedule"] == "relaxation" or weights["mean"] is not None
                                                    or weights["noise"] != "isotropic" or weights["integrator"] == "euler-maruyama"):
        if not isinstance(model["heads"], str):
            import numpy as np

            for h, head in enumerate(heads_from_config(replicate_heads(model["heads"], model["num_heads"]), d=d, seed=model["seed"])):
                B = head.Q.T @ head.K
                if not np.allclose(head.V, B, rtol=1e-12, atol=1e-12 * max(1.0, float(np.max(np.abs(B))))):
                    from meanfield.heads.schedules import unaligned_sde_error

                    raise ConfigError(*unaligned_sde_error(weights, f"head {h}"))
    if (schedule == "ou" and weights["initial"] == "random-symmetric" and float(weights["sigma"]) > 0
            and int(model["seed"]) == int(weights["seed"])):
        # both draw from default_rng(seed): the first noise increment is the initial heads' own normals (the streams
        # are kept as they are: the authors' experiments, data/massucco_ou.toml and its variants, depend on them and
        # set other seeds)
        warnings.warn(f"model.seed = weights.seed = {int(model['seed'])}: the random-symmetric initial heads "
                      "(weights.initial) and the weight noise draw from one stream, so the first noise increment "
                      "repeats the initial heads' normals; give model.seed and weights.seed different values",
                      ConfigNote, stacklevel=4)


def _parse_value(text: str) -> Any:
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string
    if set(parsed) != {"v"}:  # (a value with a newline and more TOML after it had set the value, the rest dropped)
        raise ConfigError("--set", f"one key per --set: {text!r} holds more than a value (a newline, then more TOML)")
    return parsed["v"]


def _did_you_mean(name: str, *, bare: bool = False) -> str:
    """``"; did you mean solver.t_final?"`` for an unknown key or section ``name`` (``""`` where nothing is close).

    The same key in another section comes first (``model.t_final``: ``solver.t_final``; a top-level ``beta``:
    ``model.beta``), then keys spelt alike (:func:`difflib.get_close_matches`), those of ``name``'s own section
    before the others' (``model.bta``: ``model.beta``), then sections spelt alike (``modle``: ``model``).  With
    ``bare`` (a keyword of the Python API) a key that only one section has is given bare."""
    section, _, key = name.rpartition(".")
    full = [f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys]
    matches = [f for f in full if f.rpartition(".")[2] == key]
    if not matches:
        near = difflib.get_close_matches(key, sorted({k for keys in SCHEMA.values() for k in keys}), n=3, cutoff=0.75)
        matches = [f for word in near for f in full if f.rpartition(".")[2] == word]
        if section in SCHEMA and any(f.startswith(f"{section}.") for f in matches):
            matches = [f for f in matches if f.startswith(f"{section}.")]
    if not section and bare:
        names = [f.rpartition(".")[2] for f in matches]
        matches = [b if names.count(b) == 1 and sum(b in keys for keys in SCHEMA.values()) == 1 else f
                   for b, f in zip(names, matches)]
    if not section:
        matches = matches or difflib.get_close_matches(name, list(SCHEMA), n=1, cutoff=0.75)
    return f"; did you mean {' or '.join(dict.fromkeys(matches[:3]))}?" if matches else ""


def override_key(name: str) -> tuple[str, str]:
    """``"model.beta"`` or a bare ``"beta"`` (when only one section has it) → ``("model", "beta")``.

    Raises
    ------
    ConfigError
        For an unknown key, or a bare key that several sections have (``seed``: say ``init.seed``).
    """
    parts = name.split(".")
    if len(parts) == 2 and all(parts):
        section, key = parts
        if section not in SCHEMA:
            raise ConfigError(name, f"unknown section; expected one of {', '.join(SCHEMA)}{_did_you_mean(name)}")
        if key not in SCHEMA[section]:
            raise ConfigError(name, f"unknown key; allowed keys are {', '.join(SCHEMA[section])}{_did_you_mean(name)}")
        return section, key
    if len(parts) != 1 or not name:
        raise ConfigError(name, "expected a key such as 'beta' or 'model.beta'")
    owners = [section for section, keys in SCHEMA.items() if name in keys]
    if not owners:
        raise ConfigError(name, f"unknown config key; see the README's configuration table (e.g. beta, t_final, init.n){_did_you_mean(name, bare=True)}")
    if len(owners) > 1:
        choices = " or ".join(f"{section}.{name}" for section in owners)
        raise ConfigError(name, f"ambiguous: several sections have it; say {choices} (e.g. **{{'{owners[0]}.{name}': …}})")
    return owners[0], name


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply ``--set section.key=value`` (value in TOML syntax; bare words are strings)."""
    if "=" not in assignment:
        raise ConfigError("--set", f"expected key=value, got {assignment!r}")
    dotted, text = assignment.split("=", 1)
    dotted = dotted.strip()
    if len(dotted.split(".")) != 2 or not all(dotted.split(".")):
        raise ConfigError("--set", f"expected section.key=value, got {assignment!r}")
    section, key = override_key(dotted)
    raw.setdefault(section, {})[key] = _parse_value(text.strip())


#: the largest config file read (a config is a few kB; a file past this is another file given by mistake)
CONFIG_MAX_BYTES = 16 * 2**20


def read_toml(path: str | Path, *, key: str = "CONFIG") -> dict[str, Any]:
    """Parse a TOML file; a missing, unreadable, binary or malformed file is a :class:`ConfigError` naming it."""
    path = Path(path)
    if not path.exists():
        from meanfield.example_configs import example_hint

        raise ConfigError(key, f"file not found: {path}{example_hint(path)}")
    if path.is_dir():
        raise ConfigError(key, f"{path} is a folder, not a TOML file")
    try:  # the signature first, then at most CONFIG_MAX_BYTES (a run of 400 MB had been read whole, /dev/zero for ever)
        with open(path, "rb") as fh:
            data = fh.read(len(HDF5_SIGNATURE))
            if data.startswith(HDF5_SIGNATURE[:4]):
                raise ConfigError(key, f"{path} is an HDF5 file (a run?), not a TOML config; 'meanfield info {path}' reads runs")
            data += fh.read(CONFIG_MAX_BYTES + 1 - len(data))
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(key, f"{path} is larger than {CONFIG_MAX_BYTES // 2**20} MiB: not a TOML config")
    try:
        text = data.decode("utf-8-sig")  # (a byte-order mark, as some editors write, had been "Invalid statement")
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{path} is not a UTF-8 text file (byte {exc.start} cannot be decoded)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(key, f"{path} is not valid TOML: {exc}") from None


def load_config(
    source: str | Path | Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
    *,
    values: Mapping[str, Any] | None = None,
    source_key: str = "CONFIG",
) -> dict[str, Any]:
    """Read a TOML file (or take a mapping; ``None``: all defaults), apply overrides, resolve.

    Parameters
    ----------
    source : path, mapping or None
        A TOML file, a raw or resolved config mapping, or nothing (every default).
    overrides : iterable of str
        ``"section.key=value"`` assignments in TOML syntax (the CLI's ``--set``).
    values : mapping, optional
        Python values by key: ``{"beta": 9, "init.n": 500}`` (bare keys when one section has them; one key given
        twice, bare and dotted, is refused).  Here and in a mapping ``source``, a tuple or a NumPy array stands for a
        TOML array and a NumPy scalar for a number (:func:`plain_value`).
    source_key : str
        The name an error about ``source`` itself gives it: the CLI's ``CONFIG`` argument, the Python API's ``source``.

    Relative paths inside the file (``init.path``, ``file:`` matrices) are
    taken relative to the file's folder.
    """
    base: Path | None = None
    if source is None:
        raw: dict[str, Any] = {}
    elif isinstance(source, Mapping):
        raw = plain_value(source, "")  # a copy: tuples and NumPy arrays as lists, NumPy scalars as Python's
    elif isinstance(source, (str, os.PathLike)):  # (a PurePosixPath had been refused)
        source = Path(os.fspath(source))
        raw = read_toml(source, key=source_key)
        base = source.resolve().parent
        if not raw:  # (an empty file, or one of comments, had run the defaults without a word)
            overrides = list(overrides)  # (an iterator: read here and below)
            rest = "every other setting" if overrides or values else "every setting"
            warnings.warn(f"{source} sets no key: {rest} is the built-in default", ConfigNote, stacklevel=3)
    else:
        raise ConfigError(source_key, f"expected a TOML path, a mapping or None, got {type(source).__name__}")
    source_solver = dict(raw["solver"]) if isinstance(raw.get("solver"), Mapping) else {}
    overridden: set[tuple[str, str]] = set()
    for assignment in overrides:
        apply_override(raw, assignment)
        overridden.add(override_key(assignment.split("=", 1)[0].strip()))
    spelled: dict[tuple[str, str], str] = {}  # each key of ``values`` as the caller wrote it
    for name, value in (values or {}).items():
        section, key = override_key(name)
        if (section, key) in spelled:  # beta=2 and **{"model.beta": 3}: the later keyword had won in silence
            raise ConfigError(f"{section}.{key}", f"given twice, as {spelled[section, key]!r} and {name!r}; give it once")
        spelled[section, key] = name
        if not isinstance(raw.setdefault(section, {}), Mapping):
            raise ConfigError(section, "expected a table")
        raw[section][key] = plain_value(value, f"{section}.{key}")
        overridden.add((section, key))
    # the solver kind switched by an override (the README's --set solver.kind=jko on a file whose [solver] holds the
    # particle solver's dt): the file's settings for its own kind are not noted as unused by the new one (it had been
    # a note on every such run); an override's are
    switched: tuple[str, ...] = ()
    kind = SCHEMA["solver"]["kind"].default
    if ("solver", "kind") in overridden and raw["solver"]["kind"] != source_solver.get("kind", kind):
        switched = tuple(key for key in source_solver if ("solver", key) not in overridden)
    return resolve(raw, base=base, switched_from=switched)


def dumps(cfg: Mapping[str, Any]) -> str:
    """The resolved config as canonical JSON (sorted keys)."""
    return json.dumps(cfg, sort_keys=True)


def config_hash(cfg: Mapping[str, Any]) -> str:
    """Short stable hash of a resolved config (identifies a sweep case)."""
    import hashlib

    return hashlib.sha256(dumps(cfg).encode()).hexdigest()[:16]


def schema_markdown() -> str:
    """The config keys as a Markdown table (the README's *Configuration* section)."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for section, keys in SCHEMA.items():
        for key, spec in keys.items():
            default = "—" if spec.default is None else json.dumps(spec.default)
            lines.append(f"| `{section}.{key}` | {_type_name(spec.types)} | `{default}` | {spec.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m meanfield.config  → the README table
    print(schema_markdown())
