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


_BAD_ARGUMENTS = [  # NumPy's or Python's own errors, or AttributeErrors, had named nothing
    ("d", lambda: mf.heads.identity(2.5)),
    ("d", lambda: mf.heads.identity("3")),
    ("d", lambda: mf.heads.identity(-1)),
    ("lam", lambda: mf.heads.scalar(True, 3)),
    ("lam", lambda: mf.heads.scalar(None, 3)),
    ("d", lambda: mf.heads.scalar(1.0, 0)),
    ("d", lambda: mf.heads.random_head(None)),
    ("d", lambda: mf.heads.random_head(float("nan"))),
    ("heads", lambda: mf.heads.stack_heads("abc")),
    ("heads[0]", lambda: mf.heads.stack_heads([1])),
    ("Q", lambda: mf.heads.Head(Q="abc", K=np.eye(3), V=np.eye(3))),
    ("model.heads[0]", lambda: mf.heads.head_from_spec(None, d=3)),
    ("d", lambda: mf.heads.head_from_spec({}, d=None)),
    ("mesh", lambda: meshes.initial_mass(None, "vmf")),
    ("init.kind", lambda: meshes.initial_mass(meshes.fibonacci_mesh(50), {})),
    ("init.kappa", lambda: meshes.initial_mass(meshes.fibonacci_mesh(50), "vmf", kappa=10**400)),
    ("kappa", lambda: mf.sample_vmf(5, 3, kappa=None)),
    ("kappa", lambda: mf.sample_vmf(5, 3, kappa=10**400)),
    ("gamma", lambda: mf.sample_equiangular(4, 4, gamma=None)),
    ("spread", lambda: sphere.sample_clusters(4, 3, spread=None)),
    ("unknown initial measure", lambda: mf.sample({}, 4, 3)),
    ("seed", lambda: meshes.sample_initial("uniform", 4, seed="a")),
]


@pytest.mark.parametrize(("name", "call"), _BAD_ARGUMENTS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(_BAD_ARGUMENTS)])
def test_bad_arguments_are_refused_naming_them(name: str, call) -> None:
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    assert str(caught.value).startswith(name), str(caught.value)


@pytest.mark.parametrize("sampler", ["uniform", "vmf", "orthogonal", "fibonacci", "clusters", "equiangular"])
@pytest.mark.parametrize("seed", ["a", -1, 2.5, True])
def test_every_sampler_checks_its_seed(sampler: str, seed: object) -> None:
    params = {"gamma": 0.1} if sampler == "equiangular" else {}
    n = 4 if sampler == "fibonacci" else 3
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got"):
        mf.sample(sampler, n, 3, seed=seed, **params)
    mf.sample(sampler, n, 3, seed=np.int64(7), **params)  # NumPy's integers and None are seeds
    mf.sample(sampler, n, 3, seed=None, **params)


@pytest.mark.parametrize("kappa", [1e16, 1e20, 1e155, 1e308, 10**30])
def test_a_vmf_sample_of_a_huge_kappa_is_near_its_mean(kappa: float) -> None:
    # κ ≥ 1e16 had hung (1 - x0² rounded to 0 and every candidate was rejected), κ > 1.3e154 overflowed κ²; the
    # points keep their spread √(2/κ) (test_sphere checks its law)
    x = sphere.sample_vmf(50, 3, mean=[1.0, 0.0, 0.0], kappa=kappa, seed=0)
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=0, atol=4e-16)
    assert np.max(np.linalg.norm(x[:, 1:], axis=1)) <= 10 * np.sqrt(2 / float(kappa))


def test_a_vmf_sample_of_an_ordinary_kappa_keeps_its_draws() -> None:
    x = sphere.sample_vmf(4, 3, mean=[0.0, 0.6, 0.8], kappa=4.0, seed=3)
    assert x[0].tolist() == [0.2923817106728964, 0.32577637530684156, 0.8991010446862614]  # bit for bit as before


@pytest.mark.parametrize("H", [1e308, 1.7e308, 10**30])
def test_beta_star_of_a_huge_head_count_is_a_number(H: float) -> None:
    # c*(H) had overflowed to 0 above H ≈ 9e307 and beta_star been 'math domain error'
    assert mf.theory.c_star(H) > 0
    assert mf.theory.beta_star(H, 3, 0.5) == pytest.approx(mf.theory.beta_star_numeric(H, 3, 0.5), rel=1e-12)


@pytest.fixture(scope="module")
def small_run():
    return mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05),
                    t_final=0.3, save_every=0.05)


@pytest.mark.parametrize(("option", "value"), [("stride", 2.5), ("stride", 0), ("tol", None), ("tol", float("nan")),
                                               ("tol", -1.0), ("fd_points", 5.0), ("fd_points", 4), ("fd_points", 1)])
def test_diagnose_checks_its_options(small_run, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{option} must be"):
        small_run.diagnose(**{option: value})


def test_numpy_idioms_are_taken_as_numbers_and_seeds():
    # (found in review) a Generator, a SeedSequence or a list of ints as seed, and 0-d arrays as numbers, had become
    # refusals with the argument checks; a bool seed and negative entries stay refused
    assert mf.sample_uniform(2, 3, seed=np.random.default_rng(0)).shape == (2, 3)
    np.testing.assert_array_equal(mf.sample_uniform(2, 3, seed=[1, 2]), mf.sample_uniform(2, 3, seed=np.random.SeedSequence([1, 2])))
    assert mf.sample_vmf(2, 3, kappa=np.array(4.0)).shape == (2, 3)
    assert mf.heads.identity(np.array(3)).Q.shape == (3, 3) and mf.heads.scalar(np.array(4.0), 3).V[0, 0] == 4.0
    for bad, words in ((True, "seed must be an integer >= 0"), ([1, -2], r"seed\[1\] must be an integer >= 0")):
        with pytest.raises(ValueError, match=words):
            mf.sample_uniform(2, 3, seed=bad)


def test_a_mesh_tokens_and_a_method_that_are_no_such_thing_are_named():
    # (found by a fuzz) mesh="abc" had been an AttributeError on 'N', velocity(None) an IndexError of its shape, and
    # method="RK4" had not said which argument
    with pytest.raises(TypeError, match=r"mesh must be a SphericalMesh .*got str"):
        mf.Problem(mf.Model(d=3, beta=1.0), np.full(10, 0.1), mesh="abc")
    with pytest.raises(ValueError, match=r"x \(the tokens\) must be an \(n, d\) array, got NoneType"):
        mf.Model(d=3, beta=4.0).velocity(None, 0.0)
    with pytest.raises(ValueError, match=r"^method: unknown integrator 'RK4'"):
        mf.ParticleSolver(method="RK4")


_STRING_FLAGS = {
    "aligned": lambda: mf.heads.random_head(3, aligned="False"),
    "log": lambda: mf.w2(sphere.sample_uniform(4, 3, seed=0), sphere.sample_uniform(4, 3, seed=1), log="no"),
}


@pytest.mark.parametrize("name", list(_STRING_FLAGS))
def test_a_string_for_a_flag_is_refused_naming_it(name: str) -> None:
    # a string is true to Python: aligned="False" had aligned V, log="no" had returned (value, log)
    with pytest.raises(ValueError, match=f"^{name} must be True or False, got '"):
        _STRING_FLAGS[name]()


def test_numpy_bools_are_flags() -> None:
    x, y = sphere.sample_uniform(4, 3, seed=0), sphere.sample_uniform(4, 3, seed=1)
    assert mf.w2(x, y, log=np.False_) == mf.w2(x, y)
    np.testing.assert_array_equal(mf.heads.random_head(3, aligned=np.True_).V, mf.heads.random_head(3, aligned=True).V)
