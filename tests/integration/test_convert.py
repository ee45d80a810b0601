"""Loader and forward pass against committed Hugging Face goldens (no PyTorch needed).

tests/goldens/ holds tiny random GPT-2 / BERT checkpoints written by `transformers`'
save_pretrained and the outputs `transformers` computed for them (scripts/make_goldens.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import geomjax as gj
from geomjax.errors import GeomjaxError
from geomjax.convert import load_pretrained, load_tensors, resolve_checkpoint
from tests.unit.test_shapes import unchecked_shapes

GOLD = Path(__file__).resolve().parents[1] / "goldens"
ATOL = 1e-5


@pytest.fixture(scope="module")
def gpt2_gold():
    with np.load(GOLD / "gpt2_tiny_outputs.npz") as z:
        return dict(z)


@pytest.fixture(scope="module")
def bert_gold():
    with np.load(GOLD / "bert_tiny_outputs.npz") as z:
        return dict(z)


@pytest.fixture(scope="module")
def gpt2_loaded():
    return load_pretrained(GOLD / "gpt2_tiny")


def _copy_ckpt(src: Path, dst: Path, tensors: dict | None = None, config: dict | None = None) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text()) if config is None else config
    (dst / "config.json").write_text(json.dumps(cfg))
    save_file(load_file(str(src / "model.safetensors")) if tensors is None else tensors,
              str(dst / "model.safetensors"))
    return dst


# ---------------------------------------------------------------- forward vs Hugging Face goldens


def test_gpt2_golden_forward(gpt2_loaded, gpt2_gold):
    model, params = gpt2_loaded
    assert isinstance(model.config, gj.models.GPT2Config)
    logits, inter = jax.jit(model.apply)({"params": params}, gpt2_gold["ids"])
    np.testing.assert_allclose(logits, gpt2_gold["logits"], atol=ATOL, rtol=0)
    hs = gpt2_gold["hidden_states"]
    assert len(inter.hidden_states) == len(inter.residual) == hs.shape[0] == model.config.n_layer + 1
    for got, want in zip(inter.hidden_states, hs):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    # residual convention: identical except the last state, which is ln_f's input
    for got, want in zip(inter.residual[:-1], hs[:-1]):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    np.testing.assert_allclose(inter.residual[-1], gpt2_gold["ln_f_input"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(inter.final_ln, hs[-1], atol=ATOL, rtol=0)
    assert inter.attentions is None


def test_gpt2_golden_padding(gpt2_loaded, gpt2_gold):
    model, params = gpt2_loaded
    logits, inter = model.apply({"params": params}, gpt2_gold["ids"], gpt2_gold["attention_mask"])
    np.testing.assert_allclose(logits, gpt2_gold["padded_logits"], atol=ATOL, rtol=0)
    for got, want in zip(inter.hidden_states, gpt2_gold["padded_hidden_states"]):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_gpt2_sharded_equals_single(gpt2_loaded, gpt2_gold):
    model, params = gpt2_loaded
    assert len(list((GOLD / "gpt2_tiny_sharded").glob("model-*.safetensors"))) > 1
    model2, params2 = load_pretrained(GOLD / "gpt2_tiny_sharded")
    assert model2.config == model.config
    jax.tree.map(np.testing.assert_array_equal, params, params2)


def test_bert_golden_forward(bert_gold):
    model, params = load_pretrained(GOLD / "bert_tiny")
    c = model.config
    assert isinstance(c, gj.models.BertConfig) and c.add_pooling_layer and not c.causal
    args = (bert_gold["ids"], bert_gold["attention_mask"], bert_gold["token_type_ids"])
    out, inter = model.apply({"params": params}, *args)
    np.testing.assert_allclose(out, bert_gold["last_hidden_state"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(inter.pooler_output, bert_gold["pooler_output"], atol=ATOL, rtol=0)
    assert len(inter.hidden_states) == c.num_hidden_layers + 1
    for got, want in zip(inter.hidden_states, bert_gold["hidden_states"]):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    assert inter.residual is inter.hidden_states and inter.final_ln is None
    _, cinter = model.apply({"params": params}, *args, causal=True)
    for got, want in zip(cinter.hidden_states, bert_gold["causal_hidden_states"]):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_bert_is_decoder_config_means_causal(tmp_path, bert_gold):
    cfg = json.loads((GOLD / "bert_tiny" / "config.json").read_text())
    cfg["is_decoder"] = True
    d = _copy_ckpt(GOLD / "bert_tiny", tmp_path / "dec", config=cfg)
    model, params = load_pretrained(d)
    assert model.config.causal
    _, inter = model.apply({"params": params}, bert_gold["ids"], bert_gold["attention_mask"],
                           bert_gold["token_type_ids"])
    np.testing.assert_allclose(inter.hidden_states[-1], bert_gold["causal_hidden_states"][-1],
                               atol=ATOL, rtol=0)


# ---------------------------------------------------------------- locating checkpoints


def _make_cache_entry(root: Path, src: Path, repo: str, rev: str = "0123abcd") -> Path:
    entry = root / ("models--" + repo.replace("/", "--"))
    snap = entry / "snapshots" / rev
    blobs = entry / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in src.iterdir():
        blob = blobs / f"blob_{f.name}"
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(rev)
    return entry


def test_hf_cache_entry_and_repo_id(tmp_path, monkeypatch, gpt2_loaded):
    _, params = gpt2_loaded
    entry = _make_cache_entry(tmp_path / "hub", GOLD / "gpt2_tiny", "someorg/tiny-gpt2")
    assert resolve_checkpoint(entry) == entry / "snapshots" / "0123abcd"
    _, p1 = load_pretrained(entry)
    jax.tree.map(np.testing.assert_array_equal, params, p1)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _, p2 = load_pretrained("someorg/tiny-gpt2")
    jax.tree.map(np.testing.assert_array_equal, params, p2)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(GeomjaxError, match="neither in the Hugging Face cache.*nor reachable.*--model"):
        load_pretrained("someorg/not-cached")
    # two snapshots and no ref: ambiguous
    (entry / "refs" / "main").unlink()
    shutil.copytree(entry / "snapshots" / "0123abcd", entry / "snapshots" / "fedc", symlinks=True)
    with pytest.raises(FileNotFoundError, match="several snapshots"):
        resolve_checkpoint(entry)
    assert resolve_checkpoint(entry, revision="fedc").name == "fedc"


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path / "empty")
    d = tmp_path / "noweights"
    d.mkdir()
    shutil.copy(GOLD / "gpt2_tiny" / "config.json", d)
    (d / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"pytorch_model\.bin.*safetensors only"):
        load_pretrained(d)
    s = tmp_path / "shard"
    shutil.copytree(GOLD / "gpt2_tiny_sharded", s)
    (s / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00003"):
        load_pretrained(s)


def test_corrupted_safetensors(tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(GOLD / "gpt2_tiny", d)
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])  # truncated
    with pytest.raises(ValueError, match=r"model\.safetensors.*corrupted"):
        load_pretrained(d)
    f.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="corrupted"):
        load_tensors(d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_pretrained(d)


def test_nan_weights_rejected(tmp_path):
    t = load_file(str(GOLD / "gpt2_tiny" / "model.safetensors"))
    t["transformer.ln_f.bias"] = t["transformer.ln_f.bias"].copy()
    t["transformer.ln_f.bias"][0] = np.nan
    d = _copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "nan", tensors=t)
    with pytest.raises(ValueError, match="NaN.*ln_f.bias"):
        load_pretrained(d)


# ---------------------------------------------------------------- config whitelist


_UNSUPPORTED_CONFIGS = [
    ("gpt2_tiny", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
    ("gpt2_tiny", "reorder_and_upcast_attn", True, "reorder_and_upcast_attn"),
    ("gpt2_tiny", "scale_attn_weights", False, "scale_attn_weights"),
    ("gpt2_tiny", "activation_function", "relu", "activation_function"),
    ("gpt2_tiny", "add_cross_attention", True, "add_cross_attention"),
    ("gpt2_tiny", "tie_word_embeddings", False, "tie_word_embeddings"),
    ("gpt2_tiny", "rotary_dim", 4, "unknown attribute.*rotary_dim"),
    ("bert_tiny", "position_embedding_type", "relative_key", "position_embedding_type"),
    ("bert_tiny", "hidden_act", "relu", "hidden_act"),
    ("bert_tiny", "add_cross_attention", True, "add_cross_attention"),
    ("bert_tiny", "embedding_size", 4, "embedding_size"),
    ("bert_tiny", "model_type", "roberta", "model_type='roberta'"),
]


@pytest.mark.parametrize("ckpt,key,value,match", _UNSUPPORTED_CONFIGS)
def test_unsupported_config(tmp_path, ckpt, key, value, match):
    """A GPT-2 / BERT config.json entry the converter does not implement is refused, naming the entry."""
    cfg = json.loads((GOLD / ckpt / "config.json").read_text())
    cfg[key] = value
    d = _copy_ckpt(GOLD / ckpt, tmp_path / key, config=cfg)
    with pytest.raises(ValueError, match=match):
        load_pretrained(d)


def test_unknown_config_key_can_be_ignored_explicitly(tmp_path):
    cfg = json.loads((GOLD / "gpt2_tiny" / "config.json").read_text())
    cfg["my_note"] = "hello"
    d = _copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "note", config=cfg)
    with pytest.raises(ValueError, match="ignore_config_keys"):
        load_pretrained(d)
    model, _ = load_pretrained(d, ignore_config_keys=["my_note"])
    assert model.config.n_layer == 2


# ---------------------------------------------------------------- tensor tables


def test_prefix_variants(tmp_path, gpt2_loaded):
    _, params = gpt2_loaded
    t = load_file(str(GOLD / "gpt2_tiny" / "model.safetensors"))
    bare = {k.removeprefix("transformer."): v for k, v in t.items()}
    bare["h.0.attn.bias"] = np.tril(np.ones((1, 1, 8, 8), np.float32))  # old causal-mask buffer
    _, p = load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "bare", tensors=bare))
    jax.tree.map(np.testing.assert_array_equal, params, p)
    # a saved (tied) lm_head equal to wte is accepted; an untied one is rejected
    t2 = dict(t, **{"lm_head.weight": t["transformer.wte.weight"]})
    load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "lm", tensors=t2))
    t3 = dict(t, **{"lm_head.weight": t["transformer.wte.weight"] + 1})
    with pytest.raises(ValueError, match="untied"):
        load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "lm3", tensors=t3))

    b = load_file(str(GOLD / "bert_tiny" / "model.safetensors"))
    _, pb = load_pretrained(GOLD / "bert_tiny")
    pref = {"bert." + k: v for k, v in b.items()}
    pref["bert.embeddings.position_ids"] = np.arange(8, dtype=np.int64)[None]
    pref["cls.predictions.bias"] = np.zeros(24, np.float32)
    d = _copy_ckpt(GOLD / "bert_tiny", tmp_path / "bertpref", tensors=pref)
    with pytest.raises(ValueError, match=r"unused tensors: cls\.predictions\.bias.*ignore=\('cls\.',\)"):
        load_pretrained(d)
    _, pb2 = load_pretrained(d, ignore=("cls.",))
    jax.tree.map(np.testing.assert_array_equal, pb, pb2)


def test_missing_unused_and_misshapen_tensors(tmp_path):
    t = load_file(str(GOLD / "gpt2_tiny" / "model.safetensors"))
    miss = {k: v for k, v in t.items() if k != "transformer.h.1.ln_2.weight"}
    with pytest.raises(ValueError, match=r"missing tensors: h\.1\.ln_2\.weight.*unfilled parameters: h_1/ln_2/scale"):
        load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "miss", tensors=miss))
    extra = dict(t, **{"transformer.h.2.ln_1.weight": np.ones(8, np.float32)})
    with pytest.raises(ValueError, match=r"unused tensors: h\.2\.ln_1\.weight"):
        load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "extra", tensors=extra))
    bad = dict(t, **{"transformer.wpe.weight": np.zeros((9, 8), np.float32)})
    with pytest.raises(ValueError, match=r"wpe/embedding: expected \(8, 8\), got \(9, 8\)"):
        load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "shape", tensors=bad))
    badqkv = dict(t, **{"transformer.h.0.attn.c_attn.weight": np.zeros((8, 16), np.float32)})
    with pytest.raises(ValueError, match=r"c_attn\.weight: expected shape \(8, 24\)"):
        load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "qkv", tensors=badqkv))


def test_dtypes(tmp_path, gpt2_loaded):
    _, params = gpt2_loaded
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype("float32")}
    t = load_file(str(GOLD / "gpt2_tiny" / "model.safetensors"))
    half = {k: v.astype(np.float16) for k, v in t.items()}
    d = _copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "half", tensors=half)
    _, ph = load_pretrained(d)
    assert {x.dtype for x in jax.tree.leaves(ph)} == {jnp.dtype("float16")}
    _, p32 = load_pretrained(d, dtype="float32")
    assert {x.dtype for x in jax.tree.leaves(p32)} == {jnp.dtype("float32")}
    mixed = dict(t, **{"transformer.ln_f.bias": t["transformer.ln_f.bias"].astype(np.float16)})
    d2 = _copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "mixed", tensors=mixed)
    with pytest.raises(ValueError, match="mixed dtypes"):
        load_pretrained(d2)
    intw = dict(t, **{"transformer.ln_f.bias": t["transformer.ln_f.bias"].astype(np.int32)})
    with pytest.raises(ValueError, match="floating point"):
        load_pretrained(_copy_ckpt(GOLD / "gpt2_tiny", tmp_path / "int", tensors=intw))


# ---------------------------------------------------------------- inputs, per-head access


def test_bad_inputs(gpt2_loaded):
    model, params = gpt2_loaded
    v = {"params": params}
    with pytest.raises(ValueError, match=r"sequence length 9 exceeds the model's 8 positions"):
        model.apply(v, np.zeros((1, 9), np.int32))
    with pytest.raises(ValueError, match=r"\[0, 24\).*max 24"):
        model.apply(v, np.array([[1, 24]]))
    with pytest.raises(ValueError, match="min -1"):
        model.apply(v, np.array([[-1, 2]]))
    with pytest.raises(ValueError, match="integer dtype"), unchecked_shapes():  # geomjax's message, not the hook's
        model.apply(v, np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="2-D"), unchecked_shapes():
        model.apply(v, np.zeros(3, np.int32))
    # large int64 ids are rejected, not wrapped to int32
    with pytest.raises(ValueError, match="max 4294967297"):
        model.apply(v, np.array([[2**32 + 1]], np.int64))
    # under jit values cannot be checked eagerly: an out-of-range id poisons the output with NaN
    # (0 * NaN in the attention-weighted sum spreads it over the whole row; other rows are clean)
    logits, _ = jax.jit(model.apply)(v, jnp.array([[1, 24, 3], [1, 2, 3]], jnp.int32))
    assert np.all(np.isnan(np.asarray(logits[0])))
    assert np.all(np.isfinite(np.asarray(logits[1])))


def test_attention_weights_recompute_probs(gpt2_loaded, gpt2_gold):
    """Per-head W_q/W_k/b_q/b_k + ln_1 recompute the model's attention probabilities."""
    model, params = gpt2_loaded
    c = model.config
    ids = gpt2_gold["ids"]
    _, inter = model.apply({"params": params}, ids, return_attention=True)
    assert len(inter.attentions) == c.n_layer
    for layer in range(c.n_layer):
        w = gj.models.attention_weights(params, c, layer)
        H, d, K = c.n_head, c.n_embd, c.head_dim
        assert w["W_q"].shape == w["W_k"].shape == w["W_v"].shape == (H, d, K)
        assert w["W_o"].shape == (H, K, d) and w["b_q"].shape == (H, K) and w["b_o"].shape == (d,)
        x = np.asarray(inter.residual[layer], np.float64)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        xn = (x - mu) / np.sqrt(var + c.layer_norm_epsilon) * np.asarray(w["ln_1_scale"]) + np.asarray(w["ln_1_bias"])
        q = np.einsum("btd,hdk->bhtk", xn, np.asarray(w["W_q"], np.float64)) + np.asarray(w["b_q"])[None, :, None]
        k = np.einsum("btd,hdk->bhtk", xn, np.asarray(w["W_k"], np.float64)) + np.asarray(w["b_k"])[None, :, None]
        s = np.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(K)
        T = ids.shape[1]
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(inter.attentions[layer], p, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match=r"layer must lie in \[0, 2\)"):
        gj.models.attention_weights(params, c, 2)


def test_configs_are_hashable_and_params_match_init():
    for d in ("gpt2_tiny", "bert_tiny"):
        model, params = load_pretrained(GOLD / d)
        assert hash(model.config) == hash(gj.convert.load_config(GOLD / d))
        with pytest.raises(Exception):
            model.config.vocab_size = 3  # frozen
        init = jax.eval_shape(model.init, jax.random.key(0), np.zeros((1, 3), np.int32))["params"]
        assert jax.tree.structure(init) == jax.tree.structure(params)
        assert jax.tree.map(lambda a: (a.shape, a.dtype), init) == jax.tree.map(lambda a: (a.shape, a.dtype), params)


def test_minilm_checkpoint_loads():
    path = gj.convert.minilm_path()
    model, params = gj.convert.load_pretrained(path)
    c = model.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.hidden_size) == (6, 12, 384)
    assert c.add_pooling_layer and c.vocab_size == 30522 and c.max_position_embeddings == 512
    n_tensors = len([k for k in load_tensors(path) if not k.endswith("position_ids")])
    # every HF tensor fills one geomjax parameter
    assert len(jax.tree.leaves(params)) == n_tensors
