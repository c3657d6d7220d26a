"""What the checkpoint loader and the sentence embeddings refuse, and how they say it.

Every broken checkpoint here is a small BERT-style file written in ``tmp_path`` from
:func:`~meanfield.heads.checkpoint.write_synthetic_checkpoint` with one thing damaged (a tensor's shape, type or
values, a missing tensor, a gap in the layers, ``config.json``, ``tokenizer.json``, the file's bytes).  Each is
refused while a config naming it is resolved, before any file is written, by a ConfigError that names the key the
user wrote, the file at fault and the tensor or setting.
"""
from __future__ import annotations

import json
import shutil
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from meanfield.build import initial_tokens
from meanfield.cli import main
from meanfield.config import load_config
from meanfield.errors import ConfigError
from meanfield.heads.checkpoint import load_checkpoint, write_synthetic_checkpoint
from meanfield.heads.embeddings import embed_sentence, sentence_tokens, tokens_from_config

Q0 = "encoder.layer.0.attention.self.query.weight"
K1 = "encoder.layer.1.attention.self.key.weight"
WORDS = "embeddings.word_embeddings.weight"
POSITIONS = "embeddings.position_embeddings.weight"
SENTENCE = "the cat sat on a mat"
SAFETENSORS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"


def _bfloat16(a: np.ndarray) -> bytes:
    """bfloat16 bytes of ``a``: the upper half of each float32 (NumPy has no bfloat16 type to write them with)."""
    return (a.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()


def _raw_safetensors(tensors: dict[str, np.ndarray], *, bfloat16: tuple[str, ...] = ()) -> bytes:
    """A safetensors file written by hand (8-byte header length, JSON header, data), float32 or bfloat16 tensors."""
    header, body = {}, b""
    for name, a in tensors.items():
        data = _bfloat16(a) if name in bfloat16 else a.astype("<f4").tobytes()
        header[name] = {"dtype": "BF16" if name in bfloat16 else "F32", "shape": list(a.shape),
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def _variants(good: Path) -> dict[str, dict[str, Any]]:
    """name -> how the file differs from ``good``: ``tensors`` (a dict), ``raw`` (bytes), ``config`` (a dict, a
    string or None for none), ``tokenizer`` (False for none, or its text)."""
    t = load_file(str(good))
    config = json.loads((good.parent / CONFIG).read_text())

    def but(**changes: np.ndarray | None) -> dict[str, np.ndarray]:
        out = dict(t)
        for name, value in changes.items():
            name = name.replace("__", ".")
            if value is None:
                out.pop(name)
            else:
                out[name] = value
        return out

    def poisoned(name: str, value: float, *, at: int = 0) -> dict[str, np.ndarray]:
        a = t[name].copy()
        a.reshape(-1)[at] = value
        return but(**{name: a})

    data = good.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header[Q0]["shape"] = [8, 9]  # more elements than its bytes hold
    lie = json.dumps(header).encode()
    lie += b" " * (-len(lie) % 8)
    d = t[WORDS].shape[1]
    the = 4  # the row of "the" ([PAD] [UNK] [CLS] [SEP] the ...): read for the sentence
    return {
        "truncated": {"raw": data[:-100]},
        "empty": {"raw": b""},
        "garbage": {"raw": b"not a safetensors file" * 10},
        "header_lies": {"raw": struct.pack("<Q", len(lie)) + lie + data[8 + size:]},
        "W_k_8x6": {"tensors": but(**{K1: t[K1][:, :6].copy()})},
        "W_k_6x8": {"tensors": but(**{K1: t[K1][:6].copy()})},
        "W_q_1d": {"tensors": but(**{Q0: t[Q0].reshape(-1).copy()})},
        "W_o_8x10": {"tensors": but(encoder__layer__1__attention__output__dense__weight=np.zeros((8, 10), np.float32))},
        "no_W_k": {"tensors": but(**{K1: None})},
        "bias_7": {"tensors": but(encoder__layer__0__attention__self__query__bias=np.zeros(7, np.float32))},
        "int_W_k": {"tensors": but(**{K1: t[K1].astype(np.int32)})},
        "bool_W_k": {"tensors": but(**{K1: t[K1] > 0})},
        "nan_W_k": {"tensors": poisoned(K1, np.nan, at=11)},
        "inf_bias": {"tensors": poisoned("encoder.layer.1.attention.self.key.bias", np.inf)},
        "f16_overflow": {"tensors": but(**{K1: np.concatenate([[np.float16(6e4) * 2], t[K1].reshape(-1)[1:]]).astype(np.float16).reshape(8, 8)})},
        "bf16_W_k": {"raw": _raw_safetensors(t, bfloat16=(K1,))},
        "layer_gap": {"tensors": {k.replace("encoder.layer.1.", "encoder.layer.2."): v for k, v in t.items()}},
        "two_encoders": {"tensors": {**{"student." + k: v for k, v in t.items()}, **{"teacher.bert." + k: 2 * v for k, v in t.items()}}},
        "no_config": {"config": None},
        "bad_json": {"config": "{not json"},
        "heads_3": {"config": {**config, "num_attention_heads": 3}},
        "hidden_16": {"config": {**config, "hidden_size": 16}},
        "eps_negative": {"config": {**config, "layer_norm_eps": -1}},
        "roberta": {"config": {**config, "model_type": "roberta"}},
        "relative_positions": {"config": {**config, "position_embedding_type": "relative_key"}},
        "no_tokenizer": {"tokenizer": False},
        "bad_tokenizer": {"tokenizer": "{}"},
        "no_words": {"tensors": but(**{WORDS: None})},
        "words_too_narrow": {"tensors": but(**{WORDS: t[WORDS][:, :6].copy()})},
        "words_too_few": {"tensors": but(**{WORDS: t[WORDS][:6].copy()})},
        "nan_word": {"tensors": poisoned(WORDS, np.nan, at=the * d + 3)},
        "two_positions": {"tensors": but(**{POSITIONS: t[POSITIONS][:2].copy()})},
        "inf_gain": {"tensors": poisoned("embeddings.LayerNorm.weight", np.inf)},
    }


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of broken checkpoints, one subfolder per entry of :func:`_variants` (and ``good``)."""
    root = tmp_path_factory.mktemp("broken")
    good = write_synthetic_checkpoint(root / "good", d=8, num_layers=2, num_heads=2)
    with np.errstate(over="ignore"):
        variants = _variants(good)
    for name, v in variants.items():
        folder = root / name
        folder.mkdir()
        if "raw" in v:
            (folder / SAFETENSORS).write_bytes(v["raw"])
        else:
            save_file(v.get("tensors", load_file(str(good))), str(folder / SAFETENSORS))
        config = v.get("config", json.loads((good.parent / CONFIG).read_text()))
        if config is not None:
            (folder / CONFIG).write_text(config if isinstance(config, str) else json.dumps(config))
        tokenizer = v.get("tokenizer", True)
        if tokenizer is True:
            shutil.copy(good.parent / TOKENIZER, folder / TOKENIZER)
        elif tokenizer:
            (folder / TOKENIZER).write_text(tokenizer)
    return root


#: variant -> (the file named, words of the message)
REFUSALS = {
    "truncated": (SAFETENSORS, "is not a readable safetensors file"),
    "empty": (SAFETENSORS, "is not a readable safetensors file"),
    "garbage": (SAFETENSORS, "is not a readable safetensors file"),
    "header_lies": (SAFETENSORS, "is not a readable safetensors file"),
    "W_k_8x6": (SAFETENSORS, "layer 1 W_k has shape (8, 6); expected square (d, d)"),
    "W_k_6x8": (SAFETENSORS, "layer 1 W_k has shape (6, 8); expected square (d, d)"),
    "W_q_1d": (SAFETENSORS, "layer 0 W_q has shape (64,); expected square (d, d)"),
    "W_o_8x10": (SAFETENSORS, "layer 1 W_o has shape (8, 10); expected square (d, d)"),
    "no_W_k": (SAFETENSORS, f"layer 1 lacks {K1}"),
    "bias_7": (SAFETENSORS, "layer 0 b_q has shape (7,); expected (8,)"),
    "int_W_k": (SAFETENSORS, f"tensor {K1!r} is of type int32; weights are floating point"),
    "bool_W_k": (SAFETENSORS, f"tensor {K1!r} is of type bool; weights are floating point"),
    "nan_W_k": (SAFETENSORS, f"tensor {K1!r} holds non-finite values"),
    "inf_bias": (SAFETENSORS, "tensor 'encoder.layer.1.attention.self.key.bias' holds non-finite values"),
    "f16_overflow": (SAFETENSORS, f"tensor {K1!r} holds non-finite values"),
    "bf16_W_k": (SAFETENSORS, f"tensor {K1!r} is stored as BF16, which NumPy cannot read; convert the checkpoint to float32"),
    "layer_gap": (SAFETENSORS, "layer indices [0, 2] are not 0..L-1"),
    "two_encoders": (SAFETENSORS, "holds 2 encoders, under the prefixes 'student.' and 'teacher.bert.'"),
    "no_config": (SAFETENSORS, "no config.json with num_attention_heads beside the checkpoint; give the number of heads"),
    "bad_json": (CONFIG, "cannot read"),
    "heads_3": (CONFIG, "num_attention_heads = 3 does not divide d = 8"),
    "hidden_16": (SAFETENSORS, "config.json says hidden_size=16 but the weights have d=8"),
    "eps_negative": (CONFIG, "layer_norm_eps must be a number > 0, got -1"),
    "roberta": (SAFETENSORS, "model_type = 'roberta'"),
    "relative_positions": (CONFIG, "position_embedding_type = 'relative_key'; only 'absolute' is implemented"),
    "no_tokenizer": (SAFETENSORS, "no tokenizer.json beside"),
    "bad_tokenizer": (TOKENIZER, "cannot read"),
    "no_words": (SAFETENSORS, f"lacks {WORDS}"),
    "words_too_narrow": (SAFETENSORS, f"tensor {WORDS!r} has shape (13, 6); expected (rows ≥ 1, 8)"),
    "words_too_few": (TOKENIZER, f"gives token id 9 (for 'mat'), but the word-embedding table {WORDS!r}"),
    "nan_word": (SAFETENSORS, f"tensor {WORDS!r} holds non-finite values"),
    "two_positions": (SAFETENSORS, f"tensor {POSITIONS!r} has 2 rows; a sentence needs at least 3 positions"),
    "inf_gain": (SAFETENSORS, "tensor 'embeddings.LayerNorm.weight' holds non-finite values"),
}


def _sentence_config(folder: Path) -> dict[str, Any]:
    return {"model": {"d": 8, "heads": f"checkpoint:{folder}#layer=1"},
            "init": {"kind": "sentence", "sentence": SENTENCE}, "solver": {"t_final": 0.1, "save_every": 0.05}}


def test_every_variant_is_listed(broken: Path) -> None:
    assert set(REFUSALS) == {p.name for p in broken.iterdir()} - {"good"}
    load_config(_sentence_config(broken / "good"))  # the undamaged file resolves


@pytest.mark.parametrize(("name", "named", "words"), [(k, *v) for k, v in REFUSALS.items()], ids=list(REFUSALS))
def test_a_broken_checkpoint_is_refused_naming_the_key_the_file_and_the_tensor(broken: Path, name: str, named: str,
                                                                                words: str) -> None:
    # resolution had only parsed model.heads: a broken file was found by the run, after the output was opened
    folder = broken / name
    with pytest.raises(ConfigError) as err:
        load_config(_sentence_config(folder))
    assert err.value.key == "model.heads"  # the key written (init.checkpoint, not given, had been named for the embeddings)
    assert str(folder / named) in err.value.message and words in err.value.message, err.value.message


@pytest.mark.parametrize("name", ["nan_W_k", "relative_positions", "words_too_few", "no_words"])
def test_a_broken_init_checkpoint_is_named_as_init_checkpoint(broken: Path, name: str) -> None:
    cfg = _sentence_config(broken / "good")
    cfg["init"]["checkpoint"] = str(broken / name)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert err.value.key == "init.checkpoint" and str(broken / name) in err.value.message


@pytest.mark.parametrize("name", ["nan_W_k", "int_W_k", "bf16_W_k", "heads_3"])
def test_the_loader_names_the_file_of_a_bad_tensor(broken: Path, name: str) -> None:
    # "tensor '…' holds non-finite values" had not said in which file; bfloat16 had been "data type 'bfloat16' not
    # understood", with no tensor named and nothing to do
    named, words = REFUSALS[name]
    with pytest.raises(ConfigError) as err:
        load_checkpoint(broken / name)
    assert err.value.key == "CHECKPOINT" and str(broken / name / named) in err.value.message and words in err.value.message


def test_a_file_with_two_encoders_is_refused_naming_both(broken: Path) -> None:
    # the shorter prefix ('student.') had been taken without a word
    with pytest.raises(ConfigError, match="holds 2 encoders, under the prefixes 'student.' and 'teacher.bert.'"):
        load_checkpoint(broken / "two_encoders")


def test_sentence_embeddings_of_a_relative_position_bert_are_refused(broken: Path) -> None:
    # its position table had been added to the tokens (the model does not add it), without a word
    ckpt = load_checkpoint(broken / "relative_positions")
    with pytest.raises(ConfigError, match="position_embedding_type = 'relative_key'; only 'absolute'") as err:
        embed_sentence(SENTENCE, ckpt)
    assert err.value.key == "CHECKPOINT" and str(broken / "relative_positions" / CONFIG) in err.value.message
    with pytest.raises(ConfigError, match="has 2 rows; a sentence needs at least 3 positions"):  # (had blamed the text)
        embed_sentence(SENTENCE, load_checkpoint(broken / "two_positions"))


def test_heads_of_a_relative_position_bert_come_with_a_note(broken: Path) -> None:
    # the heads were taken without a word that the model's scores have a relative-position term they leave out
    from meanfield.errors import ConfigNote
    from meanfield.heads.checkpoint import heads_from_checkpoint_spec

    with pytest.warns(ConfigNote, match="position_embedding_type = 'relative_key': the model adds a relative-position"):
        heads = heads_from_checkpoint_spec(f"checkpoint:{broken / 'relative_positions'}#layer=0")
    assert len(heads) >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNote)
        heads_from_checkpoint_spec(f"checkpoint:{broken / 'good'}#layer=0")  # an absolute-position BERT: no note


@pytest.mark.parametrize("name", ["words_too_few", "no_words"])
def test_a_word_table_that_does_not_fit_is_blamed_on_the_checkpoint(broken: Path, name: str, capsys) -> None:
    # it had been blamed on the sentence ("--sentence: token id 9 is outside the word-embedding table (6 rows)")
    named, words = REFUSALS[name]
    with pytest.raises(ConfigError) as err:
        embed_sentence(SENTENCE, load_checkpoint(broken / name), key="--sentence")
    assert err.value.key == "CHECKPOINT" and str(broken / name / named) in err.value.message and words in err.value.message
    assert main(["inspect", str(broken / name), "--layer", "0", "--sentence", SENTENCE]) == 2
    assert "error: CHECKPOINT: " in capsys.readouterr().err


def test_the_key_the_user_wrote_names_a_fault_of_the_embeddings(broken: Path) -> None:
    # with init.checkpoint not given, a fault of model.heads' file had been named init.checkpoint
    for given, key in ((False, "model.heads"), (True, "init.checkpoint")):
        cfg = _sentence_config(broken / "roberta")
        if given:
            cfg["init"]["checkpoint"] = str(broken / "roberta")
        with pytest.raises(ConfigError) as err:
            tokens_from_config({"model": cfg["model"], "init": cfg["init"]})
        assert err.value.key == key and "model_type = 'roberta'" in err.value.message


def test_a_folder_with_several_other_safetensors_lists_them(broken: Path, tmp_path: Path) -> None:
    for name in ("b.safetensors", "a.safetensors"):
        shutil.copy(broken / "good" / SAFETENSORS, tmp_path / name)
    with pytest.raises(ConfigError, match=r"no model\.safetensors in folder .*, and 2 other \.safetensors files "
                                          r"\(a\.safetensors, b\.safetensors\)"):
        load_checkpoint(tmp_path)


def test_sentence_tokens_from_a_checkpoint_without_config_json(broken: Path) -> None:
    # the embeddings had asked for num_heads (under init.checkpoint, which has no such option), given in model.heads
    expected = sentence_tokens(SENTENCE, broken / "good")
    cfg = _sentence_config(broken / "no_config")
    cfg["model"]["heads"] += "&num_heads=2"
    np.testing.assert_array_equal(initial_tokens(load_config(cfg)), expected)
    cfg = _sentence_config(broken / "good")  # and init.checkpoint without config.json: the head count is not needed
    cfg["init"]["checkpoint"] = str(broken / "no_config")
    np.testing.assert_array_equal(initial_tokens(load_config(cfg)), expected)


def test_simulate_refuses_a_broken_sentence_checkpoint_before_writing(broken: Path, tmp_path: Path, capsys) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[model]\nd = 8\nheads = "checkpoint:{broken / "good"}#layer=1"\n'
                      f'[init]\nkind = "sentence"\nsentence = "{SENTENCE}"\ncheckpoint = "{broken / "words_too_few"}"\n')
    assert main(["simulate", str(config), "-o", str(tmp_path / "o.h5"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error: init.checkpoint: " in err and str(broken / "words_too_few" / TOKENIZER) in err  # (had blamed the sentence)
    assert not (tmp_path / "o.h5").exists()
