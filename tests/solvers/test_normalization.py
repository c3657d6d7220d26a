"""Normalisation schemes (Karagodin, Ge, Polyanskiy and Rigollet, arXiv 2510.22026): velocity laws, stepper, config and CLI.

Compared against: a plain NumPy transcription of the schemes' ODEs (loops over heads and
tokens), closed forms for one token, an independent Cartesian integration of ẋ = A (Pre-LN) and
ẋ = A/‖A‖ (Peri-LN), the measured order of RK4, and the existing sphere model bit for bit.
"""
from __future__ import annotations

import math
import warnings

import h5py
import numpy as np
import pytest

import meanfield as mf
from meanfield.cli import main
from meanfield.errors import RunFailed
from meanfield.heads import HeadStack
from meanfield.normalization import NORMS, NormalizedDynamics, normalized_velocity, polar, speed_factor, token_directions
from meanfield.solvers.normalized import NormalizedSolver, NormalizedStepper
from meanfield.solvers.particle import ParticleSolver, ParticleStepper

ALPHA = 0.35
BETA = 1.3


# ----------------------------------------------------------------------------- the transcription
def attention_transcription(theta, B, V, w, *, beta, kind, masses):
    """A_k of the four attention laws, by loops (the project's kernels are not used)."""
    n, d = theta.shape
    out = np.zeros((n, d))
    for i in range(n):
        num_pooled, den_pooled = np.zeros(d), 0.0
        for h in range(B.shape[0]):
            s = np.array([theta[i] @ B[h] @ theta[j] for j in range(n)])
            values = np.array([V[h] @ theta[j] for j in range(n)])
            if kind == "softmax":
                e = np.exp(beta * s - np.max(beta * s)) * masses
                out[i] += (e / e.sum()) @ values
            elif kind == "unnormalized":
                out[i] += (masses * np.exp(beta * s)) @ values
            elif kind == "relu":
                out[i] += (masses * np.maximum(s, 0.0)) @ values
            else:  # pooled
                e = masses * np.exp(beta * s)
                num_pooled += w[h] * (e @ values)
                den_pooled += w[h] * e.sum()
        if kind == "pooled":
            out[i] = num_pooled / den_pooled
    return out


def scheme_transcription(theta, r, a, *, norm, alpha):
    """(θ̇, ṙ) of each scheme, one token at a time."""
    theta_dot, r_dot = np.zeros_like(theta), np.zeros(len(theta))
    for k, (th, rk, ak) in enumerate(zip(theta, r, a)):
        tangent = ak - (th @ ak) * th
        size = math.sqrt(ak @ ak)
        if norm == "post":
            theta_dot[k] = tangent
        elif norm == "pre":
            theta_dot[k], r_dot[k] = tangent / rk, th @ ak
        elif norm == "peri":
            theta_dot[k], r_dot[k] = tangent / (rk * size), (th @ ak) / size
        else:
            theta_dot[k] = alpha * tangent / size
    return theta_dot, r_dot


def random_heads(rng, H, d):
    return HeadStack(B=rng.standard_normal((H, d, d)) / math.sqrt(d), V=rng.standard_normal((H, d, d)) / math.sqrt(d),
                     w=rng.uniform(0.2, 1.0, H))


def random_state(rng, n, d):
    theta = rng.standard_normal((n, d))
    return theta / np.linalg.norm(theta, axis=1, keepdims=True), rng.uniform(0.5, 2.0, n)


# ----------------------------------------------------------------------------- velocity laws
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("direction", ["ascent", "descent"])
def test_each_scheme_matches_the_numpy_transcription(rng, norm, H, direction):
    n, d = 7, 4
    heads = random_heads(rng, H, d)
    theta, r = random_state(rng, n, d)
    model = mf.Model(d=d, beta=BETA, heads=heads, direction=direction, backend="numpy")
    theta_dot, r_dot = NormalizedDynamics(model, norm=norm, alpha=ALPHA).velocity(theta, r, 0.0)
    sign = 1.0 if direction == "ascent" else -1.0
    a = sign * attention_transcription(theta, heads.B, heads.V, heads.w, beta=BETA, kind="softmax", masses=np.full(n, 1 / n))
    want_theta, want_r = scheme_transcription(theta, r, a, norm=norm, alpha=ALPHA)
    np.testing.assert_allclose(theta_dot, want_theta, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r_dot, want_r, rtol=1e-12, atol=1e-14)
    s = speed_factor(r, a, norm=norm, alpha=ALPHA)  # θ̇ = s P⊥A
    np.testing.assert_allclose(theta_dot, s[:, None] * (a - np.sum(theta * a, axis=1, keepdims=True) * theta), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "relu", "pooled"])
@pytest.mark.parametrize("norm", ["pre", "peri", "ngpt"])
def test_every_attention_kind_with_token_masses(rng, kind, norm):
    n, d, H = 7, 4, 3
    heads = random_heads(rng, H, d)
    theta, r = random_state(rng, n, d)
    masses = rng.uniform(0.5, 1.5, n)
    masses /= masses.sum()
    model = mf.Model(d=d, beta=BETA, heads=heads, attention=kind)
    got = NormalizedDynamics(model, norm=norm, alpha=ALPHA).velocity(theta, r, 0.0, weights=masses)
    a = attention_transcription(theta, heads.B, heads.V, heads.w, beta=BETA, kind=kind, masses=masses)
    want = scheme_transcription(theta, r, a, norm=norm, alpha=ALPHA)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("backend", ["numpy", "blas", "numba", "fused", "harmonic", "local"])
def test_every_backend(rng, backend):
    n, d, H = 7, 3, 3  # d = 3: the sphere kernels (harmonic, local) too
    heads = random_heads(rng, H, d)
    theta, r = random_state(rng, n, d)
    model = mf.Model(d=d, beta=BETA, heads=heads, backend=backend)
    a = attention_transcription(theta, heads.B, heads.V, heads.w, beta=BETA, kind="softmax", masses=np.full(n, 1 / n))
    for norm in NORMS:
        got = NormalizedDynamics(model, norm=norm, alpha=ALPHA).velocity(theta, r, 0.0)
        want = scheme_transcription(theta, r, a, norm=norm, alpha=ALPHA)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)


def test_a_vanishing_attention_output_gives_no_motion():
    theta = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    a = np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    for norm in ("peri", "ngpt"):
        theta_dot, r_dot = normalized_velocity(theta, np.ones(2), a, norm=norm, alpha=1.0)
        np.testing.assert_array_equal(theta_dot[0], 0.0)
        assert r_dot[0] == 0.0
        np.testing.assert_allclose(theta_dot[1], [1.0, 0.0, 0.0], rtol=1e-15)


# ----------------------------------------------------------------------------- post = the sphere model
@pytest.mark.parametrize("scale", [1e160, 1e300, 1e-170, 1e-300])
def test_the_scale_free_schemes_move_tokens_whose_attention_output_squares_past_the_floats(scale):
    # ‖A‖² had overflowed above ‖A‖ ≈ 1.3e154 (underflowed below 1e-162): the token was taken for A = 0 and stopped
    theta = np.array([[1.0, 0.0, 0.0]])
    a = scale * np.array([[0.6, 0.8, 0.0]])
    np.testing.assert_allclose(normalized_velocity(theta, np.ones(1), a, norm="ngpt", alpha=0.2)[0], [[0.0, 0.16, 0.0]], rtol=1e-15)
    theta_dot, r_dot = normalized_velocity(theta, np.full(1, 2.0), a, norm="peri")
    np.testing.assert_allclose(theta_dot, [[0.0, 0.4, 0.0]], rtol=1e-15)
    np.testing.assert_allclose(r_dot, [0.6], rtol=1e-15)
    np.testing.assert_allclose(speed_factor(np.ones(1), a, norm="ngpt", alpha=0.2), [0.2 / scale], rtol=1e-15)


def test_ngpt_runs_unnormalized_attention_where_its_output_is_huge(tmp_path, capsys):
    # β = 400, B = I: A ~ e^400 (finite, its square not); the run had completed with max_speed 0 -> 0, after a note
    # that it would stop on NaN/Inf
    config = tmp_path / "ngpt.toml"
    config.write_text('[model]\nd = 3\nbeta = 400.0\nattention = "unnormalized"\nnorm = "ngpt"\n[init]\nn = 32\n'
                      '[solver]\nt_final = 0.5\nsave_every = 0.5\ndt = 0.05\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note: the scheme's step takes A/‖A‖
        assert main(["simulate", str(config), "-o", str(tmp_path / "run.h5"), "--quiet"]) == 0
    run = mf.load(tmp_path / "run.h5")
    assert np.all(run.diagnostics["max_speed"] > 1e-3) and run.status == "completed"


def test_post_is_the_sphere_model_bit_for_bit(rng):
    n, d = 7, 4
    heads = random_heads(rng, 3, d)
    x0 = mf.sample_uniform(n, d, seed=3)
    for direction in ("ascent", "descent"):
        model = mf.Model(d=d, beta=BETA, heads=heads, direction=direction)
        np.testing.assert_array_equal(NormalizedDynamics(model, norm="post").direction_velocity(x0, 0.0), model.velocity(x0, 0.0))
        for method in ("rk4", "rk45"):
            ours = NormalizedStepper(NormalizedDynamics(model, norm="post"), method=method, dt=0.05).advance(x0, 0.0, 1.0)
            theirs = ParticleStepper(model, method=method, dt=0.05).advance(x0, 0.0, 1.0)
            np.testing.assert_array_equal(ours, theirs)
    problem = mf.Problem(mf.Model(d=d, beta=BETA, heads=heads), x0)
    default = mf.solve(problem, ParticleSolver(dt=0.05), t_final=1.0, save_every=0.5)
    post = mf.solve(problem, ParticleSolver(dt=0.05, norm="post"), t_final=1.0, save_every=0.5)
    np.testing.assert_array_equal(post.x, default.x)
    assert "sphere_error" in post.diagnostics


# ----------------------------------------------------------------------------- closed forms, order, invariants
LAM, OMEGA = 0.7, 1.1


def _one_token_problem():
    """One token: p = 1, so A = Vθ with V = λI + ωJ (J the rotation generator of the e1–e2 plane)."""
    J = np.zeros((3, 3))
    J[1, 0], J[0, 1] = 1.0, -1.0
    heads = HeadStack(B=np.eye(3)[None], V=(LAM * np.eye(3) + OMEGA * J)[None])
    return mf.Problem(mf.Model(d=3, beta=1.0, heads=heads), np.array([[1.0, 0.0, 0.0]]))


def one_token_closed_form(norm, t):
    """x(t) = r(t)(cos φ, sin φ, 0) with r, φ from the scheme's ODE."""
    c = math.hypot(LAM, OMEGA)  # ‖A‖
    r, phi = {
        "post": (1.0, OMEGA * t),
        "pre": (1.0 + LAM * t, OMEGA / LAM * math.log1p(LAM * t)),
        "peri": (1.0 + LAM * t / c, OMEGA / LAM * math.log1p(LAM * t / c)),
        "ngpt": (1.0, ALPHA * OMEGA * t / c),
    }[norm]
    return r * np.array([math.cos(phi), math.sin(phi), 0.0])


@pytest.mark.parametrize("norm", NORMS)
def test_one_token_follows_the_closed_form(norm):
    alpha = {"ngpt_alpha": ALPHA} if norm == "ngpt" else {}  # (refused with another scheme)
    run = mf.solve(_one_token_problem(), ParticleSolver(dt=0.01, norm=norm, **alpha), t_final=2.0, save_every=0.5)
    for t, x in zip(run.t, run.x):
        np.testing.assert_allclose(x[0], one_token_closed_form(norm, t), rtol=0, atol=1e-10)
    if norm in ("pre", "peri"):
        np.testing.assert_allclose(run.diagnostics["r_mean"], np.linalg.norm(run.x[:, 0], axis=1), rtol=1e-15)


@pytest.mark.parametrize("norm", ["pre", "peri", "ngpt"])
def test_rk4_has_order_four(rng, norm):
    n, d = 7, 4
    problem = mf.Problem(mf.Model(d=d, beta=BETA, heads=random_heads(rng, 3, d)), mf.sample_uniform(n, d, seed=5))
    dyn = NormalizedDynamics(problem.model, norm=norm, alpha=ALPHA)
    steps = (0.1, 0.05, 0.025)
    final = {dt: NormalizedStepper(dyn, method="rk4", dt=dt).advance(problem.initial, 0.0, 2.0) for dt in (*steps, 0.00625)}
    errors = [np.max(np.abs(final[dt] - final[0.00625])) for dt in steps]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    np.testing.assert_allclose(orders, 4.0, atol=0.2)


def _cartesian_rk4(x0, a_of, *, t, steps):
    """ẋ = a_of(x/|x|) by classical RK4 in R^d, no retraction (independent of the solver)."""
    x, h = x0.copy(), t / steps
    f = lambda y: a_of(y / np.linalg.norm(y, axis=1, keepdims=True))  # noqa: E731
    for _ in range(steps):
        k1 = f(x)
        k2 = f(x + h / 2 * k1)
        k3 = f(x + h / 2 * k2)
        k4 = f(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


@pytest.mark.parametrize("norm", ["pre", "peri"])
def test_radius_and_direction_are_the_polar_form_of_the_token_update(rng, norm):
    """Pre-LN: ẋ = A(θ); Peri-LN: ẋ = A/‖A‖ — so r = |x| evolves by ṙ = ⟨θ, A⟩ (resp. ⟨θ, A⟩/‖A‖)."""
    n, d = 7, 4
    heads = random_heads(rng, 3, d)
    x0 = mf.sample_uniform(n, d, seed=8)

    def attention(theta):  # softmax attention by einsum (the vectorised twin of attention_transcription)
        scores = BETA * np.einsum("id,hde,je->hij", theta, heads.B, theta)
        p = np.exp(scores - scores.max(axis=2, keepdims=True))
        p /= p.sum(axis=2, keepdims=True)
        return np.einsum("hij,hdk,jk->id", p, heads.V, theta)

    def a_of(theta):
        a = attention(theta)
        return a if norm == "pre" else a / np.linalg.norm(a, axis=1, keepdims=True)

    masses = np.full(n, 1 / n)
    np.testing.assert_allclose(attention(x0), attention_transcription(x0, heads.B, heads.V, heads.w, beta=BETA, kind="softmax", masses=masses),
                               rtol=1e-12, atol=1e-15)
    run = mf.solve(mf.Problem(mf.Model(d=d, beta=BETA, heads=heads), x0), ParticleSolver(dt=0.005, norm=norm), t_final=2.0, save_every=1.0)
    # two different discretisations of one ODE: they differ by O(dt⁴) ≈ 1.5e-8 at dt = 0.02, 6e-11 at dt = 0.005
    np.testing.assert_allclose(run.final, _cartesian_rk4(x0, a_of, t=2.0, steps=400), rtol=0, atol=3e-10)
    assert np.max(np.abs(np.linalg.norm(run.final, axis=1) - 1.0)) > 0.1  # the tokens left the sphere
    theta, _ = polar(run.x)
    np.testing.assert_allclose(np.linalg.norm(theta, axis=-1), 1.0, rtol=0, atol=1e-15)


@pytest.mark.parametrize("norm", ["post", "ngpt"])
def test_spherical_schemes_keep_unit_tokens(rng, norm):
    n, d = 7, 4
    problem = mf.Problem(mf.Model(d=d, beta=BETA, heads=random_heads(rng, 3, d)), mf.sample_uniform(n, d, seed=9))
    run = mf.solve(problem, ParticleSolver(dt=0.05, norm=norm), t_final=3.0, save_every=0.5)
    np.testing.assert_allclose(np.linalg.norm(run.x, axis=-1), 1.0, rtol=0, atol=1e-14)
    assert np.max(run.diagnostics["sphere_error"]) <= 1e-14
    assert token_directions(run.x) is not None and np.array_equal(token_directions(run.x), run.x)


def test_a_radius_through_the_origin_fails_the_run():
    heads = HeadStack(B=np.eye(3)[None], V=-np.eye(3)[None])  # one token, ẋ = −θ: r = 1 − t
    problem = mf.Problem(mf.Model(d=3, beta=1.0, heads=heads), np.array([[0.0, 0.0, 1.0]]))
    with pytest.raises(RunFailed, match="origin"):
        mf.solve(problem, NormalizedSolver(norm="pre", dt=0.05), t_final=2.0, save_every=0.5)


def test_layer_schedule_holds_the_first_layer_then_switches():
    """weights.schedule = "layers": on [0, 1) the heads are the configured ones, so the run equals the constant one there."""
    base = {"model": {"d": 3, "beta": 1.0, "norm": "pre", "heads": [{"Q": "random", "K": "random", "V": "random"}]},
            "init": {"n": 8, "seed": 1}, "solver": {"dt": 0.05, "t_final": 2.0, "save_every": 0.5}, "track": {"energy": False}}
    constant = mf.simulate(base)
    layers = mf.simulate({**base, "weights": {"schedule": "layers"}})
    np.testing.assert_array_equal(layers.x[:3], constant.x[:3])  # t = 0, 0.5, 1
    assert np.max(np.abs(layers.x[-1] - constant.x[-1])) > 1e-3  # layer 1 has other heads


# ----------------------------------------------------------------------------- config and CLI
TOML = """
[model]
d = 3
beta = 1.0
norm = "{norm}"
[init]
n = 12
seed = 4
[solver]
dt = 0.05
t_final = {t_final}
save_every = 0.25
"""


@pytest.mark.parametrize("norm", NORMS)
def test_simulate_info_and_plot_from_a_toml(norm, tmp_path, capsys):
    config = tmp_path / "norm.toml"
    config.write_text(TOML.format(norm=norm, t_final=1.0))
    out = tmp_path / "run.h5"
    assert main(["simulate", str(config), "-o", str(out), "--quiet"]) == 0
    with h5py.File(out, "r") as f:
        x = f["x"][()]
    assert x.shape == (5, 12, 3)
    radii = np.linalg.norm(x[-1], axis=1)
    if norm in ("pre", "peri"):
        assert np.all(radii > 1.0)
    else:
        np.testing.assert_allclose(radii, 1.0, rtol=0, atol=1e-14)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    info = capsys.readouterr().out
    assert "status:    completed" in info
    assert (f"norm={norm}" in info) == (norm != "post")
    run = mf.load(out)
    assert len(run.plot().axes) >= 2
    final = [line for line in info.splitlines() if line.startswith("final:")][0]
    assert float(final.split("min <x_i,x_j> = ")[1].split()[0]) >= -1.0  # directions, not the radial tokens


def test_a_radial_run_resumes_to_the_uninterrupted_result(tmp_path):
    config = tmp_path / "pre.toml"
    whole, part = tmp_path / "whole.h5", tmp_path / "part.h5"
    config.write_text(TOML.format(norm="pre", t_final=1.0))
    assert main(["simulate", str(config), "-o", str(whole), "--quiet", "--set", "solver.t_final=1.0"]) == 0
    assert main(["simulate", str(config), "-o", str(part), "--quiet", "--set", "solver.t_final=0.5"]) == 0
    assert main(["simulate", str(config), "-o", str(part), "--quiet", "--resume", "--set", "solver.t_final=1.0"]) == 0
    np.testing.assert_array_equal(mf.load(part).x, mf.load(whole).x)


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["model.norm=\"sideways\""], "model.norm"),
        (["model.norm=\"pre\"", "solver.kind=\"grid\""], "model.norm"),
        (["model.norm=\"peri\"", "solver.kind=\"jko\""], "model.norm"),
        (["model.norm=\"pre\"", "track.concentration=true"], "track.concentration"),
        (["model.norm=\"ngpt\"", "model.ngpt_alpha=0"], "model.ngpt_alpha"),
        (["model.ngpt_alpha=0.5"], "model.ngpt_alpha"),
        (["model.norm=\"pre\"", "noise.gamma=2.0"], "model.norm"),
        (["model.norm=\"pre\"", "solver.steady_tol=0.001"], "solver.steady_tol"),
        (["model.norm=\"peri\"", "solver.steady_tol=0.001"], "solver.steady_tol"),
    ],
)
def test_bad_values_exit_2_naming_the_key(sets, key, tmp_path, capsys):
    config = tmp_path / "norm.toml"
    config.write_text(TOML.format(norm="post", t_final=1.0))
    out = tmp_path / "run.h5"
    argv = ["simulate", str(config), "-o", str(out), "--quiet"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    assert key in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("make", [ParticleSolver, NormalizedSolver])
@pytest.mark.parametrize(
    ("options", "match"),
    [
        # norm="foo" had been found only inside mf.solve
        ({"norm": "foo"}, r"^norm must be one of \('post', 'pre', 'peri', 'ngpt'\), got 'foo'"),
        ({"norm": None}, "^norm must be one of"),
        # ngpt_alpha=-1 had been reported as "alpha must be …", True taken as 1.0, "0.3" a NumPy TypeError
        ({"norm": "ngpt", "ngpt_alpha": -1.0}, "^ngpt_alpha must be a positive finite number"),
        ({"norm": "ngpt", "ngpt_alpha": float("inf")}, "^ngpt_alpha must be a positive finite number"),
        ({"norm": "ngpt", "ngpt_alpha": True}, "^ngpt_alpha must be a positive finite number"),
        ({"norm": "ngpt", "ngpt_alpha": "0.3"}, "^ngpt_alpha must be a positive finite number"),
        # ParticleSolver(norm="pre", ngpt_alpha=0.7) had run and ignored the alpha (the config refuses model.ngpt_alpha there)
        ({"norm": "pre", "ngpt_alpha": 0.7}, r"^ngpt_alpha applies to norm='ngpt', got ngpt_alpha=0.7 with norm='pre'"),
        ({"norm": "post", "ngpt_alpha": 0.5}, "^ngpt_alpha applies to norm='ngpt'"),
        ({"norm": "pre", "dt": 0.0}, "^dt must be a positive finite number"),
    ],
)
def test_the_solvers_check_norm_and_ngpt_alpha_when_they_are_made(make, options, match):
    with pytest.raises(ValueError, match=match):
        make(**options)


def test_the_solvers_take_their_defaults_and_numpy_numbers():
    assert ParticleSolver(norm="post").ngpt_alpha == NormalizedSolver(norm="pre").ngpt_alpha == 0.2
    assert ParticleSolver(norm="ngpt", ngpt_alpha=np.float32(0.5)).ngpt_alpha == 0.5
    assert NormalizedSolver(norm="ngpt", ngpt_alpha=1).ngpt_alpha == 1
    with pytest.raises(ValueError, match="^alpha must be a positive finite number"):  # the dynamics name their own option
        NormalizedDynamics(mf.Model(d=3, beta=1.0), norm="ngpt", alpha="0.3")


@pytest.mark.parametrize("solver", [ParticleSolver(dt=0.05, norm="pre"), NormalizedSolver(norm="peri", dt=0.05)])
def test_steady_tol_is_refused_for_the_radial_schemes(solver):
    # the test had read θ̇ alone: three clustered Pre-LN tokens stopped at t = 7 as "steady state: max |dx/dt| = 0.0009"
    # while ‖ẋ‖ = ‖A‖ = 1 and the radii grew past 8
    x = np.array([[1, 0.05, 0, 0], [1, -0.05, 0.02, 0], [1, 0, -0.04, 0.03]], float)
    problem = mf.Problem(mf.Model(d=4, beta=1.0), x / np.linalg.norm(x, axis=1, keepdims=True))
    with pytest.raises(ValueError, match=f"^steady_tol = 0.001 with norm='{solver.norm}'"):
        mf.solve(problem, solver, t_final=50.0, save_every=1.0, steady_tol=1e-3)
    ngpt = mf.solve(problem, ParticleSolver(dt=0.05, norm="ngpt"), t_final=50.0, save_every=1.0, steady_tol=1e-3)
    assert ngpt.info["stop_reason"].startswith("steady state")  # on the sphere θ̇ is ẋ: the test stays


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_steppers_field_is_its_own_evaluation(norm):
    # the stepper integrates (θ, r), not the model's velocity: field() evaluates it without the model's row sums
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    problem = mf.Problem(model=mf.Model(d=3, heads=heads, beta=1.0), initial=mf.sample_uniform(16, 3, seed=0))
    setup = NormalizedSolver(norm=norm).setup(problem)
    x = np.asarray(setup.state)
    y = np.c_[x, np.full(len(x), 1.5)] if setup.stepper.dynamics.radial else x  # (θ, r) for a radial scheme
    np.testing.assert_allclose(setup.stepper.field(y, 0.0), setup.stepper.evaluate(y, 0.0), rtol=0, atol=0)
    assert setup.stepper.kept_row_logs(0.0, y) is None


@pytest.mark.parametrize("norm", ["pre", "peri", "ngpt"])
def test_the_token_masses_travel_with_the_run_of_every_scheme(norm):
    # (found in review) pre, peri and ngpt runs had dropped them: run.token_masses None beside the weighted energy
    x0 = mf.sample_uniform(6, 3, seed=0)
    masses = np.array([0.05, 0.05, 0.05, 0.05, 0.1, 0.7])
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x0, weights=masses), mf.ParticleSolver(dt=0.05, norm=norm), t_final=0.2)
    np.testing.assert_array_equal(run.token_masses, masses)
    plain = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x0), mf.ParticleSolver(dt=0.05, norm=norm), t_final=0.2)
    assert plain.token_masses is None


def test_a_step_too_long_for_the_directions_is_warned_of_under_pre_ln_too():
    # (found in review) post warned that dt = 1 turns tokens by 1.85 rad a step; pre had been silent
    x0 = mf.sample_uniform(16, 3, seed=0)
    model = mf.Model(d=3, beta=1.0, heads=[mf.heads.scalar(8.0, 3)])
    with pytest.warns(RuntimeWarning, match=r"a step of solver\.dt = 1 moves tokens by up to 1\.85 rad"):
        mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=1.0, method="euler", norm="pre"), t_final=2.0, save_every=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=0.01, method="euler", norm="pre"), t_final=0.1, save_every=0.05)


def test_the_radius_tracker_of_several_tokens_of_different_radii():
    # r_mean is the mean of the radii (1, 1, 4, 2.5 → 2.125; their median, 1.75, had passed the one-token tests: mut4 NS1)
    from meanfield.solvers.normalized import RadiusTracker

    theta = mf.sample_uniform(4, 3, seed=1)
    radii = np.array([1.0, 1.0, 4.0, 2.5])
    got = RadiusTracker()(0.0, radii[:, None] * theta)
    np.testing.assert_allclose([got["r_min"], got["r_mean"], got["r_max"]], [1.0, 2.125, 4.0], rtol=1e-15)
