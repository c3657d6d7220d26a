"""Pictures: token clouds, grid densities, curves and animations, as matplotlib figures (saved when given a path).

:func:`compare` overlays one tracked series of several runs on one axes (``from meanfield.plotting import compare``).
"""
from meanfield.plotting.comparison import compare

__all__ = ["compare"]
