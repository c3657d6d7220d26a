"""Bad arguments through the Python API (heads, samplers, theory, ``Model.velocity``, ``Run.diagnose``): refused with
a message naming the argument, never NumPy's or Python's own error, and never a silent wrong answer."""
from __future__ import annotations

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
