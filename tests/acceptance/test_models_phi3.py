"""Phi-3 (geomjax.models.phi3) vs Hugging Face transformers on a tiny random checkpoint written by
``save_pretrained``: hidden states, logits and attention probabilities ≤ 1e-5 (partial rotary 0.5, a sliding
window of 4 < T = 9, grouped-query heads, the fused qkv_proj / gate_up_proj split); left and right padding against
the unpadded run; the long-context rope rejected by name. Every lens and circuit tool runs on it through
tests/integration/test_every_family.py (its record's tiny config)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import geomjax as gj
from geomjax.errors import GeomjaxError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
V, T = 64, 9


@pytest.fixture(scope="module")
def phi3(tmp_path_factory):
    cfg = transformers.Phi3Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                  sliding_window=4, partial_rotary_factor=0.5, bos_token_id=1, eos_token_id=2,
                                  pad_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.Phi3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_((1.0 if "norm" in name else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
    d = tmp_path_factory.mktemp("phi3")
    model.save_pretrained(d)
    return d, model


def test_parity_with_transformers(phi3):
    d, hf = phi3
    ids = np.random.default_rng(3).integers(0, V, (2, T))
    with torch.no_grad():
        ref = hf(torch.tensor(ids), output_hidden_states=True, output_attentions=True)
    model, params = gj.convert.load_pretrained(d)
    logits, inter = jax.jit(model.apply, static_argnames="return_attention")(
        {"params": params}, ids.astype(np.int32), return_attention=True)
    for a, b in zip(inter.hidden_states, ref.hidden_states, strict=True):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(logits), ref.logits.numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(inter.attentions, ref.attentions, strict=True):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(inter.attentions[0])[..., -1, :T - 4] == 0)  # the window binds


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_gives_the_unpadded_run(phi3, side):
    d, hf = phi3
    ids = np.random.default_rng(4).integers(3, V, (1, T - 3))
    pad = np.zeros((1, 3), ids.dtype)
    padded = np.concatenate([pad, ids] if side == "left" else [ids, pad], axis=1)
    mask = (np.arange(T) >= 3 if side == "left" else np.arange(T) < T - 3).astype(np.int32)[None]
    with torch.no_grad():
        ref = hf(torch.tensor(ids)).logits.numpy()
    model, params = gj.convert.load_pretrained(d)
    out = np.asarray(model.apply({"params": params}, padded, mask)[0])
    real = out[:, 3:] if side == "left" else out[:, :T - 3]
    np.testing.assert_allclose(real, ref, rtol=1e-5, atol=1e-5)


def test_unsupported_attributes_are_rejected_by_name(phi3):
    cfg = json.loads((phi3[0] / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0], "long_factor": [1.0]}
    with pytest.raises(GeomjaxError, match="longrope"):
        gj.convert.config_from_hf(cfg)
    with pytest.raises(GeomjaxError, match="unknown attribute.*no_such_key"):
        gj.convert.config_from_hf({**json.loads((phi3[0] / "config.json").read_text()), "no_such_key": 1})
