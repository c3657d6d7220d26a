"""Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931): zero-temperature particles, the concentration tracker, summaries, β sweeps, the CLI."""
from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

import meanfield.cli as cli
from meanfield.config import load_config
from meanfield.errors import ConfigError
from meanfield.plotting.curves import plot_sweep
from meanfield.run import load
from meanfield.analysis.projection import zero_temperature_solution
from meanfield.geometry.sphere import normalize, sample_uniform
from meanfield.analysis.concentration import concentration_summary, run_concentration, tracker_from_head
from meanfield.solvers.experiments.concentration import (
    DEFAULT_CONCENTRATION_CONFIG,
    bench_concentration,
    parse_spacing,
    sweep_beta,
    sweep_size,
    SWEEP_SPACING,
    tracking_share,
)
from meanfield.solvers.run import concentration_tracker, setup_run, simulate_config
from meanfield.solvers.zero_temperature import ZeroTemperatureSolver
from meanfield.heads import Head
from meanfield.model import Model
from meanfield.solvers.problem import Problem, solve

ROOT = Path(__file__).resolve().parents[3]
K_DEFAULT = [[1.25, -0.75, 0.0], [-0.375, 0.625, 0.0], [0.0, 0.0, 1.0]]
V_DEFAULT = [[1.25, 0.75, 0.0], [0.75, 1.25, 0.0], [0.0, 0.0, 0.25]]
S_DEFAULT = np.diag([1.0, 0.5, 0.25])  # = V Bᵀ by construction (B = K)


def _config(*overrides: str, base: dict | None = None) -> dict:
    return load_config(copy.deepcopy(base or DEFAULT_CONCENTRATION_CONFIG), list(overrides))


def _ratio_coordinates(x: np.ndarray) -> np.ndarray:
    """For S diagonal, points on the curve normalize(e^{τS}x0) have log|x_k/x_1| = log|x0_k/x0_1| + τ(s_k − s_1)."""
    return np.log(np.abs(x[..., 1:] / x[..., :1]))


# ----------------------------------------------------------------------------- zero temperature


def _zero_temperature(x0: np.ndarray, B: np.ndarray, *, dt: float, t_final: float, save_every: float):
    """The zero-temperature run of the head (Q = I, K = B, V = S B⁻ᵀ), so that V Bᵀ = S_DEFAULT exactly."""
    head = Head(Q=np.eye(3), K=B, V=S_DEFAULT @ np.linalg.inv(B).T)
    problem = Problem(Model(d=3, beta=1.0, heads=head), x0)
    return solve(problem, ZeroTemperatureSolver(dt=dt), t_final=t_final, save_every=save_every, energy=False, speed=False)


def test_zero_temperature_solver_matches_closed_form() -> None:
    B = np.array(K_DEFAULT)
    x0 = sample_uniform(6, 3, seed=4)
    t = np.linspace(0.0, 6.0, 7)
    reference = zero_temperature_solution(x0, S_DEFAULT, B, t)  # closed form + scipy clock
    errors = []
    for dt in (0.2, 0.1):
        result = _zero_temperature(x0, B, dt=dt, t_final=6.0, save_every=1.0)
        errors.append(np.max(np.abs(np.array(result.states) - reference)))
    assert errors[1] < 2e-6
    np.testing.assert_allclose(math.log2(errors[0] / errors[1]), 4.0, atol=0.6)  # RK4 order


def test_zero_temperature_descent_matches_the_closed_form_of_minus_s() -> None:
    # (found in review: descent run as ascent had passed every test, all of them ascent) descent is ẋ = −P⊥(Sx)/‖Bᵀx‖,
    # the closed form with S → −S and the same clock
    B = np.array(K_DEFAULT)
    x0 = sample_uniform(6, 3, seed=4)
    head = Head(Q=np.eye(3), K=B, V=S_DEFAULT @ np.linalg.inv(B).T)
    problem = Problem(Model(d=3, beta=1.0, heads=head, direction="descent"), x0)
    result = solve(problem, ZeroTemperatureSolver(dt=0.1), t_final=6.0, save_every=1.0, energy=False, speed=False)
    reference = zero_temperature_solution(x0, -np.asarray(S_DEFAULT), B, np.linspace(0.0, 6.0, 7))
    np.testing.assert_allclose(np.array(result.states), reference, rtol=0, atol=2e-6)
    # the Rayleigh quotient ⟨x, Sx⟩ falls along every token's path (ascent raises it)
    states = np.array(result.states)
    assert np.all(np.diff(np.einsum("tni,ij,tnj->tn", states, S_DEFAULT, states), axis=0) < 0)


def test_zero_temperature_trajectory_lies_on_the_curve() -> None:
    """Without the clock: log-ratios of eigen-coordinates move on a line of slopes s_k − s_1 (closed form)."""
    x0 = normalize(np.array([[0.2, 0.7, -0.6], [-0.5, 0.3, 0.8]]))
    result = _zero_temperature(x0, np.array(K_DEFAULT), dt=0.05, t_final=8.0, save_every=0.5)
    states = np.array(result.states)
    shift = _ratio_coordinates(states) - _ratio_coordinates(x0)[None]  # (T, n, 2) = τ_i(t)·(s_k − s_1)
    tau = shift[..., 0] / (0.5 - 1.0)
    np.testing.assert_allclose(shift[..., 1], tau * (0.25 - 1.0), atol=1e-7)
    assert np.all(np.diff(tau, axis=0) > 0)
    # convergence to Π(x0) = sign(x0₁) e1, exponential in τ: tan² d(x, Π x0) = Σ_k (x0_k/x0_1)² e^{-2(μ1−μk)τ}
    np.testing.assert_allclose(np.sign(states[-1, :, 0]), np.sign(x0[:, 0]))
    tangent = np.linalg.norm(states[..., 1:], axis=-1) / np.abs(states[..., 0])
    ratio = x0[:, 1:] / x0[:, :1]
    exact = np.sqrt((ratio[None, :, 0] * np.exp(-0.5 * tau)) ** 2 + (ratio[None, :, 1] * np.exp(-0.75 * tau)) ** 2)
    np.testing.assert_allclose(tangent, exact, rtol=1e-6)
    assert np.all(tangent <= np.linalg.norm(ratio, axis=1)[None] * np.exp(-0.5 * tau) * (1 + 1e-6))
    assert np.all(tangent[-1] < 0.05 * tangent[0])


def test_zero_temperature_run_setup_and_checks() -> None:
    cfg = _config("solver.kind=zero-temperature", "init.n=40", "solver.t_final=20", "solver.dt=0.1", "solver.save_every=1", "track.energy=true")
    result = simulate_config(cfg, None, quiet=True)
    w = result.diagnostics["w2_target"]
    assert w[-1] < 0.05 * w[0]  # the zero-temperature flow converges to Π♯ρ₀
    assert np.all(np.diff(w) < 0)
    rayleigh = result.diagnostics["rayleigh"]  # Lyapunov: x·Sx increases to μ1 = 1
    assert np.all(np.diff(rayleigh) > 0) and 0.99 < rayleigh[-1] <= 1.0
    two = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    two["model"]["heads"] = two["model"]["heads"] * 2
    two["solver"]["kind"] = "zero-temperature"
    with pytest.raises(ConfigError, match="single head") as info:
        setup_run(load_config(two))
    assert info.value.key == "model.heads"
    with pytest.raises(ConfigError) as info:
        setup_run(_config("solver.kind=zero-temperature", "model.attention=relu"))
    assert info.value.key == "model.attention"


# ----------------------------------------------------------------------------- tracker


def test_tracker_first_frame_is_the_distance_to_E() -> None:
    """At t = 0, W2(ρ0, Π♯ρ0) = D(ρ0, E) = √(π − 2) for uniform tokens on S² and dim E = 1."""
    x0 = sample_uniform(20000, 3, seed=11)
    tracker = tracker_from_head(np.eye(3), np.array(K_DEFAULT), np.array(V_DEFAULT), x0)
    values = tracker(0.0, x0)
    np.testing.assert_allclose(values["w2_target"], values["e_eigenspace_distance"], rtol=1e-10)
    np.testing.assert_allclose(values["w2_target"], math.sqrt(math.pi - 2), rtol=0.01)
    np.testing.assert_allclose(tracker.target.weights[0], np.mean(x0[:, 0] > 0), rtol=1e-14)


def test_tracker_on_grid_masses_equals_weighted_particles(rng: np.random.Generator) -> None:
    points = sample_uniform(500, 3, seed=2)
    mass0, mass1 = rng.random(500), rng.random(500)

    class GridSetup:
        state_name = "mass"
        static = {"points": points}
        state = mass0

    cfg = _config()
    grid = concentration_tracker(cfg, GridSetup())
    particles = tracker_from_head(np.eye(3), np.array(K_DEFAULT), np.array(V_DEFAULT), points, weights=mass0)
    got, want = grid(0.0, mass1), particles(0.0, points)
    from meanfield.analysis.transport import w2

    expected = w2(points, particles.target.atoms, mass1 / mass1.sum(), particles.target.weights)
    np.testing.assert_allclose(got["w2_target"], expected, rtol=1e-12)
    np.testing.assert_allclose(grid(0.0, mass0)["w2_target"], want["w2_target"], rtol=1e-12)


def test_tracker_finite_beta_falls_then_rises_and_drifts_to_EV() -> None:
    """Particles at β = 16: W2 to Π♯ρ₀ falls, reaches a minimum, then the terminal phase takes the mass to E_V."""
    cfg = _config("init.n=300", "solver.dt=0.1", "solver.t_final=12", "solver.save_every=0.2")
    result = simulate_config(cfg, None, quiet=True, keep_states=False)
    w, dv = result.diagnostics["w2_target"], result.diagnostics["v_eigenspace_distance"]
    i = int(np.argmin(w))
    assert 2.0 < result.t[i] < 10.0
    assert w[i] < 0.5 * w[0]
    assert np.all(np.diff(w[: i + 1]) < 1e-3)  # falling until the minimum
    assert w[-1] > 1.5 * w[i]
    assert dv[-1] < 0.1 * dv[0]
    np.testing.assert_allclose(w[-1], math.pi / 4, atol=0.05)  # E_V is 45° from E


def test_tracker_policy_on_failed_assumption() -> None:
    bad = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    bad["model"]["heads"] = [{"Q": "identity", "K": "identity", "V": [[1.0, 0.5, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.25]]}]
    with pytest.raises(ConfigError) as info:
        setup_run(load_config(bad, ["init.n=20"]))
    assert info.value.key == "model.heads" and "‖S−Sᵀ‖/‖S‖" in str(info.value)
    with pytest.warns(RuntimeWarning, match="Assumption 1"):
        setup_run(load_config(bad, ["init.n=20", "model.assumptions=warn"]))
    two = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    two["model"]["heads"] = two["model"]["heads"] * 2
    with pytest.raises(ConfigError, match="single head"):
        setup_run(load_config(two, ["init.n=20"]))


def test_default_config_file_matches_constant() -> None:
    from_file = load_config(ROOT / "data" / "concentration.toml")
    assert from_file == _config()
    assert tomllib.loads((ROOT / "data" / "concentration.toml").read_text())["track"]["concentration"] is True


# ----------------------------------------------------------------------------- summaries and sweeps


def test_summary_on_the_theorem_1_shape() -> None:
    """w(t) = r e^t + e^{−t}: t_min = ½ log(1/r), W2_min = 2√r, window from r u² − θu + 1 = 0 (u = e^t)."""
    r = 1e-3
    t = np.linspace(0.0, 8.0, 8001)
    s = concentration_summary(t, r * np.exp(t) + np.exp(-t))
    np.testing.assert_allclose(s["t_min"], 0.5 * math.log(1 / r), atol=1e-3)
    np.testing.assert_allclose(s["w2_min"], 2 * math.sqrt(r), rtol=1e-6)
    theta = 2 * s["w2_min"]
    roots = np.log((theta + np.array([-1.0, 1.0]) * math.sqrt(theta**2 - 4 * r)) / (2 * r))
    np.testing.assert_allclose([s["t_a"], s["t_b"]], roots, atol=1e-6)
    assert not (s["open_start"] or s["open_end"] or s["min_at_end"])
    user = concentration_summary(t, r * np.exp(t) + np.exp(-t), threshold=0.5)
    roots = np.log((0.5 + np.array([-1.0, 1.0]) * math.sqrt(0.25 - 4 * r)) / (2 * r))
    np.testing.assert_allclose([user["t_a"], user["t_b"]], roots, atol=1e-6)


def test_summary_edge_cases() -> None:
    t = np.arange(5.0)
    falling = concentration_summary(t, [1.0, 0.8, 0.6, 0.5, 0.45])
    assert falling["min_at_end"] and falling["open_end"] and falling["t_b"] == 4.0
    np.testing.assert_allclose(falling["t_a"], 1.0 + (0.9 - 0.8) / (0.6 - 0.8), atol=0)  # θ = 0.9 crossed in [0, 1]
    np.testing.assert_allclose(falling["t_a"], 0.5, atol=1e-15)
    below = concentration_summary(t, [0.5, 0.3, 0.2, 0.3, 0.5], threshold=0.1)
    assert math.isnan(below["t_a"]) and math.isnan(below["window_length"])
    with_nan = concentration_summary(t, [np.nan, 0.3, 0.2, 0.3, 0.5])  # the NaN frame is ignored
    assert with_nan["t_min"] == 2.0 and with_nan["open_start"] is True
    assert math.isnan(with_nan["window_length"])  # no window (the concentration CSV had given the run's length)
    np.testing.assert_allclose([with_nan["t_a"], with_nan["t_b"]], [1.0, 3.5], atol=1e-15)


def test_summary_first_local_minimum_beside_the_global_one() -> None:
    # a first approach, a rise, and a lower later dip (the exit from a metastable state decided late)
    t = np.linspace(0.0, 10.0, 1001)
    w = 0.3 + 0.02 * (t - 3.0) ** 2 - 0.4 * np.exp(-((t - 7.0) ** 2) / 0.1)
    s = concentration_summary(t, w)
    assert 6.9 < s["t_min"] <= 7.0 and s["w2_min"] == w.min() < 0.25
    # the first dip: the parabola's vertex t = 3 (the later dip's tail there is e^{-160}), W2 = 0.3
    np.testing.assert_allclose([s["t_first_min"], s["w2_first_min"]], [3.0, 0.3], atol=1e-12)
    for curve in ([1.0, 0.8, 0.6, 0.6, 0.5], [0.2, 0.4, 0.3]):  # never rising: the global minimum; rising at once: frame 0
        c = concentration_summary(np.arange(len(curve), dtype=float), curve)
        assert (c["t_first_min"], c["w2_first_min"]) == ((4.0, 0.5) if len(curve) == 5 else (0.0, 0.2))
    flat = concentration_summary(np.arange(7.0), [0.5, 0.4, 0.4, 0.6, 0.2, 0.2, 0.9])  # a flat bottom: its last frame
    assert (flat["t_first_min"], flat["t_min"]) == (2.0, 4.0)
    tied = concentration_summary(np.arange(5.0), [1.0, 0.5, 0.3, 0.3, 0.9])  # the minimum's own flat bottom: t_min
    assert tied["t_first_min"] == tied["t_min"] == 2.0  # (had been 3, after the minimum)
    rising = concentration_summary(np.arange(4.0), [0.70, 0.71, 0.65, 0.60])  # W2 rising from the start: not a dip
    assert rising["t_first_min"] == rising["t_min"] == 3.0  # (the start had been the "first local minimum")


def test_sweep_beta_tiny_family(tmp_path: Path) -> None:
    cfg = _config("init.n=300", "solver.t_final=10", "solver.dt=0.1", "solver.save_every=0.2")
    sweep = sweep_beta(cfg, [2.0, 8.0, 24.0], out_dir=tmp_path)
    t_min = [s["t_min"] for s in sweep.summaries]
    assert t_min[0] < t_min[1] < t_min[2]
    assert sweep.fit_tmin["slope"] > 0 and set(sweep.fit_tmin) == {"slope", "intercept", "r2"}
    expected = np.polyfit(np.log([2.0, 8.0, 24.0]), t_min, 1)
    np.testing.assert_allclose([sweep.fit_tmin["slope"], sweep.fit_tmin["intercept"]], expected, rtol=1e-10)
    assert 0.0 <= sweep.fit_tmin["r2"] <= 1.0 and set(sweep.fit_w2min) == {"slope", "intercept", "r2"}
    for s in sweep.summaries:
        np.testing.assert_allclose(s["ratio"], s["w2_min"] / math.sqrt(math.log(s["beta"] + 1) / s["beta"]), rtol=1e-14)
        assert s["under_resolved"] == ""  # 300 ≥ 10·24
    assert [Path(f).name for f in sweep.files] == ["beta_2.h5", "beta_8.h5", "beta_24.h5"]
    stored = load(sweep.files[1])
    assert stored.config["model"]["beta"] == 8.0
    np.testing.assert_allclose(stored.diagnostics["w2_target"], sweep.curves[1]["w2_target"], rtol=0)
    flagged = sweep_beta(_config("init.n=30", "solver.t_final=1", "solver.dt=0.1", "solver.save_every=0.5"), "2,4")
    assert flagged.summaries[1]["under_resolved"].startswith("under-resolved: n = 30 < 10·β^((d-1)/2) = 40")
    for bad in ("4", "4,4", "a,b", "0,4"):
        with pytest.raises(ConfigError) as info:
            sweep_beta(cfg, bad)
        assert info.value.key == "--sweep-beta"


# ----------------------------------------------------------------------------- cost


def test_bench_quick_rows() -> None:
    bench = bench_concentration(quick=True, repeat=1)
    assert [row["name"] for row in bench["rows"]] == ["w2_target", "eigenspace_distance", "w2_exact_clouds", "tracking_share"]
    assert bench["rows"][0]["n"] == 10_000 and bench["rows"][2]["n"] == 200
    np.testing.assert_allclose(bench["rows"][0]["value"], math.sqrt(math.pi - 2), rtol=0.03)
    assert 0 < bench["tracking"]["share"] < 1


#: W2(ρ_t, Π♯ρ₀) at β = 1024 on 205 888 quasi-uniform particles (RK4, dt = 0.1, model.tolerance = 1e-8; README,
#: the β family): the 102 944-particle run (dt = 0.05) agrees with these to 3e-4 relative at every t here
BETA_1024_W2 = {2.0: 0.70134, 4.0: 0.43461, 6.0: 0.26381, 8.0: 0.15663}


@pytest.mark.slow
def test_beta_1024_approach_matches_the_large_runs() -> None:
    # the β = 1024 study, small: 12 868 particles on the harmonic and local kernels follow the approach to
    # Π♯ρ₀ of the 206k-particle run to 0.5 % (measured: 2.4e-3 at most), far below its 1 − W2/W2(0) ≈ 85 %
    import meanfield as mf

    run = mf.simulate(str(ROOT / "data" / "concentration.toml"), beta=1024.0, tolerance=1e-8, t_final=8.0, save_every=2.0,
                      **{"init.n": 12868, "solver.dt": 0.1})
    w2 = dict(zip(np.round(run.t, 6), run.diagnostics["w2_target"]))
    np.testing.assert_allclose([w2[t] for t in BETA_1024_W2], list(BETA_1024_W2.values()), rtol=5e-3)


@pytest.mark.slow
def test_beta_1024_grid_follows_the_particles() -> None:
    # the other discretisation: the second-order grid on 6566 cells (spacing 1.4 β^(-1/2)) follows the same
    # approach to 1 % up to t = 6 (measured: 1.8e-4, 6.3e-4, 4.4e-3 at t = 2, 4, 6; 2.1e-2 at t = 8, where
    # the mesh no longer resolves the clusters)
    import meanfield as mf

    run = mf.simulate(str(ROOT / "data" / "concentration.toml"), beta=1024.0, tolerance=1e-8, t_final=6.0, save_every=2.0,
                      **{"solver.kind": "grid", "solver.method": "ssprk3", "init.kind": "uniform", "grid.cells": 6566})
    w2 = dict(zip(np.round(run.t, 6), run.diagnostics["w2_target"]))
    times = [2.0, 4.0, 6.0]
    np.testing.assert_allclose([w2[t] for t in times], [BETA_1024_W2[t] for t in times], rtol=1e-2)


@pytest.mark.slow
def test_tracking_time_is_a_part_of_the_default_experiment() -> None:
    # what is measured, not how fast: the tracker ran once per frame of the 600-token run, and the
    # share is its time over the loop's (the timings themselves are in bench)
    share = tracking_share()
    assert share["frames"] == 121 and share["n"] == 600
    assert np.isfinite(share["tracking_seconds"]) and np.isfinite(share["simulation_seconds"])
    np.testing.assert_allclose(share["share"], share["tracking_seconds"] / share["simulation_seconds"], rtol=1e-15)


# ----------------------------------------------------------------------------- CLI


@pytest.fixture
def run_cli():
    return cli.main


def _write_config(path: Path, cfg: dict) -> Path:
    def value(v):
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, bool):
            return "true" if v else "false"
        return repr(v)

    lines = []
    for section, keys in cfg.items():
        if section == "model":
            lines.append("[model]")
            lines += [f"{k} = {value(v)}" for k, v in keys.items() if k != "heads"]
            for head in keys.get("heads", []):
                lines.append("[[model.heads]]")
                lines += [f"{k} = {value(v)}" for k, v in head.items()]
        else:
            lines.append(f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_analyse_run(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    small = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    small["init"]["n"] = 200
    small["solver"].update(t_final=3.0, dt=0.1, save_every=0.25)
    config = _write_config(tmp_path / "c.toml", small)
    tracked = tmp_path / "tracked.h5"
    assert run_cli(["simulate", str(config), "-o", str(tracked), "--quiet"]) == 0
    plain = tmp_path / "plain.h5"
    assert run_cli(["simulate", str(config), "-o", str(plain), "--quiet", "--set", "track.concentration=false"]) == 0
    capsys.readouterr()
    assert run_cli(["concentration", str(tracked), "--csv", str(tmp_path / "a.csv"), "--plot", str(tmp_path / "a.png")]) == 0
    out = capsys.readouterr()
    assert "t_min" in out.out and "W2_min" in out.out and "metastable window" in out.out
    assert "under-resolved" not in out.err  # 200 ≥ 10·16
    assert "is missing" not in out.out  # (a completed run)
    assert run_cli(["concentration", str(plain), "--csv", str(tmp_path / "b.csv")]) == 0
    a = np.genfromtxt(tmp_path / "a.csv", delimiter=",", names=True)
    b = np.genfromtxt(tmp_path / "b.csv", delimiter=",", names=True)
    np.testing.assert_allclose(b["w2_target"], a["w2_target"], rtol=1e-8)  # recomputed from frames = tracked
    assert (tmp_path / "a.png").stat().st_size > 0


def test_an_interrupted_run_says_its_status_and_the_time_it_has_no_frame_for(tmp_path: Path, run_cli, capsys) -> None:
    # an interrupted sweep run (t = 8.6 of 12) had printed its table, t_min and window as a whole curve's: a minimum or
    # a window past its last frame would have been cut off unsaid
    import meanfield as mf

    def interrupt(t, x):
        if t >= 0.5:
            raise KeyboardInterrupt

    out = tmp_path / "cut.h5"
    with pytest.raises(KeyboardInterrupt):
        mf.simulate(DEFAULT_CONCENTRATION_CONFIG, out=out, trackers=[interrupt], t_final=1.0, save_every=0.25,
                    **{"init.n": 40})
    run = load(out)
    assert run.status == "interrupted" and run.t[-1] == 0.25
    note = "the run is interrupted: its last frame is at t = 0.25 of t_final = 1, so t in (0.25, 1] is missing"
    assert note in run.concentration().text()
    assert run_cli(["concentration", str(out)]) == 0
    assert f"note: {note}" in capsys.readouterr().out


def test_cli_under_resolution_warning(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    cfg = load_config(DEFAULT_CONCENTRATION_CONFIG, ["init.n=40", "solver.t_final=0.5", "solver.save_every=0.25"])
    simulate_config(cfg, tmp_path / "r.h5", quiet=True)
    assert run_cli(["concentration", str(tmp_path / "r.h5")]) == 0
    out = capsys.readouterr()
    assert out.err.count("under-resolved: n = 40 < 10·β^((d-1)/2) = 160") == 1  # once, on stderr only
    assert "under-resolved" not in out.out


def test_the_python_analysis_shows_its_warnings(tmp_path: Path) -> None:
    # run.concentration() had left "under-resolved" to the CLI: print(c) and the notebook's repr showed W2_min as a
    # fine number, and no warning was raised
    from meanfield.errors import MeanfieldWarning

    cfg = load_config(DEFAULT_CONCENTRATION_CONFIG, ["init.n=40", "solver.t_final=0.5", "solver.save_every=0.25"])
    simulate_config(cfg, tmp_path / "r.h5", quiet=True)
    with pytest.warns(MeanfieldWarning, match=r"^under-resolved: n = 40 < 10·β\^\(\(d-1\)/2\) = 160"):
        c = load(tmp_path / "r.h5").concentration()
    assert "warning: under-resolved: n = 40" in c.text() and "warning: under-resolved" in str(c)
    assert "under-resolved" not in c.text(cli=True)


def test_cli_exit_codes(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    bad = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    bad["model"]["heads"] = [{"Q": "identity", "K": "identity", "V": [[1.0, 0.5, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.25]]}]
    bad["init"]["n"] = 30
    bad["solver"].update(t_final=0.5, save_every=0.25)
    bad["track"]["concentration"] = False
    run = tmp_path / "bad.h5"
    simulate_config(load_config(bad), run, quiet=True)
    capsys.readouterr()
    assert run_cli(["concentration", str(run)]) == 2
    err = capsys.readouterr().err
    assert "model.heads" in err and "‖S−Sᵀ‖/‖S‖ = " in err and "eigenvalues of" in err and "--force" in err
    assert run_cli(["concentration", str(run), "--force"]) == 0
    assert "warning: Assumption 1 of arXiv 2605.10931 fails" in capsys.readouterr().err
    config = _write_config(tmp_path / "bad.toml", bad)
    assert run_cli(["concentration", "--sweep-beta", "2,4", str(config), "--quiet"]) == 2
    assert "Assumption 1" in capsys.readouterr().err
    assert run_cli(["concentration", "--sweep-beta", "2,4", str(config), "--quiet", "--force"]) == 0
    good = tmp_path / "good.toml"
    good_cfg = copy.deepcopy(bad)
    good_cfg["model"]["heads"] = DEFAULT_CONCENTRATION_CONFIG["model"]["heads"]
    _write_config(good, good_cfg)
    for argv, key in (
        (["concentration", str(run), "--threshold", "-1"], "--threshold"),
        (["concentration", str(run), "--out", str(tmp_path)], "--out"),
        (["concentration", str(tmp_path / "missing.h5")], "OUT.h5"),
        (["concentration", str(good)], "OUT.h5"),
        (["concentration", "--sweep-beta", "4", str(good)], "--sweep-beta"),
        (["concentration", "--sweep-beta", "x,y", str(good)], "--sweep-beta"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--set", "model.nope=1"], "model.nope"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "-0.5"], "--spacing"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "2:0.5,4:x"], "--spacing"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "2:0.5,4:0"], "--spacing"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "2:0.5"], "β = 4"),  # every β needs its constant
        # a β twice (the last had won), one the sweep does not run, NaN: had been taken
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "2:0.5,2:3,4:3"], "β = 2 is given twice"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "2:3,4:3,99:0.01"], "which --sweep-beta does not run"),
        (["concentration", "--sweep-beta", "2,4", str(good), "--spacing", "nan:3,2:3,4:3"], "every β must be a finite number"),
        (["concentration", str(run), "--spacing", "0.5"], "--spacing"),
    ):
        assert run_cli(argv) == 2, argv
        assert key in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        run_cli(["concentration", "--solver", "spectral", str(good)])
    assert info.value.code == 2


def test_cli_sweep_writes_table_csv_plot(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    cfg = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    cfg["init"]["n"] = 60
    cfg["solver"].update(t_final=1.0, dt=0.1, save_every=0.25)
    config = _write_config(tmp_path / "c.toml", cfg)
    argv = ["concentration", "--sweep-beta", "2,4,8", str(config), "--csv", str(tmp_path / "s.csv"),
            "--plot", str(tmp_path / "s.png"), "--out", str(tmp_path / "runs"), "--quiet"]
    assert run_cli(argv) == 0
    out = capsys.readouterr()
    assert "fit t_min" in out.out and "fit log W2_min" in out.out
    assert "(grid solver)" in out.out and "grid solver" in out.err  # on S² the family runs on the grid by default
    rows = np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    np.testing.assert_allclose(rows["beta"], [2.0, 4.0, 8.0], rtol=0)
    assert {"open_start", "open_end"} <= set(rows.dtype.names)  # an open window's t_b is t_final, not a crossing
    assert (tmp_path / "s.png").stat().st_size > 0
    names = ["beta_2.h5", "beta_2_coarse.h5", "beta_4.h5", "beta_4_coarse.h5", "beta_8.h5", "beta_8_coarse.h5", "curves.csv",
             "curves_coarse.csv"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == names
    # the mesh follows β (N = 4πβ/0.5², at least 200) and each β ran on N and 4N cells
    np.testing.assert_array_equal(rows["n_coarse"], [200, 202, 403])
    np.testing.assert_array_equal(rows["n"], [800, 808, 1612])
    assert "ΔW2_min" in out.out and "N = 4πβ/0.5²" in out.err
    assert load(tmp_path / "runs" / "beta_8_coarse.h5").config["grid"]["cells"] == 403


def test_sweep_size_follows_the_kernel_width() -> None:
    for beta in (4.0, 64.0, 1024.0):
        n = sweep_size(beta)
        assert math.sqrt(4 * math.pi / n) <= SWEEP_SPACING / math.sqrt(beta) < math.sqrt(4 * math.pi / (n - 1))
    assert sweep_size(1.0) == 200 and sweep_size(1024.0, spacing=1.0) == 12868
    with pytest.raises(ConfigError):
        sweep_size(4.0, spacing=0.0)


def test_spacing_per_beta_sets_each_size(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    assert parse_spacing("0.25") == 0.25 and parse_spacing(0.5) == 0.5
    assert parse_spacing("4:0.25, 16:0.5") == {4.0: 0.25, 16.0: 0.5}
    cfg = _config("init.kind=fibonacci", "solver.t_final=1", "solver.dt=0.1", "solver.save_every=0.25")
    constants = {2.0: 1.0, 6.0: 0.5}
    sweep = sweep_beta(cfg, [6.0, 2.0], spacing=constants)
    assert [s["n"] for s in sweep.summaries] == [200, math.ceil(4 * math.pi * 6.0 / 0.25)] == [200, 302]
    assert [s["spacing"] for s in sweep.summaries] == [math.sqrt(4 * math.pi * 2.0 / 200), 0.5]  # β = 2: N raised to 200
    with pytest.raises(ConfigError, match="β = 6") as info:  # before any run
        sweep_beta(cfg, [2.0, 6.0], spacing={2.0: 1.0})
    assert info.value.key == "--spacing"
    # the CLI: one constant per β, the grid by default on S², the constant in the CSV
    raw = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    raw["solver"].update(t_final=1.0, dt=0.1, save_every=0.25)
    config = _write_config(tmp_path / "c.toml", raw)
    argv = ["concentration", "--sweep-beta", "2,6", str(config), "--spacing", "2:1,6:0.5", "--single",
            "--csv", str(tmp_path / "s.csv"), "--quiet"]
    assert run_cli(argv) == 0
    assert "C = 1 at β = 2, C = 0.5 at β = 6" in capsys.readouterr().err
    rows = np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    np.testing.assert_array_equal(rows["n"], [200, 302])
    np.testing.assert_allclose(rows["spacing"], [math.sqrt(4 * math.pi * 2.0 / 200), 0.5], rtol=1e-9)


def test_refined_sweep_reports_the_change_between_resolutions(tmp_path: Path) -> None:
    cfg = _config("init.kind=fibonacci", "solver.t_final=3", "solver.dt=0.1", "solver.save_every=0.25")
    sweep = sweep_beta(cfg, [2.0, 6.0], size=100, refine=True, out_dir=tmp_path)
    assert [Path(f).name for f in sweep.files] == ["beta_2_coarse.h5", "beta_2.h5", "beta_6_coarse.h5", "beta_6.h5"]
    for s, coarse_file, fine_file in zip(sweep.summaries, sweep.files[::2], sweep.files[1::2]):
        coarse, fine = load(coarse_file), load(fine_file)
        assert (coarse.config["init"]["n"], fine.config["init"]["n"]) == (100, 400) == (s["n_coarse"], s["n"])
        # recomputed from the stored curves, independently of the sweep's bookkeeping
        a = concentration_summary(coarse.t, coarse.diagnostics["w2_target"])
        b = concentration_summary(fine.t, fine.diagnostics["w2_target"])
        np.testing.assert_allclose([s["w2_min"], s["t_min"]], [b["w2_min"], b["t_min"]], rtol=0)
        np.testing.assert_allclose(s["dw2_min"], (b["w2_min"] - a["w2_min"]) / b["w2_min"], rtol=1e-14)
        np.testing.assert_allclose(s["dt_min"], b["t_min"] - a["t_min"], atol=1e-14)
    assert "ΔW2_min" in sweep.table()
    with pytest.raises(ConfigError) as info:
        sweep_beta(cfg, [2.0, 6.0], size=5)
    assert info.value.key == "--cells"


def test_refinement_sets_the_finer_size(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    raw = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    raw["solver"].update(t_final=2.0, dt=0.1, save_every=0.25)
    config = _write_config(tmp_path / "c.toml", raw)
    argv = ["concentration", "--sweep-beta", "2,6", str(config), "--solver", "particle", "--cells", "100",
            "--refinement", "2", "--out", str(tmp_path / "runs"), "--csv", str(tmp_path / "s.csv"), "--quiet"]
    assert run_cli(argv) == 0
    assert "2× the coarser's" in capsys.readouterr().out
    rows = np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    np.testing.assert_array_equal(rows["n_coarse"], [100, 100])
    np.testing.assert_array_equal(rows["n"], [200, 200])
    for beta, row in zip((2, 6), rows):  # the stored runs have those sizes, and the columns are their curves'
        coarse, fine = load(tmp_path / "runs" / f"beta_{beta}_coarse.h5"), load(tmp_path / "runs" / f"beta_{beta}.h5")
        assert (coarse.config["init"]["n"], fine.config["init"]["n"]) == (100, 200)
        a = concentration_summary(coarse.t, coarse.diagnostics["w2_target"])
        b = concentration_summary(fine.t, fine.diagnostics["w2_target"])
        np.testing.assert_allclose(row["dw2_min"], (b["w2_min"] - a["w2_min"]) / b["w2_min"], rtol=1e-8)
    for bad in (["--refinement", "1"], ["--refinement", "2", "--single"]):
        assert run_cli(["concentration", "--sweep-beta", "2,6", str(config), "--quiet", *bad]) == 2
        assert "--refinement" in capsys.readouterr().err
    assert run_cli(["concentration", str(config), "--refinement", "2"]) == 2
    assert "--refinement: only applies with --sweep-beta" in capsys.readouterr().err
    with pytest.raises(ConfigError) as info:
        sweep_beta(_config("init.n=20"), [2.0, 4.0], refine=True, refinement=1)
    assert info.value.key == "--refinement"


def test_sweep_grid_needs_the_grid_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "meanfield.solvers.grid" else real(name, *a))
    with pytest.raises(ConfigError, match="grid solver") as info:
        sweep_beta(_config("init.n=20"), [2.0, 4.0], solver="grid")
    assert info.value.key == "--solver"
    with pytest.raises(ConfigError) as info:
        sweep_beta(_config("init.n=20"), [2.0, 4.0], solver="spectral")
    assert info.value.key == "--solver"


def test_tracker_on_a_second_order_grid_splits_the_target_by_the_reconstructed_density() -> None:
    """Uniform cell masses: Π♯ρ₀ = ½δ_e + ½δ_{−e} to 1e-10, where the quadrature nodes' sides give 1/2 ± 1e-4,
    and W2(ρ₀, Π♯ρ₀) is √(π − 2) to the quadrature's accuracy."""
    from meanfield.geometry.mesh import fibonacci_mesh, initial_mass
    from meanfield.geometry.reconstruction import reconstruction_of

    msh = fibonacci_mesh(3000)
    mass = initial_mass(msh, "uniform")
    tracker = tracker_from_head(np.eye(3), np.array(K_DEFAULT), np.array(V_DEFAULT), mass, points=msh.centroids, mesh=msh)
    np.testing.assert_allclose(tracker.target.weights, [0.5, 0.5], rtol=0, atol=1e-10)
    nodes, weights = reconstruction_of(msh).quadrature(mass)
    e = tracker.target.atoms[0]
    assert abs(weights[nodes @ e > 0].sum() - 0.5) > 1e-6  # what the split by nodes would have given
    np.testing.assert_allclose(tracker(0.0, mass)["w2_target"], math.sqrt(math.pi - 2), rtol=1e-5)


def test_a_graded_sweep_reports_the_cells_of_its_meshes(tmp_path: Path) -> None:
    """On a graded mesh the sweep's ``cells`` are the stored mesh's, not ``grid.cells``."""
    poles = [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]
    cfg = _config("solver.kind=grid", "solver.method=ssprk3", "init.kind=uniform", "solver.t_final=0.4",
                  "solver.save_every=0.2", "grid.family=graded", f"grid.refine_centres={poles}",
                  "grid.refine_radius=0.3", "grid.refine_factor=3")
    sweep = sweep_beta(cfg, [2.0, 4.0], size=300, refine=True, refinement=2, out_dir=tmp_path)
    for s, coarse_file, fine_file in zip(sweep.summaries, sweep.files[::2], sweep.files[1::2]):
        coarse, fine = load(coarse_file), load(fine_file)
        assert (s["n_coarse"], s["n"]) == (300, 600)
        assert (s["cells_coarse"], s["cells"]) == (coarse.mass.shape[1], fine.mass.shape[1])
        assert coarse.mass.shape[1] > 300 and fine.mass.shape[1] > 600  # the caps add cells
    table = sweep.table()
    assert "cells" in table.splitlines()[0] and f"{sweep.summaries[0]['cells']:7d}" in table


def _first_unresolved_time(run) -> float:
    """The first frame where a cluster's r.m.s. radius is below √(area) of the cell nearest its centre (angles by atan2)."""
    x, areas = run.points, run.areas
    for k in range(run.frames):
        mass = run.frame(k)
        for side in (x[:, 0] > 0, x[:, 0] < 0):
            m, p = mass[side], x[side]
            centre = m @ p
            centre = centre / np.linalg.norm(centre)
            theta = np.arctan2(np.linalg.norm(np.cross(p, centre), axis=1), p @ centre)
            if math.sqrt(m @ theta**2 / m.sum()) < math.sqrt(areas[side][np.argmin(theta)]):
                return float(run.t[k])
    return math.nan


def test_a_grid_sweep_flags_cores_below_the_cells_before_t_min(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    """On 300 cells the β = 256 clusters fall onto single cells while W2 still falls; β = 16 keeps them until after t_min."""
    raw = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    raw["solver"].update(kind="grid", method="ssprk3", t_final=10.0, save_every=0.2)
    raw["init"] = {"kind": "uniform"}
    config = _write_config(tmp_path / "c.toml", raw)
    argv = ["concentration", "--sweep-beta", "16,256", str(config), "--cells", "300", "--single", "--quiet",
            "--csv", str(tmp_path / "s.csv"), "--out", str(tmp_path / "runs")]
    assert run_cli(argv) == 0
    out = capsys.readouterr()
    rows = np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    low, high = (load(tmp_path / "runs" / f"beta_{b}.h5") for b in (16, 256))
    t_low, t_high = _first_unresolved_time(low), _first_unresolved_time(high)
    np.testing.assert_allclose(rows["t_cores_unresolved"], [t_low, t_high], rtol=1e-9)
    assert t_low > rows["t_min"][0] and t_high <= rows["t_min"][1]  # resolved at β = 16's minimum, not at 256's
    # over the frames before the cores fall, the least W2 of the β = 256 run
    t, w = high.t, high.diagnostics["w2_target"]
    before = t < t_high
    k = int(np.argmin(w[before]))
    np.testing.assert_allclose([rows["w2_min_resolved"][1], rows["t_min_resolved"][1]], [w[before][k], t[before][k]], rtol=1e-9)  # (the CSV's 10 digits)
    assert str(rows["resolved_min_at_end"][1]) == str(k == before.sum() - 1)  # (a column of True/False and nan)
    assert np.isnan(rows["w2_min_resolved"][0])
    lines = out.out.splitlines()
    assert lines[2].split()[-1] == "yes" and lines[3].split()[-1] == "no"  # the table's resolved column
    assert any(line.startswith("β = 256: the cores fall below the cells at t = ") for line in lines)
    assert "warning: β = 256: from t = " in out.err and "no longer resolves the core" in out.err
    assert "warning: β = 16" not in out.err
    # the analysis of the stored run says the same, under its table
    analysis = run_concentration(high)
    assert any(note.startswith(f"the cores fall below the cells at t = {t_high:.4g}") for note in analysis.notes)
    assert any("no longer resolves the core" in doubt for doubt in analysis.warnings)
    # in memory (no files) the sweep keeps the frames for the check and finds the same times
    sweep = sweep_beta(load_config(config), [16.0, 256.0], size=300)
    np.testing.assert_allclose([s["t_cores_unresolved"] for s in sweep.summaries], [t_low, t_high], rtol=0, atol=1e-12)
    assert sweep.under_resolved and not sweep.summaries[0]["cores"] and sweep.summaries[1]["cores"]
    fig = plot_sweep(sweep)  # the mesh's part of the β = 256 curve is dotted, its minimum hollow
    curves = fig.axes[0].get_lines()
    dotted = [line for line in curves if line.get_linestyle() == ":"]
    assert len(dotted) == 1 and dotted[0].get_xdata().min() == pytest.approx(t_high)
    assert "cores below the cells" in " ".join(text.get_text() for text in fig.axes[1].get_legend().get_texts())


def test_the_core_check_of_an_untracked_grid_run_reads_the_recomputed_curve(tmp_path: Path) -> None:
    """A grid run without ``[track] concentration`` is analysed from its frames; the core check uses that curve."""
    settings = ["solver.kind=grid", "solver.method=ssprk3", "init.kind=uniform", "grid.cells=300", "model.beta=256",
                "solver.t_final=10", "solver.save_every=0.2"]
    tracked = simulate_config(_config(*settings), tmp_path / "tracked.h5", quiet=True)
    simulate_config(_config(*settings, "track.concentration=false"), tmp_path / "untracked.h5", quiet=True)
    untracked = load(tmp_path / "untracked.h5")
    assert "w2_target" not in untracked.diagnostics
    analysis, reference = run_concentration(untracked), run_concentration(load(tmp_path / "tracked.h5"))
    assert len(analysis.notes) == 1 and analysis.notes == reference.notes  # the least W2 while the cores are resolved
    np.testing.assert_allclose(analysis.curves["w2_target"], tracked.diagnostics["w2_target"], rtol=1e-12)


def test_a_grid_whose_projection_has_many_atoms_is_measured_at_its_cell_centres() -> None:
    # identity head: Π♯ρ₀ = ρ₀, as many atoms as quadrature nodes; W2 between two quadratures had paired every node
    # with every node (500 cells: two minutes and 3 GB a frame). The cells at their centres measure it instead
    from meanfield.analysis import concentration
    from meanfield.analysis.transport import w2
    from meanfield.geometry.mesh import fibonacci_mesh, initial_mass

    mesh = fibonacci_mesh(300)
    mass0 = initial_mass(mesh, "vmf", kappa=2.0)
    mass1 = initial_mass(mesh, "vmf", kappa=3.0)
    eye = np.eye(3)
    tracker = tracker_from_head(eye, eye, eye, mass0, points=mesh.points, mesh=mesh, policy="skip")
    assert tracker.mesh is None and tracker.target.atoms.shape[0] == 300 > concentration.QUADRATURE_MAX_ATOMS
    assert tracker(0.0, mass0)["w2_target"] < 1e-7
    expected = w2(mesh.points, mesh.points, mass1 / mass1.sum(), mass0 / mass0.sum())
    np.testing.assert_allclose(tracker(0.0, mass1)["w2_target"], expected, rtol=1e-10)
    two = tracker_from_head(eye, np.array(K_DEFAULT), np.array(V_DEFAULT), mass0, points=mesh.points, mesh=mesh)
    assert two.mesh is mesh and two.target.atoms.shape[0] == 2  # two atoms: the quadrature of the reconstruction


@pytest.mark.parametrize("norm", ["pre", "peri"])
def test_concentration_of_a_run_whose_tokens_have_radii_is_refused(norm, tmp_path, capsys, run_cli):
    # the config refuses track.concentration for these; the analysis of a stored run had ended in a traceback
    out = tmp_path / "r.h5"
    assert run_cli(["simulate", str(ROOT / "data/concentration.toml"), "-o", str(out), "--quiet", "--set", f"model.norm=\"{norm}\"",
                "--set", "solver.t_final=0.5", "--set", "track.concentration=false", "--set", "init.n=32"]) == 0
    capsys.readouterr()
    assert run_cli(["concentration", str(out)]) == 2
    err = capsys.readouterr().err
    assert "model.norm" in err and "Traceback" not in err


def test_a_grid_jko_run_gets_the_same_w2_tracked_and_recomputed(tmp_path: Path) -> None:
    # the tracker took cell atoms (the JKO grid has no reconstruction), the recomputation the reconstructed density
    # of grid.order = 2: 0.5826 against 0.5770 at t = 2 for the same frames
    from meanfield.analysis.concentration import concentration_curves
    from meanfield.run import load

    raw = {"model": {"d": 3, "beta": 4.0, "attention": "pooled",
                     "heads": [{"Q": [[1, 0, 0], [0, 0.8, 0], [0, 0, 0.6]], "K": [[1, 0, 0], [0, 0.8, 0], [0, 0, 0.6]], "V": "aligned"}]},
           "solver": {"kind": "jko", "variant": "grid", "t_final": 1.0, "save_every": 0.5}, "grid": {"cells": 300},
           "init": {"kind": "vmf", "kappa": 2.0, "mean": [0.3, 0.2, 0.9]}}
    curves = []
    for tracked in (True, False):
        cfg = copy.deepcopy(raw) | {"track": {"concentration": tracked}}
        simulate_config(load_config(cfg), tmp_path / f"{tracked}.h5", quiet=True)
        run = load(tmp_path / f"{tracked}.h5")
        assert ("w2_target" in run.diagnostics) == tracked
        curves.append(concentration_curves(run)["w2_target"])
    np.testing.assert_allclose(curves[1], curves[0], rtol=1e-12, atol=0)


def test_a_sweep_is_resumed_not_replaced_and_its_betas_and_tables_cannot_collide(tmp_path: Path, capsys) -> None:
    # an interrupted sweep had advertised a --resume the command did not have, and run again it replaced the
    # finished runs without a word; β = 4 twice shared one file; --csv DIR/curves.csv was overwritten by the curves
    sweep = ["concentration", "--sweep-beta", "4,16", str(ROOT / "data" / "concentration.toml"), "--solver", "particle",
             "--cells", "100", "--single", "--quiet", "--out", str(tmp_path / "runs")]
    assert cli.main([*sweep, "--set", "solver.t_final=0.5"]) == 0
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("beta_*.h5")}
    assert sorted(stamps) == ["beta_16.h5", "beta_4.h5"]
    capsys.readouterr()
    assert cli.main([*sweep, "--set", "solver.t_final=1"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "beta_4.h5, beta_16.h5 of an earlier sweep: --resume continues it" in err
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("beta_*.h5")} == stamps
    assert cli.main([*sweep, "--set", "solver.t_final=1", "--resume", "--csv", str(tmp_path / "resumed.csv")]) == 0
    assert f"wrote 2 runs and {tmp_path / 'runs' / 'curves.csv'}" in capsys.readouterr().out  # extended in place
    assert cli.main([*sweep, "--set", "solver.t_final=1", "--resume"]) == 0  # every run finished: read, not written
    assert f"read 2 finished runs (nothing to resume) and wrote {tmp_path / 'runs' / 'curves.csv'}" in capsys.readouterr().out
    fresh = [*sweep[:-1], str(tmp_path / "fresh")]
    assert cli.main([*fresh, "--set", "solver.t_final=1", "--csv", str(tmp_path / "fresh.csv")]) == 0
    resumed, straight = (np.genfromtxt(tmp_path / f"{name}.csv", delimiter=",", names=True) for name in ("resumed", "fresh"))
    for column in ("t_min", "w2_min", "t_a", "t_b"):  # extended to t = 1 in place: the straight run's numbers
        np.testing.assert_array_equal(resumed[column], straight[column])
    capsys.readouterr()
    assert cli.main([*sweep[:2], "4,4,16", *sweep[3:-2]]) == 2
    assert "β = 4.0 is given twice" in capsys.readouterr().err
    assert cli.main([*sweep, "--resume", "--csv", str(tmp_path / "runs" / "curves.csv")]) == 2
    assert "--csv" in capsys.readouterr().err


def test_a_sweep_that_cannot_depend_on_beta_is_refused_or_said(tmp_path: Path, capsys) -> None:
    # the zero-temperature solver (β-free) had fitted "t_min = 1.9e-16·log β + 4 (R² = 1.0000)"; a head with one
    # eigenvalue of S gave W2_min = 3e-17 at every β with R² = 1 and no word
    from meanfield.analysis.concentration import linear_fit

    base = ["concentration", "--sweep-beta", "4,16", str(ROOT / "data" / "concentration.toml"), "--cells", "60", "--single",
            "--quiet", "--set", "solver.t_final=0.4"]
    assert cli.main([*base, "--set", 'solver.kind="zero-temperature"']) == 2
    assert "solver.kind: the zero-temperature solver is the limit β → ∞" in capsys.readouterr().err
    trivial = 'model.heads=[{Q="identity",K="identity",V="identity"}]'
    assert cli.main([*base, "--solver", "particle", "--set", trivial]) == 0
    captured = capsys.readouterr()
    assert "warning: the analysis is trivial for this head" in captured.err and "(no R²: two βs, or the same value at every β)" in captured.out
    assert math.isnan(linear_fit([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])["r2"])
    np.testing.assert_allclose(linear_fit([1.0, 2.0, 3.0], [1.0, 3.0, 5.0])["r2"], 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(linear_fit([1.0, 2.0, 3.0], [1.0, 3.0, 4.0])["r2"], 1 - (1 / 6) / (14 / 3), rtol=1e-12)
    assert math.isnan(linear_fit([1.0, 2.0], [1.0, 7.0])["r2"])  # two points: R² = 1 had said nothing


def test_an_under_resolved_coarse_run_is_said_for_the_convergence_column(capsys) -> None:
    # the coarse n = 100 < 10β = 160 had gone into ΔW2_min with resolved = yes and no warning
    base = ["concentration", "--sweep-beta", "4,16", str(ROOT / "data" / "concentration.toml"), "--solver", "particle",
            "--cells", "100", "--refinement", "2", "--quiet", "--set", "solver.t_final=0.4"]
    assert cli.main(base) == 0
    assert "β = 16: the coarser run of the convergence column (n = 100): under-resolved" in capsys.readouterr().err


def test_the_spacing_column_gives_the_spacing_a_run_had_where_its_size_was_raised(tmp_path: Path) -> None:
    # at β = 4 and C = 1, N = 4πβ/C² ≈ 51 is raised to 200: the column had said C = 1 for a run at C ≈ 0.50
    assert cli.main(["concentration", "--sweep-beta", "4,16", str(ROOT / "data" / "concentration.toml"), "--solver",
                     "particle", "--spacing", "1.0", "--single", "--quiet", "--set", "solver.t_final=0.4",
                     "--csv", str(tmp_path / "s.csv")]) == 0
    table = np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(table["n"], [200, math.ceil(4 * math.pi * 16)])
    np.testing.assert_allclose(table["spacing"], [math.sqrt(4 * math.pi * 4 / 200), 1.0], rtol=1e-9)


def test_an_estimated_w2_is_named_as_such_in_the_analysis_and_the_sweep() -> None:
    # a sliced W2_min of 0.398 had been printed as W2_min (the exact value is 0.347), and fitted as W2 in the sweeps
    cfg = _config("init.n=60", "solver.t_final=1", "solver.dt=0.1", "solver.save_every=0.5", 'track.w2_method="sliced"')
    run = simulate_config(cfg)
    doubts = run.concentration().warnings
    assert any("track.w2_method = 'sliced'" in d and "not the exact distance" in d for d in doubts)
    exact = simulate_config(_config("init.n=60", "solver.t_final=1", "solver.dt=0.1", "solver.save_every=0.5"))
    assert not any("w2_method" in d for d in exact.concentration().warnings)
    with pytest.warns(RuntimeWarning, match="track.w2_method = 'sliced': the curves, t_min, W2_min and the fits"):
        sweep_beta(cfg, [2.0, 4.0], solver="particle", quiet=True)


def test_a_grid_is_judged_by_its_cells_and_a_coarser_run_with_unresolved_cores_is_said() -> None:
    # a grid run had been judged by the particles' 10·β (and called "particles"), and a refined sweep had said
    # "resolved = yes" where its coarser run's cores fell below its cells before its t_min
    from meanfield.analysis.projection import grid_resolution_warning

    assert grid_resolution_warning(202, 16.0) is None and "about 202 do" in grid_resolution_warning(170, 16.0)
    coarse = simulate_config(_config('solver.kind="grid"', "grid.cells=170", "solver.t_final=0.5", "solver.save_every=0.25"))
    assert any("N = 170 cells" in w and "particles" not in w for w in coarse.concentration().warnings)
    sweep = sweep_beta(_config("solver.t_final=6"), [2.0, 4.0], solver="grid", size=48, refine=True, quiet=True)
    beta2 = sweep.summaries[0]
    assert "the coarser run of the convergence column (n = 48): its cluster cores fall below its cells" in beta2["under_resolved"]
    assert sweep.table().splitlines()[1].endswith("no")
    assert "necessary, not sufficient" in sweep.table()


def test_a_frame_off_the_sphere_is_named_not_a_traceback(tmp_path: Path, run_cli, capsys: pytest.CaptureFixture) -> None:
    # a frame altered on disk had raised "ValueError: x is not on the unit sphere" (exit 1), its checksum warning held back
    import h5py

    out = tmp_path / "run.h5"
    simulate_config(_config("init.n=40", "solver.t_final=1", "solver.save_every=0.5", "track.concentration=false"), out)
    with h5py.File(out, "r+") as f:
        f["x"][-1, 0, 0] = 0.123456
    capsys.readouterr()
    assert run_cli(["concentration", str(out)]) == 2
    err = capsys.readouterr().err
    assert "frame 2 (t = 1) is not a measure W2 can read" in err and "does not match the checksum" in err and "Traceback" not in err


def test_the_analysis_refuses_descent_whose_tokens_leave_the_dominant_eigenspace(tmp_path, run_cli):
    # under descent W2 had been measured against the top eigenspace of S, which the tokens leave: t_min = 0 and a
    # "metastable window" over the whole run, without a word
    import meanfield as mf

    cfg = str(ROOT / "data" / "concentration.toml")
    descent = {"model.direction": "descent", "solver.kind": "zero-temperature", "solver.t_final": 1.0, "solver.save_every": 0.5}
    with pytest.raises(ConfigError, match="^model.direction: W2 to Π♯ρ₀ .* ascent flow"):
        mf.simulate(cfg, **descent)  # (the config tracks W2)
    run = mf.simulate(cfg, **descent, **{"track.concentration": False}, out=tmp_path / "d.h5")
    with pytest.raises(ConfigError, match="^model.direction"):
        run.concentration()
    assert run_cli(["concentration", str(tmp_path / "d.h5")]) == 2
    # a run of mf.solve too (it had been analysed: t_min = 0, no note)
    head = mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=np.diag([1.0, 0.5, 0.25]))
    solved = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0, heads=head, direction="descent"), sample_uniform(16, 3, seed=0)),
                      mf.ParticleSolver(dt=0.1), t_final=0.5)
    with pytest.raises(ConfigError, match="^model.direction"):
        solved.concentration()


def test_a_window_left_open_by_the_terminal_plateau_says_so_rather_than_run_longer() -> None:
    """At small β the late plateau (the terminal phase, near E_V) lies below 2·W2_min: the window never closes, and the
    note had advised running longer."""
    from meanfield.analysis.concentration import open_window_note

    t = np.linspace(0.0, 10.0, 11)
    plateau = concentration_summary(t, [1.0, 0.7, 0.5, 0.45, 0.6, 0.75, 0.79, 0.8, 0.8, 0.8, 0.8])
    assert plateau["open_end"] and plateau["threshold"] == 0.9
    assert "never closes at this threshold; a threshold below 0.8 (--threshold) ends it" in open_window_note(plateau)
    falling = concentration_summary(t, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.36, 0.37])
    assert falling["open_end"] and "(run longer)" in open_window_note(falling)


def test_a_run_cut_off_while_w2_still_climbs_is_told_to_run_longer_not_that_the_window_never_closes() -> None:
    """(found in review) W2 back more than halfway to the threshold but still rising steeply at the last frame had been
    told "where it levels off there the window never closes at this threshold; a threshold below … ends it"; the same
    run taken further closes its window at that threshold."""
    from meanfield.analysis.concentration import open_window_note

    t = np.linspace(0.0, 6.0, 13)
    w2 = [1.0, 0.9, 0.75, 0.6, 0.5, 0.42, 0.36, 0.335, 0.36, 0.42, 0.48, 0.53, 0.58]
    climbing = concentration_summary(t, w2)
    assert climbing["open_end"] and climbing["w2_final"] - climbing["w2_min"] > 0.5 * (climbing["threshold"] - climbing["w2_min"])
    note = open_window_note(climbing)
    assert "never closes" not in note and "a threshold below" not in note
    assert "still below the threshold 0.67 and rising (0.107 per unit of time over the last frames)" in note
    assert "the run ends before the window closes (or W2 levels off); a later solver.t_final shows where it closes" in note
    from meanfield.analysis.concentration import LEVEL_FRAMES  # the slope over the last frame intervals

    np.testing.assert_allclose(climbing["w2_final_slope"], (0.58 - w2[-1 - LEVEL_FRAMES]) / (t[-1] - t[-1 - LEVEL_FRAMES]),
                               rtol=1e-12)
    # the same curve levelled off below the threshold keeps the plateau's advice, here and in the sweep's table
    level = concentration_summary(np.linspace(0.0, 9.0, 19), w2 + [0.6, 0.61, 0.6125, 0.6125, 0.6125, 0.6125])
    np.testing.assert_allclose(level["w2_final_slope"], 0.0, atol=1e-15)
    assert "never closes at this threshold; a threshold below 0.6125 (--threshold) ends it" in open_window_note(level)
    from meanfield.solvers.experiments.concentration import BetaSweep

    row = dict(climbing, beta=16.0, n=600, rate=0.4, ratio=0.8, under_resolved="")
    fits = {"slope": 1.0, "intercept": 0.0, "r2": math.nan}
    table = BetaSweep(np.array([16.0]), [{}], [row], fits, fits, "particle").table()
    assert "≥ β = 16: " + note in table


def test_a_run_that_starts_at_its_minimum_is_not_told_a_lower_threshold_gives_a_window() -> None:
    """(found in review) a run continued from the frame of its minimum had been told "a threshold below W2(t0) gives
    one a start": any threshold below W2(t0) = W2_min gives no window at all."""
    from meanfield.analysis.concentration import open_window_note

    t = np.linspace(4.5, 7.0, 6)
    at_min = concentration_summary(t, [0.3354, 0.34, 0.37, 0.42, 0.5, 0.56])
    assert at_min["open_start"] and at_min["t_min"] == 4.5
    note = open_window_note(at_min)
    assert "threshold 0.6708 (2·W2_min) above W2(t = 4.5) = 0.3354: no window" in note
    assert "the run starts at its minimum: no window can open in it" in note and "gives one a start" not in note
    later = concentration_summary(t, [0.5, 0.34, 0.37, 0.42, 0.5, 0.56], threshold=0.6)  # a start above the minimum
    assert "a threshold below 0.5 (--threshold) gives one a start" in open_window_note(later)


def test_a_threshold_above_the_first_w2_gives_no_window_and_python_text_names_no_cli_option() -> None:
    # 2·W2_min above W2(0) had read "metastable window (W2 ≤ 1.2): [≤0, 5≥]" with "run longer", which cannot help; the
    # Python text had named the CLI's --threshold
    from meanfield.analysis.concentration import Concentration

    t = np.linspace(0.0, 5.0, 6)
    above = concentration_summary(t, [1.0, 0.7, 0.6, 0.62, 0.65, 0.7])
    assert above["open_start"] and above["threshold"] == 1.2
    text = Concentration({}, above, None, "run").window_text()
    assert "metastable window: none (threshold 1.2 (2·W2_min) above W2(0) = 1: no window" in text  # (the default's origin)
    given = concentration_summary(t, [1.0, 0.7, 0.6, 0.62, 0.65, 0.7], threshold=1.1)
    assert "none (threshold 1.1 above W2(0) = 1: no window" in Concentration({}, given, None, "run").window_text()
    assert "[≤" not in text and "run longer" not in text and "--threshold" not in text
    assert "run.concentration(threshold=…)" in text
    assert "(--threshold)" in Concentration({}, above, None, "run").window_text(cli=True)
    plateau = concentration_summary(np.linspace(0.0, 10.0, 11), [1.0, 0.7, 0.5, 0.45, 0.6, 0.75, 0.79, 0.8, 0.8, 0.8, 0.8])
    text = Concentration({}, plateau, None, "run").window_text()
    assert "a threshold below 0.8 (run.concentration(threshold=…)) ends it" in text and "--threshold" not in text
    one = Concentration({"t": np.array([0.0]), "w2_target": np.array([1.0])}, concentration_summary(np.array([0.0]), [1.0]),
                        None, "run").window_text()
    assert "note: the run holds one frame (t = 0 only)" in one  # (it had read t_min = 0 without a word)
    # an open end reads "≥10]", as in the sweep's table (it had read "10≥]")
    assert f"[{plateau['t_a']:.4g}, ≥10]" in text and "≥]" not in text


def test_a_run_of_another_attention_law_is_noted_as_outside_the_theorem() -> None:
    import meanfield as mf

    head = mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=np.diag([1.0, 0.5, 0.25]))
    for attention in ("relu", "softmax"):
        run = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0, heads=head, attention=attention), sample_uniform(32, 3, seed=0)),
                       mf.ParticleSolver(dt=0.1), t_final=1.0, save_every=0.5)
        notes = " ".join(run.concentration().notes)
        assert ("are for unmasked softmax attention; this run has model.attention = 'relu'" in notes) == (attention == "relu")


def test_a_weighted_zero_temperature_run_keeps_its_masses_and_weighs_its_rayleigh_quotient():
    # (found in review) the zero-temperature solver had dropped the token masses (run.token_masses None, the run's
    # concentration measured with equal masses) and recorded the unweighted mean Rayleigh quotient
    import meanfield as mf

    x0 = mf.sample_uniform(6, 3, seed=0)
    masses = np.array([0.05, 0.05, 0.05, 0.05, 0.1, 0.7])
    S = np.diag([1.0, 0.5, 0.2])
    model = mf.Model(d=3, beta=4.0, attention="softmax", heads=mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=S))
    run = mf.solve(mf.Problem(model, x0, weights=masses), mf.ZeroTemperatureSolver(dt=0.05), t_final=0.2)
    np.testing.assert_array_equal(run.token_masses, masses)
    expected = sum(a * x @ S @ x for a, x in zip(masses, x0))  # a loop over the tokens
    np.testing.assert_allclose(run.diagnostics["rayleigh"][0], expected, rtol=1e-14)


@pytest.mark.parametrize(("solver", "norm", "key"), [(None, "peri", "model.norm"), (None, "ngpt", "model.norm"),
                                                     ("particle", "pre", "track.concentration")])
def test_the_beta_sweep_checks_the_config_it_runs_after_switching_solver_and_tracker(run_cli, tmp_path, capsys, solver, norm, key):
    # the sweep switches solver.kind (the grid on S²) and track.concentration after the config was checked: the grid
    # had run the Post-LN PDE under a norm=peri label (exit 0), and Pre-LN particles had crashed in the tracker (exit 1)
    cfg = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    cfg["init"]["n"] = 30
    cfg["solver"].update(t_final=0.5, save_every=0.25)
    cfg["track"]["concentration"] = False  # (a config that simulate takes: the sweep turns the tracker on)
    config = _write_config(tmp_path / "c.toml", cfg)
    out = tmp_path / "sweep"
    argv = ["concentration", "--sweep-beta", "4,8", str(config), "--single", "--set", f"model.norm={norm}", "--out", str(out), "--quiet"]
    assert run_cli(argv + (["--solver", solver] if solver else [])) == 2
    assert f"error: {key}:" in capsys.readouterr().err and not out.exists()


CONFIG = ROOT / "data" / "concentration.toml"


def _csv(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_refined_sweep_writes_both_runs_curves_so_its_convergence_columns_can_be_recomputed(tmp_path: Path, capsys) -> None:
    # curves.csv had held only the finer run of each β, with no column saying its size: the coarser half of ΔW2_min and
    # Δt_min was in neither the sweep's tables nor its figure
    out = tmp_path / "runs"
    argv = ["concentration", "--sweep-beta", "4,16", str(CONFIG), "--solver", "particle", "--cells", "100", "--refinement", "2",
            "--set", "solver.t_final=0.6", "--set", "solver.save_every=0.2", "--out", str(out), "--csv", str(tmp_path / "s.csv"),
            "--quiet"]
    assert cli.main(argv) == 0
    assert f"wrote 4 runs, {out / 'curves.csv'} and {out / 'curves_coarse.csv'}" in capsys.readouterr().out
    fine, coarse = _csv(out / "curves.csv"), _csv(out / "curves_coarse.csv")
    columns = ["beta", "t", "w2_target", "v_eigenspace_distance", "e_eigenspace_distance", "n"]
    assert list(fine[0]) == list(coarse[0]) == columns  # the earlier columns first, as they were
    assert {(r["beta"], r["n"]) for r in fine} == {("4", "200"), ("16", "200")}
    assert {(r["beta"], r["n"]) for r in coarse} == {("4", "100"), ("16", "100")}
    for beta, row in zip(("4", "16"), _csv(tmp_path / "s.csv")):
        minima = [min(float(r["w2_target"]) for r in table if r["beta"] == beta) for table in (fine, coarse)]
        np.testing.assert_allclose(float(row["dw2_min"]), (minima[0] - minima[1]) / minima[0], rtol=0, atol=1e-8)  # (10 digits)
        coarse_run = load(out / f"beta_{beta}_coarse.h5")  # the coarse table is that run's curve
        np.testing.assert_allclose([float(r["w2_target"]) for r in coarse if r["beta"] == beta],
                                   coarse_run.diagnostics["w2_target"], rtol=1e-9)
    # --single: one run per β, no coarser table
    single = ["concentration", "--sweep-beta", "4,16", str(CONFIG), "--solver", "particle", "--cells", "100", "--single",
              "--set", "solver.t_final=0.6", "--out", str(tmp_path / "single"), "--quiet"]
    assert cli.main(single) == 0
    assert {r["n"] for r in _csv(tmp_path / "single" / "curves.csv")} == {"100"}
    assert not (tmp_path / "single" / "curves_coarse.csv").exists()
    capsys.readouterr()
    assert cli.main([*argv[:-3], "--csv", str(out / "curves_coarse.csv"), "--resume"]) == 2  # a table of the sweep
    assert "--csv" in capsys.readouterr().err


def test_the_plot_draws_the_coarser_run_dashed_and_puts_each_warning_on_its_own_run() -> None:
    # "(under-res.)" had been put on the drawn finer curve (n = 200 ≥ 10·16 particles) for the coarser run's warning
    sweep = sweep_beta(_config("solver.t_final=0.4", "solver.save_every=0.2"), [4.0, 16.0], solver="particle", size=100,
                       refine=True, refinement=2)
    s = sweep.summaries[1]
    assert s["under_resolved_fine"] == "" and "n = 100 < 10·β^((d-1)/2) = 160" in s["under_resolved_coarse"]
    assert s["under_resolved"].startswith("the coarser run of the convergence column (n = 100)")  # as before
    fig = plot_sweep(sweep)
    ax1 = fig.axes[0]
    labels = [text.get_text() for text in ax1.get_legend().get_texts()]
    assert labels == ["β = 4: n = 200, dashed n = 100", "β = 16: n = 200, dashed n = 100 (under-res.)"]
    dashed = [line for line in ax1.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 2
    for line, curve in zip(dashed, sweep.coarse_curves, strict=True):
        np.testing.assert_array_equal(line.get_ydata(), curve["w2_target"][curve["t"] > 0])


def test_resume_checks_every_stored_run_before_any_is_touched(tmp_path: Path, capsys) -> None:
    # each run had been checked only when the sweep reached it: β = 4's runs were extended to the new t_final before
    # β = 8's coarser run was found to differ (exit 2, after the work)
    out = tmp_path / "runs"
    base = ["concentration", "--sweep-beta", "4,8", str(CONFIG), "--solver", "particle", "--refinement", "2", "--out", str(out),
            "--quiet", "--set", "solver.save_every=0.25"]
    assert cli.main([*base, "--spacing", "4:0.5,8:0.5", "--set", "solver.t_final=0.5"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert cli.main([*base, "--spacing", "4:0.5,8:0.4", "--set", "solver.t_final=1", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "init.n: differs from the run in" in err and "beta_8_coarse.h5 (403 there, 629 now)" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # not one file changed


def test_resume_refuses_a_failed_or_non_finite_stored_run_before_any_run_is_touched(tmp_path: Path, capsys) -> None:
    # (found in review) a failed run had been refused only when the sweep reached it: β = 4's run had been extended to
    # the new t_final first, and the message's remedy (another config in a new file) could not be given to a sweep
    import h5py
    import json

    from meanfield.io.runfile import CHECKSUM, frame_checksum

    out = tmp_path / "runs"
    base = ["concentration", "--sweep-beta", "4,16,64", str(CONFIG), "--solver", "particle", "--cells", "40", "--single",
            "--out", str(out), "--quiet", "--set", "solver.save_every=0.25"]
    assert cli.main([*base, "--set", "solver.t_final=0.5"]) == 0
    with h5py.File(out / "beta_16.h5", "r+") as f:  # as a failure leaves it
        f.attrs["status"], f.attrs["stop_reason"] = "failed", "non-finite state"
        info = json.loads(f.attrs["info"])
        info.update(failed=True, stop_reason="non-finite state")
        f.attrs["info"] = json.dumps(info)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert cli.main([*base, "--set", "solver.t_final=1", "--resume"]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # not one file changed (β = 4's had been extended)
    err = capsys.readouterr().err
    assert f"--resume: the run in {out / 'beta_16.h5'} failed (non-finite state)" in err
    assert "nothing of the sweep has been run or changed" in err
    assert f"delete or move {out / 'beta_16.h5'} so that β = 16 runs afresh in this sweep" in err
    (out / "beta_16.h5").unlink()  # as the message says: β = 16 runs afresh, the others are resumed
    with h5py.File(out / "beta_64.h5", "r+") as f:  # a last frame that is not finite, its checksum matching
        frames = int(f["committed_frames"][0])
        state = f["x"][frames - 1]
        state[0, 0] = np.nan
        f["x"][frames - 1] = state
        f[CHECKSUM][frames - 1] = frame_checksum(state)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert cli.main([*base, "--set", "solver.t_final=1", "--resume"]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    err = capsys.readouterr().err
    assert f"{out / 'beta_64.h5'}: the last committed frame is not finite, and the run cannot continue from it" in err
    assert f"delete or move {out / 'beta_64.h5'} so that β = 64 runs afresh in this sweep" in err
    (out / "beta_64.h5").unlink()
    assert cli.main([*base, "--set", "solver.t_final=1", "--resume"]) == 0


def test_a_sweep_of_one_frame_is_refused(tmp_path: Path, capsys) -> None:
    # t_final = 0 had fitted "t_min = 0·log β + 0" to W2(0) at every β, with no star and no note
    out = tmp_path / "runs"
    argv = ["concentration", "--sweep-beta", "4,8", str(CONFIG), "--solver", "particle", "--cells", "50", "--single",
            "--set", "solver.t_final=0", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 2
    assert "error: solver.t_final: a β family needs frames past t = 0" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ConfigError) as info:
        sweep_beta(_config("solver.t_final=0"), [4.0, 8.0], solver="particle")
    assert info.value.key == "solver.t_final"


def test_the_sweep_counts_its_runs_in_words_and_notes_a_resume_with_nothing_to_resume(tmp_path: Path, capsys) -> None:
    # "wrote 1 runs", "read 1 finished ones"; --resume into a mistyped folder had started afresh without a word
    out = tmp_path / "runs"
    base = ["concentration", "--sweep-beta", "4,8", str(CONFIG), "--solver", "particle", "--cells", "40", "--single",
            "--set", "solver.t_final=0.3", "--out", str(out), "--quiet"]
    assert cli.main([*base, "--resume"]) == 0
    captured = capsys.readouterr()
    assert f"note: --resume: {out} does not exist: nothing to resume, every run starts afresh" in captured.err
    assert f"wrote 2 runs and {out / 'curves.csv'}" in captured.out
    (out / "beta_8.h5").unlink()
    assert cli.main([*base, "--resume"]) == 0
    captured = capsys.readouterr()
    assert f"wrote 1 run, read 1 finished one, and wrote {out / 'curves.csv'}" in captured.out
    assert "nothing to resume" not in captured.err
    (out / "beta_4.h5").unlink()
    assert cli.main([*base, "--resume", "--set", "solver.t_final=0.3"]) == 0
    assert f"wrote 1 run, read 1 finished one" in capsys.readouterr().out
    for name in ("beta_4.h5", "beta_8.h5"):
        (out / name).unlink()
    assert cli.main([*base, "--resume"]) == 0
    assert f"note: --resume: {out} holds none of this sweep's runs" in capsys.readouterr().err


def _table_sweep(curves: list[np.ndarray], *, threshold: float | None = None, intercept: float = -0.3402):
    from meanfield.solvers.experiments.concentration import BetaSweep

    t = np.arange(len(curves[0]), dtype=float)
    summaries = []
    for beta, w in zip((4.0, 16.0), curves):
        s = concentration_summary(t, w, threshold=threshold)
        s.update(beta=beta, n=100, rate=1.0, ratio=s["w2_min"], under_resolved="", wall_time=0.0)
        summaries.append(s)
    fit = {"slope": 0.8548, "intercept": intercept, "r2": math.nan}
    return BetaSweep(np.array([4.0, 16.0]), [{"t": t, "w2_target": w} for w in curves], summaries, dict(fit), dict(fit), "particle")


def test_the_fit_lines_name_the_betas_whose_minimum_is_at_the_last_frame() -> None:
    # (found in review) a β whose minimum fell at the last frame (t_min only a lower bound, W2_min an upper one) entered
    # both fits while the fit lines read as fits of minima (only the row's "*" and a footnote said it); the fits keep
    # every β, as before, and the lines name those βs
    from meanfield.analysis.concentration import linear_fit

    plain = np.array([1.0, 0.6, 0.4, 0.3, 0.5, 0.8, 0.9])
    falling = np.array([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    lines = _table_sweep([plain, falling]).table().splitlines()
    fit_t = next(line for line in lines if line.startswith("fit t_min = 0.8548·log β − 0.3402"))
    fit_w = next(line for line in lines if line.startswith("fit log W2_min = 0.8548·log √(log(β+1)/β) − 0.3402"))
    assert fit_t.endswith("; fitted with β = 16, whose t_min is only a lower bound (minimum at the last frame, *)")
    assert fit_w.endswith("; fitted with β = 16, whose W2_min is only an upper bound (minimum at the last frame, *)")
    both = _table_sweep([falling, falling]).table()
    assert "fitted with β = 4, 16, whose t_min are only lower bounds" in both and "whose W2_min are only upper bounds" in both
    assert "fitted with" not in _table_sweep([plain, plain]).table()
    # a sweep whose largest β is still falling at t_final: its fit is over every β, that one named on the line
    sweep = sweep_beta(_config("solver.t_final=1", "solver.save_every=0.25"), [4.0, 64.0], solver="particle", size=40)
    ends = [s["beta"] for s in sweep.summaries if s["min_at_end"]]
    assert 64.0 in ends
    t_min = [s["t_min"] for s in sweep.summaries]
    np.testing.assert_allclose(sweep.fit_tmin["slope"], linear_fit(np.log(sweep.betas), t_min)["slope"], rtol=1e-12)
    assert f"fitted with β = {', '.join(f'{b:g}' for b in ends)}, whose t_min" in sweep.table()


def test_the_sweep_table_signs_its_fits_and_says_an_earlier_minimum_and_a_window_under_w2_min() -> None:
    # "+ -0.3402"; the first local minimum (the one-run output prints it) and a window of none for a threshold below
    # W2_min (the one-run output says why) had gone unsaid in the table
    dip = np.array([1.0, 0.5, 0.6, 0.7, 0.3, 0.9, 1.0])
    plain = np.array([1.0, 0.6, 0.4, 0.3, 0.5, 0.8, 0.9])
    table = _table_sweep([dip, plain]).table()
    assert "fit t_min = 0.8548·log β − 0.3402" in table and "+ -" not in table
    assert "β = 4: first local minimum W2 = 0.5 at t = 1, before the global minimum of the columns" in table
    assert "β = 16: first local minimum" not in table
    assert "fit t_min = 0.8548·log β + 0.3402" in _table_sweep([dip, plain], intercept=0.3402).table()
    low = _table_sweep([dip, plain], threshold=0.2).table()
    assert "β = 4: window none (threshold 0.2 < W2_min = 0.3)" in low and "β = 16: window none (threshold 0.2 < W2_min = 0.3)" in low
