"""Shared test fixtures: a seeded rng, the Agg backend, the ``slow`` marker, the number of test processes, and an
interactive SIGINT."""
from __future__ import annotations

import os
import signal

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


#: most test processes ``pytest`` starts (``-n auto`` in setup.cfg; pytest-xdist, each test file in one process): the
#: longest file (the quick figures, about 5 of the suite's 15 minutes on one core) bounds the wall time from 3
#: processes on, and each process compiles the kernels it uses (on a clean clone) and holds its own memory
MAX_TEST_PROCESSES = 8


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist: without it, or with -p no:xdist, pluggy had refused the conftest)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one process per core this process may run on (not the host's count), at most
    :data:`MAX_TEST_PROCESSES`; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` or ``-n N`` choose otherwise (``-n 0``: one process)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist reads it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_TEST_PROCESSES))


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


@pytest.fixture
def interactive_sigint():
    """SIGINT as an interactive Python has it (``KeyboardInterrupt``): pytest-xdist's workers ignore it, and a signal
    that a run re-raises once its file is closed is then ignored too."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _flip_lowest_bit(path, frame: int) -> None:
    """Flip the lowest mantissa bit of the first token's first coordinate of ``frame`` in a run file: damage that no
    norm check sees, only the frame's checksum."""
    import h5py

    with h5py.File(path, "r") as f:
        offset = f["x"].id.get_chunk_info(frame).byte_offset
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ 1]))


@pytest.fixture
def flip_lowest_bit():
    """:func:`_flip_lowest_bit`: ``flip_lowest_bit(path, frame)`` damages one frame of a run file."""
    return _flip_lowest_bit
