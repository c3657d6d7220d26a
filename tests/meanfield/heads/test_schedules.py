"""Weight schedules of Massucco et al. (arXiv 2605.18870): reproducibility, exact OU law, oscillating formula, replay."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from meanfield.build import build_model
from meanfield.config import load_config
from meanfield.errors import ConfigError, ConfigNote
from meanfield.heads import HeadStack
from meanfield.model import ConstantHeads, Model
from meanfield.heads.schedules import (
    SCHEDULES,
    OscillatingSchedule,
    OUSchedule,
    PathSchedule,
    head_structure,
    oscillation_phases,
    schedule_derivative,
    schedule_from_config,
    schedule_from_path,
    weight_path,
    weights_static,
)
from meanfield.geometry.sphere import sample_uniform
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, solve


def _sym(rng: np.random.Generator, H: int, d: int) -> np.ndarray:
    A = rng.standard_normal((H, d, d))
    return 0.5 * (A + A.transpose(0, 2, 1))


@pytest.fixture
def aligned(rng: np.random.Generator) -> HeadStack:
    B = _sym(rng, 3, 3)
    return HeadStack(B=B, V=B.copy())


def test_registry_names() -> None:
    assert sorted(SCHEDULES) == ["constant", "layers", "oscillating", "ou", "relaxation"]


def test_ou_reproducible_from_seed_and_query_order(aligned: HeadStack) -> None:
    times = [0.37, 2.0, 0.011, 5.5, 1.234]
    a = OUSchedule(aligned, kappa=1.5, sigma=0.3, dt=0.01, seed=11)
    b = OUSchedule(aligned, kappa=1.5, sigma=0.3, dt=0.01, seed=11)
    first = [a.at(t).B for t in times]
    second = [b.at(t).B for t in reversed(times)][::-1]  # another extension pattern
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x, y)
    c = OUSchedule(aligned, kappa=1.5, sigma=0.3, dt=0.01, seed=12)
    assert np.max(np.abs(c.at(2.0).B - first[1])) > 1e-3
    np.testing.assert_array_equal(a.at(0.0).B, aligned.B)  # starts at the mean


def test_ou_keeps_structure(rng: np.random.Generator) -> None:
    d = 3
    Bsym = _sym(rng, 1, d)[0]
    Bgen = rng.standard_normal((d, d))
    V_other = _sym(rng, 1, d)[0]
    stack = HeadStack(B=np.stack([Bsym, Bgen, Bsym]), V=np.stack([Bsym, rng.standard_normal((d, d)), V_other]))
    s = head_structure(stack)
    assert s["b_symmetric"].tolist() == [True, False, True]
    assert s["v_aligned"].tolist() == [True, False, False]
    ou = OUSchedule(stack, kappa=1.0, sigma=0.5, dt=0.05, seed=0)
    for t in (0.3, 1.01, 4.0):
        h = ou.at(t)
        np.testing.assert_array_equal(h.B[0], h.B[0].T)
        np.testing.assert_array_equal(h.V[0], h.B[0])  # aligned stays aligned
        assert np.max(np.abs(h.B[1] - h.B[1].T)) > 1e-6  # general head: full noise
        np.testing.assert_array_equal(h.V[2], h.V[2].T)  # symmetric V: symmetric noise
        assert np.max(np.abs(h.V[2] - h.B[2])) > 1e-6  # but its own
        np.testing.assert_array_equal(h.w, stack.w)


def test_ou_stationary_variance_and_lag_correlation() -> None:
    """Long path of one 3×3 symmetric head: each of the 6 free entries has variance σ²/(2κ)."""
    kappa, sigma, dt = 2.0, 0.8, 0.05
    mean = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    ou = OUSchedule(mean, kappa=kappa, sigma=sigma, dt=dt, seed=5)
    t_end = 4000.0
    path = weight_path(ou, ou.grid(t_end))["B"][:, 0]  # (T, 3, 3)
    iu = np.triu_indices(3)
    dev = (path - np.eye(3))[:, iu[0], iu[1]][int(5 / dt) :]  # drop the transient
    var = dev.var(axis=0).mean()
    # std of the estimate ≈ sqrt(1/(κ T)) / sqrt(6) ≈ 0.3 %; 3 % is ten sigma
    np.testing.assert_allclose(var, sigma**2 / (2 * kappa), rtol=0.03)
    assert ou.stationary_variance == pytest.approx(sigma**2 / (2 * kappa))
    lag = np.mean([np.corrcoef(dev[:-1, k], dev[1:, k])[0, 1] for k in range(6)])
    np.testing.assert_allclose(lag, math.exp(-kappa * dt), atol=0.01)


def test_ou_exact_transition_law_independent_of_grid() -> None:
    """Var at t = 0.3 over many heads matches σ²(1−e^{−2κt})/(2κ) with only 3 grid steps (Euler–Maruyama is 17 % off)."""
    kappa, sigma, H = 2.0, 1.0, 4000
    B = np.repeat(np.eye(2)[None], H, axis=0)
    ou = OUSchedule(HeadStack(B=B, V=B.copy()), kappa=kappa, sigma=sigma, dt=0.1, seed=3)
    dev = ou.at(0.3).B - np.eye(2)
    samples = np.concatenate([dev[:, 0, 0], dev[:, 0, 1], dev[:, 1, 1]])
    exact = sigma**2 * (1 - math.exp(-2 * kappa * 0.3)) / (2 * kappa)
    np.testing.assert_allclose(samples.var(), exact, rtol=0.05)
    np.testing.assert_allclose(samples.mean(), 0.0, atol=4 * math.sqrt(exact / samples.size))


def test_ou_piecewise_linear_between_grid_points(aligned: HeadStack) -> None:
    ou = OUSchedule(aligned, kappa=1.0, sigma=0.4, dt=0.1, seed=2)
    b0, b1 = ou.at(0.7).B, ou.at(0.8).B
    np.testing.assert_allclose(ou.at(0.725).B, 0.75 * b0 + 0.25 * b1, rtol=0, atol=1e-14)
    dB, dV = ou.derivative(0.73)
    np.testing.assert_allclose(dB, (b1 - b0) / 0.1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dV, dB, rtol=0, atol=0)


def test_oscillating_exact_formula(rng: np.random.Generator) -> None:
    H, d, A, w = 4, 3, 0.7, 2.5
    B = _sym(rng, H, d)
    V = np.stack([B[0], rng.standard_normal((d, d)), B[2], _sym(rng, 1, d)[0]])
    osc = OscillatingSchedule(HeadStack(B=B, V=V), amplitude=A, omega=w)
    for t in (0.0, 0.3, 1.7):
        heads = osc.at(t)
        for h in range(H):
            c = A * math.sin(w * t + 2 * math.pi * h / H)
            np.testing.assert_allclose(heads.B[h], B[h] + c * np.eye(d), rtol=0, atol=1e-15)
            np.testing.assert_allclose(heads.V[h], V[h] + c * np.eye(d), rtol=0, atol=1e-15)
        dB, dV = osc.derivative(t)
        fd = (osc.at(t + 1e-6).B - osc.at(t - 1e-6).B) / 2e-6
        np.testing.assert_allclose(dB, fd, rtol=0, atol=1e-8)
        np.testing.assert_array_equal(dV[0], dB[0])


def test_oscillation_phases() -> None:
    np.testing.assert_allclose(oscillation_phases(4, "spread"), [0, np.pi / 2, np.pi, 3 * np.pi / 2])
    np.testing.assert_array_equal(oscillation_phases(3, "equal"), np.zeros(3))
    r = oscillation_phases(5, "random", seed=4)
    np.testing.assert_array_equal(r, oscillation_phases(5, "random", seed=4))
    assert np.all((r >= 0) & (r < 2 * np.pi))
    # spread phases: the head-average of the oscillation cancels for H >= 2
    t = 0.83
    np.testing.assert_allclose(np.sin(t + oscillation_phases(6, "spread")).sum(), 0.0, atol=1e-14)


def test_replay_from_saved_path_is_bit_identical(aligned: HeadStack) -> None:
    ou = OUSchedule(aligned, kappa=1.0, sigma=0.5, dt=0.01, seed=9)
    static = weights_static(ou, 1.0)
    assert set(static) == {"weights/t", "weights/B", "weights/V", "weights/w"}
    assert static["weights/B"].shape == (101, 3, 3, 3)
    replay = schedule_from_path({key.split("/")[1]: value for key, value in static.items()})
    assert isinstance(replay, PathSchedule)
    for t in np.random.default_rng(0).uniform(0, 1, 50).tolist() + [0.0, 0.5, 1.0]:
        np.testing.assert_array_equal(replay.at(t).B, ou.at(t).B)
        np.testing.assert_array_equal(replay.at(t).V, ou.at(t).V)
    model_a = Model(d=3, beta=1.0, attention="pooled", heads=ou)
    model_b = Model(d=3, beta=1.0, attention="pooled", heads=replay)
    x0 = sample_uniform(20, 3, seed=1)
    a = solve(Problem(model_a, x0), ParticleSolver(dt=0.025), t_final=1.0, energy=False, speed=False)
    b = solve(Problem(model_b, x0), ParticleSolver(dt=0.025), t_final=1.0, energy=False, speed=False)
    np.testing.assert_array_equal(a.final, b.final)


def test_oscillating_replay_second_order(aligned: HeadStack) -> None:
    osc = OscillatingSchedule(aligned, amplitude=1.0, omega=3.0)
    errors = []
    for dt in (0.02, 0.01):
        replay = schedule_from_path(weight_path(osc, dt * np.arange(int(round(1 / dt)) + 1)))
        midpoints = dt * (np.arange(int(round(1 / dt))) + 0.5)  # where the interpolation error peaks
        errors.append(max(np.abs(replay.at(t).B - osc.at(t).B).max() for t in midpoints))
    # linear interpolation of A sin(ωt): error ≤ A ω² dt² / 8
    assert errors[0] <= 9.0 * 0.02**2 / 8 * (1 + 1e-9)
    np.testing.assert_allclose(errors[0] / errors[1], 4.0, rtol=0.05)


def test_constant_path_and_derivative(aligned: HeadStack) -> None:
    const = ConstantHeads(aligned)
    static = weights_static(const, 3.0)
    assert static["weights/t"].tolist() == [0.0]
    replay = schedule_from_path({"t": static["weights/t"], "B": static["weights/B"], "V": static["weights/V"]})
    np.testing.assert_array_equal(replay.at(2.0).B, aligned.B)
    dB, dV = schedule_derivative(const, 1.0)
    assert not np.any(dB) and not np.any(dV)

    class Shifted:  # no derivative method: finite differences
        def at(self, t: float) -> HeadStack:
            return HeadStack(B=aligned.B * (1 + t * t), V=aligned.V)

    dB, _ = schedule_derivative(Shifted(), 0.5)
    np.testing.assert_allclose(dB, aligned.B * 1.0, rtol=1e-8, atol=1e-9)


def test_schedule_from_config_and_build_model() -> None:
    cfg = load_config(
        {
            "model": {"d": 3, "attention": "pooled", "heads": [{"Q": "identity", "K": "identity", "V": "aligned"}] * 2},
            "weights": {"schedule": "ou", "kappa": 2.0, "sigma": 0.3, "dt": 0.02, "seed": 4},
        }
    )
    model = build_model(cfg)
    assert isinstance(model.heads, OUSchedule)
    assert (model.heads.kappa, model.heads.sigma, model.heads.dt, model.heads.seed) == (2.0, 0.3, 0.02, 4)
    np.testing.assert_array_equal(model.heads.at(0.5).B, build_model(cfg).heads.at(0.5).B)
    cfg["weights"]["schedule"] = "oscillating"
    osc = schedule_from_config(cfg, model.heads.mean)
    assert isinstance(osc, OscillatingSchedule)
    np.testing.assert_allclose(osc.phases, [0.0, np.pi])
    cfg["weights"]["phases"] = "sideways"
    with pytest.raises(ConfigError, match="weights.phases"):
        schedule_from_config(cfg, model.heads.mean)
    cfg["weights"]["schedule"] = "brownian"
    with pytest.raises(ConfigError, match="weights.schedule"):
        schedule_from_config(cfg, model.heads.mean)


def test_bad_parameters() -> None:
    mean = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with pytest.raises(ValueError, match="kappa"):
        OUSchedule(mean, kappa=-1.0, sigma=0.1, dt=0.1)
    with pytest.raises(ValueError, match="dt"):
        OUSchedule(mean, kappa=1.0, sigma=0.1, dt=0.0)
    with pytest.raises(ValueError, match="t >= 0"):
        OUSchedule(mean, kappa=1.0, sigma=0.1, dt=0.1).at(-1.0)
    with pytest.raises(ValueError, match="phases"):
        OscillatingSchedule(mean, amplitude=1.0, omega=1.0, phases=[0.0, 1.0])


def test_rk4_on_ou_weights_keeps_fourth_order_by_stepping_on_the_bends_of_the_path():
    # steps of 0.05 across the bends of a path linear between its 0.01-spaced points had made RK4 second order
    # (error 3e-3 at dt = 0.05 against 5e-9 at 0.01)
    aligned = HeadStack(B=np.stack([np.eye(3), np.diag([1.0, 0.5, 0.2])]), V=np.stack([np.eye(3), np.diag([1.0, 0.5, 0.2])]))
    schedule = OUSchedule(aligned, kappa=1.0, sigma=0.5, dt=0.01, seed=3)
    assert schedule.kinks(0.0, 0.05) == pytest.approx([0.01, 0.02, 0.03, 0.04], abs=1e-15)
    assert schedule.kinks(0.01, 0.02) == [] and schedule.kinks(0.0100000000000001, 0.03) == pytest.approx([0.02])
    model = Model(d=3, beta=1.0, heads=schedule, direction="descent")
    x0 = sample_uniform(24, 3, seed=5)

    def final(dt: float) -> np.ndarray:
        return solve(Problem(model, x0), ParticleSolver(method="rk4", dt=dt), t_final=0.4, energy=False, speed=False).final

    coarse = final(0.05)
    np.testing.assert_array_equal(coarse, final(0.01))  # cut at every bend: the steps are the weight path's own
    for norm in ("pre", "ngpt"):  # the normalised schemes' own stepper too (it had stepped across the bends)

        def normalised(dt: float, norm: str = norm) -> np.ndarray:
            return solve(Problem(model, x0), ParticleSolver(method="rk4", dt=dt, norm=norm), t_final=0.4,
                         energy=False, speed=False).final

        np.testing.assert_array_equal(normalised(0.05), normalised(0.01))
    errors = [np.abs(final(h) - final(0.00125)).max() for h in (0.01, 0.005, 0.0025)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(orders > 3.6), orders  # fourth order (it had been 2)
    # a replay of the stored path bends at the same points
    from meanfield.heads.schedules import PathSchedule

    t = schedule.grid(0.4)
    stacks = [schedule.at(s) for s in t]
    replay = PathSchedule(t, np.stack([h.B for h in stacks]), np.stack([h.V for h in stacks]), w=stacks[0].w)
    assert replay.kinks(0.0, 0.05) == schedule.kinks(0.0, 0.05)



#: a 2-d relaxation run of three heads (the review's rel.toml), small enough that a refusal is all it costs
RELAXATION = """
[model]
d = 2
num_heads = 3
seed = 1
[init]
n = 16
[weights]
schedule = "relaxation"
initial = "random-symmetric"
target = [["2", "0"], ["0", "2"]]
[solver]
kind = "particle"
method = "euler"
dt = 0.01
t_final = 0.5
save_every = 0.1
"""


def _simulate(tmp_path, capsys, *sets: str, config: str = RELAXATION) -> tuple[int, str, bool]:
    """``meanfield simulate`` of ``config`` with ``--set`` values: its status, its error output, whether a file is made."""
    from meanfield.cli import main

    path, out = tmp_path / "run.toml", tmp_path / "run.h5"
    path.write_text(config, encoding="utf-8")
    argv = ["simulate", str(path), "-o", str(out), "--quiet"]
    for item in sets:
        argv += ["--set", item]
    status = main(argv)
    return status, capsys.readouterr().err, out.exists()


@pytest.mark.parametrize("entry", ["cos", "'abc'", "...", "(t, t)", "10**10**10", "where(phi > 0)"])
def test_a_weight_target_entry_that_is_no_number_exits_2_naming_it(entry, tmp_path, capsys):
    # a ufunc, a string, Ellipsis, a pair (broadcast for H = 2 only) had escaped as TypeError/ValueError tracebacks
    # (exit 1), and 10**10**10 had hung the config check in an exact integer power
    status, err, made = _simulate(tmp_path, capsys, f'weights.target=[["{entry}", "0"], ["0", "2"]]')
    assert status == 2 and "error: weights.target[0][0]: " in err and "Traceback" not in err and not made, err


#: a 2-d ou run of one value-aligned head (the review's ou.toml)
OU = """
[model]
d = 2
[[model.heads]]
Q = 1.0
K = 1.0
V = "aligned"
[init]
n = 8
[weights]
schedule = "ou"
[solver]
kind = "particle"
method = "euler"
dt = 0.01
t_final = 0.2
save_every = 0.1
"""


@pytest.mark.parametrize(("config", "sets", "key"), [
    (RELAXATION, ["weights.rate=300"], "weights.rate"),
    (OU, ["weights.kappa=300", "weights.integrator=euler-maruyama"], "weights.kappa"),
])
def test_an_unstable_euler_weight_path_is_refused_though_still_finite_at_t_final(config, sets, key, tmp_path, capsys):
    # rate × dt = 3 > 2: the path grows like 2^k, still finite at t_final = 0.2 (heads of 8e5): the run had ended
    # with exit 0 and inf diagnostics, as only a path that had left the finite numbers was checked
    status, err, made = _simulate(tmp_path, capsys, "solver.t_final=0.2", *sets, config=config)
    assert status == 2 and f"error: {key}: the Euler recursion of the weights diverges" in err and not made, err
    assert "weights.dt" in err


def test_the_euler_weight_step_at_its_bound_is_accepted():
    from meanfield.heads.schedules import check_euler_step

    base = {"schedule": "relaxation", "integrator": "auto", "rate": 200.0, "kappa": 300.0, "dt": 0.01}
    check_euler_step(base)  # rate × dt = 2: each step flips the distance to the target, which does not grow
    check_euler_step({**base, "schedule": "ou"})  # the exact transition: any step
    with pytest.raises(ConfigError, match="^weights.kappa: "):
        check_euler_step({**base, "schedule": "ou", "integrator": "euler-maruyama"})


def test_the_python_class_refuses_an_unstable_euler_step_as_the_config_does():
    # MatrixSDESchedule(dt=1, kappa=5) had drawn heads that grew like 4^k, from Python (the config path refused it)
    from meanfield.heads.schedules import MatrixSDESchedule

    D0 = np.eye(3)[None] * 2.0
    with pytest.raises(ValueError, match=r"kappa × dt = 5 > 2 .* dt below 2 / kappa = 0.4 or integrator='exact'"):
        MatrixSDESchedule(D0, drift="ou", kappa=5.0, dt=1.0)
    with pytest.raises(ValueError, match=r"rate × dt = 3 > 2 .*target"):
        MatrixSDESchedule(D0, drift="relaxation", rate=3.0, dt=1.0, target=lambda t, phases: np.zeros((1, 3, 3)))
    exact = MatrixSDESchedule(D0, drift="ou", kappa=5.0, dt=1.0, integrator="exact")  # stable for any step
    np.testing.assert_allclose(exact.at(3.0).B[0], np.eye(3) * (1.0 + math.exp(-15.0)), rtol=1e-15)
    edge = MatrixSDESchedule(D0, drift="ou", kappa=2.0, dt=1.0)  # κΔ = 2: the distance flips sign, does not grow
    np.testing.assert_allclose(edge.at(5.0).B[0], np.eye(3) * (1.0 - 1.0), atol=1e-15)


@pytest.mark.parametrize(("rate", "words"), [(150.0, "is multiplied by -0.5 each step"), (200.0, "changes sign every step and never decays")])
def test_an_overshooting_euler_weight_step_gets_a_note(rate, words):
    # 1 < rate × dt ≤ 2 is bounded but flips the heads around their target every step: it had run without a word
    cfg = {"model": {"heads": [{"Q": 1.0, "K": 1.0, "V": "aligned"}], "d": 3},
           "weights": {"schedule": "relaxation", "rate": rate, "dt": 0.01, "target": np.eye(3).tolist()}}
    with pytest.warns(ConfigNote, match=f"^weights.rate × weights.dt = {rate / 100:g} > 1: .*{words}"):
        load_config(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config({**cfg, "weights": {**cfg["weights"], "rate": 100.0}})  # rate × dt = 1: lands on the target


@pytest.mark.parametrize(("sets", "words"), [
    (["weights.dt=1e-300"], "steps of the weight path"),
    (["model.num_heads=10", "model.d=16", "solver.t_final=1e5", "solver.save_every=1000.0", "solver.dt=0.1"],
     "the weight path of 1e+07 points (t_final / weights.dt) for 10 heads of 16×16"),
])
def test_the_oscillating_schedule_s_stored_path_is_counted_by_the_resource_check(sets, words):
    # its path of t_final / weights.dt points (here about 1.2 TB) had been counted by neither the step limit nor the
    # memory check, as ou's and relaxation's are; and weights.dt, which sizes it, had been noted as "ignored"
    from meanfield.resources import check_resources

    cfg = {"model": {"heads": [{"Q": 1.0, "K": 1.0, "V": "aligned"}]}, "weights": {"schedule": "oscillating"}}
    with pytest.raises(ConfigError, match="^weights.dt: ") as info:
        load_config(cfg, sets)
    assert words in str(info.value)
    resolved = load_config(cfg, ["model.num_heads=10", "model.d=16", "solver.t_final=10"])  # 1001 points: fits
    check_resources({**resolved, "solver": {**resolved["solver"], "t_final": 1e5}}, available=1 << 60)
    with pytest.raises(ConfigError, match="^weights.dt: "):  # the review's case: 8 GiB for 1.2 TB
        check_resources({**resolved, "solver": {**resolved["solver"], "t_final": 1e5, "save_every": 1000.0}},
                        available=8 << 30)


def test_weights_dt_is_not_called_unused_by_the_oscillating_schedule():
    import warnings

    cfg = {"weights": {"schedule": "oscillating", "dt": 0.001}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(cfg)
    assert not [w for w in caught if "weights.dt" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize(("schedule", "value", "key"), [
    ("ou", '"aligned"', "model.heads[0].V"),
    ("oscillating", '"aligned"', "model.heads[0].V"),
    ("constant", '"aligned"', "model.heads[0].V"),
    ("ou", "1.0", "model.heads[0].Q"),
])
def test_heads_whose_score_matrix_overflows_exit_2_naming_the_head(schedule, value, key, tmp_path, capsys):
    # Q = K = 1e200: QᵀK = inf, and V = "aligned" had ended in Head's ValueError, a traceback with exit 1
    status, err, made = _simulate(tmp_path, capsys, f"weights.schedule={schedule}",
                                  f"model.heads=[{{Q=1e200, K=1e200, V={value}}}]", config=OU)
    assert status == 2 and f"error: {key}: the score matrix QᵀK" in err and "Traceback" not in err and not made, err


def test_heads_that_are_not_finite_are_refused_and_a_path_is_nan_from_where_they_leave_the_finite_numbers():
    # HeadStack had taken inf and NaN matrices, and every kernel then returned NaN velocities without a word (Head
    # refused them; found in review); a weight path still names the first time its heads are not finite
    with pytest.raises(ValueError, match=r"HeadStack B must be finite; head\(s\) \[1\]"):
        HeadStack(B=np.stack([np.eye(3), np.full((3, 3), np.inf)]), V=np.ones((2, 3, 3)))
    with pytest.raises(ValueError, match="HeadStack V must be finite"):
        HeadStack(B=np.eye(3)[None], V=np.full((1, 3, 3), np.nan))

    class Blowup:  # heads of entries 1 / (1 - t), past the float range from t = 1 on
        def at(self, t: float) -> HeadStack:
            return HeadStack(B=np.full((1, 3, 3), 1.0 / (1.0 - t) if t < 1.0 else math.inf), V=np.eye(3)[None])

    path = weight_path(Blowup(), [0.0, 0.5, 1.0, 1.5])
    np.testing.assert_array_equal(path["B"][:2, 0], [np.ones((3, 3)), np.full((3, 3), 2.0)])
    assert np.isnan(path["B"][2:]).all() and np.isnan(path["V"][2:]).all() and np.isfinite(path["V"][:2]).all()
    with pytest.raises(ValueError, match="must be finite"):  # (a path's first heads must be finite)
        weight_path(Blowup(), [1.0, 2.0])


@pytest.mark.parametrize("t", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("times", [[0.0, 0.1, 0.3], [0.0, 0.1, 0.2], [0.5]])  # searched, uniform, one time
def test_a_replayed_path_refuses_a_time_that_is_not_finite(t, times):
    # NaN had failed both end tests and indexed past the path (IndexError); the other schedules say why
    B = np.stack([np.eye(3)[None] * (1.0 + k) for k in range(len(times))])
    replay = PathSchedule(np.array(times), B, B.copy())
    with pytest.raises(ValueError, match=r"defined for finite t, got"):
        replay.at(t)
    with pytest.raises(ValueError, match=r"defined for finite t, got"):
        replay.derivative(t)
    np.testing.assert_allclose(replay.at(-1.0).B, B[0], rtol=0, atol=0)  # a finite time outside: the end held
    np.testing.assert_allclose(replay.at(9.0).B, B[-1], rtol=0, atol=0)


def _ou_sde(**weights) -> dict:
    """A 3-d ou config of two value-aligned random-symmetric matrix-SDE heads (the review's case), ``[weights]`` updated."""
    return {"model": {"d": 3, "num_heads": 2, "heads": [{"V": "aligned"}]},
            "weights": {"schedule": "ou", "initial": "random-symmetric", "noise": "symmetric", "integrator": "euler-maruyama",
                        "kappa": 1.0, "sigma": 1.0, "dt": 0.01, **weights},
            "solver": {"kind": "particle"}}


def test_random_symmetric_heads_and_weight_noise_of_one_seed_get_a_note_naming_both():
    # model.seed = weights.seed (both default 0): the initial heads D_0 = Z + Zᵀ and the first noise increment are drawn
    # from the same default_rng(0), so that increment is exactly D_0 / 2; nothing had said so (the draws are kept:
    # the authors' experiments, data/massucco_*.toml, depend on them and set other seeds)
    from meanfield.heads.schedules import random_symmetric

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        schedule = build_model(load_config(_ou_sde())).heads
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "model.seed" in str(w.message)]
    assert len(notes) >= 1 and "weights.seed" in notes[0] and "different" in notes[0], notes
    D0 = random_symmetric(2, 3, seed=0)
    np.testing.assert_array_equal(schedule.at(0.0).B, D0)
    step = schedule.at(0.01).B - D0  # κ(M − D_0)dt + σ√dt ξ, M = I (the configured heads), κ = σ = 1, √dt = 0.1
    xi = (step - (np.eye(3) - D0) * 0.01) / 0.1  # the symmetric noise (Z + Zᵀ)/2 of the first step
    np.testing.assert_allclose(xi, D0 / 2, rtol=0, atol=1e-12)  # the coincidence the note is about
    for quiet in (_ou_sde(seed=1), _ou_sde(sigma=0.0), {**_ou_sde(), "model": {**_ou_sde()["model"], "seed": 5}}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build_model(load_config(quiet))
        assert not [w for w in caught if "model.seed" in str(w.message)], quiet


@pytest.mark.parametrize(("sets", "key"), [
    (["weights.integrator=euler-maruyama"], "weights.integrator"),
    (["weights.noise=symmetric"], "weights.noise"),
    (["weights.mean=identity"], "weights.mean"),
])
def test_a_matrix_sde_of_heads_that_are_not_value_aligned_names_the_key_that_chose_it(sets, key, tmp_path, capsys):
    # V = "random" under the matrix SDE had named weights.initial, left at its default, whatever key the user had set
    config = OU.replace('V = "aligned"', 'V = "random"')
    status, err, made = _simulate(tmp_path, capsys, *sets, config=config)
    assert status == 2 and f"error: {key}: " in err and "value-aligned" in err and not made, err
    status, err, made = _simulate(tmp_path, capsys, *sets, "weights.integrator=exact" if key != "weights.integrator" else
                                  "weights.initial=random-symmetric", config=config)
    if key != "weights.integrator":  # the classic per-entry OU takes non-aligned heads with the exact transition alone
        assert status == 2 and f"error: {key}: " in err, err
    else:  # random-symmetric initial heads need no aligned heads
        assert status == 0, err


def test_the_exact_integrator_alone_keeps_the_classic_ou_schedule():
    # the README had said that setting integrator away from its default switches ou to the matrix SDE; "exact" does not
    from meanfield.heads.schedules import MatrixSDESchedule, OUSchedule

    base = {"model": {"d": 2, "heads": [{"Q": 1.0, "K": 1.0, "V": "random"}]}, "weights": {"schedule": "ou"},
            "solver": {"kind": "particle"}}
    exact = build_model(load_config({**base, "weights": {"schedule": "ou", "integrator": "exact"}})).heads
    assert isinstance(exact, OUSchedule)
    aligned = {**base, "model": {"d": 2, "heads": [{"Q": 1.0, "K": 1.0, "V": "aligned"}]}}
    assert isinstance(build_model(load_config({**aligned, "weights": {"schedule": "ou", "integrator": "euler-maruyama"}})).heads,
                      MatrixSDESchedule)
