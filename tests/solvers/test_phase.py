"""Phase diagrams over random initialisations (meanfield.solvers.phase, meanfield.kernels.batched, ``meanfield phase``).

The batched kernel is checked against its NumPy twin; a batch against its systems
run one by one with the ordinary particle solver; the cluster count against
scipy's connected components and constructed clouds; the Gram rank against
``numpy.linalg.matrix_rank`` and orthogonal clusters; the CLI end to end.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

import meanfield as mf
from meanfield.cli import main as cli_main
from meanfield.errors import ConfigError
from meanfield.geometry.sphere import normalize, sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels.batched import velocity_batched, velocity_batched_numpy
from meanfield.solvers.loop import save_times
from meanfield.solvers.phase import (
    PHASE_COLUMNS, check_phase_config, cluster_count, gram_rank, pair_fraction, phase_diagram, run_batch,
)
from meanfield.solvers.sweep import TaskPool

TINY_TOML = """
[model]
d = 3
beta = 1.0

[init]
kind = "uniform"
n = 12
seed = 3

[solver]
method = "rk4"
dt = 0.1
t_final = 2.0
save_every = 0.5

[phase]
betas = [0.5, 2.0, 6.0]
samples = 6
batch = 4
"""


def _clouds(systems: int, n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.stack([sample_uniform(n, d, seed=seed + s) for s in range(systems)])


# --------------------------------------------------------------------------- #
# the batched kernel against its NumPy twin
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("per_system", [False, True])
def test_batched_kernel_equals_its_numpy_twin(rng, kind, H, per_system):
    systems, n, d = 7, 19, 3
    x = _clouds(systems, n, d, seed=11)
    shape = (systems, H, d, d) if per_system else (H, d, d)
    B = rng.standard_normal(shape)
    V = rng.standard_normal(shape)
    beta = rng.uniform(0.0, 6.0, systems)  # one β per system
    for combine in ("sum", "mean"):
        fast = velocity_batched(x, B, V, beta=beta, kind=kind, combine=combine)
        twin = velocity_batched_numpy(x, B, V, beta=beta, kind=kind, combine=combine)
        np.testing.assert_allclose(fast, twin, rtol=1e-12, atol=1e-13 * np.max(np.abs(twin)))


def test_batched_kernel_in_other_dimensions_and_each_system_is_the_ordinary_kernel(rng):
    from meanfield.kernels.reference import velocity_numpy

    systems, n, d, H = 5, 9, 5, 2
    x = _clouds(systems, n, d, seed=2)
    B = rng.standard_normal((systems, H, d, d))
    V = rng.standard_normal((systems, H, d, d))
    beta = np.array([0.0, 0.5, 1.0, 3.0, 8.0])
    for kind in ("softmax", "unnormalized"):
        fast = velocity_batched(x, B, V, beta=beta, kind=kind)
        one_by_one = np.stack([velocity_numpy(x[b], HeadStack(B=B[b], V=V[b]), beta=beta[b], kind=kind) for b in range(systems)])
        np.testing.assert_allclose(fast, one_by_one, rtol=1e-12, atol=1e-13 * np.max(np.abs(one_by_one)))



def test_batched_kernel_at_low_temperature_equals_its_numpy_twin(rng):
    # β up to 1024 on S²: shifted scores down to -2β, where the flushed exp leaves out what would be subnormal
    systems, n, d = 4, 300, 3
    x = np.stack([sample_uniform(n, d, seed=30 + s) for s in range(systems)])
    B = np.eye(d) + 0.2 * rng.standard_normal((1, d, d))
    V = rng.standard_normal((1, d, d))
    beta = np.array([64.0, 256.0, 512.0, 1024.0])
    fast = velocity_batched(x, B, V, beta=beta)
    twin = velocity_batched_numpy(x, B, V, beta=beta)
    np.testing.assert_allclose(fast, twin, rtol=0, atol=1e-13 * np.max(np.abs(twin)))

def test_batched_kernel_rejects_bad_input():
    x = _clouds(2, 4, 3)
    I = np.eye(3)[None]
    with pytest.raises(ValueError, match="relu"):
        velocity_batched(x, I, I, beta=1.0, kind="relu")
    with pytest.raises(ValueError, match="shape"):
        velocity_batched(x, np.eye(2)[None], np.eye(2)[None], beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        velocity_batched(x, I, I, beta=[1.0, -1.0])
    for wrong in ([1.0, 2.0, 3.0], [[1.0], [2.0]]):  # a wrong length had given NumPy's broadcasting error, naming neither
        with pytest.raises(ValueError, match=r"^beta must be one number or one per system \(2\), got shape"):
            velocity_batched(x, I, I, beta=wrong)
    np.testing.assert_array_equal(velocity_batched(x, I, I, beta=[2.0]), velocity_batched(x, I, I, beta=2.0))


# --------------------------------------------------------------------------- #
# a batch equals its cases run one by one
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("kind, direction, combine", [("softmax", "ascent", "sum"), ("unnormalized", "descent", "mean")])
def test_a_batch_equals_its_systems_run_one_by_one_with_the_particle_solver(rng, kind, direction, combine):
    systems, n, d, H = 4, 10, 3, 2
    dt = 0.1 if kind == "softmax" else 0.02  # unnormalized at β = 4: a step of 0.1 moves tokens 1.3 rad (refused)
    x0 = _clouds(systems, n, d, seed=5)
    B = rng.standard_normal((H, d, d)) / math.sqrt(d)
    V = rng.standard_normal((H, d, d)) / math.sqrt(d)
    betas = np.array([0.5, 1.0, 2.0, 4.0])
    times = save_times(0.0, 2.0, 0.5)
    batch = run_batch(x0, betas, B, V, times=times, dt=dt, kind=kind, direction=direction, combine=combine, keep_states=True)
    for b in range(systems):
        model = mf.Model(d=d, beta=float(betas[b]), attention=kind, heads=HeadStack(B=B, V=V), direction=direction, combine=combine)
        run = mf.solve(mf.Problem(model, x0[b]), mf.ParticleSolver(method="rk4", dt=dt), t_final=2.0, save_every=0.5,
                       energy=False, speed=False)
        np.testing.assert_allclose(run.t, times, rtol=0, atol=0)
        np.testing.assert_allclose(batch.states[:, b], np.asarray(run.states), rtol=0, atol=1e-11)
    assert batch.steps == round(2.0 / dt)


def test_a_step_that_moves_tokens_too_far_fails_naming_solver_dt():
    """Unnormalized attention at β = 10 moves tokens tens of radians a step at dt = 0.1: the diagram had read
    16 clusters, "no clustering", where the converged count is about 2."""
    from meanfield.errors import RunFailed

    x0 = _clouds(2, 16, 3, seed=0)
    I = np.eye(3)[None]
    with pytest.raises(RunFailed, match=r"moved a token by .* rad .* a smaller solver.dt \(moves below 0.5 rad\)"):
        run_batch(x0, [10.0, 10.0], I, I, times=[0.0, 0.2], dt=0.1, kind="unnormalized")
    run_batch(x0, [10.0, 10.0], I, I, times=[0.0, 0.002], dt=1e-4, kind="unnormalized")  # small steps run
    # bad input named (a zero token had read "a smaller dt?", a wrong d its reshaped shape, a wrong β count NumPy's words)
    zero = x0.copy()
    zero[0, 0] = 0.0
    with pytest.raises(ValueError, match="^x0 must hold finite, non-zero tokens"):
        run_batch(zero, 1.0, I, I, times=[0.0, 0.1], dt=0.1)
    with pytest.raises(ValueError, match=r"^B must be a 3×3 matrix .* got shape \(1, 2, 2\)"):
        run_batch(x0, 1.0, np.eye(2)[None], I, times=[0.0, 0.1], dt=0.1)
    with pytest.raises(ValueError, match=r"^beta must be one number or one per system \(2\), got shape \(3,\)"):
        run_batch(x0, [1.0, 2.0, 3.0], I, I, times=[0.0, 0.1], dt=0.1)


def test_numpy_backend_of_a_batch_agrees_and_statistics_follow_the_states():
    x0 = _clouds(3, 8, 3, seed=1)
    I = np.eye(3)[None]
    times = [0.0, 1.0, 3.0]
    fast = run_batch(x0, [1.0, 2.0, 3.0], I, I, times=times, dt=0.2, keep_states=True)
    twin = run_batch(x0, [1.0, 2.0, 3.0], I, I, times=times, dt=0.2, keep_states=True, backend="numpy")
    np.testing.assert_allclose(fast.states, twin.states, rtol=0, atol=1e-12)
    angle = math.acos(0.999)
    np.testing.assert_array_equal(fast.clusters, cluster_count(np.swapaxes(fast.states, 0, 1), angle=angle))
    np.testing.assert_array_equal(fast.rank, gram_rank(np.swapaxes(fast.states, 0, 1), tol=1e-3))
    with pytest.raises(ValueError, match="rk45"):
        run_batch(x0, 1.0, I, I, times=times, dt=0.2, method="rk45")


# --------------------------------------------------------------------------- #
# the statistics on constructed clouds
# --------------------------------------------------------------------------- #
def _caps(centers: np.ndarray, per_cap: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    """``per_cap`` unit tokens within angle ``radius`` of each center."""
    out = []
    for c in centers:
        noise = rng.standard_normal((per_cap, c.size))
        noise -= (noise @ c)[:, None] * c  # tangent at c
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        angles = rng.uniform(0.0, radius, per_cap)[:, None]
        out.append(np.cos(angles) * c + np.sin(angles) * noise)
    return np.concatenate(out)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6])
def test_k_well_separated_caps_are_k_clusters(rng, k):
    octahedron = np.concatenate([np.eye(3), -np.eye(3)])[[0, 3, 1, 4, 2, 5]][:k]
    angle = 0.05
    x = _caps(octahedron, 7, angle / 2.5, rng)  # inside a cap every pair is within 2 × radius < angle
    x = x[rng.permutation(len(x))]
    assert int(cluster_count(x, angle=angle)) == k
    expected_pairs = k * 7 * 6 / (7 * k * (7 * k - 1))
    np.testing.assert_allclose(pair_fraction(x, angle=angle), expected_pairs, rtol=1e-15)


def test_a_chain_of_close_tokens_is_one_cluster_and_a_gap_splits_it():
    angle = 0.05
    phis = np.arange(20) * 0.9 * angle  # neighbours linked, the ends 0.86 rad apart
    chain = np.stack([np.cos(phis), np.sin(phis), np.zeros_like(phis)], axis=1)
    assert int(cluster_count(chain, angle=angle)) == 1
    broken = chain.copy()
    broken[10:] = normalize(chain[10:] @ np.array([[np.cos(0.2), np.sin(0.2), 0], [-np.sin(0.2), np.cos(0.2), 0], [0, 0, 1]]))
    assert int(cluster_count(broken, angle=angle)) == 2


def test_cluster_count_equals_scipy_connected_components_on_random_clouds():
    x = _clouds(40, 24, 3, seed=7)
    angle = 0.6  # large enough for non-trivial components in uniform clouds
    counts = cluster_count(x, angle=angle)
    for b in range(x.shape[0]):
        linked = np.arccos(np.clip(x[b] @ x[b].T, -1, 1)) <= angle
        expected, _ = connected_components(linked, directed=False)
        assert counts[b] == expected
    assert len(set(counts.tolist())) > 3  # the check saw varied answers


@pytest.mark.parametrize("k", [1, 2, 3])
def test_gram_rank_of_k_orthogonal_clusters_is_k(rng, k):
    x = normalize(np.repeat(np.eye(4)[:k], 8, axis=0) + 1e-5 * rng.standard_normal((8 * k, 4)))
    assert int(gram_rank(x, tol=1e-3)) == k
    np.testing.assert_array_equal(gram_rank(x, tol=1e-3), np.linalg.matrix_rank(x @ x.T, tol=1e-3))


def test_gram_rank_equals_the_rank_of_the_n_by_n_gram_matrix(rng):
    x = _clouds(10, 6, 4, seed=1)
    x[:5, :, 3] *= 1e-3  # nearly in a hyperplane: rank 3 at τ = 1e-3
    x = normalize(x)
    expected = [int(np.sum(np.linalg.eigvalsh(x[b] @ x[b].T) > 1e-3)) for b in range(10)]
    np.testing.assert_array_equal(gram_rank(x, tol=1e-3), expected)
    assert set(expected) == {3, 4}


# --------------------------------------------------------------------------- #
# the diagram: API, probabilities, CLI
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("phase") / "tiny.toml"
    path.write_text(TINY_TOML)
    return path


def test_diagram_probabilities_lie_in_0_1_and_counts_are_integers_in_1_n(tiny):
    diagram = phase_diagram(tiny, workers=0)
    K, T = 3, 5
    assert diagram.one_cluster.shape == diagram.clusters.shape == diagram.rank.shape == diagram.pairs.shape == (K, T)
    for p in (diagram.one_cluster, diagram.pairs):
        assert np.all((p >= 0) & (p <= 1))
    clusters, rank = diagram.counts["clusters"], diagram.counts["rank"]
    assert clusters.shape == (K, 6, T) and clusters.dtype.kind == "i" and rank.dtype.kind == "i"
    assert np.all((clusters >= 1) & (clusters <= 12)) and np.all((rank >= 1) & (rank <= 3))
    assert np.all(diagram.one_cluster_se >= 0) and np.all(diagram.clusters_se >= 0)
    np.testing.assert_allclose(diagram.one_cluster, np.mean(clusters == 1, axis=1), rtol=0, atol=0)
    np.testing.assert_allclose(diagram.clusters_se, np.std(clusters, axis=1, ddof=1) / math.sqrt(6), rtol=1e-14)
    np.testing.assert_array_equal(diagram.clusters[:, 0], 12)  # uniform draws of 12 tokens: no two within 0.045 rad
    # sample s starts from init.seed + s, the same for every β: the first batch, run by hand
    x0 = np.stack([sample_uniform(12, 3, seed=3 + s) for s in range(4)])
    by_hand = run_batch(x0, 0.5, np.eye(3)[None], np.eye(3)[None], times=save_times(0, 2, 0.5), dt=0.1)
    np.testing.assert_array_equal(diagram.counts["clusters"][0, :4], by_hand.clusters)


def test_phase_times_say_that_the_solver_times_are_not_used(tiny):
    from meanfield.config import ConfigNote

    with pytest.warns(ConfigNote, match=r"solver.t_final and solver.save_every not used: the diagram's times are phase.times \[0.0, 0.5\]"):
        phase_diagram(tiny, workers=0, **{"phase.samples": 2, "phase.times": [0.0, 0.5], "solver.t_final": 7.0})


def test_diagram_from_overrides_and_its_figure(tiny, tmp_path):
    diagram = phase_diagram(tiny, workers=0, **{"phase.samples": 3, "phase.times": [0.0, 1.5], "model.attention": "unnormalized",
                                                "solver.dt": 0.01})  # (0.1 moves its tokens 0.75 rad a step: refused)
    assert diagram.samples == 3 and diagram.times.tolist() == [0.0, 1.5]
    fig = diagram.plot(tmp_path / "p.png")
    assert len(fig.axes) == 8 and (tmp_path / "p.png").stat().st_size > 10_000


def test_cli_summary_lines_are_the_diagram_at_its_last_time(tiny, tmp_path, capsys):
    # the lines had been labelled with t but could have given the initial state: check them against phase.csv
    import re

    out = tmp_path / "diagram"
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet"]) == 0
    pattern = re.compile(r"β = (\S+), t = (\S+): P\(one cluster\) = .*, clusters = (\S+) ± (\S+), Gram rank = (\S+) ± (\S+)")
    lines = [pattern.search(line) for line in capsys.readouterr().out.splitlines() if "β =" in line]
    assert len(lines) == 3 and all(lines)
    with open(out / "phase.csv", newline="") as f:
        rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    t_last = max(row["t"] for row in rows)
    assert t_last == 2.0
    for match, beta in zip(lines, (0.5, 2.0, 6.0)):
        printed = [float(v) for v in match.groups()]
        row = next(r for r in rows if r["beta"] == beta and r["t"] == t_last)
        np.testing.assert_allclose(printed[:2], [beta, t_last], rtol=0, atol=0)
        np.testing.assert_allclose(printed[2:], [row["clusters_mean"], row["clusters_se"], row["rank_mean"], row["rank_se"]],
                                   rtol=0, atol=0.0051)
    assert any(r["clusters_mean"] < 12.0 - 0.5 for r in rows if r["t"] == t_last)  # not the initial state (12 clusters)


def test_cli_end_to_end_writes_the_table_and_the_picture_and_resumes(tiny, tmp_path, capsys):
    out = tmp_path / "diagram"
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet"]) == 0
    assert "P(one cluster)" in capsys.readouterr().out
    with open(out / "phase.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == PHASE_COLUMNS and len(rows) == 3 * 5
    api = phase_diagram(tiny, workers=0).rows()
    for row, expected in zip(rows, api):
        assert {k: float(v) for k, v in row.items()} == pytest.approx({k: float(v) for k, v in expected.items()}, rel=0, abs=0)
    assert (out / "phase.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "phase.json").exists()
    assert len(list((out / "batches").glob("*.npz"))) == 5  # 18 systems in batches of 4
    before = (out / "phase.csv").read_text()
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet"]) == 2  # not without --resume
    assert "--resume" in capsys.readouterr().err
    batches = sorted((out / "batches").glob("*.npz"))
    batches[2].unlink()
    batches[3].write_bytes(batches[3].read_bytes()[:200])  # truncated: computed again (it had raised BadZipFile)
    batches[4].write_bytes(b"")  # empty (EOFError)
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet", "--resume"]) == 0
    assert "2 resumed" in capsys.readouterr().out
    assert (out / "phase.csv").read_text() == before
    files = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    # another config: refused, nothing touched (it had resumed 0 batches and written its diagram over this one)
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet", "--resume", "--set", "init.n=7"]) == 2
    assert "error: --resume" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == files
    # the same betas written as integers: the same diagram (it had been refused as another configuration)
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet", "--resume", "--set", "phase.betas=[0.5, 2, 6]"]) == 0
    assert "5 resumed" in capsys.readouterr().out


@pytest.mark.parametrize("override, key", [
    ("phase.samples=0", "phase.samples"),
    ("phase.times=[0.0, 2.0, 1.0]", "phase.times"),
    ("phase.betas=[]", "phase.betas"),
    ("phase.cluster_angle=-0.1", "phase.cluster_angle"),
    ("phase.nothing=1", "phase.nothing"),
    ("model.attention=relu", "model.attention"),
    ("solver.method=rk45", "solver.method"),
    ("init.n=1", "init.n"),
    ('init.kind="fibonacci"', "init.kind"),  # rotations of one lattice: the same system, a spread of 0
    ('solver.clock="gradient"', "solver.clock"),  # had been ignored
    ('model.precision="float32"', "model.precision"),  # had run in float64
    ("phase.batch=100000000 --set phase.samples=100000000 --set init.n=64", "phase.batch"),  # 9 TiB of pair tables
    ("phase.times=[0.0, 1e20]", "phase.times"),  # 5e21 steps: it had run for ever, its folder made
])
def test_bad_input_exits_2_naming_the_key_before_any_file(tiny, tmp_path, capsys, override, key):
    out = tmp_path / "never"
    sets = [part for item in override.split(" --set ") for part in ("--set", item)]
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", *sets]) == 2
    assert key in capsys.readouterr().err
    assert not out.exists()


def test_bad_scheduler_and_workers_exit_2(tiny, tmp_path, capsys):
    assert cli_main(["phase", str(tiny), "-o", str(tmp_path / "a"), "--scheduler", "not an address"]) == 2
    assert "--scheduler" in capsys.readouterr().err
    assert cli_main(["phase", str(tiny), "-o", str(tmp_path / "b"), "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    (tmp_path / "afile").write_text("x")
    assert cli_main(["phase", str(tiny), "-o", str(tmp_path / "afile"), "--workers", "0"]) == 2
    assert "--out" in capsys.readouterr().err
    assert cli_main(["phase", str(tmp_path / "missing.toml"), "-o", str(tmp_path / "c"), "--workers", "0"]) == 2
    assert "not found" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_check_phase_config_names_unsupported_settings():
    with pytest.raises(ConfigError, match="weights.schedule"):
        check_phase_config(mf.load_config(None, **{"weights.schedule": "oscillating"}))
    with pytest.raises(ConfigError, match="solver.kind"):
        check_phase_config(mf.load_config(None, **{"solver.kind": "zero-temperature"}))


def test_task_pool_in_process_keeps_order_and_checks_its_options():
    with TaskPool(workers=0) as pool:
        assert list(pool.map(lambda v: v * v, [3, 1, 2])) == [(0, 9), (1, 1), (2, 4)]
    with pytest.raises(ConfigError, match="--workers"):
        TaskPool(workers=-1)


@pytest.mark.slow
def test_batches_on_a_local_dask_cluster_equal_the_in_process_diagram(tiny, tmp_path):
    here = phase_diagram(tiny, workers=0)
    there = phase_diagram(tiny, workers=2, out=tmp_path / "dask")
    for name in ("clusters", "rank", "pairs"):
        np.testing.assert_array_equal(there.counts[name], here.counts[name])


def test_sigterm_ends_the_command_as_ctrl_c_does(tiny, tmp_path):
    # a batch system's time limit sends SIGTERM: the command had died of the signal (status 143, nothing printed)
    import signal
    import subprocess
    import sys
    import time

    config = tmp_path / "long.toml"
    config.write_text(TINY_TOML.replace("t_final = 2.0", "t_final = 200.0"))
    out = tmp_path / "diagram"
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "phase", str(config), "-o", str(out), "--workers", "0", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("batches/*.npz")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "interrupted" in err and "Traceback" not in err, err
    assert list((out / "batches").glob("*.npz"))  # the finished batches are kept for --resume


@pytest.mark.parametrize("betas", [[2.5e15], [1e15, 2e15, 2.5e15], [2.0]])
def test_a_diagram_of_the_largest_betas_is_drawn(tiny, tmp_path, betas):
    # the rows' cell edges had overflowed in matplotlib at β = 1e308 (a traceback after the batches and the table were
    # written); β‖B_h‖_F is now held to 2^52 (≈ 2.6e15 for this identity head), which the diagram draws
    diagram = phase_diagram(tiny, workers=0, **{"phase.betas": betas, "phase.samples": 2})
    figure = diagram.plot(tmp_path / "phase.png")
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert (tmp_path / "phase.png").stat().st_size > 0 and any(f"{betas[0]:g}" in label for label in labels)


def test_a_probability_every_sample_agrees_on_is_printed_with_its_bound_and_the_axis_keeps_beta_positive(tiny, tmp_path):
    from meanfield.cli.phase import _probability

    assert _probability(0.0, 0.0, 6) == "0.000 (none of 6; below 0.500 at 95 %)"  # had been "0.000 ± 0.000"
    assert _probability(1.0, 0.0, 300) == "1.000 (all 300; above 0.990 at 95 %)"
    assert _probability(0.5, 0.2, 6) == "0.500 ± 0.200"
    diagram = phase_diagram(tiny, workers=0, **{"phase.samples": 2, "phase.betas": [0.5, 2.0]})
    fig = diagram.plot()
    assert all(ax.get_ylim()[0] >= 0 for ax in fig.axes[:4])  # the cells of β = 0.5 had reached β = -0.25


def test_a_model_beta_the_diagram_does_not_use_gets_a_note(tiny):
    # its rows are phase.betas: model.beta = 16 had been ignored without a word
    from meanfield.errors import ConfigNote

    with pytest.warns(ConfigNote, match=r"model.beta = 16 is not used: a phase diagram's rows are phase.betas"):
        phase_diagram(tiny, workers=0, **{"model.beta": 16.0, "phase.samples": 2})
    # (found in review) track.* keys, which no phase diagram reads, had been dropped without a word
    with pytest.warns(ConfigNote, match=r"track.concentration = True not used: a phase diagram records its cluster"):
        phase_diagram(tiny, workers=0, **{"track.concentration": True, "phase.samples": 2})


def _cells(ax) -> np.ndarray:
    """The (rows + 1, columns + 1, 2) corners of a panel's heat map."""
    return ax.collections[0].get_coordinates()


@pytest.mark.parametrize(("betas", "times"), [([0.5, 1.0, 1.5], [0.0, 0.5, 1.0]), ([1.0], [0.0, 0.5, 1.0]),
                                              ([0.5, 1.0], [30.0]), ([1.0], [2.0]), ([0.5, 1.0], [0.0, 10.0, 100.0])])
def test_the_heat_maps_draw_every_cell_and_no_time_or_beta_that_was_not_computed(betas, times):
    # one β or one time had been drawn as cells of zero width (a blank picture, exit 0), and an uneven time grid had
    # painted t = 10 over [5, 55] and reached t = 145 for a diagram that ends at 100
    from meanfield.solvers.phase import PhaseDiagram

    K, T, S = len(betas), len(times), 3
    counts = np.ones((K, S, T), dtype=np.int64)
    diagram = PhaseDiagram.from_counts(betas, times, counts, counts, np.zeros((K, S, T)), n=8, d=3,
                                       cluster_angle=0.05, rank_tol=1e-3)
    fig = diagram.plot()
    for ax in fig.axes[:4]:
        corners = _cells(ax)
        assert corners.shape == (K + 1, T + 1, 2)
        assert np.all(np.diff(corners[..., 0], axis=1) > 0) and np.all(np.diff(corners[..., 1], axis=0) > 0)  # no empty cell
    even_t = T >= 2 and np.allclose(np.diff(times), np.diff(times)[0])
    xs = _cells(fig.axes[0])[0, :, 0]
    if even_t:  # to scale, from the first time to the last
        assert (xs[0], xs[-1]) == (times[0], times[-1]) and fig.axes[2].get_xlabel() == "time t"
    else:  # one labelled column per time
        labels = [tick.get_text() for tick in fig.axes[2].get_xticklabels()]
        assert [f"{t:g}" for t in times] == labels[: len(times)] and "not to scale" in fig.axes[2].get_xlabel()
    if K == 1:
        assert [tick.get_text() for tick in fig.axes[0].get_yticklabels()] == [f"{betas[0]:g}"]


def test_the_title_names_the_heads_and_says_random_ones_are_one_draw(tiny):
    plain = phase_diagram(tiny, workers=0, **{"phase.samples": 2}).plot()
    assert "heads: the identity" in plain._suptitle.get_text()
    goe = phase_diagram(tiny, workers=0, **{"phase.samples": 2, "model.heads": [{"K": "goe", "Q": "identity", "V": "identity"}]})
    title = goe.plot()._suptitle.get_text()
    assert "goe" in title and "one draw, model.seed = " in title and "every sample and β" in title


def test_a_batch_takes_one_set_of_heads_per_system():
    # the docstring and README offer (N, H, d, d) heads; the shape check had refused them
    gen = np.random.default_rng(1)
    x0 = _clouds(3, 7, 3)
    B, V = gen.standard_normal((3, 2, 3, 3)), gen.standard_normal((3, 2, 3, 3))
    betas = [0.5, 1.0, 2.0]
    batch = run_batch(x0, betas, B, V, times=[0.0, 1.0], dt=0.05, keep_states=True)
    for b in range(3):
        alone = run_batch(x0[b : b + 1], betas[b], B[b], V[b], times=[0.0, 1.0], dt=0.05, keep_states=True)
        np.testing.assert_allclose(batch.states[:, b], alone.states[:, 0], rtol=0, atol=1e-15)
    shared = run_batch(x0, 1.0, np.eye(3), np.eye(3), times=[0.0, 1.0], dt=0.05, keep_states=True)  # one matrix: one head
    np.testing.assert_array_equal(shared.states, run_batch(x0, 1.0, np.eye(3)[None], np.eye(3)[None], times=[0.0, 1.0],
                                                           dt=0.05, keep_states=True).states)
    with pytest.raises(ValueError, match=r"one stack per system \(3, H, 3, 3\).*got shape \(2, 2, 3, 3\)"):
        run_batch(x0, 1.0, B[:2], V[:2], times=[0.0, 1.0], dt=0.05)


@pytest.mark.parametrize("angle", [-1.0, math.nan, 4.0, "0.1", True])
def test_a_link_angle_outside_0_pi_is_refused(angle):
    # -1 had acted as +1 rad through the cosine, NaN had linked nothing (every token its own cluster)
    x = _clouds(2, 5, 3)
    for measure in (lambda: cluster_count(x, angle=angle), lambda: pair_fraction(x, angle=angle),
                    lambda: run_batch(x, 1.0, np.eye(3)[None], np.eye(3)[None], times=[0.0, 0.1], dt=0.1, cluster_angle=angle)):
        with pytest.raises(ValueError, match=r"angle must be an angle in \[0, π\] radians"):
            measure()


@pytest.mark.parametrize("tol", [0.0, -1.0, math.nan, math.inf])
def test_a_rank_tolerance_that_is_not_positive_is_refused(tol):
    x = _clouds(2, 5, 3)  # (NaN had given rank 0 for every system)
    with pytest.raises(ValueError, match="tol must be a positive finite number"):
        gram_rank(x, tol=tol)
    with pytest.raises(ValueError, match="rank_tol must be a positive finite number"):
        run_batch(x, 1.0, np.eye(3)[None], np.eye(3)[None], times=[0.0, 0.1], dt=0.1, rank_tol=tol)


def test_the_api_refuses_an_out_that_is_a_file_before_any_work(tiny, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=r"out.*is a file; give a folder"):  # (NotADirectoryError after the batches)
        phase_diagram(tiny, workers=0, out=afile)
    assert afile.read_text() == "x"


def test_a_backend_or_tolerance_the_diagram_does_not_use_gets_a_note(tiny):
    from meanfield.errors import ConfigNote

    with pytest.warns(ConfigNote, match=r"model.backend = 'harmonic' not used: a phase diagram runs the dense batched kernel"):
        phase_diagram(tiny, workers=0, **{"model.backend": "harmonic", "phase.samples": 2})


def test_an_interrupt_names_the_folder_its_batches_are_kept_in(tiny, tmp_path, capsys, monkeypatch):
    import meanfield.solvers.phase as phase_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(phase_module, "phase_diagram", interrupted)
    out = tmp_path / "diagram"
    assert cli_main(["phase", str(tiny), "-o", str(out), "--workers", "0", "--quiet"]) == 1
    assert f"finished batches are kept in {out / 'batches'}, --resume continues" in capsys.readouterr().err  # (had said DIR)


def test_resume_into_a_folder_without_batches_says_that_nothing_is_resumed(tiny, tmp_path):
    from meanfield.errors import ConfigNote

    with pytest.warns(ConfigNote, match=r"--resume: .*missing does not exist: nothing to resume, every batch runs"):
        phase_diagram(tiny, workers=0, out=tmp_path / "missing", resume=True, **{"phase.samples": 2})
    assert (tmp_path / "missing" / "phase.csv").exists()


def test_resume_takes_a_change_of_the_keys_the_diagram_does_not_use(tiny, tmp_path):
    # (found by the maintainers) beside phase.times, solver.t_final is noted "not used", yet a changed one had made
    # --resume refuse the folder as another configuration's; so had model.beta (the rows are phase.betas)
    from meanfield.errors import ConfigNote

    given = {"phase.samples": 2, "phase.times": [0.0, 0.5, 1.0]}
    first = phase_diagram(tiny, workers=0, out=tmp_path / "d", **given)
    with pytest.warns(ConfigNote, match=r"not used"):
        again = phase_diagram(tiny, workers=0, out=tmp_path / "d", resume=True,
                              **{**given, "solver.t_final": 5.0, "solver.save_every": 0.25, "model.beta": 16.0})
    np.testing.assert_array_equal(again.counts["clusters"], first.counts["clusters"])
    assert again.info["resumed_batches"] == again.info["batches"] == 2  # both taken from the folder, none run again
    with pytest.raises(ConfigError, match=r"--resume: .* holds batches of another configuration"):
        phase_diagram(tiny, workers=0, out=tmp_path / "d", resume=True, **{**given, "solver.dt": 0.05})


def test_a_beta_past_the_scores_resolution_is_refused_as_for_a_run(tiny, tmp_path):
    # a run's model.beta is held to β‖B_h‖_F ≤ 2^52 (the scores' rounding reaches 1/2 there); phase.betas = [1e18] had
    # run a diagram of round-off
    with pytest.raises(ConfigError, match=r"phase\.betas: the largest β puts the scores .* past float64's resolution"):
        phase_diagram(tiny, workers=0, out=tmp_path / "d", **{"phase.betas": [1.0, 1e18]})
    assert not (tmp_path / "d").exists()
