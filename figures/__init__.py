r"""The papers' figures: one thin script per figure, found by its file name.

Every script of this package (``meanfield.figures.<id>``, the file ``figures/<id>.py``
of the repository) is a figure; its id names the topic and the result, e.g.
``multihead_beta_star`` or ``concentration_w2_curves``.  :func:`registry` lists
them without importing them; ``meanfield reproduce --list`` prints the list,
``meanfield reproduce ID|all [--quick] [--out DIR]`` runs them, and the tests
run every one in ``--quick`` form and check its claim.

Adding a figure
---------------
Write one script ``figures/<topic>_<what>.py``; nothing else needs editing.  It must
define, at module level:

* ``ID = "<topic>_<what>"`` (the file stem), ``PAPER`` — the arXiv number of the
  paper it reproduces (a key of :data:`PAPERS`), ``THEOREM = "Thm 22"`` (or
  ``"Conj. 1"``, …) and ``DESCRIPTION`` — one sentence saying what the figure
  shows.  These four are plain string literals: they are read from the source,
  so listing never imports a script.
* Its parameters as constants at the top, with the ``QUICK_…`` variants.
* ``make(out_dir, *, quick=False) -> {"png": Path, "csv": Path}`` — computes
  through the public API (:func:`meanfield.simulate`, :func:`meanfield.solve`,
  :func:`meanfield.solvers.sweep.run_sweep`, …) and writes ``out_dir/ID.png`` and
  ``out_dir/ID.csv`` (the numbers behind the picture, one tidy table).
* ``claim(csv_path) -> {name: {"ok": bool, "value": float, "expected": str}}`` —
  checks of the paper's statement computed *from the CSV alone* (e.g. a fitted
  slope against its predicted value).  A check that reduces a column takes
  :func:`largest` / :func:`smallest` (NaN, and a failed check, when a value is
  not finite), never the built-in ``max``/``min``, which skip a NaN unless it
  comes first.
* ``main(argv=None) -> int`` parsing ``--quick`` and ``--out`` (exit 0 when
  every check holds, 1 otherwise) and ``if __name__ == "__main__":
  sys.exit(main())``; :func:`script_main` implements it in one line, and
  :func:`write_rows` writes the CSV.
* A module docstring opening with the equation and the theorem, the runtime,
  and the command.  ``--quick`` must take under a minute on 2 cores (aim for
  ~10 s): the default test suite runs it.

Examples
--------
>>> sorted(registry())[:1]  # doctest: +SKIP
['concentration_grid_density']
>>> result = run_figure("multihead_beta_star", "/tmp/figs", quick=True)  # doctest: +SKIP
>>> all(check["ok"] for check in result.checks.values())  # doctest: +SKIP
True
"""
from __future__ import annotations

import ast
import importlib
import math
import importlib.util
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["FIGURES_DIR", "METADATA", "PAPERS", "FigureEntry", "FigureRun", "registry", "run_figure", "write_rows", "output_folder", "check_outputs",
           "script_main",
           "concentration_grid_config", "largest", "smallest"]

#: the folder the figure scripts live in
FIGURES_DIR = Path(__file__).resolve().parent
#: module-level string constants every figure script defines
METADATA = ("ID", "PAPER", "THEOREM", "DESCRIPTION")
#: the papers, by arXiv number: (short citation, topic, title)
PAPERS: dict[str, tuple[str, str, str]] = {
    "2605.04279": (
        "Pendharkar, arXiv 2605.04279",
        "multihead",
        "Gradient Flow Structure and Quantitative Dynamics of Multi-Head Self-Attention",
    ),
    "2605.10931": (
        "Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931",
        "concentration",
        "Quantifying Concentration Phenomena of Mean-Field Transformers in the Low-Temperature Regime",
    ),
    "2605.18870": (
        "Massucco, Del Grande, Carioni, Brune and Schönlieb, arXiv 2605.18870",
        "time_dependent",
        "Multi-Headed Transformer Architectures as Time-dependent Wasserstein Gradient Flows",
    ),
    # the field's other public codes: features this project builds as its own (see the README, "Beyond the three papers")
    "2305.05465": (
        "Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2305.05465",
        "clusters",
        "The emergence of clusters in self-attention dynamics",
    ),
    "2312.10794": (
        "Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2312.10794",
        "perspective",
        "A mathematical perspective on Transformers",
    ),
    "2411.04990": (
        "Karagodin, Polyanskiy and Rigollet, arXiv 2411.04990",
        "causal",
        "Clustering in Causal Attention Masking",
    ),
    "2510.22026": (
        "Karagodin, Ge, Polyanskiy and Rigollet, arXiv 2510.22026",
        "normalization",
        "Normalization in Attention Dynamics",
    ),
    "2410.06833": (
        "Geshkovski, Koubbi, Polyanskiy and Rigollet, arXiv 2410.06833",
        "metastability",
        "Dynamic metastability in the self-attention model",
    ),
    "2412.14813": (
        "Shalova and Schlichting, arXiv 2412.14813",
        "noisy",
        "Solutions of stationary McKean-Vlasov equation on a high-dimensional sphere and other Riemannian manifolds",
    ),
    "2501.03096": (
        "Burger, Kabri, Korolev, Roith and Weigand, arXiv 2501.03096",
        "layernorm",
        "Analysis of mean-field models arising from self-attention dynamics in transformer architectures with layer normalization",
    ),
}


@dataclass(frozen=True)
class FigureEntry:
    """One registered figure: its script and what it shows.

    Attributes
    ----------
    id : str
        ``<topic>_<what>`` (the script's stem).
    path : Path
        The script.
    paper : str
        The arXiv number of the paper (a key of :data:`PAPERS`).
    theorem : str
        The statement it illustrates (``"Thm 22"``).
    description : str
        One sentence: what the figure shows.
    """

    id: str
    path: Path
    paper: str
    theorem: str
    description: str

    @property
    def citation(self) -> str:
        """The paper by its authors and arXiv number."""
        return PAPERS[self.paper][0]

    def load(self) -> ModuleType:
        """Import the script as ``meanfield.figures.<id>`` (a folder of scripts elsewhere by file location)."""
        if self.path.parent == FIGURES_DIR:
            module = importlib.import_module(f"meanfield.figures.{self.id}")
        else:
            spec = importlib.util.spec_from_file_location(f"_figure_{self.id}", self.path)
            if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
                raise ImportError(f"cannot load {self.path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        for attr in ("make", "claim", "main"):
            if not callable(getattr(module, attr, None)):
                raise TypeError(f"{self.path.name}: a figure script must define {attr}() (see figures/__init__.py)")
        return module


@dataclass(frozen=True)
class FigureRun:
    """Outcome of :func:`run_figure`: the files written, the claim's checks, the time taken."""

    id: str
    png: Path
    csv: Path
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every check holds, and there is at least one (notes, ``ok`` None, are not checks)."""
        return checks_hold(self.checks)


def checks_hold(checks: Mapping[str, Mapping[str, Any]]) -> bool:
    """A claim's checks all hold; notes (``"ok": None``: what was observed, or not checked) do not count, and a claim
    with no check at all does not hold (an empty CSV had given ``{}``, and "every claim holds")."""
    real = [check for check in checks.values() if check["ok"] is not None]
    return bool(real) and all(bool(check["ok"]) for check in real)


def _finite_values(values: Iterable[Any]) -> list[float] | None:
    """``values`` as floats, or None when there are none or one of them is not finite."""
    numbers = [float(v) for v in values]
    return numbers if numbers and all(math.isfinite(v) for v in numbers) else None


def largest(values: Iterable[Any]) -> float:
    """The largest of ``values`` for a claim's check: NaN when one of them is not finite, or when there are none.

    Python's :func:`max` keeps the operand it holds against a NaN, so a NaN in any row but the first had dropped out
    of a check (``max(0.1, nan) == 0.1``: a broken row reported as a small error).  A check written as
    ``largest(errors) <= tolerance`` fails on it instead, and shows the value NaN.

    Examples
    --------
    >>> largest([0.1, 0.3])
    0.3
    >>> largest([0.1, float("nan")]), largest([0.1, float("inf")]), largest([])
    (nan, nan, nan)
    """
    numbers = _finite_values(values)
    return max(numbers) if numbers is not None else math.nan


def smallest(values: Iterable[Any]) -> float:
    """The smallest of ``values`` for a claim's check: NaN when one of them is not finite, or when there are none
    (see :func:`largest`; a check ``smallest(margins) > 0`` fails on it).

    Examples
    --------
    >>> smallest([0.1, 0.3]), smallest([0.3, float("nan")])
    (0.1, nan)
    """
    numbers = _finite_values(values)
    return min(numbers) if numbers is not None else math.nan


def print_checks(checks: Mapping[str, Mapping[str, Any]]) -> None:
    """The lines of a claim: ``ok``/``FAIL`` for each check, ``note`` for each note, and a line when nothing was checked."""
    for name, check in checks.items():
        mark = "note" if check["ok"] is None else "ok  " if check["ok"] else "FAIL"
        print(f"  {mark} {name}: {check['value']:.6g} ({'' if check['ok'] is None else 'expected '}{check['expected']})")
    if not any(check["ok"] is not None for check in checks.values()):
        print("  FAIL no claim was checked (the figure's table gave none)")


def _metadata(path: Path) -> dict[str, str]:
    """The string constants ``ID, PAPER, THEOREM, DESCRIPTION`` of a script, read from its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in METADATA:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise ValueError(f"{path.name}: {name} must be a string literal") from None
                if not isinstance(value, str):
                    raise ValueError(f"{path.name}: {name} must be a string, got {value!r}")
                found[name] = value
    missing = [name for name in METADATA if name not in found]
    if missing:
        raise ValueError(f"{path.name}: a figure script must define {', '.join(missing)} (see meanfield.figures)")
    if found["ID"] != path.stem:
        raise ValueError(f"{path.name}: ID = {found['ID']!r} must equal the file name {path.stem!r}")
    if found["PAPER"] not in PAPERS:
        raise ValueError(f"{path.name}: PAPER must be one of {', '.join(PAPERS)}, got {found['PAPER']!r}")
    topic = PAPERS[found["PAPER"]][1]
    if not found["ID"].startswith(topic + "_"):
        raise ValueError(f"{path.name}: the id of a figure of arXiv {found['PAPER']} starts with {topic + '_'!r}")
    return found


def registry(folder: str | Path | None = None) -> dict[str, FigureEntry]:
    """Every figure script in ``folder`` (default: this package), by id, ordered by paper then id.

    Raises
    ------
    ValueError
        For a script that lacks one of the metadata constants, whose ``ID``
        differs from its file name, or whose id does not start with its paper's topic.
    """
    root = Path(folder) if folder is not None else FIGURES_DIR
    entries = []
    for path in sorted(root.glob("*.py")):
        if path.name.startswith("_"):
            continue
        meta = _metadata(path)
        entries.append(FigureEntry(meta["ID"], path.resolve(), meta["PAPER"], meta["THEOREM"], meta["DESCRIPTION"]))
    entries.sort(key=lambda e: (e.paper, e.id))
    return {entry.id: entry for entry in entries}


def run_figure(figure_id: str, out_dir: str | Path, *, quick: bool = False) -> FigureRun:
    """Make one figure (PNG + CSV under ``out_dir``) and check its claim on the CSV.

    Raises
    ------
    KeyError
        For an id that is not registered.
    """
    figures = registry()
    if figure_id not in figures:
        raise KeyError(figure_id)
    module = figures[figure_id].load()
    started = time.perf_counter()
    paths = module.make(Path(out_dir), quick=quick)
    checks = module.claim(paths["csv"])
    return FigureRun(figure_id, Path(paths["png"]), Path(paths["csv"]), checks, time.perf_counter() - started)


def write_rows(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Write a figure's tidy table: one row per dict, floats with ``repr`` (full precision)."""
    import csv

    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows)
    return path


def output_folder(out: str | None, *, quick: bool) -> Path:
    """``--out`` checked (:func:`meanfield.io.output.folder_path`), or the gallery's folder: ``figures/gallery``,
    ``figures/gallery/quick`` for the quick forms (shared by the scripts and ``meanfield reproduce``).

    Raises
    ------
    ConfigError
        (key ``--out``) a file, or a folder that cannot be made.
    """
    from meanfield.io.output import folder_path

    folder = folder_path(out, "--out")
    return Path(folder) if folder is not None else Path("figures/gallery") / ("quick" if quick else "")


def check_outputs(out: Path, ids: Iterable[str]) -> None:
    """Refuse, before any figure is computed, an ``out/ID.png`` or ``out/ID.csv`` that cannot be written, for each id of
    ``ids`` (shared by ``meanfield reproduce`` and :func:`script_main`).

    Raises
    ------
    ConfigError
        (key ``--out``) for a folder in the way of one of them, or an existing file that cannot be written: these
        had been found only after the figure was computed (exit 1, a traceback).
    """
    from meanfield.errors import ConfigError

    for figure_id in ids:
        for path in (out / f"{figure_id}.png", out / f"{figure_id}.csv"):
            if path.is_dir():
                raise ConfigError("--out", f"{path} is a folder, where the figure {figure_id} writes a file")
            if path.exists() and not os.access(path, os.W_OK):
                raise ConfigError("--out", f"cannot write {path}: permission denied")


def script_main(make: Any, claim: Any, description: str, argv: Any = None, *, synthetic_option: bool = False) -> int:
    """The command line every figure script shares: ``[--quick] [--out DIR]``, then the claim checks.

    Exit status 0 when every check holds, 1 otherwise, 2 for a bad ``--out`` (before any work): a file, a folder that
    cannot be made, or an ``ID.png`` / ``ID.csv`` in it that cannot be written (:func:`check_outputs`, ``ID`` read
    from the module that defines ``make``).
    The default folder is that of ``meanfield reproduce``: ``figures/gallery``, and ``figures/gallery/quick``
    with ``--quick``, so that the quick form never replaces the gallery's full one.  ``synthetic_option``: the
    figures of real heads also take ``--synthetic`` (their synthetic checkpoint even where MiniLM is installed).
    """
    import argparse

    from meanfield.errors import ConfigError

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="the small version the tests run")
    parser.add_argument("--out", default=None, help="output folder (default figures/gallery; figures/gallery/quick with --quick)")
    if synthetic_option:
        parser.add_argument("--synthetic", action="store_true", help="use the synthetic checkpoint even when MiniLM is installed")
    args = parser.parse_args(argv)
    figure_id = getattr(sys.modules.get(getattr(make, "__module__", None) or ""), "ID", None)  # (__main__ for a script run as a file)
    try:
        out = output_folder(args.out, quick=args.quick)
        if isinstance(figure_id, str):  # a folder ID.png had been found after the whole computation: exit 1, a traceback
            check_outputs(out, [figure_id])
    except ConfigError as exc:  # a file, or a folder that cannot be made: the traceback had exited 1, "a claim failed"
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    options = {"checkpoint": "synthetic" if args.synthetic else None} if synthetic_option else {}
    paths = make(out, quick=args.quick, **options)
    checks = claim(paths["csv"])
    print(f"wrote {paths['png']} and {paths['csv']}")
    print_checks(checks)
    return 0 if checks_hold(checks) else 1


def concentration_grid_config(*, cells: int, t_final: float, cfl: float = 0.5, save_every: float = 0.1) -> dict[str, Any]:
    """The default concentration experiment (``data/concentration.toml``'s head) on the grid, uniform density.

    Shared by the β-family figures of arXiv 2605.10931.
    """
    import copy

    from meanfield.config import load_config
    from meanfield.solvers.experiments.concentration import DEFAULT_CONCENTRATION_CONFIG

    raw = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    raw.pop("init", None)  # the uniform density on the grid
    raw["solver"] = {"kind": "grid", "method": "ssprk3", "cfl": cfl, "t_final": t_final, "save_every": save_every}
    raw["grid"] = {"cells": cells, "family": "fibonacci"}
    return load_config(raw)


def concentration_family_sweep(betas: Sequence[float], *, spacing: float | Mapping[float, float], refine: bool, t_final: float,
                               cfl: float = 0.5, save_every: float = 0.1) -> Any:
    r"""The β family of the default concentration head on the grid, the mesh following β: a
    :class:`~meanfield.solvers.experiments.concentration.BetaSweep`.

    Each β runs on :math:`N=\lceil4\pi\beta/c^2\rceil` cells (``spacing`` = :math:`c`, one
    for every β or one per β; at least 200 cells) and, with ``refine``, on :math:`4N` as well.  Shared by the
    β-family figures of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931): a second call with the same
    arguments in one process returns the first one's sweep (a copy) without running it again.
    """
    import copy

    from meanfield.solvers.experiments.concentration import sweep_beta

    key = (tuple(float(b) for b in betas), tuple(sorted(spacing.items())) if isinstance(spacing, Mapping) else float(spacing),
           bool(refine), float(t_final), float(cfl), float(save_every))
    if key not in _FAMILY_SWEEPS:  # the β-family figures share their sweep when made in one process (meanfield reproduce)
        cfg = concentration_grid_config(cells=200, t_final=t_final, cfl=cfl, save_every=save_every)
        _FAMILY_SWEEPS[key] = sweep_beta(cfg, betas, solver="grid", spacing=spacing, refine=refine)
    return copy.deepcopy(_FAMILY_SWEEPS[key])


def concentration_family_rows(betas: Sequence[float], *, spacing: float | Mapping[float, float], refine: bool, t_final: float,
                              cfl: float = 0.5, save_every: float = 0.1) -> list[dict[str, Any]]:
    """One row per β of :func:`concentration_family_sweep`: the finer run's numbers and, with ``refine``, the changes
    from the coarser one (``dw2_min`` relative, ``dt_min``; NaN without ``refine``)."""
    sweep = concentration_family_sweep(betas, spacing=spacing, refine=refine, t_final=t_final, cfl=cfl, save_every=save_every)
    nan = float("nan")
    return [
        {
            "solver": sweep.solver, "cells": s["n"], "spacing": s["spacing"], "beta": s["beta"], "log_beta": math.log(s["beta"]), "rate": s["rate"],
            "t_min": s["t_min"], "w2_min": s["w2_min"], "ratio": s["ratio"], "w2_initial": s["w2_initial"],
            "w2_final": s["w2_final"], "min_at_end": int(s["min_at_end"]), "under_resolved": int(bool(s["under_resolved"])),
            "cells_coarse": s.get("n_coarse", nan), "w2_min_coarse": s.get("w2_min_coarse", nan),
            "t_min_coarse": s.get("t_min_coarse", nan), "dw2_min": s.get("dw2_min", nan), "dt_min": s.get("dt_min", nan),
        }
        for s in sweep.summaries
    ]


#: the sweeps of :func:`concentration_family_sweep` by its arguments, for the figures made in this process
_FAMILY_SWEEPS: dict[tuple[Any, ...], Any] = {}


#: the β family of the Thm 1 figures (t_min against log β, W2_min against the rate): the mesh follows β,
#: N = 4πβ/c² cells (h = c·β^{-1/2}), and 4N for the convergence check
FAMILY_BETAS = (4.0, 16.0, 64.0)
FAMILY_SPACING = {4.0: 0.25, 16.0: 0.5, 64.0: 0.5}
FAMILY_T_FINAL = 16.0
#: their quick form: more β, one coarse mesh each, shorter runs
FAMILY_QUICK_BETAS = (4.0, 8.0, 16.0, 32.0)
FAMILY_QUICK_SPACING = 0.7
FAMILY_QUICK_T_FINAL = 10.0
#: largest relative change of W2_min between N and 4N cells the full form accepts
FAMILY_CONVERGED = 0.02
FAMILY_SAVE_EVERY = 0.1
FAMILY_CFL = 0.5


def beta_family_sweep(*, quick: bool = False) -> Any:
    """The sweep of the Thm 1 figures' β family (:func:`concentration_family_sweep` with the ``FAMILY_*`` constants):
    in full every β on N and 4N cells, quick more β on one coarse mesh each."""
    if quick:
        return concentration_family_sweep(FAMILY_QUICK_BETAS, spacing=FAMILY_QUICK_SPACING, refine=False,
                                          t_final=FAMILY_QUICK_T_FINAL, cfl=FAMILY_CFL, save_every=FAMILY_SAVE_EVERY)
    return concentration_family_sweep(FAMILY_BETAS, spacing=FAMILY_SPACING, refine=True, t_final=FAMILY_T_FINAL,
                                      cfl=FAMILY_CFL, save_every=FAMILY_SAVE_EVERY)


def beta_family_rows(*, quick: bool = False) -> list[dict[str, Any]]:
    """The rows of the Thm 1 figures' β family (:func:`concentration_family_rows` with the ``FAMILY_*`` constants).

    The full form runs every β on N and 4N cells; the quick form runs more β on one coarse mesh each.
    """
    if quick:
        return concentration_family_rows(FAMILY_QUICK_BETAS, spacing=FAMILY_QUICK_SPACING, refine=False,
                                         t_final=FAMILY_QUICK_T_FINAL, cfl=FAMILY_CFL, save_every=FAMILY_SAVE_EVERY)
    return concentration_family_rows(FAMILY_BETAS, spacing=FAMILY_SPACING, refine=True, t_final=FAMILY_T_FINAL,
                                     cfl=FAMILY_CFL, save_every=FAMILY_SAVE_EVERY)


def family_mesh_label(rows: Sequence[dict[str, Any]]) -> str:
    """The meshes of a β-family figure in a title: ``N = 4πβ/c²`` with its constant(s) and the range of the cells.

    A refined family (rows with a finite ``cells_coarse``) shows the finer runs, on 4N cells, checked against N: the
    title had called their 4N cells N."""
    groups: dict[float, list[float]] = {}
    for r in sorted(rows, key=lambda r: r["beta"]):
        betas = groups.setdefault(float(r["spacing"]), [])
        if float(r["beta"]) not in betas:
            betas.append(float(r["beta"]))
    if len(groups) == 1:
        constant = f"c = {next(iter(groups)):g}"
    else:
        constant = "c = " + ", ".join(f"{c:g} (β = {', '.join(f'{b:g}' for b in betas)})" for c, betas in groups.items())
    cells = sorted(int(r["cells"]) for r in rows)
    coarse = [float(r.get("cells_coarse", math.nan)) for r in rows]
    if any(math.isfinite(c) for c in coarse):
        return f"4N cells, N = 4πβ/c², {constant}; 4N = {cells[0]} … {cells[-1]}, against N"
    return f"N = 4πβ/c² cells, {constant}; N = {cells[0]} … {cells[-1]}"


def convergence_claim(rows: Sequence[dict[str, Any]], *, tolerance: float) -> dict[str, dict[str, Any]]:
    """The claim that refining the mesh (4× the cells) moves W2_min by at most ``tolerance`` (relative), for the rows run
    on two meshes (a coarser one in ``cells_coarse``; a family on one mesh, the quick form, has none). A refined row
    without a finite change fails it: the check had vanished when the column was empty."""
    def number(value: Any) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            return math.nan

    refined = [r for r in rows if math.isfinite(number(r.get("cells_coarse")))]
    if not refined:
        return {}
    changes = [abs(number(r.get("dw2_min"))) for r in refined]
    worst = max(changes, key=lambda c: c if math.isfinite(c) else math.inf)
    return {"mesh_converged": {"ok": bool(all(math.isfinite(c) for c in changes) and worst <= tolerance), "value": float(worst),
                               "expected": f"max |ΔW2_min| between N and 4N cells <= {tolerance:g}, for each of the "
                                           f"{len(refined)} β run on two meshes"}}


#: the two experiments of Massucco, Del Grande, Carioni, Brune and Schönlieb (arXiv 2605.18870)
#: as their public code runs them
AUTHORS_CONFIGS = {
    "ou": FIGURES_DIR.parent / "data" / "massucco_ou.toml",
    "oscillating": FIGURES_DIR.parent / "data" / "massucco_oscillating.toml",
}
#: the authors' seed rule: the head draw uses 42 + H, the weight noise 2000 + H
AUTHORS_HEAD_SEED = 42
AUTHORS_NOISE_SEED = 2000
#: Monte-Carlo path p of the weight noise adds this times p to its seed
AUTHORS_PATH_STRIDE = 1000


def authors_noise_seed(heads: int, path: int = 0) -> int:
    """``weights.seed`` of Monte-Carlo path ``path`` with ``heads`` heads: 2000 + H + 1000 p."""
    return AUTHORS_NOISE_SEED + int(heads) + AUTHORS_PATH_STRIDE * int(path)


def authors_overrides(heads: int, *, t_final: float, path: int = 0, experiment: str = "ou") -> list[str]:
    """Config overrides for H heads with the authors' seeds (heads 42 + H, noise :func:`authors_noise_seed`) up to
    ``t_final``; the oscillating experiment (:data:`AUTHORS_CONFIGS`) has no weight noise, and no noise seed."""
    noise = [f"weights.seed={authors_noise_seed(heads, path)}"] if experiment == "ou" else []
    return [f"model.num_heads={heads}", f"model.seed={AUTHORS_HEAD_SEED + heads}", *noise, f"solver.t_final={t_final}"]
