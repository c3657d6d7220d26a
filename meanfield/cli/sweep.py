"""``meanfield sweep SWEEP.toml --out DIR [--scheduler ADDR] [--workers N] [--resume] [--retry-failed] [--dry-run] [--quiet]``.

Runs every case of a sweep (a base config plus a ``[grid]`` and/or
``[[cases]]`` of overrides; see :mod:`meanfield.solvers.sweep`) on a local Dask cluster
of processes, or on the running cluster at ``--scheduler``.  Writes
``DIR/cases/<hash>.h5``, ``DIR/ledger.jsonl`` and ``DIR/results.csv``; when
``weights.seed`` is swept (Monte-Carlo paths of the weights' noise), also
``DIR/aggregate.csv`` and a printed table of the G² plateau, mean ± std over the
paths per value of the other swept keys.

Exit status: 0 when every case succeeded, 1 when some case failed (after its
retry; the others still ran and are in the table) or the sweep was
interrupted (``--resume`` continues it), 2 for bad input.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "main"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="run a parameter sweep on Dask; writes DIR/results.csv",
        description="Run every case of a sweep (a base config plus a [grid] and/or [[cases]] of overrides) on a local "
        "Dask cluster of processes, or on the running cluster at --scheduler. Writes DIR/cases/<hash>.h5, "
        "DIR/ledger.jsonl and DIR/results.csv. Exit status 0 when every case succeeded, 1 when some case failed "
        "(after its retry; the others still ran and are in the table) or the sweep was interrupted (--resume "
        "continues it), 2 for bad input.",
    )
    _arguments(p)
    p.set_defaults(func=main, interrupted="interrupted; finished cases are in the ledger, --resume continues")


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", metavar="SWEEP.toml", help="sweep file (TOML): base, [set], [grid] and/or [[cases]]")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (cases/, ledger.jsonl, results.csv)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="address of a running Dask scheduler, e.g. tcp://node01:8786")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: one per core; 0: run in this process)")
    p.add_argument("--resume", action="store_true", help="continue the sweep in DIR, skipping finished cases")
    p.add_argument("--retry-failed", action="store_true", help="with --resume, run the failed cases again")
    p.add_argument("--dry-run", action="store_true", help="resolve and list the cases, run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _print_aggregate(table: list[dict[str, Any]], where: str) -> None:
    """The plateaus over the Monte-Carlo paths (``weights.seed``), mean ± std per group, one line each."""
    print(f"plateau over t >= T/2, mean ± std over the weights.seed paths (also in {where}):")
    for entry in table:
        keys = ", ".join(f"{k}={v}" for k, v in entry.items() if "." in k)
        stats = "  ".join(
            f"{name}: {entry[f'{name}_mean']:.6g} ± {entry[f'{name}_std']:.3g} ({entry[f'{name}_paths']} paths)"
            for name in ("G2_plateau", "slope2_plateau") if f"{name}_mean" in entry
        )
        print(f"  {keys or '(all cases)'}  {stats}")


def main(args: argparse.Namespace) -> int:
    from meanfield.io.output import folder_path
    from meanfield.errors import ConfigError

    from meanfield.solvers.sweep import aggregate_paths, check_out, check_scheduler, check_workers, load_sweep, run_sweep

    if args.scheduler is not None:
        check_scheduler(args.scheduler)
    folder_path(args.out, "--out")
    if args.retry_failed and not args.resume:
        raise ConfigError("--retry-failed", "runs the failed cases of a sweep again: give it with --resume")
    spec = load_sweep(args.sweep)  # ConfigError (exit 2) before any work
    if args.dry_run:  # what the run would refuse before any work, a dry run refuses too (it had listed the cases, exit 0)
        check_workers(args.workers, args.scheduler)
        check_out(spec, args.out, resume=args.resume)
        for case in spec.cases:
            params = ", ".join(f"{k}={v!r}" for k, v in case.params.items())
            print(f"{case.index}\t{case.hash}\t{params}")
        print(f"{len(spec.cases)} cases")
        return 0
    rows = run_sweep(  # SIGTERM ends it as Ctrl-C does (the command line's handler): the cluster shuts down cleanly
        spec,
        args.out,
        scheduler=args.scheduler,
        workers=args.workers,
        resume=args.resume,
        quiet=args.quiet,
        retry_failed=args.retry_failed,
    )
    failed = [row for row in rows if row["status"] != "ok"]
    print(f"sweep: {len(rows)} cases, {len(rows) - len(failed)} ok, {len(failed)} failed; results in {args.out}/results.csv")
    table = aggregate_paths(rows, spec.parameters)
    if table:
        _print_aggregate(table, f"{args.out}/aggregate.csv")
    for row in failed:
        print(f"  case {row['case']} ({row['hash']}): {row['error']}", file=sys.stderr)
    sys.stdout.flush()
    return 1 if failed else 0
