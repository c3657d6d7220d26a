r"""Token embeddings of a sentence from a BERT-style checkpoint, put on the sphere.

.. math::

    e_i = W_{\mathrm{word}}[t_i] + W_{\mathrm{pos}}[i] + W_{\mathrm{type}}[0],\qquad
    u_i = \gamma\odot\frac{e_i-\bar e_i\mathbf 1}{\sqrt{\operatorname{var}(e_i)+\varepsilon}} + b,\qquad
    x_i = \frac{u_i}{\|u_i\|}\in S^{d-1},

for the token ids :math:`t_1,\dots,t_n` of the sentence (the checkpoint's own
``tokenizer.json`` through the ``tokenizers`` library, special tokens such as
``[CLS]``/``[SEP]`` included, no padding), :math:`\bar e_i` and
:math:`\operatorname{var}(e_i)` the mean and (biased) variance over the
:math:`d` features, and :math:`(\gamma, b, \varepsilon)` the checkpoint's
``embeddings.LayerNorm`` gain, shift and ``layer_norm_eps``.  :math:`u_i` is
exactly what BERT's first attention layer reads; the tokens of the mean-field model live
on the unit sphere, so the initial tokens are the LayerNorm outputs divided by
their norms :math:`r_i=\|u_i\|` (which are kept: the real scores are
:math:`r_ir_j\,x_i^\top Bx_j/\sqrt{d_h}`, see :mod:`meanfield.heads.checkpoint`).

These are the initial tokens of a run on real heads: save them with
:func:`save_sentence_tokens` (or ``meanfield inspect CHECKPOINT --sentence "..."
--save-tokens x0.npy``) and use ``[init] kind = "file"``, or build them from a
config with :func:`tokens_from_config`.

Examples
--------
>>> from meanfield.heads.checkpoint import load_checkpoint                       # doctest: +SKIP
>>> x0 = sentence_tokens("The cat sat on the mat.", load_checkpoint("minilm"))  # doctest: +SKIP
>>> x0.shape                                                              # doctest: +SKIP
(9, 384)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError
from meanfield.heads.checkpoint import Checkpoint, load_checkpoint, parse_checkpoint_spec

__all__ = [
    "SentenceEmbedding",
    "load_tokenizer",
    "tokenize",
    "layer_norm",
    "embed_sentence",
    "sentence_tokens",
    "save_sentence_tokens",
    "tokens_from_config",
]


def load_tokenizer(checkpoint: Checkpoint, *, key: str = "CHECKPOINT") -> Any:
    """The checkpoint's ``tokenizer.json`` as a :class:`tokenizers.Tokenizer`, without padding.

    Truncation is set to ``max_position_embeddings`` (the position table's length).
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError(key, "sentence embeddings need the 'tokenizers' package: pip install 'meanfield[real]'") from None
    path = checkpoint.tokenizer_path
    if path is None:
        raise ConfigError(key, f"no tokenizer.json beside {checkpoint.path}")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - a broken tokenizer file is bad input
        raise ConfigError(key, f"cannot read {path}: {exc}") from None
    tok.no_padding()
    return tok


def tokenize(sentence: str, checkpoint: Checkpoint, *, key: str = "sentence") -> tuple[list[str], np.ndarray]:
    """Token strings and ids of ``sentence`` (special tokens included, no padding).

    Sentences longer than the position table are truncated to its length, with a
    :class:`~meanfield.config.ConfigNote`.

    Raises
    ------
    ConfigError
        Naming ``key`` for text that is empty or that the tokenizer reduces to its special tokens
        alone (a zero-width space, control characters, a lone combining accent).
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise ConfigError(key, f"expected a non-empty sentence, got {sentence!r}")
    tok = load_tokenizer(checkpoint)
    positions = "embeddings.position_embeddings.weight"
    max_len = checkpoint.shape(positions)[0] if checkpoint.has(positions) else None
    if max_len is not None:
        tok.enable_truncation(max_length=max_len)
    enc = tok.encode(sentence)
    if enc.overflowing:  # had been silent
        import warnings

        from meanfield.errors import ConfigNote

        warnings.warn(f"{key}: the sentence is cut to the checkpoint's {max_len} positions (its first {max_len - 2} "
                      "tokens, between [CLS] and [SEP])", ConfigNote, stacklevel=2)
    ids = np.asarray(enc.ids, dtype=np.int64)
    if not any(special == 0 for special in enc.special_tokens_mask):  # (the template always adds [CLS] and [SEP]:
        raise ConfigError(key, f"the tokenizer gives no token for {sentence!r} (only "  # "ids.size == 0" never fired)
                               f"{' '.join(enc.tokens) or 'nothing'}); give text with words in it")
    return list(enc.tokens), ids


def layer_norm(e: np.ndarray, gamma: np.ndarray, shift: np.ndarray, *, eps: float) -> np.ndarray:
    r"""LayerNorm over the last axis.

    .. math::

        u = \gamma\odot\frac{e-\bar e}{\sqrt{\operatorname{var}(e)+\varepsilon}}+b,
        \qquad \operatorname{var}(e) = \tfrac1d\sum_k (e_k-\bar e)^2 .

    Examples
    --------
    >>> u = layer_norm(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2), eps=0.0)
    >>> u.tolist()
    [[-1.0, 1.0]]
    """
    e = np.asarray(e, dtype=float)
    centred = e - e.mean(axis=-1, keepdims=True)
    var = np.mean(centred**2, axis=-1, keepdims=True)
    return gamma * centred / np.sqrt(var + eps) + shift


@dataclass(frozen=True)
class SentenceEmbedding:
    """A sentence on the sphere.

    Attributes
    ----------
    sentence : str
    tokens : list of str
        The tokenizer's tokens (with ``[CLS]``, ``[SEP]``).
    ids : (n,) int array
    x : (n, d) array
        Unit tokens :math:`u_i/\\|u_i\\|`.
    radius : (n,) array
        LayerNorm output norms :math:`\\|u_i\\|`.
    """

    sentence: str
    tokens: list[str]
    ids: np.ndarray
    x: np.ndarray
    radius: np.ndarray


def embed_sentence(sentence: str, checkpoint: Checkpoint, *, key: str = "sentence") -> SentenceEmbedding:
    r"""Tokenize, embed, LayerNorm and normalise a sentence (see the module equation).

    Parameters
    ----------
    sentence : str
    checkpoint : Checkpoint
        Must hold ``embeddings.word_embeddings.weight``,
        ``embeddings.position_embeddings.weight`` and ``embeddings.LayerNorm.{weight,bias}``;
        ``embeddings.token_type_embeddings.weight`` (row 0) is added when present.
    key : str
        Name used in error messages.

    Returns
    -------
    SentenceEmbedding
    """
    need = [
        "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias",
    ]
    missing = [name for name in need if not checkpoint.has(name)]
    if missing:  # the checkpoint's fault (it had been blamed on the sentence)
        raise ConfigError("CHECKPOINT", f"{checkpoint.path} lacks {', '.join(checkpoint.prefix + m for m in missing)}")
    checkpoint.check_embeddings()  # the checkpoint's own fault: CHECKPOINT, named by the caller as its option or key
    tokens, ids = tokenize(sentence, checkpoint, key=key)
    word_shape = checkpoint.shape("embeddings.word_embeddings.weight")
    if int(ids.max()) >= word_shape[0]:  # the checkpoint's fault, not the sentence's (it had been blamed on the sentence)
        raise ConfigError("CHECKPOINT", f"{checkpoint.tokenizer_path} gives token id {int(ids.max())} (for "
                                        f"{tokens[int(np.argmax(ids))]!r}), but the word-embedding table "
                                        f"{checkpoint.prefix + 'embeddings.word_embeddings.weight'!r} of {checkpoint.path} "
                                        f"has {word_shape[0]} rows; the tokenizer and the weights do not belong together")
    n = ids.size
    e = checkpoint.tensor("embeddings.word_embeddings.weight", rows=ids) + checkpoint.tensor(
        "embeddings.position_embeddings.weight", rows=np.arange(n)
    )
    if checkpoint.has("embeddings.token_type_embeddings.weight"):
        e = e + checkpoint.tensor("embeddings.token_type_embeddings.weight")[0]
    u = layer_norm(
        e,
        checkpoint.tensor("embeddings.LayerNorm.weight"),
        checkpoint.tensor("embeddings.LayerNorm.bias"),
        eps=checkpoint.layer_norm_eps,
    )
    r = np.linalg.norm(u, axis=1)
    if np.any(r == 0):
        raise ConfigError(key, f"token {tokens[int(np.argmin(r))]!r} has a zero LayerNorm output and cannot be put on the sphere")
    return SentenceEmbedding(sentence=sentence, tokens=tokens, ids=ids, x=u / r[:, None], radius=r)


def sentence_tokens(sentence: str, checkpoint: Checkpoint | str | Path, *, key: str = "sentence") -> np.ndarray:
    """The unit token embeddings of ``sentence``, shape ``(n, d)`` (``checkpoint`` may be a path or ``"minilm"``)."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    return embed_sentence(sentence, ckpt, key=key).x


def save_sentence_tokens(sentence: str, checkpoint: Checkpoint | str | Path, path: str | Path) -> Path:
    """Write :func:`sentence_tokens` to a ``.npy`` file for ``[init] kind = "file"``; returns the path."""
    x = sentence_tokens(sentence, checkpoint)
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, x)
    return p


def tokens_from_config(cfg: dict[str, Any], *, base: Path | None = None) -> np.ndarray:
    """Initial tokens of ``[init] kind = "sentence"``: keys ``sentence`` and ``checkpoint``.

    ``init.checkpoint`` (a path or ``"minilm"``) defaults to the checkpoint of
    ``model.heads = "checkpoint:PATH#..."``.  The tokens' dimension must equal ``model.d``.  The embeddings do not
    need the number of heads: a checkpoint without ``config.json`` is read too.

    Raises
    ------
    ConfigError
        Naming ``init.sentence``, ``model.d``, and for a fault of the checkpoint or its tokenizer the key that
        named the checkpoint: ``init.checkpoint``, or ``model.heads`` when ``init.checkpoint`` is not given.
    """
    init, model = cfg["init"], cfg["model"]
    sentence = init.get("sentence")
    if not isinstance(sentence, str) or not sentence.strip():
        raise ConfigError("init.sentence", "kind='sentence' needs sentence = \"some text\"")
    source = init.get("checkpoint")
    key, num_heads = "init.checkpoint", None
    if source is None:
        heads = model.get("heads")
        if not (isinstance(heads, str) and heads.startswith("checkpoint:")):
            raise ConfigError("init.checkpoint", "kind='sentence' needs checkpoint = PATH or 'minilm' (or model.heads = 'checkpoint:...')")
        spec = parse_checkpoint_spec(heads)  # (faults of this file had been named init.checkpoint, a key not given)
        source, key, num_heads = spec.path, "model.heads", spec.num_heads
    ckpt = load_checkpoint(source, num_heads=num_heads, key=key, base=base, embeddings_only=True)
    try:
        x = embed_sentence(sentence, ckpt, key="init.sentence").x
    except ConfigError as exc:  # a tensor of the checkpoint, or its tokenizer: the config's key for the checkpoint
        if exc.key == "CHECKPOINT":
            raise ConfigError(key, exc.message) from None
        raise
    if x.shape[1] != model["d"]:
        raise ConfigError("model.d", f"the checkpoint's embeddings have d={x.shape[1]}, but model.d={model['d']}")
    return x
