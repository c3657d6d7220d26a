"""The kernels' thread settings (meanfield.kernels.jit)."""
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from meanfield.kernels.jit import one_blas_thread


def blas_threads() -> list[int]:
    return [entry["num_threads"] for entry in threadpool_info() if entry["user_api"] == "blas"]


def test_one_blas_thread_limits_every_blas_and_restores_it_nested_and_on_error():
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() and set(blas_threads()) == {2}
        with one_blas_thread():
            assert set(blas_threads()) == {1}
            with one_blas_thread():  # nested: nothing to set, nothing restored early
                assert set(blas_threads()) == {1}
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {2}
        with pytest.raises(RuntimeError):
            with one_blas_thread():
                raise RuntimeError("inside")
        assert set(blas_threads()) == {2}
