"""``meanfield bench [--json] [--quick]``: kernel throughput next to the NumPy twin and the exp roofline."""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="kernel throughput, with ratios to the NumPy twin and to the exp roofline", description=__doc__)
    p.add_argument("--json", action="store_true", help="print the tables as JSON")
    p.add_argument("--quick", action="store_true", help="smaller sizes (n up to 4096, one grid size)")
    p.set_defaults(func=main)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}"
    return str(value)


def _print_attention(rows: list[dict[str, Any]]) -> None:
    print("softmax velocity, one head, pairs/s (higher is better); ratios measured in this run")
    header = f"{'n':>6} {'d':>3} {'kernel':>10} {'float32':>10} {'numpy twin':>10} {'numba':>10} {'roofline':>10} {'twin/kern':>9} {'kern/roof':>9} {'f32/roof':>8} {'peak MiB':>8} {'n² MiB':>8}"
    print(header)
    for r in rows:
        print(
            f"{r['n']:>6} {r['d']:>3} {r['kernel_pairs_per_s']:>10.3g} {r['float32_pairs_per_s']:>10.3g} "
            f"{r.get('twin_pairs_per_s', float('nan')):>10.3g} {r.get('numba_pairs_per_s', float('nan')):>10.3g} "
            f"{r['roofline_pairs_per_s']:>10.3g} {r.get('speedup_vs_twin', float('nan')):>9.2f} "
            f"{r['kernel_over_roofline']:>9.2f} {r['float32_over_roofline']:>8.2f} {r['peak_mib']:>8.2f} {r['nxn_mib']:>8.0f}"
        )


def _print_table(name: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{name}")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print("  ".join(keys))
    for r in rows:
        print("  ".join(_fmt(r.get(k, "")) for k in keys))


def main(args: argparse.Namespace) -> int:
    from solvers.bench import run_benchmarks

    tables = run_benchmarks(quick=args.quick)
    if args.json:
        json.dump(tables, sys.stdout, indent=2, default=float)
        print()
        return 0
    _print_attention(tables["attention"])
    for name, rows in tables.items():
        if name != "attention":
            _print_table(name, rows)
    return 0
