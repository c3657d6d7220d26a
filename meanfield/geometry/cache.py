r"""A disk cache for the large spherical Voronoi meshes.

Building a mesh is :math:`O(N\log N)` but not cheap: on one core of the
reference machine a 131 072-cell Fibonacci mesh takes about 4 s and a
524 288-cell one about 17 s (``meanfield bench`` measures it), while reading
either back from an uncompressed ``.npz`` file takes a fraction of a second.
Meshes with at least :data:`CACHE_MIN_CELLS` cells are therefore kept in

- ``$MEANFIELD_CACHE/meshes`` when that variable is set (``MEANFIELD_CACHE=off``
  turns the cache off), otherwise
- ``$XDG_CACHE_HOME/meanfield/meshes`` or ``~/.cache/meanfield/meshes``.

A cached mesh is only used when its generators are bit-for-bit the ones the
family would produce now (so a changed generator formula can never return a
stale mesh), its format version and the version of the code that derived its
arrays (``cls.CODE_VERSION``, :attr:`meanfield.geometry.mesh.SphericalMesh.CODE_VERSION`)
match, and its arrays pass cheap checks (shapes, indices, areas, Euler's formula,
edges ``i < j`` of positive length, normals :math:`(x_j-x_i)/\|x_j-x_i\|`).  Files are written to a temporary
name and renamed, so a killed writer or a full disk leaves no partial file under
the final name; the temporary file of a writer killed outright (SIGKILL, out of
memory, power loss) is removed by the next write once it is
:data:`STALE_TMP_SECONDS` old.  A cache that cannot be written (read-only home, no
space) is simply not used.  The folder may be deleted at any time: its meshes are
built again when next needed.
"""
from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: a :class:`meanfield.geometry.mesh.SphericalMesh` (not imported: the mesh module imports this one)
SphericalMesh = Any

__all__ = ["CACHE_MIN_CELLS", "FORMAT", "STALE_TMP_SECONDS", "cache_dir", "cached_mesh"]

#: meshes with at least this many cells go to the disk cache
CACHE_MIN_CELLS = 32768

#: version of the cached file layout (bump when :class:`SphericalMesh` gains arrays or their meaning changes; 2: regions
#: counter-clockwise seen from outside, and the mesh code's version stored with the arrays)
FORMAT = 2


#: a writer's temporary file older than this (seconds) is left from a killed writer, and the next write removes it
STALE_TMP_SECONDS = 3600.0


def cache_dir() -> Path | None:
    """The folder of cached meshes, or ``None`` when the cache is off."""
    env = os.environ.get("MEANFIELD_CACHE")
    if env is not None:
        if env.strip().lower() in ("", "0", "off", "no", "false"):
            return None
        return Path(env).expanduser() / "meshes"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "meanfield" / "meshes"


def _read(path: Path, points: np.ndarray, cls: type, family: str) -> SphericalMesh | None:
    """The cached mesh of ``points``, or ``None`` (then it is built and the file replaced): whatever is wrong with the
    file, a cache is never a reason to fail (a truncated file had raised zipfile's BadZipFile, an empty one EOFError,
    in every command that needed the mesh until the file was deleted by hand)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if (int(data["format"]) != FORMAT or int(data["code"]) != int(cls.CODE_VERSION)
                    or not np.array_equal(data["generators"], points)):
                return None  # a file without "code" (older than it) raises KeyError: a miss too
            arrays = {name: np.array(data[name]) for name in cls.ARRAYS}
        if not _consistent(arrays, points.shape[0]):
            return None
        return cls(**arrays, family=family)
    except Exception:  # noqa: BLE001 - any unreadable or inconsistent file is a miss
        return None


def _consistent(a: dict[str, np.ndarray], cells: int) -> bool:
    """Whether cached arrays make a mesh of ``cells`` cells: shapes, finite values, indices in range, areas positive
    and summing to 4π, regions closed, Euler's V − E + F = 2, edges ``i < j`` of positive length and normals
    ``(x_j − x_i)/|x_j − x_i|`` (a file with its generators intact but an array cut or altered had been used as it was;
    negated normals and edges with i > j had passed).

    Euler's formula counts the edges of the regions, ``region_vertices.size / 2``: the stored edges leave out the
    zero-length ones of co-circular generators (a cube's corners: V − E + F = 8), whose valid mesh had been read as
    a miss and built and written again on every call."""
    edges, vertices, ptr, region = a["edges"], a["vertices"], a["region_ptr"], a["region_vertices"]
    E, V = edges.shape[0] if edges.ndim == 2 else -1, vertices.shape[0] if vertices.ndim == 2 else -1
    shapes = {"points": (cells, 3), "areas": (cells,), "edges": (E, 2), "edge_lengths": (E,), "edge_normals": (E, 3),
              "edge_midpoints": (E, 3), "generator_distances": (E,), "vertices": (V, 3), "edge_vertices": (E, 2),
              "region_ptr": (cells + 1,)}
    if any(a[name].shape != shape for name, shape in shapes.items()) or region.ndim != 1:
        return False
    if not all(np.all(np.isfinite(a[name])) for name in a):
        return False
    indices_in_range = all(x.size == 0 or (x.min() >= 0 and x.max() < bound)
                           for x, bound in ((edges, cells), (a["edge_vertices"], V), (region, V)))
    if not (indices_in_range and ptr[0] == 0 and ptr[-1] == region.size and np.all(np.diff(ptr) >= 3)
            and np.all(a["areas"] > 0) and abs(float(a["areas"].sum()) - 4.0 * np.pi) < 1e-8
            and region.size % 2 == 0 and V - region.size // 2 + cells == 2 and region.size // 2 >= E):
        return False
    if not (np.all(edges[:, 0] < edges[:, 1]) and np.all(a["edge_lengths"] > 0)):
        return False
    diff = a["points"][edges[:, 1]] - a["points"][edges[:, 0]]
    normals = diff / np.linalg.norm(diff, axis=1, keepdims=True)
    return bool(np.allclose(a["edge_normals"], normals, rtol=0.0, atol=1e-12))


def _remove_stale_temporaries(folder: Path) -> None:
    """Remove the ``.<name>.*.tmp`` files of writers killed before their ``finally`` (SIGKILL, out of memory, power
    loss) once they are :data:`STALE_TMP_SECONDS` old: they had stayed for good, up to 230 MB each."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for tmp in folder.glob(".*.tmp"):
        try:
            if tmp.is_file() and tmp.stat().st_mtime < cutoff:
                tmp.unlink()
        except OSError:  # removed by another process meanwhile, or not ours to remove
            pass


def _write(path: Path, mesh: SphericalMesh, generators: np.ndarray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, format=np.int64(FORMAT), code=np.int64(mesh.CODE_VERSION), generators=generators,
                         **{name: getattr(mesh, name) for name in mesh.ARRAYS})
            os.chmod(tmp, 0o644)  # mkstemp's 0600 had kept a shared cache from the other users, who rebuilt and replaced it
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        warnings.warn(f"meanfield: mesh not cached in {path.parent} ({exc.strerror or exc})", RuntimeWarning, stacklevel=3)


def cached_mesh(name: str, points: np.ndarray, build: Callable[[np.ndarray], SphericalMesh], *,
                cls: type, family: str) -> SphericalMesh:
    """The mesh of generators ``points``, read from the disk cache or built with ``build(points)`` and stored.

    Parameters
    ----------
    name : str
        File stem, e.g. ``"fibonacci-131072"``.
    points : (N, 3) array
        The generators; a cached file is used only when its generators equal these.
    build : callable
        Builds the mesh when it is not cached (or the cache is off or too small to matter).
    cls : type
        The mesh class (:class:`~meanfield.geometry.mesh.SphericalMesh`), built from the cached arrays; its
        ``CODE_VERSION`` is stored with them, and a file of another version is a miss.
    family : str
        Family label of the mesh.
    """
    folder = cache_dir()
    if folder is None or points.shape[0] < CACHE_MIN_CELLS:
        return build(points)
    path = folder / f"{name}.npz"
    if path.exists():
        hit = _read(path, points, cls, family)
        if hit is not None:
            return hit
    built = build(points)
    _write(path, built, points)
    return built
