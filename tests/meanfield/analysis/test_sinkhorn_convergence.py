"""The Sinkhorn divergence converges on nearly degenerate problems (Newton polishing of the dual potentials).

With the default options (ε = 1e-2, numItermax = 10 000, stopThr = 1e-6) 20 against 30 uniform points on S² had
not converged (marginal error 6.4e-6 after 10 000 updates at the last ε level, a RuntimeWarning, 3.6 s): Sinkhorn's
linear rate crawls there.  Each level is now finished by Newton's method on the dual where Sinkhorn has not
converged after ``SINKHORN_ITERATIONS_BEFORE_NEWTON`` updates.
"""
from __future__ import annotations

import warnings

import numpy as np
import ot
import pytest
from scipy.optimize import minimize, root
from scipy.special import logsumexp, softmax

import meanfield as mf
from meanfield.analysis import transport
from meanfield.analysis.transport import cost_matrix


def _reference_ot_eps(a, b, C, eps):
    r"""Independent :math:`\mathrm{OT}_\varepsilon = \langle C,P\rangle + \varepsilon\sum P\log(P/a\otimes b)`.

    The semi-dual :math:`\max_g \langle g,b\rangle - \varepsilon\sum_i a_i\log\sum_j b_je^{(g_j - C_{ij})/\varepsilon}`
    (first potential pinned to 0) is maximised by scipy (trust-exact, then a root of its gradient); POT's
    ``sinkhorn_log``, warm-started from these potentials, must find its marginals right to 1e-11 (its own stopping
    test, so the plan is the entropic optimum, unique) and gives the plan.  POT's ``sinkhorn2`` would return
    :math:`\langle C,P\rangle` only, without the entropy term that meanfield's :math:`\mathrm{OT}_\varepsilon`
    includes, so the value is formed here from POT's plan.  (A cold ``sinkhorn2(..., numItermax=10**6,
    stopThr=1e-12)`` is the same algorithm that crawls here: 1e5 POT iterations took 128 s and left 6e-7.)
    """
    lb = np.log(b)

    def negated(h):
        g = np.r_[0.0, h]
        Z = (g[None, :] - C) / eps + lb[None, :]
        pi = softmax(Z, axis=1)
        value = g @ b - eps * a @ logsumexp(Z, axis=1)
        hessian = (np.diag(a @ pi) - (pi * a[:, None]).T @ pi) / eps
        return -value, -(b - a @ pi)[1:], hessian[1:, 1:]

    start = minimize(lambda h: negated(h)[:2], np.zeros(b.size - 1), jac=True, hess=lambda h: negated(h)[2],
                     method="trust-exact", options={"gtol": 1e-15, "maxiter": 500}).x
    h = root(lambda h: negated(h)[1], start, jac=lambda h: negated(h)[2], method="hybr", options={"xtol": 1e-15}).x
    g = np.r_[0.0, h]
    f = -eps * logsumexp((g[None, :] - C) / eps + lb[None, :], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (POT's log computes exp of its log-potentials, which may overflow)
        P, log = ot.sinkhorn(a, b, C, eps, method="sinkhorn_log", numItermax=2000, stopThr=1e-11, log=True,
                             warmstart=(f / eps + np.log(a), g / eps + lb))
    assert log["err"][-1] < 1e-11, log["err"][-1]
    entropy = np.sum(P * np.log(P / np.outer(a, b), out=np.zeros_like(P), where=P > 0))
    return float(np.sum(C * P) + eps * entropy)


def _problem(n, m, seed):
    return mf.sample_uniform(n, 3, seed=seed), mf.sample_uniform(m, 3, seed=seed + 1)


def test_default_call_converges_without_a_warning():
    x, y = _problem(20, 30, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (it had warned: 'xy' error 6.4e-6 after 10 000 updates)
        value, log = mf.w2(x, y, method="sinkhorn", log=True)
    assert log["converged"] and max(log["err"].values()) < 1e-6
    assert log["newton_steps"]["xy"] > 0 and log["niter"]["xy"] < 2000


@pytest.mark.parametrize(("n", "m", "seed"), [(20, 30, 0), (60, 45, 3), (13, 60, 5), (40, 40, 7)])
def test_divergence_matches_an_independent_reference(n, m, seed):
    # S_eps = OT_eps(mu, nu) - OT_eps(mu, mu)/2 - OT_eps(nu, nu)/2, each term with its entropy (see the reference),
    # value sqrt(max(S, 0)); the default stopThr (marginals to 1e-6) leaves ~1e-6 in the terms (measured <= 2.7e-6
    # over 72 problems), stopThr = 1e-10 ~1e-10
    x, y = _problem(n, m, seed)
    a, b, eps = np.full(n, 1.0 / n), np.full(m, 1.0 / m), 1e-2
    terms = {"xy": _reference_ot_eps(a, b, cost_matrix(x, y), eps),
             "xx": _reference_ot_eps(a, a, cost_matrix(x, x), eps),
             "yy": _reference_ot_eps(b, b, cost_matrix(y, y), eps)}
    S = terms["xy"] - 0.5 * (terms["xx"] + terms["yy"])
    for stopThr, atol in ((1e-6, 1e-5), (1e-10, 1e-8)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            value, log = mf.w2(x, y, method="sinkhorn", log=True, stopThr=stopThr)
        assert log["converged"]
        for key, reference in terms.items():
            np.testing.assert_allclose(log["ot_eps"][key], reference, rtol=0, atol=atol, err_msg=key)
        np.testing.assert_allclose(log["divergence"], S, rtol=0, atol=2 * atol)
        np.testing.assert_allclose(value, np.sqrt(max(S, 0.0)), rtol=0, atol=2 * atol / np.sqrt(S))


def _marginal_error(a, b, C, eps, f, g):
    P = a[:, None] * b[None, :] * np.exp((f[:, None] + g[None, :] - C) / eps)
    return np.linalg.norm(P.sum(axis=1) - a) + np.linalg.norm(P.sum(axis=0) - b)


@pytest.mark.parametrize("stopThr", [1e-6, 1e-9])
def test_final_plan_has_its_marginals_within_stopThr(stopThr):
    x, y = _problem(20, 30, 0)
    a, b, C, eps = np.full(20, 1 / 20), np.full(30, 1 / 30), cost_matrix(x, y), 1e-2
    value, info = transport._entropic_ot(a, b, C, eps, 10_000, stopThr)
    assert info["converged"] and info["newton_steps"] > 0
    assert _marginal_error(a, b, C, eps, *info["potentials"]) < stopThr
    # transposed: the Schur complement on the other side
    value_t, info_t = transport._entropic_ot(b, a, C.T, eps, 10_000, stopThr)
    assert info_t["converged"] and _marginal_error(b, a, C.T, eps, *info_t["potentials"]) < stopThr
    np.testing.assert_allclose(value_t, value, rtol=0, atol=10 * stopThr)


def test_symmetric_newton_step_keeps_the_potentials_equal():
    # the self terms OT_eps(mu, mu) use the averaged update (g = f); their Newton polish solves (diag(r) + P) df = ...
    x = mf.sample_uniform(30, 3, seed=1)
    a, C, eps = np.full(30, 1 / 30), cost_matrix(x, x), 1e-2
    f0, _, _, err0 = transport._sinkhorn_updates(a, a, C, eps, np.zeros(30), np.zeros(30), 3, 1e-12,
                                                averaged=True, symmetric=True)
    f, g, steps, err = transport._newton_polish(a, a, C, eps, f0, f0, 30, 1e-12, symmetric=True)
    assert err0 > 1e-3 and err < 1e-12 and 0 < steps < 30
    assert f is g and _marginal_error(a, a, C, eps, f, g) < 1e-12
    value, info = transport._entropic_ot(a, a, C, eps, 10_000, 1e-12, symmetric=True)
    np.testing.assert_allclose(transport._entropic_value(f, g, C, np.log(a), np.log(a), eps), value,
                               rtol=0, atol=1e-12)


def test_sinkhorn_goes_on_where_newton_fails(monkeypatch):
    # 5 against 7 points: the last level needs about 150 updates, past the 100 before Newton
    x, y = _problem(5, 7, 0)
    expected, log = mf.w2(x, y, method="sinkhorn", log=True)
    assert log["newton_steps"]["xy"] > 0

    def singular(*args, **kwargs):
        raise np.linalg.LinAlgError("singular")

    monkeypatch.setattr(np.linalg, "solve", singular)
    value, log = mf.w2(x, y, method="sinkhorn", log=True)
    assert log["converged"] and log["newton_steps"]["xy"] == 0
    np.testing.assert_allclose(value, expected, rtol=0, atol=1e-5)


def test_no_newton_above_the_size_limit(monkeypatch):
    monkeypatch.setattr(transport, "SINKHORN_NEWTON_MAX_ATOMS", 19)  # the smaller side has 20 atoms
    x, y = _problem(20, 30, 0)
    with pytest.warns(RuntimeWarning, match="Sinkhorn did not converge"):
        _, log = mf.w2(x, y, method="sinkhorn", log=True, numItermax=500)
    assert log["newton_steps"] == {"xx": 0, "yy": 0, "xy": 0}


@pytest.mark.parametrize(("n", "m", "seed", "eps", "weighted", "cost", "before"), [
    (20, 30, 0, 0.5, False, "geodesic", 0.48517873932165795),
    (40, 25, 2, 1.0, True, "chordal", 0.22855986656316438),
    (60, 60, 4, 0.5, False, "geodesic", 0.36032561228845256),
])
def test_easy_problems_keep_their_values(n, m, seed, eps, weighted, cost, before):
    # values of the code before Newton polishing: Sinkhorn converges within its first 100 updates at every level
    x, y = _problem(n, m, seed)
    a = b = None
    if weighted:
        a = np.random.default_rng(seed).random(n) + 0.1
        b = np.random.default_rng(seed + 1).random(m) + 0.1
        b *= a.sum() / b.sum()
    value, log = mf.w2(x, y, a, b, cost=cost, method="sinkhorn", epsilon=eps, log=True)
    assert log["converged"] and log["newton_steps"] == {"xx": 0, "yy": 0, "xy": 0}
    np.testing.assert_allclose(value, before, rtol=1e-10)
