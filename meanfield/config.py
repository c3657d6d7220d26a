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
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meanfield.errors import ConfigError

__all__ = ["SCHEMA", "Key", "load_config", "resolve", "apply_override", "config_hash", "dumps", "schema_markdown"]


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


def _at_least(bound: float, *, strict: bool = False) -> Callable[[Any, str], None]:
    def check(value: Any, key: str) -> None:
        if not math.isfinite(value):
            raise ConfigError(key, f"must be finite, got {value!r}")
        if value < bound or (strict and value == bound):
            raise ConfigError(key, f"must be {'>' if strict else '>='} {bound:g}, got {value!r}")

    return check


def _finite(value: Any, key: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be finite, got {value!r}")
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ConfigError(f"{key}[{index}]", f"expected a number, got {item!r}")
            _finite(float(item), f"{key}[{index}]")


NUM = (int, float)
#: every accepted key, by section; ``model.heads`` is checked by :mod:`meanfield.heads`
SCHEMA: dict[str, dict[str, Key]] = {
    "model": {
        "d": Key((int,), 3, _at_least(2), "ambient dimension (tokens on S^{d-1})"),
        "beta": Key(NUM, 4.0, _at_least(0), "inverse temperature β ≥ 0"),
        "attention": Key((str,), "softmax", _choice("softmax", "unnormalized", "relu", "pooled"), "velocity law: softmax, unnormalized, relu or pooled (see meanfield.attention)"),
        "direction": Key((str,), "ascent", _choice("ascent", "descent"), "ascent of the energy (forward pass) or descent (seed 004 code)"),
        "heads": Key((list, str), None, None, "array of head tables, or 'checkpoint:PATH#layer=L'"),
        "seed": Key((int,), 0, _at_least(0), "seed of 'random' head matrices (head h uses seed + 1000 h unless it sets its own)"),
        "backend": Key((str,), "auto", _choice("auto", "blas", "fused", "numba", "numpy"), "attention kernel (auto: fused one-pass softmax for d ≤ 8 in float64, else blas)"),
        "precision": Key((str,), "float64", _choice("float64", "float32"), "score/exp arithmetic of the blas kernel (float32: ~2× faster, ~1e-6 relative error)"),
        "assumptions": Key((str,), "check", _choice("check", "warn", "skip"), "seed-002 Assumption 1 on (Q, K, V) when W2 to Π♯ρ₀ is tracked"),
    },
    "init": {
        "kind": Key((str,), "uniform", _choice("uniform", "vmf", "equiangular", "orthogonal", "file", "mixture", "function", "sentence"), "initial measure"),
        "n": Key((int,), 256, _at_least(1), "number of tokens (particles)"),
        "seed": Key((int,), 0, _at_least(0), "sampler seed"),
        "path": Key((str,), None, None, "kind='file': an (n, d) .npy array (grid: an (N,) mass array)"),
        "mean": Key((list,), None, _finite, "kind='vmf': mean direction"),
        "kappa": Key(NUM, 4.0, _at_least(0), "kind='vmf': concentration κ"),
        "gamma": Key(NUM, 0.0, _finite, "kind='equiangular': ⟨x_i,x_j⟩ = γ"),
        "components": Key((list,), None, None, "kind='mixture' (grid): list of {weight, kind, mean, kappa}"),
        "expr": Key((str,), None, None, "kind='function' (grid): density as an expression in x, y, z"),
        "sentence": Key((str,), None, None, "kind='sentence': text whose token embeddings (word + position, LayerNorm, normalised) are the initial tokens"),
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
        "steady_tol": Key(NUM, 0.0, _at_least(0), "stop when max_i |ẋ_i| < steady_tol (0: never)"),
        "cfl": Key(NUM, 0.5, _at_least(0, strict=True), "grid: CFL number"),
        "tau": Key(NUM, 0.05, _at_least(0, strict=True), "jko: step τ"),
        "variant": Key((str,), "particle", _choice("particle", "grid"), "jko: particle or grid"),
        "mobility": Key((str,), "frozen", _choice("frozen", "implicit"), "jko: mobility frozen at μ_k or iterated"),
        "tol": Key(NUM, 1e-10, _at_least(0, strict=True), "jko: inner-solver tolerance"),
    },
    "grid": {
        "cells": Key((int,), 2000, _at_least(12), "number of cells N"),
        "family": Key((str,), "fibonacci", _choice("fibonacci", "icosahedral"), "generators of the Voronoi mesh"),
        "dt_max": Key(NUM, 0.0, _at_least(0), "largest time step of the grid solver (0: only the CFL condition and the save times limit it)"),
    },
    "weights": {
        "schedule": Key((str,), "constant", _choice("constant", "ou", "oscillating"), "time dependence of the heads"),
        "kappa": Key(NUM, 1.0, _at_least(0), "ou: mean-reversion rate κ"),
        "sigma": Key(NUM, 0.1, _at_least(0), "ou: noise σ"),
        "seed": Key((int,), 0, _at_least(0), "ou: noise seed"),
        "dt": Key(NUM, 0.01, _at_least(0, strict=True), "ou: time step of the stored weight path"),
        "amplitude": Key(NUM, 0.5, _at_least(0), "oscillating: amplitude A"),
        "omega": Key(NUM, 1.0, _finite, "oscillating: angular frequency ω"),
        "phases": Key((str,), "spread", _choice("spread", "equal", "random"), "oscillating: phases φ_h = 2πh/H, all 0, or uniform from weights.seed"),
    },
    "track": {
        "energy": Key((bool,), True, None, "record E_multi and E_h at every frame"),
        "concentration": Key((bool,), False, None, "record W2(ρ_t, Π♯ρ₀) and the distance to V's dominant eigenspace"),
        "w2_method": Key((str,), "exact", _choice("exact", "sinkhorn", "sliced"), "estimator for the concentration tracker"),
    },
}


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", bool: "true or false"}
    if types == NUM:
        return "a number"
    return " or ".join(names.get(t, t.__name__) for t in types)


def _check_value(spec: Key, value: Any, key: str) -> Any:
    if isinstance(value, bool) and bool not in spec.types:
        raise ConfigError(key, f"expected {_type_name(spec.types)}, got {value!r}")
    if not isinstance(value, spec.types):
        raise ConfigError(key, f"expected {_type_name(spec.types)}, got {type(value).__name__} {value!r}")
    if spec.types == NUM:
        value = float(value)
    if spec.check is not None:
        spec.check(value, key)
    return value


def resolve(raw: Mapping[str, Any], *, base: Path | None = None) -> dict[str, Any]:
    """Validate a raw config mapping and fill in every default.

    Raises
    ------
    ConfigError
        For an unknown section or key, a wrong type, a non-finite number, or
        a value out of range; the message names the key.
    """
    resolved: dict[str, Any] = {}
    for section in raw:
        if section not in SCHEMA:
            raise ConfigError(section, f"unknown section; expected one of {', '.join(SCHEMA)}")
        if not isinstance(raw[section], Mapping):
            raise ConfigError(section, "expected a table")
    for section, keys in SCHEMA.items():
        given = raw.get(section, {})
        out: dict[str, Any] = {}
        for key in given:
            if key not in keys:
                raise ConfigError(f"{section}.{key}", f"unknown key; allowed keys are {', '.join(keys)}")
        for key, spec in keys.items():
            if key in given:
                out[key] = _check_value(spec, given[key], f"{section}.{key}")
            else:
                out[key] = copy.deepcopy(spec.default)
        resolved[section] = out
    if resolved["solver"]["kind"] == "grid" and "method" not in raw.get("solver", {}):
        resolved["solver"]["method"] = "ssprk3"  # the grid's default integrator
    _cross_checks(resolved, base=base, init_given=raw.get("init", {}))
    return resolved


def _cross_checks(cfg: dict[str, Any], *, base: Path | None, init_given: Mapping[str, Any] | None = None) -> None:
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
        heads_from_config(heads, d=d, seed=model["seed"], base=base)  # raises ConfigError naming the key
        if base is not None:  # store `file:` matrices by absolute path, so runs and sweeps find them anywhere
            for spec in heads:
                for name in ("Q", "K", "V"):
                    value = spec.get(name)
                    if isinstance(value, str) and value.startswith("file:") and not Path(value[5:]).is_absolute():
                        spec[name] = f"file:{base / value[5:]}"
    elif isinstance(heads, str):
        if not heads.startswith("checkpoint:"):
            raise ConfigError("model.heads", f"expected an array of head tables or 'checkpoint:PATH#layer=L', got {heads!r}")
        from meanfield.weights import parse_checkpoint_spec  # a malformed spec fails before any work

        spec = parse_checkpoint_spec(heads)
        if base is not None and spec.path.lower() != "minilm" and not Path(spec.path).is_absolute():
            model["heads"] = f"checkpoint:{base / spec.path}#{heads.rpartition('#')[2]}"
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
        if checkpoint and base is not None and checkpoint.lower() != "minilm" and not Path(checkpoint).is_absolute():
            init["checkpoint"] = str(base / checkpoint)
    if init["kind"] == "file":
        if not init["path"]:
            raise ConfigError("init.path", "kind='file' needs path = \"x0.npy\"")
        path = Path(init["path"])
        if base is not None and not path.is_absolute():
            path = base / path
        if not path.exists():
            raise ConfigError("init.path", f"file not found: {path}")
        init["path"] = str(path)
        if not on_grid:
            import numpy as np

            try:
                rows = int(np.load(path, mmap_mode="r", allow_pickle=False).shape[0])
            except (OSError, ValueError, IndexError) as exc:
                raise ConfigError("init.path", f"cannot read an (n, d) array from {path}: {exc}") from None
            if init_given.get("n") is not None and init_given["n"] != rows:
                raise ConfigError("init.n", f"n={init_given['n']} but {path} holds {rows} tokens")
            init["n"] = rows  # the stored config says how many tokens the run has
    if init["kind"] in ("mixture", "function") and not on_grid:
        raise ConfigError("init.kind", f"kind={init['kind']!r} describes a density; it needs a grid solver (solver.kind = 'grid', or 'jko' with variant = 'grid')")
    if on_grid and d != 3:
        raise ConfigError("model.d", f"the grid solver works on S² (d = 3), got d={d}")
    if model["precision"] == "float32" and model["backend"] not in ("auto", "blas"):
        raise ConfigError("model.precision", f"float32 is available with backend = 'blas' (or 'auto') only, got backend = {model['backend']!r}")
    if model["backend"] == "fused" and model["attention"] != "softmax":
        raise ConfigError("model.backend", f"'fused' computes softmax attention only, got attention = {model['attention']!r}")
    if solver["kind"] == "grid" and solver["method"] not in ("ssprk2", "ssprk3"):
        raise ConfigError("solver.method", f"the grid solver takes 'ssprk2' or 'ssprk3', got {solver['method']!r}")
    if solver["kind"] in ("particle", "zero-temperature") and solver["method"] in ("ssprk2", "ssprk3"):
        raise ConfigError("solver.method", f"{solver['method']!r} is a grid method; particles take euler, heun, rk4 or rk45")
    if solver["save_every"] > max(solver["t_final"], 0) and solver["t_final"] > 0:
        solver["save_every"] = solver["t_final"]


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply ``--set section.key=value`` (value in TOML syntax; bare words are strings)."""
    if "=" not in assignment:
        raise ConfigError("--set", f"expected key=value, got {assignment!r}")
    dotted, text = assignment.split("=", 1)
    dotted = dotted.strip()
    parts = dotted.split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError("--set", f"expected section.key=value, got {assignment!r}")
    section, key = parts
    if section not in SCHEMA:
        raise ConfigError(dotted, f"unknown section; expected one of {', '.join(SCHEMA)}")
    if key not in SCHEMA[section]:
        raise ConfigError(dotted, f"unknown key; allowed keys are {', '.join(SCHEMA[section])}")
    raw.setdefault(section, {})[key] = _parse_value(text.strip())


def load_config(
    source: str | Path | Mapping[str, Any] | None = None, overrides: Iterable[str] = ()
) -> dict[str, Any]:
    """Read a TOML file (or take a mapping; ``None``: all defaults), apply overrides, resolve.

    Relative paths inside the file (``init.path``, ``file:`` matrices) are
    taken relative to the file's folder.
    """
    base: Path | None = None
    if source is None:
        raw: dict[str, Any] = {}
    elif isinstance(source, Mapping):
        raw = copy.deepcopy(dict(source))
    else:
        path = Path(source)
        if not path.exists():
            raise ConfigError("CONFIG", f"file not found: {path}")
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("CONFIG", f"{path} is not valid TOML: {exc}") from None
        base = path.resolve().parent
    for assignment in overrides:
        apply_override(raw, assignment)
    return resolve(raw, base=base)


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
