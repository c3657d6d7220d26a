"""Random weight ensembles (goe, gaussian, gpt2) and the ``layers`` schedule: laws, redraws, layer-by-layer runs, resume.

The moments are checked against each law with tolerances of five standard errors of the
sample; the GOE spectrum against Wigner's semicircle; a ``layers`` run against the
composition of constant-head runs (``meanfield.solve``), one per layer.
"""
from __future__ import annotations

import math

import h5py
import numpy as np
import pytest

from meanfield.build import build_heads, build_model, initial_tokens
from meanfield.cli import main
from meanfield.config import load_config
from meanfield.errors import ConfigError
from meanfield.heads import HeadStack, head_from_spec
from meanfield.heads.head import HEADS_STREAM
from meanfield.heads.ensembles import ENSEMBLES, draw, entry_variance, semicircle_cdf, semicircle_density
from meanfield.heads.schedules import LayerSchedule, schedule_from_path
from meanfield.model import ConstantHeads
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, solve
from meanfield.solvers.run import simulate_config

D = 6
DRAWS = 4000


def _variance_tolerance(var: float, count: int) -> float:
    """Five standard errors of a sample variance of ``count`` Gaussian values: 5 σ² √(2/(N−1))."""
    return 5.0 * var * math.sqrt(2.0 / (count - 1))


def _sample(name: str, *, rows: int = D, d: int = D, draws: int = DRAWS) -> np.ndarray:
    """``draws`` matrices of a config value, each from its own head seed (the public path: head tables)."""
    spec = {"Q": "identity" if name == "goe" else name, "K": name, "V": "identity"}
    if name != "goe":
        spec["k"] = rows
    return np.stack([head_from_spec({**spec, "seed": s}, d=d).K for s in range(draws)])


@pytest.mark.parametrize("name", sorted(ENSEMBLES))
def test_entry_moments_match_the_law(name):
    M = _sample(name, rows=D)
    diag_var, off_var = entry_variance(name, D)
    expected = {"goe": (2 / D, 1 / D), "gaussian": (1 / D, 1 / D), "gpt2": (0.02**2, 0.02**2)}[name]
    np.testing.assert_allclose((diag_var, off_var), expected, rtol=1e-15)  # the table, written out
    diag = M[:, np.arange(D), np.arange(D)].reshape(-1)
    off = M[:, ~np.eye(D, dtype=bool)].reshape(-1)
    if name == "goe":  # symmetric: the independent entries are the upper triangle
        np.testing.assert_array_equal(M, np.swapaxes(M, 1, 2))
        off = M[:, np.triu(np.ones((D, D), dtype=bool), 1)].reshape(-1)
    for values, var in ((diag, expected[0]), (off, expected[1])):
        np.testing.assert_allclose(values.mean(), 0.0, rtol=0, atol=5 * math.sqrt(var / values.size))
        np.testing.assert_allclose(values.var(), var, rtol=0, atol=_variance_tolerance(var, values.size))
    # fourth moment of a Gaussian: 3σ⁴ (standard error of the sample mean of x⁴: √(96σ⁸/N))
    np.testing.assert_allclose(np.mean(off**4), 3 * expected[1] ** 2, rtol=0, atol=5 * math.sqrt(96 / off.size) * expected[1] ** 2)
    # distinct entries are uncorrelated
    a, b = M[:, 0, 1], M[:, 0, 2]
    np.testing.assert_allclose(np.mean(a * b), 0.0, rtol=0, atol=5 * expected[1] / math.sqrt(a.size))


def test_gaussian_product_score_matrix():
    """Q, K with N(0, 1/d) entries, k rows: B = QᵀK has E B = 0, Var B_ab = k/d², E tr(BᵀB) = k."""
    k, draws = 3, DRAWS
    B = np.stack([head_from_spec({"Q": "gaussian", "K": "gaussian", "k": k, "seed": s}, d=D).B for s in range(draws)])
    var = k / D**2
    np.testing.assert_allclose(B.mean(), 0.0, rtol=0, atol=5 * math.sqrt(var / B.size) * 3)  # entries of one B are dependent: 3× slack
    # each entry is a sum of k products of independent N(0, 1/d): variance k/d², fourth moment 3k(k+2)/d⁴
    entries = B[:, 1, 4]
    sd_of_var = math.sqrt((3 * k * (k + 2) / D**4 - var**2) / draws)
    np.testing.assert_allclose(entries.var(), var, rtol=0, atol=5 * sd_of_var)
    frob = np.einsum("sab,sab->s", B, B)
    np.testing.assert_allclose(frob.mean(), k, rtol=0, atol=5 * frob.std() / math.sqrt(draws))


def test_gaussian_is_random_draw_for_draw_and_random_is_its_own_stream():
    spec = {"Q": "random", "K": "random", "V": "random", "k": 2, "seed": 9}
    old = head_from_spec(spec, d=4)
    # the rule of "random": Q, K (k×d) then V (d×d), N(0, 1/d), in that order, from the heads' own stream
    rng = np.random.default_rng([HEADS_STREAM, 9])
    Q, K, V = (rng.standard_normal(shape) / 2.0 for shape in ((2, 4), (2, 4), (4, 4)))
    np.testing.assert_array_equal(old.Q, Q)
    np.testing.assert_array_equal(old.K, K)
    np.testing.assert_array_equal(old.V, V)
    new = head_from_spec({**spec, "Q": "gaussian", "K": "gaussian", "V": "gaussian"}, d=4)
    for name in ("Q", "K", "V"):
        np.testing.assert_array_equal(getattr(new, name), getattr(old, name))


def test_random_heads_are_not_the_initial_tokens_with_the_default_seeds():
    # model.seed = init.seed = 0: the heads had been drawn from default_rng(0), the initial tokens' stream, so that
    # the rows of Q were tokens 1..k, those of K the next k and those of V the next d (cosines exactly 1)
    assert HEADS_STREAM == 0x4845414453  # "HEADS": a changed tag changes every random head
    cfg = load_config({"model": {"d": 4, "heads": [{"Q": "random", "K": "random", "V": "random"}]}, "init": {"n": 16},
                       "solver": {"kind": "particle"}})
    assert cfg["model"]["seed"] == cfg["init"]["seed"] == 0
    x, head = initial_tokens(cfg), build_heads(cfg)[0]
    rows = np.concatenate([head.Q, head.K, head.V])  # 12 rows against the tokens 1..12
    cos = np.einsum("ia,ia->i", rows, x[:12]) / (np.linalg.norm(rows, axis=1) * np.linalg.norm(x[:12], axis=1))
    assert np.max(np.abs(cos)) < 0.99, cos
    rng = np.random.default_rng([HEADS_STREAM, 0])  # the stream, exactly
    for name in ("Q", "K", "V"):
        np.testing.assert_array_equal(getattr(head, name), rng.standard_normal((4, 4)) / 2.0)
    # the same for the ensembles and a layer k of weights.schedule = "layers": [HEADS_STREAM, s_h, k]
    goe = head_from_spec({"Q": "identity", "K": "goe", "V": "aligned"}, d=4, seed=0, layer=2)
    G = np.random.default_rng([HEADS_STREAM, 0, 2]).standard_normal((4, 4))
    np.testing.assert_allclose(goe.K, (G + G.T) / math.sqrt(8), rtol=0, atol=1e-15)


def test_goe_transcription_and_gpt2_scale():
    W = head_from_spec({"Q": "identity", "K": "goe", "V": "aligned", "seed": 4}, d=5)
    G = np.random.default_rng([HEADS_STREAM, 4]).standard_normal((5, 5))
    np.testing.assert_allclose(W.K, (G + G.T) / math.sqrt(10), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(W.B, W.V)
    g = head_from_spec({"Q": "gpt2", "K": "identity", "V": "identity", "seed": 4}, d=5)
    np.testing.assert_allclose(g.Q, 0.02 * np.random.default_rng([HEADS_STREAM, 4]).standard_normal((5, 5)), rtol=0, atol=1e-17)


def test_goe_spectrum_fills_the_semicircle():
    d = 600
    lam = np.linalg.eigvalsh(draw("goe", np.random.default_rng(11), d, d))
    # edge: λ_max = 2 − O(d^{-2/3}) (Tracy–Widom: mean −1.21 d^{-2/3}, sd 1.27 d^{-2/3} ≈ 0.018 here)
    np.testing.assert_allclose([lam.max(), lam.min()], [2.0, -2.0], rtol=0, atol=0.1)
    # bulk: Kolmogorov distance to the semicircle (GOE eigenvalues are rigid: O(log d / d))
    ks = np.max(np.abs(semicircle_cdf(np.sort(lam)) - (np.arange(1, d + 1) - 0.5) / d))
    assert ks < 0.02, ks
    # moments (1/d) tr Wᵖ → Catalan numbers 1, 2 (p = 2, 4); exact E at finite d for p = 2: 1 + 1/d
    np.testing.assert_allclose(np.mean(lam**2), 1 + 1 / d, rtol=0, atol=0.02)
    np.testing.assert_allclose(np.mean(lam**4), 2.0, rtol=0, atol=0.08)


def test_semicircle_formulas():
    x = np.linspace(-2, 2, 20001)
    # the cdf is the integral of the density (trapezoid rule), 0 and 1 at the edges
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (semicircle_density(x[1:]) + semicircle_density(x[:-1])) * np.diff(x))])
    np.testing.assert_allclose(semicircle_cdf(x), integral, rtol=0, atol=1e-6)
    np.testing.assert_allclose(semicircle_cdf([-3.0, 0.0, 3.0]), [0.0, 0.5, 1.0], rtol=0, atol=1e-15)


# ----------------------------------------------------------------------------- layers


def _layers_config(**solver) -> dict:
    raw = {
        "model": {"d": 4, "beta": 2.0, "num_heads": 2, "seed": 3,
                  "heads": [{"Q": "identity", "K": "goe", "V": "aligned"}]},
        "init": {"n": 10, "seed": 1},
        "weights": {"schedule": "layers"},
        "solver": {"method": "rk4", "dt": 0.1, "t_final": 3.0, "save_every": 0.25, **solver},
    }
    return load_config(raw)


def test_heads_are_constant_within_a_layer_and_redrawn_across():
    cfg = _layers_config()
    sched = build_model(cfg).heads
    assert isinstance(sched, LayerSchedule)
    first = np.stack([h.B for h in build_heads(cfg)])
    for k in range(4):
        inside = [sched.at(k + s).B for s in (0.0, 0.3, 0.999999)]
        for B in inside[1:]:
            np.testing.assert_array_equal(B, inside[0])
        # layer k of head h: K = GOE from default_rng([HEADS_STREAM, 3 + 1000 h, k]) (layer 0: [HEADS_STREAM, 3 + 1000 h])
        for h in range(2):
            rng = np.random.default_rng([HEADS_STREAM, 3 + 1000 * h] + ([k] if k else []))
            G = rng.standard_normal((4, 4))
            np.testing.assert_allclose(inside[0][h], (G + G.T) / math.sqrt(8), rtol=0, atol=1e-15)
        if k == 0:
            np.testing.assert_array_equal(inside[0], first)  # layer 0 is the constant schedule's heads
        else:
            assert np.max(np.abs(inside[0] - sched.at(k - 0.5).B)) > 0.1  # a new draw
    # the same heads whatever order the layers are asked in
    again = build_model(cfg).heads
    for k in (3, 0, 2, 1):
        np.testing.assert_array_equal(again.at(k + 0.5).B, sched.at(k + 0.5).B)


def test_fixed_matrices_stay_and_pieces_cut_at_integers():
    cfg = load_config({"model": {"d": 3, "heads": [{"Q": "identity", "K": "identity", "V": 2.0},
                                                    {"Q": "gpt2", "K": "gpt2", "V": "gpt2"}]},
                       "weights": {"schedule": "layers"}})
    sched = build_model(cfg).heads
    np.testing.assert_array_equal(sched.at(0.5).V[0], sched.at(4.5).V[0])
    assert not np.array_equal(sched.at(0.5).V[1], sched.at(4.5).V[1])
    pieces = sched.pieces(0.75, 3.0000000000000004)  # an end within round-off of an integer is not cut
    assert [(a, b) for a, b, _ in pieces] == [(0.75, 1.0), (1.0, 2.0), (2.0, 3.0000000000000004)]
    for (a, _, heads), k in zip(pieces, (0, 1, 2)):
        np.testing.assert_array_equal(heads.B, sched.at(k).B)


def _layer_pieces(t_final: float, save_every: float) -> list[tuple[float, float]]:
    times = sorted({*np.minimum(save_every * np.arange(int(t_final / save_every + 1e-9) + 1), t_final).tolist(),
                    *range(1, int(t_final) + 1), t_final})
    return list(zip(times[:-1], times[1:]))


@pytest.mark.parametrize("method, save_every", [("rk4", 0.25), ("rk4", 0.3), ("euler", 0.3), ("rk45", 0.3)])
def test_a_layers_run_is_the_composition_of_constant_head_runs(method, save_every):
    cfg = _layers_config(method=method, save_every=save_every)
    model = build_model(cfg)
    x0 = initial_tokens(cfg)
    solver = ParticleSolver(method=method, dt=0.1)
    run = solve(Problem(model, x0), solver, t_final=3.0, save_every=save_every, energy=False, speed=False)
    # the reference: one constant-head run per piece of [0, 3] between save times and integers
    x = x0
    for a, b in _layer_pieces(3.0, save_every):
        heads = ConstantHeads(model.heads.heads(int(math.floor(0.5 * (a + b)))))
        const = build_model(cfg, schedule=heads)
        x = solve(Problem(const, x), solver, t_final=b - a, save_every=b - a, energy=False, speed=False).final
    np.testing.assert_allclose(run.final, x, rtol=0, atol=1e-13)
    if save_every == 0.25:  # save intervals inside layers: literally one meanfield.solve per layer
        y = x0
        for k in range(3):
            const = build_model(cfg, schedule=ConstantHeads(model.heads.heads(k)))
            y = solve(Problem(const, y), solver, t_final=1.0, save_every=0.25, energy=False, speed=False).final
        np.testing.assert_allclose(run.final, y, rtol=0, atol=1e-13)
    # not vacuous: layer 0's heads all the way give another cloud
    frozen = solve(Problem(build_model(cfg, schedule=ConstantHeads(model.heads.heads(0))), x0), solver, t_final=3.0,
                   save_every=save_every, energy=False, speed=False).final
    assert np.max(np.abs(frozen - run.final)) > 1e-2


def test_resume_and_replay_bit_for_bit(tmp_path):
    short = _layers_config(t_final=1.5, save_every=0.3)
    out = tmp_path / "layers.h5"
    simulate_config(short, out, quiet=True)
    longer = _layers_config(t_final=3.2, save_every=0.3)
    simulate_config(longer, out, resume=True, quiet=True)
    straight = tmp_path / "straight.h5"
    simulate_config(longer, straight, quiet=True)
    with h5py.File(out, "r") as f, h5py.File(straight, "r") as g:
        np.testing.assert_array_equal(f["x"][()], g["x"][()])
        np.testing.assert_array_equal(f["t"][()], g["t"][()])
        np.testing.assert_array_equal(f["weights/layers"][()], np.arange(4))
        np.testing.assert_array_equal(f["weights/B"][()], g["weights/B"][()])
        x_stored = g["x"][()]
    replay = schedule_from_path(straight)
    assert isinstance(replay, LayerSchedule)
    model = build_model(longer)
    for t in (0.0, 0.7, 1.0, 2.5, 3.2):
        np.testing.assert_array_equal(replay.at(t).B, model.heads.at(t).B)
    again = solve(Problem(build_model(longer, schedule=replay), initial_tokens(longer)), ParticleSolver(method="rk4", dt=0.1),
                  t_final=3.2, save_every=0.3, energy=False, speed=False)
    np.testing.assert_array_equal(again.final, x_stored[-1])


def test_layer_path_replays_from_a_mapping():
    stacks = [HeadStack(B=np.full((1, 2, 2), float(k)), V=np.eye(2)[None]) for k in range(3)]
    sched = schedule_from_path({"t": np.arange(3.0), "layers": np.arange(3), "B": np.stack([s.B for s in stacks]),
                                "V": np.stack([s.V for s in stacks])})
    assert [float(sched.at(t).B[0, 0, 0]) for t in (0.2, 1.0, 2.9, 7.5)] == [0.0, 1.0, 2.0, 2.0]  # past the end: held


@pytest.mark.parametrize("raw, key", [
    ({"weights": {"schedule": "layers"}}, "weights.schedule"),  # one identity head: nothing to redraw
    ({"weights": {"schedule": "layers"}, "model": {"heads": [{"Q": "random"}]}, "solver": {"kind": "jko"}}, "weights.schedule"),
    ({"weights": {"schedule": "layers"}, "model": {"heads": [{"Q": "random"}]}, "solver": {"kind": "zero-temperature"}}, "weights.schedule"),
    ({"weights": {"schedule": "layerz"}}, "weights.schedule"),
    ({"model": {"heads": [{"Q": "goe", "K": "goe", "k": 2}]}}, r"model.heads\[0\].k"),
    ({"model": {"heads": [{"Q": [[1, 0, 0], [0, 1, 0]], "K": "goe"}]}}, r"model.heads\[0\].K"),
    ({"model": {"heads": [{"Q": "identity", "K": "wigner"}]}}, r"model.heads\[0\].K"),
    ({"model": {"heads": [{"Q": "gpt3"}]}}, r"model.heads\[0\].Q"),
])
def test_bad_input_names_the_key(raw, key):
    with pytest.raises(ConfigError, match=key):
        load_config(raw)


def test_cli_exits_2_naming_the_key(tmp_path, capsys):
    out = tmp_path / "x.h5"
    rc = main(["simulate", "-o", str(out), "--set", "weights.schedule=layers", "--quiet", _write(tmp_path, "")])
    assert rc == 2 and "weights.schedule" in capsys.readouterr().err and not out.exists()
    rc = main(["simulate", "-o", str(out), "--quiet", _write(tmp_path, '[[model.heads]]\nQ = "identity"\nK = "goee"\n')])
    assert rc == 2 and "model.heads[0].K" in capsys.readouterr().err and not out.exists()


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


def test_gpt2_heads_run_layer_by_layer_from_the_cli(tmp_path):
    cfg = tmp_path / "gpt2.toml"
    cfg.write_text('[model]\nd = 8\nbeta = 1.0\nnum_heads = 3\n[[model.heads]]\nQ = "gpt2"\nK = "gpt2"\nV = "gpt2"\n'
                   '[init]\nn = 16\n[weights]\nschedule = "layers"\n[solver]\nt_final = 2.0\nsave_every = 0.5\ndt = 0.05\n')
    out = tmp_path / "gpt2.h5"
    assert main(["simulate", str(cfg), "-o", str(out), "--quiet"]) == 0
    with h5py.File(out, "r") as f:
        B = f["weights/B"][()]
        assert B.shape == (3, 3, 8, 8) and f["x"].shape == (5, 16, 8)
    # each layer's value matrices are a fresh N(0, 0.02²) draw: 3 layers × 3 heads × 64 entries
    V = h5py.File(out, "r")["weights/V"][()]
    np.testing.assert_allclose(V.std(), 0.02, rtol=5 * math.sqrt(1 / (2 * V.size)))


def test_a_typo_in_q_or_k_with_k_rows_is_named_as_the_typo():
    # with k set, an unknown value had been taken for a d×d matrix: "model.heads[0].k: k=4 rows, but K = 'goee' is a
    # 16×16 matrix" (data/layers_gpt2.toml sets k = 4)
    for q, k_value, key, words in (("gpt2", "goee", "model.heads[0].K", "unknown value 'goee'"),
                                   ("bogus", "gpt2", "model.heads[0].Q", "unknown value 'bogus'"),
                                   ("identity", "gpt2", "model.heads[0].k", "k=4 rows, but Q = 'identity' is a 16×16"),
                                   (2.0, "gpt2", "model.heads[0].k", "k=4 rows, but Q = 2.0 is a 16×16")):
        with pytest.raises(ConfigError) as err:
            load_config({"model": {"d": 16, "heads": [{"Q": q, "K": k_value, "V": "gpt2", "k": 4}]}, "init": {"n": 4}})
        assert err.value.key == key and words in err.value.message, err.value


def test_an_unknown_value_of_v_lists_aligned_and_of_q_does_not():
    # V's own value, 'aligned', had been left out of the values V's message listed
    with pytest.raises(ConfigError, match=r"^model.heads\[0\].V: unknown value 'bogus'; expected .*'random', 'aligned' \(V = QᵀK\)"):
        load_config({"model": {"heads": [{"V": "bogus"}]}})
    with pytest.raises(ConfigError, match=r"^model.heads\[0\].Q: unknown value 'aligned'") as caught:
        load_config({"model": {"heads": [{"Q": "aligned"}]}})
    assert "'aligned'" not in str(caught.value).split("expected")[1]


def test_a_layer_schedule_keeps_a_bounded_number_of_drawn_layers():
    # every drawn layer (B and V of every head) had been kept for the whole run: 2000 layers of 4 heads of 32×32
    # had held 594 MB; a layer is drawn again from (s_h, k) when asked for, the same draw
    sched = build_model(_layers_config()).heads
    first = sched.at(0.5).B.copy()
    for k in range(40):
        sched.at(k + 0.25)
        sched.at(k + 0.75)
        assert len(sched._cache) <= LayerSchedule.CACHE_LAYERS
    np.testing.assert_array_equal(sched.at(0.5).B, first)  # dropped, then drawn again: the same heads
    for t in (39.5, 38.5, 39.5, 12.5):
        np.testing.assert_array_equal(sched.at(t).B, build_model(_layers_config()).heads.at(t).B)
    # a replayed schedule keeps all its stored layers
    stored = LayerSchedule([HeadStack(B=np.full((1, 2, 2), float(k)), V=np.eye(2)[None]) for k in range(10)])
    for k in range(10):
        assert stored.at(k + 0.5).B[0, 0, 0] == k
    assert stored.at(20.0).B[0, 0, 0] == 9


@pytest.mark.parametrize("lam", [-2.0, -0.5, 0.0, 1.5])
def test_the_scalar_head_has_b_equal_to_v_equal_to_lambda_for_every_sign(lam):
    from meanfield.heads import scalar

    head = scalar(lam, 3)
    np.testing.assert_allclose(head.B, lam * np.eye(3), rtol=0, atol=1e-14)
    np.testing.assert_allclose(head.V, lam * np.eye(3), rtol=0, atol=1e-14)


def test_copies_of_a_head_table_with_its_own_seed_are_distinct_draws():
    cfg = load_config(None, ['model.heads=[{Q = "random", K = "random", V = "random", seed = 5}]', "model.num_heads=3"])
    heads = build_heads(cfg)
    assert len(heads) == 3
    for a in range(3):
        for b in range(a + 1, 3):
            for name in ("Q", "K", "V"):
                assert not np.allclose(getattr(heads[a], name), getattr(heads[b], name)), (a, b, name)
    # head h is the table drawn with seed 5 + 1000 h (replicate_specs)
    for h in range(3):
        ref = head_from_spec({"Q": "random", "K": "random", "V": "random", "seed": 5 + 1000 * h}, d=heads[h].V.shape[0],
                             key="ref")
        np.testing.assert_allclose(heads[h].Q, ref.Q, rtol=0, atol=0)
