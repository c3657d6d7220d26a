"""A run: its saved frames, diagnostics and config, in memory or read lazily from its HDF5 file.

:func:`meanfield.simulate`, :func:`meanfield.solve` and :func:`meanfield.load`
all give a :class:`Run`.  Its arrays follow the file layout:

* particles: ``t`` (T,), ``x`` (T, n, d), and ``token_masses`` (n,) where the tokens carry masses
  (:attr:`Run.token_masses`);
* grid: ``t`` (T,), ``mass`` (T, N), ``points`` (N, 3), ``areas`` (N,);
* ``diagnostics``: the trackers' scalars, one (T,) array each;
* ``config``: the resolved config (``None`` for a run made by :func:`meanfield.solve`).

A loaded run reads ``t``, the diagnostics and the static arrays at once and
the frames only when they are first used, so a large file opens instantly.

Examples
--------
>>> import meanfield as mf
>>> run = mf.simulate("data/default.toml", t_final=1.0, save_every=0.5)  # doctest: +SKIP
>>> run                                                                   # doctest: +SKIP
Run(particle, n=256, d=3, 3 frames, t=0..1, completed)
>>> fig = run.plot()                                                      # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError, MeanfieldWarning
from meanfield.io.token_masses import TOKEN_MASSES, stored_token_masses

__all__ = ["Run", "load"]

#: :meth:`Run.at` finds a saved time to this fraction of the run's largest time (the save times are decimals where
#: t_start and save_every are, but those of older files, of save_every = 1/3 or of other writers are sums of steps,
#: 5.000000000000001 as often as 5), and to a quarter of the closest two saved times at most
AT_TIME_TOLERANCE = 1e-9


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


def _read_only(values: Any, *, dtype: Any = float) -> np.ndarray:
    """A read-only view of ``values``: a run's arrays cannot be changed by changing what it returns (the caller's
    own arrays keep their flags: only the view is frozen)."""
    view = np.asarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view


def _with_later_keys(stored: dict[str, Any]) -> dict[str, Any]:
    """``stored`` (a run's stored config) with the keys added to the config since it was written filled in: with the
    values the config resolver gives them for this config (``solver.method`` follows ``solver.kind``), else with
    their defaults.  A config that lacks none is returned as it is, the same object.

    A file written before ``model.backend``, ``model.tolerance``, ``model.precision`` (and the other keys added
    since) had failed every reader with a bare ``KeyError`` (exit 1).
    """
    from meanfield.config import SCHEMA, resolve

    missing = [(section, key) for section, keys in SCHEMA.items() for key in keys
               if not isinstance(stored.get(section, {}), dict) or key not in stored.get(section, {})]
    if not missing or not all(isinstance(stored.get(section, {}), dict) for section, _ in missing):
        return stored
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the resolver's notes are for a config being run, not one being read)
            resolved: dict[str, Any] | None = resolve(stored)
    except (ConfigError, TypeError, ValueError, KeyError):  # (e.g. a stored init.path gone since)
        resolved = None
    filled = json.loads(json.dumps(stored))
    for section, key in missing:
        value = resolved[section][key] if resolved is not None else SCHEMA[section][key].default
        filled.setdefault(section, {})[key] = json.loads(json.dumps(value))
    return filled


class Run:
    """The outcome of a simulation.

    Attributes
    ----------
    t : (T,) array
        Saved times.
    kind : {"particle", "grid"}
        Tokens (``x``) or a density on a mesh (``mass``).
    diagnostics : dict of (T,) arrays
        What the trackers recorded (``energy``, ``max_speed``, ``w2_target`` …).
    config : dict or None
        The resolved config.
    status : {"completed", "stopped", "failed", "interrupted", "running"}
    stop_reason : str
    info : dict
        Steps, wall time and the solver's counters.
    path : Path or None
        The HDF5 file, for a loaded run or one written with ``out=``.

    Examples
    --------
    >>> import meanfield as mf
    >>> run = mf.simulate(t_final=0.5, save_every=0.25, **{"init.n": 16})
    >>> run
    Run(particle, n=16, d=3, 3 frames, t=0..0.5, completed)
    >>> run.shape, run.at(0.25).shape, run.diagnostics["energy"].shape
    ((16, 3), (16, 3), (3,))
    """

    def __init__(
        self,
        *,
        t: np.ndarray,
        state_name: str,
        diagnostics: Mapping[str, np.ndarray],
        static: Mapping[str, np.ndarray] | None = None,
        config: Mapping[str, Any] | None = None,
        status: str = "completed",
        stop_reason: str = "",
        info: Mapping[str, Any] | None = None,
        states: np.ndarray | None = None,
        reader: Any = None,
        model: Any = None,
        mesh: Any = None,
        path: str | Path | None = None,
    ) -> None:
        if state_name not in ("x", "mass"):
            raise ValueError(f"state_name must be 'x' or 'mass', got {state_name!r}")
        if states is None and reader is None:
            raise ValueError("a Run needs its states or a reader")
        self.t = _read_only(t)
        self.state_name = state_name
        self.diagnostics = {k: _read_only(v) for k, v in diagnostics.items()}
        self.static = {k: _read_only(v, dtype=None) for k, v in (static or {}).items()}
        self.config = None if config is None else json.loads(json.dumps(config))
        self.status = status
        self.stop_reason = stop_reason
        self.info = dict(info or {})
        self.path = None if path is None else Path(path)
        self._states = None if states is None else _read_only(states)
        if self._states is not None and self._states.shape[0] not in (0, self.t.size):  # 0: a run that kept no states
            raise ValueError(f"{self.t.size} times for {self._states.shape[0] if self._states.ndim else 0} states: "
                             "one state per saved time")
        self._reader = reader
        self._model = model
        self._mesh = mesh  # the mesh a grid run was solved on, where it is at hand (mf.solve)
        self._masses_checked = False  # whether a particle run without token masses was checked to need none

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_states(cls, *, t: np.ndarray, states: np.ndarray, state_name: str, **fields: Any) -> Run:
        """A run held in memory (what :func:`meanfield.solve` returns)."""
        return cls(t=t, states=states, state_name=state_name, **fields)

    @classmethod
    def load(cls, path: str | Path, *, key: str = "path") -> Run:
        """Open the run stored in ``path`` (frames are read when first used).

        Raises
        ------
        ConfigError
            When ``path`` is missing or is not a meanfield run; the message says why and names ``key``
            (the command line's ``OUT.h5``).
        """
        from meanfield.io.runfile import RunReader

        if not isinstance(path, (str, os.PathLike)):  # (Run.load(5) had been a pathlib TypeError)
            raise ConfigError(key, f"expected a file path (str or os.PathLike), got {type(path).__name__}")
        reader = RunReader(os.fspath(path), key=key)
        return cls(
            t=reader.times(),
            state_name=reader.state_name,
            diagnostics=reader.diagnostics(),
            static=reader.static(),
            config=_with_later_keys(reader.config),
            status=reader.status,
            stop_reason=reader.stop_reason,
            info=reader.info,
            reader=reader,
            path=path,
        )

    # ------------------------------------------------------------------ arrays
    @property
    def kind(self) -> str:
        """``"particle"`` (tokens ``x``) or ``"grid"`` (cell masses ``mass``)."""
        return "particle" if self.state_name == "x" else "grid"

    @property
    def frames(self) -> int:
        """Number of saved frames."""
        return int(self.t.size)

    def __len__(self) -> int:
        return self.frames

    @property
    def states(self) -> np.ndarray:
        """All saved states: ``x`` (T, n, d) for particles, ``mass`` (T, N) on a grid."""
        if self._states is None:
            self._states = _read_only(self._reader.states())
        return self._states

    def frame(self, index: int) -> np.ndarray:
        """One saved state (without reading the others from the file); ``index`` an integer, negative from the end."""
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an integer (a frame number; see run.t for the times), got {index!r}")
        if not -self.frames <= index < self.frames:
            raise IndexError(f"frame {index} of a run with {self.frames} frames")
        if self._states is not None:
            return self._states[index]
        return _read_only(self._reader.states(int(index)))

    def at(self, time: float) -> np.ndarray:
        """The state saved at ``time`` (without reading the others from the file).

        ``time`` must be one of the saved times :attr:`t`, to :data:`AT_TIME_TOLERANCE` relative to the run's
        largest time and to a quarter of its closest two frames: ``run.at(5.0)`` finds the frame of t = 5 whichever
        step sum gave it.  A time between frames
        raises ``KeyError`` naming the saved times on either side (the state there was not saved: rerun with a
        smaller ``solver.save_every``, or interpolate knowingly).

        Examples
        --------
        >>> import numpy as np
        >>> run = Run.from_states(t=np.array([0.0, 0.5, 1.0]), states=np.arange(6.0).reshape(3, 2, 1), state_name="x",
        ...                       diagnostics={})
        >>> run.at(0.5).ravel().tolist()
        [2.0, 3.0]
        """
        if isinstance(time, (bool, np.bool_)) or not isinstance(time, (int, float, np.integer, np.floating)):
            raise TypeError(f"time must be a number, got {time!r}")
        if not math.isfinite(time):
            raise ValueError(f"time must be finite, got {time!r}")
        if not self.frames:
            raise KeyError(f"t = {float(time):.12g}: the run saved no frames")
        tolerance = AT_TIME_TOLERANCE * float(np.max(np.abs(self.t)))
        if self.frames > 1:  # (at least 1e-9 of 1 had taken a frame 1e-10 away for one at 1e-9 asked: runs of tiny times)
            tolerance = min(tolerance, 0.25 * float(np.min(np.diff(self.t))))
        index = int(np.argmin(np.abs(self.t - time)))
        if abs(float(self.t[index]) - time) > tolerance:
            before = self.t[self.t < time]
            after = self.t[self.t > time]
            around = [f"{float(v):.12g}" for v in before[-1:].tolist() + after[:1].tolist()]
            nearest = f"the saved times around it: {' and '.join(around)}" if len(around) == 2 else f"the nearest: {around[0]}"
            frames = f"{self.frames} frames from t = {float(self.t[0]):.12g} to {float(self.t[-1]):.12g}" if self.frames > 1 else "1 frame"
            raise KeyError(f"t = {float(time):.12g} is not a saved time ({frames}; {nearest})")
        return self.frame(index)

    @property
    def final(self) -> np.ndarray:
        """The last saved state."""
        return self.frame(-1)

    def _require(self, kind: str, name: str) -> None:
        if self.kind != kind:
            other = "x" if kind == "grid" else "mass, points and areas"
            raise AttributeError(f"a {self.kind} run has no {name!r}; it has {other}")

    @property
    def x(self) -> np.ndarray:
        """Token frames, shape ``(T, n, d)`` (particle runs)."""
        self._require("particle", "x")
        return self.states

    @property
    def mass(self) -> np.ndarray:
        """Cell masses, shape ``(T, N)`` (grid runs)."""
        self._require("grid", "mass")
        return self.states

    @property
    def token_masses(self) -> np.ndarray | None:
        """Token masses, shape ``(n,)`` summing to 1, of a particle run whose tokens carry them (one continued from a
        grid frame or from such a run, ``init.kind = "run"``, or a run of :func:`meanfield.solve` given masses);
        ``None`` where every token has mass ``1/n``.

        Stored as the dataset ``token_masses`` (files written before it: the root dataset ``weights``, still read).
        A run whose config continues a grid run or a weighted run but whose file holds no token masses gives
        ``None`` with a :class:`~meanfield.errors.MeanfieldWarning`: what is computed from it takes equal masses.
        """
        self._require("particle", "token_masses")
        masses = stored_token_masses(self.static)
        if masses is None and not self._masses_checked:
            from meanfield.io.source_frame import weighted_source  # local: the run files' module imports h5py

            self._masses_checked = True  # (warned once per run)
            source = weighted_source(self.config)
            if source is not None:
                where = self.path if self.path is not None else "this run"
                warnings.warn(f"{where} continues {source}, but holds no token masses ('{TOKEN_MASSES}' dataset): "
                              "the file lost them; what is computed from it takes equal masses 1/n", MeanfieldWarning,
                              stacklevel=2)
        return masses

    @property
    def points(self) -> np.ndarray:
        """The cells' stored points, shape ``(N, 3)`` (grid runs): the cell centroids on the second-order grid
        (``grid.order = 2``, the default), the Voronoi generators on the first-order grid and the JKO grid."""
        self._require("grid", "points")
        return self.static["points"]

    @property
    def areas(self) -> np.ndarray:
        """Cell areas, shape ``(N,)`` (grid runs)."""
        self._require("grid", "areas")
        return self.static["areas"]

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one state: ``(n, d)`` or ``(N,)``."""
        if self._states is not None:
            return tuple(self._states.shape[1:])
        return tuple(self._reader.state_shape)  # a file without committed frames had given ()

    @property
    def model(self) -> Any:
        """The :class:`meanfield.Model` of the run (rebuilt from the config for a loaded run)."""
        if self._model is None:
            if self.config is None:
                raise AttributeError("this run has no config to rebuild its model from (a run of mf.solve read back by "
                                     "Run.from_xarray keeps no model)")
            from meanfield.build import build_model

            self._model = build_model(self.config)
        return self._model

    @property
    def norm(self) -> str:
        """The normalisation scheme the tokens moved under (config ``model.norm``; a run of :func:`meanfield.solve`
        keeps its solver's in its info): ``"post"`` keeps them on the sphere."""
        return ((self.config or {}).get("model") or {}).get("norm") or self.info.get("norm", "post")

    def mesh(self) -> Any:
        """The :class:`~meanfield.geometry.mesh.SphericalMesh` of a grid run.

        The mesh the run was solved on where it is at hand (a run of :func:`meanfield.solve`); otherwise
        rebuilt from the stored ``[grid]`` table (cached), and checked against the stored cell points, which
        are the generators (first order) or the cell centroids (second order); a run without a usable table
        gets the Voronoi mesh of its stored points, and one whose table does not rebuild them gets it with a
        :class:`~meanfield.errors.MeanfieldWarning` (:func:`~meanfield.geometry.grid_config.stored_mesh`).
        """
        self._require("grid", "mesh")
        if self._mesh is not None:  # the Voronoi mesh of the centroids is another mesh (areas off by 3 % of a cell)
            return self._mesh
        from meanfield.geometry.grid_config import stored_mesh

        return stored_mesh((self.config or {}).get("grid", {}), self.points)

    # ------------------------------------------------------------------ text
    def __repr__(self) -> str:
        # the solver by its name (a JKO or zero-temperature run had read "Run(particle, …)"), then what the state holds
        scheme = ((self.config or {}).get("solver") or {}).get("kind") or self.info.get("solver") or self.kind
        if self.kind == "particle":
            n, d = self.shape if self.frames else ("?", "?")
            what = f"{scheme}, n={n}, d={d}"
        else:
            what = f"{scheme}, N={self.static['points'].shape[0] if 'points' in self.static else '?'} cells"
        span = f"t={self.t[0]:.4g}..{self.t[-1]:.4g}" if self.frames else "no frame"
        where = f", {self.path}" if self.path is not None else ""
        return f"Run({what}, {self.frames} frames, {span}, {self.status}{where})"

    @property
    def error_names(self) -> tuple[str, str]:
        """How an error about this run names it: ``("OUT.h5", "file")`` for a run read from a file (the command line's
        argument), ``("run", "run")`` for one held in memory (an error had named ``OUT.h5`` where no file was involved)."""
        return ("OUT.h5", "file") if self._reader is not None else ("run", "run")

    def summary(self) -> str:
        """What ``meanfield info`` prints: model, solver, frames, status and the main diagnostics."""
        from meanfield.analysis.summary import run_summary

        return run_summary(self)

    # ------------------------------------------------------------------ comparison
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Run):
            return NotImplemented
        if (self.kind, self.status, self.stop_reason) != (other.kind, other.status, other.stop_reason):
            return False
        if json.dumps(self.config, sort_keys=True) != json.dumps(other.config, sort_keys=True):
            return False
        if not (_same(self.t, other.t) and _same(self.states, other.states)):
            return False
        if set(self.diagnostics) != set(other.diagnostics) or set(self.static) != set(other.static):
            return False
        return all(_same(self.diagnostics[k], other.diagnostics[k]) for k in self.diagnostics) and all(
            _same(self.static[k], other.static[k]) for k in self.static
        )

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ pictures
    def plot(self, path: str | Path | None = None, **options: Any) -> Any:
        """A summary figure: the cloud (or density) at a few times and, on S², the energy; saved when ``path`` is given.

        Particles on S² are drawn on the sphere, front and back told apart, beside the energy against time; for
        ``d > 3`` the cloud is shown in its principal-component plane with the
        histogram of :math:`\\langle x_i,x_j\\rangle` over time, and no energy panel.  A grid density is
        drawn on a log colour scale, the sphere turned to face the mass, above the energy and the other tracked series.
        The energy is ``energy`` (``energy_theta``, :math:`\\sum_hw_hE_h`, on a ``pooled`` run: the flow's).
        Token masses scale the markers.

        Options (keyword-only): ``snapshots`` (how many times are drawn), ``title``, ``dpi``; grids also ``log``
        (the colour scale).

        Returns
        -------
        matplotlib.figure.Figure
        """
        from meanfield.plotting.runs import plot_run

        return plot_run(self, path, **options)

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the run to an HDF5 run file, in the layout of ``meanfield simulate``.

        :func:`meanfield.load` reads it back, and ``meanfield info``, ``diagnose`` and ``concentration`` take it as
        they take a file of ``meanfield simulate``: its frames, diagnostics, static arrays (token masses, the grid's
        cells, a weight path), status and config.  A run of :func:`meanfield.simulate` keeps its config; a run of
        :func:`meanfield.solve` gets one made from its model and solver (:func:`meanfield.io.saved_run.config_of_solved_run`:
        its heads as matrices, ``init.kind = "stored"``, the file's first frame; a particle run starts from that frame
        with ``init.kind = "run"``, ``init.path`` the file).  The file is written once the run is over: a run that
        must survive a crash writes its frames as it goes, with :func:`meanfield.simulate` and ``out=``.

        Parameters
        ----------
        path : str or os.PathLike
            The file (refused where it exists, unless ``overwrite``, which replaces only a run file).
        overwrite : bool
            Replace an existing run file (a damaged one too, as ``meanfield simulate --overwrite`` does).

        Returns
        -------
        Path
            The file written.

        Raises
        ------
        ConfigError
            A path that exists (without ``overwrite``), is a folder, is not a run file, or is this run's own file.
        ValueError
            A run of :func:`meanfield.solve` that no config describes: heads that change in time built in Python,
            head weights other than ``1/H``, a graded or hand-made mesh.

        Examples
        --------
        >>> import meanfield as mf
        >>> model = mf.Model(d=3, beta=4.0, heads=mf.heads.identity(3))
        >>> run = mf.solve(mf.Problem(model, mf.sample_uniform(16, 3, seed=0)), mf.ParticleSolver(dt=0.05), t_final=0.5)
        >>> mf.load(run.save("solved.h5")).config["init"]["kind"]   # doctest: +SKIP
        'stored'
        """
        from meanfield.io.saved_run import save_run

        return save_run(self, path, overwrite=overwrite)

    def animate(self, path: str | Path | None = None, **options: Any) -> Any:
        """An animation of the saved frames; written as a GIF (or a video, where matplotlib finds ffmpeg) when ``path`` is given.

        Options (keyword-only): ``fps``, ``dpi``; grids also ``view`` ("mollweide" or "orthographic"), ``log``,
        ``cmap``, ``resolution``, ``fixed_scale``.

        Returns
        -------
        matplotlib.animation.FuncAnimation
        """
        from meanfield.plotting.runs import animate_run

        return animate_run(self, path, **options)

    # ------------------------------------------------------------------ analysis
    def concentration(self, *, threshold: float | None = None, policy: str | None = None, origin: Any = None) -> Any:
        """W2 to Π♯ρ₀ against t, with t_min, W2_min and the metastable window (what ``meanfield concentration`` prints).

        ``origin`` is the initial measure ρ₀ whose Π♯ρ₀ is the target: a :class:`Run` (its first frame, with its
        token masses or cell masses), an ``(n, d)`` token array, or a ``(tokens, masses)`` pair.  Give it for a run
        continued with ``mf.solve(..., t_start=…)``, whose first frame is not ρ₀: without it W2 is measured against
        Π♯ of that frame, with a :class:`~meanfield.errors.MeanfieldWarning`.
        See :func:`meanfield.analysis.concentration.run_concentration`.
        """
        from meanfield.analysis.concentration import run_concentration

        return run_concentration(self, threshold=threshold, policy=policy, origin=origin)

    def diagnose(self, *, tol: float = 1e-3, stride: int = 1, fd_points: int = 5) -> Any:
        """Energies, radial shadows, dominance, entropy and clusters (what ``meanfield diagnose`` prints).

        See :func:`meanfield.analysis.diagnostics.diagnose`.
        """
        from meanfield.analysis.diagnostics import diagnose

        return diagnose(self, tol=tol, stride=stride, fd_points=fd_points)

    # ------------------------------------------------------------------ tables
    def to_dataframe(self) -> Any:
        """The scalars as a :class:`pandas.DataFrame`: one row per frame, ``t`` and every diagnostic."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - depends on the installation
            raise ImportError("Run.to_dataframe needs pandas: pip install 'meanfield[xarray]'") from None
        return pd.DataFrame({"t": self.t, **self.diagnostics})

    def to_xarray(self) -> Any:
        """The whole run as an :class:`xarray.Dataset` (config and status in ``attrs``); :meth:`from_xarray` reads it back.

        A run of :func:`meanfield.solve` has no config, and its :class:`~meanfield.Model` is not stored: the run read
        back holds its frames, diagnostics and info, but cannot rebuild its model for :meth:`concentration`,
        :meth:`diagnose` or the plot's title.  Analyse it first, or run it with :func:`meanfield.simulate`.
        """
        try:
            import xarray as xr
        except ImportError:  # pragma: no cover - depends on the installation
            raise ImportError("Run.to_xarray needs xarray: pip install 'meanfield[xarray]'") from None
        if self.kind == "particle":
            state = (("t", "token", "coord"), self.states)
        else:
            state = (("t", "cell"), self.states)
        data: dict[str, Any] = {self.state_name: state}
        data.update({f"diagnostics/{k}": (("t",), v) for k, v in self.diagnostics.items()})
        for key, value in self.static.items():
            value = np.asarray(value)
            data[f"static/{key}"] = (tuple(f"{key}_{i}" for i in range(value.ndim)), value)
        attrs = {
            "config": json.dumps(self.config, sort_keys=True),
            "status": self.status,
            "stop_reason": self.stop_reason,
            "info": json.dumps(self.info, default=_json_default, sort_keys=True),
        }
        return xr.Dataset(data, coords={"t": self.t}, attrs=attrs)

    @classmethod
    def from_xarray(cls, dataset: Any) -> Run:
        """The run written by :meth:`to_xarray`.

        Raises
        ------
        TypeError
            ``dataset`` is not an :class:`xarray.Dataset`.
        ValueError
            It is not one :meth:`to_xarray` wrote (no ``t``, no ``x`` or ``mass``, no config in its ``attrs``).
        """
        if not (hasattr(dataset, "data_vars") and hasattr(dataset, "attrs")):  # a string, a DataArray, None
            raise TypeError(f"dataset must be an xarray.Dataset written by Run.to_xarray(), got {type(dataset).__name__}")
        missing = [what for what, ok in (("'t'", "t" in dataset), ("'x' or 'mass'", "x" in dataset or "mass" in dataset),
                                         ("attrs['config']", "config" in dataset.attrs)) if not ok]
        if missing:  # (a foreign dataset had raised KeyError: 'config')
            raise ValueError(f"dataset is not a run written by Run.to_xarray(): it has no {', no '.join(missing)}")
        name = "x" if "x" in dataset else "mass"
        diagnostics = {k.split("/", 1)[1]: dataset[k].values for k in dataset.data_vars if k.startswith("diagnostics/")}
        static = {k.split("/", 1)[1]: dataset[k].values for k in dataset.data_vars if k.startswith("static/")}
        config = json.loads(dataset.attrs["config"])
        return cls.from_states(
            t=dataset["t"].values,
            states=dataset[name].values,
            state_name=name,
            diagnostics=diagnostics,
            static=static,
            config=config,
            status=dataset.attrs.get("status", ""),
            stop_reason=dataset.attrs.get("stop_reason", ""),
            info=json.loads(dataset.attrs.get("info", "{}")),
        )


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value)


def load(path: str | Path, *, key: str = "path") -> Run:
    """Open a run file written by ``meanfield simulate`` or :func:`meanfield.simulate` (frames read lazily).

    Raises
    ------
    ConfigError
        When the file is missing or is not a meanfield run (the message says why and names ``key``, the
        command line's ``OUT.h5``).

    Examples
    --------
    >>> import tempfile, pathlib, meanfield as mf
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "run.h5"
    >>> written = mf.simulate(out=out, t_final=0.5, save_every=0.25, **{"init.n": 16})
    >>> run = mf.load(out)
    >>> run.status, run.t.tolist(), run.x.shape
    ('completed', [0.0, 0.25, 0.5], (3, 16, 3))
    """
    if isinstance(path, Run):  # pragma: no cover - convenience
        return path
    return Run.load(path, key=key)  # (which names a path of another type; a PurePosixPath had been refused)
