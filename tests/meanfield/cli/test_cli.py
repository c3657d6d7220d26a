"""End-to-end CLI: the default experiment, info, and the registered sub-commands."""
from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path
import sys

import numpy as np
import pytest

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


def test_run_replaces_its_own_output_and_no_other_run(tmp_path, monkeypatch, capsys):
    # `meanfield run --out precious.h5` had replaced any meanfield run there (a β = 16 concentration run, gone)
    monkeypatch.chdir(tmp_path)
    quick = ["--quiet", "--set", "solver.t_final=0.25", "--set", "init.n=16", "--plot", "p.png"]
    assert main(["simulate", str(Path(__file__).resolve().parents[3] / "data/concentration.toml"), "-o", "precious.h5",
                 "--quiet", "--set", "init.n=32", "--set", "solver.t_final=0.5"]) == 0
    before = (tmp_path / "precious.h5").read_bytes()
    capsys.readouterr()
    assert main(["run", "--out", "precious.h5", *quick]) == 2
    assert "--out: precious.h5 holds another run (β = 16.0" in capsys.readouterr().err
    assert (tmp_path / "precious.h5").read_bytes() == before
    assert main(["run", "--out", "mine.h5", *quick]) == 0 and main(["run", "--out", "mine.h5", *quick]) == 0  # its own
    assert main(["run", *quick]) == 0 and main(["run", *quick[:-4], "--plot", "p.png"]) == 0  # the default path: its own


def test_the_built_in_experiment_is_data_default_toml_and_either_resumes_the_other(tmp_path, monkeypatch, capsys):
    # the two had differed by the default head, written out in the file: --resume of one by the other was refused
    from meanfield.cli.run import DEFAULT_CONFIG
    from meanfield.config import load_config

    default_toml = Path(__file__).resolve().parents[3] / "data/default.toml"
    assert load_config(DEFAULT_CONFIG) == load_config(default_toml)
    monkeypatch.chdir(tmp_path)
    short = ["--set", "solver.t_final=0.5", "--set", "init.n=16"]
    assert main(["run", "--quiet", *short, "--plot", "p.png"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(default_toml), "-o", "data/runs/default.h5", "--resume", "--quiet",
                 "--set", "solver.t_final=1.0", "--set", "init.n=16"]) == 0, capsys.readouterr().err


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
    # the table is the generator's, row for row (a row edited by hand had drifted from the key's own help)
    from meanfield.config import schema_markdown

    lines = set(readme.splitlines())
    drifted = [row.split(" | ")[0] for row in schema_markdown().splitlines()[2:] if row not in lines]
    assert not drifted, f"README config rows differ from `python -m meanfield.config`: {drifted}"
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


def test_info_says_what_each_solver_did(tmp_path, capsys):
    root = Path(__file__).resolve().parents[3]
    jko = tmp_path / "jko.h5"
    assert main(["simulate", str(root / "data/jko.toml"), "-o", str(jko), "--quiet", "--set", "solver.t_final=0.2",
                 "--set", "solver.save_every=0.1", "--set", "init.n=16"]) == 0
    capsys.readouterr()
    assert main(["info", str(jko)]) == 0
    text = capsys.readouterr().out
    assert "solver:    jko variant=particle τ=" in text and "mobility=" in text and "JKO steps of at most τ=" in text
    assert "dt=" not in text and "rk4" not in text
    zero = tmp_path / "zero.h5"
    assert main(["simulate", str(root / "data/concentration.toml"), "-o", str(zero), "--quiet", "--set", "solver.kind=zero-temperature",
                 "--set", "solver.t_final=0.5", "--set", "init.n=16", "--set", "track.concentration=false"]) == 0
    capsys.readouterr()
    assert main(["info", str(zero)]) == 0
    text = capsys.readouterr().out
    assert "β=∞ (zero-temperature limit)" in text and "β=16" not in text
    assert "cluster(s)" in text


def test_inspect_never_shows_a_negative_beta_star(tmp_path, capsys):
    import json

    from meanfield.analysis import theory
    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    assert theory.beta_star(12, 2, 1.0) < 0  # 12 heads and 2 tokens: no temperature keeps every head monotone
    write_synthetic_checkpoint(tmp_path / "wide", d=24, num_layers=1, num_heads=12, seed=1)
    assert main(["inspect", str(tmp_path / "wide"), "--n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["L", "H"])
    columns, row = lines[header].split(), lines[header + 2].split()
    assert row[columns.index("β*")] == "none"
    assert main(["inspect", str(tmp_path / "wide"), "--n", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["reports"][0]
    assert report["beta_star"] is None and report["regime"] == "above"


def test_diagnose_of_a_run_whose_energy_overflows_says_so_without_a_traceback(tmp_path, capsys):
    # β = 800: the energy rates had raised OverflowError from math.exp (a traceback, exit 1)
    import meanfield as mf

    out = tmp_path / "hot.h5"
    mf.simulate({"model": {"beta": 800.0}, "init": {"n": 16}, "solver": {"t_final": 0.1, "save_every": 0.1}}, out=out)
    assert main(["diagnose", str(out), "--csv", str(tmp_path / "hot.csv")]) == 0
    captured = capsys.readouterr()
    assert "note: the energy is not a float at any frame (β = 800" in captured.err and "Traceback" not in captured.err
    assert "RuntimeWarning" not in captured.err and "kinetic" in captured.out
    # (found in review) the note says dEdt is nan, and so does the CSV: it had held ±inf, its sign the noise of the rate
    assert "so dEdt, the Theorem 11" in captured.err
    series = np.genfromtxt(tmp_path / "hot.csv", delimiter=",", names=True)
    assert np.all(np.isnan(series["dEdt"])) and np.all(np.isnan(series["dEdt_h0"]))
    # tokens at rest at one point: e^800 passes the floats, but the rate is 0 exactly, and the note does not call it nan
    model = mf.Model(d=3, beta=800.0, attention="softmax", heads=mf.heads.identity(3))
    rest = mf.solve(mf.Problem(model, np.tile([0.0, 0.0, 1.0], (4, 1))), mf.ParticleSolver(method="rk4", dt=0.05),
                    t_final=0.2, save_every=0.1)
    rest.save(tmp_path / "rest.h5")
    assert main(["diagnose", str(tmp_path / "rest.h5"), "--quiet", "--csv", str(tmp_path / "rest.csv")]) == 0
    captured = capsys.readouterr()
    assert "so the Theorem 11 and split residuals and the aggregate margin are nan (dEdt where it passes" in captured.err
    series = np.genfromtxt(tmp_path / "rest.csv", delimiter=",", names=True)
    assert np.all(np.isinf(series["energy"])) and np.all(series["dEdt"] == 0.0)



def test_diagnose_of_a_run_with_tokens_of_mass_zero_reads_them(tmp_path, capsys):
    # (found in review) token masses of 0 (a run continued from a grid frame with empty cells) had ended in a
    # ValueError traceback after the progress bar (exit 1): only the entropy takes log a, and 0 log 0 = 0
    import meanfield as mf

    model = mf.Model(d=3, beta=1.0, attention="softmax", heads=mf.heads.identity(3))
    a = np.array([0.3, 0.3, 0.2, 0.2, 0.0, 0.0])
    run = mf.solve(mf.Problem(model, mf.sample_uniform(6, 3, seed=0), weights=a),
                   mf.ParticleSolver(method="rk4", dt=0.05), t_final=0.5, save_every=0.1)
    run.save(tmp_path / "zero.h5")
    assert main(["diagnose", str(tmp_path / "zero.h5"), "--quiet", "--csv", str(tmp_path / "zero.csv")]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "final_entropy_over_log_n" in captured.out
    series = np.genfromtxt(tmp_path / "zero.csv", delimiter=",", names=True)
    for key in ("energy", "dEdt", "entropy_mean_h0", "entropy_rate_h0"):
        assert np.all(np.isfinite(series[key])), key
    assert np.all(series["entropy_max_h0"] <= math.log(4) + 1e-12)  # four tokens of positive mass

def test_info_follow_refuses_other_files_at_once_and_a_huge_interval(tmp_path, capsys, monkeypatch):
    # a text file had been looked at 50 times (50 s) before the error; --interval 1e12 had ended in OverflowError
    import meanfield.cli.info as info

    waits = []
    monkeypatch.setattr(info.time, "sleep", waits.append)
    text = tmp_path / "text.h5"
    text.write_text("not a run\n")
    assert main(["info", str(text), "--follow"]) == 2
    assert waits == [] and "not an HDF5 file" in capsys.readouterr().err  # no second look
    assert main(["info", str(text), "--follow", "--interval", "1e12"]) == 2
    assert "error: --interval" in capsys.readouterr().err


def test_json_output_is_strict_json(capsys):
    # `forward --json` printed the layer-0 β as a bare NaN (and bench --compare --json could), which strict
    # parsers (jq, JSON.parse) reject
    import json

    import numpy as np

    from meanfield.cli.options import dump_json

    def strict(text):
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"not JSON: {c}")))

    value = {"a": float("nan"), "b": [np.float64(np.inf), np.int64(3)], "c": np.array([1.0, -np.inf]), "d": {"e": np.bool_(True)}}
    assert strict(dump_json(value)) == {"a": "nan", "b": ["inf", 3], "c": [1.0, "-inf"], "d": {"e": True}}
    assert main(["forward", "hello world", "--json", "--no-meanfield"]) == 0
    strict(capsys.readouterr().out)
    assert main(["forward", "hello world", "--json"]) == 0
    assert strict(capsys.readouterr().out)


def test_forward_explains_only_the_columns_it_prints(capsys):
    # --no-meanfield had printed the legend of the MF, W1 and |ΔG| columns it leaves out
    assert main(["forward", "hello world", "--no-meanfield"]) == 0
    out = capsys.readouterr().out
    assert "real⟨x,y⟩" in out and "MF⟨x,y⟩" not in out and "MF:" not in out and "W1:" not in out
    assert main(["forward", "hello world"]) == 0
    out = capsys.readouterr().out
    assert "MF⟨x,y⟩" in out and "MF: mean-field at t = layer" in out and "W1(·,ℓ=0): real vs the embeddings" in out


def test_an_interrupt_says_what_each_command_left(tmp_path, capsys, monkeypatch):
    # every command had said "interrupted; saved frames are kept" and exited 1, also info --follow (which one stops
    # with Ctrl-C) and bench, which save no frame
    import meanfield.cli.info as info_module
    import meanfield.solvers.bench as bench_module

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "r.h5"
    root = Path(__file__).resolve().parents[3]
    assert main(["simulate", str(root / "data" / "default.toml"), "-o", str(out), "--quiet", "--set", "init.n=8",
                 "--set", "solver.t_final=0.1"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(info_module, "follow", interrupt)
    assert main(["info", str(out), "--follow"]) == 0
    assert capsys.readouterr().err.strip() == f"meanfield info: stopped following {out}"
    monkeypatch.setattr(bench_module, "run_benchmarks", interrupt)
    assert main(["bench", "--quick"]) == 1
    assert capsys.readouterr().err.strip() == "meanfield bench: interrupted; nothing was written"


def test_diagnose_csv_reads_back_as_the_diagnosis_s_series_bit_for_bit(tmp_path):
    # the CSV promises %.17g: floats that round-trip (a %.6g column had lost the digits after the sixth)
    import csv

    import meanfield as mf
    from meanfield.analysis.diagnostics import diagnose

    out, table = tmp_path / "r.h5", tmp_path / "d.csv"
    mf.simulate({"init": {"n": 12}, "solver": {"t_final": 0.3, "save_every": 0.1}}, out=out)
    assert main(["diagnose", str(out), "--quiet", "--csv", str(table)]) == 0
    with table.open(newline="") as handle:
        rows = list(csv.reader(handle))
    series = diagnose(mf.load(out)).series
    assert rows[0] == list(series)
    for i, key in enumerate(rows[0]):
        np.testing.assert_array_equal(np.array([float(row[i]) for row in rows[1:]]), np.asarray(series[key], dtype=float),
                                      err_msg=key)


@pytest.mark.parametrize(("status", "ended"), [("completed", True), ("stopped", True), ("failed", True),
                                               ("interrupted", False)])
def test_an_interrupt_after_a_run_ended_is_not_called_resumable_whatever_its_end(status, ended, tmp_path):
    # a run that had failed just as Ctrl-C came had been told "--resume continues"
    import h5py

    import meanfield as mf
    from meanfield.cli.simulate import interrupt_left
    from meanfield.io.runfile import RunReader

    out = tmp_path / "r.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.2, "save_every": 0.1}}, out=out)
    cfg = RunReader(out).config
    with h5py.File(out, "r+") as f:
        f.attrs["status"] = status
    said = interrupt_left(str(out), cfg, before=None)
    if ended:
        assert said == f"interrupted after the run ended ({status}; 3 frames saved in {out})"
    else:
        assert said == f"interrupted; 3 frames saved in {out}, --resume continues"


def test_an_interrupt_of_simulate_or_run_says_what_was_saved(tmp_path, capsys, monkeypatch, interactive_sigint):
    # an interrupt in the setup (before the loop's own handler) had been told "interrupted; saved frames are kept"
    # with no file written; a second Ctrl-C in the loop leaves frames, and a Ctrl-C on the last frame a finished run
    import signal

    import meanfield.solvers.run as run_module
    from meanfield.io.runfile import RunWriter

    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "r.h5"
    sets = ["--quiet", "--set", "init.n=8", "--set", "solver.t_final=0.3", "--set", "solver.save_every=0.1"]
    simulate = ["simulate", str(root / "data" / "default.toml"), "-o", str(out), *sets]

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(run_module, "setup_run", interrupt)
        for argv in (simulate, ["run", "--out", str(out), "--plot", str(tmp_path / "r.png"), *sets]):
            assert main(argv) == 1
            assert capsys.readouterr().err.strip().endswith("interrupted before the run started; nothing was written")
            assert not out.exists()
    append = RunWriter.append

    def interrupted_at(when, how):
        def write(self, t, state, diagnostics=None):
            append(self, t, state, diagnostics)
            if t == when:
                how()
        return write

    with monkeypatch.context() as patch:
        patch.setattr(RunWriter, "append", interrupted_at(0.1, interrupt))  # as a second Ctrl-C does
        assert main(simulate) == 1
        assert capsys.readouterr().err.strip().endswith(f"interrupted; 2 frames saved in {out}, --resume continues")
    with monkeypatch.context() as patch:
        patch.setattr(RunWriter, "append", interrupted_at(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)))
        assert main([*simulate, "--resume"]) == 1
        assert capsys.readouterr().err.strip().endswith(f"interrupted after the run ended (completed; 4 frames saved in {out})")
    with monkeypatch.context() as patch:  # Ctrl-C in the setup of an --overwrite re-run: the file is the last run's
        patch.setattr(run_module, "setup_run", interrupt)
        for argv in ([*simulate, "--overwrite"], ["run", "--out", str(out), *sets]):
            assert main(argv) == 1
            assert capsys.readouterr().err.strip().endswith(f"interrupted before the run started; nothing was "
                                                            f"written ({out} holds an older run, left as it was)")
        assert main([*simulate, "--resume", "--set", "solver.t_final=0.5"]) == 1  # resumed: the frames are this run's
        assert capsys.readouterr().err.strip().endswith(f"interrupted; 4 frames saved in {out}, --resume continues")
        assert main([*simulate, "--resume"]) == 1  # the same t_final: complete already
        assert capsys.readouterr().err.strip().endswith(f"interrupted before the run started; {out} is complete (4 frames), "
                                                        "nothing to resume")
    steady = [*simulate, "--set", "solver.steady_tol=100"]  # stops at its first frame, where it stops again
    assert main([*steady, "--overwrite"]) == 0
    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr(run_module, "setup_run", interrupt)
        assert main([*steady, "--resume"]) == 1
        assert capsys.readouterr().err.strip().endswith(f"interrupted before the run started; {out} stopped at t = 0 "
                                                        "(1 frame), nothing to resume")


def test_resume_of_a_run_stopped_at_its_steady_state_has_nothing_to_do_for_any_t_final(tmp_path, capsys):
    # a later t_final had resumed it: one more frame, and a stop again (the uninterrupted run of that t_final stops where
    # the first did); the message had advised a later t_final
    import h5py
    import numpy as np

    root = Path(__file__).resolve().parents[3]
    sets = ["--quiet", "--set", "init.n=16", "--set", "solver.steady_tol=1e-3"]
    out, longer = tmp_path / "st.h5", tmp_path / "st50.h5"
    simulate = ["simulate", str(root / "data" / "default.toml"), *sets]
    assert main([*simulate, "-o", str(out), "--set", "solver.t_final=40"]) == 0
    capsys.readouterr()
    before = out.read_bytes()
    assert main([*simulate, "-o", str(out), "--set", "solver.t_final=50", "--resume"]) == 0
    said = capsys.readouterr().out
    assert out.read_bytes() == before
    assert main([*simulate, "-o", str(longer), "--set", "solver.t_final=50"]) == 0
    capsys.readouterr()
    with h5py.File(out, "r") as f, h5py.File(longer, "r") as g:
        np.testing.assert_array_equal(f["t"][()], g["t"][()])
        last = float(f["t"][-1])
    assert last < 40 and f"{out} stopped at t = {last:g} (steady state at t={last:g}" in said
    assert "whatever its solver.t_final; nothing to resume" in said and "later solver.t_final" not in said
    assert (f"--set init.kind=run --set init.path={out.resolve()} --set init.time={last!r} --set solver.steady_tol=0.0001 "
            "-o NEW.h5") in said


def test_bench_names_the_blas_its_numbers_depend_on(capsys, monkeypatch):
    # plain bench had named no BLAS library (its absolute numbers depend on it), and --compare had shown BLAS's own
    # default threads as if the kernels ran on them
    import json

    import meanfield.solvers.bench as bench_module

    monkeypatch.setattr(bench_module, "run_benchmarks", lambda quick=False: {"attention": [], "sphere": []})
    assert main(["bench", "--json"]) == 0
    blas = json.loads(capsys.readouterr().out)["blas"]
    assert blas and all({"internal_api", "architecture", "num_threads"} <= set(entry) for entry in blas)
    assert main(["bench"]) == 0
    assert "held to one inside meanfield's kernels" in capsys.readouterr().out


def test_threads_is_taken_after_a_sub_command_too(capsys, monkeypatch):
    # `meanfield theory beta-star --threads 1` had been refused ("unrecognized arguments"), though every command takes it
    import numba

    import meanfield.kernels.jit as jit

    monkeypatch.delenv("MEANFIELD_NUM_THREADS", raising=False)
    threads, numba_threads = jit.num_threads(), numba.get_num_threads()
    during = []
    real = jit.set_num_threads
    monkeypatch.setattr(jit, "set_num_threads", lambda n: real(n) or during.append(jit.num_threads()))
    assert main(["theory", "beta-star", "--threads", "1"]) == 0
    assert during == [1]
    # and given back after the command: main called from Python had left it set for the rest of the process
    assert "MEANFIELD_NUM_THREADS" not in os.environ and jit.num_threads() == threads and numba.get_num_threads() == numba_threads
    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "2")
    assert main(["theory", "--threads", "1", "beta-star"]) == 0
    assert during == [1, 1] and os.environ["MEANFIELD_NUM_THREADS"] == "2"
    assert main(["theory", "--threads", "1", "beta-star"]) == 0
    # and before the command (`meanfield --threads 1 run` had been refused: "invalid choice: '1'")
    assert main(["--threads", "1", "theory", "beta-star"]) == 0
    assert during == [1, 1, 1, 1]
    assert main(["--threads", "2", "theory", "beta-star", "--threads", "1"]) == 0 and during[-1] == 1  # the command's own
    capsys.readouterr()
    assert main(["theory", "beta-star", "--threads", "0"]) == 2
    assert "--threads: must be an integer >= 1" in capsys.readouterr().err


def test_concentration_of_a_config_without_sweep_beta_points_to_it(tmp_path, capsys):
    # it had said only that the config is not an HDF5 file
    config = Path(__file__).resolve().parents[3] / "data" / "concentration.toml"
    assert main(["concentration", str(config)]) == 2
    assert f"OUT.h5: {config} is a config: the β family of a config is --sweep-beta" in capsys.readouterr().err


def test_resume_of_a_complete_run_draws_its_picture(tmp_path, capsys):
    # a run interrupted while its picture was drawn had never got it: --resume said "nothing to resume" and drew none
    config = str(Path(__file__).resolve().parents[3] / "data" / "default.toml")
    out, picture = tmp_path / "r.h5", tmp_path / "r.png"
    sets = ["--set", "solver.t_final=0.1", "--set", "init.n=8", "--quiet"]
    assert main(["simulate", config, "-o", str(out), *sets]) == 0
    assert main(["simulate", config, "-o", str(out), "--resume", "--plot", str(picture), *sets]) == 0
    assert "nothing to resume" in capsys.readouterr().out and picture.stat().st_size > 0
    ran = tmp_path / "run.h5"
    assert main(["run", "--out", str(ran), "--plot", str(tmp_path / "run.png"), "--set", "solver.t_final=0.1", "--quiet"]) == 0
    (tmp_path / "run.png").unlink()
    assert main(["run", "--out", str(ran), "--plot", str(tmp_path / "run.png"), "--set", "solver.t_final=0.1", "--quiet",
                 "--resume"]) == 0
    assert (tmp_path / "run.png").stat().st_size > 0
