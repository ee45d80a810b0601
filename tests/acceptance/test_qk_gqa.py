"""W_QK per head through the one model interface, for grouped-query attention (Llama with 2 key heads for
4 query heads): against the checkpoint's PyTorch q_proj / k_proj weights (repeat_kv by hand), against the
model's own attention scores (run_with_cache: on the diagonal the rotary rotation cancels), and the
parameter-tree functions of geomjax.theory.localization (LocATER) on the same tree."""

from __future__ import annotations

import numpy as np
import pytest

import geomjax as gj
from geomjax import localization as loc

H, H_KV, D = 4, 2, 32
K = D // H


@pytest.fixture(scope="module")
def llama_gqa(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=D, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=H, num_key_value_heads=H_KV, attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in sorted(hf.named_parameters()):
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    path = tmp_path_factory.mktemp("llama_gqa") / "ckpt"
    hf.save_pretrained(path)
    wq = [layer.self_attn.q_proj.weight.detach().numpy().astype(np.float64) for layer in hf.model.layers]
    wk = [layer.self_attn.k_proj.weight.detach().numpy().astype(np.float64) for layer in hf.model.layers]
    module, params = gj.convert.load_pretrained(path)  # the loader of gj.load, without a tokenizer (ids only)
    return gj.lens.Model(module, params, None, "llama_gqa"), wq, wk


def _manual_qk(wq, wk):
    """(H, d, d) from the PyTorch (out, in) weights: head h's rows h·K..(h+1)·K of q_proj, its key head g = h // (H/H_kv)."""
    rep = H // H_KV
    return np.stack([wq[h * K:(h + 1) * K].T @ wk[(h // rep) * K:(h // rep + 1) * K] for h in range(H)])


def test_interface_qk_matrices_match_the_torch_weights(llama_gqa):
    model, wq, wk = llama_gqa
    assert model.facts.n_kv_heads == H_KV < model.facts.n_heads == H
    qks = model.interface.qk_matrices(model.params)
    assert len(qks) == 2
    for layer, qk in enumerate(qks):
        assert qk.shape == (H, D, D)
        np.testing.assert_allclose(np.asarray(qk), _manual_qk(wq[layer], wk[layer]), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_qk_matrices_give_the_models_own_scores_on_the_diagonal(llama_gqa):
    model, _, _ = llama_gqa
    ids = np.random.default_rng(0).integers(0, 50, (2, 7))
    _, cache = model.run_with_cache(ids, names=["blocks.*.ln1", "blocks.*.attn.scores"])
    for layer, qk in enumerate(model.interface.qk_matrices(model.params)):
        x = np.asarray(cache[f"blocks.{layer}.ln1"], np.float64)  # (B, T, d): what W_q and W_k multiply
        diag = np.einsum("bti,hij,btj->bht", x, np.asarray(qk, np.float64), x) / np.sqrt(K)
        scores = np.asarray(cache[f"blocks.{layer}.attn.scores"])
        np.testing.assert_allclose(np.diagonal(scores, axis1=2, axis2=3), diag, rtol=1e-4, atol=1e-4)


def test_parameter_tree_functions_handle_shared_key_heads(llama_gqa):
    model, wq, wk = llama_gqa
    by_tree = loc.qk_matrices(model.params)
    assert len(by_tree) == 2
    terms = loc.locater_terms(model.params)
    for (name, qk), layer in zip(sorted(by_tree.items()), range(2)):
        ref = _manual_qk(wq[layer], wk[layer])
        np.testing.assert_allclose(np.asarray(qk), ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(terms[name]["scale"]), (ref**2).sum((1, 2)), rtol=1e-4)
        np.testing.assert_allclose(np.asarray(terms[name]["trace"]), np.trace(ref, axis1=1, axis2=2), rtol=1e-4, atol=1e-5)
    assert np.isfinite(float(loc.locater_penalty(model.params, 1e-3, 1e-2)))
