"""``meanfield bench --compare``: every implementation is checked against the float64 NumPy twin before it is timed."""
from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.solvers import bench_compare


def test_meanfield_rows_agree_with_the_twin_and_set_the_unit_ratio():
    rows = bench_compare.compare_frameworks(((96, 3), (40, 7), (48, 12)), rounds=1, min_time=0.0, frameworks=[])
    assert {(r["n"], r["d"]) for r in rows} == {(96, 3), (40, 7), (48, 12)}
    # above d = 8 a non-symmetric B is timed too, checked against its own twin
    assert {r["precision"] for r in rows if r["implementation"] == "meanfield, B not symmetric"} == {"float64", "float32"}
    for r in rows:
        assert r["agrees"], r
        bound = bench_compare.F64_AGREEMENT if r["precision"] == "float64" else bench_compare.F32_AGREEMENT
        assert r["error"] <= bound
        if r["implementation"] == "meanfield":
            np.testing.assert_allclose(r["ratio"], 1.0, rtol=0, atol=0)
        assert r["seconds"] > 0 and np.isfinite(r["ratio"])


def test_an_implementation_that_disagrees_is_not_timed(monkeypatch):
    monkeypatch.setattr(bench_compare, "F32_AGREEMENT", 1e-12)  # float32 cannot meet a float64 bound
    rows = bench_compare.compare_frameworks(((64, 3),), rounds=1, min_time=0.0, frameworks=[])
    f32 = [r for r in rows if r["precision"] == "float32"]
    assert f32 and all(not r["agrees"] and np.isnan(r["seconds"]) and np.isnan(r["ratio"]) for r in f32)
    assert "not timed: disagrees" in bench_compare.format_comparison(rows)


def test_unknown_or_missing_framework_is_refused():
    with pytest.raises(ValueError, match="unknown framework"):
        bench_compare.compare_frameworks(((8, 3),), frameworks=["keops"])
    for name in ("torch", "jax"):
        if importlib.util.find_spec(name) is None:
            with pytest.raises(ValueError, match="not installed"):
                bench_compare.compare_frameworks(((8, 3),), frameworks=[name])


def test_blas_is_reported():
    import numpy  # noqa: F401 - loads the BLAS threadpoolctl reports

    info = bench_compare.blas_info()
    assert info and all("internal_api" in lib for lib in info)


def test_time_split_parts_and_shares():
    # the large-d table: the three parts of the row-block path, their shares, and np.exp beside the kernel's exp
    from meanfield.solvers.bench import bench_time_split

    row = bench_time_split(256, 16, rounds=1)
    assert row["name"] == "time_split" and (row["n"], row["d"]) == (256, 16)
    parts = [row["score_gemm_s"], row["exp_s"], row["value_gemm_s"]]
    assert all(p > 0 for p in parts) and row["kernel_s"] > 0 and row["numpy_exp_s"] > 0 and row["numba_exp_s"] > 0
    from meanfield.kernels.blas import NUMPY_EXP64

    assert row["exp_path"] == ("numpy" if NUMPY_EXP64 else "numba")
    np.testing.assert_allclose(row["parts_s"], sum(parts), rtol=1e-12)
    np.testing.assert_allclose(row["score_share"] + row["exp_share"] + row["value_share"], 1.0, rtol=1e-12)


def test_run_step_row_relates_a_frame_to_the_kernel_calls_it_holds():
    # the run table at large d: a frame of RK4 steps with the default trackers over steps x 4 bare kernel calls
    from meanfield.solvers.bench import bench_run_step

    row = bench_run_step(96, d=40, dt=0.05, save_every=0.1, rounds=1)
    assert row["name"] == "run_step_over_kernel" and (row["n"], row["d"], row["steps_per_frame"]) == (96, 40, 2)
    assert row["kernel_s"] > 0 and row["frame_s"] > row["trackers_s"] > 0
    np.testing.assert_allclose(row["step_over_kernel_stages"], row["frame_s"] / (2 * 4 * row["kernel_s"]), rtol=1e-12)
    np.testing.assert_allclose(row["tracker_calls"], row["trackers_s"] / row["kernel_s"], rtol=1e-12)


def test_compare_cases_from_the_command_line(capsys, monkeypatch):
    from meanfield.cli import main
    from meanfield.cli.bench import parse_cases

    assert parse_cases("4096:32, 1024:384") == ((4096, 32), (1024, 384))
    for bad in ("64", "64:x", "1:3", "64:1", "64:3,"):
        with pytest.raises(ConfigError) as info:
            parse_cases(bad)
        assert info.value.key == "--cases"
    assert main(["bench", "--cases", "64:3"]) == 2  # only with --compare
    assert "--cases" in capsys.readouterr().err
    seen = []
    monkeypatch.setattr(bench_compare, "compare_frameworks", lambda cases, rounds=3, _real=bench_compare.compare_frameworks: seen.append((cases, rounds)) or _real(cases, rounds=1, min_time=0.0, frameworks=[]))
    assert main(["bench", "--compare", "--cases", "48:3,40:12", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["compare"]
    assert seen == [(((48, 3), (40, 12)), 3)]
    assert {(r["n"], r["d"]) for r in rows} == {(48, 3), (40, 12)} and all(r["agrees"] for r in rows)
    assert main(["bench", "--compare", "--cases", "48:3", "--rounds", "7", "--json"]) == 0
    capsys.readouterr()
    assert seen[-1] == (((48, 3),), 7)
    for argv in (["bench", "--rounds", "5"], ["bench", "--compare", "--rounds", "0"]):
        assert main(argv) == 2  # only with --compare, and at least one round
        assert "--rounds" in capsys.readouterr().err


def test_bench_attention_checks_each_kernel_against_the_twin_before_timing_it(monkeypatch):
    # the attention table had timed B = I (the BLAS kernel's symmetric path, half the work) and never looked at the
    # kernels' results; a wrong kernel must not get a speed-up
    import meanfield.solvers.bench as bench

    head = bench.bench_head(5)
    B = head.B[0]
    np.testing.assert_allclose(B @ B.T, np.eye(5), atol=1e-14)  # orthogonal: ‖B‖₂ = 1, as for B = I
    assert np.abs(B - B.T).max() > 0.1  # and not symmetric
    (row,) = bench.bench_attention((96,), (3,), twin_max_work=0, numba_max_work=0)
    assert row["kernel_error"] < 1e-13 and row["fused_error"] < 1e-13 and row["float32_error"] < 1e-5
    assert row["head"].startswith("B orthogonal") and row["beta"] == 4.0 and row["roofline_s"] > 0
    monkeypatch.setattr(bench, "velocity_fused", lambda x, heads, beta: np.zeros_like(x))
    (row,) = bench.bench_attention((96,), (3,), twin_max_work=0, numba_max_work=0)
    assert row["not_timed"].startswith("disagrees with the NumPy twin: fused (") and math.isnan(row["fused_s"])


def test_bench_rounds_apply_with_compare_only(capsys):
    from meanfield.cli import main

    assert main(["bench", "--rounds", "3"]) == 2  # the default value had slipped through
    assert "--rounds: only applies with --compare" in capsys.readouterr().err


def test_a_kernel_that_disagrees_is_left_untimed_and_the_rest_printed(capsys, monkeypatch):
    # (found in review) a kernel past the tolerance had stopped the bench on a RuntimeError: a traceback, exit 1 and
    # every table lost; the generic tables had put a row's values under the wrong headers where it lacked a key
    import meanfield.solvers.bench as bench
    from meanfield.cli import main

    real = bench.velocity_fused32
    monkeypatch.setattr(bench, "velocity_fused32", lambda x, h, beta: real(x, h, beta=beta) * (1 + 1e-4))
    rows = bench.bench_attention((64,), (3,))
    assert "fused float32" in rows[0]["not_timed"] and math.isnan(rows[0]["fused32_s"])
    assert math.isfinite(rows[0]["kernel_s"]) and math.isfinite(rows[0]["fused_s"])
    monkeypatch.setattr(bench, "run_benchmarks", lambda quick: {"attention": rows, "sphere": [],
                                                                 "transport": [{"name": "a", "n": 200, "seconds": 1.5},
                                                                               {"name": "b", "n": 3, "value": 0.25}]})
    assert main(["bench"]) == 1
    out, err = capsys.readouterr()
    assert "not timed, n = 64, d = 3: disagrees with the NumPy twin: fused float32" in err
    lines = out.splitlines()
    row_line = next(line for line in lines if line.split()[:2] == ["64", "3"])
    assert "nan" not in row_line and " - " in row_line  # the fused float32 columns "-", as in the other tables
    table = lines[lines.index("transport") + 1:]
    header = table[0]
    assert table[2].index("0.25") + 4 == header.index("value") + 5  # under its own header, right-aligned
    assert table[1].split()[3] == "-" and table[2].split()[2] == "-"


def test_torch_s_memory_guard_applies_where_torch_runs():
    # (found in review) --cases 32768:3 had been refused for torch's N² scores with torch not installed
    from meanfield.cli.bench import check_torch_memory

    check_torch_memory(((32768, 3),), [])
    check_torch_memory(((32768, 3),), ["jax"])
    with pytest.raises(ConfigError, match="torch's N² scores"):
        check_torch_memory(((10**6, 3),), ["torch"])


def test_a_framework_that_fails_to_import_is_left_out_and_a_caller_s_trace_is_kept(tmp_path, monkeypatch):
    # (found in review) an installed torch whose import failed had stopped bench --compare with a traceback; with
    # tracing already on, the peaks had counted every earlier allocation (392 MiB for a call of 1 MiB), and bench had
    # stopped the caller's trace
    import sys
    import tracemalloc

    from meanfield.solvers.timing import peak_memory

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('a broken build')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with pytest.warns(RuntimeWarning, match=r"torch is installed but does not import \(ImportError: a broken build\)"):
        assert "torch" not in bench_compare.available_frameworks()
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    tracemalloc.start()
    try:
        kept = np.ones(4_000_000)  # 32 MB traced before the call
        peak = peak_memory(lambda: np.ones(250_000))  # 2 MB
        assert tracemalloc.is_tracing() and kept.size
        assert 1.9e6 < peak < 4e6, peak
    finally:
        tracemalloc.stop()


def test_the_attention_row_is_timed_in_rotating_rounds(monkeypatch):
    # (found in review) the kernels, the roofline and the twin had been timed one after another: on a loaded machine
    # the same roofline read 0.0066 s and 0.0034 s in one run (blas/roof 0.76)
    import meanfield.solvers.bench as bench

    order = []
    times = bench._interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3, min_time=1e-9)
    assert order == ["a", "b"] * 4 and set(times) == {"a", "b"}  # a warm-up, then three rounds in turn
    seen = {}

    def fixed(funcs, rounds, **_):
        seen.update(funcs)
        return {name: {"blas": 2.0, "f32": 1.0, "roof": 4.0, "fused": 0.5, "fused32": 0.25, "twin": 8.0, "numba": 3.0}[name]
                for name in funcs}

    monkeypatch.setattr(bench, "_interleaved", fixed)
    (row,) = bench.bench_attention((48,), (3,))
    assert set(seen) == {"blas", "f32", "roof", "fused", "fused32", "twin", "numba"}  # one rotation for the whole row
    assert (row["kernel_over_roofline"], row["float32_over_roofline"], row["speedup_vs_twin"]) == (0.5, 0.25, 4.0)
    assert (row["fused_speedup_vs_twin"], row["fused64_over_fused32"], row["numba_over_kernel"]) == (16.0, 2.0, 1.5)
