r"""The papers' figures: one thin script per figure, found by its file name.

.. math::

    \text{figure} = \text{script}(\text{public API}) \;\to\; (\texttt{ID.png},\ \texttt{ID.csv},\ \text{claim}(\texttt{ID.csv}))

Every ``figures/figPPP_name.py`` (``PPP`` = the seed paper: ``000`` multi-head
structure, ``002`` low-temperature concentration, ``004`` time-dependent
multi-head flows) is a figure.  :func:`registry` lists them without importing
them; ``meanfield reproduce --list`` prints the list, ``meanfield reproduce
ID|all [--quick] [--out DIR]`` runs them, and ``tests/test_figures.py`` runs
every one in ``--quick`` form and checks its claim.

Adding a figure
---------------
Write one script ``figures/figPPP_what.py``; nothing else needs editing.  It must
define, at module level:

* ``ID = "figPPP_what"`` (the file stem), ``PAPER = "PPP"``,
  ``THEOREM = "Thm 22"`` (or ``"Conj. 1"``, …) and ``DESCRIPTION`` — one
  sentence saying what the figure shows.  These four are plain string
  literals: they are read from the source, so listing never imports a script.
* Its parameters as constants at the top, with the ``QUICK_…`` variants.
* ``make(out_dir, *, quick=False) -> {"png": Path, "csv": Path}`` — computes
  through the public API (:mod:`meanfield`, :func:`solvers.run.simulate_config`,
  :func:`solvers.sweep.run_sweep`, …) and writes ``out_dir/ID.png`` and
  ``out_dir/ID.csv`` (the numbers behind the picture, one tidy table).
* ``claim(csv_path) -> {name: {"ok": bool, "value": float, "expected": str}}`` —
  checks of the paper's statement computed *from the CSV alone* (e.g. a fitted
  slope against its predicted value).
* ``main(argv=None) -> int`` parsing ``--quick`` and ``--out`` (exit 0 when
  every check holds, 1 otherwise) and ``if __name__ == "__main__":
  sys.exit(main())``, so that ``python figures/figPPP_what.py --quick --out DIR``
  works; :func:`script_main` implements it in one line, and :func:`write_rows`
  writes the CSV.  Scripts import only installed packages (this one is installed too).
* A module docstring opening with the equation and the theorem, the runtime,
  and the command.  ``--quick`` must take under a minute on 2 cores (aim for
  ~10 s): the default test suite runs it.

Examples
--------
>>> sorted(registry())[:1]  # doctest: +SKIP
['fig000_beta_star']
>>> result = run_figure("fig000_beta_star", "/tmp/figs", quick=True)  # doctest: +SKIP
>>> all(check["ok"] for check in result.checks.values())  # doctest: +SKIP
True
"""
from __future__ import annotations

import ast
import importlib.util
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["FIGURES_DIR", "METADATA", "FigureEntry", "FigureRun", "registry", "run_figure", "write_rows", "script_main", "concentration_grid_config"]

#: the folder the figure scripts live in
FIGURES_DIR = Path(__file__).resolve().parent
#: module-level string constants every figure script defines
METADATA = ("ID", "PAPER", "THEOREM", "DESCRIPTION")
#: the seed papers, by number
PAPERS = {
    "000": "multi-head gradient-flow structure",
    "002": "low-temperature concentration",
    "004": "time-dependent multi-head Wasserstein flows",
}


@dataclass(frozen=True)
class FigureEntry:
    """One registered figure: its script and what it shows.

    Attributes
    ----------
    id : str
        ``figPPP_name`` (the script's stem).
    path : Path
        The script.
    paper : str
        Seed paper: ``"000"``, ``"002"`` or ``"004"``.
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

    def load(self) -> ModuleType:
        """Import the script (once) as ``figures.<id>``."""
        name = f"figures.{self.id}"
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(self.path):
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, self.path)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
            raise ImportError(f"cannot load {self.path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
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
        return all(bool(check["ok"]) for check in self.checks.values())


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
        raise ValueError(f"{path.name}: a figure script must define {', '.join(missing)} (see figures/__init__.py)")
    if found["ID"] != path.stem:
        raise ValueError(f"{path.name}: ID = {found['ID']!r} must equal the file name {path.stem!r}")
    if found["PAPER"] not in PAPERS:
        raise ValueError(f"{path.name}: PAPER must be one of {', '.join(PAPERS)}, got {found['PAPER']!r}")
    return found


def registry(folder: str | Path | None = None) -> dict[str, FigureEntry]:
    """Every figure script in ``folder`` (default: this package), by id, ordered by paper then id.

    Raises
    ------
    ValueError
        For a ``fig*.py`` script that lacks one of the metadata constants,
        or whose ``ID`` differs from its file name.
    """
    root = Path(folder) if folder is not None else FIGURES_DIR
    entries = []
    for path in sorted(root.glob("fig*.py")):
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


def script_main(make: Any, claim: Any, description: str, argv: Any = None) -> int:
    """The command line every figure script shares: ``[--quick] [--out DIR]``, then the claim checks.

    Exit status 0 when every check holds, 1 otherwise.
    """
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="the small version the tests run")
    parser.add_argument("--out", default="figures/gallery", help="output folder (default figures/gallery)")
    args = parser.parse_args(argv)
    paths = make(args.out, quick=args.quick)
    checks = claim(paths["csv"])
    print(f"wrote {paths['png']} and {paths['csv']}")
    for name, check in checks.items():
        print(f"  {'ok  ' if check['ok'] else 'FAIL'} {name}: {check['value']:.6g} (expected {check['expected']})")
    return 0 if all(c["ok"] for c in checks.values()) else 1


def concentration_grid_config(*, cells: int, t_final: float, cfl: float = 0.5, save_every: float = 0.1) -> dict[str, Any]:
    """The default concentration experiment (``data/concentration.toml``'s head) on the grid, uniform density.

    Shared by the seed-002 β-family figures.
    """
    import copy

    from meanfield.config import load_config
    from solvers.concentration import DEFAULT_CONCENTRATION_CONFIG

    raw = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    raw.pop("init", None)  # the uniform density on the grid
    raw["solver"] = {"kind": "grid", "method": "ssprk3", "cfl": cfl, "t_final": t_final, "save_every": save_every}
    raw["grid"] = {"cells": cells, "family": "fibonacci"}
    return load_config(raw)
