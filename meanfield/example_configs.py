"""The example configurations shipped with the package (``data/*.toml`` of the repository)."""
from __future__ import annotations

from pathlib import Path

__all__ = ["example_files", "example_hint"]


def example_files() -> list[Path]:
    """The example configs shipped with the package (``data/*.toml`` of the repository).

    An installed wheel carries them in the package's ``examples`` folder; a source checkout has them in ``data/``.
    """
    here = Path(__file__).resolve().parent  # (the package folder)
    for folder in (here / "examples", here.parent / "data"):
        found = sorted(folder.glob("*.toml"))
        if found:
            return found
    return []


def example_hint(path: str | Path) -> str:
    """For a missing config named as a shipped example (``data/default.toml`` run outside the repository): where the
    examples are, as a sentence to add to the message; ``""`` for any other name."""
    name = Path(path).name
    if not any(f.name == name for f in example_files()):
        return ""
    return f" ({name} is one of the example configurations: `meanfield examples DIR` copies them into DIR)"
