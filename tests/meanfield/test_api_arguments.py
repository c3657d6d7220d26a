"""Bad arguments through the Python API (heads, samplers, theory, ``Model.velocity``, ``Run.diagnose``): refused with
a message naming the argument, never NumPy's or Python's own error, and never a silent wrong answer."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import meanfield as mf
from meanfield.errors import ConfigError
from meanfield.geometry import mesh as meshes
from meanfield.geometry import sphere


@pytest.mark.parametrize("scale", [1e-200, 1e-3, 1.0, 1e155, 1e300])
def test_a_vmf_mean_keeps_its_direction_at_any_scale(scale: float) -> None:
    # the norm of [0, 0, 1e155] had overflowed and the mean become 0 (a uniform sample); [0, 0, 1e-200] was refused
    x = sphere.sample_vmf(2000, 3, mean=[0.0, 0.0, scale], kappa=50.0, seed=1)
    np.testing.assert_array_equal(x, sphere.sample_vmf(2000, 3, mean=[0.0, 0.0, 1.0], kappa=50.0, seed=1))
    assert x[:, 2].mean() > 0.97
    masses = meshes.initial_mass(meshes.fibonacci_mesh(200), "vmf", mean=[0.0, 0.0, scale], kappa=4.0)
    np.testing.assert_allclose(masses, meshes.initial_mass(meshes.fibonacci_mesh(200), "vmf", mean=[0, 0, 1], kappa=4.0))


@pytest.mark.parametrize("mean", [[0.0, 0.0, 0.0], [0.0, 0.0, np.inf], [np.nan, 0.0, 1.0], [1.0, 0.0]])
def test_a_vmf_mean_that_has_no_direction_is_refused(mean: list[float]) -> None:
    with pytest.raises(ValueError, match="mean must be a non-zero finite vector"):
        sphere.sample_vmf(5, 3, mean=mean)
    with pytest.raises(ConfigError, match="init.mean"):
        meshes.initial_mass(meshes.fibonacci_mesh(50), "vmf", mean=mean)


_COMPLEX_CALLS = {  # NumPy had dropped the imaginary parts with a mere ComplexWarning (a complex λ: taken by modulus)
    "Q": lambda: mf.heads.Head(Q=np.eye(3) * (1 + 1j), K=np.eye(3), V=np.eye(3)),
    "lam": lambda: mf.heads.scalar(1 + 1j, 3),
    "B": lambda: mf.heads.HeadStack(np.eye(3)[None] * (1 + 1j), np.eye(3)[None]),
    "w": lambda: mf.heads.HeadStack(np.eye(3)[None], np.eye(3)[None], np.array([1 + 1j])),
    "weights": lambda: mf.heads.stack_heads([mf.heads.identity(3)], weights=np.array([1 + 1j])),
    "mean": lambda: mf.sample_vmf(3, 3, mean=np.array([0, 0, 1 + 5j])),
    "centers": lambda: sphere.sample_clusters(3, 3, centers=np.eye(3) * 1j),
    "init.mean": lambda: meshes.initial_mass(meshes.fibonacci_mesh(50), "vmf", mean=np.array([0, 0, 1 + 5j])),
    "weights ": lambda: mf.Model(d=3, beta=4.0).velocity(mf.sample_uniform(10, 3), 0.0, weights=np.full(10, 0.1) + 1j),
    "lambdas": lambda: mf.theory.late_rate(np.array([1 + 5j, 0.5])),
    "Bs": lambda: mf.theory.overlap_matrix(np.stack([np.eye(3) * (1 + 2j), np.eye(3)])),
    "xs": lambda: mf.theory.fit_linear(np.array([1, 2, 3 + 1j]), [1, 2, 3]),
    "t": lambda: mf.theory.solve_equiangular(0.1, np.array([0, 1 + 1j]), lambdas=[1.0], beta=1.0, n=3),
    "alpha": lambda: mf.theory.beta_star(2, 16, np.complex128(1 + 1j)),
}


@pytest.mark.parametrize("name", list(_COMPLEX_CALLS))
def test_complex_numbers_are_refused_naming_the_argument(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old cast's ComplexWarning is no TypeError or ValueError: it fails the test
        with pytest.raises((TypeError, ValueError)) as caught:
            _COMPLEX_CALLS[name]()
    message = str(caught.value)
    assert message.startswith(name.strip()) and "real" in message, message
