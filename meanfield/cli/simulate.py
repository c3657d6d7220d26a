"""``meanfield simulate CONFIG.toml -o OUT.h5``: solve one configuration and write its frames as they are saved."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from meanfield.cli.options import distinct_outputs, load_config_noted, picture_path
from meanfield.errors import ConfigError

__all__ = ["add_parser", "main"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="solve one configuration (particle, grid, JKO or zero-temperature)",
        description="Solve one configuration and append its frames to an HDF5 file as they are saved. "
        "A killed or interrupted run keeps every saved frame; --resume continues it (bit for bit the "
        "uninterrupted run). An existing OUT.h5 is never replaced unless --overwrite is given.",
    )
    p.add_argument("config", metavar="CONFIG.toml", help="the run's configuration")
    p.add_argument("-o", "--out", required=True, metavar="OUT.h5", help="HDF5 output file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set model.beta=9 (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue the run in OUT.h5 from its last saved frame")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT.h5")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--plot", metavar="F.png", help="also draw the run (a .gif, or a video such as .mp4 where ffmpeg is found, makes an animation)")
    # (before the run: a signal in the imports or the setup had been told "saved frames are kept" with no file written)
    p.set_defaults(func=main, interrupted=BEFORE_THE_RUN)


def main(args: argparse.Namespace) -> int:
    from meanfield.io.output import check_output
    from meanfield.io.runfile import file_stamp
    from meanfield.io.source_frame import DamagedSource, damaged_source_of
    from meanfield.solvers.run import simulate_config

    picture_path(args.plot, "--plot", animation=True)
    distinct_outputs(o=args.out, plot=args.plot)
    if args.resume and args.overwrite:
        raise ConfigError("--overwrite", "and --resume contradict each other: --resume continues OUT.h5, --overwrite replaces it")
    if args.config and os.path.exists(args.out) and os.path.exists(args.config) and os.path.samefile(args.out, args.config):
        raise ConfigError("-o", f"{args.out} is the config file itself; give the run its own file, such as run.h5")
    try:
        cfg = load_config_noted(args.config, args.overrides)
    except DamagedSource as exc:  # the source of the run to resume: restore it (--resume takes no other init.time)
        raise damaged_source_of(exc, args.out) if args.resume else exc from None
    check_output(args.out, overwrite=args.overwrite, resume=args.resume)
    before = file_stamp(args.out)  # (whether the run opened the file: what an interrupt left)
    try:
        run = simulate_config(cfg, args.out, resume=args.resume, quiet=args.quiet, overwrite=args.overwrite, out_key="-o")
    except KeyboardInterrupt:  # (a stop between steps is a RunInterrupted, with its own message)
        args.interrupted = interrupt_left(args.out, cfg, before=before, resume=args.resume)
        raise
    if run.info.get("already_complete"):
        print(nothing_to_resume(run, args.out))
        if args.plot:  # (a run interrupted while its picture was drawn had never got it, --resume neither)
            draw(run, args.plot)
            print(f"wrote {args.plot}")
        return 0
    steps = run.info.get("jko_steps", run.info.get("grid_steps", run.info.get("steps", "?")))
    unit = "JKO steps" if cfg["solver"]["kind"] == "jko" else "steps"
    print(f"wrote {args.out} ({run.frames} frame{'' if run.frames == 1 else 's'}, {steps} {unit}, {run.info.get('wall_time', float('nan')):.2f} s, "
          f"stop: {run.stop_reason})")
    if args.plot:
        draw(run, args.plot)
        print(f"wrote {args.plot}")
    sys.stdout.flush()
    return 0


def draw(run: object, path: str) -> None:
    """A picture of the run, or an animation when ``path`` names one (``.gif``, or a video such as ``.mp4``): the one
    dispatcher of ``--plot`` for ``simulate``, ``info`` and ``run``, on the suffixes
    :func:`~meanfield.cli.options.picture_path` accepts as animations (``F.mp4`` had passed that check, then gone to
    ``run.plot()`` and failed after the whole run)."""
    from pathlib import Path

    from meanfield.plotting.canvas import ANIMATION_FORMATS, VIDEO_FORMATS

    if Path(path).suffix.lower() in ANIMATION_FORMATS + VIDEO_FORMATS:
        run.animate(path)  # type: ignore[attr-defined]
    else:
        run.plot(path)  # type: ignore[attr-defined]


#: what ``simulate`` and ``run`` say of an interrupt before the run started (nothing of it is on disk; it had said
#: "before the first frame was saved" to a --resume of a file of many frames)
BEFORE_THE_RUN = "interrupted before the run started; nothing was written"


def interrupt_left(out: str, cfg: dict[str, Any], *, before: tuple[int, int, int] | None = None, resume: bool = False) -> str:
    """What a ``KeyboardInterrupt`` out of the run (in its setup, a second Ctrl-C, a signal after its last step) left in
    ``out``: this run's committed frames, or nothing of it (no file, or an older run's file left as it was).
    ``before``: :func:`~meanfield.io.runfile.file_stamp` of ``out`` before the run; a file the run never opened is an older run's, even of
    the same config, or with ``resume`` the frames it was to continue (Ctrl-C in the setup of an ``--overwrite`` run,
    or of an extending ``--resume``, had been told "after the run ended")."""
    import json

    from meanfield.io.runfile import RunReader, file_stamp

    def without_t_final(config: dict[str, Any]) -> str:  # (--resume may extend t_final: the same run)
        return json.dumps({**config, "solver": {k: v for k, v in config.get("solver", {}).items() if k != "t_final"}}, sort_keys=True)

    try:
        reader = RunReader(out, key="-o")
        frames, status, ours = reader.frames, reader.status, without_t_final(reader.config) == without_t_final(cfg)
    except (ConfigError, OSError, ValueError, KeyError):  # no file, none readable: nothing of this run
        return BEFORE_THE_RUN
    untouched = before is not None and file_stamp(out) == before
    saved = f"{frames} frame{'' if frames == 1 else 's'} saved in {out}"
    if untouched and resume and frames and ours:
        last, t_final = float(reader.times()[-1]), float(cfg["solver"]["t_final"])
        count = saved.split(" saved")[0]
        if status == "stopped":  # (a steady state, where the same config stops again)
            return f"interrupted before the run started; {out} stopped at t = {last:g} ({count}), nothing to resume"
        if status == "completed" and last >= t_final:
            return f"interrupted before the run started; {out} is complete ({count}), nothing to resume"
        return f"interrupted; {saved}, --resume continues"
    if not frames or not ours or untouched:
        return BEFORE_THE_RUN + (f" ({out} holds an older run, left as it was)" if frames else "")
    if status in ("completed", "stopped", "failed"):  # the signal came after the last step: the run ended first
        return f"interrupted after the run ended ({status}; {saved})"
    return f"interrupted; {saved}, --resume continues"


def nothing_to_resume(run: Any, out: str) -> str:
    """What ``--resume`` of a finished run says: complete up to t_final (a later one extends it), or stopped at its
    steady state, which the same config stops at again for any t_final (a smaller ``solver.steady_tol`` goes on, in a
    new run: a later t_final had been advised, and each such --resume had taken one more frame and stopped again)."""
    if run.status == "stopped":
        return (f"{out} stopped at t = {run.t[-1]:g} ({run.stop_reason}; {run.frames} frames), where the same config stops "
                f"again, whatever its solver.t_final; nothing to resume. {_past_steady_state(run, out)}")
    return (f"{out} is already complete up to t_final = {run.t[-1]:g} ({run.frames} frames); nothing to resume. Give a "
            "later solver.t_final (--set solver.t_final=...) to extend it.")


def _past_steady_state(run: Any, out: str) -> str:
    """How to go on past the steady state a run stopped at: a new run, with a smaller ``solver.steady_tol``, from its
    last frame where a run can start from a stored frame (``init.kind = "run"``: tokens saved in physical time)."""
    from pathlib import Path

    smaller = f"--set solver.steady_tol={float(run.config['solver']['steady_tol']) / 10:g}"
    if run.kind == "particle" and run.config["solver"].get("clock", "time") == "time":
        # the path absolute (init.path is read from the config's folder) and the time to every digit (it must match)
        return (f"To go on past it, start a new run from its last frame with a smaller solver.steady_tol (0: never stop): "
                f"--set init.kind=run --set init.path={Path(out).resolve()} --set init.time={float(run.t[-1])!r} {smaller} "
                "-o NEW.h5")
    return f"To go on past it, run it again with a smaller solver.steady_tol (0: never stop) in a new file: {smaller} -o NEW.h5"
