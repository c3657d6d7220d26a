"""Runs on disk: HDF5 files with the resolved config stored beside the arrays.

Layout (a public contract, described in the README's *Data files*):

* attribute ``config`` — the resolved config as JSON;
* particles: dataset ``t`` (T,) and ``x`` (T, n, d);
* grid: ``t`` (T,), ``mass`` (T, N), plus static ``points`` (N, 3) and ``areas`` (N,);
* trackers' scalars: one (T,) dataset each under the group ``diagnostics``;
* time-dependent weights: the weight path under the group ``weights``;
* attributes ``status`` (``running``, ``completed``, ``failed``, ``stopped``)
  and ``stop_reason``.

Frames are appended and flushed one by one, so a killed run keeps every frame
saved before the kill and a long run never holds its history in memory.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from meanfield.errors import ConfigError

__all__ = ["RunWriter", "RunReader", "read_config", "run_status", "last_frame", "STATE_NAMES"]

#: dataset that holds the evolving state, by solver family
STATE_NAMES = {"particle": "x", "grid": "mass"}


class RunWriter:
    """Append frames of a run to an HDF5 file.

    Parameters
    ----------
    path : path-like
        Output file.
    config : mapping
        Resolved config, stored as the JSON attribute ``config``.
    state_name : {"x", "mass"}
        Name of the state dataset.
    state_shape : tuple
        Shape of one frame, e.g. ``(n, d)``.
    static : mapping, optional
        Arrays written once (``points``, ``areas``, weight paths …); keys with
        a ``/`` create groups.
    resume : bool
        Open an existing file and append after its last frame.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        config: Mapping[str, Any],
        state_name: str,
        state_shape: tuple[int, ...],
        static: Mapping[str, np.ndarray] | None = None,
        resume: bool = False,
    ) -> None:
        self.path = Path(path)
        self.state_name = state_name
        if resume:
            self.file = h5py.File(self.path, "a")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = h5py.File(self.path, "w")
            self.file.attrs["config"] = json.dumps(config, sort_keys=True)
            self.file.create_dataset("t", shape=(0,), maxshape=(None,), dtype="f8", chunks=(1024,))
            self.file.create_dataset(
                state_name, shape=(0, *state_shape), maxshape=(None, *state_shape), dtype="f8", chunks=(1, *state_shape)
            )
            self.file.create_group("diagnostics")
            for key, value in (static or {}).items():
                self.file.create_dataset(key, data=np.asarray(value))
        self.file.attrs["status"] = "running"
        self.file.flush()

    @property
    def frames(self) -> int:
        return int(self.file["t"].shape[0])

    def append(self, t: float, state: np.ndarray, diagnostics: Mapping[str, float] | None = None) -> None:
        """Append one frame (and its tracker scalars) and flush to disk."""
        count = self.frames
        data = self.file[self.state_name]  # the state first: a frame counts once its time is written
        data.resize((count + 1, *data.shape[1:]))
        data[count] = state
        self.file["t"].resize((count + 1,))
        self.file["t"][count] = t
        group = self.file["diagnostics"]
        for key, value in (diagnostics or {}).items():
            if key not in group:
                group.create_dataset(key, data=np.full(count, math.nan), maxshape=(None,), chunks=(1024,))
        for key in group:
            series = group[key]
            if series.shape[0] < count + 1:
                old = series.shape[0]
                series.resize((count + 1,))
                series[old:count] = math.nan
                series[count] = (diagnostics or {}).get(key, math.nan)
        self.file.flush()

    def truncate(self, frames: int) -> None:
        """Drop frames after the first ``frames`` (used when resuming)."""
        self.file["t"].resize((frames,))
        data = self.file[self.state_name]
        data.resize((frames, *data.shape[1:]))
        for key in self.file["diagnostics"]:
            series = self.file["diagnostics"][key]
            series.resize((min(frames, series.shape[0]),))

    def write_static(self, key: str, value: np.ndarray) -> None:
        if key in self.file:
            del self.file[key]
        self.file.create_dataset(key, data=np.asarray(value))

    def finish(self, status: str, *, stop_reason: str = "", info: Mapping[str, Any] | None = None) -> None:
        """Record the final status and close the file."""
        self.file.attrs["status"] = status
        self.file.attrs["stop_reason"] = stop_reason
        if info:
            self.file.attrs["info"] = json.dumps(info, default=float)
        self.file.flush()
        self.file.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file.id.valid:
            self.file.attrs["status"] = "failed" if exc[0] else self.file.attrs.get("status", "running")
            self.file.close()


class RunReader:
    """Read a run file piece by piece, opening it only for the time of each read.

    The constructor checks that ``path`` is a meanfield run and says why not
    (missing, a folder, not HDF5, no ``config`` attribute, …) with a
    :class:`~meanfield.errors.ConfigError` naming ``key``.

    Attributes
    ----------
    path : Path
    config : dict
        The resolved config stored with the run.
    status, stop_reason : str
    info : dict
    state_name : {"x", "mass"}
    frames : int
        Complete frames on disk.
    """

    def __init__(self, path: str | Path, *, key: str = "OUT.h5") -> None:
        self.path = Path(path)
        self.key = key
        if not self.path.exists():
            raise ConfigError(key, f"file not found: {self.path}")
        if self.path.is_dir():
            raise ConfigError(key, f"{self.path} is a folder, not a run file")
        try:
            with h5py.File(self.path, "r") as f:
                self._header(f)
        except OSError as exc:
            raise ConfigError(key, f"{self.path} is not an HDF5 file ({_reason(exc)})") from None

    def _header(self, f: h5py.File) -> None:
        if "config" not in f.attrs:
            raise ConfigError(self.key, f"{self.path} is an HDF5 file but not a meanfield run (no 'config' attribute)")
        try:
            self.config = json.loads(f.attrs["config"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(self.key, f"{self.path}: the stored config is not valid JSON ({exc})") from None
        if not isinstance(self.config, dict) or not all(isinstance(self.config.get(s), dict) for s in ("model", "solver")):
            raise ConfigError(self.key, f"{self.path}: the stored config lacks its [model] or [solver] section")
        names = [name for name in STATE_NAMES.values() if name in f]
        if "t" not in f or not names:
            raise ConfigError(self.key, f"{self.path} is not a meanfield run (no 't' and 'x' or 'mass' datasets)")
        self.state_name = names[0]
        self.status = str(f.attrs.get("status", ""))
        self.stop_reason = str(f.attrs.get("stop_reason", ""))
        try:
            self.info = json.loads(f.attrs["info"]) if "info" in f.attrs else {}
        except (TypeError, ValueError):
            self.info = {}
        self.frames = min(int(f["t"].shape[0]), int(f[self.state_name].shape[0]))

    def _open(self) -> h5py.File:
        try:
            return h5py.File(self.path, "r")
        except OSError as exc:
            raise ConfigError(self.key, f"cannot read {self.path} ({_reason(exc)})") from None

    def times(self) -> np.ndarray:
        """The saved times, shape ``(frames,)``."""
        with self._open() as f:
            return np.array(f["t"][: self.frames], dtype=float)

    def states(self, index: int | slice = slice(None)) -> np.ndarray:
        """Frames ``index`` of the state dataset (all by default)."""
        with self._open() as f:
            data = f[self.state_name]
            if isinstance(index, slice):
                start, stop, step = index.indices(self.frames)
                return np.array(data[start:stop:step], dtype=float)
            k = index + self.frames if index < 0 else index
            if not 0 <= k < self.frames:
                raise IndexError(f"frame {index} of a run with {self.frames} frames")
            return np.array(data[k], dtype=float)

    def diagnostics(self) -> dict[str, np.ndarray]:
        """The trackers' scalars, one ``(frames,)`` array each (NaN where a frame has none)."""
        out: dict[str, np.ndarray] = {}
        with self._open() as f:
            group = f.get("diagnostics")
            for name in group or ():
                series = np.full(self.frames, math.nan)
                values = np.asarray(group[name][: self.frames], dtype=float)
                series[: values.size] = values
                out[name] = series
        return out

    def static(self) -> dict[str, np.ndarray]:
        """Arrays written once: ``points``, ``areas``, and the weight path as ``weights/<name>``."""
        out: dict[str, np.ndarray] = {}
        with self._open() as f:
            for name in f:
                item = f[name]
                if name in ("t", self.state_name, "diagnostics"):
                    continue
                if isinstance(item, h5py.Dataset):
                    out[name] = item[()]
                else:
                    for sub in item:
                        if isinstance(item[sub], h5py.Dataset):
                            out[f"{name}/{sub}"] = item[sub][()]
        return out


def _reason(exc: OSError) -> str:
    """The useful part of an h5py ``OSError`` (e.g. 'file signature not found', 'unable to lock file')."""
    text = str(exc)
    for marker in ("file signature not found", "unable to lock file", "truncated file", "Permission denied", "Is a directory"):
        if marker.lower() in text.lower():
            return marker
    return text.split("(")[-1].rstrip(")") if "(" in text else text


def run_status(path: str | Path) -> tuple[str, str]:
    """``(status, stop_reason)`` attributes of a run file."""
    with h5py.File(path, "r") as f:
        return str(f.attrs.get("status", "")), str(f.attrs.get("stop_reason", ""))


def read_config(path: str | Path) -> dict[str, Any]:
    """The resolved config stored in a run file."""
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])


def last_frame(path: str | Path, state_name: str) -> tuple[int, float, np.ndarray]:
    """``(frames, t_last, state_last)`` of a run file, for ``--resume``."""
    with h5py.File(path, "r") as f:
        count = min(int(f["t"].shape[0]), int(f[state_name].shape[0]))  # a kill may cut a frame in half
        if count == 0:
            raise ValueError(f"{path}: no saved frame to resume from")
        return count, float(f["t"][count - 1]), np.array(f[state_name][count - 1])
