"""The experiments of Massucco et al. (arXiv 2605.18870) on S¹ (d = 2) and S^{d−1} (d = 5), from the shipped configs.

Each run of the four configs ``data/massucco_ou_s1.toml``, ``data/massucco_oscillating_s1.toml``,
``data/massucco_ou_d5.toml`` and ``data/massucco_oscillating_d5.toml`` is compared with this file's own
NumPy transcription of the authors' explicit Euler recursion (``attn_sphere/engine.py`` of
their public code: tokens by explicit Euler, the weights by Euler–Maruyama, the oscillating
targets of ``attn_sphere/drift.py`` for d = 2 and for d ≥ 4), with the same random draws.
The S² comparison is in ``test_massucco_setup.py``.
"""
from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest

import meanfield as mf
from meanfield.cli import main
from meanfield.config import load_config

DATA = Path(__file__).resolve().parents[3] / "data"
CONFIGS = {name: DATA / f"massucco_{name}.toml" for name in ("ou_s1", "oscillating_s1", "ou_d5", "oscillating_d5")}
STEPS = 60


def authors_target(t: float, H: int, d: int, spread: bool) -> np.ndarray:
    """The authors' oscillating target F_h(t) (make_drift_oscillating), shape (H, d, d)."""
    F = np.zeros((H, d, d))
    for h in range(H):
        tt = t + (2 * math.pi * h / H if spread else 0.0)
        if d == 2:
            c, s2 = 1.5 * math.cos(tt), math.sin(2 * tt)
            F[h] = [[2 + c, s2], [s2, 2 - c]]
            continue
        pairs = d * (d - 1) // 2
        for i in range(d):
            F[h, i, i] = 2 + 1.5 * math.cos(tt + 2 * math.pi * i / d)
        p = 0
        for i in range(d):
            for j in range(i + 1, d):
                F[h, i, j] = F[h, j, i] = math.sin(2 * tt + 2 * math.pi * p / pairs)
                p += 1
    return F


def authors_tokens(cfg: dict) -> np.ndarray:
    """The clustered initial tokens: a center at random, plus N(0, spread²) noise, normalised."""
    d, n = cfg["model"]["d"], cfg["init"]["n"]
    if d == 2:  # the five angles 2πk/5 of the authors' S¹ clusters
        centers = np.array([[math.cos(2 * math.pi * k / 5), math.sin(2 * math.pi * k / 5)] for k in range(5)])
    else:  # the cross-polytope ±e_i
        centers = np.vstack([np.eye(d), -np.eye(d)])
    rng = np.random.default_rng(cfg["init"]["seed"])
    pts = centers[rng.choice(len(centers), n)] + rng.normal(0.0, cfg["init"]["spread"], (n, d))
    return pts / np.linalg.norm(pts, axis=1, keepdims=True)


def authors_recursion(cfg: dict, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens every ``rec`` steps of the authors' scheme, and their G² at those frames (NumPy, float64)."""
    d, H, dt = cfg["model"]["d"], cfg["model"]["num_heads"], cfg["solver"]["dt"]
    ou = cfg["weights"]["schedule"] == "ou"
    spread = cfg["weights"]["phases"] == "spread"
    x = authors_tokens(cfg)
    n = x.shape[0]
    Z = np.random.default_rng(cfg["model"]["seed"]).standard_normal((H, d, d))
    D = Z + np.transpose(Z, (0, 2, 1))
    noise = np.random.default_rng(cfg["weights"]["seed"])
    sigma = cfg["weights"]["sigma"]
    rec = round(cfg["solver"]["save_every"] / dt)
    frames, g2 = [], []
    for k in range(steps + 1):
        U = np.exp(np.einsum("nd,hde,me->hnm", x, D, x))            # e^{x_nᵀ D_h x_m}, β = 1
        N = U.sum(axis=-1)                                          # (H, n) partition sums
        field = np.einsum("hnm,hed,md->hne", U / N[..., None], D, x)  # Σ_m p_nm D_h x_m (D_h symmetric)
        field = field - np.sum(field * x[None], axis=-1, keepdims=True) * x[None]
        v = field.mean(axis=0)                                      # the mean over heads
        if k % rec == 0:
            frames.append(x.copy())
            g2.append(np.mean(np.sum(v * v, axis=1) / np.mean(n / N, axis=0)))
        if k == steps:
            break
        x = x - dt * v                                              # descent, explicit Euler
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        if ou:
            D = D + (np.eye(d) - D) * dt
            Zk = noise.standard_normal((H, d, d))
            D = D + sigma * math.sqrt(dt) * 0.5 * (Zk + np.transpose(Zk, (0, 2, 1)))
        else:
            D = D + (authors_target(k * dt, H, d, spread) - D) * dt
    return np.stack(frames), np.asarray(g2)


@pytest.mark.parametrize("name, H, n", [("ou_s1", 5, 100), ("oscillating_s1", 3, 100), ("ou_d5", 3, 80), ("oscillating_d5", 4, 80)])
def test_the_run_is_the_authors_recursion(name, H, n):
    t_final = STEPS * 0.005
    sets = [f"solver.t_final={t_final}", f"model.num_heads={H}", f"model.seed={42 + H}", f"init.n={n}"]
    cfg = load_config(CONFIGS[name], sets)
    run = mf.simulate(cfg)
    ref, g2 = authors_recursion(cfg, STEPS)
    assert run.x.shape == ref.shape and np.isclose(run.t[-1], t_final)
    np.testing.assert_allclose(run.x, ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(run.diagnostics["authors_G2"], g2, rtol=1e-9, atol=0)
    assert float(np.max(np.abs(run.x[-1] - run.x[0]))) > 1e-2  # the cloud moved: the comparison is not vacuous


def test_the_cli_runs_the_s1_config_as_the_authors(tmp_path):
    out = tmp_path / "s1.h5"
    assert main(["simulate", str(CONFIGS["ou_s1"]), "-o", str(out), "--quiet", "--set", "solver.t_final=0.25"]) == 0
    with h5py.File(out, "r") as f:
        x = f["x"][()]
        assert f["weights/B"].shape[1:] == (5, 2, 2)
    ref, _ = authors_recursion(load_config(CONFIGS["ou_s1"], ["solver.t_final=0.25"]), 50)
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-10)


def test_the_configs_are_the_authors_setups():
    s1, d5 = load_config(CONFIGS["ou_s1"]), load_config(CONFIGS["ou_d5"])
    assert (s1["model"]["d"], s1["init"]["n"], s1["model"]["seed"], s1["weights"]["seed"]) == (2, 100, 47, 1005)
    assert (d5["model"]["d"], d5["init"]["n"], d5["model"]["seed"], d5["weights"]["seed"]) == (5, 200, 52, 3010)
    for path in CONFIGS.values():
        cfg = load_config(path)
        assert cfg["solver"]["dt"] == 0.005 and cfg["solver"]["t_final"] == 20.0 and cfg["model"]["combine"] == "mean"
        text = path.read_text()
        assert "arXiv 2605.18870" in text and "Transformers as time-dependent gradient flows" in text
    # the d ≥ 4 target is the authors' formula at every t and phase
    from meanfield.build import build_schedule

    cfg = load_config(CONFIGS["oscillating_d5"], ["model.num_heads=3"])
    F = build_schedule(cfg).target
    for t in (0.0, 0.7, 3.1):
        np.testing.assert_allclose(F(t, 2 * np.pi * np.arange(3) / 3), authors_target(t, 3, 5, True), rtol=0, atol=1e-14)


@pytest.mark.parametrize("d", [2, 4, 7])
def test_another_dimension_runs_with_its_own_clusters(d):
    """``--set model.d=…`` on the d = 5 configs: the cross-polytope clusters follow, the target must be d×d."""
    cfg = load_config(CONFIGS["ou_d5"], [f"model.d={d}", "solver.t_final=0.05", "init.n=20", "model.num_heads=2"])
    run = mf.simulate(cfg)
    assert run.x.shape[-1] == d and np.all(np.isfinite(run.diagnostics["authors_G2"]))
    with pytest.raises(mf.ConfigError, match="weights.target"):
        load_config(CONFIGS["oscillating_d5"], [f"model.d={d}"])
