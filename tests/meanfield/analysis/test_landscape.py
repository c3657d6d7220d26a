r"""The energy landscape: Hessian against finite differences and closed forms, optimisers, merging, the clock.

Closed forms (``B = I``, mass metric :math:`g=\sum_ia_i\langle\cdot,\cdot\rangle`, Hessian operator
eigenvalues on the tangent space after removing the rotation zero modes):

* one cluster :math:`x_i=e`: :math:`-e^\beta` with multiplicity :math:`(n-1)(d-1)`, and :math:`d-1`
  zero modes (rotating :math:`e`): a maximum.
* antipodal groups, mass :math:`p` at :math:`e` (:math:`n_A` tokens) and :math:`q=1-p` at :math:`-e`
  (:math:`n_B` tokens): on each tangent coordinate the operator is
  :math:`(Lv)_i=\sum_ja_je^{\beta s_{ij}}v_j-c_iv_i` with :math:`c_A=pe^\beta-qe^{-\beta}`,
  :math:`c_B=qe^\beta-pe^{-\beta}`.  Mass-weighted mean-zero vectors inside a group give
  :math:`-c_A` (:math:`(n_A-1)(d-1)` times) and :math:`-c_B` (:math:`(n_B-1)(d-1)` times); group-constant
  vectors give the matrix :math:`e^{-\beta}\begin{pmatrix}q&q\\p&p\end{pmatrix}`, i.e. the rotation
  zero mode :math:`v_A=-v_B` and :math:`+e^{-\beta}` (:math:`v_A=v_B`), :math:`d-1` times each.  A single
  antipodal pair is a minimum, larger groups a saddle.
* the regular simplex, :math:`n=d+1`, :math:`\langle x_i,x_j\rangle=-1/d`, :math:`a_i=1/n`,
  :math:`w=e^{-\beta/d}`: with :math:`G_{ik}=\langle\xi_i,x_k\rangle` (zero diagonal, zero row sums;
  the :math:`x_k` are a tight frame, :math:`\sum_kx_kx_k^\top=\frac nd I`) the Hessian form is
  :math:`\frac{w}{n^2}[2\beta\|\mathrm{sym}\,G\|^2+\frac dn\|G^\top1\|^2]` and the metric
  :math:`\frac d{n^2}\|G\|^2` (the :math:`e^\beta` terms cancel).  Splitting :math:`G` into symmetric
  (zero row sums), antisymmetric (zero row sums) and the :math:`(n-1)`-dimensional rest gives
  :math:`\frac{2\beta w}{d}` (multiplicity :math:`(d+1)(d-2)/2`), :math:`0` (:math:`d(d-1)/2`: the
  rotations) and :math:`\frac wd\big(\frac{\beta(d+1)}d+d-1\big)` (multiplicity :math:`d`): a minimum.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import meanfield as mf
from meanfield.analysis.energy import head_energies
from meanfield.analysis.landscape import (
    classify,
    gradient_clock,
    gradient_norm,
    hessian_spectrum,
    identify,
    merging_flow,
    mirror_descent,
    optimize,
    riemannian_gradient,
    riemannian_hessian,
    symmetry_algebra,
)
from meanfield.errors import ConfigError
from meanfield.geometry.mesh import initial_mass, mesh
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack


def _simplex(d: int) -> np.ndarray:
    n = d + 1
    u, _, _ = np.linalg.svd(np.eye(n) - 1.0 / n)
    x = u[:, :d]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _retract(y: np.ndarray) -> np.ndarray:
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def test_hessian_matches_finite_differences_of_the_riemannian_gradient(rng: np.random.Generator) -> None:
    n, d, beta = 6, 3, 1.7
    x = sample_uniform(n, d, seed=3)
    m = rng.standard_normal((2, d, d))
    B = 0.5 * (m + np.transpose(m, (0, 2, 1)))
    a = rng.uniform(0.5, 1.5, n)
    a /= a.sum()
    hess = riemannian_hessian(x, B, beta=beta, weights=a)
    np.testing.assert_allclose(hess, hess.T, atol=1e-14)
    for _ in range(3):
        xi = rng.standard_normal((n, d))
        xi -= np.einsum("ij,ij->i", xi, x)[:, None] * x
        eps = 1e-5
        dg = (riemannian_gradient(_retract(x + eps * xi), B, beta=beta, weights=a)
              - riemannian_gradient(_retract(x - eps * xi), B, beta=beta, weights=a)) / (2 * eps)
        dg -= np.einsum("ij,ij->i", dg, x)[:, None] * x  # the Levi-Civita derivative: project the ambient one
        applied = (hess @ (np.sqrt(a)[:, None] * xi).ravel()).reshape(n, d) / np.sqrt(a)[:, None]
        np.testing.assert_allclose(applied, dg, atol=1e-8 * np.abs(dg).max())


@pytest.mark.parametrize("beta", [0.0, 0.5, 3.0])
def test_single_cluster_is_a_maximum_for_the_identity(beta: float) -> None:
    n, d = 5, 3
    x = np.tile([0.0, 0.6, 0.8], (n, 1))
    a = np.array([0.1, 0.3, 0.2, 0.15, 0.25])
    s = hessian_spectrum(x, np.eye(d), beta=beta, weights=a)
    assert s.kind == "maximum" and s.zero_modes == d - 1
    np.testing.assert_allclose(s.eigenvalues, np.full((n - 1) * (d - 1), -math.exp(beta)), rtol=1e-12)
    assert s.gradient_norm == pytest.approx(0.0, abs=1e-14)


def test_a_cluster_that_coincides_to_round_off_has_the_zero_modes_of_the_exact_one(rng: np.random.Generator) -> None:
    # the search ends on tokens equal to ~1e-9: the rotation about the cluster's axis had counted as a third zero mode,
    # one negative direction was lost and the symmetry residual read 1 at a true maximum
    n, d = 12, 3
    x = np.tile([0.0, 0.6, 0.8], (n, 1)) + 1e-9 * rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    s = hessian_spectrum(x, np.eye(d), beta=4.0)
    assert s.kind == "maximum" and s.zero_modes == d - 1 and s.negative == (n - 1) * (d - 1)
    assert s.symmetry_residual < 1e-6


def test_antipodal_groups_closed_form() -> None:
    d, beta = 3, 2.0
    x = np.array([[0.0, 0.0, 1.0]] * 3 + [[0.0, 0.0, -1.0]] * 2)
    a = np.array([0.1, 0.3, 0.2, 0.15, 0.25])
    p, q = a[:3].sum(), a[3:].sum()
    s = hessian_spectrum(x, np.eye(d), beta=beta, weights=a)
    expected = np.sort(np.concatenate([
        np.full(d - 1, math.exp(-beta)),
        np.full(2 * (d - 1), -(p * math.exp(beta) - q * math.exp(-beta))),
        np.full(1 * (d - 1), -(q * math.exp(beta) - p * math.exp(-beta))),
    ]))
    assert s.kind == "saddle" and s.zero_modes == d - 1 and s.positive == d - 1
    np.testing.assert_allclose(s.eigenvalues, expected, rtol=1e-12)
    pair = hessian_spectrum(np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]), np.eye(d), beta=beta)
    assert pair.kind == "minimum" and pair.zero_modes == d - 1
    np.testing.assert_allclose(pair.eigenvalues, np.full(d - 1, math.exp(-beta)), rtol=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_equiangular_simplex_closed_form(d: int) -> None:
    beta = 1.3
    w = math.exp(-beta / d)
    s = hessian_spectrum(_simplex(d), np.eye(d), beta=beta)
    expected = np.sort(np.concatenate([
        np.full((d + 1) * (d - 2) // 2, 2 * beta * w / d),
        np.full(d, (w / d) * (beta * (d + 1) / d + d - 1)),
    ]))
    assert s.kind == "minimum" and s.zero_modes == d * (d - 1) // 2
    np.testing.assert_allclose(s.eigenvalues, expected, rtol=1e-10)
    assert s.symmetry_residual < 1e-12


def test_symmetry_algebra_dimensions() -> None:
    assert symmetry_algebra(np.eye(4)).shape[0] == 6
    assert symmetry_algebra(np.diag([1.0, 1.0, 2.0])).shape[0] == 1
    assert symmetry_algebra(np.diag([1.0, 2.0, 3.0])).shape[0] == 0
    with pytest.raises(ValueError, match="symmetric"):
        riemannian_gradient(np.eye(3), np.triu(np.ones((3, 3))), beta=1.0)


def test_a_generic_head_has_no_zero_modes_and_its_maximiser_is_a_maximum() -> None:
    B = np.diag([1.0, 0.4, -0.3])
    r = optimize(sample_uniform(6, 3, seed=4), B, beta=2.0, mode="max", gtol=1e-9)
    assert r.converged
    s = hessian_spectrum(r.x, B, beta=2.0)
    assert s.zero_modes == 0 and s.kind == "maximum"


def test_optimizer_reaches_critical_points_with_monotone_energy() -> None:
    beta = 2.0
    up = optimize(sample_uniform(7, 3, seed=1), np.eye(3), beta=beta, mode="max", gtol=1e-9)
    assert up.converged and gradient_norm(up.x, np.eye(3), beta=beta, relative=True) <= 1e-9
    assert np.all(np.diff(up.energy) >= -1e-13 * up.energy[-1])
    np.testing.assert_allclose(up.x @ up.x[0], 1.0, atol=1e-8)  # B = I: every token in one cluster
    down = optimize(sample_uniform(4, 3, seed=1), np.eye(3), beta=beta, mode="min", gtol=1e-9)
    assert down.converged and np.all(np.diff(down.energy) <= 1e-13 * down.energy[0])
    gram = down.x @ down.x.T
    np.testing.assert_allclose(gram[~np.eye(4, dtype=bool)], -1.0 / 3.0, atol=1e-7)  # n = d + 1: the simplex
    np.testing.assert_allclose(down.energy[-1], head_energies(down.x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]),
                                                              beta=beta)[0], rtol=1e-13)


@pytest.mark.parametrize("mode", ["min", "max"])
def test_mirror_descent_conserves_mass_and_is_monotone(mode: str) -> None:
    msh = mesh(300)
    start = initial_mass(msh, "vmf", mean=[0.0, 0.0, 1.0], kappa=3.0)
    r = mirror_descent(msh, np.eye(3), beta=2.0, mass=start, mode=mode, max_iter=60)
    assert abs(float(np.sum(r.mass)) - 1.0) <= 1e-14 and np.all(r.mass > 0)
    steps = np.diff(r.energy)
    scale = float(np.max(np.abs(r.energy)))
    assert np.all(steps <= 1e-13 * scale) if mode == "min" else np.all(steps >= -1e-13 * scale)
    assert r.gap[-1] < 0.1 * r.gap[0]
    energy = head_energies(msh.points, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=2.0, weights=r.mass)[0]
    np.testing.assert_allclose(r.energy[-1], energy, rtol=1e-12)
    if mode == "min":  # B = I: the minimiser over densities is the uniform density
        uniform = msh.areas / msh.areas.sum()
        assert np.max(np.abs(r.mass - uniform)) < np.max(np.abs(start - uniform)) / 10


def test_identify_links_chains_of_close_tokens() -> None:
    angles = np.array([0.0, 0.01, 0.02, 1.0, 1.005, 2.0])
    groups = identify(np.c_[np.cos(angles), np.sin(angles)], 0.015)
    assert [g.tolist() for g in groups] == [[0, 1, 2], [3, 4]]


def _cluster_setup(beta: float, sizes: tuple[int, ...], gaps: tuple[float, ...], spread: float):
    centres = np.concatenate([[0.0], np.cumsum(gaps)])
    rng = np.random.default_rng(0)
    angles = np.concatenate([c + spread * rng.standard_normal(k) for c, k in zip(centres, sizes)])
    return np.c_[np.cos(angles), np.sin(angles)], np.c_[np.cos(centres), np.sin(centres)], np.array(sizes) / sum(sizes)


def test_merging_model_conserves_mass_and_climbs() -> None:
    model = mf.Model(d=2, beta=30.0, attention="unnormalized")
    _, centres, masses = _cluster_setup(30.0, (2, 3, 1, 4), (0.3, 0.35, 0.45), 0.0)
    r = merging_flow(centres, masses, model, threshold=0.01, ds=4e-3, s_final=0.6, save_every=0.02)
    for m in r.masses:
        assert abs(float(np.sum(m)) - 1.0) <= 2e-16 * len(masses)
    assert np.all(np.diff(r.atoms) <= 0) and r.atoms[-1] < r.atoms[0]
    assert np.all(np.diff(r.energy) >= -1e-12 * r.energy[-1])
    assert len(r.merges) == r.atoms[0] - r.atoms[-1]
    counts = r.masses[-1] * 10  # every atom's mass is a sum of the initial masses k/10
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-13)


def test_staircase_of_the_tokens_matches_the_merging_model(tmp_path) -> None:
    """Tokens in 3 tight clusters under the gradient clock against 3 merging atoms.

    Tolerance: the jumps (energy half-way between the levels Σ m_c²) within 0.03 in s, the
    cluster spread (0.005) and the identification radius 2·dt·√(2n) ≈ 0.02 being the error sources.
    """
    beta = 30.0
    x0, centres, masses = _cluster_setup(beta, (3, 5, 4), (0.3, 0.4), 0.005)
    np.save(tmp_path / "x0.npy", x0)
    run = mf.simulate({
        "model": {"d": 2, "beta": beta, "attention": "unnormalized", "heads": [{"V": "aligned"}]},
        "init": {"kind": "file", "path": str(tmp_path / "x0.npy")},
        "solver": {"clock": "gradient", "dt": 2e-3, "t_final": 0.5, "save_every": 0.01},
    })
    reduced = merging_flow(centres, masses, run.model, threshold=0.05 / math.sqrt(beta), ds=2e-3, s_final=0.5,
                           save_every=0.01)
    scale = 2 * beta * math.exp(-beta)
    first = int(np.argmax(reduced.atoms == 2))  # the first merge: 3 atoms -> 2
    assert first > 0
    levels = [float(np.sum(masses ** 2)), float(np.sum(reduced.masses[first] ** 2))]

    def crossing(s: np.ndarray, e: np.ndarray) -> float:
        mid = 0.5 * sum(levels)
        k = int(np.argmax(e >= mid))
        return float(s[k - 1] + (mid - e[k - 1]) * (s[k] - s[k - 1]) / (e[k] - e[k - 1]))

    tokens = run.diagnostics["energy"] * scale
    assert np.all(np.diff(tokens) >= -1e-12 * tokens[-1])
    assert abs(crossing(run.t, tokens) - crossing(reduced.s, reduced.energy * scale)) <= 0.03
    np.testing.assert_allclose(tokens[-1], reduced.energy[-1] * scale, atol=1e-2)
    # the clock is the arc length: dE/ds = |grad E| for this gradient flow, so E(s) - E(0) = ∫ speed ds
    speed = run.diagnostics["clock_speed"]
    rise = float(np.sum(0.5 * (speed[1:] + speed[:-1]) * np.diff(run.t)))
    np.testing.assert_allclose(rise, run.diagnostics["energy"][-1] - run.diagnostics["energy"][0], rtol=2e-2)
    physical = run.diagnostics["clock_time"]
    physical = physical[np.isfinite(physical)]  # inf once every token is in one cluster: the maximum, at finite s
    assert physical.size > 10 and np.all(np.diff(physical) > 0)


def test_clock_keys_are_checked() -> None:
    with pytest.raises(ConfigError, match="solver.clock"):
        mf.load_config({"solver": {"clock": "arc"}})
    with pytest.raises(ConfigError, match="solver.clock_merge"):
        mf.load_config({"solver": {"clock_merge": -1.0}})

    class Setup:
        stepper = object()
        trackers: list = []

    with pytest.raises(ConfigError, match="solver.clock"):
        gradient_clock(Setup(), schedule="ou")
    with pytest.raises(ConfigError, match="solver.clock"):
        gradient_clock(Setup())


def test_a_gradient_clock_run_writes_its_file_and_resumes_with_its_physical_time(tmp_path):
    """The clock's diagnostics go to the HDF5 file, and --resume continues the physical time (not from 0)."""
    import meanfield as mf

    cfg = {"model": {"beta": 2.0, "attention": "unnormalized"}, "init": {"n": 8},
           "solver": {"clock": "gradient", "dt": 0.01, "t_final": 0.3, "save_every": 0.1}, "track": {"energy": False}}
    first = mf.simulate(cfg, out=tmp_path / "a.h5")
    assert np.all(np.diff(first.diagnostics["clock_time"]) > 0)
    longer = {**cfg, "solver": {**cfg["solver"], "t_final": 0.6}}
    resumed = mf.simulate(longer, out=tmp_path / "a.h5", resume=True)
    straight = mf.simulate(longer, out=tmp_path / "b.h5")
    np.testing.assert_allclose(resumed.diagnostics["clock_time"], straight.diagnostics["clock_time"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(resumed.x), np.asarray(straight.x), rtol=0, atol=1e-14)


def test_the_default_merge_radius_is_capped_at_a_fraction_of_the_kernel_width():
    """Uncapped, 2·dt·√(2n) (0.45 rad for 64 tokens at dt = 0.02) had made the cloud one point in the first step,
    the run completing without a word; the cap is 0.05 β^(-1/2), with a note where it binds."""
    import meanfield as mf
    from meanfield.errors import ConfigNote

    cfg = {"model": {"beta": 4.0}, "init": {"kind": "uniform", "n": 64, "seed": 0},
           "solver": {"clock": "gradient", "dt": 0.02, "t_final": 0.02, "save_every": 0.02}}
    with pytest.warns(ConfigNote, match=r"solver.dt = 0.02 in the gradient clock .* merge radius 0.025 \(0.05 β\^\(-1/2\)\)"):
        run = mf.simulate(cfg)
    x = np.asarray(run.final)
    # a pair of the uniform cloud closer than 0.025 is identified; the cloud is not (it had been one point)
    distinct = len(np.unique(np.round(x, 12), axis=0))
    assert distinct >= 60 and run.info.get("clock_merges", 0) == 64 - distinct
    with warnings.catch_warnings():  # a radius of the user's own: no note
        warnings.simplefilter("error", ConfigNote)
        mf.simulate({**cfg, "solver": {**cfg["solver"], "clock_merge": 1e-3}})
    # where the stall distance (32 tokens at dt = 0.0005: 0.0005·√64 = 0.004 rad) is inside the capped radius (0.0079 at
    # β = 40) but without the default's factor 2, the note had said "near 0.004 rad, beyond the merge radius 0.00791"
    inside = {"model": {"beta": 40.0}, "init": {"kind": "uniform", "n": 32, "seed": 0},
              "solver": {"clock": "gradient", "dt": 5e-4, "t_final": 5e-4, "save_every": 5e-4}}
    with pytest.warns(ConfigNote, match=r"near 0.004 rad, inside the merge radius 0.00791 .* less than the default's factor 2") as notes:
        mf.simulate(inside)
    assert not any("beyond" in str(note.message) for note in notes)
    # rk45 in the clock takes fixed steps: its tolerances are noted as unused (they had been ignored in silence)
    with pytest.warns(ConfigNote, match=r"solver.rtol not used .* fixed steps of solver.dt, rk45's without error control"):
        mf.load_config({**cfg, "solver": {**cfg["solver"], "method": "rk45", "rtol": 1e-3, "clock_merge": 1e-3}})


MEAN_HEADS = {
    "model": {"d": 3, "beta": 3.0, "attention": "unnormalized", "combine": "mean", "heads": [
        {"Q": "identity", "K": [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.5]], "V": "aligned"},
        {"Q": "identity", "K": [[0.5, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 2.0]], "V": "aligned"}]},
    "init": {"kind": "uniform", "n": 6, "seed": 1},
}


def test_landscape_search_of_averaged_heads_finds_a_rest_point_of_the_model(tmp_path, capsys):
    # combine = "mean" averages the heads' velocities outside the exponentials: B/H inside them had been another model,
    # whose "minimum" the run's own velocity left at 0.44
    import json

    from meanfield.build import build_model
    from meanfield.cli import main

    config = tmp_path / "mean.toml"
    _write_toml(MEAN_HEADS, config)
    out = tmp_path / "critical.npy"
    assert main(["landscape", "search", str(config), "--mode", "min", "--max-iter", "3000", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["converged"] and report["kind"] == "minimum"
    cfg = mf.load_config(MEAN_HEADS)
    model = build_model(cfg)
    x = np.load(out)
    assert np.abs(model.velocity(x, 0.0)).max() < 1e-6
    start = mf.simulate(MEAN_HEADS, **{"solver.t_final": 0.01, "solver.save_every": 0.01})
    np.testing.assert_allclose(report["energy_start"], start.diagnostics["energy"][0], rtol=1e-12)  # the model's energy


def test_landscape_refuses_a_beta_whose_exponentials_overflow(tmp_path, capsys):
    # NaN had passed the gradient test: "saddle" with gradient_norm = inf, "converged" in 0 iterations
    from meanfield.cli import main

    config = tmp_path / "hot.toml"
    _write_toml({"model": {"beta": 500.0}, "init": {"n": 8}}, config)
    assert main(["landscape", "search", str(config)]) == 2
    assert "error: model.beta: β = 500" in capsys.readouterr().err
    run = tmp_path / "hot.h5"
    mf.simulate({"model": {"beta": 500.0}, "init": {"n": 8}, "solver": {"t_final": 0.1, "save_every": 0.1}}, out=run)
    assert main(["landscape", "classify", str(run), "--frame", "0"]) == 2
    assert "error: model.beta" in capsys.readouterr().err
    folder = tmp_path / "x.npy"
    folder.mkdir()
    assert main(["landscape", "search", str(config), "--set", "model.beta=1", "--out", str(folder)]) == 2  # before the search
    assert "error: --out" in capsys.readouterr().err


def test_landscape_classify_refuses_a_frame_past_either_end(tmp_path, capsys):
    # --frame T of a T-frame run had to exit 2; with the bound off by one it classified frame 0 (T % T) with exit 0
    from meanfield.cli import main

    run = tmp_path / "five.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 1.0, "save_every": 0.25}}, out=run)
    for frame in ("5", "-6"):
        assert main(["landscape", "classify", str(run), "--frame", frame]) == 2
        assert "error: --frame" in capsys.readouterr().err
    assert main(["landscape", "classify", str(run), "--frame", "-5", "--json"]) == 0  # the first, from the end
    assert '"t": 0.0' in capsys.readouterr().out


def _write_toml(cfg: dict, path) -> None:
    import json

    lines = []
    for section, keys in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items() if k != "heads"]
        for head in keys.get("heads", []):
            lines.append(f"[[{section}.heads]]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in head.items()]
    path.write_text("\n".join(lines) + "\n")


def test_landscape_classify_weighs_a_runs_tokens_by_their_masses(tmp_path, capsys):
    # the tokens of a run continued from a grid frame carry the cells' masses; classify had read them as 1/n each
    import json

    from meanfield.analysis.energy import energy_multi
    from meanfield.cli import main
    from meanfield.heads import HeadStack

    grid = tmp_path / "grid.h5"
    mf.simulate({"model": {"beta": 1.0}, "init": {"kind": "vmf", "kappa": 3.0}, "grid": {"cells": 60},
                 "solver": {"kind": "grid", "method": "ssprk3", "t_final": 0.1, "save_every": 0.1}}, out=grid)
    tokens = tmp_path / "tokens.h5"
    run = mf.simulate({"model": {"beta": 1.0}, "init": {"kind": "run", "path": str(grid), "time": 0.1},
                       "solver": {"t_final": 0.2, "save_every": 0.1}}, out=tokens)
    masses = np.asarray(run.token_masses)
    assert np.ptp(masses) > 0.1 * masses.mean()  # unequal: the check below tells the two apart
    assert main(["landscape", "classify", str(tokens), "--frame", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    x = run.x[0]
    expected = energy_multi(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=1.0, weights=masses)
    np.testing.assert_allclose(report["energy"], expected, rtol=1e-12)
    assert abs(report["energy"] - energy_multi(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=1.0)) > 1e-3


def test_landscape_classify_judges_a_frame_of_moving_heads_against_the_heads_of_its_time(tmp_path, capsys):
    # a frame at t = 1 had been judged against the heads of t = 0
    import json

    from meanfield.cli import main

    out = tmp_path / "osc.h5"
    run = mf.simulate(out=out, t_final=1.0, save_every=0.5, **{
        "init.n": 12, "model.beta": 1.0, "model.attention": "unnormalized", "weights.schedule": "oscillating",
        "weights.amplitude": 0.8, "weights.omega": 2.0})
    assert main(["landscape", "classify", str(out), "--frame", "-1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    t = float(run.t[-1])
    assert report["t"] == t == 1.0
    expected = hessian_spectrum(np.asarray(run.x[-1], dtype=float), run.model.heads.at(t), beta=1.0)
    at_start = hessian_spectrum(np.asarray(run.x[-1], dtype=float), run.model.heads.at(0.0), beta=1.0)
    assert abs(expected.energy - at_start.energy) > 1e-2  # the heads of t = 0 give another energy
    np.testing.assert_allclose(report["energy"], expected.energy, rtol=1e-12, atol=0)
    np.testing.assert_allclose(report["gradient_norm"], expected.gradient_norm, rtol=1e-9, atol=1e-15)


def test_landscape_refuses_relu_attention_and_saves_into_a_new_folder(tmp_path, capsys):
    from meanfield.cli import main

    config = tmp_path / "relu.toml"
    _write_toml({"model": {"attention": "relu"}, "init": {"n": 6}}, config)
    assert main(["landscape", "search", str(config)]) == 2  # its energy is another model's: a rest point read "not critical"
    assert "error: model.attention" in capsys.readouterr().err
    plain = tmp_path / "plain.toml"
    _write_toml({"init": {"n": 6}}, plain)
    out = tmp_path / "new" / "folder" / "x.npy"
    assert main(["landscape", "search", str(plain), "--max-iter", "200", "--out", str(out)]) == 0  # np.save had failed after the search
    assert np.load(out).shape == (6, 3)


def test_landscape_refuses_multi_head_softmax_tokens_off_the_sphere_and_moving_heads(tmp_path, capsys):
    # softmax divides each head by its own Z_i^h: a 2-head run at rest had read "not critical"; a peri-LN run (tokens
    # of norm 2.9) had been given a verdict; a schedule had been searched at t = 0 in silence
    from meanfield.cli import main

    two_softmax = {**MEAN_HEADS, "model": {**MEAN_HEADS["model"], "attention": "softmax", "combine": "sum"}}
    config = tmp_path / "soft.toml"
    _write_toml(two_softmax, config)
    assert main(["landscape", "search", str(config)]) == 2
    assert "error: model.attention: softmax with 2 heads" in capsys.readouterr().err
    run = tmp_path / "soft.h5"
    mf.simulate(two_softmax, out=run, **{"solver.t_final": 0.1, "solver.save_every": 0.1})
    assert main(["landscape", "classify", str(run)]) == 2
    assert "error: model.attention" in capsys.readouterr().err
    one_softmax = {"model": {"attention": "softmax", "beta": 2.0}, "init": {"n": 6}}
    _write_toml(one_softmax, config)
    assert main(["landscape", "search", str(config), "--max-iter", "200"]) == 0  # one head: E's critical points
    capsys.readouterr()

    peri = tmp_path / "peri.h5"
    mf.simulate({"model": {"norm": "peri", "beta": 1.0}, "init": {"n": 6}, "solver": {"t_final": 0.5, "save_every": 0.5}},
                out=peri)
    assert np.abs(np.linalg.norm(mf.load(peri).x[-1], axis=1) - 1).max() > 1e-3  # off the sphere indeed
    assert main(["landscape", "classify", str(peri)]) == 2
    assert "error: model.norm" in capsys.readouterr().err
    run_solved = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), sample_uniform(6, 3, seed=0)),
                          mf.ParticleSolver(dt=0.05, norm="pre"), t_final=0.1, save_every=0.1)
    assert run_solved.norm == "pre" and mf.load(run).norm == "post"  # a run without config keeps it in its info
    assert main(["landscape", "search", str(config), "--set", "model.norm=pre"]) == 2
    assert "error: model.norm" in capsys.readouterr().err
    assert main(["landscape", "search", str(config), "--set", "weights.schedule=oscillating"]) == 2
    assert "error: weights.schedule" in capsys.readouterr().err
    # the causal mask: not a gradient flow of E, a run at rest had read "not critical"; search had ignored the mask
    masked = tmp_path / "masked.h5"
    mf.simulate({"model": {"mask": "causal", "beta": 1.0, "direction": "descent"}, "init": {"n": 5},
                 "solver": {"t_final": 0.2, "save_every": 0.2}}, out=masked)
    assert main(["landscape", "classify", str(masked)]) == 2
    assert "error: model.mask: the causal mask's flow is not the gradient flow" in capsys.readouterr().err
    assert main(["landscape", "search", str(config), "--set", "model.mask=causal", "--max-iter", "50"]) == 2
    assert "error: model.mask" in capsys.readouterr().err
    # nGPT: its tokens stay on the sphere and rest where P⊥A = 0, as Post-LN's (it had been refused)
    ngpt = tmp_path / "ngpt.h5"
    mf.simulate({"model": {"norm": "ngpt", "beta": 1.0}, "init": {"n": 6}, "solver": {"t_final": 0.2, "save_every": 0.2}},
                out=ngpt)
    assert main(["landscape", "classify", str(ngpt)]) == 0
    capsys.readouterr()


def test_landscape_search_names_out_when_the_file_system_refuses_it(tmp_path, capsys, monkeypatch):
    # the write comes after the search: a refusal there had been a traceback (exit 1) or an unnamed error
    from meanfield.cli import main

    config = tmp_path / "plain.toml"
    _write_toml({"init": {"n": 6}}, config)
    out = tmp_path / "x.npy"
    out.write_bytes(b"older")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("os.replace", refuse)
    assert main(["landscape", "search", str(config), "--max-iter", "50", "--out", str(out)]) == 2
    assert "error: --out: cannot write" in capsys.readouterr().err
    assert out.read_bytes() == b"older" and sorted(p.name for p in tmp_path.iterdir()) == ["plain.toml", "x.npy"]


def test_the_gradient_clock_is_not_taken_for_a_step_too_long_for_the_field():
    """The speed tracker multiplied the physical speed by the clock's step: at β = 40 it warned of moves of 1e12 rad
    (metastability_staircase); a clock step moves a token by at most h/√a_i, and the physical-time run still warns."""
    import meanfield as mf
    from meanfield.errors import MeanfieldWarning

    cfg = {"model": {"beta": 40.0, "attention": "unnormalized"}, "init": {"n": 8},
           "solver": {"clock": "gradient", "dt": 0.01, "t_final": 0.02, "save_every": 0.01}, "track": {"energy": False}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", MeanfieldWarning)
        mf.simulate(cfg)
    with pytest.warns(MeanfieldWarning, match="moves tokens by up to"):
        mf.simulate({**cfg, "solver": {**cfg["solver"], "clock": "time", "t_final": 0.01}})


# --------------------------------------------------------------------------- #
# identification bounded by the merge radius, its cost, the clock's rest, the verdict's scale, unit tokens
# --------------------------------------------------------------------------- #
def _circle(angles: np.ndarray) -> np.ndarray:
    return np.c_[np.cos(angles), np.sin(angles)]


def _clock_run(d: int, n: int, *, dt: float = 1e-3, beta: float = 1.0):
    cfg = {"model": {"d": d, "beta": beta, "attention": "unnormalized", "heads": [{"V": "aligned"}]},
           "init": {"kind": "uniform", "n": n, "seed": 0},
           "solver": {"kind": "particle", "method": "rk4", "clock": "gradient", "dt": dt, "t_final": dt, "save_every": dt}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stall note of the capped radius
        return mf.simulate(cfg)


def _distinct(x: np.ndarray) -> int:
    return len(np.unique(np.round(np.asarray(x), 12), axis=0))


def test_identify_leaves_a_chain_longer_than_the_radius():
    # linked as a whole (single linkage), a chain of neighbours 0.01 apart had been one group of 11 at r = 0.015, its
    # ends moved by 0.05 to the mean
    x = _circle(np.linspace(0.0, 0.1, 11))
    assert identify(x, 0.015) == []
    assert [g.tolist() for g in identify(x, 0.06)] == [list(range(11))]  # all within 0.06 of the middle: one cluster


def test_identification_moves_no_token_by_more_than_the_radius(rng: np.random.Generator):
    # a dense cloud with tight clusters, filaments and coincident tokens, unequal masses: every group lies within r
    # of its mass-weighted mean direction, and the tight clusters (isolated by more than r) are found whole
    d, r = 3, 0.05
    pole, spot = np.array([0.0, 0.0, 1.0]), np.array([0.6, 0.0, -0.8])
    cloud = rng.standard_normal((3000, d))
    cloud /= np.linalg.norm(cloud, axis=1, keepdims=True)
    cloud = cloud[(cloud @ pole < math.cos(0.3)) & (cloud @ spot < math.cos(0.3))][:3000]  # the clusters stand apart
    angles = np.linspace(0, 0.6, 80)
    filament = np.c_[np.cos(angles), np.sin(angles), np.zeros(80)]
    cluster = pole + 0.004 * rng.standard_normal((40, d))
    copies = np.tile(spot, (25, 1))
    x = np.concatenate([cloud, filament, cluster, copies])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    start = len(cloud) + 80
    a = rng.uniform(0.5, 2.0, x.shape[0])
    a /= a.sum()
    groups = identify(x, r, weights=a)
    assert groups
    for g in groups:
        mean = a[g] @ x[g]
        mean /= np.linalg.norm(mean)
        assert np.arccos(np.clip(x[g] @ mean, -1, 1)).max() <= r + 1e-12
    members = {tuple(g) for g in groups}
    assert tuple(range(start, start + 40)) in members and tuple(range(start + 40, start + 65)) in members
    # the gradient clock's identification: no token moved by more than r
    from meanfield.analysis.landscape import GradientClock

    class Stepper:
        model = mf.Model(d=d, beta=1.0, attention="unnormalized")
        weights, dt, scheme = a, 1e-3, None
        stats: dict = {}

        def field(self, z, t):  # noqa: ARG002 - not called by identify
            raise AssertionError

    clock = GradientClock(Stepper(), merge=r)
    moved = clock.identify(x)
    assert np.arccos(np.clip(np.einsum("ij,ij->i", moved, x), -1, 1)).max() <= r + 1e-12
    assert clock.stats["clock_merges"] == sum(1 for g in groups if np.ptp(x[g], axis=0).max() > 0)
    np.testing.assert_array_equal(moved[start + 40:], x[start + 40:])  # already one point: left as it is


def test_the_gradient_clock_keeps_a_dense_cloud():
    """The reviewer's reproducers: a chain through a cloud denser than r had been set to one point, the energy at its
    maximum e^β/(2β) after one clock step of 0.001 (1500 tokens on the circle; 8000 on S² had become 126 points)."""
    circle = _clock_run(2, 1500)
    energy = circle.diagnostics["energy"]
    assert _distinct(circle.x[-1]) == 1500
    assert abs(energy[1] - energy[0]) <= 1e-3 * energy[0] and energy[1] < 0.7 * math.exp(1.0) / 2
    sphere = _clock_run(3, 8000)
    energy = sphere.diagnostics["energy"]
    assert _distinct(sphere.x[-1]) >= 7800
    assert abs(energy[1] - energy[0]) <= 1e-3 * energy[0]
    assert 0 < sphere.info["clock_merges"] <= 8000 - _distinct(sphere.x[-1])  # small groups of the cloud, each within r


def test_the_stall_notes_advice_gives_no_note_and_keeps_the_cloud():
    """The note's smaller dt brings the stall inside the radius (it had been given where the cloud was merged at any dt)."""
    from meanfield.errors import ConfigNote

    cfg = {"model": {"d": 2, "beta": 1.0, "attention": "unnormalized", "heads": [{"V": "aligned"}]},
           "init": {"kind": "uniform", "n": 1500, "seed": 0},
           "solver": {"clock": "gradient", "dt": 1e-3, "t_final": 1e-3, "save_every": 1e-3}}
    with pytest.warns(ConfigNote, match=r"a solver.dt below 0.00046 avoids that \(or a solver.clock_merge of at least 0.11"):
        mf.simulate(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNote)
        run = mf.simulate({**cfg, "solver": {**cfg["solver"], "dt": 4.5e-4, "t_final": 4.5e-4, "save_every": 4.5e-4}})
    assert _distinct(run.x[-1]) == 1500


def test_identify_takes_a_collapsed_cluster_as_one_point(rng: np.random.Generator):
    # its k²/2 pairs had been a Python loop at every clock step (4.4 s a call at k = 2000); the result is checked here
    k = 3000
    x = np.concatenate([np.tile([1.0, 0.0, 0.0], (k, 1)), [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    groups = identify(x, 0.01)
    assert len(groups) == 1 and np.array_equal(groups[0], np.arange(k))
    noisy = np.tile([0.0, 0.6, 0.8], (k, 1)) + 1e-16 * rng.standard_normal((k, 3))  # equal to round-off
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    groups = identify(np.concatenate([noisy, [[1.0, 0.0, 0.0]]]), 1e-6)
    assert len(groups) == 1 and np.array_equal(groups[0], np.arange(k))


def test_the_clock_time_is_infinite_once_the_field_is_round_off(tmp_path):
    """After the last collapse ‖F‖ is round-off (5e-16): a step had added h/‖F‖, clock_time 4e14 ... 4.5e15."""
    np.save(tmp_path / "x2.npy", np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    run = mf.simulate({"model": {"d": 3, "beta": 1.0, "attention": "unnormalized", "heads": [{"V": "aligned"}]},
                       "init": {"kind": "file", "path": str(tmp_path / "x2.npy")},
                       "solver": {"clock": "gradient", "dt": 1e-3, "t_final": 3.0, "save_every": 0.25}})
    time, speed = run.diagnostics["clock_time"], run.diagnostics["clock_speed"]
    collapsed = np.array([_distinct(x) == 1 for x in run.x])
    assert collapsed[-1] and not collapsed[0]
    finite = np.isfinite(time)
    assert np.array_equal(finite, ~collapsed) and np.all(np.diff(time[finite]) > 0) and time[finite].max() < 10
    assert np.all(speed[collapsed] == 0)
    np.testing.assert_array_equal(run.x[-1], run.x[int(np.argmax(collapsed))])  # at rest
    # the reduced model: two antipodal atoms are a critical point from the start
    model = mf.Model(d=2, beta=2.0, attention="unnormalized")
    reduced = merging_flow(np.array([[1.0, 0.0], [-1.0, 0.0]]), np.array([0.5, 0.5]), model, threshold=0.01, ds=0.01,
                           s_final=0.05)
    assert np.all(np.isinf(reduced.time[1:])) and np.array_equal(reduced.positions[-1], reduced.positions[0])


def test_a_critical_point_where_the_field_cancels_is_critical():
    # B indefinite: the minimiser found has every s_ij ~ 0, so u ~ 0 and |grad E| / |u| is round-off over round-off:
    # optimize had run 3358 iterations unconverged and hessian_spectrum said "not critical" (relative gradient 2.4e-4)
    B = np.diag([1.0, 1.0, -0.5])
    r = optimize(sample_uniform(6, 3, seed=2), B, beta=1.0, mode="min")
    assert r.converged and hessian_spectrum(r.x, B, beta=1.0).critical
    r = optimize(sample_uniform(6, 3, seed=2), B, beta=1.0, mode="min", gtol=1e-12, max_iter=10000)
    s = hessian_spectrum(r.x, B, beta=1.0)
    assert r.converged and s.kind == "degenerate" and s.relative_gradient <= 1e-12  # a family of minimisers: E = 1/2
    assert gradient_norm(r.x, B, beta=1.0, relative=True) > 1e-6  # the tangent fraction of u, no criticality measure here
    np.testing.assert_allclose(r.energy[-1], 0.5, rtol=1e-12)


def test_the_landscape_refuses_tokens_off_the_sphere():
    # 3·x had been given a verdict and the energy 896
    x = 3 * sample_uniform(5, 3, seed=0)
    for call in (lambda: hessian_spectrum(x, np.eye(3), beta=1.0), lambda: riemannian_gradient(x, np.eye(3), beta=1.0),
                 lambda: riemannian_hessian(x, np.eye(3), beta=1.0), lambda: gradient_norm(x, np.eye(3), beta=1.0),
                 lambda: classify(x, np.eye(3), beta=1.0), lambda: identify(x, 0.1)):
        with pytest.raises(ValueError, match=r"x must hold unit tokens .* row \d has norm 3"):
            call()
    near = sample_uniform(5, 3, seed=0) * (1 + 1e-12)
    assert hessian_spectrum(near, np.eye(3), beta=1.0).kind == hessian_spectrum(near / (1 + 1e-12), np.eye(3), beta=1.0).kind
    # optimize says that it normalises its start: 3·x starts where x does
    np.testing.assert_allclose(optimize(x, np.eye(3), beta=1.0, max_iter=5).x,
                               optimize(x / 3, np.eye(3), beta=1.0, max_iter=5).x, atol=1e-12)


def test_landscape_search_starts_from_a_stored_frame_with_its_masses(tmp_path, capsys):
    # init.kind = "run" had been refused as "not a particle initial measure"; simulate starts from such a frame
    import json

    from meanfield.analysis.energy import energy_multi
    from meanfield.cli import main
    from meanfield.io.source_frame import source_tokens

    grid = tmp_path / "grid.h5"
    mf.simulate({"model": {"beta": 1.0}, "init": {"kind": "vmf", "kappa": 3.0}, "grid": {"cells": 60},
                 "solver": {"kind": "grid", "method": "ssprk3", "t_final": 0.2, "save_every": 0.1}}, out=grid)
    config = tmp_path / "search.toml"
    _write_toml({"model": {"beta": 1.0, "attention": "unnormalized", "heads": [{"V": "aligned"}]},
                 "init": {"kind": "run", "path": "grid.h5", "time": 0.1}, "solver": {"t_final": 1.0}}, config)
    assert main(["landscape", "search", str(config), "--max-iter", "50", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    frame = source_tokens(grid, 0.1)
    assert frame.weights is not None and np.ptp(frame.weights) > 0.1 * frame.weights.mean()
    stack = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    np.testing.assert_allclose(report["energy_start"], energy_multi(frame.tokens, stack, beta=1.0, weights=frame.weights),
                               rtol=1e-12)
    assert abs(report["energy_start"] - energy_multi(frame.tokens, stack, beta=1.0)) > 1e-3  # the masses were kept
    # a frame after solver.t_final: the key is named, with what the search makes of it
    assert main(["landscape", "search", str(config), "--set", "solver.t_final=0.05"]) == 2
    assert "error: solver.t_final: " in (err := capsys.readouterr().err) and "any later t_final will do" in err


def test_staircase_levels_merge_at_the_mass_weighted_centre():
    # masses (.6, .1, .1, .2) at angles (0, .2, .62, −.45) on a great circle: the first merge's centre, at
    # atan2(.1 sin .2, .6 + .1 cos .2) ≈ 0.028, is nearer −.45 than .62; the unweighted midpoint (0.1) is nearer .62
    # and had given the levels [.42, .54, .68, 1] (mut3 L7).  Reference: the same greedy merge in angles, by hand
    from meanfield.analysis.landscape import staircase_levels

    masses = [0.6, 0.1, 0.1, 0.2]
    angles = [0.0, 0.2, 0.62, -0.45]
    centres = np.array([[math.cos(t), math.sin(t), 0.0] for t in angles])
    m, th = list(masses), list(angles)
    levels = [sum(v * v for v in m)]
    while len(m) > 1:
        gap = lambda i, j: abs(math.remainder(th[i] - th[j], 2 * math.pi))  # noqa: E731
        i, j = min(((i, j) for i in range(len(m)) for j in range(i + 1, len(m))), key=lambda p: gap(*p))
        th[i] = math.atan2(m[i] * math.sin(th[i]) + m[j] * math.sin(th[j]), m[i] * math.cos(th[i]) + m[j] * math.cos(th[j]))
        m[i] += m[j]
        del m[j], th[j]
        levels.append(sum(v * v for v in m))
    np.testing.assert_allclose(levels, [0.42, 0.54, 0.82, 1.0], rtol=1e-14)
    np.testing.assert_allclose(staircase_levels(np.array(masses), centres), levels, rtol=1e-14)
    np.testing.assert_allclose(staircase_levels(5 * np.array(masses), 3 * centres), levels, rtol=1e-14)  # any scale
