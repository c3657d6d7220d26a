"""Several runs in one figure (meanfield.plotting.compare), the one-panel curves drawn into a given Axes, and the β
family's own figure (BetaSweep.plot)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

import meanfield as mf
from meanfield.plotting import compare, curves

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"init.n": 16, "t_final": 0.5}


@pytest.fixture(scope="module")
def runs() -> dict[str, mf.Run]:
    """Small quick runs: the default at β = 4 and β = 1, the same at another seed, and the concentration experiment."""
    default = ROOT / "data" / "default.toml"
    return {"warm": mf.simulate(default, beta=1, **SMALL), "cold": mf.simulate(default, beta=4, **SMALL),
            "seeded": mf.simulate(default, beta=4, **SMALL, **{"init.seed": 3}),
            "concentration": mf.simulate(ROOT / "data" / "concentration.toml", **SMALL)}


@pytest.mark.parametrize(("series", "scale"), [("energy", "linear"), ("max_speed", "log")])
def test_compare_draws_one_line_per_run_with_its_series(runs, series, scale):
    pair = [runs["cold"], runs["warm"]]
    fig = compare(pair, series=series)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2
    for line, run in zip(lines, pair):
        np.testing.assert_allclose(line.get_xdata(), run.t, rtol=0, atol=0)
        np.testing.assert_allclose(line.get_ydata(), run.diagnostics[series], rtol=1e-15, atol=0)
    # the legend says what tells the runs apart; the title what they share
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["β = 4", "β = 1"]
    assert series in ax.get_title() and "2 runs" in ax.get_title() and "n = 16 tokens" in ax.get_title()
    assert ax.get_xlabel() == "time t" and ax.get_ylabel() not in ("", series)  # its words and symbol, not the key
    assert ax.get_yscale() == scale  # as the single-run figures: the largest speed on a log scale, the energy linear


def test_compare_draws_a_series_through_zero_on_symlog_linear_below_its_smallest_value():
    # values from -1 to 100 and down to 1e-4: the linear band of the symlog axis is the smallest |value| > 0, so the
    # decades above it stay logarithmic (with the largest, 200, the whole axis had been linear)
    t = np.linspace(0.0, 1.0, 5)
    series = np.array([-1.0, 1e-4, 1e-2, 1.0, 100.0])
    pair = [mf.Run.from_states(t=t, states=np.zeros((5, 2, 3)), state_name="x", diagnostics={"g": series * scale})
            for scale in (1.0, 2.0)]
    ax = compare(pair, series="g", labels=["a", "b"]).axes[0]
    assert ax.get_yscale() == "symlog"
    np.testing.assert_allclose(ax.yaxis.get_transform().linthresh, 1e-4, rtol=1e-15)


def test_compare_takes_labels_any_tracked_series_and_a_chosen_scale(runs):
    pair = [runs["cold"], runs["concentration"]]
    fig = compare(pair, series="sphere_error", labels=["default", "concentration"], log=False)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["default", "concentration"]
    for line, run in zip(ax.get_lines(), pair):
        np.testing.assert_allclose(line.get_ydata(), run.diagnostics["sphere_error"], rtol=1e-15, atol=0)
    assert ax.get_yscale() == "linear"
    w2 = compare([runs["concentration"]], series="w2_target").axes[0]  # one run: its whole description as its label
    np.testing.assert_allclose(w2.get_lines()[0].get_ydata(), runs["concentration"].diagnostics["w2_target"], rtol=1e-15, atol=0)
    assert w2.get_yscale() == "log" and "W_2" in w2.get_ylabel()
    assert w2.get_lines()[0].get_label() == "softmax attention, β = 16, n = 16 tokens, particle solver"


def test_runs_alike_but_for_a_setting_are_labelled_by_it(runs):
    ax = compare([runs["cold"], runs["warm"], runs["seeded"]], series="energy").axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["β = 4, init.seed = 0", "β = 1", "β = 4, init.seed = 3"]
    twice = compare([runs["cold"], runs["cold"]], series="energy").axes[0]  # nothing tells them apart: their places
    assert [line.get_label() for line in twice.get_lines()] == ["run 0", "run 1"]


def test_compare_draws_into_a_given_axes_and_saves_its_figure(runs, tmp_path):
    fig = Figure()
    left, right = fig.subplots(1, 2)
    right.set_title("my panel")
    out = compare([runs["cold"], runs["warm"]], series="energy", ax=right, path=tmp_path / "pair.png")
    assert out is fig and len(fig.axes) == 2 and right.get_title() == "my panel"  # (its own title kept)
    assert not left.get_lines() and len(right.get_lines()) == 2
    np.testing.assert_allclose(right.get_lines()[1].get_ydata(), runs["warm"].diagnostics["energy"], rtol=1e-15, atol=0)
    assert (tmp_path / "pair.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    root = Figure()
    panel = root.subfigures(1, 2)[1].add_subplot()
    assert compare([runs["cold"]], series="max_speed", ax=panel) is root  # a subfigure's panel: the figure that is saved


def test_compare_refuses_bad_input_naming_it(runs):
    pair = [runs["cold"], runs["concentration"]]
    with pytest.raises(ValueError, match=r"series 'speed' is not recorded by any .*energy.*max_speed"):
        compare(pair, series="speed")
    with pytest.raises(ValueError, match=r"'energy' is not recorded by runs\[1\] \(β = 16\); every run records: max_speed, sphere_error"):
        compare(pair, series="energy")
    with pytest.raises(TypeError, match="series"):
        compare(pair, series=3)
    with pytest.raises(TypeError, match=r"one Run: pass a list"):
        compare(runs["cold"])
    with pytest.raises(ValueError, match="runs is empty"):
        compare([])
    with pytest.raises(TypeError, match=r"runs\[1\] must be a meanfield.Run, got str"):
        compare([runs["cold"], "run.h5"])
    with pytest.raises(ValueError, match="labels: 1 given for 2 runs"):
        compare(pair, series="max_speed", labels=["one"])
    with pytest.raises(TypeError, match=r"labels\[1\] must be a string"):
        compare(pair, series="max_speed", labels=["one", 2])
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes.*ndarray: pick one panel"):
        compare(pair, series="max_speed", ax=np.array(Figure().subplots(1, 2)))
    with pytest.raises(TypeError, match="log must be True, False or None"):
        compare(pair, series="max_speed", log="yes")
    with pytest.raises(ValueError, match="path"):
        compare(pair, series="max_speed", path="pair.txt")
    with pytest.raises(ValueError, match="dpi"):
        compare(pair, series="max_speed", dpi=0)


def test_compare_refuses_a_series_with_nothing_to_draw(runs):
    from types import SimpleNamespace

    overflowed = SimpleNamespace(t=np.array([0.0, 1.0]), config=None, _model=None, info={},
                                 diagnostics={"energy": np.array([np.inf, np.inf]), "log_energy": np.array([800.0, 801.0])})
    with pytest.raises(ValueError, match=r"'energy' of runs\[0\] \(run 0\) has no finite value.*series='log_energy'"):
        compare([overflowed], series="energy")
    ax = compare([overflowed], series="log_energy").axes[0]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [800.0, 801.0], rtol=0, atol=0)


def test_one_panel_curves_draw_into_a_given_axes(tmp_path):
    t = np.linspace(0.0, 2.0, 9)
    concentration = {"t": t, "w2_target": 0.5 * np.exp(-t) + 0.1, "v_eigenspace_distance": np.exp(-t)}
    summary = {"t_a": 0.5, "t_b": 1.5, "t_min": 2.0, "w2_min": float(concentration["w2_target"][-1])}
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert curves.plot_concentration(concentration, summary, tmp_path / "c.png", title="mine", ax=left) is fig
    np.testing.assert_allclose(left.get_lines()[0].get_ydata(), concentration["w2_target"], rtol=1e-15, atol=0)
    assert left.get_title() == "mine" and not right.get_lines() and (tmp_path / "c.png").stat().st_size > 1000
    rows = [{"h": h, "l1_reference": 2 * h**2, "w2_projected": h**2, "w2_reference": h} for h in (0.4, 0.2, 0.1)]
    assert curves.plot_convergence(rows, ax=right) is fig
    np.testing.assert_allclose(right.get_lines()[0].get_ydata(), [0.32, 0.08, 0.02], rtol=1e-12, atol=0)
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        curves.plot_concentration(concentration, summary, ax=fig)


def test_beta_sweep_plot_is_the_cli_figure_and_writes_a_png(tmp_path):
    from meanfield.solvers.experiments.concentration import sweep_beta

    cfg = mf.load_config(ROOT / "data" / "concentration.toml", **{"init.n": 16, "solver.t_final": 0.5})
    sweep = sweep_beta(cfg, [4.0, 16.0], solver="particle", quiet=True)
    fig = sweep.plot()
    assert isinstance(fig, Figure) and len(fig.axes) == 3  # W2(t) per β, t_min against log β, W2_min against the rate
    drawn = [line for line in fig.axes[0].get_lines() if line.get_linestyle() != "None"]
    for line, curve in zip(drawn, sweep.curves, strict=True):
        keep = curve["t"] > 0  # (a log time axis)
        np.testing.assert_allclose(line.get_ydata(), curve["w2_target"][keep], rtol=1e-15, atol=0)
    assert fig.texts[0].get_text() == "concentration onto Π♯ρ₀, particle solver"
    sweep.plot(tmp_path / "sweep.png", title="β family")
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sweep.plot(title="β family").texts[0].get_text() == "β family"
    with pytest.raises(ValueError, match="dpi"):
        sweep.plot(dpi=-1)
    with pytest.raises(TypeError, match="title"):
        sweep.plot(title=3)
    with pytest.raises(ValueError, match="path"):
        sweep.plot(tmp_path / "sweep.csv")
    assert not (tmp_path / "sweep.csv").exists() and math.isfinite(sweep.summaries[0]["w2_min"])


def test_every_series_label_renders():
    # sphere_error's label had used \big, which matplotlib's mathtext refuses: compare(series="sphere_error") raised
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from meanfield.plotting.comparison import SERIES_LABELS

    for label in SERIES_LABELS.values():
        fig = Figure()
        fig.text(0.5, 0.5, label)
        FigureCanvasAgg(fig).draw()  # (mathtext parses the label here)


def test_a_runs_concentration_draws_into_a_given_panel():
    # Concentration.plot had taken no ax= (plot_concentration did)
    from matplotlib.figure import Figure

    model = mf.Model(d=3, beta=4.0, heads=mf.heads.HeadStack(B=np.diag([2.0, 1.0, 0.5])[None], V=np.diag([2.0, 1.0, 0.5])[None]))
    run = mf.solve(mf.Problem(model, mf.sample_uniform(32, 3, seed=0)), mf.ParticleSolver(dt=0.05), t_final=0.5,
                   save_every=0.25)
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert run.concentration().plot(ax=right) is fig
    assert right.lines and not left.lines
