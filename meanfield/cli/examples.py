"""``meanfield examples DIR``: copy the example configurations into DIR, to run and edit."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from meanfield.errors import ConfigError
from meanfield.example_configs import example_files

__all__ = ["add_parser", "example_files", "main"]


def _beside_each_other(text: bytes, names: list[str]) -> bytes:
    """An example's text with the repository's folder ``data/`` taken out of its mentions of the other examples: the
    copies sit side by side, and that folder exists only in a source checkout."""
    for name in names:
        text = text.replace(f"data/{name}".encode(), name.encode())
    return text


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    names = ", ".join(f.name for f in example_files()) or "none in this installation"
    p = subparsers.add_parser(
        "examples",
        help="copy the example configurations into a folder",
        description=f"Copy the example configurations ({names}) into DIR. If DIR already holds a file (or a link) "
        "of one of these names, nothing is copied unless --overwrite is given.",
    )
    p.add_argument("dir", metavar="DIR", help="folder to copy them into (created if missing)")
    p.add_argument("--overwrite", action="store_true", help="replace files (and links) of the same name in DIR")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    files = example_files()
    if not files:
        raise ConfigError("examples", "no example configurations found in this installation")
    if not str(args.dir).strip():
        raise ConfigError("DIR", "is empty; give a folder, e.g. meanfield examples my-configs")
    target = Path(args.dir)
    if target.exists() and not target.is_dir():
        raise ConfigError("DIR", f"{target} exists and is not a folder")
    folders = [f.name for f in files if (target / f.name).is_dir() and not (target / f.name).is_symlink()]
    if folders:  # no overwrite replaces a folder: refused before any file is copied (it had copied the others first)
        raise ConfigError("DIR", f"{target} holds folders named as example configurations: {', '.join(folders)}")
    # lexists: a dangling link is a clash too (the copy had followed it and written its target, outside DIR)
    clashes = [f.name for f in files if os.path.lexists(target / f.name)]
    if clashes and not args.overwrite:
        raise ConfigError("DIR", f"{target} already holds {', '.join(clashes)}; use --overwrite to replace them")
    try:
        target.mkdir(parents=True, exist_ok=True)
        names = [f.name for f in files]
        for f in files:
            copy = target / f.name
            if copy.is_symlink():  # --overwrite replaces the link itself, never what it points to
                copy.unlink()
            copy.write_bytes(_beside_each_other(f.read_bytes(), names))
    except OSError as exc:
        raise ConfigError("DIR", f"cannot write into {target}: {exc.strerror or exc}") from None
    for f in files:
        print(target / f.name)
    print(f"copied {len(files)} example configurations; run one with: meanfield simulate {target / files[0].name} -o run.h5")
    return 0
