r"""Register-blocked GEMM panels written in LLVM IR: the inner loop of :mod:`meanfield.kernels.flash`.

A *panel* computes a block of ``rows × (vectors · lanes)`` results held in vector registers
through the whole sum,

.. math::

    C_{r,\ell} \leftarrow (C_{r,\ell}\,+)\; \sum_{p<k} b_{p,r}\,a_{p,\ell},
    \qquad r < \texttt{rows},\ \ell < \texttt{vectors}\cdot\texttt{lanes},

where each step ``p`` loads ``vectors`` contiguous vectors of ``a`` (its row ``p``), broadcasts
``rows`` scalars of ``b``, and issues ``rows · vectors`` fused multiply-adds.  ``a``'s rows are
``lda`` elements apart; ``b``'s element ``(p, r)`` is at ``b + p·sbp + r·sbr`` (any strides, so that
the same panel reads the keys' rows, a tile of exponentials or its transpose without copying); ``C``'s
rows are ``ldc`` apart.  Every address is an integer (``ndarray.ctypes.data`` plus a byte offset)
and nothing is checked: the callers in :mod:`meanfield.kernels.flash` own the bounds.  The ``k`` terms
are summed apart and added to ``C`` once, at the end: a kernel that adds many panels' sums into ``C``
sums blocks of ``k`` terms, not one long chain (at n = 4096, d = 32 in float32 the flash kernel's error
against float64, relative to the largest velocity, went from 1.1e-6 to 2.1e-7 with B = I and from 2.4e-6
to 3.5e-7 with a rotation: below the OpenBLAS path's 3.2e-7 and 5.5e-7; the time did not change beyond the
machine's noise).  A panel may store :math:`e^{C}` instead of :math:`C` (:func:`exp_vector`, on
the registers that hold the sums).

Why not BLAS: the attention tiles are small (32 queries × 192 keys × ``d + 2``), and OpenBLAS
packs both operands on every call, which on such tiles cost more than the products (a flash
loop over ``sgemm`` measured 3× slower than whole-row-block GEMMs).  These panels read their
operands where they lie.  Measured alone on one core of an AVX-512 Xeon (float32, operands in L1/L2):
118–168 GFLOP/s against 123–162 for OpenBLAS's ``sgemm`` on whole matrices.

The lanes follow the element type of the ``like`` array passed first (16 float32 or 8 float64
numbers per 512-bit vector); LLVM lowers the 512-bit vectors to two 256-bit halves on a processor
without AVX-512 (correct, but then a ``rows × vectors`` block may not fit its 16 registers:
:data:`meanfield.kernels.flash.FLASH_CPU` routes such machines to the BLAS path).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from meanfield.kernels import fused as constants64  # the scalar float64 exp's constants, bit for bit
from meanfield.kernels import fused32 as constants32  # the scalar float32 exp's constants, bit for bit

__all__ = ["VECTOR_BYTES", "lanes", "make_panel", "exp32_vector", "exp64_vector", "exp_vector", "score_exp_panel", "score_exp_panel_tail", "sum_panel", "value_panel", "value_panel_half", "value_panel_wide", "value_panel_wide_half", "weighted_rows"]

#: bytes per vector register (AVX-512)
VECTOR_BYTES = 64


def lanes(itemsize: int) -> int:
    """Numbers per vector for elements of ``itemsize`` bytes (16 float32, 8 float64)."""
    return VECTOR_BYTES // itemsize


def _fma(builder: Any, vector: Any, width: int, itemsize: int) -> Any:
    """LLVM's fused multiply-add on ``vector`` (declared in the module once)."""
    name = f"llvm.fma.v{width}{'f32' if itemsize == 4 else 'f64'}"
    return builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(vector, [vector] * 3), name)


def exp32_vector(builder: Any, z: Any) -> Any:
    r"""IR for the float32 ``exp`` of a vector of ``z ≤ 0`` (0 below -87, NaN kept), lane by lane.

    The steps of :func:`meanfield.kernels.fused32.exp32_nonpositive_scalar`, on whole 512-bit
    vectors (numba's loops use 256-bit ones): Cody–Waite reduction with
    :math:`k = \mathrm{round}(z\log_2 e)`, the degree-7 Taylor polynomial on
    :math:`|r| \le \ln 2/2` by Horner's rule in fused multiply-adds, and :math:`2^k` from the exponent bits.
    """
    vector = z.type
    width = vector.count
    ints = ir.VectorType(ir.IntType(32), width)
    fma = _fma(builder, vector, width, 4)

    def splat(value: float) -> Any:
        return ir.Constant(vector, [float(np.float32(value))] * width)

    zmin = splat(constants32._ZMIN)
    keep = builder.uitofp(builder.fcmp_ordered(">=", z, zmin), vector)  # 0 below -87 (and for NaN, whose product stays NaN)
    z = builder.select(builder.fcmp_ordered("<", z, zmin), zmin, z)
    k = builder.fptosi(builder.call(fma, [z, splat(constants32._LOG2E), splat(-constants32._HALF)]), ints)  # z ≤ 0: truncating rounds
    kf = builder.sitofp(k, vector)
    r = builder.call(fma, [kf, splat(-constants32._LN2_HI), z])
    r = builder.call(fma, [kf, splat(-constants32._LN2_LO), r])
    p = splat(constants32._C7)
    for c in (constants32._C6, constants32._C5, constants32._C4, constants32._C3, constants32._C2, constants32._ONE, constants32._ONE):
        p = builder.call(fma, [p, r, splat(c)])
    bits = builder.shl(builder.add(k, ir.Constant(ints, [127] * width)), ir.Constant(ints, [23] * width))
    return builder.fmul(keep, builder.fmul(p, builder.bitcast(bits, vector)))


def exp64_vector(builder: Any, z: Any) -> Any:
    r"""IR for the float64 ``exp`` of a vector of ``z ≤ 0`` (exactly 0 below ``FLUSH_BELOW`` = -600, NaN kept), lane by lane.

    The steps of :func:`meanfield.kernels.fused.exp_flushed` on whole 512-bit vectors: ``k`` rounded by
    the shifter :math:`1.5\cdot2^{52}`, Cody–Waite reduction, the degree-13 Taylor polynomial on
    :math:`|r| \le \ln 2/2` (its terms from :math:`r^4` on in Estrin's form, :math:`1 + (r + r^2(\ldots))` last), and
    :math:`2^k` as :math:`2^{\lfloor k/2\rfloor}\,2^{k-\lfloor k/2\rfloor}` from the exponent bits.  What would be
    small is flushed to 0: a microcode assist per subnormal result, or per subnormal product with a weight, made the
    tiles 2–15× slower at β ≈ 800.
    """
    c = constants64
    vector = z.type
    width = vector.count
    ints = ir.VectorType(ir.IntType(64), width)
    fma = _fma(builder, vector, width, 8)

    def splat(value: float) -> Any:
        return ir.Constant(vector, [float(value)] * width)

    def splat_int(value: int) -> Any:
        return ir.Constant(ints, [int(value)] * width)

    def poly(high: float, low: float, x: Any) -> Any:  # low + high·x
        return builder.call(fma, [splat(high), x, splat(low)])

    zmin = splat(c.FLUSH_BELOW)
    below = builder.fcmp_ordered("<", z, zmin)  # false for NaN, which passes through
    z = builder.select(below, zmin, z)
    t = builder.call(fma, [z, splat(c._LOG2E), splat(c._SHIFTER)])  # 1.5·2^52 + k, k = round(z log2 e)
    kf = builder.fsub(t, splat(c._SHIFTER))
    r = builder.call(fma, [kf, splat(-c._LN2_HI), z])
    r = builder.call(fma, [kf, splat(-c._LN2_LO), r])
    r2 = builder.fmul(r, r)
    r4 = builder.fmul(r2, r2)
    tail = builder.call(fma, [poly(c._C7, c._C6, r), r2, poly(c._C5, c._C4, r)])
    tail = builder.call(fma, [builder.call(fma, [poly(c._C11, c._C10, r), r2, poly(c._C9, c._C8, r)]), r4, tail])
    tail = builder.call(fma, [poly(c._C13, c._C12, r), builder.fmul(r4, r4), tail])
    inner = builder.call(fma, [r2, tail, poly(c._C3, c._C2, r)])
    p = builder.fadd(splat(1.0), builder.call(fma, [r2, inner, r]))
    u = builder.sub(builder.bitcast(t, ints), splat_int(int(c._SHIFTER_BITS)))  # k + 2048
    half = builder.lshr(u, splat_int(1))
    mantissa = splat_int(int(c._MANTISSA))
    low = builder.bitcast(builder.shl(builder.sub(half, splat_int(1)), mantissa), vector)
    high = builder.bitcast(builder.shl(builder.sub(builder.sub(u, half), splat_int(1)), mantissa), vector)
    return builder.select(below, splat(0.0), builder.fmul(builder.fmul(p, low), high))


def exp_vector(builder: Any, z: Any, itemsize: int) -> Any:
    """IR for the ``exp`` of a vector of ``z ≤ 0``: :func:`exp32_vector` or :func:`exp64_vector` by the element size."""
    return exp32_vector(builder, z) if itemsize == 4 else exp64_vector(builder, z)


def make_panel(vectors: int, rows: int, *, exp: bool = False) -> Any:
    """A numba intrinsic ``panel(like, a, lda, b, sbp, sbr, c, ldc, k, accumulate)`` for one block shape.

    Parameters of the intrinsic (all integers but ``like``): ``like`` an array whose dtype
    (float32 or float64) is the arithmetic; ``a``, ``b``, ``c`` byte addresses; ``lda``,
    ``sbp``, ``sbr``, ``ldc`` strides in elements; ``k`` the length of the sum; ``accumulate``
    nonzero to add to ``C`` instead of overwriting it.  With ``exp`` each result is stored as its
    exponential (:func:`exp_vector`: the sums must be ≤ 0), computed on the registers that hold it.
    """

    @intrinsic
    def panel(typingctx: Any, like: Any, a: Any, lda: Any, b: Any, sbp: Any, sbr: Any, c: Any, ldc: Any, k: Any, accumulate: Any) -> Any:
        if not isinstance(like, types.Array) or like.dtype not in (types.float32, types.float64):
            return None
        integers = (a, lda, b, sbp, sbr, c, ldc, k, accumulate)
        if not all(isinstance(arg, types.Integer) for arg in integers):
            return None
        itemsize = 4 if like.dtype == types.float32 else 8
        width = lanes(itemsize)
        signature = types.void(like, *integers)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:  # pragma: no cover - compiled
            i64 = ir.IntType(64)
            scalar = ir.FloatType() if itemsize == 4 else ir.DoubleType()
            vector = ir.VectorType(scalar, width)
            a_, lda_, b_, sbp_, sbr_, c_, ldc_, k_, accumulate_ = (
                builder.sext(v, i64) if v.type.width < 64 else v for v in args[1:])
            fma = _fma(builder, vector, width, itemsize)
            size = ir.Constant(i64, itemsize)

            def address(base: Any, offset: Any) -> Any:  # base + offset elements, as an integer
                return builder.add(base, builder.mul(offset, size))

            def vector_at(addr: Any) -> Any:
                return builder.inttoptr(addr, vector.as_pointer())

            # the accumulators live in allocas of the entry block, which LLVM promotes to registers
            entry = builder.function.entry_basic_block
            with builder.goto_block(entry):
                builder.position_at_start(entry)
                slots = [builder.alloca(vector) for _ in range(rows * vectors)]
            c_rows = [address(c_, builder.mul(ldc_, ir.Constant(i64, r))) for r in range(rows)]
            c_addr = [[address(c_rows[r], ir.Constant(i64, u * width)) for u in range(vectors)] for r in range(rows)]
            keep = builder.icmp_signed("!=", accumulate_, ir.Constant(i64, 0))
            zero = ir.Constant(vector, [0.0] * width)
            for slot in slots:  # the k terms are summed apart, and added to C at the end: C + Σ_p (a blocked sum)
                builder.store(zero, slot)
            splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width)
            with cgutils.for_range(builder, k_) as loop:
                p = loop.index
                a_row = address(a_, builder.mul(p, lda_))
                a_vectors = [builder.load(vector_at(address(a_row, ir.Constant(i64, u * width))), align=itemsize) for u in range(vectors)]
                b_row = address(b_, builder.mul(p, sbp_))
                for r in range(rows):
                    value = builder.load(builder.inttoptr(address(b_row, builder.mul(sbr_, ir.Constant(i64, r))), scalar.as_pointer()), align=itemsize)
                    splat = builder.shuffle_vector(builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(ir.IntType(32), 0)),
                                                   ir.Constant(vector, ir.Undefined), splat_mask)
                    for u in range(vectors):
                        slot = slots[r * vectors + u]
                        builder.store(builder.call(fma, [splat, a_vectors[u], builder.load(slot)]), slot)
            with builder.if_then(keep):
                for r in range(rows):
                    for u in range(vectors):
                        slot = slots[r * vectors + u]
                        builder.store(builder.fadd(builder.load(vector_at(c_addr[r][u]), align=itemsize), builder.load(slot)), slot)
            for r in range(rows):
                for u in range(vectors):
                    result = builder.load(slots[r * vectors + u])
                    if exp:
                        result = exp_vector(builder, result, itemsize)
                    builder.store(result, vector_at(c_addr[r][u]), align=itemsize)
            return context.get_dummy_value()

        return signature, codegen

    return panel


@intrinsic
def weighted_rows(typingctx: Any, like: Any, tile: Any, weights: Any, partial: Any, rows: Any) -> Any:
    r"""``partial[k] += tile[k, :W] ∘ weights[:W] + tile[k, W:2W] ∘ weights[W:2W]`` for ``k < rows``, as vectors of ``W`` lanes.

    ``tile`` has rows of two vectors; ``partial`` rows of one.  Each row's lanes are summed
    later, once per key block (:func:`meanfield.kernels.flash.flash_symmetric`): the transposed side's
    row sums without a horizontal sum per row (a reassociated loop took as long as the ``exp``).
    """
    if not isinstance(like, types.Array) or like.dtype not in (types.float32, types.float64):
        return None
    if not all(isinstance(arg, types.Integer) for arg in (tile, weights, partial, rows)):
        return None
    itemsize = 4 if like.dtype == types.float32 else 8
    width = lanes(itemsize)
    signature = types.void(like, tile, weights, partial, rows)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:  # pragma: no cover - compiled
        i64 = ir.IntType(64)
        scalar = ir.FloatType() if itemsize == 4 else ir.DoubleType()
        vector = ir.VectorType(scalar, width)
        tile_, weights_, partial_, rows_ = (builder.sext(v, i64) if v.type.width < 64 else v for v in args[1:])
        fma = _fma(builder, vector, width, itemsize)

        def load(addr: Any) -> Any:
            return builder.load(builder.inttoptr(addr, vector.as_pointer()), align=itemsize)

        step = ir.Constant(i64, width * itemsize)
        w0, w1 = load(weights_), load(builder.add(weights_, step))
        with cgutils.for_range(builder, rows_) as loop:
            k = loop.index
            row = builder.add(tile_, builder.mul(k, ir.Constant(i64, 2 * width * itemsize)))
            target = builder.inttoptr(builder.add(partial_, builder.mul(k, step)), vector.as_pointer())
            total = builder.call(fma, [load(row), w0, builder.load(target, align=itemsize)])
            total = builder.call(fma, [load(builder.add(row, step)), w1, total])
            builder.store(total, target, align=itemsize)
        return context.get_dummy_value()

    return signature, codegen


#: the score panel: 2 vectors of queries (32 float32, 16 float64) against 12 keys broadcast, storing the
#: exponentials of the (shifted, ≤ 0) scores
score_exp_panel = make_panel(2, 12, exp=True)
#: the same for a key block's last keys (a multiple of 4 where the block is not one of 12)
score_exp_panel_tail = make_panel(2, 4, exp=True)
#: the value panels: 2 vectors (1 for a remainder) of value coordinates against 8 rows broadcast
value_panel = make_panel(2, 8)
value_panel_half = make_panel(1, 8)
#: the wide value panels, 12 rows (24 accumulators): two vectors are loaded per 24 fused multiply-adds instead
#: of per 16 (at d = 384 the value products 8–11 % faster; the same at d = 64)
value_panel_wide = make_panel(2, 12)
value_panel_wide_half = make_panel(1, 12)
#: the sums panel: a query block (two vectors) against one row of masses
sum_panel = make_panel(2, 1)
