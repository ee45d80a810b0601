"""gj.load and geomjax.analysis.lens: run_with_cache vs transformers' output_hidden_states / output_attentions
(tiny random GPT-2 and BERT saved with save_pretrained, the committed Llama golden) and vs the models'
Intermediates; hooks checked by zero-ablating one head against a NumPy computation from the cached
q/k/v and W_o; tokens with the family's special tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import geomjax as gj
from geomjax import lens
from geomjax.errors import GeomjaxError
from tests.unit.test_shapes import unchecked_shapes
from tests._marks import slow_beyond_first

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
V, L, H, D, P = len(WORDS), 2, 4, 16, 12


def _randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g)
            if "ln" in name.lower() or "layernorm" in name.lower():
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / max(p.shape[0], p.shape[-1]) ** 0.5 * (4.0 if p.ndim == 2 and "emb" in name else 1.0))


def _word_tokenizer(out: Path) -> None:
    """tokenizer.json mapping each of WORDS to its index (whitespace split)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(out / "tokenizer.json"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family -> (gj Model loaded by gj.load(dir), the transformers model)."""
    root = tmp_path_factory.mktemp("lens")
    torch.manual_seed(0)
    gcfg = transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=L, n_head=H,
                                   bos_token_id=2, eos_token_id=3)
    gpt2 = transformers.GPT2LMHeadModel._from_config(gcfg, attn_implementation="eager").eval()
    bcfg = transformers.BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                   intermediate_size=24, max_position_embeddings=P)
    bert = transformers.BertModel._from_config(bcfg, attn_implementation="eager").eval()
    out = {}
    for i, (fam, hf) in enumerate((("gpt2", gpt2), ("bert", bert))):
        _randomize(hf, i)
        hf.save_pretrained(root / fam)
        if fam == "gpt2":
            _word_tokenizer(root / fam)
        else:
            (root / fam / "vocab.txt").write_text("\n".join(WORDS) + "\n")
        out[fam] = (gj.load(root / fam), hf)
    return out


def _ids(T=9, B=2, seed=0):
    return np.random.default_rng(seed).integers(5, V, size=(B, T)).astype(np.int32)


@pytest.mark.parametrize("fam", ["gpt2", "bert"])
def test_cache_equals_transformers_and_intermediates(tiny, fam):
    model, hf = tiny[fam]
    ids = _ids()
    out, cache = model.run_with_cache(ids)
    with torch.no_grad():
        ref = hf(torch.tensor(ids, dtype=torch.long), output_hidden_states=True, output_attentions=True)
    hs = cache.hidden_states()
    assert len(hs) == L + 1
    for a, b in zip(hs, ref.hidden_states):
        np.testing.assert_allclose(a, b.numpy(), atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(cache.stack("attn.pattern"), np.stack([a.numpy() for a in ref.attentions]),
                               atol=2e-6)
    ref_out = ref.logits if fam == "gpt2" else ref.last_hidden_state
    np.testing.assert_allclose(out, ref_out.numpy(), atol=5e-5, rtol=1e-5)
    # the model's own Intermediates (same forward pass, run eagerly: equal to float32 round-off)
    _, inter = model.interface.forward(model.params, ids, return_attention=True)
    same = lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6)
    for l in range(L):
        same(cache[f"blocks.{l}.hook_resid_pre"], inter.residual[l])
        same(cache[f"blocks.{l}.hook_resid_post"], inter.residual[l + 1])
        same(cache[f"blocks.{l}.attn.pattern"], inter.attentions[l])
    for a, b in zip(cache.hidden_states(final_norm=False), inter.residual):
        same(a, b)
    assert cache["blocks.0.attn.q"].shape == (2, 9, H, D // H)
    assert cache["blocks.1.attn.scores"].shape == (2, H, 9, 9)
    assert len(repr(cache).splitlines()) <= 15 and len(repr(model).splitlines()) == 1


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("fam", slow_beyond_first(["gpt2", "bert"]))
def test_zero_ablating_one_head(tiny, fam):
    """attn.out with head h's z zeroed == sum over the other heads of softmax(q kᵀ/√K [mask]) v W_o + b_o,
    computed in NumPy from the cached q/k/v and the head weights; upstream untouched, downstream changed."""
    model, _ = tiny[fam]
    ids, layer, head = _ids(seed=1), 1, 2
    out0, clean = model.run_with_cache(ids)

    def ablate(z):
        return z.at[:, :, head].set(0.0)

    out1, hooked = model.run_with_cache(ids, names=["blocks.1.attn.*", "blocks.1.hook_resid_pre"],
                                        hooks={f"blocks.{layer}.attn.z": ablate})
    q, k, v = (np.asarray(clean[f"blocks.{layer}.attn.{n}"], np.float64) for n in "qkv")
    K, T = q.shape[-1], q.shape[1]
    s = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(K)
    if fam == "gpt2":
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    z = np.einsum("bhts,bshk->bthk", _softmax(s), v)
    z[:, :, head] = 0.0
    w = model.interface.head_weights(model.params, layer)
    manual = np.einsum("bthk,hkd->btd", z, np.asarray(w["W_o"], np.float64)) + np.asarray(w["b_o"])
    np.testing.assert_allclose(hooked[f"blocks.{layer}.attn.out"], manual, atol=2e-5)
    np.testing.assert_array_equal(hooked[f"blocks.{layer}.attn.z"][:, :, head], 0.0)
    np.testing.assert_array_equal(hooked[f"blocks.{layer}.hook_resid_pre"], clean[f"blocks.{layer}.hook_resid_pre"])
    assert np.abs(np.asarray(out1) - np.asarray(out0)).max() > 1e-3
    np.testing.assert_array_equal(model.run_with_hooks(ids, {f"blocks.{layer}.attn.z": ablate}), out1)


def test_llama_cache_equals_transformers_golden():
    """The committed Llama golden (GQA, rotary): hidden states and attentions from transformers."""
    module, params = gj.convert.load_pretrained(GOLDENS / "llama_tiny")
    model = lens.Model(module, params, None, "llama_tiny")
    with np.load(GOLDENS / "llama_tiny_outputs.npz") as z:
        ref = dict(z)
    out, cache = model.run_with_cache(ref["ids"])
    for a, b in zip(cache.hidden_states(), ref["hidden_states"]):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(cache.stack("attn.pattern"), ref["attentions"], atol=2e-6)
    np.testing.assert_allclose(out, ref["logits"], atol=5e-5, rtol=1e-5)
    f = model.facts
    assert cache["blocks.0.attn.k"].shape[2] == f.n_kv_heads < f.n_heads
    assert cache["blocks.0.attn.q_rot"].shape == cache["blocks.0.attn.q"].shape


def test_names_filter_and_compile_once(tiny):
    model, _ = tiny["gpt2"]
    ids = _ids(T=5)
    _, c = model.run_with_cache(ids, names="blocks.*.attn.pattern")
    assert list(c) == ["blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    _, c = model.run_with_cache(ids, names=lambda n: n.endswith("mlp.out"))
    assert list(c) == ["blocks.0.mlp.out", "blocks.1.mlp.out"]
    before = lens._compiled.cache_info().hits
    model.run_with_cache(_ids(T=5, seed=3), names="blocks.*.attn.pattern")
    assert lens._compiled.cache_info().hits == before + 1
    with pytest.raises(GeomjaxError, match="no activation named"):
        model.run_with_cache(ids, names=["blocks.0.atn.q"])
    with pytest.raises(GeomjaxError, match="no activation named"):
        model.run_with_hooks(ids, {"blocks.9.attn.z": lambda z: z})
    with pytest.raises(GeomjaxError, match=r"must lie in \[0, 40\)"):
        model.run_with_cache([[0, V]])
    with pytest.raises(GeomjaxError, match="exceed the model's 12 positions"):
        model.run_with_cache(np.zeros((1, P + 1), np.int32))
    with pytest.raises(KeyError, match="not in this cache"):
        c["blocks.0.attn.q"]


def test_tokens_with_family_special_tokens(tiny):
    gpt2, bert = tiny["gpt2"][0], tiny["bert"][0]
    assert gpt2.to_tokens("w1 w2 w3").tolist() == [[6, 7, 8]]  # GPT-2: no special tokens
    assert bert.to_tokens("w1 w2").tolist() == [[2, 6, 7, 3]]  # [CLS] ... [SEP]
    assert bert.to_str_tokens("w1 w2") == ["[CLS]", "w1", "w2", "[SEP]"]
    assert gpt2.to_str_tokens([6, 7]) == ["w1", "w2"]
    assert gpt2.to_string([6, 7]) == "w1 w2"
    out, cache = gpt2.run_with_cache("w1 w2 w3")
    assert out.shape == (1, 3, V) and cache["blocks.0.hook_resid_pre"].shape == (1, 3, D)
    with unchecked_shapes(), pytest.raises(GeomjaxError):  # geomjax's message, not the annotation's
        gpt2.to_tokens(["w1"])


def test_llama_to_tokens_prepends_bos(tiny, tmp_path):
    import shutil

    shutil.copytree(GOLDENS / "llama_tiny", tmp_path / "m")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "a": 2, "b": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "m" / "tokenizer.json"))
    m = gj.load(tmp_path / "m")
    assert m.facts.bos_token_id == 1
    assert m.to_tokens("a b").tolist() == [[1, 2, 3]]
    assert m.to_tokens("a b", special_tokens=False).tolist() == [[2, 3]]


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
@pytest.mark.parametrize("layer_norm", ["pre", "post"])
def test_toy_transformer_cache_equals_its_intermediates(layer_norm):
    """The toy models of `geomjax train` carry the same hook points (the toy: runs gj.load returns)."""
    import jax

    from geomjax.models.toy import ToyConfig, ToyTransformer

    cfg = ToyConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=2, d_mlp=32, max_len=8, layer_norm=layer_norm)
    module = ToyTransformer(cfg)
    ids = (np.arange(12).reshape(2, 6) * 7) % 11
    params = module.init(jax.random.key(0), ids)["params"]
    model = lens.Model(module, params, None, "toy")
    out, cache = model.run_with_cache(ids)
    ref_out, inter = model.interface.forward(params, ids, return_attention=True)
    np.testing.assert_allclose(out, ref_out, atol=1e-6)
    for a, b in zip(cache.hidden_states(), inter.hidden_states):
        np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(cache.stack("attn.pattern"), np.stack(inter.attentions), atol=1e-7)
    assert ("ln_final" in cache) == (layer_norm == "pre") and ("blocks.0.ln1" in cache) == (layer_norm == "pre")
    ablated = model.run_with_hooks(ids, {"blocks.1.mlp.out": lambda m: m * 0.0})
    assert np.abs(np.asarray(ablated) - np.asarray(out)).max() > 1e-4
