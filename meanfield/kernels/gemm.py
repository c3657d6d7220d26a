r"""Matrix products from compiled code, without the GIL: :math:`C \leftarrow \operatorname{op}(A)\operatorname{op}(B) + \gamma C` on row-major arrays.

.. math::

    C \leftarrow \operatorname{op}(A)\,\operatorname{op}(B) + \gamma\,C,\qquad
    \operatorname{op}(M) \in \{M, M^\top\},\ \gamma \in \{0, 1\}

:func:`gemm_into` calls the ``sgemm`` / ``dgemm`` of SciPy's public Cython BLAS interface
(``scipy.linalg.cython_blas``, the OpenBLAS that SciPy ships) from a numba kernel.  Two things
come of it that ``np.matmul`` cannot give:

* **accumulation in the product** (:math:`\gamma = 1`): the symmetric tiles of
  :mod:`meanfield.kernels.blas` add their value products into the accumulators inside the
  GEMM, instead of a separate pass over a fresh product (at n = 2048, d = 384 in float32 those
  passes had taken about 8 % of a one-thread call, and more with two threads sharing memory);
* **a whole tile in one compiled call**: score GEMM, ``exp`` and value GEMMs run with the GIL
  released throughout, instead of handing it back between NumPy calls.

The function's address is looked up in Python (:data:`GEMM_ADDRESS`) and passed to the
compiled code as an integer (:func:`_fortran_gemm`), so that the kernels stay in numba's disk
cache (an address frozen into cached machine code would be wrong in the next process).
Row-major arrays are column-major transposes, so :math:`C = \operatorname{op}(A)\operatorname{op}(B)`
is computed as :math:`C^\top = \operatorname{op}(B)^\top \operatorname{op}(A)^\top` in Fortran's
convention; every operand needs unit stride along its rows, and a row stride at least its row's length (a padded
row, as the kernels' slices of wider buffers have, is fine; a reversed or broadcast view is refused).

BLAS threads: the library is held to one thread with the others in
:func:`meanfield.kernels.jit.one_blas_thread` (threadpoolctl sees SciPy's OpenBLAS, which this
module loads).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import get_cython_function_address, intrinsic, overload

from meanfield.kernels.jit import jit

__all__ = ["GEMM_ADDRESS", "gemm_address", "gemm_into"]

#: the Fortran ``sgemm`` / ``dgemm`` of ``scipy.linalg.cython_blas``, by dtype character
GEMM_ADDRESS: dict[str, int] = {
    "f": get_cython_function_address("scipy.linalg.cython_blas", "sgemm"),
    "d": get_cython_function_address("scipy.linalg.cython_blas", "dgemm"),
}


def gemm_address(dtype: type | np.dtype) -> int:
    """The address of the GEMM of ``dtype`` (float32 or float64), for :func:`gemm_into`."""
    return GEMM_ADDRESS[np.dtype(dtype).char]


@intrinsic
def _fortran_gemm(typingctx, address, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """Call the Fortran GEMM at ``address``; every argument is an address (an integer), as Fortran takes them by reference."""
    arguments = (address, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    if not all(isinstance(arg, types.Integer) for arg in arguments):
        return None
    signature = types.void(*arguments)

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
        byte_pointer = ir.IntType(8).as_pointer()
        function = builder.inttoptr(args[0], ir.FunctionType(ir.VoidType(), [byte_pointer] * 13).as_pointer())
        builder.call(function, [builder.inttoptr(arg, byte_pointer) for arg in args[1:]])
        return context.get_dummy_value()

    return signature, codegen


def _one_float_dtype(a, b, c):  # type: ignore[no-untyped-def]
    """Whether ``a``, ``b`` and ``c`` have one dtype, float32 or float64 (in compiled code: numba compares no dtypes)."""
    return a.dtype == b.dtype == c.dtype and a.dtype in (np.float32, np.float64)


@overload(_one_float_dtype)
def _one_float_dtype_typed(a, b, c):  # type: ignore[no-untyped-def]
    same = a.dtype == b.dtype == c.dtype and a.dtype in (types.float32, types.float64)  # known from the types
    return lambda a, b, c: same


@jit
def _leading_dimension(shape, strides, size):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """BLAS's leading dimension of a row-major operand (its row stride in elements), or -1 where BLAS cannot take it:
    a row stride that is not a multiple of ``size``, or, with more than one row, below the row's length (zero or
    negative: a broadcast or reversed view, which OpenBLAS had refused only by a message on stdout, leaving ``c``)."""
    if shape[0] <= 1:
        return max(1, shape[1])  # one row: its stride is never used
    if strides[0] % size != 0 or strides[0] < max(1, shape[1]) * size:
        return -1
    return strides[0] // size


@jit
def gemm_into(a, b, c, accumulate, transpose_a, transpose_b, address):  # pragma: no cover - compiled
    r"""``c ← op(a) @ op(b)`` (``accumulate``: ``c ← op(a) @ op(b) + c``), ``op(a) = aᵀ`` if ``transpose_a``, ``op(b) = bᵀ`` if ``transpose_b``.

    ``a`` is (m, k), or (k, m) with ``transpose_a``; ``b`` (k, n), or (n, k) with ``transpose_b``;
    ``c`` (m, n); all of the same float dtype (float32 or float64), each with unit stride along its rows and a row
    stride of at least its row's length.  ``address`` is :func:`gemm_address` of that dtype.

    Raises
    ------
    ValueError
        Shapes that do not match, mixed or non-float dtypes, or strides that BLAS cannot take.
    """
    if not _one_float_dtype(a, b, c):
        raise ValueError("gemm_into: a, b and c must have one dtype, float32 or float64 (mixed dtypes had been read as c's)")
    m, n = c.shape
    k = b.shape[1] if transpose_b else b.shape[0]
    size = c.itemsize
    rows_a, inner_a = (a.shape[1], a.shape[0]) if transpose_a else (a.shape[0], a.shape[1])
    if rows_a != m or inner_a != k or (b.shape[0] if transpose_b else b.shape[1]) != n:
        raise ValueError("gemm_into: the shapes of op(a), op(b) and c do not match")
    if (a.strides[1] != size and a.shape[1] > 1) or (b.strides[1] != size and b.shape[1] > 1) or (c.strides[1] != size and n > 1):
        raise ValueError("gemm_into: every operand needs unit stride along its rows")
    ints = np.empty(8, np.int32)  # transa, transb (as bytes), m, n, k, ldb, lda, ldc
    # Fortran sees a row-major array as its transpose, and computes cᵀ (n × m) = op(b)ᵀ (n × k) · op(a)ᵀ (k × m)
    ints[0] = 84 if transpose_b else 78  # 'T' / 'N'
    ints[1] = 84 if transpose_a else 78
    ints[2] = n
    ints[3] = m
    ints[4] = k
    ldb = _leading_dimension(b.shape, b.strides, size)
    lda = _leading_dimension(a.shape, a.strides, size)
    ldc = _leading_dimension(c.shape, c.strides, size)
    if lda < 0 or ldb < 0 or ldc < 0:
        raise ValueError("gemm_into: every operand needs a row stride of at least its row's length, in whole elements "
                         "(not a reversed or broadcast view); pass a copy")
    ints[5] = ldb
    ints[6] = lda
    ints[7] = ldc
    scalars = np.empty(2, c.dtype)
    scalars[0] = 1.0
    scalars[1] = 1.0 if accumulate else 0.0
    i = np.int64(ints.ctypes.data)  # int64, not uintp: uintp + int is a float in numba
    s = np.int64(scalars.ctypes.data)
    _fortran_gemm(np.int64(address), i, i + 4, i + 8, i + 12, i + 16, s, np.int64(b.ctypes.data), i + 20,
                  np.int64(a.ctypes.data), i + 24, s + size, np.int64(c.ctypes.data), i + 28)
    # numba may free an array right after its last use: these two hold the call's arguments, so use them after it
    ints[0] = 0
    scalars[0] = 0.0
