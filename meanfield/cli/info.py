"""``meanfield info OUT.h5``: what a run is and what happened in it; ``--plot`` draws it, ``--follow`` watches it."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from meanfield.cli.options import parse_float, picture_path
from meanfield.errors import ConfigError
from meanfield.io.signature import HDF5_SIGNATURE, file_head

__all__ = ["add_parser", "main", "follow"]

#: diagnostics printed on each frame line of ``--follow`` (those the run records)
FOLLOW_SERIES = ("energy", "max_speed", "w2_target", "mass_error", "jko_residual")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "info",
        help="summarise a run file (also one still being written)",
        description="Summarise a run file: its model, solver, frames, status, final clusters and the main "
        "diagnostics. It reads a file that is still being written (the frames committed so far). --plot draws "
        "it (a .gif path, or a video such as .mp4 where matplotlib finds ffmpeg, makes an animation); --follow prints each new frame as it arrives, until the run ends.",
    )
    p.add_argument("run", metavar="OUT.h5", help="HDF5 run file")
    p.add_argument("--plot", metavar="F.png", help="also draw the run (a .gif path, or a video such as .mp4 where matplotlib finds ffmpeg, makes an animation)")
    p.add_argument("--follow", action="store_true", help="print each new frame as it is committed, until the run ends (a name that no file or run holds yet is "
                   f"waited for {START_GRACE_SECONDS:g} s: a run started at the same time)")
    p.add_argument("--check", action="store_true",
                   help="read every frame and check it against the checksum written with it (without it only the last "
                   "frame is read); damaged frames are named and the exit status is 2")
    p.add_argument("--interval", default="1", metavar="S", help="--follow: seconds between looks (default 1)")
    p.set_defaults(func=main)


def _frame_line(k: int, t: float, diagnostics: dict) -> str:
    parts = [f"frame {k:5d}  t = {t:.6g}"]
    for key in FOLLOW_SERIES:
        series = diagnostics.get(key)
        if series is not None and k < len(series) and math.isfinite(series[k]):
            parts.append(f"{key} = {series[k]:.6g}")
        elif key == "energy" and series is not None and k < len(series):  # past the floats: its log (β ≳ 709)
            logs = diagnostics.get("log_energy")
            if logs is not None and k < len(logs) and math.isfinite(logs[k]):
                parts.append(f"log_energy = {logs[k]:.12g}")
    return "  ".join(parts)


#: what reading a file that is being written may still raise after the reader's own retries
#: (:func:`meanfield.io.runfile.read_run_file`): before its first frame the writer holds the file
#: ("holds no complete frame yet"), and a read that kept meeting a half-updated header gives up
_LIVE_READ_ERRORS = (ConfigError, OSError, KeyError)
#: looks at a live file before its error is let through (each read inside a look has its own retries)
FOLLOW_LOOKS = 50
#: seconds ``--follow`` waits for a name that neither a file nor a writer holds yet: a follower started together with
#: its run (``meanfield simulate ... & meanfield info OUT.h5 --follow``) looks before the writer has taken the name
START_GRACE_SECONDS = 15.0
#: seconds between looks at a name that is not there yet
START_LOOK_SECONDS = 0.25
#: the longest ``--interval`` (an hour; 1e12 s had ended in time.sleep's OverflowError)
MAX_INTERVAL = 3600.0


def _not_hdf5(path: str) -> bool:
    """Whether ``path`` already holds bytes that are not an HDF5 file's start (a file being created starts with its
    signature): no look will make it readable."""
    try:
        head = file_head(path)
    except OSError:
        return False
    return len(head) == len(HDF5_SIGNATURE) and head != HDF5_SIGNATURE


def _when_readable(path: str, read, interval: float):  # type: ignore[no-untyped-def]
    """``read()``, retried every ``interval`` seconds while it raises one of :data:`_LIVE_READ_ERRORS` and
    ``path`` is a file that a writer holds or that changed under the read, or a writer's name (the last of
    :data:`FOLLOW_LOOKS` tries raises); a name that neither holds is looked at for :data:`START_GRACE_SECONDS` (a run
    started at the same time); another kind of file, and a file no writer holds that stayed as it was, fail at once."""
    from pathlib import Path

    from meanfield.io.lock import writer_alive, writer_state
    from meanfield.io.runfile import file_stamp

    started = time.monotonic()
    looks = 0
    announced = False
    while True:
        before = file_stamp(path)
        try:
            return read()
        except _LIVE_READ_ERRORS:
            if _not_hdf5(path) or (os.path.exists(path) and not os.path.isfile(path)):  # (a folder, a pipe, a device)
                raise
            # a closed file (another program's, a damaged run) that nobody writes and that did not change: no look
            # reads it (it had been looked at FOLLOW_LOOKS times, 50 s, before the error came out)
            if os.path.isfile(path) and writer_state(Path(path)) is False and file_stamp(path) == before:
                raise
            # a writer that holds the name before its first frame (the file is made beside it, and moved there with
            # that frame) is waited for, and a name nobody holds yet for a while
            if not os.path.isfile(path) and not writer_alive(Path(path)):
                waited = time.monotonic() - started
                if waited >= START_GRACE_SECONDS:
                    raise ConfigError("OUT.h5", f"file not found: {path} (no run made it within {waited:.0f} s)") from None
                if not announced:
                    print(f"waiting for {path} (up to {START_GRACE_SECONDS:g} s)", file=sys.stderr)
                    announced = True
                time.sleep(START_LOOK_SECONDS)
                continue
            looks += 1
            if looks >= FOLLOW_LOOKS:
                raise
            time.sleep(interval)


def follow(path: str, *, interval: float) -> int:
    """Print the summary, then one line per newly committed frame until the run is no longer running."""
    from meanfield.io.runfile import RunReader
    from meanfield.run import Run

    reader = _when_readable(path, lambda: RunReader(path), interval)
    print(_when_readable(path, lambda: Run.load(path, key="OUT.h5").summary(), interval))
    shown = 0
    while True:
        try:
            times, diagnostics = reader.times(), reader.diagnostics()
        except _LIVE_READ_ERRORS:
            _check_still_there(path)
            time.sleep(interval)
            continue
        for k in range(shown, reader.frames):
            print(_frame_line(k, float(times[k]), diagnostics))
        shown = reader.frames
        sys.stdout.flush()
        if reader.status != "running":
            print(f"status:    {reader.status} ({reader.stop_reason or 'n/a'})")
            return 0
        time.sleep(interval)
        try:
            reader = RunReader(path)
        except _LIVE_READ_ERRORS:
            _check_still_there(path)
            continue


def _check_still_there(path: str) -> None:
    """Stop following a file removed from its name (the follower had looked at the missing name for ever)."""
    if not os.path.exists(path):
        raise ConfigError("OUT.h5", f"{path} was removed while it was followed")


def _check_frames(path: str) -> None:
    """``--check``: every committed frame against its checksum; damaged ones stop the command (exit 2) named."""
    from meanfield.io.runfile import RunReader

    reader = RunReader(path, key="OUT.h5")
    checked = reader.checksummed_frames()
    if checked == 0:
        print(f"checksums: none in {path} (written before checksums): its {reader.frames} frames cannot be checked")
        return
    damaged = reader.damaged_frames()
    if damaged:
        raise ConfigError("OUT.h5", f"{path}: {len(damaged)} of its {reader.frames} frames {'does' if len(damaged) == 1 else 'do'} not match the checksums "
                                    f"written with them ({reader.named_frames(damaged)}): their bytes changed on disk "
                                    "after they were committed")
    unchecked = reader.frames - checked
    if not unchecked:
        print("checksums: the one frame matches its own" if checked == 1 else f"checksums: all {checked} frames match")
    else:  # (it had read "1 frames match theirs")
        print(f"checksums: {checked} frame{' matches its own' if checked == 1 else 's match theirs'}; {unchecked} written before "
              f"checksums {'was' if unchecked == 1 else 'were'} not checked")


def main(args: argparse.Namespace) -> int:
    from meanfield.cli.simulate import draw
    from meanfield.run import load

    picture_path(args.plot, "--plot", animation=True)
    interval = parse_float(args.interval, "--interval", positive=True)
    if interval > MAX_INTERVAL:
        raise ConfigError("--interval", f"at most {MAX_INTERVAL:g} seconds between looks, got {args.interval}")
    if args.follow:
        if args.plot or args.check:
            option = "--plot" if args.plot else "--check"
            raise ConfigError(option, f"{option} reads a run after it ends, not while following it (drop --follow or {option})")
        args.interrupted, args.interrupted_status = f"stopped following {args.run}", 0  # Ctrl-C: how one stops following
        return follow(args.run, interval=interval)
    run = load(args.run, key="OUT.h5")
    print(run.summary())
    if args.check:
        _check_frames(args.run)
    if args.plot:
        if not run.frames:
            raise ConfigError("--plot", f"{args.run} has no committed frame to draw yet")
        try:
            draw(run, args.plot)
        except ValueError as exc:  # a frame that is not finite: the plotting's own check, a traceback before
            raise ConfigError("--plot", f"cannot draw {args.run}: {exc}") from None
        print(f"wrote {args.plot}")
    return 0
