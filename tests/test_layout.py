"""The package's shape: one import package, no import circles, the model never imports a solver, a wheel installs."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the package it installs as
FOLDERS = {"meanfield": "meanfield", "solvers": "meanfield.solvers", "figures": "meanfield.figures"}
#: subpackages of the model: numerics and data, which build on nothing that runs a solver
MODEL = ("meanfield.geometry", "meanfield.heads", "meanfield.kernels", "meanfield.analysis", "meanfield.io", "meanfield.plotting")


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _imports(path: Path, modules: dict[str, Path], name: str) -> set[str]:
    """Every module of the package that ``path`` imports, at the top or inside a function."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules, name) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (depth-first search; each circle as the path that closes it)."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_circles_even_through_imports_inside_functions() -> None:
    graph = _graph()
    # a package's __init__ importing its own modules is not a circle with them: Python loads the package first
    graph = {m: {t for t in targets if not t.startswith(m + ".")} for m, targets in graph.items()}
    cycles = _cycles(graph)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_model_never_imports_a_solver_a_figure_or_the_cli() -> None:
    bad = []
    for module, targets in _graph().items():
        if module.startswith(MODEL):
            bad += [f"{module} -> {t}" for t in targets if t.startswith(("meanfield.solvers", "meanfield.figures", "meanfield.cli", "meanfield.api"))]
    assert not bad, bad


def test_the_circle_check_can_fail() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    modules = _modules()
    fused = _imports(modules["meanfield.kernels.fused"], modules, "meanfield.kernels.fused")
    assert "meanfield.kernels.inputs" in fused and "meanfield.kernels.attention" not in fused


def test_public_names_load_and_dir_lists_them() -> None:
    import meanfield as mf

    names = dir(mf)
    for name in ("simulate", "load", "Run", "solve", "Problem", "ParticleSolver", "GridSolver", "JKOSolver",
                 "ZeroTemperatureSolver", "Model", "heads", "w2", "theory", "sample", "sample_uniform", "sample_vmf",
                 "sample_equiangular", "sample_orthogonal", "load_config", "ConfigError", "RunFailed", "__version__",
                 "RunInterrupted"):  # (help(mf.solve) names it: it had not been there)
        assert name in names, name
        assert getattr(mf, name) is not None
    assert "importlib" not in names and "_LAZY" not in names
    with pytest.raises(AttributeError):
        mf.no_such_name  # noqa: B018


def test_the_heads_submodules_are_attributes_after_import_meanfield_alone() -> None:
    # mf.heads.schedules.schedule_from_path, as the README writes it, had been an AttributeError in a fresh process
    code = ("import doctest, meanfield as mf; "
            "assert mf.heads.schedules.schedule_from_path.__name__ == 'schedule_from_path'; "
            "assert mf.heads.ensembles.__name__ == 'meanfield.heads.ensembles'; "
            "assert {'schedules', 'ensembles', 'checkpoint', 'embeddings', 'forward'} <= set(dir(mf.heads)); "
            "import meanfield.heads as h; r = doctest.testmod(h); assert r.attempted >= 2 and r.failed == 0, r\n"
            "try:\n    mf.heads.no_such_module\nexcept AttributeError as e:\n    assert 'no_such_module' in str(e)\n"
            "else:\n    raise SystemExit('no AttributeError')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
                   check=True, capture_output=True, text=True)
    (found,) = out.glob("meanfield-*.whl")
    return found


def test_the_wheel_adds_one_top_level_name_and_carries_the_examples(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert zf.read(info).decode().split() == ["meanfield"]
    assert top == {"meanfield"}
    assert "meanfield/solvers/particle.py" in names and "meanfield/figures/multihead_beta_star.py" in names
    assert "meanfield/examples/default.toml" in names
    assert not any(n.endswith(".png") for n in names)  # the gallery stays in the repository


def test_a_fresh_environment_installs_the_wheel_and_runs(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": "", "MEANFIELD_NUM_THREADS": "1"}
    probe = ("import meanfield, meanfield.solvers.particle, meanfield.figures, importlib.util as u; "
             "print(meanfield.__file__); print(u.find_spec('solvers'), u.find_spec('figures'))")
    done = subprocess.run([str(python), "-c", probe], cwd=work, capture_output=True, text=True, check=True, env=env)
    where, missing = done.stdout.splitlines()
    assert where.startswith(str(venv)) and missing == "None None"
    run = subprocess.run([str(venv / "bin" / "meanfield"), "run", "--quiet", "--set", "solver.t_final=0.5", "--set", "init.n=32"],
                         cwd=work, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert (work / "data/runs/default.h5").is_file() and (work / "figures/default_run.png").is_file()
    copied = subprocess.run([str(venv / "bin" / "meanfield"), "examples", "ex"], cwd=work, capture_output=True, text=True, env=env)
    assert copied.returncode == 0, copied.stderr
    assert {p.name for p in (work / "ex").glob("*.toml")} == {p.name for p in (ROOT / "data").glob("*.toml")}
    # the copies name each other as they sit, side by side ("meanfield simulate data/default.toml" had named a folder
    # that exists only in a source checkout)
    assert not [p.name for p in (work / "ex").glob("*.toml") if "data/" in p.read_text()]
    assert "meanfield simulate default.toml" in (work / "ex" / "default.toml").read_text()
