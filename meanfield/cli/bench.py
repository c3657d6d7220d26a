"""``meanfield bench [--json] [--quick]``: kernel throughput next to the NumPy twin and the exp roofline."""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from meanfield.cli.options import dump_json
from meanfield.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="kernel throughput, with ratios to the NumPy twin and to the exp roofline",
        description="Measure, in one process, the attention kernels against their NumPy twin and the exp roofline "
        "(pairs per second and peak memory), the harmonic and local sphere kernels against the dense one, grid steps, and the optimal-transport diagnostics. Ratios are "
        "measured in the same run; absolute numbers depend on the machine and its load.",
    )
    p.add_argument("--json", action="store_true", help="print the tables as JSON")
    p.add_argument("--quick", action="store_true", help="smaller sizes (dense kernels up to n = 4096; sphere kernels and grids up to 16 384 points, fewer sizes)")
    p.add_argument("--compare", action="store_true",
                   help="instead: the softmax velocity against torch and JAX where installed (results checked against the "
                        "NumPy twin first, timed in rotating rounds on the same threads), as t_other / t_meanfield")
    p.add_argument("--cases", metavar="N:D,…", help="with --compare: the token counts and dimensions to compare, e.g. 4096:32,1024:384 "
                   "(default: 4096:3,16384:3,4096:64,1024:64; --quick: 1024:3,1024:64)")
    p.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="with --compare: rotating rounds, the best time of each implementation kept (default 3; more "
                        "rounds give every implementation more chances at a quiet moment on a shared machine)")
    p.set_defaults(func=main)


def parse_cases(text: str) -> tuple[tuple[int, int], ...]:
    """``"N:D,N:D,…"`` as ``((N, D), …)``: each N ≥ 2 and D ≥ 2 (else a :class:`ConfigError` naming ``--cases``)."""
    cases = []
    for item in (part.strip() for part in text.split(",")):
        n, sep, d = item.partition(":")
        try:
            case = (int(n), int(d))
        except ValueError:
            raise ConfigError("--cases", f"expected N:D pairs such as 4096:32,1024:384, got {text!r}") from None
        if not sep or case[0] < 2 or case[1] < 2:
            raise ConfigError("--cases", f"each case needs N ≥ 2 tokens and dimension D ≥ 2, got {item!r}")
        if case[0] > COMPARE_MAX_N or case[1] > COMPARE_MAX_D:
            raise ConfigError("--cases", f"{item!r} is too large to compare: at most N = {COMPARE_MAX_N} tokens (torch's matmul+softmax "
                                         f"holds N² scores) and D = {COMPARE_MAX_D}")
        cases.append(case)
    return tuple(cases)


def check_torch_memory(cases: tuple[tuple[int, int], ...], frameworks: Any) -> None:
    """Refuse a case whose N² float64 scores (and their softmax) torch's matmul+softmax would hold past half the memory
    available, where torch is among ``frameworks`` (the check had been made without torch installed, where nothing
    holds N² scores, and not on the default cases)."""
    if "torch" not in frameworks:
        return
    from meanfield.resources import available_memory, format_bytes

    for n, d in cases:
        need = 16 * n**2
        if need > available_memory() // 2:
            raise ConfigError("--cases", f"'{n}:{d}' needs about {format_bytes(need)} for torch's N² scores, more than half of "
                                         f"the {format_bytes(available_memory())} available")


#: the largest case of ``--compare --cases`` (the N² alternatives take minutes a call beyond)
COMPARE_MAX_N = 32768
COMPARE_MAX_D = 4096


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}"
    return str(value)


def _print_attention(rows: list[dict[str, Any]]) -> None:
    from meanfield.kernels.blas import NUMPY_EXP64

    beta = rows[0].get("beta", 4.0) if rows else 4.0
    exp = "NumPy's vectorised exp (AVX-512)" if NUMPY_EXP64 else "the kernels' exp_block64 (NumPy's exp is scalar here)"
    print(f"softmax velocity, one general head ({rows[0]['head'] if rows else ''}), β = {beta:g}: pairs/s (higher is "
          "better), measured in this run.\n"
          "twin/X: speed-up over the NumPy twin, which runs on one thread (t_twin / t_X; the kernels on the threads above); X/roof: time over the exp roofline's (t_X / t_roof; "
          f"roofline: n² exp by {exp});\n"
          "f64/f32: fused float64 time over fused float32 time; blas peak: the largest of three float64 BLAS calls (tracemalloc;\n"
          "each thread makes its block buffer when it takes a block: a loaded machine may show fewer); "
          "err: largest difference to the twin's velocity over max |v| (f64 kernels, f32 kernels)")
    header = (f"{'n':>6} {'d':>3} {'blas':>9} {'float32':>9} {'fused':>9} {'fused f32':>9} {'numpy twin':>10} {'numba':>9} {'roofline':>9} "
              f"{'twin/blas':>9} {'twin/fused':>10} {'f64/f32':>7} {'blas/roof':>9} {'f32/roof':>8} {'fused/roof':>10} "
              f"{'blas peak MiB':>13} {'n² MiB':>8} {'err f64':>8} {'err f32':>8}")
    print(header)
    nan = float("nan")
    for r in rows:
        err64 = max((r[k] for k in ("kernel_error", "fused_error", "numba_error") if k in r), default=nan)
        err32 = max((r[k] for k in ("float32_error", "fused32_error") if k in r), default=nan)
        cells = [(r.get("kernel_pairs_per_s", nan), 9, ".3g"), (r.get("float32_pairs_per_s", nan), 9, ".3g"),
                 (r.get("fused_pairs_per_s", nan), 9, ".3g"), (r.get("fused32_pairs_per_s", nan), 9, ".3g"),
                 (r.get("twin_pairs_per_s", nan), 10, ".3g"), (r.get("numba_pairs_per_s", nan), 9, ".3g"),
                 (r["roofline_pairs_per_s"], 9, ".3g"), (r.get("speedup_vs_twin", nan), 9, ".2f"),
                 (r.get("fused_speedup_vs_twin", nan), 10, ".2f"), (r.get("fused64_over_fused32", nan), 7, ".2f"),
                 (r.get("kernel_over_roofline", nan), 9, ".2f"), (r.get("float32_over_roofline", nan), 8, ".2f"),
                 (r.get("fused_over_roofline", nan), 10, ".2f"), (r.get("peak_mib", nan), 13, ".2f"), (r["nxn_mib"], 8, ".0f"),
                 (err64, 8, ".1e"), (err32, 8, ".1e")]
        # "-" for what was not measured, as in the other tables (it had printed "nan")
        print(f"{r['n']:>6} {r['d']:>3} " + " ".join(("-" if math.isnan(v) else format(v, spec)).rjust(w) for v, w, spec in cells))


def _print_table(name: str, rows: list[dict[str, Any]]) -> None:
    """A generic table in fixed-width columns, "-" where a row has no such entry (its cells had been joined by two
    spaces, so that a row missing a key put its values under the next headers)."""
    print(f"\n{name}")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_fmt(r[k]) if k in r else "-" for k in keys] for r in rows]
    widths = [max([len(k)] + [len(row[i]) for row in cells]) for i, k in enumerate(keys)]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def _compare(args: argparse.Namespace, cases: tuple[tuple[int, int], ...] | None) -> int:
    from meanfield.solvers.bench_compare import COMPARE_CASES, available_frameworks, compare_environment, compare_frameworks, format_comparison

    if cases is None:
        cases = ((1024, 3), (1024, 64)) if args.quick else COMPARE_CASES
    check_torch_memory(cases, available_frameworks())  # (before any timing)
    rows = compare_frameworks(cases, rounds=args.rounds)
    environment = compare_environment()
    if args.json:
        print(dump_json({"environment": environment, "compare": rows}, indent=2))
        print()
        return 0
    missing = [name for name in ("torch", "jax") if name not in available_frameworks()]
    print(f"softmax velocity, one head, {environment['threads']} thread(s); ratios t_other / t_meanfield in the same precision "
          "(above 1: meanfield is faster), measured in this run")
    _print_blas(environment["blas"])
    if missing:
        print(f"not installed, so not compared: {', '.join(missing)} (pip install {' '.join(missing)})")
    print(format_comparison(rows))
    return 0


def _print_blas(libraries: list[dict]) -> None:
    """The BLAS NumPy runs on (what the absolute numbers depend on); its default threads are not what the kernels use."""
    from meanfield.kernels.jit import num_threads

    for lib in libraries:
        print(f"BLAS: {lib['internal_api']} {lib['version']} ({lib['architecture']} kernels; its default {lib['num_threads']} "
              f"thread(s), held to one inside meanfield's kernels, which run on {num_threads()})")


def main(args: argparse.Namespace) -> int:
    from meanfield.solvers.bench import run_benchmarks

    if args.cases is not None and not args.compare:
        raise ConfigError("--cases", "only applies with --compare")
    if args.rounds is not None and not args.compare:
        raise ConfigError("--rounds", "only applies with --compare")
    args.rounds = 3 if args.rounds is None else args.rounds
    if args.rounds < 1:
        raise ConfigError("--rounds", f"needs at least one round, got {args.rounds}")
    if args.compare:
        return _compare(args, parse_cases(args.cases) if args.cases is not None else None)  # a bad case fails before any timing

    tables = run_benchmarks(quick=args.quick)
    from meanfield.solvers.bench_compare import blas_info

    wrong = [f"n = {r['n']}, d = {r['d']}: {r['not_timed']}" for r in tables["attention"] if "not_timed" in r]
    if args.json:
        print(dump_json({**tables, "blas": blas_info()}, indent=2))
        print()
        return _disagreement(wrong)
    from meanfield.solvers.bench_sphere import format_table

    _print_blas(blas_info())

    _print_attention(tables["attention"])
    print("\nsphere kernels (d = 3, one general head): harmonic and local against the dense fused kernel,"
          " errors relative to max |v| on sampled rows")
    print(format_table(tables["sphere"]))
    for name, rows in tables.items():
        if name not in ("attention", "sphere"):
            _print_table(name, rows)
    return _disagreement(wrong)


def _disagreement(wrong: list[str]) -> int:
    """Exit status 1 where a kernel disagreed with the NumPy twin (it was left out of the timings, every other table
    printed: the bench had stopped there on a traceback, its tables lost), 0 otherwise."""
    for line in wrong:
        print(f"meanfield bench: not timed, {line}", file=sys.stderr)
    return 1 if wrong else 0
