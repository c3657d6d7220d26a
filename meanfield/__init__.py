r"""meanfield: mean-field dynamics of transformers on the sphere.

Tokens are points of :math:`S^{d-1}`; self-attention layers act as the
continuity equation :math:`\partial_t\mu+\operatorname{div}(\mu X[\mu])=0`.

>>> import meanfield as mf
>>> run = mf.simulate("data/default.toml", beta=9, t_final=5)    # doctest: +SKIP
>>> run.plot()                                                   # doctest: +SKIP

The names below load on first use, so ``import meanfield`` stays cheap:

* running: :func:`simulate`, :func:`load`, :class:`Run`, :func:`load_config`;
  :func:`solve` with a :class:`Problem` and a solver (:class:`ParticleSolver`,
  :class:`GridSolver`, :class:`JKOSolver`, :class:`ZeroTemperatureSolver`);
* the model: :class:`Model`, :mod:`heads`, the samplers :func:`sample`,
  :func:`sample_uniform`, :func:`sample_vmf`, :func:`sample_equiangular`,
  :func:`sample_orthogonal`, and :func:`mesh` for a spherical grid;
* analysis: :func:`w2` (Wasserstein distances on the sphere), :mod:`theory`
  (the closed forms), :class:`ConfigError`, :class:`RunFailed`, :class:`TrackerError`, :class:`RunInterrupted`;
* :func:`keep_freed_memory`: freed arrays reused rather than fresh pages faulted in at
  every step (what the ``meanfield`` command does for its own process).
"""
from __future__ import annotations

import importlib as _importlib
from typing import Any as _Any

__version__ = "0.2.0"

#: public name -> (module, attribute); ``None`` as the attribute means the module itself
_LAZY: dict[str, tuple[str, str | None]] = {
    "simulate": ("meanfield.api", "simulate"),
    "load_config": ("meanfield.api", "load_config"),
    "load": ("meanfield.run", "load"),
    "Run": ("meanfield.run", "Run"),
    "solve": ("meanfield.solvers.problem", "solve"),
    "Problem": ("meanfield.solvers.problem", "Problem"),
    "ParticleSolver": ("meanfield.solvers.particle", "ParticleSolver"),
    "GridSolver": ("meanfield.solvers.grid", "GridSolver"),
    "JKOSolver": ("meanfield.solvers.jko", "JKOSolver"),
    "ZeroTemperatureSolver": ("meanfield.solvers.zero_temperature", "ZeroTemperatureSolver"),
    "StopRun": ("meanfield.solvers.loop", "StopRun"),
    "Model": ("meanfield.model", "Model"),
    "heads": ("meanfield.heads", None),
    "sample": ("meanfield.geometry.sphere", "sample"),
    "sample_uniform": ("meanfield.geometry.sphere", "sample_uniform"),
    "sample_vmf": ("meanfield.geometry.sphere", "sample_vmf"),
    "sample_equiangular": ("meanfield.geometry.sphere", "sample_equiangular"),
    "sample_orthogonal": ("meanfield.geometry.sphere", "sample_orthogonal"),
    "SAMPLERS": ("meanfield.geometry.sphere", "SAMPLERS"),
    "mesh": ("meanfield.geometry.mesh", "mesh"),
    "initial_mass": ("meanfield.geometry.mesh", "initial_mass"),
    "w2": ("meanfield.analysis.transport", "w2"),
    "theory": ("meanfield.analysis.theory", None),
    "ConfigError": ("meanfield.errors", "ConfigError"),
    "RunFailed": ("meanfield.errors", "RunFailed"),
    "TrackerError": ("meanfield.errors", "TrackerError"),
    "RunInterrupted": ("meanfield.errors", "RunInterrupted"),
    "ConfigNote": ("meanfield.errors", "ConfigNote"),
    "MeanfieldWarning": ("meanfield.errors", "MeanfieldWarning"),
    "DamagedFrameWarning": ("meanfield.io.runfile", "DamagedFrameWarning"),
    "UnshiftedOverflowWarning": ("meanfield.model", "UnshiftedOverflowWarning"),
    "keep_freed_memory": ("meanfield.allocator", "keep_freed_memory"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> _Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'meanfield' has no attribute {name!r}") from None
    value = _importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
