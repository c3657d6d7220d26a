"""End-to-end CLI: the default experiment, info, and the registered sub-commands."""
from __future__ import annotations

import subprocess
import sys

from meanfield.cli import build_parser, main


def test_default_run_writes_trajectory_and_picture(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--quiet", "--set", "solver.t_final=1.0"]) == 0
    out = capsys.readouterr().out
    assert "data/runs/default.h5" in out and "figures/default_run.png" in out
    assert (tmp_path / "data/runs/default.h5").stat().st_size > 0
    assert (tmp_path / "figures/default_run.png").stat().st_size > 10_000
    assert main(["info", "data/runs/default.h5"]) == 0
    info = capsys.readouterr().out
    assert "status:    completed" in info and "tokens n=256" in info


def test_console_script_and_help():
    proc = subprocess.run([sys.executable, "-m", "meanfield", "--help"], capture_output=True, text=True, check=True)
    for command in ("run", "simulate", "info", "bench", "theory"):
        assert command in proc.stdout


def test_no_command_and_bad_option_exit_2(capsys):
    assert main([]) == 2
    parser = build_parser()
    try:
        parser.parse_args(["simulate"])  # missing CONFIG and -o
    except SystemExit as exc:
        assert exc.code == 2
    else:  # pragma: no cover
        raise AssertionError("argparse should have exited")


def test_info_on_missing_file_exits_2(tmp_path, capsys):
    assert main(["info", str(tmp_path / "none.h5")]) == 2
    assert "not found" in capsys.readouterr().err


def test_readme_documents_every_config_key():
    from pathlib import Path

    from meanfield.config import SCHEMA

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    missing = [f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys if f"`{s}.{k}`" not in readme]
    assert not missing, f"README lacks config keys: {missing}"
    assert 'pip install -e . && meanfield run' in readme
    assert 'pip install -e ".[test]" && pytest' in readme


def test_info_draws_gif_animations(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--quiet", "--set", "solver.t_final=0.5", "--set", "init.n=32"]) == 0
    assert main(["info", "data/runs/default.h5", "--plot", "particles.gif"]) == 0
    grid = tmp_path / "grid.toml"
    grid.write_text('[init]\nkind = "vmf"\nkappa = 2.0\n[solver]\nkind = "grid"\nt_final = 0.2\nsave_every = 0.1\n[grid]\ncells = 200\n')
    assert main(["simulate", str(grid), "-o", "grid.h5", "--quiet"]) == 0
    assert main(["info", "grid.h5", "--plot", "grid.gif"]) == 0
    for name in ("particles.gif", "grid.gif"):
        data = (tmp_path / name).read_bytes()
        assert data[:6] in (b"GIF89a", b"GIF87a") and len(data) > 1000
