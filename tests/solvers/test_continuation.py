"""``init.kind = "run"``: a particle run that starts from a frame of a stored run (particle or grid)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import meanfield as mf
from meanfield.analysis.concentration import concentration_curves, single_head, tracker_from_head
from meanfield.cli import main
from meanfield.config import ConfigNote
from meanfield.io.source_frame import source_tokens

ROOT = Path(__file__).resolve().parents[2]
CONCENTRATION = ROOT / "data" / "concentration.toml"
STEPS = {"model.beta": 4.0, "solver.dt": 0.05, "solver.t_final": 1.0, "solver.save_every": 0.25}
PARTICLES = {**STEPS, "init.n": 48}
GRID = {"solver.kind": "grid", "solver.method": "ssprk3", "init.kind": "uniform", "model.beta": 4.0, "grid.cells": 200,
        "solver.t_final": 0.5, "solver.save_every": 0.25}


@pytest.fixture(scope="module")
def particle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("source") / "particles.h5"
    mf.simulate(CONCENTRATION, out=out, **PARTICLES)
    return out


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("source") / "grid.h5"
    mf.simulate(CONCENTRATION, out=out, **GRID)
    return out


def test_a_particle_run_continued_from_its_middle_frame_repeats_its_later_frames(particle_run, tmp_path):
    whole = mf.load(particle_run)
    later = mf.simulate(CONCENTRATION, out=tmp_path / "later.h5", **{**PARTICLES, "init.kind": "run",
                                                                     "init.path": str(particle_run), "init.time": 0.5})
    assert later.t.tolist() == [0.5, 0.75, 1.0] and later.config["init"]["n"] == 48
    np.testing.assert_allclose(later.x, whole.x[2:], rtol=0, atol=1e-14)  # the same steps from the same tokens
    # Π♯ρ₀ is the source's (its first frame), so W2 continues the source's curve
    np.testing.assert_allclose(later.diagnostics["w2_target"], whole.diagnostics["w2_target"][2:], rtol=1e-12)


def test_the_default_frame_is_the_last_and_a_continuation_resumes_and_chains(particle_run, tmp_path):
    out = tmp_path / "tail.h5"
    settings = {**PARTICLES, "init.kind": "run", "init.path": str(particle_run)}
    with pytest.warns(ConfigNote, match="init.n"):  # (no warning when n is left to the frame)
        stopped = mf.simulate(CONCENTRATION, out=out, **{**settings, "init.n": 7, "solver.t_final": 1.25})
    assert stopped.config["init"]["time"] == 1.0 and stopped.t.tolist() == [1.0, 1.25]
    resumed = mf.simulate(CONCENTRATION, out=out, resume=True, **{**settings, "solver.t_final": 1.5})
    straight = mf.simulate(CONCENTRATION, **{**settings, "solver.t_final": 1.5})
    assert resumed.t.tolist() == [1.0, 1.25, 1.5]
    np.testing.assert_array_equal(resumed.x, straight.x)
    # a continuation of the continuation measures W2 to the first run's Π♯ρ₀ too
    chained = mf.simulate(CONCENTRATION, **{**settings, "init.path": str(out), "init.time": 1.25, "solver.t_final": 1.5})
    np.testing.assert_allclose(chained.diagnostics["w2_target"], straight.diagnostics["w2_target"][1:], rtol=1e-12)


def test_a_grid_frame_becomes_tokens_at_the_cell_points_carrying_the_cell_masses(grid_run):
    grid = mf.load(grid_run)
    tokens = mf.simulate(CONCENTRATION, **{**STEPS, "init.kind": "run", "init.path": str(grid_run), "init.time": 0.5})
    assert tokens.t[0] == 0.5 and tokens.x.shape[1] == 200
    np.testing.assert_allclose(tokens.x[0], grid.points / np.linalg.norm(grid.points, axis=1, keepdims=True), rtol=0, atol=1e-15)
    np.testing.assert_allclose(tokens.token_masses, grid.mass[-1] / grid.mass[-1].sum(), rtol=1e-13)
    # the cell masses at their centroids against the grid's reconstructed density: W2 to Π♯ρ₀ agrees to the cells' size
    np.testing.assert_allclose(tokens.diagnostics["w2_target"][0], grid.diagnostics["w2_target"][-1], rtol=0.02)


def test_the_antipodal_image_stays_the_image_to_round_off(grid_run):
    run = mf.simulate(CONCENTRATION, **{**STEPS, "init.kind": "run", "init.path": str(grid_run), "init.time": 0.5,
                                        "init.symmetry": "antipodal", "model.beta": 16.0, "solver.t_final": 2.0})
    half = run.x.shape[1] // 2
    assert half == 200
    w = run.token_masses
    np.testing.assert_array_equal(w[:half], w[half:])
    np.testing.assert_allclose(run.x[:, half:], -run.x[:, :half], rtol=0, atol=1e-13)  # the flow keeps x ↦ −x
    assert np.abs(run.x[-1] - run.x[0]).max() > 0.1  # and the tokens did move


def test_an_antipodal_image_of_a_far_from_symmetric_source_gets_a_note(grid_run, tmp_path):
    # the image is meant to take out the asymmetry the discretisation made; of a one-sided source it makes another measure
    import warnings

    from meanfield.io.source_frame import odd_moments

    cap = tmp_path / "cap.h5"
    mf.simulate(CONCENTRATION, out=cap, **{**PARTICLES, "init.kind": "vmf", "init.mean": [0.0, 0.0, 1.0], "init.kappa": 20.0,
                                           "init.n": 200, "solver.t_final": 0.25})
    settings = {**STEPS, "init.kind": "run", "init.symmetry": "antipodal", "solver.t_final": 1.0}
    with pytest.warns(ConfigNote, match="far from antipodally symmetric"):
        mf.load_config(CONCENTRATION, **{**settings, "init.path": str(cap)})
    with warnings.catch_warnings(record=True) as caught:  # the grid run from a uniform ρ0: symmetric up to its mesh
        warnings.simplefilter("always")
        mf.load_config(CONCENTRATION, **{**settings, "init.path": str(grid_run), "init.time": 0.5})
    assert not [w for w in caught if "antipodally" in str(w.message)]
    # the odd moments: |2p - 1| for masses p and 1 - p at ±e; 1/4 of a third moment for three clusters 120° apart
    e = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    np.testing.assert_allclose(odd_moments(e, np.array([0.7, 0.3])), 0.4, rtol=1e-14)
    assert odd_moments(np.vstack([e, -e]), np.full(4, 0.25)) == 0.0
    angles = np.array([0.0, 2.0, 4.0]) * np.pi / 3
    three = np.stack([np.cos(angles), np.sin(angles), np.zeros(3)], axis=1)
    assert odd_moments(three, np.full(3, 1 / 3)) >= 0.25 > np.linalg.norm(three.mean(axis=0)) + 0.2


def test_an_antipodal_continuation_is_measured_against_the_symmetrised_target(tmp_path):
    """Π♯ρ₀ of a chain with an antipodal link is that of (ρ₀ + (−id)♯ρ₀)/2: the source's own target (p = 0.33 on e1
    from 64 i.i.d. tokens) had put a floor of 1.04 under W2, where the run came within 0.57 of its own."""
    import ot

    source, symmetric = tmp_path / "iid.h5", tmp_path / "symmetric.h5"
    mf.simulate(CONCENTRATION, out=source, **{"init.kind": "uniform", "init.n": 64, "init.seed": 7, "solver.t_final": 0.2,
                                              "track.concentration": False})
    x0 = mf.load(source).x[0]
    p = float(np.mean(x0[:, 0] > 0))
    assert abs(p - 0.5) > 0.1  # a source far from symmetric: the two targets differ
    run = mf.simulate(CONCENTRATION, out=symmetric, **{"init.kind": "run", "init.path": str(source), "init.time": 0.0,
                                                        "init.symmetry": "antipodal", "solver.t_final": 0.5})

    def w2_to_halves(x):  # own exact W2 to δ_e1/2 + δ_−e1/2, geodesic cost
        atoms = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
        cost = np.arccos(np.clip(x @ atoms.T, -1.0, 1.0)) ** 2
        return np.sqrt(ot.emd2(np.full(len(x), 1.0 / len(x)), np.array([0.5, 0.5]), cost))

    expected = [w2_to_halves(x) for x in run.x]
    np.testing.assert_allclose(run.diagnostics["w2_target"], expected, rtol=1e-10)  # the tracker
    untracked = mf.load(symmetric)
    untracked.diagnostics.pop("w2_target")  # and the analysis from the frames
    np.testing.assert_allclose(concentration_curves(untracked)["w2_target"], expected, rtol=1e-10)


def test_light_tokens_are_left_out_and_the_masses_renormalised(grid_run):
    full = source_tokens(grid_run, 0.5)
    mass = full.weights
    cut = float(np.quantile(mass, 0.5))
    light = source_tokens(grid_run, 0.5, min_mass=cut)
    keep = mass >= cut
    np.testing.assert_array_equal(light.tokens, full.tokens[keep])
    np.testing.assert_allclose(light.weights, mass[keep] / mass[keep].sum(), rtol=1e-14)


@pytest.mark.parametrize("settings, key", [
    (["init.kind=\"run\""], "init.path"),
    (["init.kind=\"run\"", "init.path=\"/nonexistent/run.h5\""], "init.path"),
    (["init.kind=\"run\"", "init.path=\"{source}\"", "init.time=0.3"], "init.time"),
    (["init.kind=\"run\"", "init.path=\"{source}\"", "solver.t_final=0.75", "init.time=1.0"], "solver.t_final"),
    (["init.kind=\"run\"", "init.path=\"{source}\"", "solver.kind=\"grid\""], "init.kind"),
    (["init.kind=\"run\"", "init.path=\"{source}\"", "model.d=4"], "model.d"),
    (["init.kind=\"run\"", "init.path=\"{source}\"", "init.symmetry=\"mirror\""], "init.symmetry"),
    (["init.kind=\"run\"", "init.path=\"{source}\"", "model.mask=\"causal\"", "init.symmetry=\"antipodal\""], "init.symmetry"),
    (["init.time=0.5"], "init.time"),
    (["init.min_mass=1e-6"], "init.min_mass"),
])
def test_bad_continuations_exit_2_naming_the_key_before_any_file_is_written(particle_run, tmp_path, capsys, settings, key):
    out = tmp_path / "out.h5"
    args = ["simulate", str(ROOT / "data" / "default.toml"), "-o", str(out), "--quiet"]
    for setting in settings:
        args += ["--set", setting.format(source=particle_run)]
    assert main(args) == 2
    assert key in capsys.readouterr().err
    assert not out.exists()


def test_a_pre_ln_source_is_refused_naming_its_norm(tmp_path, capsys):
    # its tokens are off the sphere by design: the message names model.norm, not a file changed after it was written
    source = tmp_path / "pre.h5"
    mf.simulate({"init": {"n": 8}, "model": {"norm": "pre"}, "solver": {"t_final": 0.5, "save_every": 0.5}}, out=source)
    out = tmp_path / "out.h5"
    assert main(["simulate", str(ROOT / "data" / "default.toml"), "-o", str(out), "--quiet",
                 "--set", "init.kind=\"run\"", "--set", f"init.path=\"{source}\""]) == 2
    err = capsys.readouterr().err
    assert "init.path" in err and "model.norm = 'pre'" in err and "changed" not in err
    assert not out.exists()


def test_the_analysis_of_an_untracked_continuation_measures_w2_to_the_first_runs_target(grid_run, tmp_path):
    """``meanfield concentration`` recomputes W2 from the frames: weighted tokens, and Π♯ρ₀ of the grid's first frame."""
    settings = {**STEPS, "init.kind": "run", "init.path": str(grid_run), "init.time": 0.5}
    tracked = mf.simulate(CONCENTRATION, **settings)
    untracked = mf.simulate(CONCENTRATION, out=tmp_path / "untracked.h5", **{**settings, "track.concentration": False})
    assert "w2_target" not in untracked.diagnostics
    curves = concentration_curves(mf.load(tmp_path / "untracked.h5"))
    np.testing.assert_allclose(curves["w2_target"], tracked.diagnostics["w2_target"], rtol=1e-12)
    # the target of the tokens' own first frame, or uniform masses, give other curves (by 5e-5 and 8 % here)
    head = single_head(tracked.config)
    for weights in (tracked.token_masses, None):
        own = tracker_from_head(head.Q, head.K, head.V, tracked.x[0], weights=weights, policy="skip")
        other = np.array([own(t, x)["w2_target"] for t, x in zip(tracked.t, tracked.x)])
        assert np.abs(other / curves["w2_target"] - 1).max() > 1e-5


def test_a_source_replaced_since_is_named_on_resume_and_in_the_analysis(tmp_path, capsys):
    # --resume had taken the new source's masses and rewritten the run's own; the analysis had measured against the
    # new source's Π♯ρ₀, with exit 0 (found in review)
    source, run = tmp_path / "A.h5", tmp_path / "B.h5"
    mf.simulate(CONCENTRATION, out=source, **GRID)
    settings = {**PARTICLES, "init.kind": "run", "init.path": str(source), "init.time": 0.5, "track.concentration": False,
                "solver.t_final": 0.75}
    mf.simulate(CONCENTRATION, out=run, **settings)
    before = run.read_bytes()
    curves = concentration_curves(mf.load(run))  # the source as it was: measured
    assert np.all(np.isfinite(curves["w2_target"]))
    mf.simulate(CONCENTRATION, out=source, overwrite=True, **{**GRID, "init.kind": "vmf", "init.kappa": 2.0})
    with pytest.raises(mf.ConfigError, match="init.path: .*A.h5 has changed since"):
        mf.simulate(CONCENTRATION, out=run, resume=True, **{**settings, "solver.t_final": 1.0})
    assert run.read_bytes() == before
    with pytest.raises(mf.ConfigError, match="has changed since"):
        concentration_curves(mf.load(run))
    assert main(["concentration", str(run)]) == 2 and "init.path" in capsys.readouterr().err
    chained = tmp_path / "C.h5"  # a chain whose middle link was replaced is named as well
    source.unlink()
    mf.simulate(CONCENTRATION, out=source, **GRID)
    mf.simulate(CONCENTRATION, out=run, overwrite=True, **settings)
    mf.simulate(CONCENTRATION, out=chained, **{**settings, "init.path": str(run), "init.time": 0.75, "solver.t_final": 1.0})
    mf.simulate(CONCENTRATION, out=source, overwrite=True, **{**GRID, "init.kind": "vmf", "init.kappa": 2.0})
    with pytest.raises(mf.ConfigError, match="A.h5 has changed since"):
        concentration_curves(mf.load(chained))


def test_a_source_with_bad_token_masses_is_bad_input(particle_run, tmp_path):
    import shutil

    import h5py

    broken = tmp_path / "broken.h5"
    shutil.copy(particle_run, broken)
    with h5py.File(broken, "a") as f:
        if "token_masses" in f:
            del f["token_masses"]
        f.create_dataset("token_masses", data=np.full(48, np.nan))
    with pytest.raises(mf.ConfigError, match="init.path: .*token masses"):  # it had been a ValueError with a traceback
        mf.simulate(CONCENTRATION, **{**PARTICLES, "init.kind": "run", "init.path": str(broken)})


OU_HEADS = ROOT / "data" / "ou_heads.toml"


def test_weighted_tokens_under_time_dependent_heads_are_written_and_read_back(grid_run, tmp_path):
    # the token masses had been the root dataset 'weights', where the weight path is the group 'weights/': writing
    # both had failed with h5py's TypeError once the whole run was done
    out = tmp_path / "ou.h5"
    run = mf.simulate(OU_HEADS, out=out, **{"init.kind": "run", "init.path": str(grid_run), "solver.dt": 0.05,
                                            "weights.dt": 0.05, "solver.t_final": 0.75, "solver.save_every": 0.25})
    grid, back = mf.load(grid_run), mf.load(out)
    assert back == run and back.t.tolist() == [0.5, 0.75] and "weights/t" in back.static
    np.testing.assert_allclose(back.token_masses, grid.mass[-1] / grid.mass[-1].sum(), rtol=1e-13)
    assert np.ptp(back.token_masses) > 0  # masses, not 1/n


def test_a_file_that_keeps_its_token_masses_as_the_older_root_weights_still_reads(grid_run, tmp_path):
    import h5py

    out = tmp_path / "old.h5"
    new = mf.simulate(CONCENTRATION, out=out, **{**STEPS, "init.kind": "run", "init.path": str(grid_run)})
    with h5py.File(out, "a") as f:
        f.move("token_masses", "weights")  # the layout written before 'token_masses'
    old = mf.load(out)
    assert "token_masses" not in old.static
    np.testing.assert_array_equal(old.token_masses, new.token_masses)
    np.testing.assert_array_equal(source_tokens(out).weights, new.token_masses)  # continued, it passes them on
    np.testing.assert_allclose(concentration_curves(old)["w2_target"], new.diagnostics["w2_target"], rtol=1e-9)


def test_a_continued_run_that_lost_its_token_masses_warns_and_one_that_never_had_any_does_not(
        grid_run, particle_run, tmp_path):
    import warnings

    import h5py

    lost = tmp_path / "lost.h5"
    mf.simulate(CONCENTRATION, out=lost, **{**STEPS, "init.kind": "run", "init.path": str(grid_run), "solver.t_final": 0.75})
    with h5py.File(lost, "a") as f:
        del f["token_masses"]
    run = mf.load(lost)
    with pytest.warns(mf.MeanfieldWarning, match="lost.h5 continues the grid run .*grid.h5, but holds no token masses"):
        assert run.token_masses is None  # it had been analysed with masses 1/n without a word
    # continued in turn, its tokens had gone on with masses 1/n without a word too
    with pytest.warns(mf.MeanfieldWarning, match="lost.h5 continues the grid run .*grid.h5, but holds no token masses.*starts"):
        assert source_tokens(lost).weights is None
    with warnings.catch_warnings(record=True) as caught:  # once, where it had come twice (config, then setup)
        warnings.simplefilter("always")
        mf.simulate(CONCENTRATION, out=tmp_path / "on.h5", **{**STEPS, "init.kind": "run", "init.path": str(lost),
                                                              "solver.t_final": 1.0})
    assert sum("but holds no token masses" in str(w.message) for w in caught) == 1
    uniform = tmp_path / "uniform.h5"
    mf.simulate(CONCENTRATION, out=uniform, **{**PARTICLES, "init.kind": "run", "init.path": str(particle_run),
                                               "solver.t_final": 1.25})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mf.load(uniform).token_masses is None
        assert source_tokens(uniform).weights is None


def _edited_copy(run: Path, out: Path, edit) -> Path:
    """A copy of ``run`` whose last frame (or static arrays) ``edit(file)`` changed, the frame's checksum updated: only
    the content is wrong."""
    import shutil

    import h5py

    from meanfield.io.runfile import frame_checksum

    shutil.copy(run, out)
    with h5py.File(out, "a") as f:
        edit(f)
        name = "x" if "x" in f else "mass"
        last = int(f["committed_frames"][0]) - 1
        f["checksum"][last] = frame_checksum(f[name][last])
    return out


def _token_row(values):
    def edit(f):
        x = f["x"][-1]
        x[3] = values
        f["x"][-1] = x
    return edit


def _replaced(name, value):
    def edit(f):
        array = value(f[name][()]) if callable(value) else value
        if name in f:
            del f[name]
        f.create_dataset(name, data=array)
    return edit


def _with_row(row, value):
    def change(points):
        points[row] = value
        return points
    return change


@pytest.mark.parametrize("edit, words", [
    (_token_row(0.0), "token 3 of the frame at t = 1 is zero"),
    (_token_row([3e-200, 4e-200, 0.0]), "token 3 of the frame at t = 1 has norm 5e-200"),  # squares underflow
    (_token_row([3e200, 4e200, 0.0]), "token 3 of the frame at t = 1 has norm 5e\\+200"),  # squares overflow
    (_token_row([2.0, 0.0, 0.0]), "token 3 of the frame at t = 1 has norm 2 "),  # finite, off the sphere
    (_replaced("token_masses", np.array([b"a"] * 48)), "token masses"),  # strings: a cast to float had failed
], ids=["zero", "tiny", "huge", "off", "string-masses"])
def test_a_source_whose_tokens_cannot_be_put_on_the_sphere_exits_2_before_any_file(
        particle_run, tmp_path, capsys, edit, words):
    # each had ended in a traceback (exit 1): NaN tokens from the division by their norms, or a cast of strings
    source = _edited_copy(particle_run, tmp_path / "source.h5", edit)
    out = tmp_path / "out.h5"
    args = ["simulate", str(CONCENTRATION), "-o", str(out), "--quiet", "--set", 'init.kind="run"',
            "--set", f'init.path="{source}"', "--set", "solver.t_final=1.25"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "init.path" in err and "Traceback" not in err
    assert re.search(words, err), err
    assert not out.exists()


@pytest.mark.parametrize("point, words", [
    (np.nan, "its cell points .* finite"), (0.0, "cell point 5 .* is zero"),
])
def test_a_grid_source_whose_cell_points_cannot_be_put_on_the_sphere_is_bad_input(grid_run, tmp_path, point, words):
    # the static points are in no checksum: NaN or zero points had given NaN tokens and a traceback
    source = _edited_copy(grid_run, tmp_path / "grid.h5", _replaced("points", _with_row(5, point)))
    with pytest.raises(mf.ConfigError, match=f"init.path: .*grid.h5: {words}"):
        mf.simulate(CONCENTRATION, **{**STEPS, "init.kind": "run", "init.path": str(source)})


def test_a_grid_frame_with_a_negative_cell_mass_is_refused_though_its_checksum_matches(grid_run, tmp_path):
    # its total stays positive: only the sign check refuses it (it had become a token of negative mass)
    from meanfield.io.source_frame import read_source_frame

    def edit(f):
        mass = f["mass"][-1]
        mass[0] = -1e-3
        f["mass"][-1] = mass

    source = _edited_copy(grid_run, tmp_path / "negative.h5", edit)
    with pytest.raises(mf.ConfigError, match=r"init.path: .*negative.h5.*200 non-negative cell masses") as info:
        read_source_frame(source)
    assert info.value.key == "init.path"


def test_stored_token_masses_are_normalised_and_the_antipodal_note_s_numbers_are_numpy_s(particle_run, tmp_path):
    # masses stored in another unit (summing to 1176) had been passed on as they were; the note's sampling floor is
    # 3/sqrt(n_eff), n_eff = 1/sum(m^2), and its odd moments max(|sum m x|, |sum m x⊗x⊗x|)
    from meanfield.io.source_frame import read_source_frame

    masses = np.arange(1.0, 49.0)
    source = _edited_copy(particle_run, tmp_path / "masses.h5", _replaced("token_masses", masses))
    m = masses / masses.sum()
    np.testing.assert_allclose(read_source_frame(source).weights, m, rtol=1e-15, atol=0)
    frame = source_tokens(source, symmetry="antipodal")
    x = mf.load(particle_run).x[-1]
    np.testing.assert_allclose(frame.weights, np.concatenate([m, m]) / 2.0, rtol=1e-15, atol=0)
    np.testing.assert_allclose(frame.sampling_floor, 3.0 / np.sqrt(1.0 / np.sum(m**2)), rtol=1e-14, atol=0)
    third = np.einsum("i,ij,ik,il->jkl", m, x, x, x)
    expected = max(np.linalg.norm(m @ x), np.linalg.norm(third))
    np.testing.assert_allclose(frame.asymmetry, expected, rtol=1e-12, atol=1e-15)


def test_odd_moments_past_the_third_moment_s_dimensions_is_the_mean(rng):
    # in d > 16 only the first moment is taken: it had to be computed, not left at 0
    from meanfield.io.source_frame import THIRD_MOMENT_MAX_D, odd_moments

    d = THIRD_MOMENT_MAX_D + 4
    one = np.zeros((10, d))
    one[:, 0] = 1.0
    np.testing.assert_allclose(odd_moments(one, np.full(10, 0.1)), 1.0, rtol=1e-15, atol=0)  # one cluster
    x = rng.standard_normal((16, d)) + 0.5
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.random(16)
    w /= w.sum()
    np.testing.assert_allclose(odd_moments(x, w), np.linalg.norm(w @ x), rtol=1e-14, atol=0)
    assert odd_moments(np.vstack([x, -x]), np.concatenate([w, w]) / 2) < 1e-15


def test_a_damaged_source_of_a_continued_run_is_to_be_restored_not_left_for_another_frame(particle_run, tmp_path, capsys):
    # --resume and the analysis had advised "start from another frame (init.time)", which --resume refuses
    import shutil

    import h5py

    source, run = tmp_path / "A.h5", tmp_path / "B.h5"
    shutil.copy(particle_run, source)
    settings = {**PARTICLES, "init.kind": "run", "init.path": str(source), "track.concentration": False,
                "solver.t_final": 1.25}
    mf.simulate(CONCENTRATION, out=run, **settings)
    with h5py.File(source, "a") as f:  # one token's bytes flipped, the checksum as it was
        x = f["x"][-1]
        x[3] = -x[3]
        f["x"][-1] = x
    with pytest.raises(mf.ConfigError, match="start from another frame"):  # a new run may pick another frame
        mf.simulate(CONCENTRATION, **settings)
    damaged = "A.h5, which .*B.h5 started from, is damaged: the frame at t = 1 does not match the checksum"
    with pytest.raises(mf.ConfigError, match=f"init.path: .*{damaged}.*restore") as info:
        mf.simulate(CONCENTRATION, out=run, resume=True, **{**settings, "solver.t_final": 1.5})
    assert "init.time" not in str(info.value)
    with pytest.raises(mf.ConfigError, match=damaged) as info:
        mf.simulate(out=run, resume=True)  # (the run's own config)
    assert "init.time" not in str(info.value)
    args = ["simulate", str(CONCENTRATION), "-o", str(run), "--resume", "--quiet"]
    for key, value in settings.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    for argv in (args, ["concentration", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert re.search(damaged, err) and "init.time" not in err, err
    source.unlink()  # gone: where to put it back
    with pytest.raises(mf.ConfigError, match="A.h5, which .*B.h5 started from, is missing; .*restore the file at that path"):
        concentration_curves(mf.load(run))


def test_the_api_names_out_where_the_source_is_the_output(particle_run, tmp_path):
    # the message had named the command line's -o
    import shutil

    source = shutil.copy(particle_run, tmp_path / "x.h5")
    with pytest.raises(mf.ConfigError, match=r"x.h5 is also the output out = '.*x.h5'") as info:
        mf.simulate(CONCENTRATION, out=source, overwrite=True, **{**STEPS, "init.kind": "run", "init.path": str(source),
                                                                   "solver.t_final": 1.25})
    assert " -o " not in str(info.value)
