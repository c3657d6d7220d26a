r"""``diagnostics/authors_G2`` and ``diagnostics/slope2`` of time-dependent heads, against NumPy.

The authors' slope diagnostic of Massucco, Del Grande, Carioni, Brune and Schönlieb
(arXiv 2605.18870) is recomputed here from the saved tokens and the saved weight path:

.. math::

    G^2 = \frac1n\sum_i \frac{\|\bar v_i\|^2}{\frac1H\sum_h n/N_{h,i}},\qquad
    \bar v_i = \frac1H\sum_h P^\perp_{x_i}\sum_j \frac{e^{x_i^\top D_h x_j}}{N_{h,i}} D_h x_j,\qquad
    N_{h,i}=\sum_j e^{x_i^\top D_h x_j}.
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.cli import main

DATA = Path(__file__).resolve().parents[2] / "data"


def numpy_authors_g2(x: np.ndarray, D: np.ndarray) -> float:
    """The authors' G² of one frame, β = 1, heads averaged (an independent transcription)."""
    n = x.shape[0]
    U = np.exp(np.einsum("nd,hde,me->hnm", x, D, x))
    N = U.sum(axis=-1)                                            # (H, n)
    field = np.einsum("hnm,hed,md->hne", U / N[..., None], D, x)   # Σ_j softmax D_h x_j
    field = field - np.sum(field * x[None], axis=-1, keepdims=True) * x[None]
    v = field.mean(axis=0)
    return float(np.mean(np.sum(v * v, axis=1) / (n / N).mean(axis=0)))


def _run(tmp_path: Path, config: str, H: int, n: int = 16) -> dict[str, np.ndarray]:
    out = tmp_path / "run.h5"
    rc = main(["simulate", str(DATA / config), "-o", str(out), "--quiet", "--set", "solver.t_final=0.1",
               "--set", f"model.num_heads={H}", "--set", f"init.n={n}"])
    assert rc == 0
    with h5py.File(out, "r") as f:
        return {"x": f["x"][()], "t": f["t"][()], "G2": f["diagnostics/authors_G2"][()],
                "slope2": f["diagnostics/slope2"][()], "wt": f["weights/t"][()], "B": f["weights/B"][()]}


@pytest.mark.parametrize("config", ["massucco_ou.toml", "massucco_oscillating.toml"])
def test_authors_g2_matches_numpy(tmp_path, config):
    run = _run(tmp_path, config, H=3)
    assert run["G2"].shape == run["t"].shape and len(run["t"]) >= 3
    for k, t in enumerate(run["t"]):
        j = int(np.argmin(np.abs(run["wt"] - t)))
        assert abs(run["wt"][j] - t) < 1e-12
        ref = numpy_authors_g2(run["x"][k], run["B"][j])
        assert ref > 1e-6  # the cloud moves: the comparison is not vacuous
        assert run["G2"][k] == pytest.approx(ref, rel=1e-10)
    # with three different heads G² is not the metric slope
    assert not np.allclose(run["G2"], run["slope2"], rtol=1e-3)


def test_one_head_g2_is_the_metric_slope(tmp_path):
    run = _run(tmp_path, "massucco_ou.toml", H=1)
    np.testing.assert_allclose(run["G2"], run["slope2"], rtol=1e-10)


def test_ou_heads_record_g2(tmp_path):
    out = tmp_path / "ou.h5"
    rc = main(["simulate", str(DATA / "ou_heads.toml"), "-o", str(out), "--quiet", "--set", "solver.t_final=0.5",
               "--set", "init.n=12"])
    assert rc == 0
    with h5py.File(out, "r") as f:
        g2, s2 = f["diagnostics/authors_G2"][()], f["diagnostics/slope2"][()]
    assert g2.shape == s2.shape and np.all(np.isfinite(g2)) and np.all(g2 > 0)


def test_a_particle_run_records_the_explicit_time_derivative_of_its_energy():
    # only the JKO scheme had recorded ∂_tE: a particle run's energy–dissipation balance needed hand-written code
    import meanfield as mf
    from meanfield.analysis.energy import energy_theta

    run = mf.simulate(DATA / "oscillating_heads.toml", t_final=0.5, save_every=0.25, **{"init.n": 12})
    rate, h = run.diagnostics["dE_dt_explicit"], 1e-5
    assert rate.shape == run.t.shape and np.all(np.abs(rate[1:]) > 1e-3)  # the heads move: not vacuous
    for k, t in enumerate(run.t[1:], start=1):  # a centred difference in t of E(μ, t) at the frame's tokens
        at = [energy_theta(run.x[k], run.model.heads.at(s), beta=run.model.beta) for s in (t - h, t + h)]
        assert rate[k] == pytest.approx((at[1] - at[0]) / (2 * h), rel=1e-6)
    # the balance of the descent flow: d/dt energy_theta = −slope2 + dE_dt_explicit (trapezoid over the frames)
    change = np.diff(run.diagnostics["energy_theta"])
    terms = -run.diagnostics["slope2"] + rate
    np.testing.assert_allclose(change, 0.125 * (terms[1:] + terms[:-1]), rtol=2e-2)


def test_a_python_built_schedule_records_what_the_config_route_does():
    # mf.solve with a MatrixSDESchedule built in Python had not recorded G²; the config route did
    import meanfield as mf
    from meanfield.heads.schedules import MatrixSDESchedule, random_symmetric

    H = 3
    by_config = mf.simulate(DATA / "massucco_ou.toml", t_final=0.1, **{"model.num_heads": H, "init.n": 12})
    schedule = MatrixSDESchedule(random_symmetric(H, 3, seed=52), drift="ou", dt=0.005, kappa=1.0,
                                 mean=np.broadcast_to(np.eye(3), (H, 3, 3)).copy(), sigma=np.sqrt(2),
                                 noise="symmetric", integrator="euler-maruyama", seed=2010)
    model = mf.Model(d=3, beta=1.0, heads=schedule, direction="descent", combine="mean")
    by_python = mf.solve(mf.Problem(model, by_config.x[0]), mf.ParticleSolver(method="euler", dt=0.005), t_final=0.1,
                         save_every=by_config.config["solver"]["save_every"])
    np.testing.assert_array_equal(by_python.x, by_config.x)  # the same recursion
    for key in ("authors_G2", "slope2", "dE_dt_explicit"):
        np.testing.assert_allclose(by_python.diagnostics[key], by_config.diagnostics[key], rtol=1e-13, atol=0)
    assert "weights/t" not in by_python.static  # (sampled from t = 0 every 0.01, it had cost 455 MB for 2 steps at t = 1000)
    constant = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), by_config.x[0]), mf.ParticleSolver(dt=0.05), t_final=0.1)
    assert "authors_G2" not in constant.diagnostics
    # a caller's tracker of the same names replaces the built-in values (it had been a TrackerError)
    mine = mf.solve(mf.Problem(model, by_config.x[0]), mf.ParticleSolver(method="euler", dt=0.005), t_final=0.01,
                    trackers=lambda t, x: {"slope2": -1.0})
    np.testing.assert_array_equal(mine.diagnostics["slope2"], -1.0)
    assert "authors_G2" in mine.diagnostics
    with pytest.raises(mf.TrackerError, match="returns 'slope2', which the run's own trackers record"):  # a config's
        mf.simulate(DATA / "massucco_ou.toml", t_final=0.01, trackers=lambda t, x: {"slope2": -1.0},  # run keeps its own
                    **{"model.num_heads": H, "init.n": 12})


def test_solve_with_weighted_tokens_and_time_dependent_heads_weighs_g2_by_the_masses():
    # solve() adds a SlopeTracker for time-dependent heads: it must take the token masses (unweighted it had given
    # authors_G2(0) = 0.401 instead of 0.456 here)
    import meanfield as mf
    from meanfield.heads import HeadStack
    from meanfield.heads.schedules import OscillatingSchedule
    from meanfield.model import Model
    from meanfield.solvers.trackers import SlopeTracker

    B = np.stack([np.eye(3), np.diag([1.0, -0.5, 0.3])])
    heads = OscillatingSchedule(HeadStack(B=B, V=B.copy()), amplitude=2.0, omega=3.0, phases=np.array([0.0, 1.0]))
    model = Model(d=3, beta=1.0, attention="softmax", heads=heads)
    x0 = mf.sample_uniform(12, 3, seed=1)
    w = np.arange(1.0, 13.0)
    w /= w.sum()
    run = mf.solve(mf.Problem(model, x0, weights=w), mf.ParticleSolver(dt=0.05), t_final=0.2, save_every=0.1)
    weighted = SlopeTracker(model, weights=w)(0.0, x0)["authors_G2"]
    plain = SlopeTracker(model)(0.0, x0)["authors_G2"]
    assert abs(weighted - plain) > 1e-2 * weighted
    np.testing.assert_allclose(run.diagnostics["authors_G2"][0], weighted, rtol=1e-10, atol=0)
