r"""The mean-field dynamics on a real checkpoint's heads, one unit of time per layer, against its full forward pass.

.. math::

    \dot x_i = P^\perp_{x_i}\sum_h\sum_j\operatorname{softmax}_j(\beta_\ell\,x_i^\top B^\ell_hx_j)\,V^\ell_hx_j,
    \qquad t\in[\ell-1,\ell],\qquad x_i(0) = h^0_i/\|h^0_i\|

(:func:`meanfield_layers`), compared layer by layer with the hidden states of
:func:`meanfield.heads.forward.forward_pass` (:func:`comparison_rows`), as in the
comparison with trained weights of Geshkovski, Letrouit, Polyanskiy and Rigollet
(arXiv 2305.05465).  ``meanfield forward`` prints and plots it.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["MeanFieldLayers", "layer_betas", "meanfield_layers", "comparison_rows"]


@dataclass(frozen=True)
class MeanFieldLayers:
    """The mean-field token path at integer times (one unit per layer).

    Attributes
    ----------
    x : (L+1, n, d) array
        ``x[0]`` the initial unit tokens, ``x[l]`` the tokens at ``t = l``.
    beta : (L,) array
        The inverse temperature of each layer's run.
    dt : float
    method : str
    """

    x: np.ndarray
    beta: np.ndarray
    dt: float
    method: str


def layer_betas(checkpoint: Any, beta: str | float, *, layers: int | None = None) -> np.ndarray:
    r"""Per-layer :math:`\beta_\ell`: ``"ln"`` (:math:`r_\ell^2/\sqrt{d_h}`), ``"model"`` (:math:`1/\sqrt{d_h}`) or a number."""
    count = checkpoint.num_layers if layers is None else layers
    if isinstance(beta, str):
        if beta == "model":
            return np.full(count, checkpoint.beta)
        if beta == "ln":
            radii = [checkpoint.token_radius(L) for L in range(count)]
            if any(r is None for r in radii):
                raise ConfigError("--beta", "beta='ln' needs the LayerNorm feeding every layer; give 'model' or a number")
            return np.array([r * r for r in radii]) * checkpoint.beta
        raise ConfigError("--beta", f"expected 'ln', 'model' or a number, got {beta!r}")
    value = float(beta)
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError("--beta", f"must be a finite number >= 0, got {beta!r}")
    return np.full(count, value)


def meanfield_layers(
    sentence: str,
    checkpoint: str | Path = "minilm",
    *,
    beta: str | float = "ln",
    dt: float = 0.05,
    method: str = "rk4",
    layers: int | None = None,
    num_heads: int | None = None,
) -> MeanFieldLayers:
    r"""The mean-field dynamics on a checkpoint's heads, one unit of time per layer (see the module equation).

    Run ``l`` is :func:`meanfield.simulate` with ``model.heads = "checkpoint:PATH#layer=l"``,
    ``softmax`` attention, ``beta`` of :func:`layer_betas`, on :math:`t\in[0,1]`; the first
    starts from ``init.kind = "sentence"``, each next one from the previous run's final
    tokens (``init.kind = "file"``, a temporary ``.npy``).

    Parameters
    ----------
    sentence : str
    checkpoint : path or ``"minilm"``
    beta : ``"ln"``, ``"model"`` or float
    dt : float
        Step of the particle solver (``method``, default RK4).
    layers : int, optional
        How many layers (default all).
    num_heads : int, optional
        Heads per layer, for a checkpoint with no ``config.json`` (``num_attention_heads``) beside it; passed to
        :func:`~meanfield.heads.checkpoint.load_checkpoint` and into each run's ``model.heads``
        (``checkpoint:PATH#layer=l&num_heads=H``).

    Returns
    -------
    MeanFieldLayers
    """
    import meanfield as mf
    from meanfield.heads.checkpoint import load_checkpoint

    ckpt = load_checkpoint(checkpoint, num_heads=num_heads)
    count = ckpt.num_layers if layers is None else int(layers)
    if not 1 <= count <= ckpt.num_layers:
        raise ConfigError("--layers", f"expected 1..{ckpt.num_layers}, got {layers!r}")
    betas = layer_betas(ckpt, beta, layers=count)
    path = str(ckpt.path)
    heads_option = "" if num_heads is None else f"&num_heads={int(num_heads)}"
    solver = {"kind": "particle", "method": method, "dt": float(dt), "t_final": 1.0, "save_every": 1.0}
    xs: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="meanfield_forward_") as tmp:
        for L in range(count):
            model = {"d": ckpt.d, "beta": float(betas[L]), "attention": "softmax", "heads": f"checkpoint:{path}#layer={L}{heads_option}",
                     "backend": "blas"}
            if L == 0:
                init: dict[str, Any] = {"kind": "sentence", "sentence": sentence, "checkpoint": path}
            else:
                start = Path(tmp) / f"x{L}.npy"
                np.save(start, xs[-1])
                init = {"kind": "file", "path": str(start)}
            try:
                run = mf.simulate({"model": model, "init": init, "solver": solver})
            except ConfigError as exc:
                if exc.key != "model.beta":
                    raise
                raise ConfigError("--beta", f"layer {L}: {exc.message}") from None
            if L == 0:
                xs.append(np.asarray(run.x[0], dtype=float))
            xs.append(np.asarray(run.x[-1], dtype=float))
    return MeanFieldLayers(x=np.stack(xs), beta=betas, dt=float(dt), method=method)


def comparison_rows(fp: Any, path: MeanFieldLayers | None, *, refined: MeanFieldLayers | None = None) -> list[dict[str, Any]]:
    """Per layer: the real statistics, and with ``path`` the comparison (:func:`meanfield.heads.forward.compare_layers`).

    ``refined`` (the same run at half the step) adds ``refine_mean`` and ``refine_gram``: the change of
    the mean inner product and the largest change of a Gram entry when the step is halved.
    """
    from meanfield.heads.forward import compare_layers, inner_products

    rows: list[dict[str, Any]] = []
    stats = fp.statistics()
    count = fp.num_layers + 1 if path is None else path.x.shape[0]
    comp = compare_layers(fp.hidden[:count], path.x) if path is not None else None
    for k in range(count):
        row: dict[str, Any] = {"layer": k, "mean_radius": stats[k]["mean_radius"], "mean_real": stats[k]["mean_inner"],
                               "std_real": stats[k]["std_inner"]}
        if comp is not None and path is not None:
            c = comp[k]
            row.update(beta=float(path.beta[k - 1]) if k > 0 else math.nan, mean_model=c["mean_model"], std_model=c["std_model"],
                       w1=c["w1"], pair_mae=c["pair_mae"], w1_static=c["w1_static"])
            if refined is not None:
                a, b = inner_products(path.x[k]), inner_products(refined.x[k])
                row.update(refine_mean=float(abs(a.mean() - b.mean())), refine_gram=float(np.max(np.abs(a - b))))
        rows.append(row)
    return rows
