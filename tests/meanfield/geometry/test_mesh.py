"""Spherical Voronoi meshes, grid measures and sphere plots (meanfield.geometry.mesh, meanfield.plotting.sphere).

Invariants of the geometry (areas, Euler characteristic, bisector normals),
cross-checks against independent formulas (spherical-triangle areas, exact
vMF cap probabilities), mass conservation of every conversion, and the
error messages of the initial densities.
"""
from __future__ import annotations

import math
import warnings

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from meanfield.geometry import mesh as M
from meanfield.errors import ConfigError

FOUR_PI = 4.0 * math.pi


def _meshes():
    return [M.fibonacci_mesh(100), M.fibonacci_mesh(1000), M.icosahedral_mesh(0), M.icosahedral_mesh(2), M.icosahedral_mesh(3)]


def _triangle_area(a, b, c):
    """Van Oosterom–Strackee: tan(Ω/2) = |a·(b×c)| / (1 + a·b + b·c + c·a)."""
    num = np.abs(np.einsum("ij,ij->i", a, np.cross(b, c)))
    den = 1.0 + np.einsum("ij,ij->i", a, b) + np.einsum("ij,ij->i", b, c) + np.einsum("ij,ij->i", c, a)
    return 2.0 * np.arctan2(num, den)


# ----------------------------------------------------------------------------- geometry


@pytest.mark.parametrize("msh", _meshes(), ids=repr)
def test_areas_sum_to_four_pi_and_match_triangle_fans(msh):
    assert abs(msh.areas.sum() - FOUR_PI) < 1e-10
    assert np.all(msh.areas > 0)
    fan = np.array([_triangle_area(np.repeat(msh.points[c][None], len(r), 0), msh.vertices[r], msh.vertices[np.roll(r, -1)]).sum()
                    for c, r in enumerate(msh.regions)])
    np.testing.assert_allclose(fan, msh.areas, rtol=1e-9)


@pytest.mark.parametrize("msh", _meshes(), ids=repr)
def test_edges_neighbours_and_normals(msh):
    i, j = msh.edges.T
    assert np.all(i < j)
    assert len({(a, b) for a, b in msh.edges.tolist()}) == msh.E  # each undirected pair once
    assert np.all(msh.edge_lengths > 0) and np.all(msh.generator_distances > 0)
    for c in range(0, msh.N, max(1, msh.N // 50)):
        for n in msh.neighbours(c):
            assert c in msh.neighbours(n)  # symmetry
        eids = msh.neighbour_edges(c)
        assert all(c in msh.edges[e] for e in eids)
    assert msh.degree.sum() == 2 * msh.E
    # normals: unit, tangent at the edge midpoint, pointing from i to j
    np.testing.assert_allclose(np.linalg.norm(msh.edge_normals, axis=1), 1.0, rtol=1e-12)
    assert np.max(np.abs(np.einsum("ek,ek->e", msh.edge_normals, msh.edge_midpoints))) < 1e-12
    assert np.all(np.einsum("ek,ek->e", msh.edge_normals, msh.points[j] - msh.points[i]) > 0)
    # the edge midpoint lies on the bisector: equidistant from both generators
    di = np.arccos(np.clip(np.einsum("ek,ek->e", msh.edge_midpoints, msh.points[i]), -1, 1))
    dj = np.arccos(np.clip(np.einsum("ek,ek->e", msh.edge_midpoints, msh.points[j]), -1, 1))
    np.testing.assert_allclose(di, dj, atol=1e-7)
    # closed cells: the edge lengths of each cell add up to its polygon perimeter
    c = 0
    reg = msh.regions[c]
    perimeter = M._arc(msh.vertices[reg], msh.vertices[np.roll(reg, -1)]).sum()
    assert msh.edge_lengths[msh.neighbour_edges(c)].sum() == pytest.approx(perimeter, rel=1e-9)


def _lat_lon_points():
    """Co-circular generators (Voronoi vertices where four or more cells meet): 12 longitudes x 5 latitudes + poles."""
    lat, lon = np.meshgrid(np.radians([-60.0, -30.0, 0.0, 30.0, 60.0]), np.radians(np.arange(0.0, 360.0, 30.0)))
    ring = np.column_stack([(np.cos(lat) * np.cos(lon)).ravel(), (np.cos(lat) * np.sin(lon)).ravel(), np.sin(lat).ravel()])
    return np.vstack([ring, [[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]]])


def _signed_polygon_areas(msh):
    """Shoelace areas of the cells' vertex polygons projected to the tangent plane at the generator, in a basis
    (e1, e2) with e1 x e2 = x_c (outward): positive for counter-clockwise seen from outside."""
    out = []
    for c, region in enumerate(msh.regions):
        x = msh.points[c]
        e1 = np.cross(x, [1.0, 0.0, 0.0] if abs(x[0]) < 0.9 else [0.0, 1.0, 0.0])
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(x, e1)
        u, v = msh.vertices[region] @ e1, msh.vertices[region] @ e2
        out.append(0.5 * np.sum(u * np.roll(v, -1) - np.roll(u, -1) * v))
    return np.array(out)


@pytest.mark.parametrize("msh", [*_meshes(), "graded", "cube", "lat-lon"], ids=str)
def test_regions_are_counter_clockwise_seen_from_outside(msh):
    # SciPy's sorted regions had about half the cells clockwise (263 of 500 Fibonacci cells), against the docstring
    import itertools

    from meanfield.geometry.graded import graded_mesh

    if msh == "graded":
        msh = graded_mesh(600, [[1.0, 0.0, 0.0]], radius=0.2, factor=4.0)
    elif msh == "cube":
        msh = M.mesh_from_points(np.array(list(itertools.product([-1.0, 1.0], repeat=3))))
    elif msh == "lat-lon":
        msh = M.mesh_from_points(_lat_lon_points())
    signed = _signed_polygon_areas(msh)
    assert np.all(signed > 0), f"{int(np.sum(signed <= 0))} of {msh.N} cells not counter-clockwise"


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_icosahedral_sizes_and_euler_characteristic(level):
    msh = M.icosahedral_mesh(level)
    assert msh.N == 10 * 4**level + 2
    vertices_used = np.unique(np.concatenate(msh.regions)).size
    assert msh.N - msh.E + vertices_used == 2  # V - E + F for the Voronoi polyhedron
    assert sorted(set(msh.degree.tolist())) == ([5] if level == 0 else [5, 6])
    assert int(np.sum(msh.degree == 5)) == 12


def test_refinement_families():
    ico = M.refinement_family(42, 3, family="icosahedral")
    assert [m.N for m in ico] == [42, 162, 642]
    assert all(3.8 < b.N / a.N < 4.1 for a, b in zip(ico, ico[1:]))
    fib2 = M.refinement_family(250, 3, factor=2)
    assert [m.N for m in fib2] == [250, 500, 1000]
    fib4 = M.refinement_family(100, 3, factor=4)
    assert [m.N for m in fib4] == [100, 400, 1600]
    hs = [m.h for m in fib4]
    assert hs[0] / hs[1] == pytest.approx(2.0)
    assert M.mesh(640, "icosahedral").N == 642
    assert M.fibonacci_mesh(100) is M.fibonacci_mesh(100)  # cached
    with pytest.raises(ConfigError, match="grid.family"):
        M.mesh(100, "cubed")
    with pytest.raises(ConfigError, match="grid.cells"):
        M.mesh(5)


def test_mesh_quality():
    for msh in (M.fibonacci_mesh(2000), M.icosahedral_mesh(3)):
        ratio = msh.areas / msh.areas.mean()
        assert 0.6 < ratio.min() and ratio.max() < 1.4
        assert msh.cell_radius.max() < 0.8 * msh.h


# ----------------------------------------------------------------------------- measures


def test_deposits_conserve_mass(rng):
    msh = M.fibonacci_mesh(500)
    x = rng.standard_normal((3000, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.random(3000)
    w /= w.sum()
    for mass in (M.deposit(msh, x), M.deposit(msh, x, w), M.deposit_smooth(msh, x, w, width=0.15),
                 M.deposit_smooth(msh, x, width=1e-3)):
        assert abs(mass.sum() - 1.0) < 1e-13
        assert mass.min() >= 0
    # depositing the cell centres with the cell masses is the identity
    m0 = M.initial_mass(msh, "vmf", kappa=3.0)
    np.testing.assert_allclose(M.deposit(msh, msh.points, m0), m0, rtol=1e-12)
    # the cell of a point is its nearest generator
    cells = msh.cell_of(x[:50])
    dots = x[:50] @ msh.points.T
    assert np.array_equal(cells, np.argmax(dots, axis=1))
    # a smoothed deposit of one atom is centred on it
    e = np.array([[0.0, 0.6, 0.8]])
    sm = M.deposit_smooth(msh, e, width=0.2)
    centre = (sm[:, None] * msh.points).sum(0)
    assert np.dot(centre / np.linalg.norm(centre), e[0]) > 0.999


@pytest.mark.parametrize("width", [0.1, 0.2])
def test_a_smoothed_deposit_has_the_von_mises_fisher_spread_of_its_width(width):
    # (found in review: κ = 0.25/width², or 1/width, had passed every test) one atom's deposit is the vMF density of
    # κ = 1/width² at the cells, whose mean cosine to the atom is coth κ − 1/κ (closed form on S²)
    msh = M.fibonacci_mesh(20000)
    e = np.array([0.0, 0.6, 0.8])
    sm = M.deposit_smooth(msh, e[None], width=width)
    kappa = 1.0 / width**2
    np.testing.assert_allclose(1.0 - sm @ (msh.points @ e), 1.0 - (1.0 / math.tanh(kappa) - 1.0 / kappa), rtol=2e-3)


def test_to_weighted_points_and_coarsen():
    msh = M.fibonacci_mesh(800)
    m0 = M.initial_mass(msh, "vmf", kappa=2.0, mean=[1, 0, 0])
    pts, w = msh.to_weighted_points(m0)
    assert pts.shape == (800, 3) and np.array_equal(w, m0)
    pts[0] = 0.0
    assert np.linalg.norm(msh.points[0]) == pytest.approx(1.0)  # a copy
    cp, cw = M.coarsen(msh.points, m0, M.fibonacci_mesh(100))
    assert abs(cw.sum() - 1.0) < 1e-13 and len(cp) <= 100
    np.testing.assert_allclose(np.linalg.norm(cp, axis=1), 1.0)
    masses = m0.copy()
    masses[:400] = 0.0  # cells of the coarse mesh that hold no mass have no atom
    target = M.fibonacci_mesh(100)
    cp, cw, atoms = M.coarsen(msh.points, masses, target, return_atoms=True)
    cells = target.cell_of(msh.points)
    for k in range(800):  # each point's atom is the barycentre of the points of its cell, or -1 for a cell without mass
        mates = (cells == cells[k]) & (masses > 0)
        if not mates.any():
            assert atoms[k] == -1
            continue
        centre = masses[mates] @ msh.points[mates]
        np.testing.assert_allclose(cp[atoms[k]], centre / np.linalg.norm(centre), rtol=0, atol=1e-14)
        assert cw[atoms[k]] == pytest.approx(masses[mates].sum(), rel=1e-13)


def test_sample_mass_follows_the_cells():
    msh = M.fibonacci_mesh(200)
    m0 = M.initial_mass(msh, "vmf", kappa=4.0)
    y = M.sample_mass(msh, m0, 20000, seed=3)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0)
    emp = M.deposit(msh, y)
    assert 0.5 * np.abs(emp - m0).sum() < 0.04  # total variation of 20 000 samples on 200 cells


# ----------------------------------------------------------------------------- initial densities


@pytest.mark.parametrize("kind,params", [
    ("uniform", {}),
    ("vmf", {"mean": [0, 1, 0], "kappa": 5.0}),
    ("mixture", {"components": [{"weight": 1, "kind": "vmf", "kappa": 4}, {"weight": 1, "kind": "uniform"}]}),
    ("function", {"expr": "exp(2*z) + 0.5*where(x > 0, x, 0)"}),
    ("function", {"f": lambda p: 1.0 + p[:, 0] ** 2}),
])
def test_initial_mass_is_a_probability(kind, params):
    msh = M.fibonacci_mesh(400)
    m = M.initial_mass(msh, kind, **params)
    assert m.shape == (400,) and m.min() >= 0 and abs(m.sum() - 1.0) < 1e-14


@pytest.mark.parametrize("family", ["fibonacci", "icosahedral"])
def test_initial_mass_is_the_cell_integral_and_its_moments_converge_at_second_order(family):
    """Moments of vMF(κ) on S²: E<m,x> = coth κ − 1/κ, E<m,x>² = 1 − 2 E<m,x>/κ.

    The masses are cell integrals (fan quadrature), so the moments of the
    reconstructed measure converge like h²; the cell-centre atoms of the same
    masses miss the spread inside each cell (also O(h²), with a larger constant)."""
    from meanfield.geometry.reconstruction import LinearReconstruction

    kappa = 3.0
    mu = np.array([1.0, 2.0, 3.0]) / math.sqrt(14.0)
    first = 1.0 / math.tanh(kappa) - 1.0 / kappa
    second = 1.0 - 2.0 * first / kappa
    errors = []
    for msh in M.refinement_family(250 if family == "fibonacci" else 162, 3, family=family):
        m = M.initial_mass(msh, "vmf", kappa=kappa, mean=mu)
        x, a = LinearReconstruction(msh).quadrature(m)
        w = x @ mu
        errors.append(max(abs(a @ w - first), abs(a @ w**2 - second)))
    assert errors[0] < 2e-3
    orders = [math.log(a / b) / math.log(2.0) for a, b in zip(errors, errors[1:])]  # h halves each level
    assert min(orders) > 1.7, (errors, orders)
    msh = M.fibonacci_mesh(1000)
    np.testing.assert_allclose(M.initial_mass(msh, "uniform"), msh.areas / FOUR_PI, rtol=1e-12)


@pytest.mark.parametrize("msh", _meshes(), ids=repr)
def test_centroids_and_fan_quadrature_against_the_closed_form_moments(msh):
    """∫_cell x dA = -½ Σ ℓ n (divergence theorem) against the fan quadrature; the fans tile the cells."""
    np.testing.assert_allclose(msh.cell_sum(msh.side_areas), msh.areas, rtol=1e-11)
    np.testing.assert_allclose(msh.integrate(lambda x: np.ones(len(x))), msh.areas, rtol=5e-3 * msh.h**2)
    for k in range(3):
        np.testing.assert_allclose(msh.integrate(lambda x: x[:, k]), msh.first_moments[:, k], atol=5e-3 * msh.h**2 * msh.areas.max())
    np.testing.assert_allclose(np.linalg.norm(msh.centroids, axis=1), 1.0, rtol=1e-14)
    # the centroid lies inside its cell: its nearest generator is the cell's own
    assert np.array_equal(msh.cell_of(msh.centroids), np.arange(msh.N))


def test_mixture_and_function_agree():
    msh = M.fibonacci_mesh(300)
    a = M.initial_mass(msh, "vmf", kappa=2.0)
    b = M.initial_mass(msh, "uniform")
    mix = M.initial_mass(msh, "mixture", components=[{"weight": 3, "kind": "vmf", "kappa": 2.0}, {"weight": 1, "kind": "uniform"}])
    # mixture of normalised densities, then the midpoint rule: close to the mixture of masses
    np.testing.assert_allclose(mix, 0.75 * a + 0.25 * b, rtol=5e-3)
    f1 = M.initial_mass(msh, "function", expr="exp(2*z)")
    np.testing.assert_allclose(f1, a, rtol=1e-12)
    f2 = M.initial_mass(msh, "function", f=lambda p: np.exp(2 * p[:, 2]))
    np.testing.assert_allclose(f2, a, rtol=1e-12)


def test_initial_mass_from_files(tmp_path):
    msh = M.fibonacci_mesh(300)
    m = M.initial_mass(msh, "vmf", kappa=3.0)
    np.save(tmp_path / "same.npy", 2 * m)
    np.testing.assert_allclose(M.initial_mass(msh, "file", path=tmp_path / "same.npy"), m, rtol=1e-12)
    other = M.fibonacci_mesh(1200)
    np.save(tmp_path / "other.npy", M.initial_mass(other, "vmf", kappa=3.0))
    remap = M.initial_mass(msh, "file", path=str(tmp_path / "other.npy"))
    assert abs(remap.sum() - 1) < 1e-14 and 0.5 * np.abs(remap - m).sum() < 0.05
    pts = M.sample_initial("vmf", 5000, kappa=3.0, seed=1)
    np.save(tmp_path / "pts.npy", pts)
    dep = M.initial_mass(msh, "file", path=tmp_path / "pts.npy", width=0.2)
    assert abs(dep.sum() - 1) < 1e-13
    np.save(tmp_path / "bad.npy", np.ones((3, 3, 3)))
    with pytest.raises(ConfigError, match="init.path"):
        M.initial_mass(msh, "file", path=tmp_path / "bad.npy")
    with pytest.raises(ConfigError, match="init.path"):
        M.initial_mass(msh, "file", path=tmp_path / "missing.npy")


def test_initial_mass_files_are_read_as_the_token_files_are(tmp_path):
    # the grid had called np.load itself: an HDF5 file had been "pickled data" (with NumPy's advice to unpickle it),
    # complex masses had lost their imaginary part, strings had failed in the cast to float
    msh = M.fibonacci_mesh(300)
    path = tmp_path / "m.npy"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(ConfigError, match="not a NumPy .npy file") as info:
        M.initial_mass(msh, "file", path=path)
    assert "pickle" not in str(info.value)
    for array, words in ((np.ones(300) * (1 + 1j), "complex128, not real numbers"), (np.array(["a"] * 300), "not real numbers"),
                         (np.zeros((0, 3)), "empty array")):
        np.save(path, array)
        with pytest.raises(ConfigError, match=f"init.path: .*{words}"):
            M.initial_mass(msh, "file", path=path)
    # points whose squares leave float64 are put on the sphere (1e-200s had been "zero", 1e200s had become 0)
    pts = M.sample_initial("vmf", 500, kappa=3.0, seed=1)
    np.save(path, pts)
    expected = M.initial_mass(msh, "file", path=path)
    for scale in (1e-200, 1e200):
        np.save(path, pts * scale)
        np.testing.assert_allclose(M.initial_mass(msh, "file", path=path), expected, rtol=0, atol=1e-15)
    np.save(path, np.vstack([pts, np.zeros((1, 3))]))
    with pytest.raises(ConfigError, match="point 500 is zero"):
        M.initial_mass(msh, "file", path=path)


@pytest.mark.parametrize("kind,params,key", [
    ("vmf", {"kappa": -1.0}, "init.kappa"),
    ("vmf", {"mean": [1, 0]}, "init.mean"),
    ("vmf", {"mean": [0, 0, 0]}, "init.mean"),
    ("vmf", {"gamma": 0.1}, "init.gamma"),
    ("mixture", {"components": []}, "init.components"),
    ("mixture", {"components": [{"kind": "vmf", "kappa": "big"}]}, r"init.components\[0\].kappa"),
    ("mixture", {"components": [{"kind": "vmf", "weight": -1}]}, r"init.components\[0\].weight"),
    ("mixture", {"components": [{"kind": "dirac"}]}, r"init.components\[0\].kind"),
    ("function", {"expr": "__import__('os')"}, "init.expr"),
    ("function", {"expr": "x.__class__"}, "init.expr"),
    ("function", {"expr": "exp(2*z"}, "init.expr"),
    ("function", {"expr": "z - 2"}, "init.expr"),
    ("function", {"expr": "log(z - 2)"}, "init.expr"),
    ("function", {"expr": "0*x"}, "init.expr"),
    # a complex value had been cut to its real part (with a NumPy warning) and the run went on: Re((-0.5)**(1/3))
    # is +0.397, where the user means -0.794
    ("function", {"expr": "2 + (-0.5)**(1/3)*z"}, "init.expr.*does not give a real number"),
    ("function", {"expr": "(-1)**0.5 + 2 + x"}, "init.expr.*does not give a real number"),
    ("function", {}, "init.expr"),
    ("function", {"f": "not callable"}, "init.f"),
    ("cube", {}, "init.kind"),
])
def test_initial_mass_errors_name_the_parameter(kind, params, key):
    with pytest.raises(ConfigError, match=key) as exc:
        M.initial_mass(M.fibonacci_mesh(100), kind, **params)
    assert isinstance(exc.value, ValueError)


def test_initial_mass_ignores_none_params():
    msh = M.fibonacci_mesh(100)
    np.testing.assert_allclose(M.initial_mass(msh, "vmf", mean=None, kappa=2.0), M.initial_mass(msh, "vmf", kappa=2.0))


@pytest.mark.parametrize("kind,params", [
    ("uniform", {}),
    ("vmf", {"mean": [1, 0, 0], "kappa": 6.0}),
    ("mixture", {"components": [{"weight": 1, "kind": "vmf", "kappa": 8, "mean": [0, 0, 1]},
                                {"weight": 1, "kind": "vmf", "kappa": 8, "mean": [0, 0, -1]}]}),
    ("function", {"expr": "exp(6*x)"}),
])
def test_sample_initial_matches_initial_mass(kind, params):
    msh = M.fibonacci_mesh(100)
    y = M.sample_initial(kind, 20000, seed=2, **params)
    assert y.shape == (20000, 3)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0)
    emp = M.deposit(msh, y)
    assert 0.5 * np.abs(emp - M.initial_mass(msh, kind, **params)).sum() < 0.05


def _counted_cache(tmp_path, monkeypatch, points=None):
    """A disk cache in ``tmp_path`` for a 500-cell mesh (or one of ``points``): ``(cached, builds, fresh, path)``,
    ``cached()`` the cache's answer and ``builds`` the list that counts the builds (one: ``fresh``, written to
    ``path``)."""
    import meanfield.geometry.cache as cache
    from meanfield.geometry.mesh import SphericalMesh, mesh_from_points
    from meanfield.geometry.sphere import fibonacci_points

    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "CACHE_MIN_CELLS", 0)
    points = fibonacci_points(500) if points is None else points
    builds = []

    def build(p):
        builds.append(1)
        return mesh_from_points(p, family="fibonacci")

    def cached():
        return cache.cached_mesh("test-500", points, build, cls=SphericalMesh, family="fibonacci")

    return cached, builds, cached(), tmp_path / "meshes" / "test-500.npz"


@pytest.mark.parametrize("damage", ["truncated", "empty", "bytes flipped"])
def test_a_damaged_mesh_cache_file_is_rebuilt(damage, tmp_path, monkeypatch):
    # a truncated or empty file had raised zipfile's BadZipFile or EOFError in every command needing the mesh
    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:1000])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(16) + data[middle + 16:])
    again = cached()
    assert len(builds) == 2  # read as a miss and built again
    np.testing.assert_array_equal(again.areas, fresh.areas)
    np.testing.assert_array_equal(again.edges, fresh.edges)
    assert len(builds) == 2 and np.array_equal(cached().areas, fresh.areas)  # the damaged file was replaced


@pytest.mark.parametrize("damage", ["edges cut", "areas cut", "area doubled", "vertex index out of range", "region ptr",
                                    "normals negated", "edges i > j", "an edge of length 0"])
def test_a_cached_mesh_whose_arrays_do_not_make_a_mesh_is_rebuilt(damage, tmp_path, monkeypatch):
    # a file with its generators intact but an array cut or altered had been used as it was (E = 100)
    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch)
    arrays = dict(np.load(path))
    if damage == "edges cut":
        arrays["edges"] = arrays["edges"][:100]
    elif damage == "areas cut":
        arrays["areas"] = arrays["areas"][:-1]
    elif damage == "area doubled":
        arrays["areas"] = arrays["areas"] * np.r_[2.0, np.ones(499)]
    elif damage == "vertex index out of range":
        arrays["region_vertices"] = arrays["region_vertices"] + 1
    elif damage == "region ptr":
        arrays["region_ptr"] = arrays["region_ptr"][::-1].copy()
    elif damage == "normals negated":  # these three had been read as they were
        arrays["edge_normals"] = -arrays["edge_normals"]
    elif damage == "edges i > j":
        arrays["edges"] = arrays["edges"][:, ::-1].copy()
    else:
        arrays["edge_lengths"] = arrays["edge_lengths"] * np.r_[0.0, np.ones(len(arrays["edge_lengths"]) - 1)]
    np.savez(path, **arrays)
    again = cached()
    assert len(builds) == 2  # read as a miss and built again
    assert path.stat().st_mode & 0o777 == 0o644  # readable by the other users of a shared cache (mkstemp: 0600)
    for name in type(fresh).ARRAYS:
        np.testing.assert_array_equal(getattr(again, name), getattr(fresh, name))


def test_a_cached_mesh_of_the_previous_format_is_rebuilt(tmp_path, monkeypatch):
    # FORMAT 1 files hold regions in SciPy's order (about half clockwise): read as they were, the regions of a
    # cached mesh would have turned either way while a fresh build's are counter-clockwise
    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch)
    arrays = dict(np.load(path))
    ptr = arrays["region_ptr"]
    arrays["region_vertices"] = np.concatenate([arrays["region_vertices"][a:b][::-1] for a, b in zip(ptr[:-1], ptr[1:])])
    arrays["format"] = np.int64(1)
    np.savez(path, **arrays)
    again = cached()
    assert len(builds) == 2
    assert np.all(_signed_polygon_areas(again) > 0)


def test_the_derived_arrays_of_a_shared_mesh_are_read_only():
    # the meshes and their reconstructions are cached in-process and shared: a caller writing into a derived array
    # (mesh.centroids[0] = ...) had changed it for every later caller
    from meanfield.geometry.reconstruction import reconstruction_of

    msh = M.fibonacci_mesh(200)
    rec = reconstruction_of(msh)
    arrays = {"centroids": msh.centroids, "first_moments": msh.first_moments, "side_areas": msh.side_areas,
              "cell_radius": msh.cell_radius, "degree": msh.degree, "fan nodes": msh.fan_quadrature[0],
              "fan weights": msh.fan_quadrature[1], "theta": rec.theta, "expansion_points": rec.expansion_points,
              "face_offsets": rec.face_offsets, "centroid_offsets": rec.centroid_offsets}
    for name, arr in arrays.items():
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 0
        assert not arr.flags.writeable, name


def test_a_write_to_the_mesh_cache_removes_the_stale_temporaries_of_killed_writers(tmp_path, monkeypatch):
    # a writer killed by SIGKILL leaves its .<name>.XXXX.tmp (up to 230 MB), which no later run had removed
    import os
    import time

    import meanfield.geometry.cache as cache

    folder = tmp_path / "meshes"
    folder.mkdir()
    stale, fresh_tmp, other = folder / ".test-500.aayse8s1.tmp", folder / ".test-500.k2j4x9qz.tmp", folder / "notes.tmp"
    for f in (stale, fresh_tmp, other):
        f.write_bytes(b"partial")
    old = time.time() - cache.STALE_TMP_SECONDS - 60
    for f in (stale, other):
        os.utime(f, (old, old))
    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch)
    assert path.exists() and len(builds) == 1
    assert not stale.exists()  # left by a killed writer an hour ago
    assert fresh_tmp.exists()  # may be a writer at work
    assert other.exists()  # not a writer's temporary


@pytest.mark.parametrize("points", ["cube", "lat-lon"])
def test_a_cached_mesh_of_co_circular_generators_is_read_back(points, tmp_path, monkeypatch):
    # its zero-length edges are dropped, so V - E + F is not 2 (8 for the cube's corners, 50 here): the valid file had
    # been read as a miss, and the mesh built and written again on every call
    import itertools

    pts = np.array(list(itertools.product([-1.0, 1.0], repeat=3))) if points == "cube" else _lat_lon_points()
    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch, pts)
    assert len(fresh.vertices) - fresh.E + fresh.N != 2
    again = cached()
    assert len(builds) == 1
    for name in type(fresh).ARRAYS:
        np.testing.assert_array_equal(getattr(again, name), getattr(fresh, name))


def test_a_cached_mesh_built_by_another_version_of_the_mesh_code_is_rebuilt(tmp_path, monkeypatch):
    # only the generators and the file FORMAT had keyed the cache: a change to how mesh_from_points derives an array
    # kept serving the old arrays from 32 768 cells on
    from meanfield.geometry.mesh import SphericalMesh

    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch)
    cached()
    assert len(builds) == 1
    assert int(np.load(path)["code"]) == SphericalMesh.CODE_VERSION
    monkeypatch.setattr(SphericalMesh, "CODE_VERSION", SphericalMesh.CODE_VERSION + 1)
    cached()
    assert len(builds) == 2 and int(np.load(path)["code"]) == SphericalMesh.CODE_VERSION
    cached()
    assert len(builds) == 2


@pytest.mark.parametrize(("bad", "message"), [
    ("zero", r"generator points\[60\] = \[0.0, 0.0, 0.0\] is zero; "),
    ("nan", r"generator points\[60\] = \[nan, 0.0, 1.0\] is not finite \(and 1 more rows\)"),
    ("duplicate", r"generators points\[7\] and points\[60\] are the same point"),
    ("near duplicate", r"generators points\[3\] and points\[60\] are the same point"),
])
def test_generators_that_make_no_mesh_are_named_by_row(bad, message):
    # a zero or NaN row had ended in qhull's "SVD did not converge" (after a RuntimeWarning), a duplicate in SciPy's
    # "Duplicate generators present." without its rows
    points = M.fibonacci_points(60)
    extra = {"zero": [[0.0, 0.0, 0.0]], "nan": [[np.nan, 0.0, 1.0], [1.0, np.inf, 0.0]], "duplicate": 2.0 * points[7:8],
             "near duplicate": points[3:4] + 1e-9}[bad]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=message):
            M.mesh_from_points(np.vstack([points, extra]))


@pytest.mark.parametrize("kappa", [1e13, 1e308])
def test_a_mixture_components_kappa_has_init_kappas_range(kappa):
    """(κ = 1e308 had overflowed, with NumPy's warning, to "init.components: the density integrates to zero".)"""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError) as info:
            M.initial_mass(M.fibonacci_mesh(200), "mixture", components=[{"kappa": kappa}])
    assert info.value.key == "init.components[0].kappa"
    assert "must lie in [0, 1e+12]" in str(info.value)
    with pytest.raises(ConfigError, match="integrates to zero"):  # its end is taken (and too narrow for 200 cells)
        M.initial_mass(M.fibonacci_mesh(200), "mixture", components=[{"kappa": 1e12}])


def test_a_smoothed_deposit_of_uniform_atoms_gives_each_unequal_cell_its_area_share():
    # the kernel weighs each cell by its area: uniform atoms deposit m_c = A_c / 4π on a mesh whose areas vary 30x
    # (without the areas the small cells had received up to 7 times their share)
    from meanfield.geometry.sphere import sample_uniform

    mesh = M.mesh_from_points(sample_uniform(400, 3, seed=1))
    assert mesh.areas.max() / mesh.areas.min() > 10
    m = M.deposit_smooth(mesh, sample_uniform(50000, 3, seed=2), width=0.3)
    np.testing.assert_allclose(m, mesh.areas / (4.0 * np.pi), rtol=0.1, atol=0)


def test_a_cached_mesh_of_other_generators_under_the_same_name_is_rebuilt(tmp_path, monkeypatch):
    # a file written for rotated generators (another Fibonacci rule, a foreign file) under the asked name had been
    # served: the mesh's points were then up to 2 away from the asked generators
    from meanfield.geometry.sphere import fibonacci_points

    rotation = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))[0]
    _counted_cache(tmp_path, monkeypatch, points=fibonacci_points(500) @ rotation.T)  # the foreign file
    cached, builds, fresh, path = _counted_cache(tmp_path, monkeypatch)
    assert len(builds) == 1  # a miss: built from the asked generators
    np.testing.assert_allclose(fresh.points, fibonacci_points(500), rtol=0, atol=1e-12)
    np.testing.assert_allclose(cached().points, fibonacci_points(500), rtol=0, atol=1e-12)
    assert len(builds) == 1  # and stored in place of the foreign file
