"""BERT port vs Hugging Face `transformers` (PyTorch, CPU, float32).

Random checkpoints of several shapes (every parameter randomised) with padding, token types and
the pooler, bidirectional and causal (HF ``is_decoder=True``); and the real all-MiniLM-L6-v2
weights on real sentences. Tolerance: atol 1e-5 on every hidden state.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

import geomjax as gj  # noqa: E402
from tests._marks import slow_beyond_first

ATOL = 1e-5

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Transformers map every token to a hidden state, layer after layer.",
    "Café society in 1920s Paris was lively.",
]


def randomize(model, seed: int) -> None:
    """Seeded random values for every parameter; matrices std 1/sqrt(fan_in), LayerNorm gains ~1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "LayerNorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embeddings" in name:
                p.copy_(0.5 * noise)
            else:  # nn.Linear weight (out, in)
                p.copy_(noise / p.shape[1] ** 0.5)


# (num_hidden_layers, num_attention_heads, hidden_size, max_position_embeddings, vocab, types)
SHAPES = [
    (1, 2, 32, 8, 40, 2),
    (2, 4, 64, 16, 53, 3),
    (3, 3, 48, 12, 29, 2),
]


def _maxdiff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.mark.parametrize("shape", slow_beyond_first(SHAPES), ids=lambda s: f"L{s[0]}H{s[1]}d{s[2]}P{s[3]}")
def test_bert_parity(shape, tmp_path):
    L, H, d, P, V, n_types = shape
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=d, num_hidden_layers=L,
                                  num_attention_heads=H, intermediate_size=2 * d + 8,
                                  max_position_embeddings=P, type_vocab_size=n_types)
    torch.manual_seed(L)
    hf = transformers.BertModel._from_config(cfg, attn_implementation="eager").eval()
    randomize(hf, seed=sum(shape))
    hf.save_pretrained(tmp_path)
    model, params = gj.convert.load_pretrained(tmp_path)
    assert model.config.add_pooling_layer and model.config.type_vocab_size == n_types

    rng = np.random.default_rng(L)
    ids = rng.integers(0, V, size=(3, P)).astype(np.int64)
    tt = np.zeros_like(ids)
    tt[:, P // 3:] = 1
    tt[0, -2:] = n_types - 1
    mask = np.ones_like(ids)
    mask[1, P // 2:] = 0  # right padding
    mask[2, 2:] = 0
    kw = dict(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
              token_type_ids=torch.tensor(tt), output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        ref = hf(**kw)
    fwd = jax.jit(model.apply, static_argnames=("causal", "return_attention"))
    out, inter = fwd({"params": params}, ids, mask, tt, return_attention=True)
    # every position, padded queries included (HF eager uses the same masking convention)
    diffs = {"last": _maxdiff(out, ref.last_hidden_state),
             "pooler": _maxdiff(inter.pooler_output, ref.pooler_output)}
    assert len(inter.hidden_states) == len(ref.hidden_states) == L + 1
    for i, (a, b) in enumerate(zip(inter.hidden_states, ref.hidden_states)):
        diffs[f"h{i}"] = _maxdiff(a, b)
    for i, (a, b) in enumerate(zip(inter.attentions, ref.attentions)):
        diffs[f"attn{i}"] = _maxdiff(a, b)
    print(f"BERT {shape}: max |diff| {max(diffs.values()):.2e} {diffs}")
    assert max(diffs.values()) <= ATOL, diffs

    # causal mode vs HF is_decoder=True (default sdpa attention); right padding
    hf_dec = transformers.BertModel.from_pretrained(tmp_path, is_decoder=True).eval()
    kw.pop("output_attentions")
    with torch.no_grad():
        ref = hf_dec(**kw, use_cache=False)
    _, inter = fwd({"params": params}, ids, mask, tt, causal=True)
    valid = mask.astype(bool)
    cd = [_maxdiff(np.asarray(a)[valid], b.numpy()[valid]) for a, b in zip(inter.hidden_states, ref.hidden_states)]
    print(f"BERT {shape} causal: max |diff| {max(cd):.2e}")
    assert max(cd) <= ATOL


@pytest.fixture(scope="module")
def minilm():
    path = gj.convert.minilm_path()
    model, params = gj.convert.load_pretrained(path)
    hf = transformers.BertModel.from_pretrained(str(path), attn_implementation="eager").eval()
    tok = transformers.BertTokenizerFast.from_pretrained(str(path))
    return model, params, hf, tok


def test_minilm_real_weights(minilm):
    """All 7 hidden states of the real all-MiniLM-L6-v2 on real sentences, one at a time."""
    model, params, hf, tok = minilm
    fwd = jax.jit(model.apply)
    worst = 0.0
    for s in SENTENCES:
        enc = tok(s, return_tensors="np")
        with torch.no_grad():
            ref = hf(**{k: torch.tensor(v) for k, v in enc.items()}, output_hidden_states=True)
        out, inter = fwd({"params": params}, enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        assert len(inter.hidden_states) == 7
        d = [_maxdiff(a, b) for a, b in zip(inter.hidden_states, ref.hidden_states)]
        d.append(_maxdiff(inter.pooler_output, ref.pooler_output))
        print(f"MiniLM {enc['input_ids'].shape}: max |diff| per state {['%.1e' % x for x in d]}")
        worst = max(worst, max(d))
    assert worst <= ATOL


@pytest.mark.slow
def test_minilm_batched_padding_and_causal(minilm):
    """A padded batch: real (unpadded) positions equal HF, bidirectional and causal."""
    model, params, hf, tok = minilm
    enc = tok(SENTENCES, padding=True, return_tensors="np")
    valid = enc["attention_mask"].astype(bool)
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    tkw = {k: torch.tensor(v) for k, v in enc.items()}
    with torch.no_grad():
        ref = hf(**tkw, output_hidden_states=True)
    forward = jax.jit(model.apply, static_argnames="causal")  # one program, not an op at a time
    _, inter = forward({"params": params}, *args)
    d = max(_maxdiff(np.asarray(a)[valid], b.numpy()[valid]) for a, b in zip(inter.hidden_states, ref.hidden_states))
    dec = transformers.BertModel.from_pretrained(str(gj.convert.minilm_path()), is_decoder=True).eval()
    with torch.no_grad():
        cref = dec(**tkw, output_hidden_states=True, use_cache=False)
    _, cinter = forward({"params": params}, *args, causal=True)
    dc = max(_maxdiff(np.asarray(a)[valid], b.numpy()[valid]) for a, b in zip(cinter.hidden_states, cref.hidden_states))
    print(f"MiniLM padded batch: bidirectional {d:.1e}, causal {dc:.1e}")
    assert d <= ATOL and dc <= ATOL


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_bert_prefixed_checkpoint_with_heads(tmp_path):
    """BertForMaskedLM writes "bert." names and "cls." heads: heads must be dropped explicitly."""
    cfg = transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=8)
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(cfg).eval()
    hf.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"unused tensors: cls\."):
        gj.convert.load_pretrained(tmp_path)
    model, params = gj.convert.load_pretrained(tmp_path, ignore=("cls.",))
    assert not model.config.add_pooling_layer  # BertForMaskedLM has no pooler
    ids = np.arange(6)[None] % 30
    with torch.no_grad():
        ref = hf.bert(torch.tensor(ids), output_hidden_states=True)
    out, inter = model.apply({"params": params}, ids)
    assert inter.pooler_output is None
    np.testing.assert_allclose(out, ref.last_hidden_state.numpy(), atol=ATOL, rtol=0)
