r"""An atomic counter for compiled code: work items claimed by threads with no lock and no GIL.

:func:`fetch_add` adds to an ``int64`` array element atomically and returns the value before, so that
threads running the same compiled loop each take the next item (``k = fetch_add(counter, 0, 1)``) until
the items run out.  The flash tiles of :mod:`meanfield.kernels.blas` hand their tiles out this way: a loop
in Python took each tile under the GIL, and a thread that came back from a tile while the other held the
GIL slept until it was handed over (a futex wake-up, 0.07–0.1 ms on this project's virtual cores).
"""
from __future__ import annotations

from typing import Any

from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["fetch_add"]


@intrinsic
def fetch_add(typingctx: Any, array: Any, index: Any, value: Any) -> Any:
    """Atomically ``array[index] += value`` on an int64 array (sequentially consistent); returns the value before."""
    if not (isinstance(array, types.Array) and array.dtype == types.int64):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:  # pragma: no cover - compiled
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]])
        addend = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", pointer, addend, "seq_cst")

    return types.int64(array, index, value), codegen
