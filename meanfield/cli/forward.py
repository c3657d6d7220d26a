r"""``meanfield forward "SENTENCE"``: a real model's full forward pass against the mean-field dynamics of its heads.

The real model (:func:`meanfield.heads.forward.forward_pass`: embeddings, then every layer's
attention with its biases, residuals, LayerNorms and the GELU MLP, in NumPy) gives the hidden
states :math:`h^\ell_i`, :math:`\ell=0..L`.  The mean-field dynamics on the same checkpoint's
heads, one unit of time per layer with that layer's heads
(:func:`meanfield.solvers.experiments.forward.meanfield_layers`),

.. math::

    \dot x_i = P^\perp_{x_i}\sum_h\sum_j\operatorname{softmax}_j(\beta_\ell\,x_i^\top B^\ell_hx_j)\,V^\ell_hx_j,
    \qquad t\in[\ell-1,\ell],\qquad x_i(0) = h^0_i/\|h^0_i\|,

gives :math:`x_i(\ell)`.  For every layer the command prints the mean and spread of the
inner products :math:`\langle x_i,x_j\rangle` (:math:`i<j`) of both, their 1-Wasserstein distance, the mean
pairwise difference, and the distance of the real distribution to the initial one (the
error of a model in which nothing moves), as in the ALBERT comparison of Geshkovski,
Letrouit, Polyanskiy and Rigollet (arXiv 2305.05465).

Temperature: ``--beta ln`` (default) takes :math:`\beta_\ell = r_\ell^2/\sqrt{d_h}`, with
:math:`r_\ell` the LayerNorm radius feeding layer :math:`\ell`
(:meth:`meanfield.heads.checkpoint.Checkpoint.token_radius`), an estimate from the LayerNorm's weights that
overstates a real sentence's :math:`\|h\|^2/\sqrt{d_h}` by up to 2× (see the README); ``--beta model`` is the literal :math:`1/\sqrt{d_h}`; a number is used
as is for every layer.

Examples
--------
``meanfield forward "The quick brown fox jumps over the lazy dog." --plot forward.png --csv forward.csv``
``meanfield forward "hello world" --no-meanfield --embedding``
"""
from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from meanfield.cli.options import dump_json, parse_float, parse_int, picture_path, table_path
from meanfield.errors import ConfigError

__all__ = ["format_rows", "add_parser", "main"]


_HEADERS = (("layer", "L", 2, "d"), ("mean_radius", "‖h‖", 6, ".2f"), ("mean_real", "real⟨x,y⟩", 9, ".4f"),
            ("std_real", "±", 6, ".3f"), ("beta", "β", 7, ".3g"), ("mean_model", "MF⟨x,y⟩", 8, ".4f"), ("std_model", "±", 6, ".3f"),
            ("w1", "W1", 7, ".4f"), ("pair_mae", "|ΔG|", 7, ".4f"), ("w1_static", "W1(·,ℓ=0)", 9, ".4f"),
            ("refine_gram", "Δ(dt/2)", 8, ".1e"))


def format_rows(rows: Sequence[dict[str, Any]]) -> str:
    """The table printed by ``meanfield forward`` (columns present in the rows only)."""
    cols = [h for h in _HEADERS if h[0] in rows[0]]
    lines = [" ".join(title.rjust(w) for _, title, w, _ in cols)]
    lines.append("-" * len(lines[0]))
    for row in rows:
        cells = []
        for key, _, width, fmt in cols:
            v = row[key]
            cells.append(("-" if isinstance(v, float) and math.isnan(v) else format(v, fmt)).rjust(width))
        lines.append(" ".join(cells))
    return "\n".join(lines)


DESCRIPTION = """\
A real transformer's full forward pass (embeddings, then per layer: multi-head attention with its biases,
residual and LayerNorm, the GELU MLP, residual and LayerNorm; NumPy only) on one sentence, against the
mean-field dynamics run on the same checkpoint's heads, one unit of time per layer. For each layer it prints
the mean and spread of the inner products <x_i, x_j> of the normalised hidden states (real model, and
mean-field), the 1-Wasserstein distance between the two distributions, the mean pairwise difference, and the
distance of the real distribution to the initial one (the error of a model in which nothing moves): the
comparison with trained weights of Geshkovski, Letrouit, Polyanskiy and Rigollet (arXiv 2305.05465).
--beta ln (default) takes beta = r^2/sqrt(d_h) per layer, r the LayerNorm radius; --beta model is
1/sqrt(d_h). --num-heads H gives the heads per layer of a checkpoint with no config.json beside it. --plot
writes the layer-by-layer histograms, --csv the table.

Examples:
  meanfield forward "The quick brown fox jumps over the lazy dog." --plot forward.png --csv forward.csv
  meanfield forward "hello world" --no-meanfield --embedding"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "forward",
        help="a real model's full forward pass against the mean-field dynamics of its heads",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sentence", metavar="SENTENCE", help="the text to run through the model")
    p.add_argument("--checkpoint", default="minilm", metavar="PATH",
                   help="a .safetensors file, a folder holding model.safetensors, or 'minilm' (default)")
    p.add_argument("--num-heads", metavar="H", help="heads per layer, for a checkpoint with no config.json "
                   "(num_attention_heads) beside it; it must divide d")
    p.add_argument("--beta", default="ln", metavar="ln|model|X", help="inverse temperature of the mean-field runs: 'ln' (default; r^2/sqrt(d_h) per layer), "
                        "'model' (1/sqrt(d_h)) or a number >= 0")
    p.add_argument("--dt", default="0.05", metavar="DT", help="step of the mean-field solver (RK4; default 0.05)")
    p.add_argument("--refine", action="store_true", help="also run the mean-field at dt/2 and report the change")
    p.add_argument("--no-meanfield", action="store_true", help="only the real forward pass")
    p.add_argument("--embedding", action="store_true",
                   help="also print the model's sentence embedding (first 8 entries): its own pooling and normalisation "
                        "(1_Pooling, modules.json) over at most max_seq_length tokens (sentence_bert_config.json), as "
                        "sentence-transformers computes it")
    p.add_argument("--plot", metavar="F.png", help="write the layer-by-layer histograms")
    p.add_argument("--csv", metavar="F.csv", help="write the per-layer table")
    p.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    p.set_defaults(func=main)


def _beta_option(text: str) -> str | float:
    if text in ("ln", "model"):
        return text
    try:
        float(text.strip())
    except ValueError:  # (it had said "expected a number", leaving out the two words)
        raise ConfigError("--beta", f"expected a number >= 0, 'ln' or 'model', got {text!r}") from None
    return parse_float(text, "--beta", nonnegative=True)


def _meanfield_layers(sentence: str, checkpoint: Path, *, beta: str | float, dt: float, num_heads: int | None) -> Any:
    """:func:`meanfield.solvers.experiments.forward.meanfield_layers`, without its second truncation note.

    The run re-tokenizes the sentence as ``init.sentence``, a key the CLI user never wrote; the forward pass
    has already said (as ``SENTENCE``) that a too-long sentence is cut.
    """
    import warnings

    from meanfield.errors import ConfigNote
    from meanfield.solvers.experiments.forward import meanfield_layers

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"init\.sentence: the sentence is cut", category=ConfigNote)
        return meanfield_layers(sentence, checkpoint, beta=beta, dt=dt, num_heads=num_heads)


def main(args: argparse.Namespace) -> int:
    if not args.sentence.strip():
        raise ConfigError("SENTENCE", "is empty; give the text to run, e.g. \"The cat sat on the mat.\"")
    beta = _beta_option(args.beta)
    dt = parse_float(args.dt, "--dt", positive=True)
    if dt > 1.0:
        raise ConfigError("--dt", f"one layer is one unit of time; the step must be <= 1, got {args.dt}")
    num_heads = None if args.num_heads is None else parse_int(args.num_heads, "--num-heads", minimum=1)
    if args.refine and args.no_meanfield:  # (it had been ignored without a word)
        raise ConfigError("--refine", "halves the mean-field run's step, and --no-meanfield runs none; give one of them")
    picture_path(args.plot, "--plot")
    table_path(args.csv, "--csv")
    from meanfield.heads.checkpoint import load_checkpoint
    from meanfield.heads.forward import encoder_weights, forward_pass
    from meanfield.solvers.experiments.forward import comparison_rows

    try:
        ckpt = load_checkpoint(args.checkpoint, num_heads=num_heads)
    except ConfigError as exc:  # the loader's num_heads is the option here (it had asked for a num_heads forward lacked)
        raise ConfigError({"num_heads": "--num-heads", "CHECKPOINT": "--checkpoint"}.get(exc.key, exc.key), exc.message) from None
    weights = encoder_weights(ckpt, key="--checkpoint")
    try:
        fp = forward_pass(args.sentence, weights.checkpoint, key="SENTENCE")
    except ConfigError as exc:  # a tensor read as the sentence needs it (its rows of the word table)
        if exc.key == "CHECKPOINT":
            raise ConfigError("--checkpoint", exc.message) from None
        raise
    path = refined = None
    if not args.no_meanfield:
        if fp.n < 2:
            raise ConfigError("SENTENCE", "the comparison needs at least two tokens")
        path = _meanfield_layers(args.sentence, weights.checkpoint.path, beta=beta, dt=dt, num_heads=num_heads)
        if args.refine:
            refined = _meanfield_layers(args.sentence, weights.checkpoint.path, beta=beta, dt=dt / 2, num_heads=num_heads)
    rows = comparison_rows(fp, path, refined=refined) if fp.n >= 2 else []
    embedding = None
    if args.embedding:  # before any file is written: the pooling files are read here
        try:
            embedding = fp.embedding()
        except ConfigError as exc:
            if exc.key == "CHECKPOINT":
                raise ConfigError("--checkpoint", exc.message) from None
            raise
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)  # missing folders are made, as by every --csv
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["layer"])
            writer.writeheader()
            writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    if args.plot:
        fp.plot(compare=None if path is None else path.x, path=args.plot,
                label=f"mean-field (β={args.beta})")
    if args.json:
        payload: dict[str, Any] = {"checkpoint": str(fp.checkpoint), "sentence": fp.sentence, "tokens": fp.tokens,
                                   "layers": rows, "files": [p for p in (args.plot, args.csv) if p]}
        if embedding is not None:
            payload["embedding"] = embedding.tolist()
        print(dump_json(payload))
        return 0
    ckpt = weights.checkpoint
    print(f"checkpoint: {ckpt.path}  ({ckpt.num_layers} layers, {ckpt.num_heads} heads, d={ckpt.d})")
    print(f"sentence:   {fp.n} tokens {' '.join(fp.tokens)}")
    if rows:
        print(format_rows(rows))
        legend = "⟨x,y⟩: inner products of the normalised hidden states, pairs i<j (mean ± std)"
        if path is not None:  # (--no-meanfield: none of these columns to explain)
            legend += ("; MF: mean-field at t = layer; W1: 1-Wasserstein distance real vs MF; |ΔG|: mean |G_real − G_MF| "
                       "over pairs; W1(·,ℓ=0): real vs the embeddings (no motion)")
        print(legend + ".")
    if embedding is not None:
        print("embedding:  " + " ".join(f"{v:+.6f}" for v in embedding[:8]) + " ...")
    for p in (args.plot, args.csv):
        if p:
            print(f"wrote {p}")
    return 0
