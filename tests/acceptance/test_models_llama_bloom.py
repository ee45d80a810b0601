"""Llama / Mistral / BLOOM ports vs Hugging Face transformers (PyTorch) on tiny random checkpoints.

Each checkpoint is built here with ``save_pretrained`` (safetensors) from a seeded random
transformers model, loaded by geomjax's public loader, and every hidden state, the logits and the
attention probabilities are compared in float32 (≤ 1e-5 absolute-or-relative). The committed
goldens (tests/goldens/{llama,mistral,bloom}_tiny*, scripts/make_goldens.py) keep the same check
alive where transformers is absent or changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

import geomjax as gj
from geomjax.errors import GeomjaxError
from geomjax.theory.positional import alibi_slopes, rope_inv_freq, rotary_from_inv_freq
from tests._marks import slow_beyond_first

GOLD = Path(__file__).resolve().parents[1] / "goldens"
T = 11  # longer than the Mistral window (4) below

# name -> (transformers class names, config kwargs)
CONFIGS = {
    "llama_gqa_untied_theta": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_attention_heads=4, num_key_value_heads=2, rope_theta=5e5, tie_word_embeddings=False)),
    "llama_mha_tied_bias_linear": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True,
        mlp_bias=True, rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "mistral_window": ("MistralConfig", "MistralForCausalLM", dict(
        num_attention_heads=4, num_key_value_heads=1, sliding_window=4, tie_word_embeddings=False)),
    "mistral_mha_tied": ("MistralConfig", "MistralForCausalLM", dict(
        num_attention_heads=4, num_key_value_heads=4, sliding_window=None, tie_word_embeddings=True)),
    "bloom_6heads_tied": ("BloomConfig", "BloomForCausalLM", dict(n_head=6, tie_word_embeddings=True)),
    "bloom_4heads_untied": ("BloomConfig", "BloomForCausalLM", dict(n_head=4, tie_word_embeddings=False)),
}


def _randomize(model, seed: int) -> None:
    """Every parameter random (norm gains around 1), so no term of the forward is trivially zero."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            is_norm = "norm" in name.lower() or "ln_f" in name
            p.copy_((1.0 + 0.2 * noise) if (is_norm and name.endswith("weight")) else 0.2 * noise)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (directory, ids, transformers outputs); the models are built once per module."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for i, (name, (cfg_cls, model_cls, kw)) in enumerate(CONFIGS.items()):
        torch.manual_seed(i)
        size = dict(hidden_size=48, n_layer=2) if cfg_cls == "BloomConfig" else dict(
            hidden_size=64, intermediate_size=96, num_hidden_layers=2)
        cfg = getattr(transformers, cfg_cls)(vocab_size=101, **size, **kw, attn_implementation="eager")
        model = getattr(transformers, model_cls)(cfg).eval()
        _randomize(model, seed=10 + i)
        model.save_pretrained(root / name)
        ids = np.random.default_rng(i).integers(0, 101, (2, T))
        with torch.no_grad():
            o = model(torch.tensor(ids), output_hidden_states=True, output_attentions=True)
        out[name] = (root / name, ids, {"hidden_states": [h.numpy() for h in o.hidden_states],
                                        "logits": o.logits.numpy(),
                                        "attentions": [a.numpy() for a in o.attentions]})
    return out


@pytest.mark.parametrize("name", slow_beyond_first(CONFIGS))
def test_parity_with_transformers(checkpoints, name):
    path, ids, ref = checkpoints[name]
    model, params = gj.convert.load_pretrained(path)
    # one compiled forward (the study's and the lens's are jitted too): run eagerly, each of its operations
    # compiled on its own, it took 0.4-1 s more per config
    logits, inter = jax.jit(model.apply, static_argnames="return_attention")(
        {"params": params}, ids.astype(np.int32), return_attention=True)
    assert len(inter.hidden_states) == len(ref["hidden_states"]) == model.config.num_layers + 1
    for layer, (a, b) in enumerate(zip(inter.hidden_states, ref["hidden_states"])):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5, err_msg=f"{name} layer {layer}")
    np.testing.assert_allclose(np.asarray(logits), ref["logits"], rtol=1e-5, atol=1e-5)
    for a, b in zip(inter.attentions, ref["attentions"]):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)
    # the residual stream equals HF's states except the last, which HF gives after the final norm
    for a, b in zip(inter.residual[:-1], ref["hidden_states"][:-1]):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)


def test_sliding_window_is_honoured(checkpoints):
    """The window changes the output (so the Mistral parity above tests it): keys s <= t - W get zero."""
    path, ids, ref = checkpoints["mistral_window"]
    model, params = gj.convert.load_pretrained(path)
    att = np.asarray(model.apply({"params": params}, ids, return_attention=True)[1].attentions[0])
    t, s = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    assert np.all(att[..., (s <= t - 4) | (s > t)] == 0)
    assert np.all(att[..., (s > t - 4) & (s <= t)] > 0)


def test_alibi_slopes_closed_form():
    """Press et al. §3: 2^(-8h/n) for n = 8; 6 heads take 4 of the n=4 sequence + 2 odd ones of n=8."""
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** (-np.arange(1, 9)), rtol=1e-7)
    four = 2.0 ** (-2.0 * np.arange(1, 5))
    eight = 2.0 ** (-np.arange(1, 9))
    np.testing.assert_allclose(alibi_slopes(6), np.concatenate([four, eight[[0, 2]]]), rtol=1e-7)
    with pytest.raises(GeomjaxError, match="n_heads must be a positive int"):
        alibi_slopes(0)


def test_rope_inv_freq_closed_form_and_errors():
    """RoFormer eq. (34): θ_i = theta^(-2i/K), divided by the factor for linear scaling; cos/sin tables
    at angle t·θ_i duplicated over the two halves."""
    K, theta = 8, 500.0
    want = theta ** (-np.arange(0, K, 2) / K)
    np.testing.assert_allclose(rope_inv_freq(K, theta), want, rtol=1e-6)
    np.testing.assert_allclose(rope_inv_freq(K, theta, "linear", 4.0), want / 4.0, rtol=1e-6)
    np.testing.assert_allclose(rope_inv_freq(K, theta, "default", 4.0), want, rtol=1e-6)  # factor unused
    cos, sin = rotary_from_inv_freq(want, 5)
    ang = np.arange(5)[:, None] * want[None]
    np.testing.assert_allclose(np.asarray(cos), np.cos(np.concatenate([ang, ang], 1)), atol=1e-6)
    np.testing.assert_allclose(np.asarray(sin), np.sin(np.concatenate([ang, ang], 1)), atol=1e-6)
    with pytest.raises(GeomjaxError, match="head_dim must be even"):
        rope_inv_freq(7, theta)
    with pytest.raises(GeomjaxError, match="rope_type='yarn' is not implemented"):
        rope_inv_freq(K, theta, "yarn")


@pytest.mark.parametrize("family", slow_beyond_first(["llama", "mistral", "bloom"]))
def test_goldens(family):
    """Committed transformers outputs (scripts/make_goldens.py) reproduced without PyTorch."""
    with np.load(GOLD / f"{family}_tiny_outputs.npz") as z:  # closed here, not whenever the collector runs
        ref = dict(z)
    model, params = gj.convert.load_pretrained(GOLD / f"{family}_tiny")
    logits, inter = jax.jit(model.apply, static_argnames="return_attention")(
        {"params": params}, ref["ids"].astype(np.int32), return_attention=True)
    np.testing.assert_allclose(np.stack(inter.hidden_states), ref["hidden_states"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(logits), ref["logits"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.stack(inter.attentions), ref["attentions"], rtol=1e-5, atol=1e-6)


def test_bf16_checkpoint_keeps_dtype(checkpoints, tmp_path):
    """A bfloat16 checkpoint loads as bfloat16 unless a dtype is asked for; values are the bf16 rounding."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path, ids, _ = checkpoints["llama_gqa_untied_theta"]
    hf = transformers.LlamaForCausalLM.from_pretrained(path).to(torch.bfloat16)
    hf.save_pretrained(tmp_path / "bf16")
    _, p16 = gj.convert.load_pretrained(tmp_path / "bf16")
    leaves = jax.tree.leaves(p16)
    assert {np.dtype(x.dtype).name for x in leaves} == {"bfloat16"}
    _, p32 = gj.convert.load_pretrained(tmp_path / "bf16", dtype="float32")
    ref = hf.model.embed_tokens.weight.detach().float().numpy()
    np.testing.assert_array_equal(np.asarray(p32["embed_tokens"]["embedding"]), ref)


def _edit_config(src: Path, dst: Path, **changes) -> Path:
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("change, match", [
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}), "rope type 'yarn'"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(some_new_switch=True), r"unknown attribute\(s\) \['some_new_switch'\]"),
])
def test_llama_config_variants_rejected_by_name(checkpoints, tmp_path, change, match):
    path = _edit_config(checkpoints["llama_gqa_untied_theta"][0], tmp_path / "x", **change)
    with pytest.raises(GeomjaxError, match=match):
        gj.convert.load_pretrained(path)


def test_bloom_variants_and_missing_tensors_rejected(checkpoints, tmp_path):
    path = _edit_config(checkpoints["bloom_6heads_tied"][0], tmp_path / "b",
                        apply_residual_connection_post_layernorm=True)
    with pytest.raises(GeomjaxError, match="apply_residual_connection_post_layernorm"):
        gj.convert.load_pretrained(path)
    # an untied config without lm_head.weight is a base checkpoint (BloomModel): it loads, gives hidden
    # states, and refuses logits naming the missing head (issue 30)
    path = _edit_config(checkpoints["bloom_6heads_tied"][0], tmp_path / "u", tie_word_embeddings=False)
    model, params = gj.convert.load_pretrained(path)
    assert "lm_head" not in params
    ids = np.zeros((1, 3), np.int32)
    assert len(model.apply({"params": params}, ids, compute_logits=False)[1].hidden_states) == model.config.n_layer + 1
    with pytest.raises(GeomjaxError, match=r"no language-model head \(lm_head\.weight"):
        model.apply({"params": params}, ids)
