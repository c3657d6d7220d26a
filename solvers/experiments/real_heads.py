r"""Trained heads against random heads of the same shapes, on a real sentence's tokens.

The tokens of a sentence (:func:`meanfield.heads.embeddings.embed_sentence`: word +
position embeddings, LayerNorm, on :math:`S^{d-1}`) flow under the heads of one
trained layer (:mod:`meanfield.heads.checkpoint`), and under a random baseline with the
same shapes and norms:

.. math::

    \dot x_i = P^\perp_{x_i}\sum_h\sum_j \operatorname{softmax}_j(\beta\,x_i^\top B_hx_j)\,V_hx_j ,
    \qquad B_h = Q_h^\top K_h,\quad V_h = W_O[:,R_h]W_v[R_h,:]

(the ``softmax`` kind; one transformer layer applied with weight
sharing, so :math:`t` counts layers).  Along each run we record

* :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` (Thm 1 of arXiv 2605.10931), with :math:`\Pi` the
  projection onto the dominant eigenspace :math:`E` of
  :math:`\operatorname{sym}(S)`, :math:`S=\sum_hV_hB_h^\top` — the target of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931)
  :math:`VB^\top` for one head, and for several heads the sum of the heads'
  :math:`V_hB_h^\top` (a surrogate: per-head normalisation makes the
  multi-head zero-temperature limit non-linear; select one head for the exact
  setting); geodesic cost, exact transport (:func:`meanfield.analysis.transport.w2`);
* clustering: :math:`1-\gamma` (mean pairwise gap), the minimum inner product
  and the number of clusters at :math:`\langle x_i,x_j\rangle\ge1-\mathrm{tol}`
  (:func:`meanfield.analysis.diagnostics.cluster_statistics`);
* the mean attention entropy :math:`\overline{\mathcal H}=\frac{1}{Hn}\sum_{h,i}\mathcal H^h_i`
  (Thm 27 of arXiv 2605.04279; :math:`\log n` for uniform attention).

**Random baseline.**  For each selected head, :math:`W_q[R_h]`, :math:`W_k[R_h]`,
:math:`W_v[R_h]` and :math:`W_O[:,R_h]` are replaced by matrices of i.i.d. standard
normal entries rescaled to the Frobenius norm of the trained block (seeded).
Same shapes, same overall scale: what differs is the trained structure.

**Temperature.**  ``beta="model"`` is BERT's :math:`1/\sqrt{d_h}` on unit tokens;
``beta="ln"`` is :math:`r^2/\sqrt{d_h}` with :math:`r` the layer's LayerNorm radius
(:meth:`meanfield.heads.checkpoint.Checkpoint.token_radius`), the value that reproduces
the trained scores on tokens of norm :math:`r`; a number is used as is.

Examples
--------
>>> result = compare_with_random("minilm", 2, "The cat sat on the mat.", 4.0)  # doctest: +SKIP
>>> result.trained.w2_target[-1], result.random.w2_target[-1]  # doctest: +SKIP
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.kernels.jit import one_blas_thread
from meanfield.analysis.diagnostics import cluster_statistics, entropy_and_production
from meanfield.heads.embeddings import embed_sentence
from meanfield.errors import ConfigError
from meanfield.heads import Head, stack_heads
from meanfield.model import ConstantHeads, Model
from meanfield.analysis.projection import Pushforward, dominant_projector, pushforward_target
from meanfield.analysis.transport import w2
from meanfield.heads.checkpoint import AttentionLayer, Checkpoint, load_checkpoint
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, solve

__all__ = [
    "HeadsRun",
    "RealHeadsComparison",
    "random_like_heads",
    "layer_target",
    "run_heads",
    "resolve_beta",
    "compare_with_random",
    "plot_comparison",
]


@dataclass(frozen=True)
class HeadsRun:
    """One run on a sentence's tokens and its observables at the saved times.

    Attributes
    ----------
    label : str
        ``"trained"`` or ``"random"``.
    t : (T,) array
    x : (T, n, d) array
    w2_target : (T,) array
        :math:`W_2(\\rho_t,\\Pi_\\sharp\\rho_0)` (geodesic).
    one_minus_gamma, min_inner, n_clusters : (T,) arrays
        Cluster statistics.
    entropy : (T,) array
        Mean attention entropy over heads and tokens (nats).
    target : Pushforward
        :math:`\\Pi_\\sharp\\rho_0`.
    info : dict
        The solver's ``info`` (steps, wall time, stop reason).
    """

    label: str
    t: np.ndarray
    x: np.ndarray
    w2_target: np.ndarray
    one_minus_gamma: np.ndarray
    min_inner: np.ndarray
    n_clusters: np.ndarray
    entropy: np.ndarray
    target: Pushforward
    info: dict[str, Any] = field(default_factory=dict)

    def row(self, k: int = -1) -> dict[str, float]:
        """The observables at saved frame ``k`` (default: the last)."""
        return {
            "t": float(self.t[k]),
            "w2_target": float(self.w2_target[k]),
            "one_minus_gamma": float(self.one_minus_gamma[k]),
            "min_inner": float(self.min_inner[k]),
            "n_clusters": float(self.n_clusters[k]),
            "entropy": float(self.entropy[k]),
        }


@dataclass(frozen=True)
class RealHeadsComparison:
    """Trained against random heads on one sentence (see :func:`compare_with_random`)."""

    trained: HeadsRun
    random: HeadsRun
    tokens: list[str]
    layer: int
    heads: tuple[int, ...]
    beta: float
    d: int

    @property
    def log_n(self) -> float:
        """:math:`\\log n`, the entropy of uniform attention."""
        return math.log(len(self.tokens))

    def table(self) -> str:
        """Initial and final observables of both runs, one line each."""
        names = ("t", "w2_target", "one_minus_gamma", "min_inner", "n_clusters", "entropy")
        lines = [f"layer {self.layer}, heads {list(self.heads)}, beta={self.beta:.6g}, n={len(self.tokens)}, d={self.d}, log n={self.log_n:.4f}",
                 f"{'run':>8} " + " ".join(f"{name:>15}" for name in names)]
        for run in (self.trained, self.random):
            for k in (0, -1):
                r = run.row(k)
                lines.append(f"{run.label:>8} " + " ".join(f"{r[name]:15.6g}" for name in names))
        return "\n".join(lines)


def random_like_heads(layer: AttentionLayer, select: Sequence[int] | None = None, *, seed: int = 0) -> list[Head]:
    r"""Random heads with the shapes and Frobenius norms of a trained layer's heads.

    .. math::

        \tilde W_q[R_h] = \|W_q[R_h]\|_F\,\frac{G}{\|G\|_F},\quad G_{ab}\sim N(0,1)\ \text{i.i.d.},

    likewise for :math:`W_k[R_h]`, :math:`W_v[R_h]` and :math:`W_O[:,R_h]`; then
    :math:`Q_h=\tilde W_q[R_h]`, :math:`K_h=\tilde W_k[R_h]`,
    :math:`V_h=\tilde W_O[:,R_h]\tilde W_v[R_h]` as for trained heads.
    """
    rng = np.random.default_rng(seed)
    ids = range(layer.num_heads) if select is None else select

    def like(block: np.ndarray) -> np.ndarray:
        g = rng.standard_normal(block.shape)
        return g * (np.linalg.norm(block) / np.linalg.norm(g))

    heads = []
    with one_blas_thread():
        for h in ids:
            layer.head(int(h))  # validates the index
            r = layer.rows(int(h))
            Q, K, Wv, Wo = like(layer.W_q[r]), like(layer.W_k[r]), like(layer.W_v[r]), like(layer.W_o[:, r])
            heads.append(Head(Q=Q, K=K, V=Wo @ Wv))
    return heads


def layer_target(heads: Sequence[Head], x0: np.ndarray) -> Pushforward:
    r""":math:`\Pi_\sharp\rho_0` for the dominant eigenspace of :math:`\operatorname{sym}\big(\sum_hV_hB_h^\top\big)` (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931).

    For one head this is Alcalde, Bungert, Riedl and Roith's (arXiv 2605.10931) target exactly
    (:func:`meanfield.analysis.projection.pushforward_target` with :math:`S=VB^\top`).
    """
    S = sum(h.V @ h.B.T for h in heads)
    return pushforward_target(x0, dominant_projector(S))


def run_heads(
    heads: Sequence[Head],
    x0: np.ndarray,
    *,
    beta: float,
    t_final: float,
    label: str,
    attention: str = "softmax",
    direction: str = "ascent",
    dt: float = 0.05,
    save_every: float | None = None,
    method: str = "rk4",
    cluster_tol: float = 1e-3,
) -> HeadsRun:
    r"""Run the particle solver with ``heads`` from ``x0`` and record the observables of the module.

    Parameters
    ----------
    heads : sequence of Head
    x0 : (n, d) array
        Unit tokens.
    beta, t_final, dt : float
    label : str
    attention : {"softmax", "unnormalized", "relu", "pooled"}
    direction : {"ascent", "descent"}
    save_every : float, optional
        Default ``t_final / 20``.
    method : {"euler", "heun", "rk4", "rk45"}
    cluster_tol : float
        Link threshold of the cluster count.

    Returns
    -------
    HeadsRun

    Notes
    -----
    A sentence has few tokens (``n`` ~ 10–100), so every product is small: the
    run holds BLAS to one thread, which on a shared machine is 10–40× faster
    than letting each tiny GEMM spread over all cores.
    """
    with one_blas_thread():
        return _run_heads(heads, x0, beta=beta, t_final=t_final, label=label, attention=attention, direction=direction,
                          dt=dt, save_every=save_every, method=method, cluster_tol=cluster_tol)


def _run_heads(
    heads: Sequence[Head],
    x0: np.ndarray,
    *,
    beta: float,
    t_final: float,
    label: str,
    attention: str,
    direction: str,
    dt: float,
    save_every: float | None,
    method: str,
    cluster_tol: float,
) -> HeadsRun:
    stack = stack_heads(list(heads))
    model = Model(d=stack.d, beta=float(beta), attention=attention, heads=ConstantHeads(stack), direction=direction)
    every = save_every if save_every is not None else (t_final / 20 if t_final > 0 else 1.0)
    result = solve(Problem(model, x0), ParticleSolver(dt=dt, method=method), t_final=t_final, save_every=every, energy=False, speed=False)
    target = layer_target(heads, result.states[0])
    T = len(result.t)
    w2s, omg, mins, ncl, ent = (np.empty(T) for _ in range(5))
    for k, x in enumerate(result.states):
        w2s[k] = w2(x, target.atoms, b=target.weights, cost="geodesic", method="exact")
        stats = cluster_statistics(x, tol=cluster_tol)
        omg[k], mins[k], ncl[k] = stats["one_minus_gamma"], stats["min_inner"], stats["n_clusters"]
        entropy, _ = entropy_and_production(x, model.velocity(x, float(result.t[k])), stack, beta=float(beta))
        ent[k] = float(np.mean(entropy))
    return HeadsRun(
        label=label, t=np.asarray(result.t), x=np.stack(result.states), w2_target=w2s,
        one_minus_gamma=omg, min_inner=mins, n_clusters=ncl, entropy=ent, target=target, info=dict(result.info),
    )


def resolve_beta(beta: float | str, checkpoint: Checkpoint, layer: int) -> float:
    """``"model"`` → :math:`1/\\sqrt{d_h}`, ``"ln"`` → :math:`r^2/\\sqrt{d_h}`, a number → itself."""
    if isinstance(beta, str):
        if beta == "model":
            return checkpoint.beta
        if beta == "ln":
            r = checkpoint.token_radius(layer)
            if r is None:
                raise ConfigError("beta", "beta='ln' needs the LayerNorm before the layer; the checkpoint has none")
            return r * r * checkpoint.beta
        raise ConfigError("beta", f"expected 'model', 'ln' or a number, got {beta!r}")
    b = float(beta)
    if not (math.isfinite(b) and b >= 0):
        raise ConfigError("beta", f"must be finite and >= 0, got {beta!r}")
    return b


def compare_with_random(
    checkpoint: Checkpoint | str | Path,
    layer: int,
    sentence: str,
    t_final: float,
    *,
    heads: Sequence[int] | None = None,
    beta: float | str = "model",
    attention: str = "softmax",
    direction: str = "ascent",
    dt: float = 0.05,
    save_every: float | None = None,
    method: str = "rk4",
    seed: int = 0,
    cluster_tol: float = 1e-3,
) -> RealHeadsComparison:
    r"""Trained heads of ``layer`` against norm-matched random heads, from the tokens of ``sentence``.

    .. math::

        W_2(\rho_t,\Pi_\sharp\rho_0),\quad 1-\gamma(t),\quad \#\text{clusters}(t),\quad
        \overline{\mathcal H}(t)\qquad\text{for trained and random }(Q_h,K_h,V_h)

    (Thm 1 of arXiv 2605.10931; Pendharkar (arXiv 2605.04279) Thms 22, 27; see the module notes for the target,
    the baseline and the temperature).

    Parameters
    ----------
    checkpoint : Checkpoint, str or Path
        A loaded checkpoint, a path, or ``"minilm"``.
    layer : int
    sentence : str
    t_final : float
        Final time (one unit ≈ one layer).
    heads : sequence of int, optional
        Heads of the layer to use (default all).
    beta : float, "model" or "ln"
    attention, direction, dt, save_every, method, cluster_tol
        Passed to :func:`run_heads`.
    seed : int
        Seed of the random baseline.

    Returns
    -------
    RealHeadsComparison
    """
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    if not (isinstance(t_final, (int, float)) and math.isfinite(t_final) and t_final >= 0):
        raise ConfigError("t_final", f"must be finite and >= 0, got {t_final!r}")
    att = ckpt.layer(layer)
    ids = tuple(range(att.num_heads)) if heads is None else tuple(int(h) for h in heads)
    trained_heads = att.heads(ids)
    baseline = random_like_heads(att, ids, seed=seed)
    emb = embed_sentence(sentence, ckpt)
    b = resolve_beta(beta, ckpt, layer)
    options = dict(beta=b, t_final=float(t_final), attention=attention, direction=direction,
                   dt=dt, save_every=save_every, method=method, cluster_tol=cluster_tol)
    return RealHeadsComparison(
        trained=run_heads(trained_heads, emb.x, label="trained", **options),
        random=run_heads(baseline, emb.x, label="random", **options),
        tokens=emb.tokens, layer=int(layer), heads=ids, beta=b, d=ckpt.d,
    )


def plot_comparison(result: RealHeadsComparison, path: str | Path) -> Path:
    """Three panels against t, trained and random: W2 to Π♯ρ₀, 1−γ, mean attention entropy (with log n)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.2), constrained_layout=True)
    axes = fig.subplots(1, 3)
    for run, style in ((result.trained, "-"), (result.random, "--")):
        axes[0].plot(run.t, run.w2_target, style, label=run.label)
        axes[1].semilogy(run.t, np.maximum(run.one_minus_gamma, 1e-300), style, label=run.label)
        axes[2].plot(run.t, run.entropy, style, label=run.label)
    axes[2].axhline(result.log_n, color="0.6", linewidth=0.8, label="log n")
    for ax, title in zip(axes, ("W2(ρ_t, Π♯ρ₀)", "1 − γ (mean pairwise gap)", "mean attention entropy")):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("t")
        ax.legend(fontsize=7)
    fig.suptitle(f"layer {result.layer}, β={result.beta:.3g}, n={len(result.tokens)}", fontsize=10)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out
