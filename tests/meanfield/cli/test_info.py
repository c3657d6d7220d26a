"""``meanfield info``: ``--check``, ``--plot`` of files it cannot draw, ``--follow`` of a run started with it, the heads line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import meanfield as mf
from meanfield.cli import main

_SMALL = {"init": {"n": 12}, "solver": {"t_final": 0.2, "save_every": 0.1}}


@pytest.fixture
def small_run(tmp_path: Path) -> Path:
    out = tmp_path / "small.h5"
    mf.simulate(_SMALL, out=out)
    return out


def test_check_names_every_damaged_frame_where_the_summary_reads_the_last_only(small_run: Path, capsys) -> None:
    # a frame changed on disk was named only when it was the last one (the one the summary reads)
    assert main(["info", str(small_run), "--check"]) == 0
    assert "checksums: all 3 frames match" in capsys.readouterr().out
    with h5py.File(small_run, "r+") as f:
        f["x"][0, 0, 0] += 1e-9
        f["x"][1, 3, 1] += 1e-9
    assert main(["info", str(small_run)]) == 0  # the last frame is whole
    capsys.readouterr()
    assert main(["info", str(small_run), "--check"]) == 2
    err = capsys.readouterr().err
    assert "2 of its 3 frames do not match" in err and "frames 0 (t = 0), 1 (t = 0.1)" in err
    assert main(["info", str(small_run), "--check", "--follow"]) == 2
    assert "error: --check" in capsys.readouterr().err
    with h5py.File(small_run, "r+") as f:  # frames written before checksums: not checked, and said so
        f["checksum"][:2] = -1
    assert main(["info", str(small_run), "--check"]) == 0
    assert "checksums: 1 frame matches its own; 2 written before checksums were not checked" in capsys.readouterr().out
    with h5py.File(small_run, "r+") as f:
        del f["checksum"]
    assert main(["info", str(small_run), "--check"]) == 0
    assert "checksums: none in" in capsys.readouterr().out  # (it had said "all 3 frames match")


def test_follow_lines_give_the_log_energy_where_the_energy_is_past_the_floats(tmp_path: Path, capsys) -> None:
    from meanfield.cli.info import _frame_line

    cold = mf.simulate({"model": {"beta": 1024.0}, "init": {"n": 12}, "solver": {"t_final": 0.1, "save_every": 0.1}})
    line = _frame_line(1, float(cold.t[1]), dict(cold.diagnostics))
    assert "  energy =" not in line and f"log_energy = {cold.diagnostics['log_energy'][1]:.12g}" in line
    warm = mf.simulate(_SMALL)
    assert "log_energy" not in _frame_line(1, float(warm.t[1]), dict(warm.diagnostics))


def test_follow_of_a_finished_run_prints_each_frame_once_with_its_own_diagnostics(small_run: Path, capsys) -> None:
    # every frame line had carried the last frame's numbers, and a look had skipped the first frame it printed
    run = mf.load(small_run)
    assert main(["info", str(small_run), "--follow", "--interval", "0.01"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("frame ")]
    assert [int(words[1]) for words in lines] == list(range(run.frames)) == [0, 1, 2]
    for k, words in enumerate(lines):
        values = {words[i - 1]: float(words[i + 1]) for i, word in enumerate(words) if word == "="}
        np.testing.assert_allclose(values["t"], run.t[k], rtol=1e-5, atol=1e-12)
        for key in ("energy", "max_speed"):
            np.testing.assert_allclose(values[key], run.diagnostics[key][k], rtol=1e-5, atol=0)
    assert run.diagnostics["energy"][0] != pytest.approx(run.diagnostics["energy"][-1], rel=1e-4)


def test_plot_of_a_file_it_cannot_draw_exits_2_without_a_traceback(small_run: Path, tmp_path: Path, capsys) -> None:
    # a non-finite frame, or no committed frame, had ended in a ValueError traceback (exit 1)
    picture = tmp_path / "p.png"
    with h5py.File(small_run, "r+") as f:
        f["x"][-1, 0, 0] = np.nan
    assert main(["info", str(small_run), "--plot", str(picture)]) == 2
    err = capsys.readouterr().err
    assert "error: --plot: cannot draw" in err and "non-finite" in err and "Traceback" not in err
    with h5py.File(small_run, "r+") as f:
        f["committed_frames"][0] = 0
    assert main(["info", str(small_run), "--plot", str(picture)]) == 2
    assert "has no committed frame to draw yet" in capsys.readouterr().err
    assert not picture.exists()


def test_follow_waits_for_a_run_started_at_the_same_time(tmp_path: Path, monkeypatch, capsys) -> None:
    # `meanfield simulate ... & meanfield info OUT.h5 --follow` had stopped at once with "file not found": for the
    # seconds before the writer took the name there was neither a file nor a lock
    import meanfield.cli.info as info

    monkeypatch.setattr(info, "START_GRACE_SECONDS", 300.0)  # the writer's start (imports, compilation) under load
    config = tmp_path / "c.toml"
    config.write_text("[init]\nn = 12\n[solver]\nt_final = 0.3\nsave_every = 0.1\n")
    out = tmp_path / "live.h5"
    writer = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet"])
    try:
        assert main(["info", str(out), "--follow", "--interval", "0.1"]) == 0
    finally:
        writer.wait(timeout=300)
    captured = capsys.readouterr()
    assert f"waiting for {out}" in captured.err
    assert "frame     3  t = 0.3" in captured.out and "status:    completed" in captured.out


def test_follow_gives_up_on_a_name_nobody_makes(tmp_path: Path, monkeypatch, capsys) -> None:
    import meanfield.cli.info as info

    clock = iter(np.arange(0.0, 100.0, 0.25))
    monkeypatch.setattr(info.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(info.time, "sleep", lambda seconds: None)
    assert main(["info", str(tmp_path / "never.h5"), "--follow"]) == 2
    err = capsys.readouterr().err
    assert "file not found" in err and f"no run made it within {info.START_GRACE_SECONDS:.0f} s" in err
    assert main(["info", str(tmp_path), "--follow"]) == 2  # a folder fails at once
    assert "waiting" not in capsys.readouterr().err


def test_heads_line_counts_a_checkpoints_heads(tmp_path: Path, capsys) -> None:
    # it had printed the checkpoint's spec where every other run prints the number of heads
    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    write_synthetic_checkpoint(tmp_path / "ck", d=8, num_layers=1, num_heads=4, seed=2)
    spec = f"checkpoint:{tmp_path / 'ck'}#layer=0"
    out = tmp_path / "ck.h5"
    mf.simulate({"model": {"heads": spec, "d": 8}, "init": {"n": 10}, "solver": {"t_final": 0.1, "save_every": 0.1}}, out=out)
    assert main(["info", str(out)]) == 0
    assert f"heads:     4 ({spec})" in capsys.readouterr().out


def test_info_names_a_causal_mask_and_the_heads_mean(tmp_path: Path, capsys) -> None:
    # a masked run's model line had read "d=3 β=1 attention=softmax direction=ascent", as an unmasked run's, and
    # combine = "mean" as the sum (found in review)
    config = tmp_path / "run.toml"
    config.write_text('[model]\nd = 3\nbeta = 1.0\n[init]\nn = 8\n[solver]\nt_final = 0.1\nsave_every = 0.1\n')
    out, plain = tmp_path / "masked.h5", tmp_path / "plain.h5"
    assert main(["simulate", str(config), "-o", str(out), "--quiet", "--set", "model.mask=causal",
                 "--set", "model.combine=mean", "--set", "model.norm=peri"]) == 0
    assert main(["simulate", str(config), "-o", str(plain), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    assert "model:     d=3 β=1 attention=softmax direction=ascent mask=causal combine=mean norm=peri\n" in capsys.readouterr().out
    assert main(["info", str(plain)]) == 0  # the default run's line is as it was
    assert "model:     d=3 β=1 attention=softmax direction=ascent\n" in capsys.readouterr().out
