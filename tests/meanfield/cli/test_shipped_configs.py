"""Every example config in data/ resolves, round-trips, and runs on the grid through --set solver.kind=grid and convergence."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from meanfield.cli import main
from meanfield.config import load_config

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = [p for p in sorted((ROOT / "data").glob("*.toml")) if "base" not in tomllib.loads(p.read_text())]


def test_the_example_configs_are_all_here():
    assert {p.stem for p in CONFIGS} >= {"default", "concentration", "multihead", "jko", "ou_heads", "oscillating_heads", "minilm",
                                          "massucco_ou_s1", "massucco_oscillating_s1", "massucco_ou_d5", "massucco_oscillating_d5",
                                          "layers_gpt2"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_a_resolved_config_resolves_to_itself(path: Path):
    cfg = load_config(path)
    assert load_config(cfg) == cfg


#: initial measures that are point sets, not densities: a grid says why it cannot take them
PARTICLE_ONLY_INITS = ("clusters", "sentence")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_set_solver_kind_grid_works_or_says_why_not(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture):
    sets = ["--set", "solver.kind=grid", "--set", "solver.t_final=0.02", "--set", "solver.save_every=0.01",
            "--set", "grid.cells=100", "--quiet"]
    status = main(["simulate", str(path), "-o", str(tmp_path / "g.h5"), *sets])
    err = capsys.readouterr().err
    cfg = load_config(path)
    given = tomllib.loads(path.read_text()).get("solver", {}).get("method")
    if cfg["model"]["d"] == 3 and cfg["init"]["kind"] not in PARTICLE_ONLY_INITS:
        assert status == 0, err
        if given not in (None, "ssprk2", "ssprk3"):  # the file's particle integrator is replaced, and we say so
            assert f"note: solver.method = {given!r} is not a grid method" in err and "ssprk3" in err
    else:  # a grid lives on S²: tokens in d = 384 (or a sentence's tokens, or clusters of points) cannot be one
        assert status == 2 and ("model.d" in err or "init.kind" in err), err


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_convergence_works_on_every_config_or_says_why_not(path: Path, capsys: pytest.CaptureFixture):
    status = main(["convergence", str(path), "--cells", "60,120", "--set", "solver.t_final=0.02", "--quiet"])
    out = capsys.readouterr()
    cfg = load_config(path)
    if cfg["model"]["d"] == 3 and cfg["init"]["kind"] not in PARTICLE_ONLY_INITS:
        assert status == 0, out.err
        assert "cells" in out.out.splitlines()[0] and len(out.out.splitlines()) == 3
    else:
        assert status == 2 and "error:" in out.err
