"""GPT-2 port vs Hugging Face `transformers` (PyTorch, CPU, float32) on random checkpoints.

Every parameter (LayerNorm gains and biases included) is randomised, the model is saved with
save_pretrained (safetensors) and loaded by geomjax; every hidden state, the pre-ln_f residual,
the logits and the attention probabilities must equal Hugging Face's to atol 1e-5.
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


def randomize(model, seed: int) -> None:
    """Seeded random values for every parameter (LayerNorm gains/biases included).

    Matrices get std 1/sqrt(fan_in) so the residual stream stays O(1-10), as in trained models;
    with much larger activations float32 round-off alone (in PyTorch as in JAX, measured against
    a float64 run) exceeds the 1e-5 absolute tolerance.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if ".ln_" in name or name.startswith("ln_"):
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "wte" in name or "wpe" in name:
                p.copy_(0.5 * noise)
            else:  # Conv1D weight (in, out)
                p.copy_(noise / p.shape[0] ** 0.5)


# (n_layer, n_head, n_embd, n_positions, vocab_size, n_inner)
SHAPES = [
    (1, 2, 32, 8, 50, None),
    (2, 4, 64, 16, 97, None),
    (3, 2, 48, 12, 61, 80),
]


def _hf_model(shape, seed, cls=None, **extra):
    n_layer, n_head, d, P, V, n_inner = shape
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=d, n_layer=n_layer,
                                  n_head=n_head, n_inner=n_inner, bos_token_id=0, eos_token_id=0,
                                  **extra)
    torch.manual_seed(seed)
    cls = cls or transformers.GPT2LMHeadModel
    model = cls._from_config(cfg, attn_implementation="eager").eval()
    randomize(model, seed)
    return model


def _maxdiff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.mark.parametrize("shape", slow_beyond_first(SHAPES), ids=lambda s: f"L{s[0]}H{s[1]}d{s[2]}P{s[3]}")
def test_gpt2_parity(shape, tmp_path):
    hf = _hf_model(shape, seed=sum(shape[:4]))
    hf.save_pretrained(tmp_path)
    model, params = gj.convert.load_pretrained(tmp_path)
    assert model.config.n_layer == shape[0] and model.config.d_mlp == (shape[5] or 4 * shape[2])

    P, V = shape[3], shape[4]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, size=(3, P)).astype(np.int64)
    captured = {}

    def grab(module, inputs, output):  # returns None: leaves the output alone
        captured["x"] = inputs[0].detach().clone()

    h = hf.transformer.ln_f.register_forward_hook(grab)
    with torch.no_grad():
        ref = hf(torch.tensor(ids), output_hidden_states=True, output_attentions=True)
    h.remove()

    logits, inter = jax.jit(model.apply, static_argnames="return_attention")(
        {"params": params}, ids.astype(np.int32), return_attention=True)
    diffs = {"logits": _maxdiff(logits, ref.logits)}
    assert len(inter.hidden_states) == len(ref.hidden_states) == shape[0] + 1
    for i, (a, b) in enumerate(zip(inter.hidden_states, ref.hidden_states)):
        diffs[f"h{i}"] = _maxdiff(a, b)
    diffs["pre_ln_f"] = _maxdiff(inter.residual[-1], captured["x"])
    for i, (a, b) in enumerate(zip(inter.attentions, ref.attentions)):
        diffs[f"attn{i}"] = _maxdiff(a, b)
    print(f"GPT-2 {shape}: max |diff| {max(diffs.values()):.2e} {diffs}")
    assert max(diffs.values()) <= ATOL, diffs

    # padding (right-padded rows) with attention_mask, default HF attention (sdpa)
    mask = np.ones_like(ids)
    mask[1, P // 2:] = 0
    mask[2, 1:] = 0
    hf_sdpa = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        ref = hf_sdpa(torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    logits, inter = jax.jit(model.apply)({"params": params}, ids.astype(np.int32), mask)
    valid = mask.astype(bool)
    for a, b in zip(inter.hidden_states + (logits,), ref.hidden_states + (ref.logits,)):
        np.testing.assert_allclose(np.asarray(a)[valid], b.numpy()[valid], atol=ATOL, rtol=0)


def test_gpt2_model_without_head_prefix(tmp_path):
    """A bare GPT2Model checkpoint ("h.0..." names, no "transformer.") loads to the same params."""
    shape = SHAPES[0]
    hf = _hf_model(shape, seed=7)
    hf.save_pretrained(tmp_path / "lm")
    hf.transformer.save_pretrained(tmp_path / "bare")
    _, p1 = gj.convert.load_pretrained(tmp_path / "lm")
    _, p2 = gj.convert.load_pretrained(tmp_path / "bare")
    jax.tree.map(np.testing.assert_array_equal, p1, p2)


def test_gpt2_rejects_layer_scaled_attention(tmp_path):
    hf = _hf_model(SHAPES[0], seed=3, scale_attn_by_inverse_layer_idx=True)
    hf.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True"):
        gj.convert.load_pretrained(tmp_path)
