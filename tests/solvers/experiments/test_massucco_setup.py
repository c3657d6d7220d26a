"""The experiments of Massucco et al., *Transformers as time-dependent gradient flows* (arXiv 2605.18870), from a config.

``meanfield simulate data/massucco_ou.toml`` is compared with this file's own NumPy
transcription of the authors' explicit Euler recursion (tokens, and the weights by
Euler–Maruyama), with the same random draws; then every new key's bad values.
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.cli import main
from meanfield.config import load_config, read_toml
from meanfield.errors import ConfigError

DATA = Path(__file__).resolve().parents[3] / "data"
OU = DATA / "massucco_ou.toml"
OSC = DATA / "massucco_oscillating.toml"
STEPS = 200


def authors_recursion(cfg: dict, steps: int, H: int) -> np.ndarray:
    """Tokens every ``rec`` steps of the authors' scheme, transcribed independently (NumPy, float64)."""
    n, dt = cfg["init"]["n"], cfg["solver"]["dt"]
    sigma, kappa = cfg["weights"]["sigma"], cfg["weights"]["kappa"]
    # tokens: a vertex of the octahedron at random, plus N(0, spread²), normalised
    rng = np.random.default_rng(cfg["init"]["seed"])
    vertices = np.vstack([np.eye(3), -np.eye(3)])
    pts = vertices[rng.choice(6, n)] + rng.normal(0.0, cfg["init"]["spread"], (n, 3))
    x = pts / np.linalg.norm(pts, axis=1, keepdims=True)
    # heads: D_h = Z + Zᵀ
    Z = np.random.default_rng(cfg["model"]["seed"]).standard_normal((H, 3, 3))
    D = Z + np.transpose(Z, (0, 2, 1))
    noise = np.random.default_rng(cfg["weights"]["seed"])
    rec = round(cfg["solver"]["save_every"] / dt)
    frames = [x.copy()]
    for k in range(steps):
        logits = np.einsum("nd,hde,me->hnm", x, D, x)          # x_nᵀ D_h x_m, β = 1
        U = np.exp(logits)
        A = U / U.sum(axis=-1, keepdims=True)
        Dx = np.einsum("hde,me->hmd", D, x)
        field = np.einsum("hnm,hmd->hnd", A, Dx)                 # V_h = D_h
        field = field - np.sum(field * x[None], axis=-1, keepdims=True) * x[None]
        v = field.mean(axis=0)                                   # the mean over heads
        x = x - dt * v                                           # descent, explicit Euler
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        D = D + kappa * (np.eye(3) - D) * dt                     # Euler–Maruyama for the weights
        Zk = noise.standard_normal((H, 3, 3))
        D = D + sigma * np.sqrt(dt) * 0.5 * (Zk + np.transpose(Zk, (0, 2, 1)))
        if (k + 1) % rec == 0:
            frames.append(x.copy())
    return np.stack(frames)


@pytest.mark.parametrize("H", [1, 10])
def test_simulate_matches_the_authors_recursion(tmp_path, H):
    out = tmp_path / "ou.h5"
    t_final = STEPS * 0.005
    rc = main(["simulate", str(OU), "-o", str(out), "--quiet", "--set", f"solver.t_final={t_final}",
               "--set", f"model.num_heads={H}"])
    assert rc == 0
    with h5py.File(out, "r") as f:
        x = f["x"][()]
        t = f["t"][()]
    cfg = load_config(OU, [f"solver.t_final={t_final}", f"model.num_heads={H}"])
    ref = authors_recursion(cfg, STEPS, H)
    assert x.shape == ref.shape
    assert np.isclose(t[-1], t_final)
    err = float(np.max(np.abs(x - ref)))
    assert err < 1e-9, err
    assert float(np.max(np.abs(x[-1] - x[0]))) > 1e-2  # the cloud moved: the comparison is not vacuous


def test_the_two_configs_resolve():
    ou = load_config(OU)
    assert ou["model"]["combine"] == "mean" and ou["weights"]["noise"] == "symmetric"
    osc = load_config(OSC)
    assert osc["weights"]["schedule"] == "relaxation"
    for cfg in (ou, osc):
        assert cfg["init"]["kind"] == "clusters" and cfg["init"]["n"] == 200
        assert cfg["solver"]["method"] == "euler" and cfg["solver"]["dt"] == 0.005 and cfg["solver"]["t_final"] == 20.0
        assert cfg["model"]["beta"] == 1.0 and cfg["model"]["direction"] == "descent"


def test_relaxation_follows_the_authors_euler_recursion():
    from meanfield.build import build_schedule

    cfg = load_config(OSC, ["model.num_heads=3", "weights.phases=spread"])
    sched = build_schedule(cfg)
    Z = np.random.default_rng(cfg["model"]["seed"]).standard_normal((3, 3, 3))
    D = Z + np.transpose(Z, (0, 2, 1))
    dt = cfg["weights"]["dt"]
    for k in range(40):
        t = k * dt
        got = sched.at(t)
        assert np.max(np.abs(got.B - D)) < 1e-12 and np.array_equal(got.B, got.V)
        F = np.empty((3, 3, 3))
        for h in range(3):
            s = t + 2 * np.pi * h / 3
            c, s2, sn, c2 = 1.5 * np.cos(s), np.sin(2 * s), np.sin(s), np.cos(2 * s)
            F[h] = [[2 + c, s2, sn], [s2, 2 + 1.5 * np.sin(s), c2], [sn, c2, 2 + 1.5 * np.cos(s + np.pi / 4)]]
        D = D + (F - D) * dt


def test_clusters_combine_and_num_heads_defaults_keep_todays_behaviour():
    cfg = load_config(None)
    assert cfg["model"]["combine"] == "sum" and cfg["model"]["num_heads"] is None
    assert cfg["weights"]["initial"] == "mean" and cfg["weights"]["integrator"] == "auto"
    from meanfield.build import build_schedule
    from meanfield.heads.schedules import OUSchedule

    assert isinstance(build_schedule(load_config(None, ["weights.schedule=ou"])), OUSchedule)


def test_combine_mean_is_the_sum_over_H():
    from meanfield.build import build_model
    from meanfield.geometry.sphere import sample

    x = sample("clusters", 30, 3, seed=3)
    heads = ['model.heads=[{Q = "random", K = "random", V = "random"}]', "model.num_heads=4"]
    s = build_model(load_config(None, heads)).velocity(x, 0.0)
    m = build_model(load_config(None, heads + ["model.combine=mean"])).velocity(x, 0.0)
    assert np.max(np.abs(m - s / 4)) < 1e-14
    with pytest.raises(ConfigError, match="model.combine"):
        load_config(None, ["model.attention=pooled", "model.combine=mean"])


def test_num_heads_gives_each_head_its_own_draw():
    from meanfield.build import build_heads

    heads = build_heads(load_config(None, ['model.heads=[{Q = "random", K = "random", V = "aligned"}]', "model.num_heads=3"]))
    assert len(heads) == 3 and not np.allclose(heads[0].Q, heads[1].Q)


@pytest.mark.parametrize("assignment, key", [
    ("init.centers=[[1, 0]]", "init.centers"),
    ("init.centers=tetrahedron", "init.centers"),
    ("init.spread=-0.1", "init.spread"),
    ("model.combine=average", "model.combine"),
    ("model.num_heads=0", "model.num_heads"),
    ("weights.initial=random", "weights.initial"),
    ("weights.noise=pink", "weights.noise"),
    ("weights.mean=[[1, 0], [0, 1]]", "weights.mean"),
    ("weights.mean=eye", "weights.mean"),
    ("weights.integrator=rk4", "weights.integrator"),
    ("weights.rate=-1", "weights.rate"),
    ("weights.phases=opposite", "weights.phases"),
])
def test_bad_values_name_the_key(assignment, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(OU, [assignment])


@pytest.mark.parametrize("raw, key", [
    ({"weights": {"schedule": "relaxation"}}, "weights.target"),
    ({"weights": {"schedule": "relaxation", "target": [[1, 0, 0], [0, 1, 0]]}}, "weights.target"),
    ({"weights": {"schedule": "relaxation", "target": [[1, 0, 0], [0, 1, 0], [0, 0, "__import__('os')"]]}}, r"weights.target\[2\]\[2\]"),
    ({"weights": {"schedule": "relaxation", "target": [[1, 0, 0], [0, 1, 0], [0, 0, "cos(x)"]]}}, r"weights.target\[2\]\[2\]"),
    ({"weights": {"schedule": "relaxation", "integrator": "exact", "target": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}}, "weights.integrator"),
    ({"weights": {"schedule": "constant", "initial": "random-symmetric"}}, "weights.initial"),
    ({"weights": {"schedule": "ou", "target": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}}, "weights.target"),
    ({"weights": {"schedule": "ou", "noise": "symmetric"}, "model": {"heads": [{"Q": "identity", "K": "identity", "V": 2.0}]}}, "^weights.noise: "),
    ({"model": {"num_heads": 3, "heads": [{"Q": "identity", "K": "identity", "V": "identity"}] * 2}}, "model.num_heads"),
    ({"init": {"kind": "clusters"}, "solver": {"kind": "grid"}}, "init.kind"),
])
def test_bad_combinations_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=key):
        load_config(raw)


def test_cli_exits_2_on_a_bad_new_key(tmp_path, capsys):
    rc = main(["simulate", str(OU), "-o", str(tmp_path / "x.h5"), "--set", "weights.noise=pink"])
    assert rc == 2
    assert "weights.noise" in capsys.readouterr().err
    rc = main(["simulate", str(OSC), "-o", str(tmp_path / "y.h5"), "--set", 'weights.target=[["t", 0, 0]]'])
    assert rc == 2
    assert "weights.target" in capsys.readouterr().err


def test_configs_cite_the_paper():
    for path in (OU, OSC):
        text = path.read_text()
        assert "arXiv 2605.18870" in text and "Transformers as time-dependent gradient flows" in text
        read_toml(path)


def test_exact_ou_transition_draw_for_draw():
    from meanfield.build import build_schedule

    cfg = load_config(OU, ["weights.integrator=exact", "model.num_heads=2"])
    sched = build_schedule(cfg)
    dt, sigma = cfg["weights"]["dt"], cfg["weights"]["sigma"]
    Z = np.random.default_rng(cfg["model"]["seed"]).standard_normal((2, 3, 3))
    D = Z + np.transpose(Z, (0, 2, 1))
    noise = np.random.default_rng(cfg["weights"]["seed"])
    scale = sigma * np.sqrt(-np.expm1(-2 * dt) / 2)
    for k in range(20):
        assert np.max(np.abs(sched.at(k * dt).B - D)) < 1e-12
        Zk = noise.standard_normal((2, 3, 3))
        D = np.eye(3) + np.exp(-dt) * (D - np.eye(3)) + scale * 0.5 * (Zk + np.transpose(Zk, (0, 2, 1)))
    mid = sched.at(2.5 * dt).B
    assert np.allclose(mid, 0.5 * (sched.at(2 * dt).B + sched.at(3 * dt).B), rtol=0, atol=1e-12)
    assert np.allclose(mid, np.transpose(mid, (0, 2, 1)), rtol=0, atol=1e-14)


@pytest.mark.parametrize("config, sets, key", [
    (OSC, ["weights.rate=1000"], "weights.rate"),
    (OU, ["weights.kappa=1000", "weights.integrator=euler-maruyama"], "weights.kappa"),
])
def test_an_unstable_weight_recursion_names_its_rate_not_the_target(tmp_path, capsys, config, sets, key):
    # rate × dt = 5 > 2 diverges: the message had named weights.target (or only "weights")
    out = tmp_path / "x.h5"
    argv = ["simulate", str(config), "-o", str(out), "--quiet", "--set", "solver.t_final=3", "--set", "model.num_heads=2"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {key}: the Euler recursion of the weights diverges" in err and "weights.dt" in err, err
    assert not out.exists()
