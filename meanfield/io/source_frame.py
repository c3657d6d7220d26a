r"""A frame of a stored run as the initial tokens of a particle run (``init.kind = "run"``).

A grid run's frame becomes one token per cell, at the cell's stored point (the centroid on the
second-order scheme, the generator on the first-order one), carrying the cell's mass:

.. math::

    \rho_{t_0} \approx \sum_i m_i\,\delta_{c_i}, \qquad
    \dot x_i = P^\perp_{x_i}\, v\Big[\sum_j m_j\,\delta_{x_j}\Big](x_i),

the Lagrangian (particle) discretisation of the continuity equation
:math:`\partial_t\rho + \operatorname{div}(\rho\,X[\rho]) = 0` started from that density.  The
tokens move with the flow, without the numerical diffusion of a finite-volume scheme, so that
clusters can contract below the spacing of the cells, where a fixed mesh no longer resolves them
(the low-temperature study of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931).  A particle
run's frame gives its tokens, with their masses when it has any.  The new run's clock starts at
the frame's time, and its Π♯ρ₀ is that of the first run of the chain (:func:`origin_run`).
"""
from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from meanfield.errors import ConfigError, MeanfieldWarning
from meanfield.geometry.sphere import unit_rows
from meanfield.io.arrays import REAL_KINDS
from meanfield.io.runfile import RunReader, read_run_file
from meanfield.io.token_masses import TOKEN_MASSES, stored_token_masses

__all__ = ["SourceFrame", "DamagedSource", "damaged_source_of", "origin_run", "chain_symmetrised", "read_source_frame", "source_tokens", "start_time", "SOURCE_DIGEST",
           "stored_source_digest", "check_source_unchanged", "weighted_source"]

#: the static dataset of a run started from a stored frame that holds the SHA-256 of that frame (tokens and masses as
#: read): ``--resume`` and the chain of :func:`origin_run` check that the source file still holds it
SOURCE_DIGEST = "source_digest"

#: how many runs :func:`origin_run` follows back before it calls the chain a loop
MAX_CHAIN = 32


@dataclass(frozen=True)
class SourceFrame:
    r"""The tokens, masses and time of one frame of a stored run.

    Attributes
    ----------
    path : Path
        The run file.
    time : float
        The frame's time (where the new run's clock starts).
    index : int
        The frame's index in the file.
    tokens : (n, d) array
        Unit vectors: a particle run's tokens, or a grid run's cell points.
    weights : (n,) array or None
        Token masses summing to 1 (a grid run's cell masses); ``None`` for uniform masses.
    kind : {"particle", "grid"}
        What the stored run holds.
    digest : (32,) uint8 array
        SHA-256 of the frame's tokens and masses as read (before :func:`source_tokens` leaves any out).
    asymmetry : float
        With ``symmetry = "antipodal"``: :func:`odd_moments` of the kept tokens before their images were added (else 0).
    sampling_floor : float
        What :func:`odd_moments` reaches for the same number of independent uniform tokens, :math:`3/\sqrt{n_\text{eff}}`
        with :math:`n_\text{eff} = 1/\sum_i m_i^2` (0 where ``asymmetry`` is not measured).
    """

    path: Path
    time: float
    index: int
    tokens: NDArray[np.float64]
    weights: NDArray[np.float64] | None
    kind: str
    digest: NDArray[np.uint8]
    asymmetry: float = 0.0
    sampling_floor: float = 0.0


class DamagedSource(ConfigError):
    """A source frame whose content cannot be taken: bytes that no longer match their checksum, numbers that are not
    finite, tokens that cannot be put on the sphere, token or cell masses that are no masses.

    Parameters
    ----------
    key : str
        The config key the error names (``init.path``).
    path : path
        The source file.
    damage : str
        What is wrong, without advice (``the frame at t = 1 is not finite``).
    advice : str
        What to do, for a run to be started from the file; a run that continued it already cannot pick another frame
        (:meth:`continued` says so instead).
    """

    def __init__(self, key: str, path: str | Path, damage: str, advice: str = "") -> None:
        self.path, self.damage = Path(path), damage
        super().__init__(key, f"{path}: {damage}" + (f"; {advice}" if advice else ""))

    def continued(self, run: str | Path) -> ConfigError:
        """The error for the run ``run`` that started from the file (``--resume``, the analysis): the file it started
        from is damaged and is to be restored; another frame (``init.time``) is no way out there."""
        return ConfigError(self.key, f"{self.path}, which {run} started from, is damaged: {self.damage}; restore that "
                                     "file as it was (from a backup or a copy)")


def damaged_source_of(error: DamagedSource, run: str | Path) -> ConfigError:
    """``error`` as :meth:`DamagedSource.continued` where the run file ``run`` started from its file (its stored
    ``init.path``: ``--resume`` of ``run`` read the damaged source while resolving the config); ``error`` otherwise
    (``run`` missing, unreadable, or started from another file)."""
    from meanfield.io.runfile import read_config

    try:
        init = read_config(run).get("init") or {}
    except (ConfigError, OSError):
        return error
    if init.get("kind") == "run" and isinstance(init.get("path"), str) and Path(init["path"]).resolve() == error.path.resolve():
        return error.continued(run)
    return error


def _frame_index(times: NDArray[np.float64], time: float | None, path: Path) -> int:
    """The index of the frame at ``time`` (the last committed frame when ``None``)."""
    if time is None:
        return times.size - 1
    tol = 1e-9 * max(1.0, abs(time))
    hits = np.nonzero(np.abs(times - time) <= tol)[0]
    if hits.size == 0:
        every = f" every {times[1] - times[0]:.6g}" if times.size > 1 else ""
        raise ConfigError("init.time", f"{path} has no frame at t = {time:g}; its {times.size} committed frames run "
                                       f"from t = {times[0]:.6g} to {times[-1]:.6g}{every}")
    return int(hits[-1])


def read_source_frame(path: str | Path, time: float | None = None, *, key: str = "init.path", warn: bool = True) -> SourceFrame:
    """Read the frame at ``time`` of the run in ``path`` as tokens and masses.

    Parameters
    ----------
    path : path
        A run file of ``meanfield simulate`` (particle or grid, tokens on the sphere).
    time : float, optional
        The frame's time, to within 1e-9 relative; by default the last committed frame.
    key : str
        The config key that errors name for the file.
    warn : bool
        Warn (:class:`~meanfield.errors.MeanfieldWarning`) where the file continues a run whose tokens carried masses
        but holds none (they were lost: the tokens go on with equal masses).  Resolving the config reads the frame
        and warns; the solver's setup reads it again without.

    Raises
    ------
    ConfigError
        Not a run, no committed frame, no frame at ``time`` (naming ``init.time``), tokens off the sphere
        (``model.norm`` other than ``"post"``), or save times that count the gradient clock instead of the physical
        time; a :class:`DamagedSource` for a frame whose bytes changed since it was written, or whose content is
        not what a run writes: numbers that are not finite, a token that is zero or (of a particle run) off the
        sphere, masses that are no masses.
    """
    path = Path(path)
    reader = RunReader(path, key=key)
    solver, model = reader.config.get("solver", {}), reader.config.get("model", {})
    if reader.frames == 0:
        raise ConfigError(key, f"{path} holds no committed frame to start from")
    if model.get("norm", "post") != "post":
        raise ConfigError(key, f"{path} has model.norm = {model['norm']!r}: its tokens are not on the sphere; "
                               "start a particle run only from a run with norm = 'post'")
    if solver.get("clock", "time") != "time":
        raise ConfigError(key, f"{path} saves frames on the gradient clock (solver.clock = {solver['clock']!r}), "
                               "not in physical time; continue it with --resume")
    times = reader.times()
    index = _frame_index(times, time, path)
    state, intact = reader.checked_state(index)
    if not intact:  # as --resume refuses it (a run had started from it with a warning)
        raise DamagedSource(key, path, f"the frame at t = {times[index]:.6g} does not match the checksum written with it: "
                                       "its bytes changed on disk after it was committed", "start from another frame (init.time)")
    when = f"the frame at t = {times[index]:.6g}"
    if _real(state) is None or not np.all(np.isfinite(state)):
        raise DamagedSource(key, path, f"{when} is not finite")
    static = reader.static()
    if reader.state_name == "mass":
        if "points" not in static:
            raise ConfigError(key, f"{path} is a grid run without its cell points ('points' dataset)")
        tokens = _real(static["points"])
        if tokens is None or tokens.ndim != 2 or not np.all(np.isfinite(tokens)):  # (not in the frame's checksum)
            raise DamagedSource(key, path, "its cell points ('points' dataset) are not an (N, d) array of finite numbers")
        mass = np.asarray(state, dtype=float)
        if mass.shape != (tokens.shape[0],) or np.any(mass < 0) or not mass.sum() > 0:
            raise DamagedSource(key, path, f"{when} is not {tokens.shape[0]} non-negative cell masses with a positive total")
        weights: NDArray[np.float64] | None = mass / mass.sum()
        kind = "grid"
    else:
        tokens = np.asarray(state, dtype=float)
        stored = stored_token_masses(static)
        if stored is not None:
            stored = _real(stored)  # (masses stored as strings had failed in the cast to float with a traceback)
            if (stored is None or stored.shape != (tokens.shape[0],) or not np.all(np.isfinite(stored)) or np.any(stored < 0)
                    or not stored.sum() > 0):
                raise DamagedSource(key, path, f"its token masses ('{TOKEN_MASSES}') are not {tokens.shape[0]} finite "
                                               "non-negative numbers with a positive total")
        elif warn and (source := weighted_source(reader.config)) is not None:
            # its tokens carried masses that the file lost: they would go on with equal masses 1/n, another measure
            warnings.warn(f"{path} continues {source}, but holds no token masses ('{TOKEN_MASSES}' dataset): the file lost "
                          "them; the run starts from its tokens with equal masses 1/n", MeanfieldWarning, stacklevel=2)
        weights = None if stored is None else stored / float(np.sum(stored))
        kind = "particle"
    tokens = _unit_tokens(tokens, path=path, key=key, when=when, grid=kind == "grid")
    digest = hashlib.sha256(tokens.tobytes() + (b"" if weights is None else weights.tobytes())).digest()
    return SourceFrame(path=path, time=float(times[index]), index=index, tokens=tokens, weights=weights, kind=kind,
                       digest=np.frombuffer(digest, dtype=np.uint8).copy())


def _real(values: Any) -> NDArray[np.float64] | None:
    """``values`` as float64, ``None`` where they are not real numbers (strings, complex numbers, objects)."""
    array = np.asarray(values)
    return array.astype(float) if array.dtype.kind in REAL_KINDS else None


#: how far from 1 the norm of a particle source's token may be: a run with ``model.norm = "post"`` writes unit tokens
#: (to round-off, float32 runs too), so a token further off is not one a run wrote (an edited or foreign file)
SPHERE_TOLERANCE = 1e-6


def _unit_tokens(tokens: NDArray[np.float64], *, path: Path, key: str, when: str, grid: bool) -> NDArray[np.float64]:
    """A source frame's tokens (a grid run's cell points) divided by their norms, computed without under- or overflow
    (:func:`~meanfield.geometry.sphere.unit_rows`); a :class:`DamagedSource` naming ``key``, the token and the frame where one
    cannot be put on the sphere (zero), or, of a particle run, lies off it."""
    units, norms = unit_rows(tokens)
    zero = np.flatnonzero(norms == 0)  # (the tokens are finite: their scaled norms are too, or ∞ beyond float64's range)
    if zero.size:
        what = f"cell point {int(zero[0])} ('points' dataset)" if grid else f"token {int(zero[0])} of {when}"
        raise DamagedSource(key, path, f"{what} is zero and cannot be put on the sphere")
    off = np.flatnonzero(~(np.abs(norms - 1.0) <= SPHERE_TOLERANCE))
    if not grid and off.size:  # a grid's points are the cells' centroids or generators: put on the sphere as they are
        i = int(off[0])
        raise DamagedSource(key, path, f"token {i} of {when} has norm {norms[i]:.6g} (tokens off the sphere: {off.size} of "
                                       f"{norms.size}), and a run with model.norm = 'post' writes unit tokens: the file was "
                                       "changed after meanfield wrote it, or written by another program")
    return units


def weighted_source(config: Mapping[str, Any] | None) -> str | None:
    """What a run's tokens took their masses from, in words, when its config continues a stored frame whose tokens
    carry masses (a grid run, or a particle run with token masses); ``None`` otherwise, or where the source cannot be
    read any more (then nothing tells)."""
    init = (config or {}).get("init") or {}
    if init.get("kind") != "run" or not isinstance(init.get("path"), str):
        return None
    try:
        reader = RunReader(init["path"], key="init.path")
        if reader.state_name == "mass":
            return f"the grid run {init['path']}"
        return f"{init['path']}, whose tokens carry masses" if stored_token_masses(reader.static()) is not None else None
    except (ConfigError, OSError):
        return None


#: dimensions up to which :func:`odd_moments` takes the third moment too (its tensor has d³ entries)
THIRD_MOMENT_MAX_D = 16


def odd_moments(tokens: NDArray[np.float64], weights: NDArray[np.float64]) -> float:
    r"""How far a measure is from antipodal symmetry, by its odd moments: zero for :math:`\mu = (-\mathrm{id})_\sharp\mu`,

    .. math::

        \max\Big(\big\|\textstyle\sum_i m_i x_i\big\|,\ \big\|\textstyle\sum_i m_i\, x_i\otimes x_i\otimes x_i\big\|_F\Big)

    (the third moment up to ``d =`` :data:`THIRD_MOMENT_MAX_D`: three clusters 120° apart have no mean but a third
    moment of at least 1/4).  One cluster of mass :math:`p` and its antipode of mass :math:`1-p` give :math:`|2p-1|`.
    """
    first = float(np.linalg.norm(weights @ tokens))
    if tokens.shape[1] > THIRD_MOMENT_MAX_D:
        return first
    third = np.einsum("i,ij,ik,il->jkl", weights, tokens, tokens, tokens, optimize=True)
    return max(first, float(np.linalg.norm(third)))


def source_tokens(path: str | Path, time: float | None = None, *, min_mass: float = 0.0, symmetry: str = "none",
                  warn: bool = True) -> SourceFrame:
    r"""The frame of :func:`read_source_frame`, with light tokens left out and, optionally, its antipodal image.

    .. math::

        \mu = \sum_{i:\,m_i \ge \varepsilon} \frac{m_i}{M}\,\delta_{x_i}
        \quad\longrightarrow\quad
        \tfrac12\big(\mu + (-\mathrm{id})_\sharp\mu\big) \quad (\texttt{symmetry = "antipodal"})

    with :math:`\varepsilon` = ``min_mass`` and :math:`M` the mass kept.  Every attention law is a
    function of :math:`\langle Q_h x, K_h y\rangle` times :math:`V_h y`, so the field of the reflected
    measure is the reflected field, :math:`X[(-\mathrm{id})_\sharp\mu](-x) = -X[\mu](x)`: a measure
    symmetric under :math:`x\mapsto -x` (the flow from a uniform :math:`\rho_0`) stays symmetric.  A
    discretisation breaks that at the level of its errors (a Fibonacci mesh is not antipodally symmetric),
    and in a metastable state the broken symmetry grows: the two clusters of Alcalde, Bungert, Riedl and
    Roith (arXiv 2605.10931) then leave at different times.  The symmetrised tokens keep it to round-off.

    Raises
    ------
    ConfigError
        What :func:`read_source_frame` raises; ``min_mass`` leaving no token (naming ``init.min_mass``).
    """
    frame = read_source_frame(path, time, warn=warn)
    tokens = frame.tokens
    n = tokens.shape[0]
    weights = np.full(n, 1.0 / n) if frame.weights is None else frame.weights
    if min_mass > 0:
        keep = weights >= min_mass
        if not np.any(keep):
            raise ConfigError("init.min_mass", f"{min_mass:g} leaves none of the {n} tokens of {frame.path}")
        tokens, weights = tokens[keep], weights[keep] / weights[keep].sum()
    asymmetry = floor = 0.0
    if symmetry == "antipodal":
        asymmetry, floor = odd_moments(tokens, weights), 3.0 * math.sqrt(float(weights @ weights))
        tokens, weights = np.concatenate([tokens, -tokens]), np.concatenate([weights, weights]) / 2.0
    elif symmetry != "none":
        raise ConfigError("init.symmetry", f"unknown symmetry {symmetry!r}; choose 'none' or 'antipodal'")
    uniform = frame.weights is None and tokens.shape[0] in (n, 2 * n)  # nothing left out: the masses stay uniform
    return replace(frame, tokens=tokens, weights=None if uniform else weights, asymmetry=asymmetry, sampling_floor=floor)


def stored_source_digest(path: str | Path) -> NDArray[np.uint8] | None:
    """The :data:`SOURCE_DIGEST` a run started from a stored frame recorded (``None``: none, a run older than it)."""
    def read(f: Any) -> NDArray[np.uint8] | None:
        return np.array(f[SOURCE_DIGEST], dtype=np.uint8) if SOURCE_DIGEST in f else None

    return read_run_file(path, read, key="init.path")


def check_source_unchanged(run: str | Path, init: dict[str, Any], recorded: NDArray[np.uint8] | None, *,
                           now: NDArray[np.uint8] | None = None) -> None:
    """Raise where the source of the run ``run`` (``init.path``, the frame at ``init.time``) no longer holds the frame
    whose digest the run ``recorded``: replaced since, the run would be resumed, or measured, from another start (a
    resumed run had taken the new file's masses and rewritten its own; ``meanfield concentration`` had measured
    against the new file's Π♯ρ₀).  ``now``: the source frame's digest where the caller has read the frame already."""
    if recorded is None:
        return
    source = Path(init["path"])
    if now is None:
        if not source.exists():  # (a continued run re-reads its source on --resume and in the analysis)
            raise ConfigError("init.path", f"{source}, which {run} started from, is missing; the run reads it again on "
                                           "--resume and in its analysis: restore the file at that path")
        try:
            now = read_source_frame(source, init.get("time")).digest
        except DamagedSource as exc:  # (not "start from another frame": the run took this one)
            raise exc.continued(run) from None
    if not np.array_equal(now, recorded):
        raise ConfigError("init.path", f"{source} has changed since {run} started from it (its frame at t = "
                                       f"{init.get('time')} is not the one the run took): the run would go on, or be "
                                       "measured, from another start; start afresh, or restore the source")


def origin_run(path: str | Path) -> tuple[Path, dict[str, Any]]:
    r"""The first run of a chain of continuations, and its stored config.

    A run started with ``init.kind = "run"`` names its source in ``init.path``; this follows those
    names back to the run that started from an initial measure of its own (whose first frame is
    :math:`\rho_0`).

    Raises
    ------
    ConfigError
        A run of the chain is missing or unreadable, no longer holds the frame the next one took
        (:func:`check_source_unchanged`), or the chain loops.
    """
    for path, config in _chain(path):
        if config.get("init", {}).get("kind") != "run":
            return path, config
    raise AssertionError("unreachable: _chain ends at the first run or raises")  # pragma: no cover


def chain_symmetrised(path: str | Path, init: Mapping[str, Any] | None = None) -> bool:
    r"""Whether a run continued from ``path`` (its own ``init`` section, when given) or a run of the chain before it
    took its source frame with ``init.symmetry = "antipodal"``: its measure is then the symmetrisation
    :math:`\tfrac12(\mu + (-\mathrm{id})_\sharp\mu)` of the chain's, and so is its :math:`\Pi_\sharp\rho_0`
    (:math:`\Pi(-x) = -\Pi(x)`)."""
    if init is not None and init.get("symmetry", "none") == "antipodal":
        return True
    return any(config.get("init", {}).get("symmetry", "none") == "antipodal" for _, config in _chain(path))


def _chain(path: str | Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The runs of a chain of continuations with their configs, from ``path`` back to the first run (the last one
    yielded), each link checked to still hold the frame the next one took (:func:`check_source_unchanged`)."""
    path = Path(path)
    seen: list[Path] = []
    for _ in range(MAX_CHAIN):
        config = RunReader(path, key="init.path").config
        yield path, config
        init = config.get("init", {})
        if init.get("kind") != "run":
            return
        check_source_unchanged(path, init, stored_source_digest(path))  # each link still holds the frame taken
        seen.append(path.resolve())
        path = Path(init["path"])
        if path.resolve() in seen:
            raise ConfigError("init.path", f"the runs started from one another loop back to {path}")
    raise ConfigError("init.path", f"more than {MAX_CHAIN} runs started from one another before {path}")


def start_time(cfg: dict[str, Any]) -> float:
    """Where a resolved config's clock starts: the source frame's time for ``init.kind = "run"``, else 0."""
    init = cfg["init"]
    if init["kind"] != "run":
        return 0.0
    value = float(init["time"])
    if not math.isfinite(value):
        raise ConfigError("init.time", f"must be finite, got {value}")
    return value
