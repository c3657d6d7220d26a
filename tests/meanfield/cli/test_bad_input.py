"""Bad input of every kind: exit status 2, one line naming the key or option, no traceback, and no file touched."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.cli import main

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "data" / "default.toml"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

#: ``--set`` values that must be refused, and the key the message must name
BAD_SETTINGS = [
    ("model.betta=1", "model.betta"),
    ("model.beta=\"hot\"", "model.beta"),
    ("model.beta=-1", "model.beta"),
    ("model.beta=nan", "model.beta"),
    ("model.d=1", "model.d"),
    ("model.d=100000000", "model.d"),
    ("model.heads=[]", "model.heads"),
    ("model.heads=[{Q=[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]}]", "model.heads[0].Q"),
    ("model.attention=\"linear\"", "model.attention"),
    ("init.n=0", "init.n"),
    ("init.n=1e9", "init.n"),
    ("init.n=1000000000", "init.n"),
    ("init.kind=\"vmf\" --set init.kappa=1e300", "init.kappa"),
    ("init.kind=\"file\"", "init.path"),
    ("solver.kind=\"grid\" --set grid.cells=1000000000", "grid.cells"),
    ("solver.dt=1e-300", "solver.dt"),
    ("solver.dt=0", "solver.dt"),
    ("solver.t_final=1e300", "solver.t_final"),
    ("solver.t_final=-1", "solver.t_final"),
    ("solver.save_every=1e-300", "solver.save_every"),
    ("solver.kind=\"jko\" --set solver.tau=1e-300", "solver.tau"),
    ("solver.method=\"leapfrog\"", "solver.method"),
    ("model.beta=1e308", "model.beta"),  # the scores β⟨x, By⟩ overflow: the run had gone on through NaN rows
    ("model.backend=\"harmonic\" --set model.beta=1e6", "model.backend"),  # degree 8848: 10.7 GB had been taken
    ("nosuch.key=1", "nosuch"),
    ("beta", "--set"),
]


def _run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    status = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("meanfield")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("setting", "key"), BAD_SETTINGS, ids=[s for s, _ in BAD_SETTINGS])
def test_a_bad_setting_is_refused_before_any_file_is_touched(setting, key, tmp_path, capsys):
    out = tmp_path / "run.h5"
    argv = ["simulate", str(DEFAULT), "-o", str(out), "--quiet"]
    for part in setting.split(" --set "):
        argv += ["--set", part]
    status, err = _run(argv, capsys)
    assert status == 2
    assert key in _one_line(err)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_config_that_is_not_a_toml_file_is_named_as_such(tmp_path, capsys):
    out = tmp_path / "run.h5"
    cases = {
        "folder": (tmp_path / "adir", "is a folder"),
        "binary": (tmp_path / "binary.toml", "not a UTF-8 text file"),
        "hdf5": (tmp_path / "run.toml", "is an HDF5 file"),
        "broken": (tmp_path / "broken.toml", "not valid TOML"),
        "missing": (tmp_path / "missing.toml", "file not found"),
    }
    cases["folder"][0].mkdir()
    cases["binary"][0].write_bytes(b"\xff\xfe\x00bad")
    with h5py.File(cases["hdf5"][0], "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    cases["broken"][0].write_text("[model\nbeta = ")
    for name, (path, words) in cases.items():
        status, err = _run(["simulate", str(path), "-o", str(out), "--quiet"], capsys)
        assert status == 2 and "CONFIG" in err and words in err, (name, err)
    assert not out.exists()


@pytest.mark.skipif(AS_ROOT, reason="root reads files without read permission; the check cannot be seen as root")
def test_an_unreadable_config_is_named(tmp_path, capsys):
    path = tmp_path / "secret.toml"
    path.write_text("[model]\nbeta = 2.0\n")
    path.chmod(0)
    status, err = _run(["simulate", str(path), "-o", str(tmp_path / "r.h5"), "--quiet"], capsys)
    assert status == 2 and "cannot read" in err


def test_a_bad_output_path_is_refused(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "notes.txt").write_text("keep")
    np.save(tmp_path / "array.npy", np.zeros(3))
    for out, words in (
        (tmp_path, "is a folder"),
        (tmp_path / "afile" / "run.h5", "is a file, not a folder"),
        (tmp_path / "notes.txt", "already exists"),
        (tmp_path / "array.npy", "already exists"),
    ):
        status, err = _run(["simulate", str(DEFAULT), "-o", str(out), "--quiet"], capsys)
        assert status == 2 and "-o" in err and words in err, (out, err)
    assert (tmp_path / "notes.txt").read_text() == "keep"
    np.testing.assert_array_equal(np.load(tmp_path / "array.npy"), np.zeros(3))


def test_a_name_too_long_for_the_hidden_files_beside_the_run_is_refused_before_the_run(tmp_path, capsys):
    # a name the file system takes, but not with .rebuild added: a killed run had been left unresumable (a traceback)
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    sets = ["--quiet", "--set", "solver.t_final=0.1", "--set", "init.n=8"]
    long = tmp_path / ("k" * (limit - 11) + ".h5")  # (.{}.rebuild: 9 bytes more than the name)
    status, err = _run(["simulate", str(DEFAULT), "-o", str(long), *sets], capsys)
    assert status == 2 and f"-o: the name of {long} is too long" in err and f"at most {limit - 9} bytes" in err, err
    assert list(tmp_path.iterdir()) == []
    fits = tmp_path / ("k" * (limit - 12) + ".h5")
    assert _run(["simulate", str(DEFAULT), "-o", str(fits), *sets], capsys)[0] == 0


@pytest.mark.skipif(AS_ROOT, reason="root writes into read-only folders; the check cannot be seen as root")
def test_a_read_only_output_folder_is_refused(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    status, err = _run(["simulate", str(DEFAULT), "-o", str(folder / "r.h5"), "--quiet"], capsys)
    assert status == 2 and "permission denied" in err


def _run_file(tmp_path: Path, capsys) -> Path:
    out = tmp_path / "good.h5"
    assert main(["simulate", str(DEFAULT), "-o", str(out), "--quiet", "--set", "solver.t_final=0.2", "--set", "init.n=16"]) == 0
    capsys.readouterr()
    return out


def _copy_with(src: Path, dst: Path, *, config: str | None = None, frames: int | None = None) -> Path:
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for key, value in f.attrs.items():
            g.attrs[key] = value
        if config is not None:
            g.attrs["config"] = config
        for name in ("t", "x"):
            data = f[name][()] if frames is None else f[name][:frames]
            g.create_dataset(name, data=data, maxshape=(None, *data.shape[1:]))
        g.create_group("diagnostics")
    return dst


def test_broken_run_files_are_named_for_every_reader(tmp_path, capsys):
    good = _run_file(tmp_path, capsys)
    stored = json.loads(h5py.File(good, "r").attrs["config"])
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("data", data=np.arange(4))
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(good.read_bytes()[:4000])
    text = tmp_path / "text.h5"
    text.write_text("not a run")
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    bad_json = _copy_with(good, tmp_path / "badjson.h5", config="{not json")
    partial = _copy_with(good, tmp_path / "partial.h5", config=json.dumps({"model": stored["model"]}))
    cases = {
        foreign: "not a meanfield run",
        truncated: "",
        text: "not an HDF5 file",
        empty: "empty file",
        bad_json: "not valid JSON",
        partial: "lacks its [model] or [solver] section",
        tmp_path / "missing.h5": "file not found",
        tmp_path: "is a folder",
    }
    for command in ("info", "diagnose", "concentration"):
        for path, words in cases.items():
            status, err = _run([command, str(path)], capsys)
            assert status == 2 and "OUT.h5" in err and words in err, (command, path.name, err)


def test_damaged_run_files_are_named_and_a_non_finite_frame_is_said(tmp_path, capsys):
    # counts and shapes that contradict each other or the config had given tracebacks or a made-up summary
    good = _run_file(tmp_path, capsys)

    def altered(name: str, change) -> Path:  # noqa: ANN001
        path = tmp_path / name
        path.write_bytes(good.read_bytes())
        with h5py.File(path, "r+") as f:
            change(f)
        return path

    def replace(f, name: str, data) -> None:  # noqa: ANN001
        del f[name]
        f.create_dataset(name, data=data, maxshape=(None, *np.shape(data)[1:]))

    cases = {
        altered("negative.h5", lambda f: f["committed_frames"].__setitem__(0, -1)): "counts -1 committed frames",
        altered("more.h5", lambda f: f["committed_frames"].__setitem__(0, 100)): "counts 100 committed frames",
        altered("short_t.h5", lambda f: replace(f, "t", f["t"][:1])): "'t' and 'x' hold 1 and",
        altered("wrong_d.h5", lambda f: replace(f, "x", f["x"][:, :, :2])): "its tokens 'x' have shape",
        # a stored value of another type had raised ValueError inside the summary (exit 1)
        altered("hot.h5", lambda f: f.attrs.__setitem__("config", f.attrs["config"].replace('"beta": 4.0', '"beta": "hot"'))):
            "its stored config has model.beta = 'hot', not a number",
    }
    for command in ("info", "diagnose"):
        for path, words in cases.items():
            status, err = _run([command, str(path)], capsys)
            assert status == 2 and "is damaged" in err and words in err, (command, path.name, err)
    # counters that are not a JSON object (a list had raised TypeError, text had been dropped in silence): said, and left out
    for value in ("[1, 2]", "not json"):
        counters = altered("counters.h5", lambda f: f.attrs.__setitem__("info", value))
        status, err = _run(["info", str(counters)], capsys)
        assert status == 0 and "warning: " in err and "its 'info' attribute (the run's counters" in err
    nan = altered("nan.h5", lambda f: f["x"].__setitem__(-1, np.nan))
    status, _ = _run(["info", str(nan)], capsys)
    assert status == 0  # described, with the reason the last frame has no clusters
    assert main(["info", str(nan)]) == 0 and "the last frame is not finite" in capsys.readouterr().out
    status, err = _run(["diagnose", str(nan)], capsys)  # the cluster statistics had raised SciPy's ValueError
    assert status == 2 and "is not finite (NaN or inf)" in err


def test_run_files_of_another_layout_are_damaged_for_every_reader(tmp_path, capsys):
    # members of another type or shape had given tracebacks (TypeError, ValueError, AttributeError: exit 1) in info,
    # mf.load and init.path, and NaN or decreasing times had been taken as they were
    import meanfield as mf
    from meanfield.errors import ConfigError

    good = _run_file(tmp_path, capsys)
    frames = h5py.File(good, "r")["t"].shape[0]

    def replace(f, name: str, data) -> None:  # noqa: ANN001
        del f[name]
        if data is None:
            f.create_group(name)
        else:
            f.create_dataset(name, data=data)

    changes = {
        "checksum_text": (lambda f: replace(f, "checksum", np.array([b"x"] * frames)), "'checksum' holds |S1 values"),
        "committed_scalar": (lambda f: replace(f, "committed_frames", 2), "'committed_frames' has shape (), not (1,)"),
        "diagnostic_2d": (lambda f: f["diagnostics"].create_dataset("z", data=np.zeros((frames, 2))), "'diagnostics/z' has shape"),
        "diagnostic_text": (lambda f: f["diagnostics"].create_dataset("s", data=np.array([b"x"] * frames)), "'diagnostics/s' holds"),
        "diagnostic_group": (lambda f: f["diagnostics"].create_group("sub"), "'diagnostics/sub' is a group"),
        "diagnostics_dataset": (lambda f: replace(f, "diagnostics", np.zeros(frames)), "'diagnostics' is a dataset"),
        "t_2d": (lambda f: replace(f, "t", np.stack([f["t"][()]] * 2, 1)), "'t' has shape"),
        "t_group": (lambda f: replace(f, "t", None), "'t' is a group"),
        "x_group": (lambda f: replace(f, "x", None), "'x' is a group"),
        "x_text": (lambda f: replace(f, "x", np.full(f["x"].shape, b"a")), "'x' holds |S1 values"),
        "x_int": (lambda f: replace(f, "x", f["x"][()].astype(np.int32)), "'x' holds int32 values"),
        "t_nan": (lambda f: f["t"].__setitem__(1, np.nan), "'t' are not finite and increasing (t[1] = nan)"),
        "t_decreasing": (lambda f: f["t"].__setitem__(slice(None), f["t"][()][::-1]), "'t' are not finite and increasing"),
        "status_numbers": (lambda f: f.attrs.__setitem__("status", np.array([1, 2])), "'status' attribute is"),
    }
    for name, (change, words) in changes.items():
        path = tmp_path / f"{name}.h5"
        shutil.copy(good, path)
        with h5py.File(path, "r+") as f:
            change(f)
        status, err = _run(["info", str(path)], capsys)
        assert status == 2 and f"{path} is damaged: " in err and words in err, (name, err)
        with pytest.raises(ConfigError, match="is damaged: "):
            mf.load(path)
        status, err = _run(["simulate", str(DEFAULT), "-o", str(tmp_path / "chain.h5"), "--quiet", "--overwrite",
                            "--set", "init.kind=run", "--set", f"init.path={path}", "--set", "init.time=0"], capsys)
        assert status == 2 and "init.path" in err and "is damaged: " in err, (name, err)


def test_a_run_without_frames_is_described_and_not_analysed(tmp_path, capsys):
    good = _run_file(tmp_path, capsys)
    frameless = _copy_with(good, tmp_path / "frameless.h5", frames=0)
    status, err = _run(["info", str(frameless)], capsys)
    assert status == 0
    for command in ("diagnose", "concentration"):
        status, err = _run([command, str(frameless)], capsys)
        assert status == 2 and "no" in err and "frame" in err, (command, err)


def test_resume_of_a_foreign_or_truncated_file_is_refused_and_a_frameless_one_starts_afresh(tmp_path, capsys):
    good = _run_file(tmp_path, capsys)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("data", data=np.arange(4))
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(good.read_bytes()[:4000])
    sets = ["--set", "solver.t_final=0.2", "--set", "init.n=16"]
    for path in (foreign, truncated):
        before = path.read_bytes()
        status, err = _run(["simulate", str(DEFAULT), "-o", str(path), "--resume", "--quiet", *sets], capsys)
        assert status == 2 and "--resume" in err, err
        assert path.read_bytes() == before
    frameless = _copy_with(good, tmp_path / "frameless.h5", frames=0)
    status, err = _run(["simulate", str(DEFAULT), "-o", str(frameless), "--resume", "--quiet", *sets], capsys)
    assert status == 0 and "no committed frame; starting the run afresh" in err
    with h5py.File(frameless, "r") as f:
        assert list(f["t"][()]) == [0.0, 0.2] and f.attrs["status"] == "completed"


def test_resume_only_extends_t_final_and_records_it(tmp_path, capsys):
    good = _run_file(tmp_path, capsys)
    shorter = ["--set", "solver.t_final=0.1", "--set", "init.n=16"]
    status, err = _run(["simulate", str(DEFAULT), "-o", str(good), "--resume", "--quiet", *shorter], capsys)
    assert status == 2 and "solver.t_final" in err and "only extends" in err
    longer = ["--set", "solver.t_final=0.5", "--set", "init.n=16"]
    assert _run(["simulate", str(DEFAULT), "-o", str(good), "--resume", "--quiet", *longer], capsys)[0] == 0
    with h5py.File(good, "r") as f:
        assert json.loads(f.attrs["config"])["solver"]["t_final"] == 0.5 and f["t"][-1] == 0.5


def test_a_run_written_before_a_key_existed_resumes_when_the_key_keeps_its_default(tmp_path, capsys):
    """A file from an older version lacks the newer keys (their defaults then); a changed value is still refused."""
    from meanfield.config import SCHEMA

    good = _run_file(tmp_path, capsys)
    with h5py.File(good, "r+") as f:
        stored = json.loads(f.attrs["config"])
        assert stored["model"].pop("tolerance") == SCHEMA["model"]["tolerance"].default
        f.attrs["config"] = json.dumps(stored)
    longer = ["--set", "solver.t_final=0.5", "--set", "init.n=16"]
    assert _run(["simulate", str(DEFAULT), "-o", str(good), "--resume", "--quiet", *longer], capsys)[0] == 0
    with h5py.File(good, "r") as f:
        assert f["t"][-1] == 0.5
    changed = ["--set", "solver.t_final=0.6", "--set", "init.n=16", "--set", "model.tolerance=1e-6"]
    status, err = _run(["simulate", str(DEFAULT), "-o", str(good), "--resume", "--quiet", *changed], capsys)
    assert status == 2 and "model.tolerance" in err


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--csv", "{tmp}"], "--csv"),
        (["--plot", "{tmp}"], "--plot"),
        (["--plot", "{tmp}/x.xyz"], "--plot"),
        (["--plot", "{tmp}/afile/x.png"], "--plot"),
        (["--csv", "{tmp}/afile/x.csv"], "--csv"),
    ],
)
def test_bad_picture_and_table_paths_are_refused_before_any_work(argv, option, tmp_path, capsys):
    good = _run_file(tmp_path, capsys)
    (tmp_path / "afile").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    for command in ("diagnose", "concentration"):
        status, err = _run([command, str(good), *argv], capsys)
        assert status == 2 and option in _one_line(err), (command, err)
    if option == "--plot":
        status, err = _run(["info", str(good), *argv], capsys)
        assert status == 2 and option in err


def test_a_table_never_replaces_a_run_a_config_or_a_picture(tmp_path, capsys):
    # --csv pointed at the run being read (or any HDF5 file, whatever its name, or a config) had replaced it, exit 0
    good = _run_file(tmp_path, capsys)
    before = good.read_bytes()
    renamed = tmp_path / "run.dat"
    renamed.write_bytes(before)
    config = tmp_path / "c.toml"
    config.write_text(DEFAULT.read_text())
    for command in ("diagnose", "concentration"):
        for target in (good, renamed, config, tmp_path / "new.h5"):
            status, err = _run([command, str(good), "--csv", str(target)], capsys)
            assert status == 2 and "--csv" in _one_line(err) and "replaced by a table" in err, (command, target, err)
        assert good.read_bytes() == before and renamed.read_bytes() == before and config.read_text() == DEFAULT.read_text()
        assert not (tmp_path / "new.h5").exists()
        status, _ = _run([command, str(good), "--csv", str(tmp_path / "table.csv")], capsys)
        assert status == 0 and (tmp_path / "table.csv").exists()


def test_a_run_cannot_start_from_the_file_it_writes(tmp_path, capsys):
    # --overwrite with init.path = the output had replaced the source run (exit 0), and the chain then looped
    good = _run_file(tmp_path, capsys)
    before = good.read_bytes()
    chained = ["--set", "init.kind=run", "--set", f"init.path={good}", "--set", "solver.t_final=0.4"]
    for flag in ("--overwrite", "--resume"):
        status, err = _run(["simulate", str(DEFAULT), "-o", str(good), "--quiet", flag, *chained], capsys)
        assert status == 2 and "init.path" in _one_line(err) and "output" in err, (flag, err)
        assert good.read_bytes() == before
    status, _ = _run(["simulate", str(DEFAULT), "-o", str(tmp_path / "next.h5"), "--quiet", *chained], capsys)
    assert status == 0


def test_the_failed_frame_of_an_older_file_is_left_out_by_every_reader(tmp_path, capsys):
    # files written before 0.2 kept the frame that failed its checks (here: tokens at the origin, off the sphere);
    # info and concentration had stopped on it with a traceback
    good = _run_file(tmp_path, capsys)
    old = tmp_path / "old.h5"
    old.write_bytes(good.read_bytes())
    with h5py.File(old, "r+") as f:
        t = f["t"][:]
        f["x"][-1] = 0.0
        f.attrs["status"] = "failed"
        f.attrs["stop_reason"] = f"tokens left the sphere at t={t[-1]:.6g} (max | |x|-1 | = 1)"
    from meanfield.run import load

    run = load(old)
    assert run.frames == t.size - 1 and run.status == "failed"
    for command in ("info", "concentration", "diagnose"):
        status, err = _run([command, str(old)], capsys)
        assert status == 0, (command, err)


@pytest.mark.parametrize(("argv", "option"), [
    (["convergence", str(DEFAULT), "--cells", "200,200"], "--cells"),  # (rows of nan orders, exit 0)
    (["inspect", "{checkpoint}", "--layer", "0,0"], "--layer"),  # (layer 0 analysed twice)
    (["theory", "clustering-time", "--quick", "--dt", "0"], "--dt"),  # (parse_float(positive=True) took 0)
    (["theory", "clustering-time", "--quick", "--n", "4.5"], "--n"),  # (an integer list took 4.5 as 4)
    (["info", "{run}", "--follow", "--interval", "0"], "--interval"),
])
def test_a_bad_option_value_exits_2_naming_it(argv, option, tmp_path, capsys):
    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    if "{checkpoint}" in argv:
        write_synthetic_checkpoint(tmp_path / "tiny", d=8, num_layers=2, num_heads=2, seed=3)
    run = _run_file(tmp_path, capsys) if "{run}" in argv else None
    before = sorted(tmp_path.rglob("*"))
    status, err = _run([part.format(checkpoint=tmp_path / "tiny", run=run) for part in argv], capsys)
    assert status == 2, err
    assert f"error: {option}" in _one_line(err)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("cases", ["100000000:1000", "40000:3", "1024:5000"])
def test_compare_cases_too_large_are_refused_before_any_work(cases, capsys):
    # 10^8 tokens had died allocating 745 GiB (a traceback), 10^6 had run for minutes
    status, err = _run(["bench", "--compare", "--quick", "--cases", cases], capsys)
    assert status == 2 and "--cases" in _one_line(err)


@pytest.mark.parametrize("value", ["abc", "-3", "0"])
def test_a_bad_thread_count_in_the_environment_is_named(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEANFIELD_NUM_THREADS", value)
    out = tmp_path / "r.h5"
    status, err = _run(["simulate", str(DEFAULT), "-o", str(out), "--quiet", "--set", "init.n=16", "--set", "solver.t_final=0.2"], capsys)
    assert status == 2 and "MEANFIELD_NUM_THREADS" in _one_line(err) and not out.exists()
    from meanfield.kernels.jit import num_threads

    with pytest.warns(RuntimeWarning, match="MEANFIELD_NUM_THREADS"):
        assert num_threads() >= 1


def test_simulate_refuses_to_write_over_its_config_and_contradictory_flags(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(DEFAULT.read_text())
    status, err = _run(["simulate", str(config), "-o", str(config), "--overwrite", "--quiet"], capsys)
    assert status == 2 and "-o" in _one_line(err) and config.read_text() == DEFAULT.read_text()
    out = tmp_path / "r.h5"
    status, err = _run(["simulate", str(config), "-o", str(out), "--overwrite", "--resume", "--quiet"], capsys)
    assert status == 2 and "--overwrite" in _one_line(err) and not out.exists()


def test_a_picture_named_as_the_run_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    # -o x.png --plot x.png had replaced the run by its picture, exit 0 ("wrote x.png" twice)
    monkeypatch.chdir(tmp_path)
    for argv, option in ((["simulate", str(DEFAULT), "-o", "x.png", "--plot", "./x.png", "--quiet"], "-o"),
                         (["run", "--out", "y.gif", "--plot", "y.gif", "--quiet"], "--out")):
        status, err = _run(argv, capsys)
        assert status == 2 and f"is also the output {option}" in _one_line(err) and _one_line(err).startswith(f"meanfield {argv[0]}: error: --plot")
        assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux's /proc, a folder that takes no new files")
def test_an_output_where_no_file_can_be_made_is_named(capsys):
    # /proc takes no new files: the error had been a raw errno about the lock file, without the option
    status, err = _run(["simulate", str(DEFAULT), "-o", "/proc/meanfield-run.h5", "--quiet", "--set", "init.n=16"], capsys)
    assert status == 2 and _one_line(err).split("error: ")[1].startswith("-o:") and "/proc/meanfield-run.h5" in err


def test_output_folders_that_are_files_are_refused(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    afile = str(tmp_path / "afile")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'base = "{DEFAULT}"\n[grid]\n"model.beta" = [1.0, 2.0]\n')
    for argv, option in (
        (["reproduce", "multihead_beta_star", "--quick", "--out", afile], "--out"),
        (["concentration", "--sweep-beta", "1,2", str(ROOT / "data/concentration.toml"), "--out", afile], "--out"),
        (["sweep", str(sweep), "--out", afile], "--out"),
        (["sweep", str(sweep), "--out", str(tmp_path / "s"), "--scheduler", "not a url"], "--scheduler"),
        (["examples", afile], "DIR"),
    ):
        status, err = _run(argv, capsys)
        assert status == 2 and option in err, (argv, err)


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--stride", "0", "must be >= 1"), ("--stride", "-2", "must be >= 1"),
    ("--fd-points", "4", "must be an odd integer >= 3"), ("--fd-points", "1", "must be an odd integer >= 3"),
])
def test_diagnose_refuses_a_bad_stride_or_stencil_naming_the_option(option, value, says, tmp_path, capsys):
    # each had been left to the library: a ValueError traceback, exit 1, that named no option
    status, err = _run(["diagnose", str(_run_file(tmp_path, capsys)), "--quiet", option, value], capsys)
    assert status == 2 and f"{option}: {says}, got '{value}'" in err, err


TINY_PHASE = """
[model]
d = 3
beta = 1.0
[init]
n = 8
[solver]
dt = 0.1
t_final = 0.2
save_every = 0.1
[phase]
betas = [1.0]
samples = 2
batch = 2
"""


@pytest.mark.parametrize(("command", "option"), [("phase", "-o"), ("phase", "--out"), ("sweep", "--out")])
def test_an_empty_output_folder_name_is_refused_and_nothing_is_written(command, option, tmp_path, capsys, monkeypatch):
    # an empty --out had been taken as the working folder: the outputs (batches/, phase.csv, ...) landed there
    configs = tmp_path / "configs"
    configs.mkdir()
    if command == "phase":
        (configs / "phase.toml").write_text(TINY_PHASE)
        argv = ["phase", str(configs / "phase.toml"), option, "", "--workers", "0", "--quiet"]
    else:
        (configs / "sweep.toml").write_text(f'base = "{DEFAULT}"\n[grid]\n"model.beta" = [1.0]\n')
        argv = ["sweep", str(configs / "sweep.toml"), option, ""]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    status, err = _run(argv, capsys)
    assert status == 2 and "--out" in err and "the folder name is empty" in err, err
    assert sorted(os.listdir(work)) == [] and sorted(os.listdir(configs)) == [f"{command}.toml"]


@pytest.mark.parametrize("damage", ["missing", "nan", "layer 5", "sentence"])
def test_a_sweep_over_a_missing_or_broken_checkpoint_exits_2_before_its_folder(tmp_path, capsys, damage):
    # config resolution had only parsed model.heads = "checkpoint:...": the sweep wrote --out, ran every case, failed
    # each twice on the same error and exited 1 (and --dry-run listed the cases, exit 0)
    from safetensors.numpy import load_file, save_file

    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    path = write_synthetic_checkpoint(tmp_path / "ck", d=8, num_layers=2, num_heads=2)
    key, layer, named = "model.heads", 1, str(path)
    if damage == "missing":
        shutil.rmtree(path.parent)
        named = str(path.parent)
    elif damage == "nan":
        tensors = load_file(str(path))
        tensors["encoder.layer.1.attention.self.key.weight"][2, 3] = np.nan
        save_file(tensors, str(path))
    elif damage == "layer 5":
        layer, named = 5, "layer 5 does not exist"
    else:  # the word table the sentence is read from
        tensors = load_file(str(path))
        del tensors["embeddings.word_embeddings.weight"]
        save_file(tensors, str(path))
    base = tmp_path / "base.toml"
    base.write_text(f'[model]\nd = 8\nheads = "checkpoint:{path.parent}#layer={layer}"\n'
                    '[init]\nkind = "sentence"\nsentence = "the cat sat"\n[solver]\nt_final = 0.1\nsave_every = 0.05\n')
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'base = "{base}"\n[grid]\n"model.beta" = [1.0, 2.0]\n')
    for extra in ([], ["--dry-run"]):
        status, err = _run(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "0", "--quiet", *extra], capsys)
        assert status == 2 and f"{key}: " in err and named in err, err
        assert not (tmp_path / "out").exists()


def test_an_empty_sentence_is_refused(tmp_path, capsys):
    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    write_synthetic_checkpoint(tmp_path / "tiny", d=8, num_layers=1, num_heads=2, seed=1)
    for sentence in ("", "   "):
        status, err = _run(["inspect", str(tmp_path / "tiny"), "--sentence", sentence], capsys)
        assert status == 2 and "--sentence" in err


def test_a_second_writer_is_refused_and_the_first_run_is_untouched(tmp_path, capsys):
    from meanfield.io.lock import WriterLock

    out = tmp_path / "r.h5"
    with WriterLock(out):  # a writer at work on out
        status, err = _run(["simulate", str(DEFAULT), "-o", str(out), "--quiet", "--overwrite"], capsys)
    assert status == 2 and "being written by another meanfield process" in err and not out.exists()


def test_a_value_that_starts_with_a_minus_sign_reaches_its_option(capsys):
    # argparse takes only plain negative numbers as values: "--sweep-beta -4,16" had stopped with
    # "expected one argument" instead of the option's own message naming the bad value
    config = str(ROOT / "data/concentration.toml")
    status, err = _run(["concentration", "--sweep-beta", "-4,16", config], capsys)
    assert status == 2 and "--sweep-beta" in _one_line(err) and "-4.0" in err
    status, err = _run(["theory", "rates", "--lambdas", "-1e-3,2"], capsys)
    assert status == 2 and "--lambdas" in _one_line(err)


@pytest.mark.parametrize("entry", ["log(0.05-t)", "1e300*exp(1000*t)"])
def test_a_weight_target_that_leaves_the_finite_numbers_is_bad_input(entry, tmp_path, capsys):
    # finite at t = 0, where it was checked, and not later: the run had ended as NaN tokens with exit 1 and a file
    out = tmp_path / "r.h5"
    target = f'weights.target=[["{entry}","0","0"],["0","1","0"],["0","0","1"]]'
    status, err = _run(["simulate", str(ROOT / "data/massucco_oscillating.toml"), "-o", str(out), "--quiet",
                        "--set", "solver.t_final=0.1", "--set", target], capsys)
    assert status == 2 and "weights.target" in _one_line(err) and not out.exists()


def test_examples_into_a_folder_with_a_folder_of_a_config_s_name_copies_nothing(tmp_path, capsys):
    # --overwrite had copied the other configurations, then failed on the folder
    target = tmp_path / "examples"
    (target / "default.toml").mkdir(parents=True)
    status, err = _run(["examples", str(target), "--overwrite"], capsys)
    assert status == 2 and "error: DIR" in err and "default.toml" in err
    assert [p.name for p in target.iterdir()] == ["default.toml"]
    status, err = _run(["examples", ""], capsys)  # had been taken as the current folder
    assert status == 2 and "error: DIR: is empty" in err


@pytest.mark.parametrize(("dt", "words"), [("1e-300", "steps of the weight path"), ("5e-324", "inf steps"),
                                          ("1e-6", "the weight path of 2e+07 points (t_final / weights.dt) for 1000 heads")])
def test_a_weight_path_too_long_or_too_large_names_weights_dt(dt, words, tmp_path, capsys):
    # weights.dt = 1e-300 had raised NumPy's "Maximum allowed size exceeded", 5e-324 an OverflowError, and 1e-6
    # allocated the 2·10⁷-point path of every head (here 8.6 TB) before anything said so
    out = tmp_path / "run.h5"
    status, err = _run(["simulate", str(ROOT / "data/massucco_ou.toml"), "-o", str(out), "--quiet", "--set", f"weights.dt={dt}",
                        "--set", "model.num_heads=1000"], capsys)
    assert status == 2 and "weights.dt" in _one_line(err) and words in err
    assert not list(tmp_path.iterdir())


def test_the_memory_estimate_counts_replicated_heads_and_the_weight_path():
    from meanfield.config import load_config
    from meanfield.resources import memory_estimate

    cfg = load_config(ROOT / "data/massucco_ou.toml", [])  # 10 heads by model.num_heads, d = 3, t_final / dt = 4000
    estimate = memory_estimate(cfg)
    assert estimate["model.d"] == 8.0 * 6 * 10 * 9
    assert estimate["weights.dt"] == 8.0 * 6 * 10 * 9 * (20 / 0.005 + 2)
    assert "weights.dt" not in memory_estimate(load_config(ROOT / "data/default.toml", []))


def test_a_large_stored_weight_path_is_noted_and_one_past_the_memory_refused_naming_weights_dt():
    # weights.dt = 1e-5 had written a path of 117 MB (29 s) for an 8-token run of 9 frames without a word
    import warnings

    from meanfield.config import load_config
    from meanfield.errors import ConfigError, ConfigNote
    from meanfield.resources import WEIGHT_PATH_NOTE_BYTES, check_resources, weight_path_bytes

    sets = ["init.n=8", "solver.t_final=2", "solver.dt=0.05"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(ROOT / "data/oscillating_heads.toml", [*sets, "weights.dt=1e-5"])
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "weights.dt = 1e-05" in str(w.message)]
    assert len(notes) == 1 and "2e+05 times" in notes[0] and "4 heads of 3×3" in notes[0] and "110 MiB in the run file" in notes[0]
    np.testing.assert_allclose(weight_path_bytes(cfg), 8.0 * 2 * 4 * 9 * (2 / 1e-5 + 2), rtol=1e-12)
    with warnings.catch_warnings(record=True) as caught:  # ten times the step: 11 MiB, no note
        warnings.simplefilter("always")
        small = load_config(ROOT / "data/oscillating_heads.toml", [*sets, "weights.dt=1e-4"])
    assert weight_path_bytes(small) < WEIGHT_PATH_NOTE_BYTES
    assert not [w for w in caught if "weights.dt =" in str(w.message)]
    with pytest.raises(ConfigError, match=r"^weights.dt: the weight path of 2e\+05 points .* need about .*; this machine has 200 MiB"):
        check_resources(cfg, available=200 << 20)  # (330 MiB while it is built)


LAYERS_BIG = """
[model]
d = 32
num_heads = 4
[[model.heads]]
Q = "gaussian"
K = "gaussian"
V = "gaussian"
[init]
n = 4
[weights]
schedule = "layers"
[solver]
kind = "particle"
method = "euler"
dt = 1.0
t_final = 2000.0
save_every = 500.0
[track]
energy = false
"""


def test_a_layers_run_s_stored_layers_are_noted_and_counted_by_the_memory_check(tmp_path, capsys):
    # weights.schedule = "layers" stores one draw of B and V per layer, ⌊t_final⌋ + 1 of them: 2000 layers of 4 heads
    # of 32×32 had written 131 MB without the note an OU path of that size gets, and 2·10⁴ layers of 8 heads of
    # 64×64 (9.8 GiB in the file) had been accepted on a machine of 22 GiB, to be killed after the file was made
    import warnings

    from meanfield.config import load_config
    from meanfield.errors import ConfigError, ConfigNote
    from meanfield.resources import WEIGHT_PATH_NOTE_BYTES, check_resources, memory_estimate, weight_path_bytes

    config = tmp_path / "layers.toml"
    config.write_text(LAYERS_BIG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(config, [])
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "solver.t_final = 2000" in str(w.message)]
    assert len(notes) == 1 and "2e+03 layers" in notes[0] and "4 heads of 32×32" in notes[0], notes
    np.testing.assert_allclose(weight_path_bytes(cfg), 8.0 * 2 * 4 * 32 * 32 * 2001, rtol=1e-12)
    assert weight_path_bytes(cfg) > WEIGHT_PATH_NOTE_BYTES
    np.testing.assert_allclose(memory_estimate(cfg)["solver.t_final"], 8.0 * 6 * 4 * 32 * 32 * 2001, rtol=1e-12)
    with pytest.raises(ConfigError, match=r"^solver.t_final: the weight path of 2e\+03 layers .* need about .*; this machine has 200 MiB"):
        check_resources(cfg, available=200 << 20)
    with warnings.catch_warnings(record=True) as caught:  # 20 layers: 1.3 MiB, no note
        warnings.simplefilter("always")
        small = load_config(config, ["solver.t_final=20", "solver.save_every=5"])
    assert weight_path_bytes(small) == 8.0 * 2 * 4 * 32 * 32 * 21
    assert not [w for w in caught if "layers" in str(w.message)]
    out = tmp_path / "run.h5"  # the review's case, refused before the file, naming the key, as an OU path is
    status, err = _run(["simulate", str(config), "-o", str(out), "--quiet", "--set", "model.d=64", "--set", "model.num_heads=8",
                        "--set", "solver.t_final=2e6", "--set", "solver.save_every=5e5"], capsys)
    assert status == 2 and "error: solver.t_final: the weight path of 2e+06 layers" in _one_line(err), err
    assert not out.exists()


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc, a folder no one can write into")
def test_an_output_in_a_folder_that_refuses_files_is_refused_before_the_work(tmp_path, capsys):
    # root passes os.access there: diagnose --csv /proc/x.csv had failed after the whole computation, naming no option
    from meanfield.cli import main

    out = tmp_path / "run.h5"
    assert main(["simulate", str(ROOT / "data/default.toml"), "-o", str(out), "--quiet", "--set", "init.n=8",
                 "--set", "solver.t_final=0.5"]) == 0
    capsys.readouterr()
    assert main(["diagnose", str(out), "--csv", "/proc/x.csv", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error: --csv: cannot write into /proc" in err and "nan" not in err


def test_too_many_frames_quote_save_every_as_save_every(tmp_path, capsys):
    # "solver.t_final: 0.25 saves 4e+300 frames …" had quoted save_every's value as if it were t_final's
    argv = ["simulate", str(DEFAULT), "-o", str(tmp_path / "r.h5"), "--quiet", "--set", "solver.t_final=1e300",
            "--set", "solver.save_every=0.25"]
    status, err = _run(argv, capsys)
    assert status == 2 and "solver.t_final: save_every = 0.25 saves 4e+300 frames up to t_final = 1e+300" in _one_line(err)
