"""meanfield: mean-field dynamics of transformers on the sphere.

Tokens are points of :math:`S^{d-1}`; self-attention layers act as the
continuity equation :math:`\\partial_t\\mu+\\operatorname{div}(\\mu X[\\mu])=0`.
See ``MODEL.md`` for the mathematical contract and ``README.md`` for usage.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["w2", "__version__"]


def __getattr__(name: str) -> Any:  # lazy: keep `import meanfield` cheap (no POT/numba at import)
    if name == "w2":
        from meanfield.transport import w2

        return w2
    raise AttributeError(f"module 'meanfield' has no attribute {name!r}")
