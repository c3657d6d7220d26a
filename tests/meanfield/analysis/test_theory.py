"""Closed forms of Pendharkar (arXiv 2605.04279) (meanfield.analysis.theory) and the ``meanfield theory`` CLI.

Closed forms are checked against independent numerical twins (root finders,
the solved ODE, finite differences, direct linear algebra).
"""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from meanfield.analysis import theory as th
from meanfield.cli import main
from meanfield.errors import ConfigError

GOLDEN = (1.0 + math.sqrt(5.0)) / 2.0


@pytest.fixture(autouse=True)
def _strict_floats():
    """Every closed form must run without overflow/underflow/invalid warnings."""
    with np.errstate(all="raise"):
        yield


# --------------------------------------------------------------------------- #
# Thm 19
# --------------------------------------------------------------------------- #
def test_c_star_golden_ratio():
    assert abs(th.c_star(2) - 1.0 / GOLDEN) <= 1e-15
    assert th.c_star(1) == 1.0


@pytest.mark.parametrize("H", range(1, 11))
def test_c_star_solves_quadratic(H):
    c = th.c_star(H)
    assert 0.0 < c <= 1.0
    assert abs(c * c + (H - 1) * c - 1.0) <= 4e-16 * max(1.0, H)


def test_c_star_vectorised_and_large_H():
    H = np.array([1.0, 2.0, 10.0, 1e8])
    c = th.c_star(H)
    assert c.shape == H.shape
    assert np.allclose(c * c + (H - 1) * c, 1.0, rtol=1e-14, atol=0)
    assert c[-1] == pytest.approx(1e-8, rel=1e-7)


def test_c_star_beyond_the_square_of_float_range_and_sizes_beyond_it():
    # (H − 1)² overflowed above H ≈ 1.3e154: c* came out 0 and β* died in math.log (a traceback, exit 1); an integer n
    # beyond float's range raised OverflowError instead of naming n
    with np.errstate(all="raise"):
        c = th.c_star(np.array([1e160, 1e300]))
    np.testing.assert_allclose(c * np.array([1e160, 1e300]), [1.0, 1.0], rtol=1e-14)
    assert math.isfinite(th.beta_star(1e200, 16, 1.0))
    with pytest.raises(ConfigError, match="n"):
        th.beta_star(2, 10**400, 1.0)
    assert main(["theory", "beta-star", "--heads", "2", "--n", "1" + "0" * 400]) == 2


def test_beta_star_closed_form_matches_root():
    for H, n, alpha in itertools.product([2, 3, 4, 8, 16, 64], [2, 3, 8, 16, 128, 1024], [0.1, 1.0, 3.0]):
        closed = th.beta_star(H, n, alpha)
        numeric = th.beta_star_numeric(H, n, alpha)
        assert closed == pytest.approx(numeric, rel=1e-10, abs=1e-13), (H, n, alpha)
        # the defining property: c(beta*) = c*(H)
        assert th.head_cosine(closed, n=n, alpha=alpha) == pytest.approx(th.c_star(H), rel=1e-12)


def test_beta_star_matches_seed_formula_and_edge_cases():
    H, n, alpha = 3, 16, 0.7
    c = th.c_star(H)
    seed = math.log(c * c * (n - 1) / (1 - c * c)) / (2 * alpha)
    assert th.beta_star(H, n, alpha) == pytest.approx(seed, rel=1e-13)
    # a single head: no threshold
    assert th.beta_star(1, 16, 1.0) == math.inf == th.beta_star_numeric(1, 16, 1.0)
    # c*(2)^2 = 0.38 < 1/2: beta* < 0, the criterion holds for no beta > 0
    assert th.beta_star(2, 2, 1.0) < 0
    assert th.head_cosine(0.0, n=2, alpha=1.0) > th.c_star(2)


def test_head_cosine_limits_and_monotone():
    beta = np.linspace(-50, 50, 2001)
    c = th.head_cosine(beta, n=9, alpha=2.0)
    assert np.all(np.diff(c) >= 0)
    assert th.head_cosine(0.0, n=9, alpha=2.0) == pytest.approx(1 / 3, rel=1e-15)
    assert c[-1] == 1.0 and c[0] < 1e-40
    b = 0.37
    direct = math.exp(2.0 * b) / math.sqrt(math.exp(4.0 * b) + 8)
    assert th.head_cosine(b, n=9, alpha=2.0) == pytest.approx(direct, rel=1e-14)


# --------------------------------------------------------------------------- #
# Thm 22
# --------------------------------------------------------------------------- #
LAM = [0.5, 1.5]
BETA = 2.0
N = 8


def test_equiangular_rate_matches_seed_form():
    gammas = np.linspace(-1 / (N - 1), 1.0, 11)
    A = th.equiangular_rate(gammas, lambdas=LAM, beta=BETA, n=N)
    seed = [
        sum(l * math.exp(BETA * l * g) / (math.exp(BETA * l) + (N - 1) * math.exp(BETA * l * g)) for l in LAM)
        for g in gammas
    ]
    assert np.allclose(A, seed, rtol=1e-14, atol=0)
    assert th.equiangular_rate(1.0, lambdas=LAM, beta=BETA, n=N) == pytest.approx(sum(LAM) / N, rel=1e-15)


def test_early_rate_equals_rhs_at_zero_exactly():
    for lam, beta, n in [(LAM, BETA, N), ([0.1, 0.2, 3.0], 0.5, 3), ([1.0], 7.0, 100)]:
        assert th.early_rate(lam, beta=beta, n=n) == th.equiangular_rhs(0.0, lambdas=lam, beta=beta, n=n)
        assert th.early_rate(lam, beta=beta, n=n) == pytest.approx(
            sum(th.phi(l, beta=beta, n=n) for l in lam), rel=1e-15
        )


def test_early_rate_is_initial_slope_of_solution():
    h = 1e-4
    g = th.solve_equiangular(0.0, [0.0, h, 2 * h], lambdas=LAM, beta=BETA, n=N)
    assert g[0] == 0.0
    slope = (-3 * g[0] + 4 * g[1] - g[2]) / (2 * h)  # second order one-sided
    assert slope == pytest.approx(th.early_rate(LAM, beta=BETA, n=N), rel=1e-6)


def test_solution_satisfies_ode():
    t = np.linspace(0.0, 3.0, 301)
    g = th.solve_equiangular(-0.1, t, lambdas=LAM, beta=BETA, n=N)
    dg = np.gradient(g, t, edge_order=2)
    rhs = th.equiangular_rhs(g, lambdas=LAM, beta=BETA, n=N)
    assert np.max(np.abs(dg - rhs)) < 1e-4
    assert np.all(np.diff(g) > 0)


def test_fixed_points():
    t = [0.0, 1.0, 10.0]
    assert np.all(th.solve_equiangular(1.0, t, lambdas=LAM, beta=BETA, n=N) == 1.0)
    simplex = th.solve_equiangular(-1 / (N - 1), t, lambdas=LAM, beta=BETA, n=N)
    assert np.allclose(simplex, -1 / (N - 1), rtol=0, atol=1e-15)


def test_late_slope_is_two_Lambda():
    t = np.linspace(10.0, 20.0, 11)
    u = th.solve_equiangular_log_gap(0.0, np.concatenate([[0.0], t]), lambdas=LAM, beta=BETA, n=N)[1:]
    slope = np.polyfit(t, u, 1)[0]
    assert th.late_rate(LAM) == 4.0
    assert -slope == pytest.approx(th.late_rate(LAM), rel=1e-2)
    assert -slope == pytest.approx(th.late_rate(LAM), rel=1e-8)  # in fact far better
    # the gap has fallen far below double precision in gamma, but log-gap resolves it
    assert u[-1] < -70


def test_lambda_c_is_inflection_point():
    for beta, n in [(BETA, N), (1.0, 2), (0.3, 1000)]:
        lc = th.lambda_c(beta, n)
        assert lc * beta > 2.0

        def d2(lam, h):
            return (th.phi(lam + h, beta=beta, n=n) - 2 * th.phi(lam, beta=beta, n=n) + th.phi(lam - h, beta=beta, n=n)) / h**2

        h = 1e-3 * lc
        scale = abs(d2(0.5 * lc, h)) + abs(d2(1.5 * lc, h))
        assert abs(d2(lc, h)) < 1e-5 * scale
        assert d2(0.9 * lc, h) < 0 < d2(1.1 * lc, h)  # concave below, convex above
        x = lc * beta
        assert (x - 2) * math.exp(x) == pytest.approx((n - 1) * (x + 2), rel=1e-12)


def test_superadditivity_sign():
    lc = th.lambda_c(BETA, N)
    convex = [1.2 * lc, 1.6 * lc]  # mean > lambda_c, all in the convex region
    concave = [0.1 * lc, 0.4 * lc]  # well below lambda_c
    assert th.superadditivity_gain(convex, beta=BETA, n=N) > 0
    assert th.superadditivity_gain(concave, beta=BETA, n=N) < 0
    assert th.superadditivity_gain([1.0, 1.0, 1.0], beta=BETA, n=N) == pytest.approx(0.0, abs=1e-15)
    assert th.equal_split_rate(LAM, beta=BETA, n=N) == pytest.approx(2 * th.phi(1.0, beta=BETA, n=N), rel=1e-15)


def test_phi_matches_direct_formula_for_both_signs():
    lam = np.array([-3.0, -0.5, 0.0, 0.25, 1.0, 4.0])
    direct = 2 * lam / (np.exp(lam * BETA) + N - 1)
    assert np.allclose(th.phi(lam, beta=BETA, n=N), direct, rtol=1e-14, atol=0)
    assert th.phi(1e4, beta=BETA, n=N) == 0.0  # no overflow


# --------------------------------------------------------------------------- #
# Thm 27
# --------------------------------------------------------------------------- #
def test_equiangular_entropy_direct_and_monotone():
    g = 0.3
    logits = np.full(N, BETA * 1.0 * g)
    logits[0] = BETA * 1.0
    p = np.exp(logits - logits.max())
    p /= p.sum()
    direct = -np.sum(p * np.log(p))
    assert th.equiangular_entropy(g, lam=1.0, beta=BETA, n=N) == pytest.approx(direct, rel=1e-14)

    t = np.linspace(0.0, 15.0, 301)
    gam = th.solve_equiangular(0.0, t, lambdas=[1.0], beta=BETA, n=N)
    ent = th.equiangular_entropy(gam, lam=1.0, beta=BETA, n=N)
    assert np.all(np.diff(ent) >= -1e-15)
    assert ent[-1] == pytest.approx(math.log(N), abs=1e-12)
    assert ent[0] < math.log(N) - 0.1


# --------------------------------------------------------------------------- #
# Thm 25 fits
# --------------------------------------------------------------------------- #
def test_fits_recover_exact_laws():
    x = np.array([8.0, 16, 32, 64, 128])
    s, b, r2 = th.fit_power_law(x, 0.3 * x**1.5)
    assert s == pytest.approx(1.5, rel=1e-12) and b == pytest.approx(math.log(0.3), rel=1e-12)
    assert r2 == pytest.approx(1.0, abs=1e-12)
    s, b, r2 = th.fit_linear(x * np.log(100), 2.0 * x * np.log(100) + 1.0)
    assert (s, b) == (pytest.approx(2.0, rel=1e-12), pytest.approx(1.0, rel=1e-9)) and r2 == pytest.approx(1.0)
    assert th.clustering_time_scale("relu", n=32, d=100) == pytest.approx(32 * math.log(100))
    with pytest.raises(ConfigError):
        th.fit_power_law([1, 2], [1, -1])


# --------------------------------------------------------------------------- #
# Thm 39
# --------------------------------------------------------------------------- #
def test_orthogonal_heads():
    B1 = np.diag([1.0, 1.0, 0.0, 0.0])
    B2 = np.diag([0.0, 0.0, 1.0, 1.0])
    assert th.head_overlap([B1, B2]) == 0.0
    angles = th.principal_angles([B1, B2])
    assert list(angles) == [(0, 1)]
    assert np.allclose(angles[(0, 1)], 90.0, rtol=0, atol=1e-12)


def test_overlap_and_angles_random_match_direct():
    rng = np.random.default_rng(1234)
    d, k, H = 10, 3, 3
    Qs = [rng.standard_normal((k, d)) for _ in range(H)]
    Ks = [rng.standard_normal((k, d)) for _ in range(H)]
    Bs = [Q.T @ K for Q, K in zip(Qs, Ks)]
    direct = max(
        np.max(np.linalg.svd(Bs[a] @ Bs[b], compute_uv=False)) for a in range(H) for b in range(H) if a != b
    )
    assert th.head_overlap(Bs) == pytest.approx(direct, rel=1e-12)
    angles = th.principal_angles(Bs)
    assert set(angles) == {(0, 1), (0, 2), (1, 2)}
    for (a, b), ang in angles.items():
        # range(Q^T K) = range(Q^T) for full-rank K
        Ua, _ = np.linalg.qr(Qs[a].T)
        Ub, _ = np.linalg.qr(Qs[b].T)
        cos = np.clip(np.linalg.svd(Ua.T @ Ub, compute_uv=False), -1, 1)
        expected = np.sort(np.degrees(np.arccos(cos)))
        assert ang.shape == (k,)
        assert np.allclose(ang, expected, rtol=0, atol=1e-6)
        assert np.all(np.diff(ang) >= 0)


# --------------------------------------------------------------------------- #
# validation
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "call, key",
    [
        (lambda: th.c_star(0.5), "H"),
        (lambda: th.beta_star(2, 1, 1.0), "n"),
        (lambda: th.beta_star(2, 8, 0.0), "alpha"),
        (lambda: th.early_rate([], beta=1.0, n=4), "lambdas"),
        (lambda: th.lambda_c(0.0, 4), "beta"),
        (lambda: th.solve_equiangular(-0.5, [0, 1], lambdas=[1.0], beta=1.0, n=4), "gamma0"),
        (lambda: th.solve_equiangular(0.0, [1, 0], lambdas=[1.0], beta=1.0, n=4), "t"),
        (lambda: th.principal_angles([np.eye(2), np.zeros((2, 2))]), "Bs[1]"),
        # each of these had named no argument, hung solve_ivp (NaN tolerances) or returned NaN
        (lambda: th.principal_angles([np.eye(2)], rtol=2.0), "rtol"),  # had blamed Bs[0]: "is zero"
        (lambda: th.c_star("x"), "H"),
        (lambda: th.head_cosine("x", n=4, alpha=1.0), "beta"),
        (lambda: th.head_cosine(math.nan, n=4, alpha=1.0), "beta"),
        (lambda: th.phi(math.nan, beta=1.0, n=4), "lam"),
        (lambda: th.equiangular_rhs(math.nan, lambdas=[1.0], beta=1.0, n=4), "gamma"),
        (lambda: th.solve_equiangular(0.0, ["x"], lambdas=[1.0], beta=1.0, n=4), "t"),
        (lambda: th.solve_equiangular(0.0, [0, 1], lambdas=[1.0], beta=1.0, n=4, rtol=math.nan), "rtol"),
        (lambda: th.solve_equiangular_log_gap(0.0, [0, 1], lambdas=[1.0], beta=1.0, n=4, atol=-1.0), "atol"),
        (lambda: th.fit_linear([1.0, 2.0], [1.0, math.inf]), "ys"),  # had been blamed on xs
        (lambda: th.fit_linear(["a", 2.0], [1.0, 2.0]), "xs"),
        (lambda: th.late_rate([1e308, 1e308]), "lambdas"),  # their sum had been inf (equal_split_rate: NaN)
        (lambda: th.equal_split_rate([1e308, 1e308], beta=1.0, n=4), "lambdas"),
        # True had been taken as 1 and "2" as 2 (float() takes both): beta_star(True, 16, 1) had been inf
        (lambda: th.beta_star(True, 16, 1.0), "H"),
        (lambda: th.beta_star(2, 16, True), "alpha"),
        (lambda: th.c_star("2"), "H"),
        (lambda: th.head_cosine(1.0, n=np.bool_(True), alpha=1.0), "n"),
        (lambda: th.late_rate([True]), "lambdas"),
        (lambda: th.late_rate([-1.0]), "lambdas"),  # Λ ≤ 0 clusters not: -2 had been given as its rate
        (lambda: th.late_rate([1.0, -1.0]), "lambdas"),
    ],
)
def test_bad_arguments(call, key):
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.key == key


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #
def _kv(text):
    return dict(line.split(" = ", 1) for line in text.strip().splitlines())


def test_cli_beta_star(capsys):
    status = main(["theory", "beta-star", "--heads", "2", "--n", "16", "--alpha", "1"])
    out = capsys.readouterr().out
    assert status == 0
    kv = _kv(out)
    assert float(kv["c_star"]) == th.c_star(2)
    assert float(kv["beta_star"]) == th.beta_star(2, 16, 1.0)
    assert float(kv["beta_star_numeric"]) == pytest.approx(float(kv["beta_star"]), rel=1e-12)
    assert abs(float(kv["difference"])) < 1e-12
    assert kv["heads"] == "2" and kv["n"] == "16"


def test_cli_beta_star_json(capsys):
    assert main(["theory", "beta-star", "--heads", "1", "--n", "4", "--alpha", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["beta_star"] == "inf" and data["c_star"] == 1.0


@pytest.mark.parametrize("alpha, expected", [("1e-310", math.inf), ("1e-308", 1.1134191880213035e308)])
def test_beta_star_numeric_at_alphas_near_the_floats_edge(capsys, alpha, expected):
    # the doubling search had run past the floats (±inf, then NaN in brentq): a traceback, exit 1
    assert th.beta_star_numeric(2, 16, float(alpha)) == pytest.approx(expected, rel=1e-12)
    assert main(["theory", "beta-star", "--heads", "2", "--n", "16", "--alpha", alpha]) == 0
    kv = _kv(capsys.readouterr().out)
    assert float(kv["beta_star_numeric"]) == pytest.approx(expected, rel=1e-12)
    if math.isinf(expected):
        assert kv["monotone_for"] == "all finite beta (beta* is past the largest float)"  # not "a single head"


def test_cli_rates(capsys):
    status = main(["theory", "rates", "--lambdas", "0.5,1.5", "--beta", "2", "--n", "8", "--json"])
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert data["early_rate"] == th.early_rate(LAM, beta=BETA, n=N)
    assert data["late_rate"] == 4.0
    assert data["mean_in_convex_region"] is False
    assert data["superadditivity_gain"] == pytest.approx(data["early_rate"] - data["equal_split_rate"], abs=1e-16)


def test_cli_clustering_time_prints_the_experiment_s_fields_under_their_names(capsys):
    # exponent_in_n had printed the slope in log d
    from meanfield.solvers.experiments.multihead import clustering_time_experiment

    assert main(["theory", "clustering-time", "--quick", "--attention", "softmax", "--n", "4,8", "--d", "8,16",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    result = clustering_time_experiment("softmax", [4, 8], [8, 16], 1e-3, beta=1.0, runs=3, max_draws=None,
                                        init="uniform", dt=0.2, quick=True)
    names = {"time_median": "median", "clustered_fraction": "clustered_fraction", "seeds_tried": "draws",
             "predicted_scale": "scale", "fit_slope": "slope", "fit_intercept": "intercept", "fit_r2": "r2",
             "exponent_in_n": "exponent_n", "exponent_in_n_r2": "r2_n", "slope_in_log_d": "slope_log_d",
             "slope_in_log_d_r2": "r2_log_d", "fit_points": "points", "n": "n", "d": "d", "eps": "eps", "runs": "runs"}
    assert data["attention"] == "softmax" and data["init"] == "uniform"
    for printed, field in names.items():
        np.testing.assert_allclose(data[printed], np.asarray(result[field], dtype=float), rtol=1e-12, atol=0,
                                   err_msg=printed)
    assert abs(data["exponent_in_n"] - data["slope_in_log_d"]) > 1e-3  # the two fits tell the keys apart


def _past_the_score_limit_at(d: int) -> str:
    """A β whose β√d passes the float64 score limit at ``d`` (and is within it at d / 16)."""
    from meanfield.model import score_bound_limit

    return f"{score_bound_limit()[0] * 2.0 / math.sqrt(d):.6g}"


@pytest.mark.parametrize(
    "argv, option",
    [
        (["theory", "beta-star", "--heads", "2", "--n", "1", "--alpha", "1"], "--n"),
        (["theory", "beta-star", "--heads", "0"], "--heads"),
        (["theory", "beta-star", "--alpha", "-1"], "--alpha"),
        (["theory", "beta-star", "--n", "sixteen"], "--n"),
        (["theory", "rates", "--lambdas", "0.5,abc"], "--lambdas"),
        (["theory", "rates", "--lambdas", "1", "--beta", "-1"], "--beta"),  # (beta = 0 is taken: phi = 2 lambda/n)
        (["theory", "rates", "--lambdas", "1,,2"], "--lambdas"),  # an empty entry had been dropped silently
        (["theory", "clustering-time", "--eps", "2"], "--eps"),  # every configuration is clustered at eps >= 2
        (["theory", "clustering-time", "--n", "4", "--d", "4", "--dt", "1e-9"], "--dt"),  # 5.8e11 steps: had run for ever
        (["theory", "clustering-time", "--n", "4", "--d", "1000000000"], "--d"),  # heads of 1e9 × 1e9: a MemoryError traceback
        # β√d checked at the largest --d, not the smallest: the run had ended in a ScoreOverflowError traceback
        (["theory", "clustering-time", "--quick", "--attention", "softmax", "--n", "4", "--d", "8,128", "--beta",
          _past_the_score_limit_at(128)], "--beta"),
    ],
)
def test_cli_bad_values(capsys, argv, option):
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2
    assert option in err


def test_cli_theory_without_subcommand(capsys):
    assert main(["theory"]) == 2
    assert "beta-star" in capsys.readouterr().err


def test_beta_star_at_the_largest_alphas_and_the_wording_of_a_negative_one(capsys):
    # 2α overflowed: β* = 0.0 at α = 1e308, where it is 1.11e-308 (α β* = 1.1134… for every α)
    assert th.beta_star(2, 16, 1e308) == pytest.approx(th.beta_star(2, 16, 1.0) / 1e308, rel=1e-15)
    assert th.beta_star(2, 16, 1e308) > 0
    assert main(["theory", "beta-star", "--heads", "2", "--n", "2"]) == 0
    regime = _kv(capsys.readouterr().out)["monotone_for"]
    # identical heads are monotone at every β: the criterion of Thm 19 is sufficient, and the line had said "no beta > 0"
    assert regime.startswith("no beta > 0 by Thm 19's sufficient criterion") and "not excluded" in regime


def test_equiangular_entropy_of_an_overflowing_product_is_its_limit():
    np.testing.assert_equal(th.equiangular_entropy(0.0, lam=1e308, beta=10.0, n=4), 0.0)  # had been NaN (inf · 0)
    assert th.equiangular_entropy(0.0, lam=1e3, beta=10.0, n=4) == 0.0


def test_cli_rates_refuses_strengths_whose_total_overflows(capsys):
    assert main(["theory", "rates", "--lambdas", "1e308,1e308", "--beta", "1", "--n", "4"]) == 2  # had printed nan, exit 0
    assert "error: --lambdas" in capsys.readouterr().err


def test_equiangular_inner_products_outside_their_domain_and_non_positive_fit_data_are_named():
    # γ = 2 had given an "entropy" of 1.32 and NaN passed through; a bad ys had been reported as xs
    with pytest.raises(ConfigError, match="^gamma: equiangular unit tokens"):
        th.equiangular_entropy(2.0, lam=1.0, beta=2.0, n=8)
    with pytest.raises(ConfigError, match="^gamma: equiangular unit tokens"):
        th.equiangular_entropy(-0.5, lam=1.0, beta=2.0, n=8)  # below -1/(n-1)
    for bad in (math.nan, [0.5, math.inf]):
        with pytest.raises(ConfigError, match="^gamma: must be finite"):
            th.equiangular_rate(bad, lambdas=[1.0], beta=1.0, n=4)
    with pytest.raises(ConfigError, match="^ys: a power-law fit needs positive ys"):
        th.fit_power_law([1.0, 2.0], [1.0, -1.0])
    assert th.equiangular_entropy(-1 / 7, lam=1.0, beta=2.0, n=8) > 0  # the edges of the domain stay open


@pytest.mark.parametrize(
    ("lambdas", "beta", "n", "gain"),
    [  # 60-digit mpmath values of Σφ(λ_h) - Hφ(Λ/H) (the differences of the rates gave 0.0, 7 % off, 0.0)
        ([2.0, 2.6], 1e-6, 1e8, -3.6000124200188505e-23),
        ([0.5, 1.5], 1e-6, 1e8, -1.0000015000010116e-22),
        ([1.0, 1.000000001], 1.0, 5, -6.5970081071351661e-20),
    ],
)
def test_the_gain_is_accurate_where_the_two_rates_agree_to_round_off(lambdas, beta, n, gain):
    assert th.superadditivity_gain(lambdas, beta=beta, n=n) == pytest.approx(gain, rel=1e-12, abs=0.0)
    assert th.superadditivity_gain(np.array(lambdas), beta=beta, n=n) == pytest.approx(gain, rel=1e-12, abs=0.0)


def test_the_theory_modules_examples_pass():
    import doctest

    result = doctest.testmod(th)
    assert result.attempted >= 20 and result.failed == 0, result


def test_the_gain_checks_its_inputs_and_stays_finite_where_beta_lambda_passes_the_floats():
    # the Taylor-remainder form had dropped the rates' checks (numbers for β < 0 and n < 2, raw errors for [])
    for bad, name in ((dict(lambdas=[1.0, 2.0], beta=-1.0, n=8), "beta"), (dict(lambdas=[1.0, 2.0], beta=1.0, n=1), "n"),
                      (dict(lambdas=[], beta=1.0, n=8), "lambdas"), (dict(lambdas=[float("nan")], beta=1.0, n=8), "lambdas")):
        with pytest.raises(ConfigError, match=name):
            th.superadditivity_gain(**bad)
    assert th.superadditivity_gain([2.0, 3.0], beta=1e308, n=8) == 0.0  # had been NaN (0·∞ in φ'(μ))


@pytest.mark.parametrize("beta", [0.0, -0.5, math.nan, math.inf, True, "4", [4.0, 0.0]])
def test_the_rate_of_theorem_1_takes_positive_inverse_temperatures_only(beta):
    # β = -0.5 had given 1.18, β = 0 NaN with a RuntimeWarning, True and NaN had passed through
    from meanfield.analysis.projection import concentration_rate

    with pytest.raises(ValueError, match="beta must be real numbers > 0"):
        concentration_rate(beta)
    np.testing.assert_allclose(concentration_rate([4.0, 1024.0]), np.sqrt(np.log([5.0, 1025.0]) / [4.0, 1024.0]), rtol=1e-15)


@pytest.mark.parametrize(("lambdas", "beta", "n"), [
    ([1.0, 1.1, 4.0], 1.0, 16),  # two heads near the mean, one far
    ([0.2, 3.0, 5.0, 0.5], 2.0, 8),  # every head far
    ([0.9, 1.0, 1.2, 6.0, 0.1], 0.7, 40),
])
def test_the_gain_of_three_or_more_heads_far_from_the_mean_is_the_difference_of_the_rates(lambdas, beta, n):
    # Σ_h φ(λ_h) − Hφ(μ), φ(λ) = 2λ/(e^{βλ}+n−1), summed directly: G is not small here, so the direct difference is
    # exact to ~1e-16.  With two heads the φ'(μ)(λ_h−μ) terms of the far heads cancel; a sign slip in φ'(μ) had passed
    # (mut3 T6: −0.302 for −0.189 in the first case)
    def phi(lam: float) -> float:
        return 2.0 * lam / (math.exp(beta * lam) + n - 1.0)

    mu = math.fsum(lambdas) / len(lambdas)
    direct = math.fsum([phi(lam) for lam in lambdas] + [-len(lambdas) * phi(mu)])
    assert abs(direct) > 1e-3
    np.testing.assert_allclose(th.superadditivity_gain(lambdas, beta=beta, n=n), direct, rtol=1e-12, atol=0)
