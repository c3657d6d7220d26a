r"""Attention heads :math:`(Q_h, K_h, V_h)` and their parsing from config values.

A head has query/key matrices :math:`Q_h, K_h\in\mathbb R^{k\times d}` and a value
:math:`V_h\in\mathbb R^{d\times d}`; its score matrix is :math:`B_h=Q_h^\top K_h`,
so that :math:`s^h_{ij}=\langle Q_hx_i,K_hx_j\rangle=x_i^\top B_hx_j`.

Each of ``Q``, ``K``, ``V`` in a config may be

* ``"identity"`` — :math:`I_d`;
* a number :math:`\lambda` — :math:`\lambda I_d` (a scalar head);
* a list of rows — an explicit matrix;
* ``"random"`` — i.i.d. :math:`N(0, 1/d)` entries, seeded by the head's ``seed`` (drawn from
  ``default_rng([HEADS_STREAM, seed])``, a stream of their own, see :data:`HEADS_STREAM`);
* a random-matrix ensemble of :mod:`meanfield.heads.ensembles`: ``"goe"`` (symmetric
  Wigner :math:`(G+G^\top)/\sqrt{2d}`, spectrum filling :math:`[-2,2]`; ``d×d`` only),
  ``"gaussian"`` (:math:`N(0,1/d)` entries, the draws of ``"random"``) or ``"gpt2"``
  (:math:`N(0,0.02^2)` entries), seeded like ``"random"``;
* ``"file:PATH.npy"`` — a matrix stored with :func:`numpy.save`;
* for ``V`` only, ``"aligned"`` — :math:`V_h = Q_h^\top K_h = B_h` (the
  value-aligned heads :math:`M_h` of Pendharkar (arXiv 2605.04279)).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.checks import check_flag, check_int, real_array, real_number
from meanfield.errors import ConfigError
from meanfield.heads.ensembles import ENSEMBLES, draw

__all__ = ["Head", "HeadStack", "NonFiniteHeads", "head_from_spec", "heads_from_config", "stack_heads", "identity", "scalar", "random_head", "RANDOM_VALUES", "is_random", "replicate_specs", "HEADS_STREAM", "head_generator"]

#: config strings whose matrix is drawn at random from the head's seed
RANDOM_VALUES = ("random", *ENSEMBLES)

#: the first word of the random heads' seeds: their streams are none of the other seeded draws' (``default_rng(s)``
#: for the initial tokens, whose ``init.seed`` (default 0) had given the rows of Q, K and V when it equalled the
#: head's seed (``model.seed``, default 0); ``[NOISE_STREAM, …]`` for the token noise; the weights' own streams)
HEADS_STREAM = 0x4845414453  # "HEADS"


def head_generator(seed: int, layer: int = 0) -> np.random.Generator:
    """The stream of a head's random matrices: ``default_rng([HEADS_STREAM, seed])``, layer ``k ≥ 1``: ``[HEADS_STREAM, seed, k]``."""
    return np.random.default_rng([HEADS_STREAM, int(seed)] if layer == 0 else [HEADS_STREAM, int(seed), int(layer)])


def is_random(spec: Mapping[str, Any]) -> bool:
    """Whether a head table draws any of ``Q``, ``K``, ``V`` at random (``"random"`` or an ensemble)."""
    return any(isinstance(spec.get(name), str) and spec.get(name) in RANDOM_VALUES for name in ("Q", "K", "V"))


@dataclass(frozen=True)
class Head:
    r"""One attention head.

    Attributes
    ----------
    Q, K : (k, d) arrays
        Query and key matrices.
    V : (d, d) array
        Value matrix.
    """

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray

    def __post_init__(self) -> None:
        # (complex matrices had lost their imaginary parts with a mere ComplexWarning)
        Q, K, V = (real_array(name, m) for name, m in (("Q", self.Q), ("K", self.K), ("V", self.V)))
        if V.ndim != 2 or V.shape[0] != V.shape[1] or V.shape[0] < 1:
            raise ValueError(f"a head's V is a d×d matrix, got shape {V.shape}")
        d = V.shape[0]
        if Q.ndim != 2 or Q.shape != K.shape or Q.shape[1] != d:
            raise ValueError(f"a head's Q and K are k×d matrices of one shape with d = {d} (V's), got {Q.shape} and {K.shape}")
        if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(K)) and np.all(np.isfinite(V))):
            raise ValueError("a head's Q, K and V must be finite")
        object.__setattr__(self, "Q", Q)
        object.__setattr__(self, "K", K)
        object.__setattr__(self, "V", V)

    @property
    def B(self) -> np.ndarray:
        r"""Score matrix :math:`B=Q^\top K`, shape ``(d, d)``."""
        return self.Q.T @ self.K

    @property
    def d(self) -> int:
        return int(self.V.shape[0])

    @classmethod
    def scalar(cls, lam: float, d: int) -> Head:
        r"""Scalar value-aligned head :math:`B=V=\lambda I` (with :math:`Q=\sqrt{|\lambda|}I`, :math:`K=\pm Q`).

        ``lam`` is a finite real number (a complex one had been taken by its modulus)."""
        lam, d = real_number("lam", lam), check_int("d", d, minimum=1)  # (True had been a ufunc loop error)
        root = np.sqrt(abs(lam)) * np.eye(d)
        return cls(Q=root, K=np.sign(lam) * root if lam != 0 else root * 0, V=lam * np.eye(d))


class NonFiniteHeads(ValueError):
    """A :class:`HeadStack` of matrices that are not finite (a ``ValueError``; :func:`~meanfield.heads.schedules.weight_path`
    tells it from the other refusals, to name the first time a schedule's heads leave the finite numbers)."""


@dataclass(frozen=True)
class HeadStack:
    r"""The arrays the kernels consume: ``B`` (H, d, d), ``V`` (H, d, d), head weights ``w`` (H,).

    ``w`` are the masses of the law of the weights :math:`\Theta=\sum_h w_h\delta_{\theta_h}`
    (default :math:`1/H`); only the ``pooled`` attention kind uses them.  ``B``, ``V`` and ``w`` must be finite
    (:class:`NonFiniteHeads`, a ``ValueError``, names the field).
    """

    B: np.ndarray
    V: np.ndarray
    w: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        B = np.ascontiguousarray(real_array("B", self.B))  # (complex ones had been cast with a ComplexWarning)
        V = np.ascontiguousarray(real_array("V", self.V))
        if B.ndim != 3 or B.shape != V.shape or B.shape[1] != B.shape[2] or B.shape[0] < 1 or B.shape[1] < 1:
            raise ValueError(f"HeadStack needs B and V of equal shape (H, d, d) with H ≥ 1, got {B.shape} and {V.shape}")
        for name, matrices in (("B", B), ("V", V)):  # (every kernel had returned NaN velocities without a word)
            if not np.all(np.isfinite(matrices)):
                heads = np.flatnonzero(~np.isfinite(matrices).reshape(matrices.shape[0], -1).all(axis=1)).tolist()
                raise NonFiniteHeads(f"HeadStack {name} must be finite; head(s) {heads} hold NaN or inf")
        w = np.full(B.shape[0], 1.0 / B.shape[0]) if self.w is None else real_array("w", self.w)
        if w.shape != (B.shape[0],):  # the kernels read w[h] for every head (compiled ones without a bounds check)
            raise ValueError(f"HeadStack needs one weight per head, w of shape ({B.shape[0]},), got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"HeadStack weights w must be finite and non-negative, got {w.tolist()}")
        object.__setattr__(self, "B", B)
        object.__setattr__(self, "V", V)
        object.__setattr__(self, "w", np.ascontiguousarray(w))

    def __repr__(self) -> str:
        """``HeadStack(H=4, d=64, B symmetric, V = B, w = 1/H)``: what the heads are, not their entries (``.B``, ``.V``,
        ``.w``; four heads of d = 64 had printed 6 kB, filling a notebook cell)."""
        said = [f"H={self.H}", f"d={self.d}"]
        if np.array_equal(self.B, np.swapaxes(self.B, 1, 2)):
            said.append("B symmetric")
        if np.array_equal(self.V, self.B):
            said.append("V = B")
        uniform = np.allclose(self.w, 1.0 / self.H, rtol=1e-15, atol=0.0)
        said.append("w = 1/H" if uniform else f"w = {np.array2string(self.w, precision=4, threshold=8)}")
        return f"HeadStack({', '.join(said)})"

    @property
    def H(self) -> int:
        return int(self.B.shape[0])

    @property
    def d(self) -> int:
        return int(self.B.shape[1])


def stack_heads(heads: Sequence[Head], weights: Sequence[float] | None = None) -> HeadStack:
    """Stack heads into the arrays the attention kernels use."""
    if isinstance(heads, (str, bytes, Head, Mapping)) or not isinstance(heads, Sequence):  # (a str had been an AttributeError)
        raise TypeError(f"heads must be a list of Head objects, got {type(heads).__name__}")
    if not heads:
        raise ValueError("at least one head is needed")
    for index, head in enumerate(heads):
        if not isinstance(head, Head):
            raise TypeError(f"heads[{index}] must be a Head, got {type(head).__name__}")
    return HeadStack(
        B=np.stack([h.B for h in heads]),
        V=np.stack([h.V for h in heads]),
        w=None if weights is None else real_array("weights", weights),
    )


def _matrix(value: Any, *, key: str, d: int, rows: int | None, rng: np.random.Generator, base: Path | None) -> np.ndarray:
    """Turn one config value into a matrix; ``rows`` is the expected row count (None: any k)."""
    shape_rows = d if rows is None else rows
    if isinstance(value, bool):
        raise ConfigError(key, f"expected 'identity', a number, a list of rows, 'random' or 'file:PATH.npy', got {value!r}")
    if isinstance(value, (int, float)):
        if not np.isfinite(value):
            raise ConfigError(key, f"must be finite, got {value!r}")
        return float(value) * np.eye(d)
    if isinstance(value, str):
        if value == "identity":
            return np.eye(d)
        if value == "random":
            return rng.standard_normal((shape_rows, d)) / np.sqrt(d)
        if value in ENSEMBLES:
            if value == "goe" and shape_rows != d:
                raise ConfigError(key, f"'goe' is a symmetric {d}×{d} matrix, but {shape_rows} rows are asked for (k = {shape_rows})")
            return draw(value, rng, shape_rows, d)
        if value.startswith("file:"):
            path = Path(value[5:]).expanduser()  # ~ as in checkpoint: paths
            if base is not None and not path.is_absolute():
                path = base / path
            if not path.exists():
                raise ConfigError(key, f"file not found: {path}")
            from meanfield.io.arrays import load_npy

            return _check_matrix(load_npy(path, key, real=True), key=key, d=d, rows=rows)
        also = ", 'aligned' (V = QᵀK)" if key.endswith(".V") else ""  # (V's own value had been left out of V's list)
        raise ConfigError(key, f"unknown value {value!r}; expected 'identity', a number, a list of rows, 'random'{also}, "
                               f"an ensemble ({', '.join(repr(e) for e in ENSEMBLES)}) or 'file:PATH.npy'")
    if isinstance(value, (list, tuple)):
        try:
            mat = np.array(value, dtype=float)
        except (TypeError, ValueError):
            raise ConfigError(key, "expected a list of rows of numbers (a matrix)") from None
        return _check_matrix(mat, key=key, d=d, rows=rows)
    raise ConfigError(key, f"unsupported value of type {type(value).__name__}")


def _check_matrix(mat: np.ndarray, *, key: str, d: int, rows: int | None) -> np.ndarray:
    if mat.ndim != 2 or mat.shape[1] != d or mat.shape[0] < 1 or (rows is not None and mat.shape[0] != rows):
        got = "×".join(str(s) for s in mat.shape) if mat.ndim else "a scalar"
        want_rows = rows if rows is not None else (mat.shape[0] if mat.ndim == 2 else "k")
        want = f"{want_rows}×{d}"
        raise ConfigError(key, f"expected a {want} matrix, got {got}")
    if not np.all(np.isfinite(mat)):
        raise ConfigError(key, "contains non-finite entries")
    return np.asarray(mat, dtype=float)


def head_from_spec(
    spec: Mapping[str, Any], *, d: int, seed: int = 0, key: str = "model.heads[0]", base: Path | None = None, layer: int = 0
) -> Head:
    """Build one :class:`Head` from its config table (keys ``Q``, ``K``, ``V``, ``seed``).

    ``Q`` and ``K`` must have the same number of rows ``k``; ``V`` is ``d×d``.
    Errors name the key, e.g. ``model.heads[1].Q: expected a 3×3 matrix, got 3×2``.
    The random matrices come, in the order ``Q``, ``K``, ``V``, from
    ``default_rng([HEADS_STREAM, seed])``; with ``layer = k ≥ 1`` from
    ``default_rng([HEADS_STREAM, seed, k])`` (the independent redraw of layer :math:`k` of
    ``weights.schedule = "layers"``).  The leading :data:`HEADS_STREAM` keeps them
    independent of the initial tokens (``default_rng(init.seed)``), whose seed may equal
    the head's (both default to 0).
    """
    allowed = {"Q", "K", "V", "seed", "k"}
    if not isinstance(spec, Mapping):  # (None had been "'NoneType' object is not iterable")
        raise ConfigError(key, f"expected a table of {sorted(allowed)}, got {type(spec).__name__}")
    d = check_int("d", d, minimum=1)
    for name in spec:
        if name not in allowed:
            raise ConfigError(f"{key}.{name}", f"unknown key; allowed keys are {sorted(allowed)}")
    head_seed = spec.get("seed", seed)
    if isinstance(head_seed, bool) or not isinstance(head_seed, int) or head_seed < 0:
        raise ConfigError(f"{key}.seed", f"expected a non-negative integer, got {head_seed!r}")
    k = spec.get("k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ConfigError(f"{key}.k", f"expected a positive integer, got {k!r}")
    if k is not None:  # Q and K of k rows, and their random draws (k = 1e12 had been NumPy's allocation error)
        from meanfield.resources import memory_shortfall

        short = memory_shortfall(8.0 * 3 * float(k) * d)
        if short:
            raise ConfigError(f"{key}.k", f"Q and K of k = {k} rows of d = {d}: {short}")
    rng = head_generator(head_seed, layer)
    q_val, k_val = spec.get("Q", "identity"), spec.get("K", "identity")
    if k is not None:
        for name, value in (("Q", q_val), ("K", k_val)):
            # the square ones: 'identity', a number, 'goe' (a value that is none of the known ones is named by _matrix)
            square = value in ("identity", "goe") or (isinstance(value, (int, float)) and not isinstance(value, bool))
            if square and k != d:
                raise ConfigError(f"{key}.k", f"k={k} rows, but {name} = {value!r} is a {d}×{d} matrix; use 'random', a list of rows or a file")
    Q = _matrix(q_val, key=f"{key}.Q", d=d, rows=k, rng=rng, base=base)
    K = _matrix(k_val, key=f"{key}.K", d=d, rows=Q.shape[0] if k_val in RANDOM_VALUES or k is not None else None, rng=rng, base=base)
    if K.shape[0] != Q.shape[0]:
        raise ConfigError(f"{key}.K", f"expected a {Q.shape[0]}×{d} matrix to match Q, got {K.shape[0]}×{K.shape[1]}")
    v_val = spec.get("V", "identity")
    with np.errstate(over="ignore", invalid="ignore"):  # named just below
        B = Q.T @ K
    if not np.all(np.isfinite(B)):  # finite Q and K of 1e200 (Head's ValueError had ended in a traceback)
        top = float(np.max(np.abs(np.concatenate([Q.ravel(), K.ravel()]))))
        raise ConfigError(f"{key}.V" if v_val == "aligned" else f"{key}.Q",
                          f"the score matrix QᵀK{' (= V, aligned)' if v_val == 'aligned' else ''} is not finite: "
                          f"Q and K have entries up to {top:.3g}, whose products leave float64; scale them down")
    V = B.copy() if v_val == "aligned" else _matrix(v_val, key=f"{key}.V", d=d, rows=d, rng=rng, base=base)
    return Head(Q=Q, K=K, V=V)


def heads_from_config(
    specs: Sequence[Mapping[str, Any]] | None, *, d: int, seed: int = 0, base: Path | None = None, layer: int = 0
) -> list[Head]:
    """All heads of ``[[model.heads]]``; none means one identity head.  ``layer``: see :func:`head_from_spec`."""
    if not specs:
        return [Head(Q=np.eye(d), K=np.eye(d), V=np.eye(d))]
    return [
        head_from_spec(spec, d=d, seed=seed + 1000 * index, key=f"model.heads[{index}]", base=base, layer=layer)
        for index, spec in enumerate(specs)
    ]


def replicate_specs(specs: Sequence[Mapping[str, Any]] | None, num_heads: int | None) -> list[dict[str, Any]] | None:
    """``model.num_heads = H``: one head table (or the default identity head) stands for H heads.

    Copy ``h`` keeps the table; its random matrices get their own draw (the table's
    ``seed`` plus ``1000 h`` when it sets one, else ``model.seed + 1000 h`` as for
    separate tables).  Several tables must number ``num_heads`` exactly.

    Raises
    ------
    ConfigError
        ``model.num_heads`` when several tables do not number H.
    """
    if num_heads is None:
        return specs  # type: ignore[return-value]
    specs = list(specs or [{"Q": "identity", "K": "identity", "V": "identity"}])
    if len(specs) == num_heads:
        return specs  # type: ignore[return-value]
    if len(specs) != 1:
        raise ConfigError("model.num_heads", f"num_heads = {num_heads} but {len(specs)} [[model.heads]] tables are given; give one table (it stands for all H heads) or exactly {num_heads}")
    out = []
    for h in range(num_heads):
        spec = dict(specs[0])
        if "seed" in spec and isinstance(spec["seed"], int):
            spec["seed"] = spec["seed"] + 1000 * h
        out.append(spec)
    return out


def identity(d: int) -> Head:
    """The identity head :math:`Q = K = V = I_d` (the clustering model of Geshkovski et al.)."""
    d = check_int("d", d, minimum=1)  # (2.5, "3" and -1 had been NumPy's errors)
    return Head(Q=np.eye(d), K=np.eye(d), V=np.eye(d))


def scalar(lam: float, d: int) -> Head:
    r"""The scalar value-aligned head :math:`B = V = \lambda I_d` (Thms 19 and 22 of Pendharkar, arXiv 2605.04279)."""
    return Head.scalar(lam, d)


def random_head(d: int, *, k: int | None = None, seed: int = 0, aligned: bool = False) -> Head:
    r"""A head with i.i.d. :math:`N(0, 1/d)` entries (``Q``, ``K``: ``k × d``; ``V``: ``d × d``, or :math:`Q^\top K` if ``aligned``).

    The same draw as ``Q = K = V = "random"`` with ``seed`` in a config.
    """
    d = check_int("d", d, minimum=1)  # (None and NaN had been Python's errors)
    aligned = check_flag("aligned", aligned)  # (the string "False" had aligned V)
    spec: dict[str, Any] = {"Q": "random", "K": "random", "V": "aligned" if aligned else "random", "seed": seed}
    if k is not None:
        spec["k"] = k
    return head_from_spec(spec, d=d, key="random_head")

