"""Pictures: every plotting function returns a Figure (saved when given a path) and draws what it says."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib import colors as mcolors
from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure
from matplotlib.text import Text

from meanfield.geometry import mesh as M
from meanfield.geometry.sphere import normalize, sample_uniform, sample_vmf
from meanfield.plotting import canvas, curves, density, particles


def test_density_views_return_figures_and_save(tmp_path):
    msh = M.fibonacci_mesh(300)
    m0 = M.initial_mass(msh, "vmf", kappa=4.0, mean=[1, 1, 0])
    draws = {
        "moll.png": lambda p: density.plot_density_mollweide(msh, m0, p, resolution=120, rotation="facing", log=True),
        "ortho.png": lambda p: density.plot_density_orthographic(msh, m0, p, view=(0, 0, 1), pixels=100, log=True),
        "surf.png": lambda p: density.plot_density_3d(msh, m0, p),
        "all.png": lambda p: density.plot_density(msh, m0, p, log=True),
    }
    for name, draw in draws.items():
        assert isinstance(draw(tmp_path / name), Figure)
        assert (tmp_path / name).stat().st_size > 1000, name
    assert isinstance(density.plot_density_mollweide(msh, m0), Figure)  # no path: nothing written, the figure returned
    with pytest.raises(ValueError):
        density.plot_density(msh, m0, views=("globe",))


def test_density_animation_is_returned_and_written_as_gif(tmp_path):
    from PIL import Image

    msh = M.fibonacci_mesh(300)
    m0 = M.initial_mass(msh, "vmf", kappa=4.0, mean=[1, 1, 0])
    m1 = M.initial_mass(msh, "vmf", kappa=8.0, mean=[1, 1, 0])
    anim = density.animate_density(msh, [0.0, 0.5, 1.0], [m0, 0.5 * (m0 + m1), m1], tmp_path / "run.gif", resolution=80, fps=4)
    assert isinstance(anim, FuncAnimation)
    with Image.open(tmp_path / "run.gif") as im:
        assert im.n_frames == 3
    density.animate_density(msh, [0.0, 1.0], [m0, m1], tmp_path / "ortho.gif", view="orthographic", resolution=60)
    assert (tmp_path / "ortho.gif").stat().st_size > 500
    with pytest.raises(ValueError):
        density.animate_density(msh, [0.0], [m0, m1], tmp_path / "x.gif")


def test_grid_run_summary_has_a_log_colour_bar(tmp_path):
    msh = M.fibonacci_mesh(200)
    masses = np.stack([M.initial_mass(msh, "vmf", kappa=k) for k in (1.0, 20.0, 200.0)])
    fig = density.plot_grid_run(msh, np.array([0.0, 0.5, 1.0]), masses, tmp_path / "run.png",
                                diagnostics={"energy": np.array([1.0, 1.1, 1.2]), "mass_error": np.zeros(3)})
    assert (tmp_path / "run.png").stat().st_size > 1000
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    assert len(maps) == 3
    norms = [c.norm for ax in maps for c in ax.collections]
    assert norms and all(isinstance(n, mcolors.LogNorm) for n in norms)
    assert any("log scale" in ax.get_ylabel() for ax in fig.axes)  # the colour bar and its label


def test_facing_rotation_puts_one_cluster_at_the_map_centre_and_a_pair_at_plus_minus_90_degrees():
    mean = normalize(np.array([[0.3, -0.5, 0.8]]))[0]
    x = sample_vmf(400, 3, mean=mean, kappa=50.0, seed=1)
    R = canvas.facing_rotation(x)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(R) > 0
    centre = R @ mean
    assert centre[0] > 0.99  # longitude 0, latitude 0 of the map
    axis = np.array([0.0, 0.6, 0.8])
    pair = np.concatenate([sample_vmf(300, 3, mean=axis, kappa=80.0, seed=2), sample_vmf(200, 3, mean=-axis, kappa=80.0, seed=3)])
    turned = canvas.facing_rotation(pair) @ axis
    lon = np.degrees(np.arctan2(turned[1], turned[0]))
    assert abs(abs(lon) - 90.0) < 5.0 and abs(turned[2]) < 0.1  # on the equator, a quarter turn from the centre


def test_points_on_the_sphere_tell_front_from_back():
    from matplotlib.figure import Figure as F

    x = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
    fig = F()
    ax = fig.add_subplot(111)
    rotation = canvas.rotation_to([0.0, 0.0, 1.0])
    canvas.draw_points(ax, x, rotation, color="C0")
    back, front = ax.collections
    assert back.get_alpha() < 0.5 < front.get_alpha()
    np.testing.assert_allclose(back.get_offsets(), [[0.0, 0.0]])  # the south pole, behind
    assert len(front.get_offsets()) == 2 and front.get_zorder() > back.get_zorder()


def test_particle_strip_is_flat_discs_and_returns_a_figure(tmp_path):
    t = np.array([0.0, 1.0, 2.0])
    x = np.stack([sample_uniform(50, 3, seed=k) for k in range(3)])
    fig = particles.plot_particle_run(t, x, tmp_path / "strip.png", diagnostics={"energy": np.array([1.0, 1.2, 1.3])})
    assert isinstance(fig, Figure) and (tmp_path / "strip.png").stat().st_size > 1000
    assert not any(ax.name == "3d" for ax in fig.axes)
    assert fig.axes[-1].get_xlabel() == "time t" and "energy" in fig.axes[-1].get_ylabel()


def test_a_token_keeps_its_colour_in_every_panel_and_hemisphere(tmp_path):
    # each hemisphere's scatter had scaled the colours to its own tokens: token 8 drawn in the colour of token 63
    t = np.array([0.0, 1.0])
    x = np.stack([sample_uniform(64, 3, seed=1), np.tile(normalize(np.array([1.0, 2.0, 3.0])), (64, 1))])
    x[1, :9] = sample_uniform(9, 3, seed=2)  # 9 tokens apart, the rest one cluster
    fig = particles.plot_particle_run(t, x, tmp_path / "strip.png")
    scatters = [c for ax in fig.axes for c in ax.collections if c.get_array() is not None]
    assert len(scatters) >= 3
    assert {(c.norm.vmin, c.norm.vmax) for c in scatters} == {(0.0, 63.0)}


def test_high_dimensional_runs_are_drawn_in_principal_components_with_inner_products(tmp_path):
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 1.0, 4)
    base = normalize(rng.standard_normal(16))
    x = np.stack([normalize(base + s * rng.standard_normal((40, 16))) for s in (2.0, 1.0, 0.3, 0.01)])
    fig = particles.plot_high_dim_run(t, x, tmp_path / "pca.png")
    assert isinstance(fig, Figure) and (tmp_path / "pca.png").stat().st_size > 1000
    assert not any(ax.name == "3d" for ax in fig.axes)
    assert any("principal component" in ax.get_xlabel() for ax in fig.axes)
    assert any("inner product" in ax.get_ylabel() for ax in fig.axes)
    hist, edges = particles.inner_product_histograms(x, bins=40)
    widths = np.diff(edges)
    np.testing.assert_allclose(hist @ widths, 1.0, rtol=1e-12)  # each frame is a probability density
    assert hist[-1, -1] * widths[-1] > 0.99  # the last frame is one cluster: every pair in the top bin


def test_particle_animation_draws_the_sphere(tmp_path):
    from PIL import Image

    t = [0.0, 0.5]
    x = np.stack([sample_uniform(30, 3, seed=k) for k in range(2)])
    anim = particles.animate_particles(t, x, tmp_path / "p.gif", fps=4)
    assert isinstance(anim, FuncAnimation)
    with Image.open(tmp_path / "p.gif") as im:
        assert im.n_frames == 2
    ax = anim._fig.axes[0]  # noqa: SLF001 - the outline of the sphere is the first line drawn
    outline = ax.lines[0].get_xydata()
    np.testing.assert_allclose(np.hypot(outline[:, 0], outline[:, 1]), 1.0, atol=1e-12)


def test_convergence_plot(tmp_path):
    rows = [{"cells": 100, "h": 0.35, "w2_reference": 0.1, "w2_particles": 0.12},
            {"cells": 400, "h": 0.18, "w2_reference": 0.05, "w2_particles": 0.07},
            {"cells": 1600, "h": 0.09, "w2_reference": float("nan"), "w2_particles": 0.04}]
    fig = curves.plot_convergence(rows, tmp_path / "conv.png")
    assert isinstance(fig, Figure) and (tmp_path / "conv.png").stat().st_size > 1000


def test_the_convergence_plot_s_guides_pass_through_the_coarsest_point():
    # the guides had to start at the coarsest row (largest h), not the finest
    rows = [{"h": 0.35, "l1_reference": 0.2, "w2_reference": 0.08},
            {"h": 0.18, "l1_reference": 0.06, "w2_reference": 0.05},
            {"h": 0.09, "l1_reference": 0.01, "w2_reference": 0.02}]
    lines = curves.plot_convergence(rows).axes[0].get_lines()
    guides = [(data, line) for data, line in zip(lines, lines[1:]) if line.get_label().startswith("slope")]
    assert [line.get_label() for _, line in guides] == ["slope 2", "slope 1"]
    for data, line in guides:
        h, e = np.asarray(data.get_xdata(), dtype=float), np.asarray(data.get_ydata(), dtype=float)
        order = int(line.get_label().split()[1])
        np.testing.assert_allclose(line.get_xdata(), [h.min(), h.max()], rtol=0, atol=0)
        np.testing.assert_allclose(line.get_ydata(), e[np.argmax(h)] * (np.array([h.min(), h.max()]) / h.max()) ** order,
                                   rtol=1e-14, atol=0)
        np.testing.assert_allclose(line.get_ydata()[1], [0.2, 0.08][order == 1], rtol=1e-14, atol=0)


def test_snapshot_panels_show_the_first_and_the_last_frame():
    # the panels had to spread over every frame, the last included
    t = np.linspace(0.0, 2.0, 5)
    x = np.stack([sample_uniform(16, 3, seed=k) for k in range(5)])
    fig = particles.plot_particle_run(t, x, None, snapshots=3)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title().startswith("t = ")]
    assert titles == ["t = 0", "t = 1", "t = 2"]
    assert particles._picks(2, 2) == [0, 1] and particles._picks(9, 4) == [0, 3, 5, 8]


def test_inner_product_histograms_count_each_pair_once_and_no_token_with_itself(rng):
    # the pairs i < j only: a token with itself had added a spike at <x, x> = 1
    import itertools

    x = np.stack([normalize(rng.standard_normal((6, 3))) for _ in range(2)])
    w = rng.random(6)
    hist, edges = particles.inner_product_histograms(x, bins=8)
    weighted, _ = particles.inner_product_histograms(x, bins=8, weights=w)
    pairs = list(itertools.combinations(range(6), 2))
    for k in range(2):
        values = [x[k, i] @ x[k, j] for i, j in pairs]
        expected, _ = np.histogram(values, bins=np.linspace(-1, 1, 9), density=True)
        np.testing.assert_allclose(hist[k], expected, rtol=1e-12, atol=1e-12)
        expected, _ = np.histogram(values, bins=np.linspace(-1, 1, 9), density=True, weights=[w[i] * w[j] for i, j in pairs])
        np.testing.assert_allclose(weighted[k], expected, rtol=1e-12, atol=1e-12)
    two, _ = particles.inner_product_histograms(np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]), bins=4)
    np.testing.assert_allclose(two[0], [0.0, 0.0, 2.0, 0.0], rtol=0, atol=1e-15)


@pytest.mark.parametrize(("view", "facing"), [("mollweide", "facing_rotation"), ("orthographic", "facing_view")])
def test_the_density_animation_faces_the_final_mass(view, facing, monkeypatch):
    # its docstring promises the map facing the final mass, not the initial one
    msh = M.fibonacci_mesh(200)
    m0 = M.initial_mass(msh, "uniform")
    m1 = M.initial_mass(msh, "vmf", kappa=8.0, mean=[1, 1, 0])
    real = getattr(density, facing)
    seen = []

    def recorded(points, weights=None):
        seen.append(np.array(weights, dtype=float))
        return real(points, weights)

    monkeypatch.setattr(density, facing, recorded)
    anim = density.animate_density(msh, [0.0, 1.0], [m0, m1], view=view, resolution=40)
    anim._draw_was_started = True  # noqa: SLF001 (never saved)
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], m1, rtol=0, atol=0)


def test_titles_name_the_zero_temperature_limit_and_the_mesh_s_own_cells():
    # a zero-temperature solve() run had been titled "β = 4", and a graded mesh "N = 200 cells" for its 397
    import meanfield as mf
    from meanfield.plotting.runs import run_title

    model, x0 = mf.Model(d=3, beta=4.0), sample_uniform(20, 3, seed=0)
    zero = mf.solve(mf.Problem(model, x0), mf.ZeroTemperatureSolver(dt=0.05), t_final=0.2)
    assert run_title(zero) == "softmax attention, β = ∞ (zero temperature), n = 20 tokens, zero-temperature solver"
    assert "β=∞" in zero.summary()
    peri = mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=0.05, norm="peri"), t_final=0.2)
    assert run_title(peri) == "softmax attention, norm = peri, β = 4, n = 20 tokens, particle solver"  # (the size, as a
    # simulate run's title gives it)
    graded = mf.simulate({"solver": {"kind": "grid", "t_final": 0.05},
                          "grid": {"cells": 200, "family": "graded", "refine_centres": [[1, 0, 0]]}})
    assert f"N = {graded.mesh().N} cells" in run_title(graded) and graded.mesh().N > 200


def test_a_picture_path_that_is_a_folder_or_has_no_suffix_is_refused(tmp_path):
    # run.plot(folder) had written folder.png beside it without a word
    t = np.array([0.0, 1.0])
    x = np.stack([sample_uniform(8, 3, seed=1)] * 2)
    for bad in (tmp_path, tmp_path / "picture"):
        with pytest.raises(ValueError, match="give the picture's file name"):
            particles.plot_particle_run(t, x, bad)
    assert sorted(p.name for p in tmp_path.parent.iterdir() if p.name.startswith(tmp_path.name)) == [tmp_path.name]
    assert not list(tmp_path.iterdir())


def test_a_picture_path_that_holds_a_run_is_refused_by_the_api_and_the_cli(tmp_path):
    # the API's check had let a run named like a picture be replaced by the picture (only the CLI refused it)
    import h5py

    from meanfield.cli import main
    from meanfield.plotting.canvas import check_picture_path

    run_named_png = tmp_path / "run.png"
    with h5py.File(run_named_png, "w") as f:
        f["x"] = np.zeros(3)
    before = run_named_png.read_bytes()
    t = np.array([0.0, 1.0])
    x = np.stack([sample_uniform(8, 3, seed=1)] * 2)
    with pytest.raises(ValueError, match="is a run file"):
        particles.plot_particle_run(t, x, run_named_png)
    assert main(["run", "--quiet", "--set", "init.n=8", "--out", str(tmp_path / "r.h5"), "--plot", str(run_named_png)]) == 2
    assert run_named_png.read_bytes() == before and not (tmp_path / "r.h5").exists()
    assert check_picture_path(tmp_path / "p.png") == tmp_path / "p.png"


def test_a_picture_under_a_file_is_refused_by_the_api_and_the_cli_alike(tmp_path, capsys):
    # one folder check (the run outputs'): the API raises a ValueError, the CLI names its option
    from meanfield.cli import main
    from meanfield.plotting.canvas import check_picture_path

    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="afile is a file, not a folder"):
        check_picture_path(tmp_path / "afile" / "deeper" / "p.png")
    assert main(["run", "--quiet", "--set", "init.n=8", "--out", str(tmp_path / "r.h5"),
                 "--plot", str(tmp_path / "afile" / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "is a file, not a folder" in err and not (tmp_path / "r.h5").exists()


def test_the_cli_plot_option_takes_a_picture_or_an_animation_and_names_both(tmp_path, capsys):
    from meanfield.cli import main

    assert main(["run", "--quiet", "--set", "init.n=8", "--out", str(tmp_path / "r.h5"), "--plot", str(tmp_path / "r.txt")]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and ".png" in err and "for an animation, .gif" in err and not (tmp_path / "r.h5").exists()
    assert main(["diagnose", str(tmp_path / "none.h5"), "--plot", str(tmp_path / "d.gif")]) == 2  # no animation there
    assert "--plot" in capsys.readouterr().err


def test_token_masses_scale_the_markers_and_weigh_the_pairs(tmp_path):
    # a run continued from a grid frame (99 % of the mass in one cluster) had been drawn as a cloud of equal dots
    import meanfield as mf

    x0 = sample_uniform(40, 3, seed=3)
    a = np.full(40, 0.01 / 39)
    a[0] = 0.99
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x0, weights=a), mf.ParticleSolver(dt=0.05), t_final=0.1)
    fig = run.plot(tmp_path / "masses.png")
    first = fig.axes[0]
    sizes = np.concatenate([c.get_sizes() for c in first.collections if len(c.get_sizes()) > 1 or c.get_array() is not None])
    assert sizes.max() / sizes.min() > 1000  # areas ∝ masses: 0.99 against 0.01/39 (front/back halve some)
    assert "marker area ∝ token mass" in fig._suptitle.get_text()  # noqa: SLF001
    # d > 3: each pair (i, j) counts a_i a_j
    x = np.stack([normalize(np.random.default_rng(0).standard_normal((5, 6)))] * 2)
    w = np.array([4.0, 1.0, 1.0, 1.0, 1.0])
    hist, edges = particles.inner_product_histograms(x, bins=20, weights=w)
    gram = (x[0] @ x[0].T)[np.triu_indices(5, 1)]
    expected, _ = np.histogram(gram, bins=edges, density=True, weights=np.outer(w, w)[np.triu_indices(5, 1)])
    np.testing.assert_allclose(hist[0], expected, rtol=1e-13)
    assert not np.allclose(hist[0], particles.inner_product_histograms(x, bins=20)[0][0])
    assert isinstance(particles.plot_high_dim_run(np.array([0.0, 1.0]), x, weights=w), Figure)


def test_bad_picture_paths_of_the_python_api_are_named_before_anything_is_drawn(tmp_path):
    # a grid run's plot(folder) had written folder.png beside it; x.txt and animate(x.mp4) failed in matplotlib
    # after every frame was drawn
    from matplotlib import animation as manimation

    import meanfield as mf

    mesh = M.fibonacci_mesh(100)
    grid = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), np.full(100, 0.01), mesh=mesh), mf.GridSolver(), t_final=0.05)
    tokens = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), sample_uniform(10, 3, seed=0)), mf.ParticleSolver(), t_final=0.05)
    for run in (grid, tokens):
        for bad, match in ((tmp_path, "is a folder"), (tmp_path / "picture", "a name without a suffix"),
                           (tmp_path / "x.txt", "cannot draw into")):
            with pytest.raises(ValueError, match=f"^path: .*{match}"):
                run.plot(bad)
        with pytest.raises(ValueError, match="^path: .*is a folder"):
            run.animate(tmp_path)
        with pytest.raises(ValueError, match="^path: cannot write an animation to .*x.png"):
            run.animate(tmp_path / "x.png")
        if not manimation.writers.is_available("ffmpeg"):
            with pytest.raises(ValueError, match="videos need ffmpeg"):
                run.animate(tmp_path / "x.mp4")
    assert not list(tmp_path.iterdir()) and not (tmp_path.parent / f"{tmp_path.name}.png").exists()


def test_run_plot_takes_one_set_of_options_and_names_a_wrong_one():
    # snapshots= had been a TypeError of plot_grid_run, and a misspelt option named a function the user never called
    import meanfield as mf

    grid = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), np.full(100, 0.01), mesh=M.fibonacci_mesh(100)), mf.GridSolver(),
                    t_final=0.05, save_every=0.01)
    tokens = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), sample_uniform(10, 3, seed=0)), mf.ParticleSolver(), t_final=0.05,
                      save_every=0.01)
    assert len([ax for ax in grid.plot(snapshots=2).axes if ax.name == "mollweide"]) == 2
    assert len([ax for ax in tokens.plot(snapshots=2).axes if ax.get_title().startswith("t = ")]) == 2
    for run, kind in ((grid, "grid"), (tokens, "particle")):
        with pytest.raises(TypeError, match=f"^Run.plot\\(\\) of a {kind} run got unknown option 'colour'; it takes snapshots"):
            run.plot(colour="red")
        with pytest.raises(TypeError, match=f"^Run.animate\\(\\) of a {kind} run got unknown option 'colour'; it takes fps"):
            run.animate(colour="red")


def test_an_overflowed_energy_gives_its_panel_to_the_speed_and_empty_cells_are_grey():
    t = np.array([0.0, 0.5])
    x = np.stack([sample_uniform(20, 3, seed=1)] * 2)
    fig = particles.plot_particle_run(t, x, diagnostics={"energy": np.full(2, np.inf), "max_speed": np.array([1.0, 0.5])})
    assert "largest speed" in fig.axes[-1].get_ylabel()  # had been an empty "interaction energy" panel
    msh = M.fibonacci_mesh(200)
    half = (msh.points[:, 2] > 0).astype(float)
    fig = density.plot_grid_run(msh, np.array([0.0]), (half / half.sum())[None])
    mesh = [c for ax in fig.axes if ax.name == "mollweide" for c in ax.collections][0]
    colours = mesh.to_rgba(np.asarray(mesh.get_array())).reshape(-1, 4)
    grey = mcolors.to_rgba(density.NO_MASS_COLOUR)
    drawn_grey = np.all(np.isclose(colours, grey), axis=1)
    assert 0.3 < drawn_grey.mean() < 0.7 and np.all(colours[:, 3] == 1.0)  # the empty half grey, not transparent
    assert "grey: no mass" in fig._suptitle.get_text()  # noqa: SLF001


def test_an_energy_past_the_floats_is_drawn_as_its_log():
    # at beta = 1024 the energy is inf at every frame; the tracker's ln E had been ignored and the speed drawn instead
    import meanfield as mf

    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1024.0), sample_uniform(12, 3, seed=3)), mf.ParticleSolver(dt=1e-3),
                   t_final=0.004, save_every=0.002)
    assert np.isinf(run.diagnostics["energy"]).all() and np.isfinite(run.diagnostics["log_energy"]).all()
    panel = run.plot().axes[-1]
    assert panel.get_ylabel().startswith(r"$\ln E$")
    np.testing.assert_array_equal(panel.lines[0].get_ydata(), run.diagnostics["log_energy"])
    t = np.array([0.0, 0.5])
    partly = {"energy": np.array([2.0, np.inf]), "log_energy": np.log([2.0, 1e310]), "max_speed": np.ones(2)}
    assert particles.plot_particle_run(t, np.stack([sample_uniform(20, 3, seed=1)] * 2),
                                       diagnostics=partly).axes[-1].get_ylabel().startswith(r"$\ln E$")
    msh = M.fibonacci_mesh(200)
    uniform = np.full((2, msh.N), 1.0 / msh.N)
    fig = density.plot_grid_run(msh, t, uniform, diagnostics=partly)
    panels = [ax.get_ylabel() for ax in fig.axes if ax.get_xlabel() == "time t"]
    assert panels == ["ln E (E past the largest float)", "largest speed max |X|"]
    finite = {"energy": np.array([2.0, 3.0]), "log_energy": np.log([2.0, 3.0])}  # a finite energy is drawn as itself
    assert "interaction energy" in particles.plot_particle_run(t, np.stack([sample_uniform(20, 3, seed=1)] * 2),
                                                               diagnostics=finite).axes[-1].get_ylabel()


def test_a_pooled_run_draws_the_flows_energy_not_the_sum_over_heads():
    # on a pooled run the figure had drawn energy = Σ_h E_h (4× the flow's Σ_h w_h E_h here) as "interaction energy E"
    import meanfield as mf

    root = Path(__file__).resolve().parents[3]
    run = mf.simulate(root / "data/oscillating_heads.toml", t_final=0.2, save_every=0.1, **{"init.n": 12})
    assert np.allclose(run.diagnostics["energy"], 4 * run.diagnostics["energy_theta"])
    panel = run.plot().axes[-1]
    np.testing.assert_array_equal(panel.lines[0].get_ydata(), run.diagnostics["energy_theta"])
    assert panel.get_ylabel() == r"energy $E(\mu_t, t)=\sum_h w_hE_h$"
    t = np.array([0.0, 0.5])
    both = {"energy": np.array([4.0, 3.0]), "energy_theta": np.array([1.0, 0.75]), "log_energy": np.log([4.0, 3.0])}
    assert curves.shown_energy(both, 2)[0] == "energy"  # another law: the sum (or mean) is its energy
    assert curves.shown_energy(both, 2, attention="pooled")[0] == "energy_theta"
    past = {"energy": np.full(2, np.inf), "energy_theta": np.full(2, np.inf), "log_energy": np.log([2.0, 1e310])}
    key, series = curves.shown_energy(past, 2, attention="pooled")  # ln Σ_h E_h, named as the sum over the heads
    assert key == "log_energy_sum" and np.array_equal(series, past["log_energy"])
    msh = M.fibonacci_mesh(120)
    fig = density.plot_grid_run(msh, t, np.full((2, msh.N), 1.0 / msh.N), diagnostics=both, attention="pooled")
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_xlabel() == "time t"] == ["energy E(μ_t, t) = Σ_h w_h E_h"]
    fig = particles.plot_particle_run(t, np.stack([sample_uniform(20, 3, seed=1)] * 2), diagnostics=past, attention="pooled")
    assert fig.axes[-1].get_ylabel().startswith(r"$\ln\sum_h E_h$")


@pytest.mark.parametrize("snapshots", [1, 2, 4, 6])
def test_the_run_pictures_time_label_lies_on_the_canvas(snapshots):
    # with the energy panel square, the "time t" label had been drawn 4-6 px below the canvas
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    t = np.linspace(0.0, 2.0, 9)
    x = np.stack([sample_uniform(32, 3, seed=k) for k in range(9)])
    fig = particles.plot_particle_run(t, x, None, diagnostics={"energy": np.linspace(1.0, 1.5, 9)}, snapshots=snapshots,
                                      title="softmax attention")
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    label = fig.axes[-1].xaxis.label
    assert label.get_text() == "time t" and label.get_window_extent(fig.canvas.get_renderer()).y0 >= 0


@pytest.mark.parametrize("method, options, error, name", [
    ("animate", {"fps": 0}, ValueError, "fps"), ("animate", {"fps": -2}, ValueError, "fps"),
    ("animate", {"dpi": 0}, ValueError, "dpi"), ("plot", {"dpi": "x"}, ValueError, "dpi"),
    ("plot", {"title": 5}, TypeError, "title"), ("plot", {"path": 5}, TypeError, "path"),
])
def test_run_plot_and_animate_name_a_bad_option_before_drawing(tmp_path, method, options, error, name):
    # fps=0 had been a ZeroDivisionError after every frame was drawn, dpi=0 an IndexError, title=5 a TypeError of '+'
    import meanfield as mf

    run = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0), sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.1),
                   t_final=0.2, save_every=0.1)
    path = options.pop("path", tmp_path / ("a.gif" if method == "animate" else "p.png"))
    with pytest.raises(error, match=f"^{name}"):
        getattr(run, method)(path, **options)
    assert not any(tmp_path.iterdir())


def test_a_video_plot_path_makes_an_animation_in_simulate_info_and_run(tmp_path, monkeypatch, capsys):
    # with ffmpeg found, --plot v.mp4 passed the up-front check, then went to run.plot() and failed after the whole run
    from matplotlib import animation as manimation

    from meanfield.cli import main

    saved = []

    def fake_save(self, filename, writer=None, **kwargs):  # (no ffmpeg needed: the file the writer would get)
        saved.append((type(self).__name__, str(filename), writer))
        self._draw_was_started = True  # noqa: SLF001 (no "deleted without rendering" warning from the faked save)
        open(filename, "wb").close()

    monkeypatch.setattr(manimation.writers, "is_available", lambda name: True)
    monkeypatch.setattr(manimation.Animation, "save", fake_save)
    monkeypatch.chdir(tmp_path)
    default = str(Path(__file__).resolve().parents[3] / "data" / "default.toml")
    short = ["--quiet", "--set", "init.n=8", "--set", "solver.t_final=0.5", "--set", "solver.save_every=0.25"]
    assert main(["simulate", default, "-o", "v.h5", *short, "--plot", "v.mp4"]) == 0
    assert main(["info", "v.h5", "--plot", "i.MOV"]) == 0
    assert main(["run", "--out", "r.h5", *short, "--plot", "r.webm"]) == 0
    assert saved == [("FuncAnimation", "v.mp4", "ffmpeg"), ("FuncAnimation", "i.MOV", "ffmpeg"),
                     ("FuncAnimation", "r.webm", "ffmpeg")]
    assert "wrote v.mp4" in capsys.readouterr().out


def _largest_quadmesh_values(fig):
    from matplotlib.collections import QuadMesh

    meshes = [c for ax in fig.axes for c in ax.collections if isinstance(c, QuadMesh)]
    return np.asarray(max(meshes, key=lambda c: c.get_array().size).get_array())


def test_maps_of_a_graded_mesh_draw_its_finest_cells_and_its_peak_density(monkeypatch):
    # a fixed 240-pixel raster had missed most cap cells of a graded mesh: the peak (the colour bar's top) was drawn nowhere
    from meanfield.geometry.graded import graded_mesh

    msh = graded_mesh(300, [[1, 0, 0], [-1, 0, 0]])
    p = msh.points
    mass = np.exp((np.abs(p[:, 0]) - 1) / 0.02**2) * msh.areas
    mass /= mass.sum()
    rho = mass / msh.areas
    fig = density.plot_grid_run(msh, np.array([0.0]), mass[None])
    drawn = _largest_quadmesh_values(fig)
    seen = rho > 1e-8 * rho.max()  # (below: drawn at the log scale's floor)
    assert drawn.max() == rho.max() and np.isin(rho[seen], drawn).all()  # every cell with mass, the densest too
    assert "not all drawn" not in fig._suptitle.get_text()  # noqa: SLF001
    anim = density.animate_density(msh, [0.0], [mass])
    assert _largest_quadmesh_values(anim._fig).max() == rho.max()  # noqa: SLF001
    anim._draw_was_started = True  # noqa: SLF001 (never saved)
    monkeypatch.setattr(density, "MAX_RASTER", 256)  # the cap binds: said in the figure
    fig = density.plot_grid_run(msh, np.array([0.0]), mass[None])
    assert _largest_quadmesh_values(fig).size == 256 * 128
    assert "map raster capped at 256 pixels" in fig._suptitle.get_text()  # noqa: SLF001


def test_a_collapsed_cluster_of_weighted_tokens_is_drawn_by_its_summed_mass():
    # four tokens of mass 0.1 on one spot had been drawn like one token of mass 0.2 (mean area · √4), though the figure
    # says "marker area ∝ token mass"
    x = np.array([[1, 0, 0]] * 4 + [[0, 1, 0]] + [[0, 0, 1]], float)[None]
    w = np.array([0.1, 0.1, 0.1, 0.1, 0.4, 0.2])
    fig = particles.plot_particle_run(np.array([0.0]), x, weights=w)
    sizes = np.concatenate([c.get_sizes() for c in fig.axes[0].collections])
    np.testing.assert_allclose(sorted(sizes), [156.767, 313.535, 313.535], rtol=1e-5)  # the cluster = the 0.4 token
    # tokens of equal mass keep the √count rule
    fig = particles.plot_particle_run(np.array([0.0]), x)
    one = particles._marker_size(6)  # noqa: SLF001
    np.testing.assert_allclose(sorted(np.concatenate([c.get_sizes() for c in fig.axes[0].collections])), [one, one, 2 * one])


def test_token_values_have_one_colour_scale_on_both_hemispheres():
    # without a cmap, the back and the front scatter had each scaled to its own tokens: 0 and 3 drew the same colour
    x = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, 0, 0], [0, -1, 0], [0, 0, -1]], float)
    fig = particles.plot_particles_sphere(x, view=(1, 1, 1), color=np.arange(6.0))
    scatters = fig.axes[0].collections
    assert len(scatters) == 2 and all(c.get_clim() == (0.0, 5.0) for c in scatters)
    rgba = {int(v): tuple(c.to_rgba(np.array([v]))[0]) for c in scatters for v in np.asarray(c.get_array())}
    assert len(set(rgba.values())) == 6


@pytest.mark.parametrize("frames", [1, 3])
def test_the_grid_summary_draws_every_recorded_series_whatever_the_number_of_maps(frames):
    # the bottom row had one panel per map: one map showed the energy alone, two dropped the largest speed
    msh = M.fibonacci_mesh(120)
    masses = np.stack([M.initial_mass(msh, "vmf", kappa=k) for k in (1.0, 5.0, 20.0)])
    series = {"mass_error": np.zeros(3), "max_speed": np.array([1.0, 0.5, 0.2]), "energy": np.array([1.0, 1.1, 1.2]),
              "w2_target": np.array([0.3, 0.2, 0.1])}
    fig = density.plot_grid_run(msh, np.array([0.0, 0.5, 1.0]), masses, diagnostics=series, frames=frames)
    assert len([ax for ax in fig.axes if ax.name == "mollweide"]) == frames
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_xlabel() == "time t"] == [
        "interaction energy E", "W₂ to Π♯ρ₀", "largest speed max |X|", "mass error |Σm(t) − Σm(0)|"]


def test_a_nan_frame_or_a_massless_frame_is_named_before_anything_is_drawn(tmp_path):
    # a NaN frame had been a LinAlgError ("Eigenvalues did not converge", "SVD did not converge") of the view facing the
    # mass, an all-NaN map a zero-size reduction, a massless one a LinAlgError of weights / 0
    msh = M.fibonacci_mesh(100)
    u = msh.areas / msh.areas.sum()
    t = np.array([0.0, 0.5])
    for masses, match in ((np.vstack([u, np.full(msh.N, np.nan)]), r"^masses: frame 1 \(t = 0.5\) holds non-finite"),
                          (np.vstack([np.zeros(msh.N), u]), r"^masses: frame 0 \(t = 0\) has total mass 0")):
        with pytest.raises(ValueError, match=match):
            density.plot_grid_run(msh, t, masses)
        with pytest.raises(ValueError, match=match):
            density.animate_density(msh, t, list(masses), tmp_path / "a.gif")
    with pytest.raises(ValueError, match="^mass holds 1 non-finite"):
        density.plot_density_mollweide(msh, np.where(np.arange(msh.N) == 3, np.nan, u))
    for d, draw in ((3, particles.plot_particle_run), (5, particles.plot_high_dim_run), (5, particles.animate_particles)):
        x = np.stack([sample_uniform(6, d, seed=0)] * 2)
        x[1, 2, 0] = np.nan
        with pytest.raises(ValueError, match=r"^x: frame 1 \(t = 0.5\) holds non-finite"):
            draw(t, x, tmp_path / ("a.gif" if draw is particles.animate_particles else "a.png"))
    with pytest.raises(ValueError, match="^weights sum to 0"):
        particles.plot_particles_sphere(sample_uniform(6, 3, seed=0), weights=np.zeros(6))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("method, options, name", [
    ("animate", {"view": "orthographic", "orthographic_view": (1, 0)}, "orthographic_view"),
    ("animate", {"view": "orthographic", "orthographic_view": (0, 0, 0)}, "orthographic_view"),
    ("animate", {"view": "orthographic", "orthographic_view": (1, np.nan, 0)}, "orthographic_view"),
    ("animate", {"orthographic_view": (1, 0, 0)}, "orthographic_view"),  # (with the Mollweide view: ignored)
    ("animate", {"resolution": 0}, "resolution"), ("animate", {"resolution": 1.5}, "resolution"),
    ("animate", {"resolution": -5}, "resolution"), ("animate", {"log": "no"}, "log"),
    ("animate", {"fixed_scale": 1}, "fixed_scale"), ("plot", {"log": "no"}, "log"),
])
def test_grid_map_options_are_named_when_wrong_before_drawing(tmp_path, method, options, name):
    # orthographic_view=(1, 0) had been an IndexError, resolution=0 a GIF of empty maps, log="no" a log scale
    import meanfield as mf

    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), np.full(60, 1 / 60), mesh=M.fibonacci_mesh(60)), mf.GridSolver(),
                   t_final=0.02, save_every=0.01)
    with pytest.raises(ValueError, match=f"^{name} "):
        getattr(run, method)(tmp_path / ("a.gif" if method == "animate" else "p.png"), **options)
    with pytest.raises(ValueError, match=f"^{name} "):  # the functions themselves too
        if method == "animate":
            density.animate_density(run.mesh(), run.t, run.mass, **options)
        else:
            density.plot_grid_run(run.mesh(), run.t, run.mass, **options)
    assert not any(tmp_path.iterdir())


def test_a_map_rotation_is_an_array_or_facing():
    msh = M.fibonacci_mesh(60)
    with pytest.raises(ValueError, match="^rotation must be a"):
        density.plot_density_mollweide(msh, np.full(60, 1 / 60), rotation="anything")


def test_a_picture_path_ending_in_a_slash_or_empty_is_refused_by_the_api_and_the_cli(tmp_path, capsys):
    # "x.png/" had written a file x.png (the slash check ran after Path dropped it); --plot "" read ". is a folder"
    from meanfield.cli import main

    t = np.array([0.0, 1.0])
    x = np.stack([sample_uniform(8, 3, seed=1)] * 2)
    with pytest.raises(ValueError, match=r"^path: .*x\.png/ names a folder \(it ends in /\); .*e\.g\. .*x\.png$"):
        particles.plot_particle_run(t, x, f"{tmp_path}/x.png/")
    with pytest.raises(ValueError, match="^path: empty file name"):
        particles.plot_particle_run(t, x, "")
    default = str(Path(__file__).resolve().parents[3] / "data" / "default.toml")
    for plot, message in ((f"{tmp_path}/y.png/", "y.png/ names a folder"), ("", "--plot: empty file name")):
        assert main(["simulate", default, "-o", str(tmp_path / "r.h5"), "--quiet", "--plot", plot]) == 2
        assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_sweep_of_two_close_betas_has_readable_ticks_no_nan_r2_and_marks_a_minimum_at_the_last_frame():
    # β = 4, 8: the third panel's minor labels had been printed over each other, both legends read "R²=nan", and a
    # t_min at the last frame (W2 still falling) was drawn as an ordinary minimum
    import math
    from types import SimpleNamespace

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.ticker import NullFormatter

    t = np.linspace(0.0, 3.0, 13)
    sweep = SimpleNamespace(
        betas=np.array([4.0, 8.0]), solver="particle",
        curves=[{"t": t, "w2_target": 0.5 * np.exp(-t) + 0.1}, {"t": t, "w2_target": 0.4 * np.exp(-t / 4) + 0.05}],
        summaries=[{"t_min": 2.0, "w2_min": 0.12, "under_resolved": False, "min_at_end": False},
                   {"t_min": 3.0, "w2_min": 0.2, "under_resolved": False, "min_at_end": True}],
        fit_tmin={"slope": 1.4, "intercept": 0.1, "r2": math.nan}, fit_w2min={"slope": 0.8, "intercept": -1.0, "r2": math.nan})
    fig = curves.plot_sweep(sweep)
    FigureCanvasAgg(fig).draw()
    ax1, ax2, ax3 = fig.axes[:3]
    for axis in (ax3.xaxis, ax3.yaxis):
        assert isinstance(axis.get_minor_formatter(), NullFormatter)
        assert len([label for label in axis.get_ticklabels() if label.get_text()]) >= 2  # at the values, not none
    legends = [text.get_text() for ax in (ax2, ax3) for text in ax.get_legend().get_texts()]
    assert not any("nan" in text for text in legends)
    assert "minimum at the last frame: t_min ≥ this" in legends
    markers = [(line.get_marker(), tuple(line.get_xdata())) for line in ax2.get_lines() if line.get_linestyle() == "None"]
    assert (">", (math.log(8.0),)) in markers and ("o", (math.log(4.0),)) in markers
    assert [line.get_marker() for line in ax1.get_lines() if line.get_linestyle() == "None"] == ["o", ">"]


def test_colour_bars_and_captions_say_what_is_drawn():
    # plot_density's bar had the plain colormap and no "(log scale)"; a linear map drew negative masses grey without a
    # caption; plot_high_dim_run's bar said "(log scale)" over a linear norm; |Σm(t) − Σm(0)| had half its axis below 0
    msh = M.fibonacci_mesh(120)
    u = M.initial_mass(msh, "vmf", kappa=4.0, mean=[1, 0, 0])
    fig = density.plot_density(msh, u, views=("mollweide",), log=True)
    bar = [ax for ax in fig.axes if "density m/A" in ax.get_xlabel()]
    assert bar and "(log scale)" in bar[0].get_xlabel()
    assert np.allclose(bar[0].collections[-1].cmap.get_under(), mcolors.to_rgba(density.NO_MASS_COLOUR))  # (its solids)
    negative = u.copy()
    negative[:5] = -1e-4
    fig = density.plot_grid_run(msh, np.array([0.0, 1.0]), np.stack([u, negative]), log=False,
                                diagnostics={"mass_error": np.array([0.0, 2e-16])})
    assert "grey: negative mass" in fig._suptitle.get_text()  # noqa: SLF001
    assert [ax.get_ylim()[0] for ax in fig.axes if ax.get_ylabel().startswith("mass error")] == [0.0]
    x = np.stack([sample_uniform(1, 5, seed=0)] * 2)
    fig = particles.plot_high_dim_run(np.array([0.0, 1.0]), x)
    assert not any("log scale" in ax.get_ylabel() for ax in fig.axes)


def test_titles_name_a_causal_mask_the_heads_mean_and_the_scheme(tmp_path):
    # a masked run's title had read "softmax attention, β = 1, n = 16 tokens, particle solver", as an unmasked run's
    import matplotlib.pyplot as plt

    import meanfield as mf
    from meanfield.plotting.runs import run_title

    x0 = sample_uniform(8, 3, seed=0)
    masked = mf.Model(d=3, beta=1.0, mask="causal", combine="mean")
    run = mf.solve(mf.Problem(masked, x0), mf.ParticleSolver(dt=0.05, norm="peri"), t_final=0.1)
    expected = "softmax attention, causal mask, combine = mean, norm = peri, β = 1, n = 8 tokens, particle solver"
    assert run_title(run) == expected
    fig = run.plot()
    assert any(expected in text.get_text() for text in fig.findobj(Text))  # the figure's title
    plt.close(fig)
    run.save(tmp_path / "masked.h5")  # the config route names them the same way
    assert run_title(mf.load(tmp_path / "masked.h5")) == expected
    simulated = mf.simulate({"model": {"beta": 1.0, "mask": "causal"}, "init": {"n": 8}, "solver": {"t_final": 0.1}})
    assert run_title(simulated) == "softmax attention, causal mask, β = 1, n = 8 tokens, particle solver"
    plain = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x0), mf.ParticleSolver(dt=0.05), t_final=0.1)
    assert run_title(plain) == "softmax attention, β = 1, n = 8 tokens, particle solver"  # unchanged


def test_a_refined_sweep_draws_its_coarser_runs_dashed_each_with_its_own_warning_and_signs_its_fit():
    # only the finer run had been drawn, labelled "(under-res.)" for the coarser run's warning; the fit read "+ -0.5"
    import math
    from types import SimpleNamespace

    t = np.linspace(0.0, 3.0, 13)
    fine = [{"t": t, "w2_target": 0.5 * np.exp(-t) + 0.1}, {"t": t, "w2_target": 0.4 * np.exp(-t / 4) + 0.05}]
    coarse = [{"t": t, "w2_target": 0.52 * np.exp(-t) + 0.1}, {"t": t, "w2_target": 0.41 * np.exp(-t / 4) + 0.06}]
    summaries = [{"t_min": 2.0, "w2_min": 0.12, "n": 400, "n_coarse": 200, "min_at_end": False,
                  "under_resolved": "the coarser run of the convergence column (n = 200): under-resolved",
                  "under_resolved_fine": "", "under_resolved_coarse": "under-resolved"},
                 {"t_min": 3.0, "w2_min": 0.2, "n": 400, "n_coarse": 200, "min_at_end": False,
                  "under_resolved": "under-resolved", "under_resolved_fine": "under-resolved", "under_resolved_coarse": ""}]
    sweep = SimpleNamespace(betas=np.array([4.0, 8.0]), solver="grid", curves=fine, coarse_curves=coarse, summaries=summaries,
                            fit_tmin={"slope": 1.4, "intercept": -0.5, "r2": math.nan},
                            fit_w2min={"slope": 0.8, "intercept": -1.0, "r2": math.nan})
    fig = curves.plot_sweep(sweep)
    ax1, ax2 = fig.axes[:2]
    assert [text.get_text() for text in ax1.get_legend().get_texts()] == [
        "β = 4: n = 400, dashed n = 200 (under-res.)", "β = 8: n = 400 (under-res.), dashed n = 200"]
    dashed = [line for line in ax1.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_color() for line in dashed] == ["C0", "C1"] and all(line.get_linewidth() < 1.5 for line in dashed)
    for line, curve in zip(dashed, coarse, strict=True):
        np.testing.assert_array_equal(line.get_ydata(), curve["w2_target"][t > 0])
    assert "1.4 log β − 0.5" in [text.get_text() for text in ax2.get_legend().get_texts()]


def _draw(fig):
    """Draw ``fig`` (made without pyplot) with Agg, so that its tick labels are laid out; the renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas_ = FigureCanvasAgg(fig)
    canvas_.draw()
    return canvas_.get_renderer()


def _pair_histogram(fig):
    ax = next(ax for ax in fig.axes if "inner product" in ax.get_ylabel())
    return ax, ax.collections[0]


def test_empty_inner_product_bins_are_grey_outside_magma_and_the_bar_says_so():
    # empty bins had been NaN over the white background: magma's top is a near-white cream, so an empty bin read as the
    # densest one, right beside black, the sparsest
    x = np.stack([sample_uniform(16, 4, seed=1), sample_uniform(16, 4, seed=2)])
    fig = particles.plot_high_dim_run(np.array([0.0, 1.0]), x)
    ax, mesh = _pair_histogram(fig)
    values = np.ma.getdata(mesh.get_array()).ravel()
    empty = ~(values > 0)
    assert 0 < empty.sum() < values.size  # (16 tokens, 120 pairs, 80 bins: some bins are empty)
    colours = mesh.to_rgba(mesh.get_array()).reshape(-1, 4)
    assert np.all(colours[empty, 3] == 1.0)  # drawn, not transparent over the white background
    np.testing.assert_allclose(colours[empty], np.tile(mcolors.to_rgba(particles.NO_PAIR_COLOUR), (empty.sum(), 1)), atol=1e-12)
    magma = mesh.cmap(np.linspace(0.0, 1.0, 256))
    assert np.min(np.abs(magma[:, :3] - mcolors.to_rgb(particles.NO_PAIR_COLOUR)).max(axis=1)) > 0.05  # not one of magma's
    assert not np.any(np.all(np.isclose(colours[~empty], mcolors.to_rgba(particles.NO_PAIR_COLOUR)), axis=1))
    assert any("grey: no pair" in other.get_ylabel() for other in fig.axes)
    full = np.stack([normalize(np.ones((16, 4)))] * 2)  # every pair in the top bin: the others empty, still captioned
    fig = particles.plot_high_dim_run(np.array([0.0, 1.0]), full)
    assert any("grey: no pair" in other.get_ylabel() for other in fig.axes)


@pytest.mark.parametrize("t0", [0.0, 3.0])
def test_a_one_frame_high_dimensional_run_has_one_time_tick_at_its_time(t0):
    # the one column spans t0 ± 0.5; its ticks had run from -0.4 to 0.4 for a run at t = 0
    x = sample_uniform(16, 4, seed=1)[None]
    fig = particles.plot_high_dim_run(np.array([t0]), x)
    ax, _ = _pair_histogram(fig)
    np.testing.assert_allclose(ax.get_xticks(), [t0], rtol=0, atol=0)
    _draw(fig)
    assert [label.get_text() for label in ax.get_xticklabels()] == [f"{t0:g}"]


@pytest.mark.parametrize("kappa", [0.5, 1.0, 2.0])
def test_one_broad_bump_is_drawn_in_the_middle_of_the_map_and_the_disc(kappa):
    # a bump of mean length under 1/2 (kappa = 1: coth 1 - 1 = 0.31) had been given the layout of a pair of antipodal
    # clusters: its peak at longitude +70..90 degrees of a map "turned to face the mass", at the rim of the disc
    mean = normalize(np.array([0.3, -0.5, 0.8]))
    x = sample_vmf(4000, 3, mean=mean, kappa=kappa, seed=1)
    assert np.linalg.norm(x.mean(axis=0)) < 0.55
    centre = canvas.facing_rotation(x) @ mean
    assert centre[0] > 0.99  # longitude 0, latitude 0
    assert canvas.facing_view(x) @ mean > 0.99
    background = np.concatenate([sample_vmf(1500, 3, mean=mean, kappa=500.0, seed=2), sample_uniform(2500, 3, seed=3)])
    assert canvas.facing_rotation(background) @ mean @ [1.0, 0.0, 0.0] > 0.99  # a cluster on a uniform background too
    msh = M.fibonacci_mesh(300)
    m = M.initial_mass(msh, "vmf", kappa=kappa, mean=mean)
    fig = density.plot_grid_run(msh, np.array([0.0]), m[None])
    quad = next(c for ax in fig.axes if ax.name == "mollweide" for c in ax.collections)
    corners = quad.get_coordinates()  # (rows + 1, columns + 1, 2): longitude, latitude of the pixel corners
    lon = 0.5 * (corners[0, 1:, 0] + corners[0, :-1, 0])
    lat = 0.5 * (corners[1:, 0, 1] + corners[:-1, 0, 1])
    peak = np.unravel_index(np.argmax(np.asarray(quad.get_array()).reshape(lat.size, lon.size)), (lat.size, lon.size))
    assert abs(np.degrees(lon[peak[1]])) < 15.0 and abs(np.degrees(lat[peak[0]])) < 15.0


def test_a_pair_of_antipodal_clusters_keeps_its_side_by_side_layout_whatever_their_masses():
    axis = np.array([0.0, 0.6, 0.8])
    for heavy in (250, 300, 370):  # up to 3:1, a mean of length < 1/2
        pair = np.concatenate([sample_vmf(heavy, 3, mean=axis, kappa=80.0, seed=2),
                               sample_vmf(500 - heavy, 3, mean=-axis, kappa=80.0, seed=3)])
        turned = canvas.facing_rotation(pair) @ axis
        assert abs(abs(np.degrees(np.arctan2(turned[1], turned[0]))) - 90.0) < 5.0 and abs(turned[2]) < 0.1
        view = canvas.facing_view(pair)
        np.testing.assert_allclose(abs(view @ axis), 0.5, atol=0.05)  # 60 degrees off the pair's axis


def _bar_labels(fig):
    """The colour bar's axes and the extents of its drawn tick labels, major and minor."""
    renderer = _draw(fig)
    bar = next(ax for ax in fig.axes if "density m/A" in ax.get_xlabel())
    labels = [label for label in bar.get_xticklabels(minor=False) + bar.get_xticklabels(minor=True)
              if label.get_visible() and label.get_text()]
    inside = bar.get_window_extent(renderer)  # (the labels of ticks past the bar's ends are not drawn)
    boxes = [label.get_window_extent(renderer) for label in labels]
    return bar, [box for box in boxes if inside.x0 - 1.0 <= 0.5 * (box.x0 + box.x1) <= inside.x1 + 1.0]


@pytest.mark.parametrize("view", ["mollweide", "orthographic"])
@pytest.mark.parametrize("kappa", [0.0, 1.0, 8.0])
def test_the_grid_animations_colour_bar_labels_do_not_overlap(view, kappa, tmp_path):
    # over about a decade its minor ticks had been labelled, on top of each other ("2×10⁻³×10⁻²4×10⁻²6×10⁻²")
    msh = M.fibonacci_mesh(300)
    m = M.initial_mass(msh, "uniform") if kappa == 0.0 else M.initial_mass(msh, "vmf", kappa=kappa, mean=[1, 0, 0])
    for fixed in (True, False):
        second = m if fixed else m ** 1.2 / np.sum(m ** 1.2)  # (per frame: the last frame's own norm is drawn)
        anim = density.animate_density(msh, [0.0, 1.0], [m, second], tmp_path / "a.gif", view=view, resolution=60,
                                       fixed_scale=fixed)
        _, boxes = _bar_labels(anim._fig)  # noqa: SLF001
        assert len(boxes) >= 2
        for k, a in enumerate(boxes):
            assert not any(a.overlaps(b) for b in boxes[k + 1:]), [(b.x0, b.x1) for b in boxes]


def test_the_grid_animations_colour_bar_says_what_grey_means(tmp_path):
    msh = M.fibonacci_mesh(200)
    half = (msh.points[:, 2] > 0).astype(float)
    anim = density.animate_density(msh, [0.0], [half / half.sum()], tmp_path / "half.gif", resolution=60)
    bar, _ = _bar_labels(anim._fig)  # noqa: SLF001
    assert bar.get_xlabel().endswith("(log scale); grey: no mass")
    anim = density.animate_density(msh, [0.0], [M.initial_mass(msh, "uniform")], tmp_path / "u.gif", resolution=60)
    assert "grey" not in _bar_labels(anim._fig)[0].get_xlabel()  # noqa: SLF001
