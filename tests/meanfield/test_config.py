"""Config validation: every bad input stops before any work, names the key, exits with 2."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from meanfield.cli import main
from meanfield.config import load_config, resolve
from meanfield.errors import ConfigError
from meanfield.heads import head_from_spec

GOOD = """
[model]
d = 3
beta = 4.0
attention = "softmax"
[[model.heads]]
Q = "identity"
K = "identity"
V = "identity"
[init]
kind = "uniform"
n = 16
seed = 0
[solver]
kind = "particle"
method = "rk4"
dt = 0.05
t_final = 0.2
save_every = 0.1
"""


def write(tmp_path, text):
    path = tmp_path / "cfg.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_and_overrides(tmp_path):
    cfg = load_config(write(tmp_path, GOOD), ["model.beta=9", "solver.method=rk45", "init.mean=[0,0,1]"])
    assert cfg["model"]["beta"] == 9.0
    assert cfg["solver"]["method"] == "rk45"
    assert cfg["init"]["mean"] == [0, 0, 1]
    assert cfg["model"]["direction"] == "ascent"


BAD = [
    ("model.beta = -1.0", "model.beta", "must be >= 0"),
    ("model.beta = nan", "model.beta", "finite"),
    ("model.beta = inf", "model.beta", "finite"),
    ("model.d = 1", "model.d", "must be >= 2"),
    ("model.d = 3.5", "model.d", "integer"),
    ("init.n = 0", "init.n", "must be >= 1"),
    ("solver.dt = 0.0", "solver.dt", "must be > 0"),
    ("solver.dt = -0.1", "solver.dt", "must be > 0"),
    ("model.attention = \"linear\"", "model.attention", "expected one of"),
    ("model.temperature = 1.0", "model.temperature", "unknown key"),
    ("solver.method = \"rk3\"", "solver.method", "expected one of"),
    ("init.kind = \"gaussian\"", "init.kind", "expected one of"),
    ("init.mean = [0, 1]", "init.mean", "length d=3"),
    ("init.mean = [0, nan, 1]", "init.mean[1]", "finite"),
]


@pytest.mark.parametrize("assignment, key, message", BAD)
def test_bad_values_name_the_key(tmp_path, assignment, key, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, GOOD), [assignment])
    assert info.value.key == key
    assert message in str(info.value)


@pytest.mark.parametrize("assignment, key, message", BAD[:6])
def test_cli_exit_status_2_and_message(tmp_path, capsys, assignment, key, message):
    path = write(tmp_path, GOOD)
    status = main(["simulate", str(path), "-o", str(tmp_path / "out.h5"), "--quiet", "--set", assignment])
    assert status == 2
    err = capsys.readouterr().err
    assert key in err and message in err
    assert not (tmp_path / "out.h5").exists()  # validation came before any work


def test_shape_mismatch_message(tmp_path, capsys):
    text = GOOD + "\n[[model.heads]]\nQ = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]\nK = \"identity\"\nV = \"identity\"\n"
    path = write(tmp_path, text)
    status = main(["simulate", str(path), "-o", str(tmp_path / "o.h5"), "--quiet"])
    assert status == 2
    assert "model.heads[1].Q: expected a 3×3 matrix, got 3×2" in capsys.readouterr().err


def test_unknown_section_and_head_key(tmp_path):
    with pytest.raises(ConfigError, match="unknown section"):
        load_config({"modle": {}})
    with pytest.raises(ConfigError) as info:
        load_config({"model": {"heads": [{"Q": "identity", "W": 1}]}})
    assert info.value.key == "model.heads[0].W"


def test_non_finite_matrix_and_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config({"model": {"heads": [{"V": [[1, 0, 0], [0, float("inf"), 0], [0, 0, 1]]}]}})
    assert info.value.key == "model.heads[0].V"
    with pytest.raises(ConfigError, match="file not found"):
        load_config({"model": {"heads": [{"Q": "file:nope.npy"}]}})
    with pytest.raises(ConfigError) as info:
        load_config({"init": {"kind": "file", "path": str(tmp_path / "none.npy")}})
    assert info.value.key == "init.path"


def test_a_file_that_is_not_npy_is_named_as_such(tmp_path):
    # NumPy calls any file without the .npy header "pickled (object) data"; a text file is not
    text = tmp_path / "x0.npy"
    text.write_text("1 0 0\n0 1 0\n")
    with pytest.raises(ConfigError, match="not a NumPy .npy file") as info:
        load_config({"init": {"kind": "file", "path": str(text)}})
    assert info.value.key == "init.path"
    with pytest.raises(ConfigError, match="not a NumPy .npy file") as info:
        load_config({"model": {"heads": [{"Q": f"file:{text}"}]}})
    assert info.value.key == "model.heads[0].Q"
    flat = tmp_path / "flat.npy"
    np.save(flat, np.zeros(5))
    with pytest.raises(ConfigError, match=r"shape \(5,\)"):
        load_config({"init": {"kind": "file", "path": str(flat)}})


@pytest.mark.parametrize("array, words", [
    (np.eye(3) * (1 + 1j), "complex128, not real numbers"),  # had lost its imaginary part with a ComplexWarning
    (np.array([["a", "b", "c"]] * 4), "not real numbers"),  # had been a TypeError traceback
    (np.zeros((0, 3)), r"shape \(0, 3\), not \(n, d\) tokens with n >= 1"),  # had been a ValueError traceback
], ids=["complex", "strings", "empty"])
def test_token_files_of_no_real_numbers_or_no_tokens_are_refused(tmp_path, array, words):
    path = tmp_path / "x0.npy"
    np.save(path, array)
    with pytest.raises(ConfigError, match=words) as info:
        load_config({"init": {"kind": "file", "path": str(path)}})
    assert info.value.key == "init.path"


def test_head_specs(tmp_path):
    np.save(tmp_path / "q.npy", np.arange(6.0).reshape(2, 3))
    head = head_from_spec({"Q": f"file:{tmp_path / 'q.npy'}", "K": "random", "V": "aligned"}, d=3, seed=1)
    assert head.Q.shape == (2, 3) and head.K.shape == (2, 3)
    np.testing.assert_allclose(head.V, head.Q.T @ head.K)
    scalar = head_from_spec({"Q": 2.0, "K": "identity", "V": 0.5}, d=3)
    np.testing.assert_allclose(scalar.B, 2.0 * np.eye(3))
    np.testing.assert_allclose(scalar.V, 0.5 * np.eye(3))
    again = head_from_spec({"Q": "random", "K": "random"}, d=4, seed=3)
    np.testing.assert_allclose(again.Q, head_from_spec({"Q": "random", "K": "random"}, d=4, seed=3).Q)
    with pytest.raises(ConfigError, match="aligned"):
        head_from_spec({"Q": "aligned"}, d=3)


def test_missing_config_file_exits_2(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nope.toml"), "-o", str(tmp_path / "o.h5")]) == 2
    assert "file not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"model": {"seed": -1}}, "model.seed"),
        ({"init": {"seed": -1}}, "init.seed"),
        ({"weights": {"seed": -2}}, "weights.seed"),
        ({"model": {"heads": [{"Q": "random", "seed": -3}]}}, "model.heads[0].seed"),
        ({"init": {"kind": "vmf", "mean": [0.0, 0.0, 0.0]}}, "init.mean"),
        ({"model": {"heads": [{"Q": "identity", "k": 2}]}}, "model.heads[0].k"),
        ({"model": {"d": 4, "backend": "harmonic"}}, "model.backend"),
        ({"model": {"attention": "relu", "backend": "local"}}, "model.backend"),
        ({"model": {"backend": "harmonic", "precision": "float32"}}, "model.precision"),
        ({"model": {"tolerance": 0.0}}, "model.tolerance"),
        ({"model": {"tolerance": 0.5}}, "model.tolerance"),
    ],
)
def test_more_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert info.value.key == key


def test_file_tokens_set_n_and_relative_matrix_paths(tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    np.save(sub / "x0.npy", np.eye(3)[[0, 1, 2, 0, 1]] + 0.1)
    np.save(sub / "B.npy", 2.0 * np.eye(3))
    (sub / "c.toml").write_text('[model]\n[[model.heads]]\nQ = "file:B.npy"\n[init]\nkind = "file"\npath = "x0.npy"\n')
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config(sub / "c.toml")
    assert cfg["init"]["n"] == 5
    assert cfg["model"]["heads"][0]["Q"] == f"file:{sub / 'B.npy'}"
    from meanfield.build import build_model

    np.testing.assert_allclose(build_model(cfg).heads.at(0.0).B[0], 2.0 * np.eye(3))
    with pytest.raises(ConfigError) as info:
        load_config(sub / "c.toml", ["init.n=4"])
    assert info.value.key == "init.n"


def test_a_mesh_coarser_than_the_kernel_gets_a_note():
    # the JKO grid variant at β = 256 on 50 cells had run to energies of 1e160 without a word
    import warnings as _warnings

    from meanfield.config import ConfigNote

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        load_config(None, ["solver.kind=\"grid\"", "grid.cells=50", "model.beta=256"])
        load_config(None, ["solver.kind=\"grid\"", "grid.cells=4000", "model.beta=256"])  # 0.056 apart: fine
        load_config(None, ["grid.cells=50", "model.beta=256"])  # particles: the mesh is not used
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote)]
    assert len(notes) == 1 and "50 cells are 0.501 apart" in notes[0] and "3217 cells" in notes[0]


def test_solver_keys_the_solver_does_not_read_get_a_note():
    # solver.dt for the JKO solver (whose step is solver.tau) was accepted without a word
    import warnings as _warnings

    from meanfield.config import ConfigNote

    def notes(*overrides: str) -> list[str]:
        with _warnings.catch_warnings(record=True) as caught:
            _warnings.simplefilter("always")
            cfg = load_config(None, list(overrides))
        with _warnings.catch_warnings(record=True) as quiet:  # a resolved config holds every key: defaults are not noted
            _warnings.simplefilter("always")
            resolve(load_config(None, [f"solver.kind={cfg['solver']['kind']!r}"]))
        assert not [w for w in quiet if "not used" in str(w.message)]
        return [str(w.message) for w in caught if issubclass(w.category, ConfigNote)]

    assert notes('solver.kind="jko"', "solver.dt=0.1") == ["solver.dt not used by the jko solver (its step is solver.tau); ignored"]
    assert notes('solver.kind="zero-temperature"', 'solver.variant="grid"', "solver.cfl=0.3") == [
        "solver.variant, solver.cfl not used by the zero-temperature solver; ignored"]
    assert "solver.dt not used by the grid solver" in notes('solver.kind="grid"', "solver.dt=0.02")[0]
    assert "rtol and atol serve method = 'rk45'" in notes("solver.rtol=1e-6")[0]
    assert notes('solver.method="rk45"', "solver.rtol=1e-6") == []
    assert notes('solver.kind="jko"', "solver.tau=0.1", "solver.dt=0.01") == []  # the default value: nothing to say
    assert notes("solver.clock_merge=0.01") == [
        "solver.clock_merge not used by the particle solver (it serves clock = 'gradient'); ignored"]


def test_switching_a_files_solver_kind_does_not_note_the_files_own_solver_settings(tmp_path):
    # --set solver.kind=jko on data/oscillating_heads.toml (the README's suggestion) had always noted "solver.dt not used
    # by the jko solver": the file's dt is its particle solver's
    import warnings as _warnings

    import meanfield as mf
    from meanfield.config import ConfigNote

    data = Path(__file__).resolve().parents[2] / "data"

    def notes(source, overrides=(), **values) -> list[str]:
        with _warnings.catch_warnings(record=True) as caught:
            _warnings.simplefilter("always")
            cfg = load_config(source, list(overrides), values=values)
        assert cfg["solver"]["kind"] == "jko"
        return [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "not used" in str(w.message)]

    assert notes(data / "oscillating_heads.toml", ["solver.kind=jko"]) == []
    assert notes(data / "oscillating_heads.toml", **{"solver.kind": "jko"}) == []  # mf.simulate's keywords
    with _warnings.catch_warnings():
        _warnings.simplefilter("error", ConfigNote)
        mf.load_config(data / "oscillating_heads.toml", **{"solver.kind": "jko"})
    assert notes(data / "oscillating_heads.toml", ["solver.kind=jko", "solver.dt=0.1"]) == [  # given with the switch
        "solver.dt not used by the jko solver (its step is solver.tau); ignored"]
    own = tmp_path / "jko.toml"  # a file that names the jko solver and a dt: its own dt is noted
    own.write_text('[solver]\nkind = "jko"\ndt = 0.05\n')
    assert notes(own) == ["solver.dt not used by the jko solver (its step is solver.tau); ignored"]


def test_weights_keys_the_schedule_does_not_read_get_a_note_and_a_noise_seed_needs_gamma():
    # weights.kappa under schedule = "oscillating", or weights.amplitude under "ou", had been accepted silently
    def notes(*overrides: str) -> list[str]:
        return [note for note in _config_notes(*overrides) if "not used" in note]

    assert notes('weights.schedule="oscillating"', "weights.kappa=2", "weights.dt=0.5") == [  # dt: the stored path's step
        "weights.kappa not used by schedule = 'oscillating'; ignored"]
    assert notes('weights.schedule="ou"', "weights.amplitude=0.3") == ["weights.amplitude not used by schedule = 'ou'; ignored"]
    assert notes("weights.sigma=0.3") == ["weights.sigma not used by schedule = 'constant'; ignored"]
    assert notes('weights.schedule="oscillating"', 'weights.phases="random"', "weights.seed=3") == []  # the phases' draw
    assert notes('weights.schedule="oscillating"', "weights.seed=3") == ["weights.seed not used by schedule = 'oscillating'; ignored"]
    assert notes('weights.schedule="ou"', "weights.kappa=2", "weights.sigma=0.3", "weights.seed=4") == []
    with pytest.raises(ConfigError) as info:  # a seed of no noise: [noise] without gamma had run deterministically
        load_config(None, ["noise.seed=7"])
    assert info.value.key == "noise.gamma"


def test_refinement_keys_of_a_mesh_that_is_not_graded_get_a_note():
    # a user who forgot grid.family = "graded" had silently got a uniform mesh
    import warnings as _warnings

    from meanfield.config import ConfigNote

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        load_config(None, ['solver.kind="grid"', "grid.refine_centres=[[1,0,0]]", "grid.refine_factor=4"])
        load_config(None, ['solver.kind="grid"', 'grid.family="graded"', "grid.refine_centres=[[1,0,0]]"])
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "not used" in str(w.message)]
    assert notes == ["grid.refine_centres, grid.refine_factor not used by the fibonacci mesh "
                     "(they refine grid.family = 'graded'); ignored"]


def test_terms_that_leave_float64_unshifted_get_a_note():
    # unnormalized attention at β = 1000 had failed on NaN/Inf at its first step without a word before it
    notes = _config_notes

    head = 'model.heads=[{Q="identity", K=[[2,0,0],[0,1,0],[0,0,1]], V="identity"}]'
    assert any("unnormalized attention takes e^(β⟨x, B y⟩) unshifted" in n and "β‖B‖₂ = 800" in n
               for n in notes('model.attention="unnormalized"', "model.beta=400", head))
    # 600 < 709: the terms stay floats, but a velocity of e^600 takes a step's tokens past the floats' squares (a run
    # there stops on NaN/Inf at its fourth step); at β = 150 (e^300) it runs
    assert any("its velocity, up to e^(β‖B_h‖₂)‖V_h‖_F = e^600.5, passes e^345.4" in n
               for n in notes('model.attention="unnormalized"', "model.beta=300", head))
    assert not notes('model.attention="unnormalized"', "model.beta=150", head)
    # the grid puts no tokens back on the sphere (it meets its step floor first): no such note there
    assert not [n for n in notes('model.attention="unnormalized"', "model.beta=300", 'solver.kind="grid"', head) if "velocity" in n]
    assert not notes("model.beta=400", head)  # softmax shifts its terms
    # the JKO scheme minimises the energy itself: refused (an OverflowError in its first step had failed the run, exit 1)
    for variant in ("particle", "grid"):
        with pytest.raises(ConfigError, match="^model.beta: 400 with a head of ‖B‖₂ = 2: the JKO scheme minimises the energy"):
            load_config(None, ['solver.kind="jko"', f'solver.variant="{variant}"', 'model.attention="pooled"', "model.beta=400",
                               'model.heads=[{Q=[[2,0,0],[0,1,0],[0,0,1]], K="identity", V="aligned"}]'])
    assert not notes('solver.kind="jko"', 'model.attention="pooled"', "model.beta=300",
                     'model.heads=[{Q=[[2,0,0],[0,1,0],[0,0,1]], K="identity", V="aligned"}]')  # 600: it runs


def test_jko_keys_below_round_off_or_that_it_does_not_read_are_named():
    # solver.tol = 1e-16 had failed the run after ten halvings (exit 1, a file written); steady_tol was ignored in silence
    with pytest.raises(ConfigError, match=r"^solver.tol: must lie in \[1e-14, 1e-06\]"):
        load_config(None, ['solver.kind="jko"', "solver.tol=1e-16"])
    assert _config_notes('solver.kind="jko"', "solver.steady_tol=0.01") == [
        "solver.steady_tol not used by the jko solver (its step is solver.tau); ignored"]
    assert _config_notes("solver.steady_tol=0.01") == []  # the particle solver stops on it


def _config_notes(*overrides: str) -> list[str]:
    """The notes (:class:`~meanfield.config.ConfigNote`) of the default config with ``overrides``."""
    import warnings as _warnings

    from meanfield.config import ConfigNote

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        load_config(None, list(overrides))
    return [str(w.message) for w in caught if issubclass(w.category, ConfigNote)]


def test_an_icosahedral_grid_says_the_cells_it_has():
    # grid.cells = 5000 had become 2562 cells, without a word
    assert _config_notes('solver.kind="grid"', 'grid.family="icosahedral"', "grid.cells=5000") == [
        "grid.cells = 5000: the icosahedral mesh has 10·4^L + 2 cells, the nearest 2562 (in log scale)"]
    assert _config_notes('solver.kind="grid"', 'grid.family="icosahedral"', "grid.cells=2562") == []
    assert _config_notes('grid.family="icosahedral"', "grid.cells=5000") == []  # particles: no mesh


def test_a_cfl_below_round_off_is_refused():
    # 1e-13 had run until a step fell below round-off, the file written, exit 1 blaming a cell's outflow
    with pytest.raises(ConfigError, match="^solver.cfl: must be >= 1e-06"):
        load_config(None, ['solver.kind="grid"', "solver.cfl=1e-13"])


def test_a_cfl_above_one_is_noted():
    assert _config_notes('solver.kind="grid"', "solver.cfl=1.5") == [
        "solver.cfl = 1.5 > 1: a forward-Euler stage of that step can empty a cell, so most steps are rejected and "
        "halved (more work than cfl = 1); 1 or below keeps the steps"]
    assert _config_notes('solver.kind="grid"', "solver.cfl=1.0") == []


def test_backend_fused_in_float64_is_taken_for_exactly_the_laws_the_fused_kernel_computes():
    # the config had refused pooled ("computes softmax attention only") after the kernel had gained that law
    from meanfield.kernels.attention import ATTENTION_KINDS
    from meanfield.kernels.fused import FUSED_KINDS

    for kind in ATTENTION_KINDS:
        values = {"backend": "fused", "attention": kind}
        if kind in FUSED_KINDS:
            assert load_config(values=values)["model"]["attention"] == kind
        else:
            with pytest.raises(ConfigError, match="'fused' in float64 computes the softmax and pooled laws"):
                load_config(values=values)


def test_an_empty_file_notes_that_it_runs_the_defaults(tmp_path):
    import warnings

    from meanfield.config import ConfigNote

    # (an empty file, or one of comments only, had run the built-in defaults without a word)
    for text in ("", "# only a comment\n"):
        path = tmp_path / "empty.toml"
        path.write_text(text)
        with pytest.warns(ConfigNote, match=r"empty\.toml sets no key: every setting is the built-in default"):
            cfg = load_config(path)
        assert cfg == load_config(None)
    with pytest.warns(ConfigNote, match=r"empty\.toml sets no key: every other setting is the built-in default"):
        assert load_config(path, iter(["model.beta=9.0"]))["model"]["beta"] == 9.0  # (it had said "every setting")
    with pytest.warns(ConfigNote, match=r"every other setting is the built-in default"):
        assert load_config(path, values={"init.n": 10})["init"]["n"] == 10
    path.write_text("[model]\nbeta = 4.0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNote)
        load_config(path)


def test_keys_of_another_init_kind_are_noted(tmp_path):
    # (found by a fuzz) init.path given and the kind forgotten had run uniform tokens without a word
    import warnings

    from meanfield.config import ConfigNote

    with pytest.warns(ConfigNote, match=r"init\.path not used by init\.kind = 'uniform'; ignored"):
        load_config(None, ["init.path=x0.npy"])
    with pytest.warns(ConfigNote, match=r"init\.kappa, init\.spread not used by init\.kind = 'equiangular'; ignored"):
        load_config(None, ["init.kind=equiangular", "init.n=3", "init.gamma=0.5", "init.kappa=9.0", "init.spread=0.2"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNote)
        load_config(None, ["init.kind=vmf", "init.kappa=9.0", "init.mean=[0.0, 0.0, 1.0]"])
        load_config(None, ["init.kind=clusters", "init.spread=0.2", "init.kappa=4.0"])  # kappa at its default: not noted


def test_an_override_holds_one_value(tmp_path):
    # (found by a fuzz) "--set 'init.n=8<newline>init.seed=5'" had set n = 8 and dropped the rest without a word
    with pytest.raises(ConfigError, match=r"one key per --set"):
        load_config(None, ["init.n=8\ninit.seed=5"])
    assert load_config(None, ["init.n=8\n"])["init"]["n"] == 8


def test_a_config_is_read_with_a_byte_order_mark_and_within_a_size(tmp_path):
    # (found by a fuzz) a BOM had been "Invalid statement"; /dev/zero had been read for ever, a run read whole
    import meanfield.config as config_module

    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf[model]\nbeta = 2.0\n")
    assert load_config(path)["model"]["beta"] == 2.0
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * 2000 + "\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(config_module, "CONFIG_MAX_BYTES", 1000)
        with pytest.raises(ConfigError, match=r"big\.toml is larger than 0 MiB: not a TOML config"):
            load_config(big)
    with pytest.raises(ConfigError, match=r"zero is larger than 16 MiB"):
        load_config("/dev/zero")


def test_init_spread_is_bounded_and_minus_zero_is_zero():
    # (found by a fuzz) spread = 1e160 overflowed the sampler (a traceback); -0.0 was NumPy's "scale < 0" under init.kind
    with pytest.raises(ConfigError, match=r"init\.spread: must lie in \[0, 1e\+06\]"):
        load_config(None, ["init.kind=clusters", "init.spread=1e160"])
    cfg = load_config(None, ["init.kind=clusters", "init.spread=-0.0"])
    assert cfg["init"]["spread"] == 0.0 and str(cfg["init"]["spread"]) == "0.0"
    from meanfield.build import initial_tokens

    assert np.all(np.isfinite(initial_tokens(cfg)))


def test_values_whose_velocities_overflow_are_refused_naming_the_head():
    # (found by a fuzz) V = 1e308 (and 1e299) had run to NaN after the first frame, exit 1, a file written
    import meanfield as mf

    with pytest.raises(ConfigError, match=r"model\.heads\[1\]\.V: ‖V‖_F = 1\.73e\+299 makes the velocities overflow"):
        load_config(None, ["model.heads=[{V='identity'}, {V=1e299}]"])
    assert load_config(None, ["model.heads=[{V=1e149}]"])["model"]["heads"][0]["V"] == 1e149
    with pytest.raises(ValueError, match=r"‖V_h‖_F = 1\.73e\+151"):
        mf.Model(d=3, beta=1.0, heads=[mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=1e151 * np.eye(3))])


def test_heads_too_many_or_too_tall_for_the_memory_are_named():
    # (found by a fuzz) k = 1e12 random rows had been NumPy's allocation error (a traceback); num_heads = 1e8 had been
    # blamed on model.d
    with pytest.raises(ConfigError, match=r"model\.heads\[0\]\.k: Q and K of k = 1000000000000 rows of d = 3: needs about"):
        load_config(None, ["model.heads=[{Q='random', K='random', k=1000000000000}]"])
    with pytest.raises(ConfigError, match=r"model\.num_heads: 100000000 heads of 3×3 need about"):
        load_config(None, ["model.num_heads=100000000"])
    with pytest.raises(ConfigError, match=r"^model\.d: d = 100000"):  # one head alone does not fit: fewer cannot help
        load_config(None, ["model.d=100000", "model.num_heads=2", "init.n=4"])


def test_a_grid_diffusion_too_slow_to_end_is_refused_naming_noise_gamma():
    # (found by a fuzz) γ = 1e-300 on the grid had run to the step floor after its first frame, exit 1, a file written;
    # the grid's diffusion step is at most about cfl·γ·4π/N (measured: 1321 steps where this says at least 318, at
    # γ = 1 on 2000 cells to t = 1)
    from meanfield.resources import _grid_diffusion_steps

    with pytest.raises(ConfigError, match=r"noise\.gamma: 1e-300 takes 3\.18e\+303 steps of its diffusion"):
        load_config(None, ["solver.kind=grid", "noise.gamma=1e-300"])
    cfg = load_config(None, ["solver.kind=grid", "noise.gamma=1.0", "solver.t_final=1.0"])
    assert _grid_diffusion_steps(cfg["solver"], cfg["grid"], cfg["noise"]) == ("noise.gamma", pytest.approx(2000 / (0.5 * 4 * np.pi)))
    # an anneal counts the steps over γ(t): 1 → 1e-7 linearly over t_final = 1 on 200 cells takes 2113 steps (measured)
    # and this says at least 513 (it had charged the whole run at the least γ: 3.18e8, refused)
    annealed = ["solver.kind=grid", "grid.cells=200", "solver.t_final=1.0", "noise.gamma=1.0", "noise.anneal=linear",
                "noise.gamma_final=1e-7", "noise.duration=1.0"]
    cfg = load_config(None, annealed)
    steps = _grid_diffusion_steps(cfg["solver"], cfg["grid"], cfg["noise"])[1]
    np.testing.assert_allclose(steps, np.log(1e7) / (1 - 1e-7) * 200 / (0.5 * 4 * np.pi), rtol=1e-12)
    assert steps < 2113
    with pytest.raises(ConfigError, match=r"noise\.gamma_final: 1e-300 takes .* steps of its diffusion"):  # annealed
        load_config(None, ["solver.kind=grid", "noise.gamma=1.0", "noise.anneal=linear", "noise.gamma_final=1e-300",
                           "noise.duration=1.0"])


@pytest.mark.parametrize("config, override, key", [
    ("oscillating_heads.toml", "weights.amplitude=1e300", "weights.amplitude"),
    ("ou_heads.toml", "weights.sigma=1e300", "weights.sigma"),
    ("massucco_ou.toml", "model.beta=1e308", "model.beta"),
    ("massucco_ou.toml", "weights.sigma=1e300", "weights.sigma"),  # the authors' SDE (it had been left out)
])
def test_weight_paths_whose_heads_overflow_are_refused_before_the_run(config, override, key):
    # (found by a fuzz) each had run to NaN after the first frame, exit 1, a file written
    from meanfield.build import build_model

    data = Path(__file__).resolve().parents[2] / "data"
    with pytest.raises(ConfigError, match=rf"{key}: .* makes the heads' scores or velocities overflow: .*"
                                          r"\(at most 2\^52 = 4\.5e\+15\)"):  # (it had printed the limit as 5e+15)
        build_model(load_config(data / config, [override, "solver.t_final=0.05"]))
    build_model(load_config(data / config, ["solver.t_final=0.05"]))  # the file's own path is within the bounds


def _as_tuples(value):
    """``value`` with every list a tuple (all the way down)."""
    if isinstance(value, list):
        return tuple(_as_tuples(item) for item in value)
    if isinstance(value, dict):
        return {k: _as_tuples(v) for k, v in value.items()}
    return value


def _python_types_only(value) -> bool:
    if isinstance(value, dict):
        return all(_python_types_only(v) for v in value.values())
    if isinstance(value, list):
        return all(_python_types_only(v) for v in value)
    return type(value) in (bool, int, float, str, type(None))


#: configs with a TOML array at each place the schema takes one, and where in them it is
ARRAY_CONFIGS = {  # (floats throughout: the array of [0, 0, 1.0] is one of floats, stored as [0.0, 0.0, 1.0])
    "init.mean": ({"init": {"kind": "vmf", "mean": [0.0, 0.0, 1.0], "n": 8}}, ("init", "mean")),
    "init.centers": ({"init": {"kind": "clusters", "centers": [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0]], "n": 8}}, ("init", "centers")),
    "model.heads[0].Q": ({"model": {"heads": [{"Q": [[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "K": "identity",
                                               "V": "aligned"}]}}, ("model", "heads", 0, "Q")),
    "weights.target": ({"weights": {"schedule": "relaxation", "target": [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.5]]},
                        "model": {"heads": [{"Q": "identity", "K": "identity", "V": "aligned"}]}}, ("weights", "target")),
    "weights.mean": ({"weights": {"schedule": "ou", "mean": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]}}, ("weights", "mean")),
    "grid.refine_centres": ({"grid": {"family": "graded", "cells": 200, "refine_centres": [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]},
                             "solver": {"kind": "grid", "t_final": 0.1}}, ("grid", "refine_centres")),
    "phase.betas": ({"phase": {"betas": [1.0, 2.0, 4.0]}}, ("phase", "betas")),
    "phase.times (integers)": ({"phase": {"times": [0, 1, 2]}}, ("phase", "times")),
}


@pytest.mark.parametrize("where", list(ARRAY_CONFIGS))
def test_tuples_and_numpy_arrays_stand_for_toml_arrays_and_resolve_as_lists(where):
    # a notebook's (0, 0, 1) or np.array had been refused as "expected a list, got tuple" where a list was taken (or
    # kept as a tuple inside a head: another resolved config, and another hash, than the list's)
    import json

    raw, path = ARRAY_CONFIGS[where]
    raw = {"solver": {"t_final": 0.1}, **raw}
    listed = load_config(raw)

    def replaced(new):
        out = json.loads(json.dumps(raw))
        *head, last = path
        node = out
        for step in head:
            node = node[step]
        node[last] = new(node[last])
        return out

    for form in (_as_tuples, np.asarray):
        cfg = load_config(replaced(form))
        assert cfg == listed and _python_types_only(cfg)
        assert json.dumps(cfg, sort_keys=True) == json.dumps(listed, sort_keys=True)
    section, key = path[:2]
    if len(path) == 2:  # the same as a keyword value
        assert load_config(raw, values={f"{section}.{key}": _as_tuples(raw[section][key])}) == listed
        assert load_config(raw, values={f"{section}.{key}": np.asarray(raw[section][key])}) == listed


def test_a_tuple_of_heads_and_numpy_scalars_inside_lists_are_plain_python():
    import json

    listed = load_config({"model": {"heads": [{"Q": "identity", "K": [[1, 0, 0], [0, 2, 0], [0, 0, 1]], "V": "aligned"}]}})
    heads = ({"Q": "identity", "K": (np.array([1, 0, 0]), (0, np.int64(2), 0), [np.float64(0), 0, np.int32(1)]), "V": "aligned"},)
    cfg = load_config({"model": {"heads": heads}})
    assert cfg == listed and _python_types_only(cfg) and json.dumps(cfg)
    cfg = load_config(None, values={"model.heads": heads, "phase.betas": (np.float64(1.0), np.float32(2.0)),
                                    "track.energy": np.bool_(False), "beta": np.array(2.5)})
    assert cfg["phase"]["betas"] == [1.0, 2.0] and cfg["track"]["energy"] is False and cfg["model"]["beta"] == 2.5
    assert _python_types_only(cfg) and json.dumps(cfg)


@pytest.mark.parametrize("value, words", [
    ("001", r"init\.mean: expected a list, got str"),  # a string is no sequence of numbers
    (np.array("001"), r"init\.mean: expected a list, got str"),
    (np.array(1.0), r"init\.mean: expected a list, got float"),  # a 0-d array is its scalar
    (np.array([0, 0, 1.0], dtype=object), r"init\.mean: expected numbers or strings, got a NumPy array of dtype object"),
    (np.ones((1, 3)), r"init\.mean\[0\]: expected a number"),
    (np.ones((1, 1, 3)), r"init\.mean\[0\]: expected a number"),
    (((0, 1), (1,)), r"init\.mean\[0\]: expected a number"),
    ((0, 0, 1.0, 0), r"init\.mean: expected a vector of length d=3"),
])
def test_arrays_and_strings_that_are_no_vector_are_refused_naming_the_key(value, words):
    with pytest.raises(ConfigError, match=words):
        load_config({"init": {"kind": "vmf", "n": 8}}, values={"init.mean": value})
    with pytest.raises(ConfigError, match=words):
        load_config({"init": {"kind": "vmf", "n": 8, "mean": value}})


@pytest.mark.parametrize("Q, words", [
    (np.ones((3, 3, 1)), r"model\.heads\[0\]\.Q: expected a k×3 matrix, got 3×3×1"),
    (((1.0, 0, 0), (0, 1.0)), r"model\.heads\[0\]\.Q: expected a list of rows of numbers"),
    (np.array([np.eye(3)[0], np.eye(3)[1][:2]], dtype=object), r"model\.heads\[0\]\.Q: expected numbers or strings, got a NumPy array of dtype object"),
])
def test_a_head_matrix_of_the_wrong_shape_is_refused_naming_it(Q, words):
    with pytest.raises(ConfigError, match=words):
        load_config({"model": {"heads": ({"Q": Q},)}})


def test_a_key_given_twice_as_keyword_values_is_refused_naming_both_spellings():
    # beta=2 with **{"model.beta": 3}: the later keyword had won in silence, their order deciding
    for values in ({"beta": 2, "model.beta": 3}, {"model.beta": 3, "beta": 2}):
        with pytest.raises(ConfigError, match=r"model\.beta: given twice, as '(beta|model\.beta)' and '(model\.beta|beta)'"):
            load_config(None, values=values)
    with pytest.raises(ConfigError, match=r"solver\.t_final: given twice"):
        load_config(None, values={"t_final": 1.0, "solver.t_final": 1.0})  # even with one value
    # a keyword over the source's value, or over a --set, is an override: it replaces it
    assert load_config({"model": {"beta": 2.0}}, values={"beta": 3})["model"]["beta"] == 3.0
    assert load_config({"model": {"beta": 2.0}}, values={"model.beta": 3})["model"]["beta"] == 3.0


def _checkpoint_config(tmp_path: Path, *, beta: str = "") -> Path:
    """A config of trained-style heads (a small synthetic checkpoint, d = 8, d_h = 4) on a sentence."""
    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    write_synthetic_checkpoint(tmp_path / "ckpt", d=8, num_layers=2, num_heads=2)
    path = tmp_path / "real.toml"
    path.write_text(f'[model]\nd = 8\n{beta}heads = "checkpoint:ckpt#layer=1"\n'
                    '[init]\nkind = "sentence"\nsentence = "the cat sat on the mat ."\n'
                    '[solver]\nmethod = "rk4"\ndt = 0.05\nt_final = 0.1\nsave_every = 0.1\n')
    return path


def _beta_notes(source, overrides=()) -> list[str]:
    import warnings as _warnings

    from meanfield.config import ConfigNote

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        load_config(source, list(overrides))
    return [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "model.beta" in str(w.message)]


def test_checkpoint_heads_without_model_beta_note_the_default_and_the_checkpoints_own_beta(tmp_path):
    """The heads of a checkpoint hold no 1/√d_h, so β is model.beta alone: its generic default (4) had run MiniLM at
    23 times its own temperature without a word.  The note names model.beta, the default, 1/√d_h and β_LN."""
    from meanfield.errors import ConfigNote
    from meanfield.heads.checkpoint import load_checkpoint

    path = _checkpoint_config(tmp_path)
    notes = _beta_notes(path)
    assert len(notes) == 1, notes
    ckpt = load_checkpoint(tmp_path / "ckpt")
    beta_ln = ckpt.token_radius(1) ** 2 * ckpt.beta
    assert "default β = 4" in notes[0]
    assert f"1/√4 = {ckpt.beta:.3g}" in notes[0]
    assert f"β_LN = r²/√d_h = {beta_ln:.3g}" in notes[0]
    with pytest.warns(ConfigNote, match="model.beta"):
        resolved = load_config(path)
    assert resolved["model"]["beta"] == 4.0  # the default itself is unchanged
    assert _beta_notes(resolved) == []  # a resolved (stored) config names its β
    assert _beta_notes(path, ["model.beta=0.5"]) == []  # given on the command line
    assert _beta_notes(_checkpoint_config(tmp_path, beta="beta = 4.0\n")) == []  # given in the file, even at the default


def test_simulate_prints_the_model_beta_note_and_runs(tmp_path, capsys):
    path = _checkpoint_config(tmp_path)
    assert main(["simulate", str(path), "-o", str(tmp_path / "o.h5"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "note: model.beta is not given" in err
    assert (tmp_path / "o.h5").exists()
    assert main(["simulate", str(path), "-o", str(tmp_path / "b.h5"), "--quiet", "--set", "model.beta=0.5"]) == 0
    assert "model.beta" not in capsys.readouterr().err


GRID = {"solver": {"kind": "grid", "t_final": 0.05}, "grid": {"cells": 100}}


@pytest.mark.parametrize(
    "raw, key, words",
    [
        ({**GRID, "init": {"kind": "function", "expr": "-1"}}, "init.expr", "negative"),
        ({**GRID, "init": {"kind": "function", "expr": "1/(z - z)"}}, "init.expr", "not finite"),
        ({**GRID, "init": {"kind": "function", "expr": "__import__('os')"}}, "init.expr", ""),
        ({**GRID, "init": {"kind": "mixture", "components": []}}, "init.components", "non-empty"),
        ({**GRID, "init": {"kind": "mixture", "components": [1]}}, "init.components[0]", "expected a table"),
        ({**GRID, "init": {"kind": "mixture", "components": [{"weight": -1}]}}, "init.components[0].weight", ">= 0"),
        ({**GRID, "init": {"kind": "mixture", "components": [{"kind": "bogus"}]}}, "init.components[0].kind", "expected"),
        ({**GRID, "init": {"kind": "mixture", "components": [{"kind": "function", "expr": "z"}]}}, "init.components[0]",
         "negative"),
        ({"init": {"kind": "fibonacci", "n": 3}}, "init.n", "at least 4 points, got 3"),  # (had named init.kind)
        ({"model": {"beta": 1e16}}, "model.beta", "past float64's resolution"),
        ({"model": {"beta": 1e16, "heads": [{"Q": "random"}]}}, "model.beta", "past float64's resolution"),
    ],
)
def test_what_the_run_refuses_when_it_is_built_is_refused_when_the_config_is_read(raw, key, words):
    """(These had been found only when the run was built: ``meanfield sweep`` wrote its folder and failed every case.)"""
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert info.value.key == key
    assert words in str(info.value)


@pytest.mark.parametrize(
    "array, words",
    [
        (np.array([[1.0, 0.0, 0.0], [np.nan, 0.0, 1.0]]), "non-finite"),
        (np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), "row 1 is zero"),
        (np.eye(4)[:2], "d=3"),
    ],
)
def test_token_files_that_the_run_cannot_read_are_refused_when_the_config_is_read(tmp_path, array, words):
    np.save(tmp_path / "x.npy", array)
    with pytest.raises(ConfigError) as info:
        load_config({"init": {"kind": "file", "path": str(tmp_path / "x.npy")}})
    assert info.value.key == "init.path"
    assert words in str(info.value)


def test_initial_tokens_name_the_fibonacci_size():
    from meanfield.build import initial_tokens

    cfg = load_config({"init": {"kind": "fibonacci", "n": 8}})
    cfg["init"]["n"] = 3
    with pytest.raises(ConfigError) as info:
        initial_tokens(cfg)
    assert info.value.key == "init.n"


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"model": {"heads": [{"Q": [[True, 0, 0], [0, 1, 0], [0, 0, 1]]}]}}, "model.heads[0].Q[0][0]"),
        ({"init": {"kind": "clusters", "centers": [[True, False, False]]}}, "init.centers[0][0]"),
        ({"weights": {"schedule": "ou", "mean": [[1, 0, 0], [0, False, 0], [0, 0, 1]]}}, "weights.mean[1][1]"),
        ({**GRID, "init": {"kind": "mixture", "components": [{"mean": [0, 0, True]}]}}, "init.components[0].mean[2]"),
        ({"init": {"kind": "vmf", "mean": [True, 0, 0]}}, "init.mean[0]"),
    ],
)
def test_booleans_in_matrices_and_vectors_are_refused_as_scalars_are(raw, key):
    """(A TOML true among a matrix's entries had been read as 1.)"""
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert info.value.key == key
    assert "expected a number, got" in str(info.value)


@pytest.mark.parametrize(
    "raw, overrides, key, start, hint",
    [
        ({"model": {"t_final": 5}}, [], "model.t_final", "unknown key; allowed keys are d, beta", "did you mean solver.t_final?"),
        ({}, ["model.bta=1"], "model.bta", "unknown key; allowed keys are d, beta", "did you mean model.beta?"),
        ({"beta": 4}, [], "beta", "unknown section; expected one of model", "did you mean model.beta?"),
        ({"modle": {}}, [], "modle", "unknown section; expected one of model", "did you mean model?"),
        ({}, ["init.sed=1"], "init.sed", "unknown key", "did you mean init.seed?"),
    ],
)
def test_an_unknown_key_gets_the_closest_known_one(raw, overrides, key, start, hint):
    with pytest.raises(ConfigError) as info:
        load_config(raw, overrides)
    assert info.value.key == key
    assert info.value.message.startswith(start) and info.value.message.endswith(hint)


def test_an_unknown_keyword_of_the_python_api_gets_the_closest_key():
    import meanfield as mf

    with pytest.raises(ConfigError) as info:
        mf.simulate(betta=9)
    assert info.value.key == "betta"
    assert info.value.message.startswith("unknown config key; see the README's configuration table")
    assert "did you mean beta or betas?" in info.value.message
    with pytest.raises(ConfigError, match=r"model\.xyz: unknown key; allowed keys are [^?]*$"):  # nothing close: no guess
        load_config({}, ["model.xyz=1"])
