"""Runs on disk: HDF5 files with the resolved config stored beside the arrays.

Layout (a public contract, see INTERFACES.md):

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

__all__ = ["RunWriter", "read_run", "read_config", "run_status", "last_frame", "STATE_NAMES"]

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


def run_status(path: str | Path) -> tuple[str, str]:
    """``(status, stop_reason)`` attributes of a run file."""
    with h5py.File(path, "r") as f:
        return str(f.attrs.get("status", "")), str(f.attrs.get("stop_reason", ""))


def read_config(path: str | Path) -> dict[str, Any]:
    """The resolved config stored in a run file."""
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])


def read_run(path: str | Path) -> dict[str, Any]:
    """Load a whole run into memory: ``config``, ``t``, the state array, statics, ``diagnostics``, attributes."""
    out: dict[str, Any] = {}
    with h5py.File(path, "r") as f:
        out["config"] = json.loads(f.attrs["config"])
        out["status"] = str(f.attrs.get("status", ""))
        out["stop_reason"] = str(f.attrs.get("stop_reason", ""))
        out["info"] = json.loads(f.attrs["info"]) if "info" in f.attrs else {}
        for key in f:
            if isinstance(f[key], h5py.Dataset):
                out[key] = f[key][()]
            else:
                out[key] = {name: f[key][name][()] for name in f[key] if isinstance(f[key][name], h5py.Dataset)}
    return out


def last_frame(path: str | Path, state_name: str) -> tuple[int, float, np.ndarray]:
    """``(frames, t_last, state_last)`` of a run file, for ``--resume``."""
    with h5py.File(path, "r") as f:
        count = min(int(f["t"].shape[0]), int(f[state_name].shape[0]))  # a kill may cut a frame in half
        if count == 0:
            raise ValueError(f"{path}: no saved frame to resume from")
        return count, float(f["t"][count - 1]), np.array(f[state_name][count - 1])
