"""Attention heads: their matrices, their time dependence (``schedules``), random weight ensembles (``ensembles``), and
heads, embeddings and forward passes of real checkpoints (``checkpoint``, ``embeddings``, ``forward``).

The submodules load on first use, so that ``mf.heads.schedules.schedule_from_path(...)`` works after
``import meanfield as mf`` alone.

>>> import meanfield as mf
>>> mf.heads.identity(3).B.shape
(3, 3)
>>> mf.heads.schedules.schedule_from_path.__name__
'schedule_from_path'
"""
import importlib as _importlib
from typing import Any as _Any

from meanfield.heads.head import Head, HeadStack, head_from_spec, heads_from_config, identity, random_head, scalar, stack_heads

#: submodules loaded on first access (schedules imports meanfield.model, which imports this package)
_SUBMODULES = ("schedules", "ensembles", "checkpoint", "embeddings", "forward", "head")

__all__ = ["Head", "HeadStack", "stack_heads", "identity", "scalar", "random_head", "head_from_spec", "heads_from_config",
           *_SUBMODULES]


def __getattr__(name: str) -> _Any:
    if name not in _SUBMODULES:
        raise AttributeError(f"module 'meanfield.heads' has no attribute {name!r}")
    return _importlib.import_module(f"meanfield.heads.{name}")  # (the import binds it in this package's namespace)


def __dir__() -> list[str]:
    return sorted(__all__)
