"""Limited linear reconstruction on spherical Voronoi meshes (meanfield.geometry.reconstruction).

The identities the positivity argument rests on (the sub-triangle decomposition
of each cell average, face values within the neighbouring averages), the
accuracy orders of gradients, face values and edge velocities on smooth fields,
and the second-order quadrature of grid measures against closed-form W2.
"""
from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from scipy.integrate import quad

from meanfield.analysis.transport import w2
from meanfield.geometry.mesh import fibonacci_mesh, icosahedral_mesh, initial_mass
from meanfield.geometry import reconstruction
from meanfield.geometry.reconstruction import LinearReconstruction, reconstruction_of


def _smooth(x):
    return np.exp(2.0 * x[:, 2]) + x[:, 0] * x[:, 1]


def _smooth_gradient(x):
    g = np.column_stack([x[:, 1], x[:, 0], 2.0 * np.exp(2.0 * x[:, 2])])
    return g - np.einsum("nk,nk->n", g, x)[:, None] * x


def _tangent_field(x):
    """A smooth tangent field: P⊥(e_z) cos(x_1)."""
    return (np.eye(3)[2][None] - x[:, 2:] * x) * np.cos(x[:, :1])


@pytest.mark.parametrize("msh", [fibonacci_mesh(700), icosahedral_mesh(3)], ids=repr)
@pytest.mark.parametrize("limiter", ["barth-jespersen", "none"])
def test_each_cell_average_is_the_theta_weighted_mean_of_its_face_values(msh, limiter, rng):
    rec = LinearReconstruction(msh, limiter=limiter)
    np.testing.assert_allclose(msh.cell_sum(rec.theta), 1.0, rtol=1e-13)
    density = rng.uniform(0.0, 2.0, msh.N) * (rng.uniform(size=msh.N) > 0.2)
    faces = rec.face_values(density)
    np.testing.assert_allclose(msh.cell_sum(rec.theta * faces), density, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("msh", [fibonacci_mesh(700), icosahedral_mesh(3)], ids=repr)
def test_limited_face_values_stay_between_the_neighbouring_averages(msh, rng):
    rec = LinearReconstruction(msh)
    density = np.exp(3.0 * rng.standard_normal(msh.N)) * (rng.uniform(size=msh.N) > 0.3)
    faces = rec.face_values(density)
    hi, lo = density.copy(), density.copy()
    for a, b in ((0, 1), (1, 0)):
        np.maximum.at(hi, msh.edges[:, a], density[msh.edges[:, b]])
        np.minimum.at(lo, msh.edges[:, a], density[msh.edges[:, b]])
    scale = density.max()
    assert np.all(faces <= hi[msh.edges] + 1e-13 * scale)
    assert np.all(faces >= lo[msh.edges] - 1e-13 * scale)
    assert faces.min() >= -1e-13 * scale
    # the unlimited reconstruction of the same data overshoots: the limiter is doing something
    raw = LinearReconstruction(msh, limiter="none").face_values(density)
    assert raw.min() < -1e-3 * scale


def _orders(errors):
    return [math.log(a / b) / math.log(2.0) for a, b in zip(errors, errors[1:])]  # h halves per level


def test_gradient_is_first_order_and_face_values_and_edge_velocity_second_order():
    grad, face, edge = [], [], []
    for N in (500, 2000, 8000):
        msh = fibonacci_mesh(N)
        rec = LinearReconstruction(msh, limiter="none")
        q = msh.centroids
        g = rec.gradient(_smooth(q))
        grad.append(np.abs(g - _smooth_gradient(q)).max())
        values = _smooth(q)[msh.edges] + np.einsum("esk,esk->es", rec.centroid_offsets, g[msh.edges])
        face.append(np.abs(values - _smooth(msh.edge_midpoints)[:, None]).max())
        u = rec.edge_velocity(_tangent_field(q))
        exact = np.einsum("ek,ek->e", _tangent_field(msh.edge_midpoints), msh.edge_normals)
        edge.append(np.abs(u - exact).max())
    assert min(_orders(grad)) > 0.7, grad
    assert min(_orders(face)) > 1.8, face
    assert min(_orders(edge)) > 1.5, edge
    # linear data: the tangent gradient of z is e_z - z q, up to the curvature of the stencil
    msh = fibonacci_mesh(8000)
    q = msh.centroids
    g = LinearReconstruction(msh).gradient(q[:, 2])
    assert np.abs(g - (np.eye(3)[2] - q[:, 2:] * q)).max() < 5 * msh.h


@pytest.mark.parametrize("msh", [fibonacci_mesh(700), icosahedral_mesh(3)], ids=repr)
def test_edge_velocity_is_the_mean_of_both_sides_reconstructions(msh, rng):
    # the sparse edge matrix against the formula gathered edge by edge: gradients of the three
    # components, each side's value at the midpoint, the normal component of their mean
    rec = LinearReconstruction(msh)
    X = rng.standard_normal((msh.N, 3))
    g = np.stack([rec.gradient(X[:, c]) for c in range(3)], axis=2)  # (N, 3 [direction], 3 [component])
    sides = X[msh.edges] + np.einsum("esk,eskc->esc", rec.centroid_offsets, g[msh.edges])
    expected = np.einsum("ec,ec->e", 0.5 * sides.sum(axis=1), msh.edge_normals)
    np.testing.assert_allclose(rec.edge_velocity(X), expected, rtol=0, atol=1e-13 * np.abs(expected).max())


def test_quadrature_is_positive_and_keeps_every_cell_mass(rng):
    msh = fibonacci_mesh(900)
    mass = rng.uniform(size=msh.N) ** 4 * (rng.uniform(size=msh.N) > 0.5)
    mass /= mass.sum()
    nodes, weights = reconstruction_of(msh).quadrature(mass)
    assert nodes.shape == (6 * msh.E, 3) and weights.shape == (6 * msh.E,)
    assert weights.min() >= 0.0
    np.testing.assert_allclose(np.linalg.norm(nodes, axis=1), 1.0, rtol=1e-14)
    per_cell = msh.cell_sum(weights.reshape(msh.E, 2, 3))
    np.testing.assert_allclose(per_cell, mass, rtol=1e-12, atol=1e-18)
    assert np.array_equal(msh.cell_of(nodes).reshape(msh.E, 2, 3)[..., 0], msh.edges)  # every node in its own cell
    assert reconstruction_of(msh) is reconstruction_of(msh)


def test_w2_of_the_uniform_measure_to_the_poles_converges_to_the_closed_form():
    """Uniform on S² against ½δ_N + ½δ_S: each hemisphere goes to its pole, W2² = ∫_0^{π/2} θ² sin θ dθ = π − 2."""
    exact = math.sqrt(math.pi - 2.0)
    poles = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    errors = []
    for N in (500, 2000, 8000):
        msh = fibonacci_mesh(N)
        x, a = reconstruction_of(msh).quadrature(initial_mass(msh, "uniform"))
        errors.append(abs(w2(x, poles, a, np.array([0.5, 0.5])) - exact))
    assert errors[0] < 2e-6 and errors[-1] < 2e-8, errors
    assert errors[0] > errors[1] > errors[2], errors


def test_w2_of_a_resolved_cluster_to_its_atom_has_no_cell_size_floor():
    """vMF(y, κ = 400) (width 0.05) against δ_y: W2² = ∫ θ² ρ(θ) 2π sin θ dθ.

    The cell-centre atoms of the same masses miss the spread inside every cell, an
    O(h²) error in W2² that is large next to W2² itself; the reconstruction keeps it."""
    kappa = 400.0
    y = np.array([0.6, 0.0, 0.8])
    norm = kappa / (2.0 * math.pi * (1.0 - math.exp(-2.0 * kappa)))
    exact = math.sqrt(quad(lambda t: t * t * norm * math.exp(kappa * (math.cos(t) - 1.0)) * 2.0 * math.pi * math.sin(t),
                           0.0, math.pi, points=[0.05, 0.1, 0.2], limit=200)[0])
    quad_err, atom_err = [], []
    for N in (8000, 32000):
        msh = fibonacci_mesh(N)
        mass = initial_mass(msh, "vmf", mean=list(y), kappa=kappa)
        x, a = reconstruction_of(msh).quadrature(mass)
        quad_err.append(abs(w2(x, y[None], a, np.ones(1)) - exact))
        atom_err.append(abs(w2(msh.centroids, y[None], mass, np.ones(1)) - exact))
    assert quad_err[-1] < 2e-5 and quad_err[-1] < atom_err[-1] / 20, (quad_err, atom_err)
    assert quad_err[0] / quad_err[1] > 3.5, quad_err  # resolved from 8000 cells on (h = 0.04 against a width of 0.05)


def test_half_space_mass_splits_a_uniform_density_exactly(rng):
    """Uniform masses: every half-sphere holds 1/2, whatever the plane; the side of each centroid errs by 1e-3."""
    msh = fibonacci_mesh(2000)
    rec = reconstruction_of(msh)
    mass = initial_mass(msh, "uniform")
    for normal in rng.normal(size=(5, 3)):
        np.testing.assert_allclose(rec.half_space_mass(mass, normal), 0.5, rtol=0, atol=1e-10)
        np.testing.assert_allclose(rec.half_space_mass(mass, normal) + rec.half_space_mass(mass, -normal), 1.0,
                                   rtol=0, atol=1e-13)


@pytest.mark.parametrize("normal", [np.zeros(3), [np.nan, 0.0, 1.0], [0.0, np.inf, 1.0], [0.0, 0.0, 1e-320], [1.0, 0.0]])
def test_half_space_mass_refuses_a_normal_with_no_direction(normal):
    """A zero, non-finite or subnormal normal had given a mass of 0 (NaN comparisons, or 0/0), as if the half-sphere
    were empty."""
    msh = fibonacci_mesh(500)
    with pytest.raises(ValueError, match="normal"):
        reconstruction_of(msh).half_space_mass(msh.areas.copy(), normal)


def test_half_space_mass_of_a_huge_normal_is_that_of_its_direction():
    msh = fibonacci_mesh(500)
    rec, mass = reconstruction_of(msh), msh.areas.copy()
    assert rec.half_space_mass(mass, [1e308, 1e308, 0.0]) == pytest.approx(rec.half_space_mass(mass, [1.0, 1.0, 0.0]),
                                                                          rel=1e-14)


def test_half_space_mass_of_a_vmf_density_converges_at_second_order():
    r"""vMF(u, κ = 6) on {⟨x, n⟩ > 0}: p = κ/(2 sinh κ) ∫_0^{π/2} e^{κ cos α cos θ} I₀(κ sin α sin θ) sin θ dθ."""
    from scipy.special import i0

    kappa = 6.0
    u = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
    n = np.array([0.7, 0.2, -0.1]) / np.linalg.norm([0.7, 0.2, -0.1])
    ca = float(u @ n)
    sa = math.sqrt(1.0 - ca * ca)
    exact = kappa / (2.0 * math.sinh(kappa)) * quad(
        lambda t: math.exp(kappa * ca * math.cos(t)) * i0(kappa * sa * math.sin(t)) * math.sin(t),
        0.0, math.pi / 2, epsabs=1e-15, epsrel=1e-14)[0]
    errors, by_centroid = [], []
    for N in (2000, 32000):
        msh = fibonacci_mesh(N)
        mass = msh.integrate(lambda x: np.exp(kappa * (x @ u - 1.0)))
        mass /= mass.sum()
        errors.append(abs(reconstruction_of(msh).half_space_mass(mass, n) - exact))
        by_centroid.append(abs(mass[msh.centroids @ n > 0].sum() - exact))
    assert errors[0] < 5e-6 and errors[1] < errors[0] / 16, errors  # order ≥ 2 in h (h halves twice)
    assert errors[1] < by_centroid[1] / 100, (errors, by_centroid)


def test_the_module_docstring_examples_pass():
    """The class example had claimed an error below 0.01 for the gradient of z on 2000 cells, where it is 0.020
    (the gradient is exact only for data linear in the tangent displacements); nothing ran the examples."""
    result = doctest.testmod(reconstruction, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_gradient_is_exact_for_data_linear_in_the_tangent_displacements(rng):
    msh = fibonacci_mesh(700)
    rec = LinearReconstruction(msh)
    q = msh.centroids
    for i in rng.choice(msh.N, 20, replace=False):
        nbrs = msh.neighbours(i)
        d = q[nbrs] - q[i]
        d -= (d @ q[i])[:, None] * q[i]
        t = rng.normal(size=3)
        t -= (t @ q[i]) * q[i]
        f = np.full(msh.N, 3.0)
        f[nbrs] += d @ t
        np.testing.assert_allclose(rec.gradient(f)[i], t, atol=1e-12)
