r"""Parameter sweeps: one base config, many cases, run on a Dask cluster.

.. math::

    \{\,c_k\,\}_{k} = \{\text{base} \oplus \text{set} \oplus \text{case}_j \oplus g\;:\;
    j \in \text{cases},\ g \in \textstyle\prod_{\text{key}} \text{grid}[\text{key}]\,\}

A sweep file (TOML) names a base config and the cases to run::

    base = "default.toml"              # relative to the sweep file, or absolute
    results = "mypkg.metrics:scalars"  # optional: extra scalars per case
    retries = 1                        # optional: re-runs of a failed case (default 1)

    [set]                              # optional: overrides applied to every case (a [[cases]] key overrides it)
    "solver.t_final" = 5.0

    [grid]                             # the Cartesian product of these lists
    "model.beta" = [4.0, 16.0, 64.0]
    "init.seed" = [0, 1, 2]

or, instead of (or combined with: each case × every grid point) ``[grid]``, a
list of cases::

    [[cases]]
    "model.beta" = 4.0
    [[cases]]
    model.beta = 9.0                   # dotted bare keys (nested tables) work too
    init.n = 64

Every case is resolved up front with :func:`meanfield.config.load_config`
(the base file plus ``section.key=value`` overrides), so bad input (also a key given twice in one table, as
``"model.beta"`` and ``model.beta``, or in ``[set]`` and ``[grid]``) raises
:class:`~meanfield.errors.ConfigError` (exit status 2) before any work.  A case
is identified by the hash of its resolved config
(:func:`meanfield.config.config_hash`); two cases with the same config are an
error.

Where it runs
-------------
* ``workers=0``: in this process, one case after the other (no Dask).
* default: a :class:`distributed.LocalCluster` of single-threaded worker
  processes, one per core (at most one per case);
* ``scheduler="tcp://host:8786"``: any running Dask cluster (see the README for
  SLURM with ``dask-jobqueue``).

Processes × threads never oversubscribe the cores: each case calls
:func:`meanfield.kernels.jit.set_num_threads` with ``cores // (worker threads on its
host)`` (numba's thread count is per thread, so it is set inside the task; on the
local cluster at most the driver's ``MEANFIELD_NUM_THREADS``, which ``--threads N`` sets), and
local workers start with ``OMP/OPENBLAS/MKL_NUM_THREADS=1`` (the attention
kernels size their own pools from ``MEANFIELD_NUM_THREADS``).  On a worker the
sweep could not measure, ``MEANFIELD_NUM_THREADS`` from its environment is
used, else 1.

Results
-------
``DIR/cases/<hash>.h5`` holds each case's run (:func:`meanfield.solvers.run.simulate_config`),
and ``DIR/cases/<hash>.json`` the record of a successful case, written by the worker.
``DIR/ledger.jsonl`` gets one JSON line per finished case, appended and
``fsync``-ed as soon as the case ends: it is the durable record.
``DIR/results.csv`` (and ``results.parquet`` when :mod:`pyarrow` is installed)
is rebuilt from it — one row per case: ``case``, ``hash``, the swept keys
(their resolved values), ``status`` (``ok``/``failed``), ``error``,
``attempts``, ``wall_time``, and the scalars of :func:`case_scalars`
(``frames``, ``t_last``, ``energy_final``, ``min_inner_product``, and with the
concentration tracker ``t_min``, ``W2_min``), with time-dependent heads ``G2_plateau`` and ``slope2_plateau`` (the means over
:math:`t\ge T/2` of ``diagnostics/authors_G2`` and ``slope2``), plus those of the ``results`` hook
(``f(path, cfg) -> Mapping[str, float]``, which may also override the built-in ones; its module must be
importable, by the driver and by every worker: on their ``PYTHONPATH``, as the sweep file's folder is not).
When ``weights.seed`` is swept, its values are Monte-Carlo paths of the weights' noise:
``DIR/aggregate.csv`` then holds, per value of the other swept keys (``model.num_heads`` …),
the mean ± std of the plateaus over the paths (:func:`aggregate_paths`).

Faults
------
A case that raises (``RunFailed``: NaN/Inf, …) or whose worker dies is re-run
``retries`` times (default once, from scratch) and then recorded as
``failed`` with its errors; the sweep goes on.  A case that fails on bad input
(:class:`~meanfield.errors.ConfigError`, which fails the same way every time) is
recorded at once, unless it came from an ``OSError`` (a disk or a file system).  A killed sweep continues with
``resume=True``: cases already in the ledger are skipped (failed ones too,
unless ``retry_failed=True``); a case that finished on a worker after the
driver was killed is taken from its ``cases/<hash>.json`` without running
again (``recovered`` in the ledger); and a case interrupted mid-run continues
its HDF5 run from the last saved frame (``resumed_frames`` in its row).  The
``wall_time`` of such a case covers the resumed part only.

Examples
--------
>>> rows = run_sweep({"base": {"solver": {"t_final": 0.2}}, "grid": {"model.beta": [1.0, 2.0]}},
...                  "/tmp/sweep-doc", workers=0, quiet=True)  # doctest: +SKIP
>>> [r["status"] for r in rows]  # doctest: +SKIP
['ok', 'ok']
"""
from __future__ import annotations

import csv
import importlib
import io
import itertools
import json
import logging
import math
import os
import re
import sys
import time
import tomllib
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.config import SCHEMA, config_hash, load_config, plain_value
from meanfield.errors import ConfigError, ConfigNote
from meanfield.io.lock import WriterLock

__all__ = [
    "SweepCase",
    "Sweep",
    "load_sweep",
    "run_sweep",
    "run_case",
    "case_scalars",
    "aggregate_paths",
    "read_ledger",
    "TaskPool",
    "RESULT_COLUMNS",
    "SWEEP_KEYS",
    "check_workers",
    "WORKERS_PER_CORE",
]

#: keys a sweep file may hold at its top level
SWEEP_KEYS = ("base", "set", "grid", "cases", "results", "retries")
#: fixed columns of ``results.csv`` after ``case, hash`` and the swept keys
RESULT_COLUMNS = (
    "status",
    "error",
    "attempts",
    "wall_time",
    "frames",
    "t_last",
    "energy_final",
    "min_inner_product",
    "t_min",
    "W2_min",
)
#: columns written after the scalars
TRAILING_COLUMNS = ("stop_reason", "resumed_frames", "path")
#: the files a sweep writes into ``--out`` beside ``sweep.json`` (a folder holding them without it is not a sweep's)
SWEEP_TABLES = ("results.csv", "results.parquet", "aggregate.csv", "ledger.jsonl")
#: least time between two rebuilds of results.csv while cases are finishing
CSV_MIN_INTERVAL_S = 1.0


# --------------------------------------------------------------------------- #
# the sweep definition
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class SweepCase:
    """One case of a sweep.

    Attributes
    ----------
    index : int
        Position in the sweep (row order of ``results.csv``).
    params : dict
        The swept keys (``"model.beta"`` …) and their values, as given.
    overrides : tuple of str
        ``section.key=value`` assignments (``[set]`` first, then the case's own).
    config : dict
        The resolved config.
    hash : str
        :func:`meanfield.config.config_hash` of ``config``; names ``cases/<hash>.h5``.
    """

    index: int
    params: dict[str, Any]
    overrides: tuple[str, ...]
    config: dict[str, Any]
    hash: str


@dataclass(frozen=True)
class Sweep:
    """A resolved sweep: every case's config, checked.

    Attributes
    ----------
    base : str or dict or None
        Base config file (absolute path), an inline config table, or ``None`` (all defaults).
    parameters : tuple of str
        The swept keys, in order (the parameter columns of ``results.csv``).
    cases : tuple of SweepCase
    results : str or callable or None
        ``"module:function"`` hook adding scalars per case.
    retries : int
        Re-runs of a failed case before it is recorded as failed.
    source : Path or None
        The sweep file.
    """

    base: str | dict[str, Any] | None
    parameters: tuple[str, ...]
    cases: tuple[SweepCase, ...]
    results: str | Callable[..., Mapping[str, Any]] | None = None
    retries: int = 1
    source: Path | None = None
    definition: dict[str, Any] = field(default_factory=dict)


def _toml_value(value: Any, key: str) -> str:
    """``value`` in TOML syntax (so that ``apply_override`` parses it back exactly)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item, key) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v, key)}" for k, v in value.items()) + "}"
    raise ConfigError(key, f"cannot use a value of type {type(value).__name__} ({value!r}) as a config value")


def _flatten(table: Any, where: str) -> dict[str, Any]:
    """``{"model": {"beta": 4}}`` and ``{"model.beta": 4}`` both give ``{"model.beta": 4}``."""
    if not isinstance(table, Mapping):
        raise ConfigError(where, f"expected a table of section.key = value, got {table!r}")
    out: dict[str, Any] = {}
    written: dict[str, str] = {}  # each key as the file wrote it: "model.beta" (quoted) or model.beta (a nested table)

    def put(key: str, value: Any, spelling: str) -> None:
        if key in out:  # both are valid TOML (two keys to tomllib): the later had silently dropped the other's values
            raise ConfigError(f"{where}.{key}", f"given twice ({written[key]} and {spelling}); set it once")
        out[key] = value
        written[key] = spelling

    for key, value in table.items():
        if "." in key:
            put(key, value, json.dumps(key))
        elif key in SCHEMA and isinstance(value, Mapping):
            for sub, item in value.items():
                put(f"{key}.{sub}", item, f"{key}.{sub}")
        else:
            raise ConfigError(f"{where}.{key}", "expected a dotted config key such as \"model.beta\"")
    for key in out:
        section, _, name = key.partition(".")
        if section not in SCHEMA:
            raise ConfigError(f"{where}.{key}", f"unknown section {section!r}; expected one of {', '.join(SCHEMA)}")
        if name not in SCHEMA[section]:
            raise ConfigError(f"{where}.{key}", f"unknown key; allowed keys of [{section}] are {', '.join(SCHEMA[section])}")
    return out


def _cell(value: Any) -> Any:
    """A parameter value as a table cell: scalars as they are, anything else as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)


def _check_hook(spec: Any) -> str | Callable[..., Mapping[str, Any]] | None:
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ConfigError("results", f"expected \"module:function\", got {spec!r}")
    _resolve_hook(spec)
    return spec


def _resolve_hook(spec: str | Callable[..., Mapping[str, Any]]) -> Callable[..., Mapping[str, Any]]:
    if callable(spec):
        return spec
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("results", f"cannot import {module_name!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError("results", f"{module_name!r} has no function {func_name!r}")
    return func


def _same_value(a: Any, b: Any) -> bool:
    """Whether two swept values are one (1 and 1.0 alike; strings, lists and tables by their TOML form)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def load_sweep(source: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None) -> Sweep:
    """Read a sweep (TOML file or mapping) and resolve every case's config.

    Parameters
    ----------
    source : path or mapping
        Sweep file, or the same content as a dict (where the file has an array, a tuple or a NumPy array too,
        such as ``{"grid": {"model.beta": np.logspace(0, 2, 5)}}``: :func:`meanfield.config.plain_value`).
    base_dir : path, optional
        Folder against which a relative ``base`` is taken when ``source`` is a
        mapping (default: the current directory; for a file: its folder).

    Returns
    -------
    Sweep

    Raises
    ------
    ConfigError
        For an unreadable sweep file, an unknown key, a grid entry that is not a
        non-empty list, a config error in any case (the message names the key
        and the case), duplicate cases, or a case that needs a solver that is
        not installed.
    """
    path: Path | None = None
    if isinstance(source, Mapping):
        raw = plain_value(source, "")  # a grid of np.logspace or a tuple is a list (it had been refused), NumPy scalars
        # Python's (np.float64(1.0) had been written to the case's override as such, and refused)
        folder = Path(base_dir) if base_dir is not None else Path.cwd()
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError("SWEEP", f"file not found: {path}")
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("SWEEP", f"{path} is not valid TOML: {exc}") from None
        folder = path.resolve().parent
    for key in raw:
        if key not in SWEEP_KEYS:
            raise ConfigError(key, f"unknown sweep key; allowed keys are {', '.join(SWEEP_KEYS)}")

    base: str | dict[str, Any] | None = raw.get("base")
    if isinstance(base, str):
        base_path = Path(base).expanduser()
        if not base_path.is_absolute():
            base_path = folder / base_path
        if not base_path.is_file():
            raise ConfigError("base", f"config file not found: {base_path}")
        if path is not None and base_path.resolve() == path.resolve():
            raise ConfigError("base", f"{base_path} is this sweep file itself; give the run config the sweep varies, such as data/default.toml")
        base = str(base_path.resolve())
    elif base is not None and not isinstance(base, Mapping):
        raise ConfigError("base", f"expected a config file name or a config table, got {base!r}")
    elif isinstance(base, Mapping):
        base = dict(base)

    fixed = _flatten(raw.get("set", {}), "set")
    grid = _flatten(raw.get("grid", {}), "grid")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key}", f"expected a non-empty list of values, got {values!r}")
    raw_cases = raw.get("cases", [{}])
    if not isinstance(raw_cases, list) or not raw_cases:
        raise ConfigError("cases", "expected a non-empty array of tables ([[cases]])")
    case_tables = [_flatten(table, f"cases[{k}]") for k, table in enumerate(raw_cases)]
    for key in fixed:
        if key in grid:  # the [grid] value had silently won
            raise ConfigError(f"set.{key}", "is also swept in [grid]; set it in one place only")
    for key, values in grid.items():
        for k, value in enumerate(values):
            if any(_same_value(value, other) for other in values[:k]):
                raise ConfigError(f"grid.{key}", f"lists {value!r} twice: each value is one case")
    for k, table in enumerate(case_tables):
        for key in table:
            if key in grid:
                raise ConfigError(f"cases[{k}].{key}", "is also swept in [grid]; set it in one place only")
    retries = raw.get("retries", 1)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError("retries", f"expected an integer >= 0, got {retries!r}")
    hook = _check_hook(raw.get("results"))

    parameters: list[str] = []
    for table in case_tables:
        parameters.extend(key for key in table if key not in parameters)
    parameters.extend(key for key in grid if key not in parameters)

    from meanfield.solvers.run import check_buildable  # local: the solvers import SciPy and numba

    cases: list[SweepCase] = []
    seen: dict[str, int] = {}
    notes: dict[str, list[int]] = {}
    grid_points = list(itertools.product(*grid.values())) if grid else [()]
    for table in case_tables:
        for point in grid_points:
            params = {**table, **dict(zip(grid, point))}
            index = len(cases)
            values = {**fixed, **params}
            overrides = tuple(f"{key}={_toml_value(value, key)}" for key, value in values.items())
            where = f"sweep case {index}: " + ", ".join(f"{k}={_cell(v)}" for k, v in params.items()) if params else f"sweep case {index}"
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    cfg = load_config(base, overrides)
                check_buildable(cfg)  # what only a built run refuses, before the folder is made
            except ConfigError as exc:
                raise ConfigError(exc.key, f"{exc.message} ({where})") from None
            for item in caught:  # the notes once each, with their cases, below (a sweep over init.kind × seeds had
                # printed one identical line per case); other warnings as they came
                if issubclass(item.category, ConfigNote):
                    notes.setdefault(str(item.message), []).append(index)
                else:
                    warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
            digest = config_hash(cfg)
            if digest in seen:
                raise ConfigError("cases", f"cases {seen[digest]} and {index} resolve to the same config (hash {digest}); remove one")
            seen[digest] = index
            cases.append(SweepCase(index, params, overrides, cfg, digest))
    for message, indices in notes.items():
        which = "every case" if len(indices) == len(cases) else f"case{'s' * (len(indices) > 1)} {_ranges(indices)}"
        warnings.warn(f"{message} ({which})", ConfigNote, stacklevel=2)

    definition = {
        "source": str(path.resolve()) if path is not None else None,
        "base": base,
        "set": fixed,
        "grid": grid,
        "cases": case_tables if "cases" in raw else [],
        "results": hook if isinstance(hook, str) or hook is None else getattr(hook, "__qualname__", repr(hook)),
        "retries": retries,
    }
    return Sweep(base, tuple(parameters), tuple(cases), hook, retries, path, definition)


# --------------------------------------------------------------------------- #
# one case (runs on a worker)
# --------------------------------------------------------------------------- #
def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return ""


def _threads_here(threads: int | Mapping[str, int] | None) -> int | None:
    """Kernel threads for a case on this worker (``None``: leave the process as it is)."""
    if threads is None or isinstance(threads, int):
        return threads
    address = _worker_address()
    if address in threads:
        return int(threads[address])
    env = os.environ.get("MEANFIELD_NUM_THREADS")
    return max(1, int(env)) if env else 1


def _frames_on_disk(path: Path) -> int:
    """Committed frames of a resumable run file (0: missing, unreadable, failed or empty).

    Read as ``--resume`` reads it (:class:`~meanfield.io.runfile.RunReader`): a file left by a killed
    writer is still marked open in SWMR mode, which a plain read refuses, and the case had been rerun
    from its start with its committed frames deleted; the frames counted are the committed ones."""
    from meanfield.io.runfile import RunReader

    try:
        reader = RunReader(path, key="case")
    except (OSError, KeyError, ValueError):
        return 0
    if reader.status == "failed" and not reader.info.get("storage_failed"):
        return 0
    return reader.frames


def _check_same_sweep(stored: Path, spec: Sweep) -> None:
    """``--resume`` continues the sweep stored in ``stored`` (its ``sweep.json``) only with the same definition: another
    sweep's cases would replace its table, while its runs stayed on disk."""
    try:
        before = json.loads(stored.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("--resume", f"cannot read {stored} ({exc}); it does not describe a sweep") from None
    resolved = before.pop("cases_resolved", None)
    now = json.loads(json.dumps(spec.definition, sort_keys=True, default=_json_default))
    # the content, not where the file lies: an identical copy (on the cluster's scratch) had been "another sweep"
    before.pop("source", None)
    now.pop("source", None)
    if before != now:
        changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        raise ConfigError("--resume", f"{stored.parent} holds another sweep (it differs in {', '.join(changed)}); resume it with "
                                      "its own sweep file, or choose another --out")
    if resolved is not None:  # the same definition, but a base file edited since: every case would have run anew beside
        hashes = {case["index"]: case["hash"] for case in resolved}  # the old ones (exit 0, "resumed")
        moved = [case.index for case in spec.cases if hashes.get(case.index) != case.hash]
        if moved:
            raise ConfigError("--resume", f"the cases of {stored.parent} resolve to other configs now ({len(moved)} of "
                                          f"{len(spec.cases)}, e.g. case {moved[0]}): the base config {spec.definition['base']} "
                                          "changed since the sweep began. Restore it to resume, or start the changed sweep "
                                          "in another --out")


def _simulate_case(cfg: dict[str, Any], path: Path, *, resume_partial: bool) -> int:
    """Run one case into ``path``; continue a run cut short when asked.  Returns the frames resumed from."""
    from meanfield.solvers.run import simulate_config

    if resume_partial and path.exists():
        frames = _frames_on_disk(path)
        if frames > 0:
            try:
                simulate_config(cfg, path, resume=True, quiet=True)
                return frames
            except ConfigError:  # frames that do not match the save times: start afresh
                pass
    path.unlink(missing_ok=True)
    simulate_config(cfg, path, quiet=True)
    return 0


def _last_finite(series: np.ndarray) -> float:
    finite = np.flatnonzero(np.isfinite(series))
    return float(series[finite[-1]]) if finite.size else math.nan


def _ranges(indices: Sequence[int]) -> str:
    """Increasing case indices in runs: ``[0, 1, 2, 5, 7, 8]`` → ``"0–2, 5, 7–8"``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


def _concentration_scalars(t: np.ndarray, w2: np.ndarray) -> dict[str, float]:
    r"""``t_min``, ``W2_min`` (and the metastable window) of :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` (Thm 1 of arXiv 2605.10931).

    Uses :func:`meanfield.solvers.experiments.concentration.concentration_summary`.
    """
    nan = {"t_min": math.nan, "W2_min": math.nan}
    if not np.any(np.isfinite(w2)):
        return nan
    from meanfield.solvers.experiments.concentration import concentration_summary

    summary = concentration_summary(t, w2)
    return {
        "t_min": float(summary["t_min"]),
        "W2_min": float(summary["w2_min"]),
        "window_length": float(summary["window_length"]),  # (NaN where there is none, also open at the start)
        "W2_final": float(summary["w2_final"]),
    }


#: diagnostics whose plateau (mean over t >= T/2) is a scalar of the case, and the column it fills
PLATEAU_COLUMNS = {"authors_G2": "G2_plateau", "slope2": "slope2_plateau"}
#: the swept key whose values are Monte-Carlo paths of one experiment (the noise of the weights)
PATH_KEY = "weights.seed"
#: the scalars :func:`aggregate_paths` averages over the paths
AGGREGATED = ("G2_plateau", "slope2_plateau")


def _plateau(t: np.ndarray, values: np.ndarray) -> float:
    r"""Mean of ``values`` over :math:`t \ge T/2`, :math:`T` the last recorded time (NaN if none is finite)."""
    if t.size == 0:
        return math.nan
    tail = values[t >= t[-1] / 2 - 1e-12 * max(1.0, abs(float(t[-1])))]
    tail = tail[np.isfinite(tail)]
    return float(np.mean(tail)) if tail.size else math.nan


def case_scalars(path: str | Path) -> dict[str, Any]:
    r"""The scalar results of one run file (a row of ``results.csv``).

    .. math::

        \min_{i<j}\langle x_i(T),x_j(T)\rangle, \qquad
        t_{\min}=\arg\min_t W_2(\rho_t,\Pi_\sharp\rho_0),\quad W_{2,\min}=\min_t W_2

    (the concentration observables of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931), Thm 1, when the run tracked
    ``w2_target``).  Reads only the last frame and the diagnostics.

    Returns
    -------
    dict
        ``frames``, ``t_last``, ``energy_final`` (last finite ``E_multi``),
        ``min_inner_product`` (particles; NaN for grid runs), ``t_min``,
        ``W2_min`` (NaN without the concentration tracker), ``stop_reason``;
        with time-dependent heads ``G2_plateau`` and ``slope2_plateau`` (the means over
        :math:`t\ge T/2` of ``diagnostics/authors_G2`` and ``diagnostics/slope2``, :math:`T`
        the last recorded time: the plateau of Massucco, Del Grande, Carioni, Brune and
        Schönlieb, arXiv 2605.18870); with the concentration tracker also ``window_length`` (metastable
        window), ``W2_final`` and the final ``e_/v_eigenspace_distance``.
    """
    import h5py

    with h5py.File(path, "r") as f:
        t = np.asarray(f["t"][()], dtype=float)
        frames = int(t.shape[0])
        out: dict[str, Any] = {
            "frames": frames,
            "t_last": float(t[-1]) if frames else math.nan,
            "energy_final": math.nan,
            "min_inner_product": math.nan,
            "t_min": math.nan,
            "W2_min": math.nan,
            "stop_reason": str(f.attrs.get("stop_reason", "")),
        }
        diagnostics = f["diagnostics"] if "diagnostics" in f else {}
        if "energy" in diagnostics:
            out["energy_final"] = _last_finite(np.asarray(diagnostics["energy"][()], dtype=float))
        if "x" in f and frames:
            x = np.asarray(f["x"][frames - 1], dtype=float)
            if x.shape[0] > 1:
                gram = x @ x.T
                out["min_inner_product"] = float(np.min(gram[np.triu_indices(x.shape[0], 1)]))
        for key, column in PLATEAU_COLUMNS.items():  # time-dependent heads: the plateau of Massucco et al. (arXiv 2605.18870)
            if key in diagnostics and frames:
                out[column] = _plateau(t, np.asarray(diagnostics[key][()], dtype=float))
        if "w2_target" in diagnostics:
            out.update(_concentration_scalars(t, np.asarray(diagnostics["w2_target"][()], dtype=float)))
            for key in ("e_eigenspace_distance", "v_eigenspace_distance"):  # Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931), Conjecture 1
                if key in diagnostics:
                    out[f"{key}_final"] = _last_finite(np.asarray(diagnostics[key][()], dtype=float))
    return out


#: a case lock whose heartbeat is older than this (seconds) belongs to a dead run
LOCK_STALE_AFTER = 60.0
_HEARTBEAT = 5.0


class CaseLock:
    """An exclusive lock beside a case's run file (``cases/<hash>.lock``), so that a case runs once at a time.

    After a killed driver, tasks it submitted to a remote cluster may still be
    running when a resumed sweep reaches the same case: the second execution
    waits for the first instead of writing the same HDF5 file.  The holder
    refreshes the lock's mtime every few seconds; a lock is taken over when its
    holder is a dead process on this host, or its heartbeat is older than
    :data:`LOCK_STALE_AFTER`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path.with_suffix(".lock")
        self._stop: Any = None

    def _stale(self) -> bool:
        import socket

        try:
            info = json.loads(self.path.read_text() or "{}")
            age = time.time() - self.path.stat().st_mtime
        except (OSError, ValueError):
            return True
        if info.get("host") == socket.gethostname():
            try:
                os.kill(int(info.get("pid", -1)), 0)
            except (OSError, ValueError):
                return True  # its process is gone
        return age > LOCK_STALE_AFTER

    def __enter__(self) -> CaseLock:
        import socket
        import threading

        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if self._stale():
                    self.path.unlink(missing_ok=True)
                    continue
                time.sleep(0.5)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump({"host": socket.gethostname(), "pid": os.getpid()}, f)
            break
        self._stop = threading.Event()

        def beat() -> None:
            while not self._stop.wait(_HEARTBEAT):
                try:
                    os.utime(self.path)
                except OSError:
                    return

        threading.Thread(target=beat, daemon=True, name="meanfield-case-lock").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.path.unlink(missing_ok=True)


def run_case(task: Mapping[str, Any]) -> dict[str, Any]:
    """Run one case and return its record; errors are caught and recorded, never raised.

    ``task`` holds ``index``, ``hash``, ``params``, ``config`` (resolved),
    ``path`` (HDF5 output), ``attempt``, ``resume_partial``, ``results``
    (hook or ``None``) and ``threads`` (an int, a map worker address → int, or
    ``None`` to leave the process's thread settings alone).  This is the
    function the Dask workers execute.
    """
    started = time.perf_counter()
    threads = _threads_here(task.get("threads"))
    if threads is not None:
        from meanfield.kernels.jit import set_num_threads

        set_num_threads(threads)
    path = Path(task["path"])
    record: dict[str, Any] = {
        "case": task["index"],
        "hash": task["hash"],
        "params": task["params"],
        "attempt": task["attempt"],
        "path": str(path),
        "worker": _worker_address(),
        "pid": os.getpid(),
        "threads": threads,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with CaseLock(path):
        done = _recovered(path.with_suffix(".json"), task["hash"])
        if done is not None:  # another execution of this case finished while we waited: do not run it twice
            return done
        return _run_case_locked(task, path, record, threads, started)


def _run_case_locked(task: Mapping[str, Any], path: Path, record: dict[str, Any], threads: int | None, started: float) -> dict[str, Any]:
    try:
        from contextlib import nullcontext

        from threadpoolctl import threadpool_limits

        # BLAS (POT, sparse solves, NumPy) gets the case's share of the cores too, on any cluster
        with threadpool_limits(limits=threads, user_api="blas") if threads is not None else nullcontext():
            record["resumed_frames"] = _simulate_case(task["config"], path, resume_partial=bool(task.get("resume_partial")))
        scalars = case_scalars(path)
        if task.get("results") is not None:
            extra = _resolve_hook(task["results"])(path, task["config"])
            scalars.update({str(k): (v.item() if isinstance(v, np.generic) else v) for k, v in dict(extra).items()})
        record.update(status="ok", error="", scalars=scalars)
    except Exception as exc:  # a failed case is recorded, not raised
        record.update(status="failed", error=f"{type(exc).__name__}: {exc}", scalars=_scalars_of_failed(path))
        # bad input fails the same way every time: not run again (a checkpoint that could not be read had been); a
        # ConfigError over an OSError (a full or flaky disk, a file system that did not answer) is tried again
        record["retry"] = not isinstance(exc, ConfigError) or isinstance(exc.__cause__ or exc.__context__, OSError)
        record.setdefault("resumed_frames", 0)
    record["wall_time"] = time.perf_counter() - started
    if record["status"] == "ok":  # beside the run: found by --resume if the driver dies before the ledger hears of it
        _atomic_write(path.with_suffix(".json"), json.dumps(record, sort_keys=True, default=_json_default).encode())
    return record


def _scalars_of_failed(path: Path) -> dict[str, Any]:
    """What the file of a failed case still tells (its frames saved before the failure, ``t_last``, ``stop_reason``):
    its row had left them empty although the error said "1 frame saved in …"."""
    try:
        return case_scalars(path) if path.is_file() else {}
    except Exception:  # noqa: BLE001 - no frame, or a file the failure left unreadable: the row stays empty
        return {}


def _recovered(path: Path, digest: str) -> dict[str, Any] | None:
    """The record a worker left beside a finished run (``cases/<hash>.json``), if any."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("hash") != digest or record.get("status") != "ok":
        return None
    if not path.with_suffix(".h5").is_file():  # its run was deleted since: nothing to take
        return None
    record["recovered"] = True
    return record


# --------------------------------------------------------------------------- #
# ledger and results table
# --------------------------------------------------------------------------- #
def read_ledger(path: str | Path) -> dict[str, dict[str, Any]]:
    """Finished cases of a sweep, by hash (the last record of a hash wins).

    A line cut short by a kill is skipped.
    """
    records: dict[str, dict[str, Any]] = {}
    path = Path(path)
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "hash" in record:
            records[record["hash"]] = record
    return records


def _append_ledger(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record as a JSON line, flushed and fsync-ed (a kill loses nothing finished)."""
    line = json.dumps(record, sort_keys=True, default=_json_default)
    with open(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":  # a line cut short by a kill: close it off
                f.write(b"\n")
        f.write(line.encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _row(case: SweepCase, parameters: Iterable[str], record: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"case": case.index, "hash": case.hash}
    for key in parameters:
        section, _, name = key.partition(".")
        row[key] = _cell(case.config[section][name])
    row.update(
        status=record["status"],
        error=record.get("error", ""),
        attempts=record.get("attempts", 1),
        wall_time=record.get("wall_time", math.nan),
    )
    scalars = dict(record.get("scalars") or {})
    for key in RESULT_COLUMNS[4:]:
        row[key] = scalars.pop(key, math.nan)
    stop_reason = scalars.pop("stop_reason", "")
    row.update(sorted(scalars.items()))
    row["stop_reason"] = stop_reason
    row["resumed_frames"] = record.get("resumed_frames", 0)
    try:
        row["path"] = str(Path(record.get("path", "")).resolve().relative_to(out_dir.resolve()))
    except ValueError:  # a relative path of an earlier session, read from another folder: the case file is in cases/
        row["path"] = str(Path("cases") / Path(record.get("path", "")).name) if record.get("path") else ""
    return row


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    for key in TRAILING_COLUMNS:  # keep these last whatever the hook added
        if key in columns:
            columns.remove(key)
            columns.append(key)
    return columns


def _write_tables(out_dir: Path, rows: list[dict[str, Any]], parameters: Iterable[str] = ()) -> None:
    """``results.csv`` (always) and ``results.parquet`` (with pyarrow), written atomically; before any case has
    finished, the header alone (an empty file had made ``pandas.read_csv`` raise ``EmptyDataError``)."""
    columns = _columns(rows) or ["case", "hash", *parameters, *RESULT_COLUMNS, *TRAILING_COLUMNS]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _csv_cell(row.get(key)) for key in columns})
    _atomic_write(out_dir / "results.csv", buffer.getvalue().encode())
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    data: dict[str, list[Any]] = {}
    for key in columns:
        values = [row.get(key) for row in rows]
        present = [v for v in values if v is not None and v != ""]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            data[key] = [int(v) if v is not None and v != "" else None for v in values]
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            data[key] = [float(v) if v is not None and v != "" else None for v in values]
        else:
            data[key] = [None if v is None else str(v) for v in values]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(data), sink)
    _atomic_write(out_dir / "results.parquet", sink.getvalue().to_pybytes())


def aggregate_paths(
    rows: Sequence[Mapping[str, Any]],
    parameters: Sequence[str],
    *,
    path_key: str = PATH_KEY,
    columns: Sequence[str] = AGGREGATED,
) -> list[dict[str, Any]]:
    r"""Mean ± std of per-case scalars over the Monte-Carlo paths, per value of the other swept keys.

    .. math::

        \bar y_g=\frac1{P_g}\sum_{p=1}^{P_g} y_{g,p},\qquad
        s_g=\Big(\frac1{P_g}\sum_{p=1}^{P_g}(y_{g,p}-\bar y_g)^2\Big)^{1/2}

    over the cases :math:`p` of group :math:`g` (the cases that share every swept key but
    ``path_key``) that finished ``ok`` with a finite value; the spread is the population
    standard deviation, as in the public code of Massucco, Del Grande, Carioni, Brune and
    Schönlieb (arXiv 2605.18870), whose Monte-Carlo paths are the draws of the weights' noise.

    Parameters
    ----------
    rows : sequence of mapping
        Rows of ``results.csv`` (:func:`run_sweep`).
    parameters : sequence of str
        The swept keys; ``path_key`` among them.
    path_key : str
        The key whose values are the paths (default ``weights.seed``).
    columns : sequence of str
        Scalars to aggregate; those absent from every row are left out.

    Returns
    -------
    list of dict
        One per group, in the order of first appearance: the other swept keys, ``paths``
        (cases in the group), then ``<column>_mean``, ``<column>_std`` and ``<column>_paths``
        (the finite values used) for each column.  Empty when ``path_key`` is not swept or
        no row holds any of ``columns``.

    Examples
    --------
    >>> rows = [{"model.num_heads": h, "weights.seed": s, "status": "ok", "G2_plateau": g}
    ...         for h, s, g in [(1, 0, 1.0), (1, 1, 3.0), (2, 0, 0.5), (2, 1, 0.5)]]
    >>> [(r["model.num_heads"], r["G2_plateau_mean"], r["G2_plateau_std"])
    ...  for r in aggregate_paths(rows, ["model.num_heads", "weights.seed"])]
    [(1, 2.0, 1.0), (2, 0.5, 0.0)]
    """
    if path_key not in parameters:
        return []
    present = [c for c in columns if any(c in row for row in rows)]
    if not present:
        return []
    others = [k for k in parameters if k != path_key]
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in others), []).append(row)
    out: list[dict[str, Any]] = []
    for key, members in groups.items():
        entry: dict[str, Any] = dict(zip(others, key))
        entry["paths"] = len(members)
        for column in present:
            values = np.array([float(r[column]) for r in members
                               if r.get("status") == "ok" and r.get(column) not in (None, "")], dtype=float)
            values = values[np.isfinite(values)]
            entry[f"{column}_mean"] = float(values.mean()) if values.size else math.nan
            entry[f"{column}_std"] = float(values.std()) if values.size else math.nan
            entry[f"{column}_paths"] = int(values.size)
        out.append(entry)
    return out


def _write_aggregate(out_dir: Path, rows: list[dict[str, Any]], parameters: Sequence[str]) -> list[dict[str, Any]]:
    """``aggregate.csv`` (:func:`aggregate_paths`), written atomically when there is something to aggregate."""
    table = aggregate_paths(rows, parameters)
    if not table:
        return table
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(table[0]), lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({key: _csv_cell(value) for key, value in row.items()})
    _atomic_write(out_dir / "aggregate.csv", buffer.getvalue().encode())
    return table


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


# --------------------------------------------------------------------------- #
# executors
# --------------------------------------------------------------------------- #
def _should_retry(record: Mapping[str, Any], attempt: int, retries: int) -> bool:
    """Whether a case's attempt is run again: it failed, attempts are left, and its error was not bad input."""
    return record["status"] != "ok" and attempt <= retries and bool(record.get("retry", True))


def _finish(record: dict[str, Any], attempt: int, errors: list[str]) -> dict[str, Any]:
    record.pop("retry", None)
    record["attempts"] = attempt
    if record["status"] != "ok":
        record["error"] = " | ".join(f"attempt {k + 1}: {e}" for k, e in enumerate([*errors, record["error"]]))
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return record


def _lost_record(task: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    """Record of an attempt whose worker died (the task itself never returned)."""
    return {
        "case": task["index"],
        "hash": task["hash"],
        "params": task["params"],
        "attempt": task["attempt"],
        "path": task["path"],
        "status": "failed",
        "error": f"{type(exc).__name__}: {exc}",
        "scalars": {},
        "wall_time": math.nan,
        "resumed_frames": 0,
    }


def _synchronous(tasks: list[dict[str, Any]], retries: int) -> Iterator[dict[str, Any]]:
    for task in tasks:
        errors: list[str] = []
        for attempt in range(1, retries + 2):
            record = run_case({**task, "attempt": attempt, "resume_partial": task["resume_partial"] and attempt == 1})
            if not _should_retry(record, attempt, retries):
                yield _finish(record, attempt, errors)
                break
            errors.append(record["error"])


def _thread_cap() -> int | None:
    """The user's cap on the kernels' threads in this process (``--threads N`` sets ``MEANFIELD_NUM_THREADS``), if any."""
    try:
        cap = int(os.environ.get("MEANFIELD_NUM_THREADS", ""))
    except ValueError:
        return None
    return cap if cap >= 1 else None


def _threads_per_worker(client: Any, cap: int | None = None) -> dict[str, int]:
    """Kernel threads per worker: the host's cores over the worker threads on that host, at most ``cap``."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        return {}
    cores = client.run(_usable_cores)
    per_host: dict[str, int] = {}
    for info in workers.values():
        per_host[info["host"]] = per_host.get(info["host"], 0) + int(info["nthreads"])
    return {
        address: min(max(1, int(cores.get(address, 1)) // max(1, per_host[info["host"]])), cap or math.inf)
        for address, info in workers.items()
    }


def _note_no_workers(address: str) -> None:
    """Say once that the sweep waits for the workers of the scheduler at ``address`` (it had sat at 0/N silently)."""
    warnings.warn(f"the scheduler at {address} has no workers yet; the sweep waits for them (Ctrl-C stops it, --resume "
                  "continues)", ConfigNote, stacklevel=3)


def _dask(client: Any, tasks: list[dict[str, Any]], retries: int, *, cap: int | None = None) -> Iterator[dict[str, Any]]:
    from distributed import as_completed

    threads = _threads_per_worker(client, cap)
    if not threads:  # a scheduler whose workers come later (dask-jobqueue): waiting is right, but not without a word
        _note_no_workers(str(client.scheduler.address))
    pending: dict[str, tuple[dict[str, Any], int, list[str], Any]] = {}
    queue = as_completed(loop=client.loop)
    token = uuid.uuid4().hex[:8]

    def submit(task: dict[str, Any], attempt: int, errors: list[str]) -> None:
        payload = {**task, "attempt": attempt, "resume_partial": task["resume_partial"] and attempt == 1, "threads": threads}
        future = client.submit(run_case, payload, key=f"meanfield-case-{task['hash']}-{attempt}-{token}", pure=False)
        pending[future.key] = (payload, attempt, errors, future)
        queue.add(future)

    for task in tasks:
        submit(task, 1, [])
    try:
        for future in queue:
            payload, attempt, errors, _ = pending.pop(future.key)
            try:
                record = future.result()
            except Exception as exc:  # the worker died or the task could not run
                record = _lost_record(payload, exc)
            future.release()
            if _should_retry(record, attempt, retries):
                submit(payload, attempt + 1, [*errors, record["error"]])
                continue
            yield _finish(record, attempt, errors)
    finally:
        if pending:  # interrupted: stop the cases still queued or running
            try:
                client.cancel([entry[3] for entry in pending.values()], force=True)
            except (RuntimeError, OSError, TimeoutError):  # the connection is already gone
                pass


#: a Dask scheduler address: PROTOCOL://HOST:PORT, or HOST:PORT (tcp)
_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):\d{1,5}$")


def check_scheduler(address: str) -> str:
    """``address`` if it reads as a Dask scheduler address (``tcp://node01:8786``, ``node01:8786``), else a :class:`ConfigError`."""
    if not _ADDRESS.match(address.strip()):
        raise ConfigError("--scheduler", f"{address!r} is not a scheduler address; expected e.g. tcp://node01:8786")
    return address.strip()


#: local worker processes allowed per usable core (each a Python process with its own memory; past the cores they
#: only take turns)
WORKERS_PER_CORE = 4


def check_workers(workers: int | None, scheduler: str | None = None) -> None:
    """Refuse a ``--workers`` that is not an integer >= 0, that comes with ``--scheduler``, or that asks for more than
    :data:`WORKERS_PER_CORE` local processes per core (100 000 had hung starting them, then ended in a traceback).

    Raises
    ------
    ConfigError
        Naming ``--workers``.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ConfigError("--workers", f"expected an integer >= 0, got {workers!r}")
    if scheduler and workers is not None:
        raise ConfigError("--workers", "sizes the local cluster; it cannot be combined with --scheduler")
    cores = _usable_cores()
    if workers is not None and workers > WORKERS_PER_CORE * cores:
        raise ConfigError("--workers", f"{workers} local worker processes on {cores} usable core(s): at most "
                                       f"{WORKERS_PER_CORE * cores} (past the cores they only take turns)")


#: seconds a scheduler has to answer: Dask's own timeout covers the TCP connect, not the handshake after it, and a
#: port where something else listens (a web server) had kept a sweep waiting for ever
SCHEDULER_ANSWER_SECONDS = 45.0


def _probe(scheduler: str) -> None:
    """Ask the server at ``scheduler`` who it is (Dask's ``identity``), before a :class:`distributed.Client` is made.

    A port where another service talks first (an SSH banner) had crashed the client with a traceback (Dask read the
    banner as a frame length: "Unable to allocate 2.82 EiB"), and the half-made client then kept the process 40 s in
    its ``__del__``; a bare connection leaves nothing behind.
    """
    import asyncio

    from distributed.core import rpc
    from distributed.security import Security

    async def identity() -> Any:
        async with rpc(scheduler, timeout=20, connection_args=Security().get_connection_args("client")) as server:
            return await server.identity()

    try:
        info = asyncio.run(identity())
    except (OSError, TimeoutError, ValueError) as exc:  # refused, unreachable, unknown host
        raise ConfigError("--scheduler", f"cannot connect to {scheduler!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever another protocol's bytes make of Dask's reader
        raise ConfigError("--scheduler", f"{scheduler!r} did not answer as a Dask scheduler (another service listening there?): {type(exc).__name__}: {exc}") from None
    kind = info.get("type") if isinstance(info, Mapping) else None
    if kind != "Scheduler":
        raise ConfigError("--scheduler", f"{scheduler!r} did not answer as a Dask scheduler: it is a {kind or 'server of another kind'}"
                                         + (" (give the scheduler's address, not a worker's)" if kind in ("Worker", "Nanny") else ""))


def _connect(scheduler: str) -> Any:
    """A Dask client of the scheduler at ``scheduler``, or ``ConfigError`` naming ``--scheduler`` within
    :data:`SCHEDULER_ANSWER_SECONDS` (the attempt is left to a daemon thread, which cannot keep the process alive).

    The server is asked who it is first (:func:`_probe`): anything but a Dask scheduler there is bad input (exit 2),
    not a traceback."""
    import threading

    from distributed import Client

    box: dict[str, Any] = {}

    def attempt() -> None:
        try:
            _probe(scheduler)
            box["client"] = Client(scheduler, timeout="20s", set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=attempt, name="meanfield-scheduler-connect", daemon=True)
    thread.start()
    thread.join(SCHEDULER_ANSWER_SECONDS)
    if thread.is_alive():
        raise ConfigError("--scheduler", f"{scheduler!r} took the connection but did not answer as a Dask scheduler within "
                                         f"{SCHEDULER_ANSWER_SECONDS:g} s: is a Dask scheduler listening there?")
    error = box.get("error")
    if isinstance(error, ConfigError):
        raise error
    if isinstance(error, (OSError, TimeoutError, ValueError)):
        raise ConfigError("--scheduler", f"cannot connect to {scheduler!r}: {error}") from None
    if isinstance(error, Exception):
        raise ConfigError("--scheduler", f"{scheduler!r} did not answer as a Dask scheduler (another service listening there?): "
                                         f"{type(error).__name__}: {error}") from None
    if error is not None:
        raise error
    return box["client"]


def _restore_environ(before: Mapping[str, str]) -> None:
    """Put this process's environment back as ``before``: Dask's nanny writes its workers' settings into ``os.environ``
    as it starts them (``OMP_NUM_THREADS=1`` and the other BLAS threads, ``MALLOC_TRIM_THRESHOLD_``,
    ``PYTHONHASHSEED``) and leaves them there, where every process started later inherited them (a notebook's
    programs on one BLAS thread; :func:`meanfield.allocator.keep_freed_memory` turned off in its children)."""
    for key in [key for key in os.environ if key not in before]:
        del os.environ[key]
    os.environ.update({key: value for key, value in before.items() if os.environ.get(key) != value})


class _Cluster:
    """A Dask client: on a local process cluster we start, or on a scheduler we connect to."""

    def __init__(self, *, scheduler: str | None, workers: int | None, cases: int) -> None:
        import dask
        from distributed import Client, LocalCluster

        self.cluster = None
        #: the user's --threads / MEANFIELD_NUM_THREADS, a cap on each local case's kernel threads (it had been ignored:
        #: cores // workers each); a scheduler's workers are sized by their own hosts and environment
        self.thread_cap: int | None = None
        if scheduler:
            self.client = _connect(check_scheduler(scheduler))
            return
        cores = _usable_cores()
        n = workers if workers else min(cores, max(1, cases))
        self.thread_cap = _thread_cap()
        threads = min(max(1, cores // n), self.thread_cap or cores)
        pre_spawn = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
        pre_spawn.update(OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, MKL_NUM_THREADS=1)
        env = {"MEANFIELD_NUM_THREADS": str(threads), "NUMBA_NUM_THREADS": str(threads)}
        self._environ = dict(os.environ)
        try:
            with dask.config.set({"distributed.nanny.pre-spawn-environ": pre_spawn}):
                self.cluster = LocalCluster(
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    # None still binds Dask's HTTP server to the fixed 8787, with a warning on stderr when that is taken
                    # (a second sweep, a notebook's cluster): a free port of the loopback instead
                    dashboard_address="127.0.0.1:0",
                    silence_logs=logging.CRITICAL,
                    env=env,
                    # a case whose process dies is re-run by the sweep's own retries; Dask's allowed-failures (3) had run it
                    # 4 times per attempt (8 OOM-kills of a node's worker for "retried once")
                    scheduler_kwargs={"allowed_failures": 0},
                )
        finally:
            _restore_environ(self._environ)
        self.client = Client(self.cluster, set_as_default=False)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
            _restore_environ(self._environ)  # (a worker restarted after a crash wrote them again)


def _threaded_call(func: Callable[[Any], Any], payload: Any, threads: int | Mapping[str, int] | None) -> Any:
    """``func(payload)`` on a worker, its kernels given their share of the host's cores (as :func:`run_case` does)."""
    count = _threads_here(threads)
    if count is not None:
        from meanfield.kernels.jit import set_num_threads

        set_num_threads(count)
    return func(payload)


class TaskPool:
    """Where a sweep's cases run, for any task: this process, a local Dask cluster, or a running scheduler.

    ``workers=0`` runs the tasks here, in order; by default a
    :class:`distributed.LocalCluster` of single-threaded processes, one per core
    (at most one per task); ``scheduler="tcp://host:8786"`` any running cluster.
    Each task's kernels get its host's cores over the worker threads there, as a
    sweep case's do.  The batches of a phase diagram (:mod:`meanfield.solvers.phase`)
    run on it.

    Examples
    --------
    >>> with TaskPool(workers=0) as pool:
    ...     sorted(pool.map(abs, [-1, 2]))
    [(0, 1), (1, 2)]
    """

    def __init__(self, *, scheduler: str | None = None, workers: int | None = None, tasks: int = 1) -> None:
        check_workers(workers, scheduler)
        self._cluster = _Cluster(scheduler=scheduler, workers=workers, cases=tasks) if workers != 0 and tasks > 0 else None

    def __enter__(self) -> TaskPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut the local cluster down (or disconnect from the scheduler)."""
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def map(self, func: Callable[[Any], Any], payloads: Sequence[Any], *, name: str = "meanfield-task") -> Iterator[tuple[int, Any]]:
        """``(index, func(payload))`` for every payload, as each finishes.

        A task that raises re-raises here; the tasks still queued are then cancelled
        (also when the caller stops iterating or is interrupted).
        """
        if self._cluster is None:
            for index, payload in enumerate(payloads):
                yield index, func(payload)
            return
        from distributed import as_completed

        client = self._cluster.client
        threads = _threads_per_worker(client, self._cluster.thread_cap)
        token = uuid.uuid4().hex[:8]
        futures = {client.submit(_threaded_call, func, payload, threads, key=f"{name}-{index}-{token}", pure=False): index
                   for index, payload in enumerate(payloads)}
        pending = dict(futures)
        try:
            for future in as_completed(list(futures), loop=client.loop):
                index = pending.pop(future)
                result = future.result()
                future.release()
                yield index, result
        finally:
            if pending:
                try:
                    client.cancel(list(pending), force=True)
                except (RuntimeError, OSError, TimeoutError):  # the connection is already gone
                    pass


# --------------------------------------------------------------------------- #
# the driver
# --------------------------------------------------------------------------- #
def _refuse_a_started_sweep(out: Path, *, resume: bool) -> None:
    """A sweep killed before its first case finished takes only ``--resume``; a folder of tables without ``sweep.json``
    is not a sweep's, and is refused with or without it."""
    if not resume and (out / "sweep.json").exists():
        raise ConfigError("--out", f"{out} already holds a sweep ({out / 'sweep.json'}); pass --resume to continue it, "
                                   "or choose another directory")
    if not (out / "sweep.json").exists() and (tables := [name for name in SWEEP_TABLES if (out / name).exists()]):
        # (with --resume too: it had replaced a user's results.csv and appended to a foreign ledger.jsonl)
        raise ConfigError("--out", f"{out} holds {', '.join(tables)} of something other than a sweep (no sweep.json): "
                                   "they would be replaced" + ("; --resume has no sweep to continue there" if resume else "")
                                   + "; choose another directory")


def check_out(spec: Sweep, out_dir: str | Path, *, resume: bool = False) -> dict[str, dict[str, Any]]:
    """Whether ``spec`` may run into ``out_dir``, as :func:`run_sweep` checks it before any work (``--dry-run`` too).

    Parameters
    ----------
    spec : Sweep
        The sweep (:func:`load_sweep`).
    out_dir : path
        Its output folder.
    resume : bool
        Whether the sweep in ``out_dir`` is to be continued.

    Returns
    -------
    dict
        The finished cases of its ledger, by hash (empty for a new folder).

    Raises
    ------
    ConfigError
        Naming ``--out`` for a folder that holds a sweep without ``resume``, or tables of something other than a sweep;
        naming ``--resume`` for a folder that holds another sweep.
    """
    out = Path(out_dir).absolute()
    done = read_ledger(out / "ledger.jsonl")
    if done and not resume:
        raise ConfigError("--out", f"{out} already holds a sweep ({len(done)} finished cases); pass --resume to continue it, or choose another directory")
    if resume and (out / "sweep.json").exists():
        _check_same_sweep(out / "sweep.json", spec)
    _refuse_a_started_sweep(out, resume=resume)
    return done


def run_sweep(
    sweep: str | Path | Mapping[str, Any] | Sweep,
    out_dir: str | Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    resume: bool = False,
    quiet: bool = False,
    retry_failed: bool = False,
) -> list[dict[str, Any]]:
    r"""Run every case of a sweep and return the rows of ``results.csv``.

    .. math::

        \text{row}_k = \bigl(\text{params}_k,\ \text{status}_k,\ t^{\text{wall}}_k,\
        \text{scalars}(\text{run}_k)\bigr),\qquad k = 1..K

    Parameters
    ----------
    sweep : path, mapping or Sweep
        The sweep file, its content, or a :func:`load_sweep` result.
    out_dir : path
        Output folder: ``cases/<hash>.h5``, ``ledger.jsonl``, ``results.csv``,
        ``sweep.json``.
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:8786``).
    workers : int, optional
        Local worker processes (default: one per core, at most one per case);
        ``0`` runs the cases in this process, one after the other.
    resume : bool
        Continue the sweep in ``out_dir``: skip finished cases, continue an
        interrupted run from its last frame.  Without it, an ``out_dir`` that
        already holds finished cases is refused.
    quiet : bool
        No progress bar.
    retry_failed : bool
        With ``resume``, run again the cases recorded as failed.

    Returns
    -------
    list of dict
        One row per case, in case order.

    Raises
    ------
    ConfigError
        Bad sweep (see :func:`load_sweep`), bad ``workers``/``scheduler``, or an
        ``out_dir`` holding a sweep without ``resume``.
    """
    check_workers(workers, scheduler)
    spec = sweep if isinstance(sweep, Sweep) else load_sweep(sweep)
    out = Path(out_dir).absolute()  # the tasks' paths: a worker elsewhere (--scheduler) had read them from its own folder
    ledger_path = out / "ledger.jsonl"
    done = check_out(spec, out, resume=resume)
    recovered: list[dict[str, Any]] = []
    if resume:  # runs that finished on a worker after the driver was killed: nothing to run again
        for case in spec.cases:
            if case.hash not in done:
                record = _recovered(out / "cases" / f"{case.hash}.json", case.hash)
                if record is not None:
                    recovered.append(_finish(record, int(record.get("attempt", 1)), []))
                    done[case.hash] = recovered[-1]
    finished = {c.hash: done[c.hash] for c in spec.cases if c.hash in done}
    # an ok case whose run file was deleted since runs again (its row had pointed to the missing file)
    finished = {h: r for h, r in finished.items() if r.get("status") != "ok" or (out / "cases" / f"{h}.h5").is_file()}
    if retry_failed:
        finished = {h: r for h, r in finished.items() if r["status"] == "ok"}
    tasks = [
        {
            "index": c.index,
            "hash": c.hash,
            "params": {k: _cell(v) for k, v in c.params.items()},
            "config": c.config,
            "path": str(out / "cases" / f"{c.hash}.h5"),
            "resume_partial": resume and c.hash not in done,
            "results": spec.results,
        }
        for c in spec.cases
        if c.hash not in finished
    ]
    by_hash = {c.hash: c for c in spec.cases}

    def rows() -> list[dict[str, Any]]:
        return [_row(c, spec.parameters, finished[c.hash], out) for c in spec.cases if c.hash in finished]

    if resume and not out.exists():  # a typo in --out had started the whole sweep there without a word
        warnings.warn(f"{out} does not exist; nothing to resume, starting the sweep afresh", ConfigNote, stacklevel=2)
    # connect before writing anything: a bad --scheduler is bad input (exit 2), not a half-made sweep
    cluster = _Cluster(scheduler=scheduler, workers=workers, cases=len(tasks)) if tasks and workers != 0 else None
    # one driver per folder: two sweeps writing one --out had both finished with exit 0, each table holding the
    # other's rows or its own (a second driver exits 2, as a second writer of a run file does)
    try:
        lock = WriterLock(out / "sweep.json", key="--out").acquire()
        try:
            _refuse_a_started_sweep(out, resume=resume)  # one that began since the check above
        except BaseException:
            lock.release()
            raise
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    records: Iterator[dict[str, Any]] = iter(())
    bar = None
    try:
        (out / "cases").mkdir(parents=True, exist_ok=True)
        _atomic_write(out / "sweep.json", json.dumps(
            {**spec.definition, "cases_resolved": [{"index": c.index, "hash": c.hash, "params": c.params} for c in spec.cases]},
            indent=1, sort_keys=True, default=_json_default,
        ).encode())
        for record in recovered:
            _append_ledger(ledger_path, record)
        _write_tables(out, rows(), spec.parameters)
        from tqdm import tqdm

        bar = tqdm(total=len(spec.cases), initial=len(finished), disable=quiet, desc="sweep", unit="case", file=sys.stderr)
        if cluster is not None:
            records = _dask(cluster.client, tasks, spec.retries, cap=cluster.thread_cap)
        elif tasks:
            records = _synchronous(tasks, spec.retries)
        last_write = time.monotonic()
        for record in records:
            _append_ledger(ledger_path, record)
            finished[record["hash"]] = record
            bar.update(1)
            if record["status"] != "ok" and not quiet:
                bar.write(f"sweep: case {record['case']} {by_hash[record['hash']].params} failed: {record['error']}", file=sys.stderr)
            if time.monotonic() - last_write >= CSV_MIN_INTERVAL_S:
                _write_tables(out, rows(), spec.parameters)
                last_write = time.monotonic()
    finally:
        if bar is not None:
            bar.close()
        try:
            close = getattr(records, "close", None)
            if close is not None:  # cancel what is still queued while the client is alive
                close()
            if out.is_dir():  # the tables before the cluster's shutdown, which an interrupt can cut short (a finished
                _write_tables(out, rows(), spec.parameters)  # case had been left out of results.csv, the lock behind)
                _write_aggregate(out, rows(), spec.parameters)
        finally:
            try:
                if cluster is not None:
                    cluster.close()
            finally:
                lock.release()
    return rows()
