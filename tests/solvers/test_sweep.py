"""Parameter sweeps (meanfield.solvers.sweep, ``meanfield sweep``): definition, results, faults, resume, Dask.

The expensive paths run once each: one two-worker LocalCluster sweep with a
failing case, and one sweep killed with SIGKILL in a subprocess and resumed.
Everything else runs in-process (``workers=0``).
"""
from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
import uuid
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.config import config_hash, load_config
from meanfield.errors import ConfigError, ConfigNote
from meanfield.cli import main as cli_main
from meanfield.solvers.sweep import _toml_value, case_scalars, load_sweep, read_ledger, run_case, run_sweep

BASE_TOML = """
[model]
d = 3
beta = 1.0
attention = "softmax"

[init]
kind = "uniform"
n = 12
seed = 0

[solver]
method = "rk4"
dt = 0.05
t_final = 0.4
save_every = 0.1
"""

#: a case that fails at run time: unnormalized attention with a huge β overflows to NaN
FAILING = {"model.attention": "unnormalized", "model.beta": 1.0e4}


def _base(tmp_path: Path) -> Path:
    path = tmp_path / "base.toml"
    path.write_text(BASE_TOML)
    return path


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _hook_module(folder: Path) -> str:
    """A results hook that logs every finished run (one line per execution) and adds a scalar."""
    name = f"sweep_hook_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        "from pathlib import Path\n"
        "def count(path, cfg):\n"
        "    with open(Path(path).parent.parent / 'executions.log', 'a') as f:\n"
        "        f.write(Path(path).stem + '\\n')\n"
        "    return {'n_tokens': cfg['init']['n']}\n"
    )
    return name


def _same(a: object, b: object) -> bool:
    """Equality of rows, NaN equal to NaN."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# --------------------------------------------------------------------------- definition
@pytest.mark.parametrize(
    "value",
    [1, -3, 2.5, 1e-300, float("inf"), -float("inf"), True, "softmax", 'a "quoted" \\ string', [1.0, 2.0],
     [[1.0, 0.0], [0.0, 1.0]], [{"Q": 1.0, "K": "identity", "V": "aligned"}]],
)
def test_override_values_round_trip_through_toml(value):
    assert tomllib.loads(f"v = {_toml_value(value, 'k')}")["v"] == value


def test_grid_is_the_cartesian_product_of_resolved_configs(tmp_path):
    base = _base(tmp_path)
    sub = tmp_path / "sweeps"
    sub.mkdir()
    sweep_file = sub / "s.toml"
    sweep_file.write_text('base = "../base.toml"\n[set]\n"init.n" = 8\n[grid]\n"model.beta" = [1.0, 4.0]\n"init.seed" = [0, 1, 2]\n')
    spec = load_sweep(sweep_file)
    assert spec.parameters == ("model.beta", "init.seed")
    assert len(spec.cases) == 6
    expected = [(b, s) for b in (1.0, 4.0) for s in (0, 1, 2)]
    for case, (beta, seed) in zip(spec.cases, expected):
        reference = load_config(base, ["init.n=8", f"model.beta={beta}", f"init.seed={seed}"])
        assert case.params == {"model.beta": beta, "init.seed": seed}
        assert case.config == reference
        assert case.hash == config_hash(reference)
    assert len({case.hash for case in spec.cases}) == 6


def test_cases_accept_dotted_and_nested_keys_and_combine_with_the_grid(tmp_path):
    _base(tmp_path)
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(
        'base = "base.toml"\n'
        '[[cases]]\n"model.attention" = "relu"\n'
        '[[cases]]\nmodel.attention = "softmax"\ninit.n = 6\n'
        '[grid]\n"model.beta" = [2.0, 3.0]\n'
    )
    spec = load_sweep(sweep_file)
    assert [c.params for c in spec.cases] == [
        {"model.attention": "relu", "model.beta": 2.0},
        {"model.attention": "relu", "model.beta": 3.0},
        {"model.attention": "softmax", "init.n": 6, "model.beta": 2.0},
        {"model.attention": "softmax", "init.n": 6, "model.beta": 3.0},
    ]
    assert spec.parameters == ("model.attention", "init.n", "model.beta")
    assert spec.cases[2].config["init"]["n"] == 6 and spec.cases[0].config["init"]["n"] == 12


@pytest.mark.parametrize(
    ("sweep", "key", "words"),
    [
        ({"grid": {"model.betta": [1.0]}}, "grid.model.betta", "unknown key"),
        ({"grid": {"modell.beta": [1.0]}}, "grid.modell.beta", "unknown section"),
        ({"grid": {"model.beta": 4.0}}, "grid.model.beta", "non-empty list"),
        ({"grid": {"model.beta": [1.0, -2.0]}}, "model.beta", "sweep case 1"),
        ({"cases": [{"model.beta": 2.0}, {"model.beta": 2.0}]}, "cases", "same config"),
        ({"cases": [{"model.beta": 2.0}], "grid": {"model.beta": [1.0]}}, "cases[0].model.beta", "also swept"),
        ({"gird": {"model.beta": [1.0]}}, "gird", "unknown sweep key"),
        ({"base": "missing.toml"}, "base", "not found"),
        ({"results": "no_such_module_xyz:f"}, "results", "cannot import"),
        ({"retries": -1}, "retries", "integer >= 0"),
        ({"set": {"model.beta": 2.0}, "grid": {"model.beta": [1.0, 4.0]}}, "set.model.beta", "also swept"),  # [grid] had won
        ({"grid": {"model.beta": [1, 1.0]}}, "grid.model.beta", "lists 1.0 twice"),  # had named `cases`
        # "model.beta" and model.beta in one table (two keys to tomllib): the later had silently dropped the other
        ({"grid": {"model.beta": [1.0, 2.0], "model": {"beta": [8.0]}}}, "grid.model.beta",
         'given twice ("model.beta" and model.beta)'),
        ({"set": {"model": {"beta": 2.0}, "model.beta": 3.0}}, "set.model.beta", 'given twice (model.beta and "model.beta")'),
        ({"cases": [{"init.n": 5}, {"model.beta": 2.0, "model": {"beta": 3.0}}]}, "cases[1].model.beta", "given twice"),
    ],
)
def test_bad_sweeps_raise_config_error_before_any_work(tmp_path, sweep, key, words):
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_sweep(sweep, out, workers=0, quiet=True)
    assert info.value.key == key
    assert words in str(info.value)
    assert not out.exists()


def test_a_key_quoted_and_dotted_in_one_sweep_file_is_refused(tmp_path, capsys):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f'base = "{_base(tmp_path)}"\n[grid]\n"model.beta" = [1.0, 2.0]\nmodel.beta = [8.0]\n')
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert 'error: grid.model.beta: given twice ("model.beta" and model.beta)' in capsys.readouterr().err


def test_cli_exit_status_2_names_the_key(tmp_path, capsys):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('[grid]\n"init.n" = [4, 0]\n')
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--workers", "0"]) == 2
    assert "init.n" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_cases(tmp_path, capsys):
    _base(tmp_path)
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('base = "base.toml"\n[grid]\n"model.beta" = [1.0, 2.0, 3.0]\n')
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 cases" in out and "model.beta=2.0" in out
    assert not (tmp_path / "out").exists()
    # what the run refuses, a dry run refuses too (both had listed the cases, exit 0, and the run then exited 2)
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--dry-run", "--workers", "-1"]) == 2
    assert "error: --workers" in capsys.readouterr().err
    run_sweep(load_sweep(sweep_file), tmp_path / "out", workers=0, quiet=True)
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "error: --out" in capsys.readouterr().err
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--dry-run", "--resume"]) == 0


# --------------------------------------------------------------------------- results
def test_rows_hold_the_parameters_and_scalars_of_each_run(tmp_path):
    _base(tmp_path)
    sweep = {"base": "base.toml", "grid": {"model.beta": [1.0, 3.0]}, "set": {"init.n": 5}}
    spec = load_sweep(sweep, base_dir=tmp_path)
    rows = run_sweep(spec, tmp_path / "out", workers=0, quiet=True)
    table = _read_csv(tmp_path / "out" / "results.csv")
    assert [r["model.beta"] for r in table] == ["1.0", "3.0"]
    assert [r["status"] for r in table] == ["ok", "ok"]
    for row, case in zip(rows, spec.cases):
        assert row["hash"] == case.hash and row["attempts"] == 1 and row["error"] == ""
        with h5py.File(tmp_path / "out" / row["path"], "r") as f:
            x = f["x"][-1]
            stored = json.loads(f.attrs["config"])
            frames = f["t"].shape[0]
        assert stored == case.config
        assert frames == row["frames"] == 5  # t = 0, 0.1, …, 0.4
        smallest = min(float(np.dot(x[i], x[j])) for i in range(5) for j in range(i + 1, 5))
        np.testing.assert_allclose(row["min_inner_product"], smallest, rtol=0, atol=1e-14)
        # E_multi = (1/(2β n²)) Σ_ij exp(β <x_i, x_j>) for the identity head
        beta = case.config["model"]["beta"]
        energy = sum(np.exp(beta * np.dot(a, b)) for a in x for b in x) / (2 * beta * 25)
        np.testing.assert_allclose(row["energy_final"], energy, rtol=1e-12)
        assert np.isnan(row["t_min"]) and np.isnan(row["W2_min"])  # no concentration tracker
    assert float(table[1]["energy_final"]) == rows[1]["energy_final"]  # full precision in the CSV


def test_concentration_runs_report_t_min_and_w2_min(tmp_path):
    path = tmp_path / "run.h5"
    t = np.linspace(0.0, 2.0, 5)
    w2 = np.array([0.9, 0.5, 0.2, 0.3, 0.8])
    with h5py.File(path, "w") as f:
        f.attrs["config"] = "{}"
        f["t"] = t
        f["x"] = np.zeros((5, 2, 3))
        f.create_group("diagnostics")["w2_target"] = w2
    scalars = case_scalars(path)
    assert scalars["t_min"] == 1.0 and scalars["W2_min"] == 0.2
    assert scalars["frames"] == 5 and scalars["t_last"] == 2.0


def test_a_scheduler_address_where_no_dask_scheduler_answers_fails_in_bounded_time(tmp_path, monkeypatch):
    # a port where something else listens (a web server, a socket that never answers) had kept the sweep waiting for ever
    import socket
    import time

    import meanfield.solvers.sweep as sweep_module

    _base(tmp_path)
    spec = load_sweep({"base": "base.toml"}, base_dir=tmp_path)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # the kernel accepts the connection; nobody ever answers it
    monkeypatch.setattr(sweep_module, "SCHEDULER_ANSWER_SECONDS", 3.0)
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"^--scheduler: .* did not answer as a Dask scheduler within 3 s"):
            run_sweep(spec, tmp_path / "out", scheduler=f"tcp://127.0.0.1:{silent.getsockname()[1]}", quiet=True)
        assert time.monotonic() - started < 60  # bounded, not for ever (a generous limit: this is no timing test)
    finally:
        silent.close()
    assert not (tmp_path / "out").exists()


def test_a_scheduler_address_where_another_service_talks_first_is_bad_input(tmp_path, capsys):
    # an SSH-like banner (a wrong port) had crashed the client ("Unable to allocate 2.82 EiB": the banner read as a
    # frame length) with a traceback and exit 1, then kept the process 40 s in Client.__del__
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed at the end of the test
                return
            conn.sendall(b"SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.6\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f'base = "{_base(tmp_path)}"\n[grid]\n"model.beta" = [1.0, 2.0]\n')
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--scheduler", address, "--quiet"]) == 2
    finally:
        server.close()
    err = capsys.readouterr().err
    assert f"--scheduler: '{address}' did not answer as a Dask scheduler" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_failing_case_is_retried_once_then_recorded_and_the_rest_complete(tmp_path):
    _base(tmp_path)
    sweep = {"base": "base.toml", "cases": [{"model.beta": 1.0}, FAILING, {"model.beta": 2.0}]}
    rows = run_sweep(load_sweep(sweep, base_dir=tmp_path), tmp_path / "out", workers=0, quiet=True)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert [r["attempts"] for r in rows] == [1, 2, 1]
    assert rows[1]["error"].count("RunFailed") == 2 and "NaN" in rows[1]["error"]
    assert [r["status"] for r in _read_csv(tmp_path / "out" / "results.csv")] == ["ok", "failed", "ok"]
    with h5py.File(tmp_path / "out" / rows[1]["path"], "r") as f:  # the frames saved before the failure
        frames, t_last = f["t"].shape[0], float(f["t"][-1])
    assert frames >= 1 and rows[1]["frames"] == frames and rows[1]["t_last"] == t_last  # had been empty


def test_a_case_failing_on_bad_input_is_not_run_again(tmp_path, monkeypatch):
    # a ConfigError fails the same way every time: it had been retried like a NaN (an unreadable checkpoint: twice)
    import meanfield.solvers.sweep as sweep_module
    from meanfield.errors import ConfigError

    _base(tmp_path)
    calls = []

    def failing(config, path, *, resume_partial):
        calls.append(config["model"]["beta"])
        if config["model"]["beta"] == 1.0:
            raise ConfigError("init.path", "x0.npy: file not found")
        if config["model"]["beta"] == 2.0:
            raise RuntimeError("a worker's disk went away")
        try:
            raise OSError(28, "No space left on device")
        except OSError as exc:
            raise ConfigError("OUT.h5", f"cannot write {path}: {exc.strerror}") from None

    monkeypatch.setattr(sweep_module, "_simulate_case", failing)
    sweep = {"base": "base.toml", "cases": [{"model.beta": 1.0}, {"model.beta": 2.0}, {"model.beta": 3.0}]}
    rows = run_sweep(load_sweep(sweep, base_dir=tmp_path), tmp_path / "out", workers=0, quiet=True)
    assert calls == [1.0, 2.0, 2.0, 3.0, 3.0] and [r["attempts"] for r in rows] == [1, 2, 2]  # (a full disk: again)
    assert rows[0]["error"] == "attempt 1: ConfigError: init.path: x0.npy: file not found" and "retry" not in rows[0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_resume_skips_finished_cases_and_retry_failed_reruns_only_failures(tmp_path, monkeypatch):
    _base(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = _hook_module(tmp_path)
    sweep = {"base": "base.toml", "results": f"{hook}:count", "cases": [{"model.beta": 1.0}, FAILING]}
    spec = load_sweep(sweep, base_dir=tmp_path)
    out = tmp_path / "out"
    first = run_sweep(spec, out, workers=0, quiet=True)
    assert first[0]["n_tokens"] == 12  # the hook's scalar is a column
    with pytest.raises(ConfigError, match="--resume"):
        run_sweep(spec, out, workers=0, quiet=True)
    again = run_sweep(spec, out, workers=0, resume=True, quiet=True)
    assert _same(again, first)
    log = (out / "executions.log").read_text().split()
    assert log == [spec.cases[0].hash]  # the failing case never reached the hook; nothing ran twice
    rerun = run_sweep(spec, out, workers=0, resume=True, retry_failed=True, quiet=True)
    assert (out / "executions.log").read_text().split() == log
    assert _same(rerun[0], first[0]) and rerun[1]["status"] == "failed"
    assert len((out / "ledger.jsonl").read_text().splitlines()) == 3  # ok, failed, failed again


def test_a_sweep_whose_base_is_itself_is_named(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('base = "s.toml"\n[grid]\n"model.beta" = [1.0]\n')
    with pytest.raises(ConfigError, match="this sweep file itself") as info:
        load_sweep(sweep)
    assert info.value.key == "base"


def test_resume_refuses_another_sweep_and_leaves_the_first_as_it_was(tmp_path):
    # --resume with a different sweep file had replaced sweep.json and dropped the first sweep's rows from its table
    _base(tmp_path)
    first = load_sweep({"base": "base.toml", "grid": {"model.beta": [1.0, 2.0]}}, base_dir=tmp_path)
    other = load_sweep({"base": "base.toml", "grid": {"model.beta": [3.0]}}, base_dir=tmp_path)
    out = tmp_path / "out"
    rows = run_sweep(first, out, workers=0, quiet=True)
    stored = {name: (out / name).read_bytes() for name in ("sweep.json", "results.csv")}
    with pytest.raises(ConfigError, match="another sweep"):
        run_sweep(other, out, workers=0, resume=True, quiet=True)
    assert {name: (out / name).read_bytes() for name in stored} == stored
    assert _same(run_sweep(first, out, workers=0, resume=True, quiet=True), rows)  # its own file resumes
    # the same sweep file over an edited base: every case had run anew beside the old ones, exit 0, "resumed"
    (tmp_path / "base.toml").write_text(BASE_TOML.replace("n = 12", "n = 13"))
    edited = load_sweep({"base": "base.toml", "grid": {"model.beta": [1.0, 2.0]}}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^--resume: the cases of .* resolve to other configs now \(2 of 2, e.g. case 0\)"):
        run_sweep(edited, out, workers=0, resume=True, quiet=True)
    assert {name: (out / name).read_bytes() for name in stored} == stored


def test_a_ledger_line_cut_by_a_kill_is_skipped_and_closed_off(tmp_path):
    _base(tmp_path)
    spec = load_sweep({"base": "base.toml", "grid": {"model.beta": [1.0, 2.0]}}, base_dir=tmp_path)
    out = tmp_path / "out"
    run_sweep(spec, out, workers=0, quiet=True)
    ledger = out / "ledger.jsonl"
    lines = ledger.read_text().splitlines()
    ledger.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # the second record was being written
    assert list(read_ledger(ledger)) == [spec.cases[0].hash]
    rows = run_sweep(spec, out, workers=0, resume=True, quiet=True)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    records = [json.loads(line) for line in ledger.read_text().splitlines() if line.startswith("{") and line.endswith("}")]
    assert [r["hash"] for r in records] == [c.hash for c in spec.cases]


def test_run_case_records_errors_instead_of_raising(tmp_path):
    cfg = load_config({"model": {"attention": "unnormalized", "beta": 1.0e4}, "init": {"n": 6}, "solver": {"t_final": 0.2}})
    with np.errstate(all="ignore"):
        record = run_case({"index": 0, "hash": "h", "params": {}, "config": cfg, "path": str(tmp_path / "c.h5"), "attempt": 1})
    assert record["status"] == "failed" and record["error"].startswith("RunFailed")


# --------------------------------------------------------------------------- Dask and kills
def test_a_bad_scheduler_address_is_bad_input(tmp_path):
    _base(tmp_path)
    spec = load_sweep({"base": "base.toml"}, base_dir=tmp_path)
    with pytest.raises(ConfigError) as info:
        run_sweep(spec, tmp_path / "out", scheduler="bogus://nowhere", quiet=True)
    assert info.value.key == "--scheduler"
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="--scheduler"):
        run_sweep(spec, tmp_path / "out", scheduler="tcp://127.0.0.1:8786", workers=2)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_an_interrupt_while_the_cluster_shuts_down_keeps_the_table_whole_and_frees_the_folder(tmp_path, monkeypatch):
    # the cluster had been closed before the last table write: an interrupt there left a finished case out of
    # results.csv and the folder's lock behind
    import logging

    from distributed import LocalCluster

    import meanfield.solvers.sweep as sweep_module

    _base(tmp_path)
    spec = load_sweep({"base": "base.toml", "cases": [{"model.beta": 1.0}, {"model.beta": 2.0}]}, base_dir=tmp_path)
    out = tmp_path / "out"
    original = sweep_module._Cluster.close  # noqa: SLF001

    def interrupted_close(self):
        original(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module._Cluster, "close", interrupted_close)  # noqa: SLF001
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.CRITICAL) as cluster:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(spec, out, scheduler=cluster.scheduler_address, quiet=True)
    assert len(_read_csv(out / "results.csv")) == 2 == len(read_ledger(out / "ledger.jsonl"))
    assert not list(out.glob("*.lock")) and not list(out.glob(".*.lock"))


def test_the_local_cluster_takes_no_fixed_port_runs_an_attempt_once_and_keeps_the_thread_cap(recwarn, monkeypatch):
    # dashboard_address=None still bound Dask's HTTP server to 8787, and printed "Port 8787 is already in use" on
    # stderr for every sweep while another held it (a second sweep, a notebook's Dask dashboard); a case that killed
    # its worker had run 4 times per sweep attempt (Dask's allowed-failures = 3), 8 times for "retried once"; and
    # --threads 1 / MEANFIELD_NUM_THREADS=1 had been ignored (each case took cores // workers threads)
    import socket
    import warnings

    from meanfield.solvers.sweep import _Cluster, _threads_per_worker

    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "1")  # as --threads 1 sets it

    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8787))
        holder.listen()
    except OSError:  # something else holds it already: the case under test all the same
        pass
    warnings.simplefilter("always")
    before, parent = dict(os.environ), os.getpid()
    try:
        cluster = _Cluster(scheduler=None, workers=1, cases=1)
        try:
            here = dict(os.environ)
            port = cluster.cluster.scheduler.http_server.port
            allowed_failures = cluster.cluster.scheduler.allowed_failures
            threads = _threads_per_worker(cluster.client, cluster.thread_cap)
            # (a lambda: the bound method os.environ.get is pickled with this process's environment, and answers from it)
            worker_env = cluster.client.run(lambda: os.environ.get("MEANFIELD_NUM_THREADS"))
            worker_blas = cluster.client.run(lambda: (os.environ.get("OMP_NUM_THREADS"), os.getpid() != parent))
        finally:
            cluster.close()
    finally:
        holder.close()
    assert port != 8787 and allowed_failures == 0
    assert list(threads.values()) == [1] and list(worker_env.values()) == ["1"]  # 1 worker on all cores: capped at 1
    # the workers' settings stay theirs: Dask's nanny had left OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_, … in this
    # process's environment, for every process it started later
    assert list(worker_blas.values()) == [("1", True)]
    assert here == before and dict(os.environ) == before
    assert not [w for w in recwarn if "8787" in str(w.message)]


def test_a_scheduler_without_workers_is_noted_and_waited_for(tmp_path, monkeypatch):
    # the sweep had sat at 0/N without a word while the scheduler had no workers (dask-jobqueue's come later)
    import logging

    from distributed import LocalCluster

    import meanfield.solvers.sweep as sweep_module

    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "1")  # the in-process worker sets the threads of this process
    _base(tmp_path)
    spec = load_sweep({"base": "base.toml", "set": {"init.n": 4, "solver.t_final": 0.1}}, base_dir=tmp_path)
    notes: list[str] = []
    real_note = sweep_module._note_no_workers
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None, silence_logs=logging.CRITICAL) as cluster:
        def note(address: str) -> None:
            notes.append(address)
            cluster.scale(1)  # the worker joins after the note, as a batch job's does

        monkeypatch.setattr(sweep_module, "_note_no_workers", note)
        rows = run_sweep(spec, tmp_path / "out", scheduler=cluster.scheduler_address, quiet=True)
    assert notes == [cluster.scheduler_address] and [r["status"] for r in rows] == ["ok"]
    with pytest.warns(ConfigNote, match=r"^the scheduler at tcp://node:8786 has no workers yet; the sweep waits for them"):
        real_note("tcp://node:8786")  # the note itself, which the command line prints as a note: line


def test_two_worker_local_cluster_records_the_failure_and_completes_the_rest(tmp_path):
    """Through --scheduler, on a running two-process LocalCluster (the --workers path runs in the SIGTERM test)."""
    import logging

    from distributed import LocalCluster

    _base(tmp_path)
    sweep = {"base": "base.toml", "cases": [{"model.beta": 1.0}, FAILING, {"model.beta": 2.0}, {"model.beta": 3.0}]}
    spec = load_sweep(sweep, base_dir=tmp_path)
    out = tmp_path / "out"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.CRITICAL) as cluster:
        worker = next(iter(cluster.scheduler_info["workers"]))
        with pytest.raises(ConfigError, match=r"^--scheduler: .* it is a Worker \(give the scheduler's address"):
            run_sweep(spec, out, scheduler=worker, quiet=True)  # a worker's address had been taken as a scheduler's
        assert not out.exists()
        rows = run_sweep(spec, out, scheduler=cluster.scheduler_address, quiet=True)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok", "ok"]
    assert rows[1]["attempts"] == 2 and rows[1]["error"].count("NaN/Inf") == 2
    records = read_ledger(out / "ledger.jsonl")
    assert len(records) == 4
    cores = len(os.sched_getaffinity(0))
    for record in records.values():
        assert record["pid"] != os.getpid()  # ran in a worker process
        assert record["worker"].startswith("tcp://")
        assert record["threads"] == max(1, cores // 2)  # 2 single-threaded workers share the cores
    assert len({r["pid"] for r in records.values()}) <= 2
    assert len(_read_csv(out / "results.csv")) == 4
    for case, row in zip(spec.cases, rows):
        if row["status"] == "ok":
            with h5py.File(out / "cases" / f"{case.hash}.h5", "r") as f:
                assert f.attrs["status"] == "completed" and f["t"].shape[0] == 5


def test_a_killed_sweep_resumes_and_runs_each_case_exactly_once(tmp_path, monkeypatch):
    base = _base(tmp_path)
    hook = _hook_module(tmp_path)
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(
        f'base = "{base.name}"\nresults = "{hook}:count"\n'
        '[set]\n"init.n" = 128\n"solver.t_final" = 8.0\n"solver.save_every" = 0.2\n"solver.dt" = 0.01\n'
        '[grid]\n"model.beta" = [1.0, 2.0, 3.0, 4.0]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the hook, for this process
    spec = load_sweep(sweep_file)
    out = tmp_path / "out"
    ledger = out / "ledger.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "meanfield", "sweep", str(sweep_file), "--out", str(out), "--workers", "0", "--quiet"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not (ledger.exists() and ledger.read_text().count("\n") >= 1):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    from meanfield.io.runfile import RunReader

    def running_case_frames() -> int:  # committed frames of a case that is not finished yet
        done = read_ledger(ledger)
        frames = 0
        for path in (out / "cases").glob("*.h5"):
            if path.stem not in done:
                try:
                    frames = max(frames, RunReader(path).frames)
                except (OSError, ValueError):
                    pass
        return frames

    while running_case_frames() < 2:  # into the next case, with frames on disk
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    before = read_ledger(ledger)
    assert 1 <= len(before) < len(spec.cases), "the kill must land mid-sweep"
    untouched = {h: (out / "cases" / f"{h}.h5").stat().st_mtime_ns for h in before}

    rows = run_sweep(sweep_file, out, workers=0, resume=True, quiet=True)

    assert [r["status"] for r in rows] == ["ok"] * 4
    executions = (out / "executions.log").read_text().split()
    assert sorted(executions) == sorted(c.hash for c in spec.cases)  # each case finished exactly once
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sorted(r["hash"] for r in lines) == sorted(c.hash for c in spec.cases)
    assert all(r["attempts"] == 1 for r in lines)
    for h, mtime in untouched.items():  # finished runs were not touched again
        assert (out / "cases" / f"{h}.h5").stat().st_mtime_ns == mtime
    assert all(r["frames"] == 41 and r["t_last"] == 8.0 for r in rows)
    resumed = [(c, r) for c, r in zip(spec.cases, rows) if r["resumed_frames"] > 0]
    # the killed case goes on from its committed frames: its file, still marked open by the killed writer, had been
    # read as empty and the case rerun from t = 0
    assert len(resumed) == 1 and resumed[0][1]["resumed_frames"] >= 2
    assert all(c.hash not in before for c, _ in resumed)
    for case, row in resumed:  # the interrupted run went on from its frames and ends where a fresh run ends
        from meanfield.solvers.run import simulate_config

        fresh = simulate_config(case.config, None, quiet=True)
        with h5py.File(out / row["path"], "r") as f:
            np.testing.assert_array_equal(f["x"][-1], fresh.final)  # bit for bit


def test_a_terminated_dask_sweep_resumes_without_running_anything_twice(tmp_path, monkeypatch):
    """SIGTERM stops the driver of a 2-worker sweep; runs that still finish on the workers are recovered."""
    base = _base(tmp_path)
    hook = _hook_module(tmp_path)
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(
        f'base = "{base.name}"\nresults = "{hook}:count"\n'
        '[set]\n"init.n" = 128\n"solver.t_final" = 4.0\n"solver.save_every" = 0.2\n"solver.dt" = 0.01\n'
        '[grid]\n"model.beta" = [1.0, 2.0, 3.0, 4.0, 5.0]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_sweep(sweep_file)
    out = tmp_path / "out"
    ledger = out / "ledger.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "meanfield", "sweep", str(sweep_file), "--out", str(out), "--workers", "2", "--quiet"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not (ledger.exists() and ledger.read_text().count("\n") >= 1):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err.decode()
    assert "--resume" in err.decode()
    assert len(read_ledger(ledger)) < len(spec.cases)

    rows = run_sweep(sweep_file, out, workers=0, resume=True, quiet=True)

    assert [r["status"] for r in rows] == ["ok"] * len(spec.cases)
    assert sorted((out / "executions.log").read_text().split()) == sorted(c.hash for c in spec.cases)
    hashes = [json.loads(line)["hash"] for line in ledger.read_text().splitlines()]
    assert sorted(hashes) == sorted(c.hash for c in spec.cases)  # one ledger record per case
    assert all(r["frames"] == 21 for r in rows)
    cores = len(os.sched_getaffinity(0))
    for line in ledger.read_text().splitlines():  # every case ran in a worker process of the local cluster
        record = json.loads(line)
        if record.get("recovered"):
            assert record["worker"].startswith("tcp://") and record["threads"] == max(1, cores // 2)


def test_a_case_running_elsewhere_is_waited_for_not_run_twice(tmp_path, monkeypatch):
    """Two executions of one case (a killed driver's task still running on a remote
    worker, and the resumed sweep's): the second waits for the first and takes its record."""
    import threading

    import meanfield.solvers.sweep as sweep_module
    from meanfield.config import config_hash, load_config

    cfg = load_config({"init": {"n": 16}, "solver": {"t_final": 0.2, "save_every": 0.1, "dt": 0.05}})
    digest = config_hash(cfg)
    task = {"index": 0, "hash": digest, "params": {}, "config": cfg, "path": str(tmp_path / "cases" / f"{digest}.h5"),
            "attempt": 1, "resume_partial": False, "results": None, "threads": None}
    calls = []
    real = sweep_module._simulate_case

    def slow_simulate(*args, **kwargs):
        calls.append(threading.get_ident())
        time.sleep(0.5)  # long enough for the other execution to find the lock
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "_simulate_case", slow_simulate)
    records = []
    threads = [threading.Thread(target=lambda: records.append(sweep_module.run_case(task))) for _ in range(2)]
    for th in threads:
        th.start()
        time.sleep(0.1)
    for th in threads:
        th.join(timeout=60)
    assert len(calls) == 1
    assert sorted(r["status"] for r in records) == ["ok", "ok"]
    assert sum(bool(r.get("recovered")) for r in records) == 1
    assert not (tmp_path / "cases" / f"{digest}.lock").exists()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, monkeypatch):
    import json as _json
    import socket

    from meanfield.solvers.sweep import CaseLock

    path = tmp_path / "case.h5"
    path.with_suffix(".lock").write_text(_json.dumps({"host": socket.gethostname(), "pid": 2**22 + 12345}))
    import meanfield.solvers.sweep as sweep_module

    def no_waiting(seconds: float) -> None:
        raise AssertionError(f"the lock of a dead process was waited on ({seconds} s) instead of taken over")

    monkeypatch.setattr(sweep_module.time, "sleep", no_waiting)
    with CaseLock(path):
        assert path.with_suffix(".lock").exists()
    monkeypatch.undo()
    assert not path.with_suffix(".lock").exists()


# --------------------------------------------------------------------------- Monte-Carlo paths
def test_g2_plateau_is_averaged_over_weight_seed_paths_per_head_count(tmp_path, capsys):
    """2 noise paths × 2 head counts of data/massucco_ou.toml: the table against the run files."""
    base = Path(__file__).resolve().parents[2] / "data" / "massucco_ou.toml"
    sweep = tmp_path / "paths.toml"
    sweep.write_text(
        f'base = "{base}"\n'
        '[set]\n"init.n" = 10\n"solver.t_final" = 0.1\n"solver.save_every" = 0.01\n'
        '[grid]\n"model.num_heads" = [1, 3]\n"weights.seed" = [7, 8]\n'
    )
    out = tmp_path / "out"
    assert cli_main(["sweep", str(sweep), "--out", str(out), "--workers", "0", "--quiet"]) == 0
    printed = capsys.readouterr().out
    # independent recomputation: the mean of diagnostics/authors_G2 over t >= T/2, per run file
    plateau: dict[int, list[float]] = {}
    for row in _read_csv(out / "results.csv"):
        with h5py.File(out / row["path"], "r") as f:
            t = f["t"][()]
            g2 = f["diagnostics/authors_G2"][()]
            heads = json.loads(f.attrs["config"])["model"]["num_heads"]
        assert len(t) == 11 and np.all(np.isfinite(g2)) and np.ptp(g2) > 0
        value = float(np.mean(g2[t >= 0.05 - 1e-12]))
        np.testing.assert_allclose(float(row["G2_plateau"]), value, rtol=1e-14)
        plateau.setdefault(heads, []).append(value)
    table = _read_csv(out / "aggregate.csv")
    assert [int(r["model.num_heads"]) for r in table] == [1, 3]
    assert "weights.seed" not in table[0]
    for r in table:
        values = np.array(plateau[int(r["model.num_heads"])])
        assert values.size == 2 and values[0] != values[1]  # two paths, two noises
        assert int(r["paths"]) == int(r["G2_plateau_paths"]) == 2
        np.testing.assert_allclose(float(r["G2_plateau_mean"]), values.mean(), rtol=1e-13)
        np.testing.assert_allclose(float(r["G2_plateau_std"]), abs(values[0] - values[1]) / 2, rtol=1e-10)
        assert f"model.num_heads={r['model.num_heads']}" in printed
        assert f"{float(r['G2_plateau_mean']):.6g}" in printed
    assert "mean ± std over the weights.seed paths" in printed


def test_aggregate_leaves_out_failed_cases_and_is_empty_without_paths():
    from meanfield.solvers.sweep import aggregate_paths

    rows = [
        {"model.beta": 1.0, "weights.seed": 0, "status": "ok", "G2_plateau": 2.0},
        {"model.beta": 1.0, "weights.seed": 1, "status": "failed", "G2_plateau": float("nan")},
        {"model.beta": 1.0, "weights.seed": 2, "status": "ok", "G2_plateau": 4.0},
    ]
    (entry,) = aggregate_paths(rows, ["model.beta", "weights.seed"])
    assert entry["paths"] == 3 and entry["G2_plateau_paths"] == 2
    assert entry["G2_plateau_mean"] == 3.0 and entry["G2_plateau_std"] == 1.0
    assert aggregate_paths(rows, ["model.beta"]) == []
    assert aggregate_paths([{"weights.seed": 0, "status": "ok"}], ["weights.seed"]) == []


def test_a_second_driver_on_one_folder_is_refused(tmp_path):
    # two sweeps on one --out had both exited 0, the tables holding one sweep's rows and sweep.json the other's
    from meanfield.io.lock import WriterLock

    _base(tmp_path)
    spec = load_sweep({"base": "base.toml", "grid": {"model.beta": [1.0, 2.0]}}, base_dir=tmp_path)
    out = tmp_path / "out"
    with WriterLock(out / "sweep.json", key="--out"):  # another driver at work on out
        with pytest.raises(ConfigError, match="being written by another meanfield process") as info:
            run_sweep(spec, out, workers=0, quiet=True)
    assert info.value.key == "--out" and sorted(p.name for p in out.iterdir()) == []
    rows = run_sweep(spec, out, workers=0, quiet=True)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    (out / "ledger.jsonl").unlink()  # as a sweep killed before its first case finished leaves it
    table = (out / "results.csv").read_text()
    with pytest.raises(ConfigError, match="already holds a sweep"):
        run_sweep(spec, out, workers=0, quiet=True)
    assert (out / "results.csv").read_text() == table  # a refusal touches nothing (it had emptied the table)
    assert len(run_sweep(spec, out, workers=0, resume=True, quiet=True)) == 2


def test_more_local_workers_than_the_cap_are_refused_before_any_work(tmp_path, capsys):
    # 100 000 had hung starting Dask worker processes, then ended in a traceback
    from meanfield.solvers.sweep import WORKERS_PER_CORE, _usable_cores, check_workers

    too_many = WORKERS_PER_CORE * _usable_cores() + 1
    with pytest.raises(ConfigError, match=r"--workers: .* local worker processes"):
        check_workers(too_many)
    check_workers(WORKERS_PER_CORE * _usable_cores())
    out = tmp_path / "phase"
    default = Path(__file__).resolve().parents[2] / "data" / "default.toml"
    assert cli_main(["phase", str(default), "-o", str(out), "--workers", str(too_many), "--quiet"]) == 2
    assert "error: --workers" in capsys.readouterr().err and not out.exists()


def test_a_folder_of_other_tables_is_refused_and_retry_failed_needs_resume(tmp_path, capsys):
    # a user's results.csv in --out had been replaced by the sweep's, and --retry-failed without --resume ignored
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f'base = "{_base(tmp_path)}"\n[grid]\n"model.beta" = [1.0, 2.0]\n')
    mine = tmp_path / "proj"
    mine.mkdir()
    (mine / "results.csv").write_text("my,data\n")
    assert cli_main(["sweep", str(sweep_file), "--out", str(mine), "--workers", "0", "--quiet"]) == 2
    assert "results.csv of something other than a sweep" in capsys.readouterr().err
    assert (mine / "results.csv").read_text() == "my,data\n" and sorted(p.name for p in mine.iterdir()) == ["results.csv"]
    (mine / "ledger.jsonl").write_text("not a sweep's\n")  # with --resume the table had been replaced, the ledger appended to
    assert cli_main(["sweep", str(sweep_file), "--out", str(mine), "--workers", "0", "--quiet", "--resume"]) == 2
    assert "error: --out" in (err := capsys.readouterr().err) and "--resume has no sweep to continue there" in err
    assert (mine / "results.csv").read_text() == "my,data\n" and (mine / "ledger.jsonl").read_text() == "not a sweep's\n"
    assert sorted(p.name for p in mine.iterdir()) == ["ledger.jsonl", "results.csv"]
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "o"), "--workers", "0", "--retry-failed"]) == 2
    assert "--retry-failed" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_resume_from_an_identical_copy_of_the_sweep_file_elsewhere(tmp_path):
    # the copy had been refused as "another sweep (it differs in source)"
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f'base = "{_base(tmp_path)}"\n[set]\n"init.n" = 4\n"solver.t_final" = 0.1\n')
    run_sweep(load_sweep(sweep_file), tmp_path / "out", workers=0, quiet=True)
    (tmp_path / "scratch").mkdir()
    copy = tmp_path / "scratch" / "s.toml"
    copy.write_text(sweep_file.read_text())
    rows = run_sweep(load_sweep(copy), tmp_path / "out", workers=0, quiet=True, resume=True)
    assert [r["status"] for r in rows] == ["ok"]


def test_resume_runs_again_an_ok_case_whose_run_file_was_deleted(tmp_path):
    # it had stayed ok, its row pointing to the missing file
    _base(tmp_path)
    spec = load_sweep({"base": "base.toml", "set": {"init.n": 4, "solver.t_final": 0.1}, "grid": {"model.beta": [1.0, 2.0]}},
                      base_dir=tmp_path)
    out = tmp_path / "out"
    rows = run_sweep(spec, out, workers=0, quiet=True)
    (out / rows[1]["path"]).unlink()
    again = run_sweep(spec, out, workers=0, quiet=True, resume=True)
    assert [r["status"] for r in again] == ["ok", "ok"] and (out / rows[1]["path"]).is_file()
    assert [r["wall_time"] for r in again][0] == rows[0]["wall_time"]  # the other case was not run again


def test_resume_into_a_folder_that_does_not_exist_says_it_starts_afresh(tmp_path, capsys):
    # a typo in --out had started the whole sweep there without a word (simulate --resume of a missing file notes it)
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f'base = "{_base(tmp_path)}"\n[set]\n"init.n" = 4\n"solver.t_final" = 0.1\n')
    out = tmp_path / "typo"
    assert cli_main(["sweep", str(sweep_file), "--out", str(out), "--workers", "0", "--quiet", "--resume"]) == 0
    assert f"note: {out} does not exist; nothing to resume, starting the sweep afresh" in capsys.readouterr().err
    assert cli_main(["sweep", str(sweep_file), "--out", str(out), "--workers", "0", "--quiet", "--resume"]) == 0
    assert "does not exist" not in capsys.readouterr().err


def test_case_paths_are_absolute_for_the_workers_and_read_from_any_folder(tmp_path, monkeypatch):
    # a relative --out had sent each worker its own folder's cases/ (a scheduler's workers start elsewhere), and a
    # resume from another folder had listed paths relative to the first one's
    from meanfield.solvers.sweep import _write_tables

    sweep = {"base": str(_base(tmp_path)), "grid": {"model.beta": [1.0, 2.0]}}
    monkeypatch.chdir(tmp_path)
    rows = run_sweep(sweep, "rel", workers=0, quiet=True)
    records = read_ledger(tmp_path / "rel" / "ledger.jsonl")
    assert all(Path(r["path"]).is_absolute() and Path(r["path"]).is_file() for r in records.values())
    ledger = tmp_path / "rel" / "ledger.jsonl"  # a record of an earlier version: the path relative to the first folder
    ledger.write_text("".join(json.dumps(r | {"path": f"rel/cases/{r['hash']}.h5"}) + "\n" for r in records.values()))
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    again = run_sweep(sweep, tmp_path / "rel", workers=0, quiet=True, resume=True)
    assert [r["path"] for r in again] == [r["path"] for r in rows] == [f"cases/{r['hash']}.h5" for r in rows]
    _write_tables(tmp_path, [], ["model.beta"])  # nothing finished yet: the header, which pandas and csv can read
    assert (tmp_path / "results.csv").read_text().startswith("case,hash,model.beta,status,")


def test_a_sweeps_window_length_is_none_where_w2_starts_below_the_threshold():
    # the concentration text says "no window" there (a longer run cannot give it a start); the sweep had reported the
    # whole run as its length
    from meanfield.solvers.sweep import _concentration_scalars

    t = np.linspace(0.0, 5.0, 6)
    assert math.isnan(_concentration_scalars(t, np.array([1.0, 0.7, 0.6, 0.62, 0.65, 0.7]))["window_length"])
    assert _concentration_scalars(t, np.array([1.0, 0.4, 0.2, 0.5, 0.9, 1.0]))["window_length"] > 0


def test_a_note_of_several_cases_is_given_once_with_its_cases(tmp_path):
    # (found in review) a sweep over init.kind × seeds had printed the same note once per case, without naming it
    from meanfield.errors import ConfigNote

    sweep = tmp_path / "sweep.toml"
    sweep.write_text('base = {init = {kind = "vmf", kappa = 8.0, n = 8}, solver = {t_final = 0.1}}\n'
                     '[grid]\n"init.kind" = ["vmf", "uniform"]\n"init.seed" = [0, 1, 2, 3]\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_sweep(sweep)
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote)]
    assert notes == ["init.kappa not used by init.kind = 'uniform'; ignored (cases 4–7)"]
    assert len(spec.cases) == 8
    sweep.write_text('base = {init = {kind = "uniform", kappa = 8.0, n = 8}, solver = {t_final = 0.1}}\n'
                     '[grid]\n"init.seed" = [0, 1]\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_sweep(sweep)
    assert [str(w.message) for w in caught if issubclass(w.category, ConfigNote)] == [
        "init.kappa not used by init.kind = 'uniform'; ignored (every case)"]


@pytest.mark.parametrize(
    "fixed, key",
    [
        ({"solver.kind": "grid", "grid.cells": 100, "init.kind": "function", "init.expr": "-1"}, "init.expr"),
        ({"init.kind": "fibonacci", "init.n": 3}, "init.n"),
        ({"weights.schedule": "relaxation", "weights.target": [["(-1)**t", 0, 0], [0, 1, 0], [0, 0, 1]]}, "weights.target"),
        ({"weights.schedule": "oscillating", "weights.amplitude": 1e300}, "weights.amplitude"),
    ],
)
def test_a_case_that_only_its_run_refuses_is_refused_before_the_folder(tmp_path, capsys, fixed, key):
    """(The sweep had written its folder, then failed every case, exit 1, where simulate exits 2.)"""
    _base(tmp_path)
    sweep_file = tmp_path / "s.toml"
    lines = [f'"{k}" = {_toml_value(v, k)}' for k, v in fixed.items()]
    sweep_file.write_text('base = "base.toml"\n[set]\n' + "\n".join(lines) + '\n[grid]\n"model.beta" = [1.0, 2.0]\n')
    assert cli_main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--workers", "0", "--quiet"]) == 2
    assert f"error: {key}:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
