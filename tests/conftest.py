"""Shared test fixtures: a seeded rng, the Agg backend, and the ``slow`` marker."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow experiment: run with --runslow (its --quick form runs by default)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread():
    """Tests check results, not speed: keep BLAS on one thread so that the suite's
    timing does not depend on how loaded the 2 cores are (threaded BLAS on small
    products is 10–200× slower under load)."""
    from meanfield.kernels.jit import one_blas_thread

    with one_blas_thread():
        yield


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261130)
