"""Option parsing and output shared by the sub-commands: every error names its option (exit status 2)."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from meanfield.errors import ConfigError
from meanfield.io.lock import followed
from meanfield.io.signature import is_hdf5

__all__ = ["parse_int", "parse_float", "parse_float_list", "parse_int_list", "emit", "dump_json"]


# --------------------------------------------------------------------------- #
# parsing helpers
# --------------------------------------------------------------------------- #
def parse_int(value: str, key: str, *, minimum: int | None = None) -> int:
    """Parse an integer option; ``ConfigError(key, ...)`` when bad or below ``minimum``."""
    try:
        x = int(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {value!r}") from None
    if minimum is not None and x < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")
    return x


def parse_float(value: str, key: str, *, positive: bool = False, nonnegative: bool = False) -> float:
    """Parse a finite float option; ``ConfigError(key, ...)`` when bad."""
    try:
        x = float(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ConfigError(key, f"must be finite, got {value!r}")
    if positive and x <= 0:
        raise ConfigError(key, f"must be > 0, got {value!r}")
    if nonnegative and x < 0:
        raise ConfigError(key, f"must be >= 0, got {value!r}")
    return x


def parse_float_list(value: str, key: str, *, positive: bool = False) -> list[float]:
    """Parse ``"0.5,1.5"`` (commas and/or spaces) into finite floats."""
    items = [s for s in str(value).replace(",", " ").split()]
    if not items:
        raise ConfigError(key, f"expected a comma-separated list of numbers, got {value!r}")
    if "," in str(value) and any(not part.strip() for part in str(value).split(",")):
        raise ConfigError(key, f"an entry is empty in {value!r}")
    out: list[float] = []
    for item in items:
        try:
            x = float(item)
        except ValueError:
            raise ConfigError(key, f"cannot parse {item!r} in {value!r} as a number") from None
        if not math.isfinite(x):
            raise ConfigError(key, f"entries must be finite, got {item!r}")
        if positive and x <= 0:
            raise ConfigError(key, f"entries must be > 0, got {item!r}")
        out.append(x)
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(_fmt(v) for v in value)
    return str(value)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "dtype") and hasattr(value, "tolist"):  # NumPy scalars and arrays (NumPy is not imported here)
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def dump_json(value: Any, **options: Any) -> str:
    """Strict JSON of ``value`` (non-finite numbers as the strings "nan", "inf", "-inf", NumPy values as Python ones):
    a bare ``NaN`` is not JSON, and strict parsers (``jq``, ``JSON.parse``) had rejected the output."""
    return json.dumps(_jsonable(value), allow_nan=False, **options)


def emit(values: Mapping[str, Any], *, as_json: bool) -> None:
    """Print ``key = value`` lines, or one JSON object."""
    if as_json:
        print(dump_json(dict(values), indent=2))
    else:
        for key, value in values.items():
            print(f"{key} = {_fmt(value)}")


def parse_int_list(value: str, key: str, *, minimum: int) -> list[int]:
    """``"8,32,128"`` -> ``[8, 32, 128]``; ``ConfigError(key, ...)`` for non-integers or values below ``minimum``."""
    out = []
    for x in parse_float_list(value, key):
        if x != int(x):
            raise ConfigError(key, f"entries must be integers, got {x!r} in {value!r}")
        if x < minimum:
            raise ConfigError(key, f"entries must be >= {minimum}, got {int(x)} in {value!r}")
        out.append(int(x))
    return out


def load_config_noted(source: Any, overrides: Any = ()) -> dict[str, Any]:
    """:func:`meanfield.config.load_config` (its notes reach stderr through the CLI's warning hook)."""
    from meanfield.config import load_config

    return load_config(source, overrides)


def picture_path(value: str | None, key: str, *, animation: bool = False) -> str | None:
    """Check a ``--plot`` output before any work (:func:`meanfield.plotting.canvas.check_picture_path`): a file in a
    folder that can be written, in a picture format, not a run; ``ConfigError(key, ...)`` otherwise.

    ``animation``: the option may also name an animation (``.gif``, or a video where matplotlib finds ffmpeg).
    """
    from pathlib import Path

    if value is None:
        return None
    from meanfield.plotting.canvas import ANIMATION_FORMATS, VIDEO_FORMATS, check_picture_path

    moving = animation and Path(value).suffix.lower() in ANIMATION_FORMATS + VIDEO_FORMATS
    try:
        check_picture_path(value, animation=moving)
    except ValueError as exc:
        message = str(exc).removeprefix("path: ")
        if animation and not moving and "use one of" in message:
            message += " (or, for an animation, .gif, or a video such as .mp4 where matplotlib finds ffmpeg)"
        raise ConfigError(key, message) from None
    return value


def distinct_outputs(**outputs: str | None) -> None:
    """Two outputs of one command that name the same file (``-o run.png --plot run.png`` had replaced the run by its
    picture, exit 0): ``ConfigError`` naming the later option.  Keywords are the options without dashes
    (``o``, ``out``, ``plot``, ``csv``)."""
    import os
    from pathlib import Path

    seen: dict[Path, str] = {}
    for name, value in outputs.items():
        if value is None:
            continue
        option = f"-{name}" if len(name) == 1 else f"--{name}"
        path = followed(value)
        if path is None:  # a loop of symlinks (check_output's words)
            raise ConfigError(option, f"{value} is a symlink that leads to no file (a loop of links)")
        for earlier, other in seen.items():
            if path == earlier or (path.exists() and earlier.exists() and os.path.samefile(path, earlier)):
                raise ConfigError(option, f"{value} is also the output {other}; give each output its own file")
        seen[path] = option


def table_path(value: str | None, key: str, *, allow: tuple[str, ...] = ()) -> str | None:
    """Check a ``--csv`` output before any work: a file, in a folder that can be written, that is not a run, a config
    or a picture (:data:`NOT_TABLES`, less the suffixes in ``allow``; any HDF5 file)."""
    from pathlib import Path

    from meanfield.io.output import check_parent

    if value is None:
        return None
    path = Path(value)
    suffix = allow[0] if allow else ".csv"  # what the hints suggest
    if path.is_dir() or value.endswith(("/", "\\")):
        raise ConfigError(key, f"{value} is a folder; give a file name such as {path / ('table' + suffix)}")
    if (path.suffix.lower() in NOT_TABLES and path.suffix.lower() not in allow) or is_hdf5(path):  # a run, a config or a picture: never replaced by a table
        raise ConfigError(key, f"{value} would be replaced by a table: it is or names a run, a config or a picture; "
                               f"give a table's name such as {path.with_suffix(suffix).name}")
    check_parent(path, key)
    return value


#: suffixes of files a ``--csv`` table must not replace (runs, configs, arrays, pictures, code)
NOT_TABLES = (".h5", ".hdf5", ".toml", ".npy", ".npz", ".py", ".png", ".pdf", ".svg", ".gif", ".jpg", ".jpeg")


