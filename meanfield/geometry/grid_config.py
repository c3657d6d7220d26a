"""The mesh a run's ``[grid]`` table describes: a Fibonacci, icosahedral or graded Voronoi mesh of S².

One place for the rule, so that the grid solver builds its mesh and a stored run rebuilds it the same way
(:meth:`meanfield.run.Run.mesh`).

Public API: :func:`mesh_of_grid`, :func:`stored_mesh`, :func:`cells_of_grid`.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from meanfield.errors import ConfigError, MeanfieldWarning
from meanfield.geometry.graded import (DEFAULT_GRADING, DEFAULT_REFINE_FACTOR, DEFAULT_REFINE_RADIUS, graded_cell_count,
                                       graded_mesh)
from meanfield.geometry.mesh import SphericalMesh, icosahedral_cells, mesh, mesh_from_points

__all__ = ["mesh_of_grid", "stored_mesh", "cells_of_grid", "reconstructs_density"]


def mesh_of_grid(grid: Mapping[str, Any]) -> SphericalMesh:
    """The mesh of a resolved ``[grid]`` table: ``cells`` and ``family``, and for ``family = "graded"`` also
    ``refine_centres``, ``refine_radius``, ``refine_factor`` and ``grading``
    (:func:`meanfield.geometry.graded.graded_mesh`).

    Raises
    ------
    ConfigError
        Naming the key that does not describe a mesh.
    """
    family = grid.get("family", "fibonacci")
    cells = grid.get("cells", 2000)
    if family == "graded":
        return graded_mesh(cells, grid.get("refine_centres"),
                           radius=float(grid.get("refine_radius", DEFAULT_REFINE_RADIUS)),
                           factor=float(grid.get("refine_factor", DEFAULT_REFINE_FACTOR)),
                           grading=float(grid.get("grading", DEFAULT_GRADING)))
    return mesh(cells, family)


#: stored cell points within this of the rebuilt mesh's generators or centroids are its cells (round-off of another
#: build); a cell spacing is at least 1e-7 rad (graded meshes), far above it
STORED_POINTS_ATOL = 1e-12


def stored_mesh(grid: Mapping[str, Any], points: ArrayLike) -> SphericalMesh:
    """The mesh of a stored grid run: rebuilt from its ``[grid]`` table (cached), checked against its cell points.

    The stored points are the generators (first order) or the cell centroids (second order); a run without
    a usable table (no ``family`` of a mesh) gets the Voronoi mesh of its stored points.

    Warns
    -----
    MeanfieldWarning
        When the table names a mesh family but its mesh cannot be built (a ``ConfigError``) or does not have the
        stored points (a table edited by hand, or generator rules changed since the run): the mesh is then rebuilt
        from the stored points, which for a second-order run are the centroids, whose Voronoi mesh is another mesh
        (cell areas off by up to several per cent, so densities and W2 of the run are off too).  This had been silent.
    """
    points = np.asarray(points)
    family = grid.get("family")
    if family in ("fibonacci", "icosahedral", "graded"):
        try:
            candidate = mesh_of_grid(grid)
        except ConfigError as exc:
            candidate, why = None, f"it cannot be built ({exc})"
        if candidate is not None:
            if candidate.N == points.shape[0] and (
                    np.allclose(candidate.points, points, rtol=0, atol=STORED_POINTS_ATOL)
                    or np.allclose(candidate.centroids, points, rtol=0, atol=STORED_POINTS_ATOL)):
                return candidate  # equal to round-off: another build of the cache or of SciPy moves centroids by ulps
            why = (f"its mesh has {candidate.N} cells" if candidate.N != points.shape[0]
                   else "its mesh's generators and centroids are not the stored points")
        order = grid.get("order", 1)
        caveat = ("the stored points of this second-order run are its cell centroids, whose Voronoi mesh is another "
                  "mesh: its cell areas, and so the densities and W2 read from the run, are off by up to several "
                  "per cent"
                  if order == 2 else
                  "if the stored points are the run's generators (a first-order run) that is the run's mesh; if they "
                  "are its cell centroids, the cell areas are off by up to several per cent")
        warnings.warn(f"the stored [grid] table (grid.family = {family!r}) does not rebuild the run's "
                      f"{points.shape[0]} stored cell points: {why}; the mesh is rebuilt from the stored points "
                      f"instead ({caveat})", MeanfieldWarning, stacklevel=3)
    return mesh_from_points(points, family=grid.get("family", "custom"))


def reconstructs_density(cfg: Mapping[str, Any]) -> bool:
    """Whether a run's cell masses carry the linear reconstruction inside each cell: the grid solver at
    ``grid.order = 2`` (the JKO grid variant's masses are cell averages without one; runs older than
    ``grid.order`` were first order).  W2 to Π♯ρ₀ integrates the reconstruction then, else cell atoms."""
    grid = cfg.get("grid") or {}
    return cfg.get("solver", {}).get("kind") == "grid" and int(grid.get("order", 1)) == 2


def cells_of_grid(grid: Mapping[str, Any]) -> int:
    """How many cells the mesh of a resolved ``[grid]`` table has, without building its Voronoi diagram
    (``grid.cells`` itself, except for graded meshes, which have more, and icosahedral ones, which have the
    nearest 10·4^L + 2)."""
    if grid.get("family") == "graded":
        if grid.get("refine_centres") is None:  # the config's own check says what is missing (this runs before it)
            raise ConfigError("grid.refine_centres", "grid.family = 'graded' needs the centres of its fine caps, "
                                                     "e.g. refine_centres = [[1, 0, 0], [-1, 0, 0]]")
        return graded_cell_count(grid["cells"], grid["refine_centres"],
                                 radius=float(grid.get("refine_radius", DEFAULT_REFINE_RADIUS)),
                                 factor=float(grid.get("refine_factor", DEFAULT_REFINE_FACTOR)),
                                 grading=float(grid.get("grading", DEFAULT_GRADING)))
    if grid.get("family") == "icosahedral":
        return icosahedral_cells(int(grid.get("cells", 2000)))
    return int(grid.get("cells", 2000))
