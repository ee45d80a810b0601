"""Write tiny Hugging Face checkpoints and their `transformers` outputs into tests/goldens/.

The files let tests/integration/test_convert.py check the loader and the forward pass where PyTorch is absent.
Everything is seeded; re-running gives the same files. Needs torch + transformers (CPU):

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_goldens.py

Writes (each a few KB):
  gpt2_tiny/{config.json, model.safetensors}            GPT2LMHeadModel ("transformer." prefix)
  gpt2_tiny_sharded/{config.json, model.safetensors.index.json, model-0000k-of-0000n.safetensors}
  gpt2_tiny_outputs.npz   ids, attention_mask, hidden_states (L+1, B, T, d) [HF convention],
                          ln_f_input (B, T, d) [state before ln_f], logits (B, T, V),
                          padded_hidden_states / padded_logits (right padding with attention_mask)
  bert_tiny/{config.json, model.safetensors}            BertModel with pooler
  bert_tiny_outputs.npz   ids, attention_mask, token_type_ids, hidden_states, last_hidden_state,
                          pooler_output, causal_hidden_states (is_decoder=True)
  llama_tiny/, mistral_tiny/, bloom_tiny/   LlamaForCausalLM (GQA, rope_theta 5e5, untied),
                          MistralForCausalLM (one kv head, sliding window 3 < T), BloomForCausalLM
                          (6 heads: the non-power-of-two ALiBi rule), eager attention
  {llama,mistral,bloom}_tiny_outputs.npz   ids, hidden_states (L+1, B, T, d), logits, attentions
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import transformers
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

OUT = Path(__file__).resolve().parents[1] / "tests" / "goldens"


def randomize(model: torch.nn.Module, seed: int, std: float = 0.3) -> None:
    """Give every parameter (LayerNorm/RMSNorm gains and biases included) a random value, seeded."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "ln" in name.lower() or "norm" in name.lower():
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
            else:
                p.copy_(std * noise)


def gpt2() -> None:
    cfg = GPT2Config(vocab_size=24, n_positions=8, n_embd=8, n_layer=2, n_head=2, n_inner=16,
                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval()
    randomize(model, seed=1)
    for name in ("gpt2_tiny", "gpt2_tiny_sharded"):
        shutil.rmtree(OUT / name, ignore_errors=True)
    model.save_pretrained(OUT / "gpt2_tiny")
    model.save_pretrained(OUT / "gpt2_tiny_sharded", max_shard_size="3KB")

    rng = np.random.default_rng(2)
    ids = rng.integers(0, cfg.vocab_size, size=(2, 6)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 4:] = 0  # right padding in the second row
    captured = {}

    def grab_ln_f_input(module, inputs, output):  # must return None (a value would replace the output)
        captured["x"] = inputs[0].detach().clone()

    hook = model.transformer.ln_f.register_forward_hook(grab_ln_f_input)
    with torch.no_grad():
        out = model(torch.tensor(ids), output_hidden_states=True)
        hook.remove()
        pad = model(torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    np.savez(
        OUT / "gpt2_tiny_outputs.npz",
        ids=ids.astype(np.int32),
        attention_mask=mask.astype(np.int32),
        hidden_states=np.stack([h.numpy() for h in out.hidden_states]),
        ln_f_input=captured["x"].numpy(),
        logits=out.logits.numpy(),
        padded_hidden_states=np.stack([h.numpy() for h in pad.hidden_states]),
        padded_logits=pad.logits.numpy(),
    )


def bert() -> None:
    cfg = BertConfig(vocab_size=24, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=16, max_position_embeddings=8, type_vocab_size=2)
    torch.manual_seed(0)
    model = BertModel(cfg).eval()
    randomize(model, seed=3)
    shutil.rmtree(OUT / "bert_tiny", ignore_errors=True)
    model.save_pretrained(OUT / "bert_tiny")

    rng = np.random.default_rng(4)
    ids = rng.integers(0, cfg.vocab_size, size=(2, 7)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    tt = np.zeros_like(ids)
    tt[:, 3:] = 1
    kw = dict(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
              token_type_ids=torch.tensor(tt), output_hidden_states=True)
    with torch.no_grad():
        out = model(**kw)
    causal = BertModel.from_pretrained(OUT / "bert_tiny", is_decoder=True).eval()
    with torch.no_grad():
        cout = causal(**kw, use_cache=False)
    np.savez(
        OUT / "bert_tiny_outputs.npz",
        ids=ids.astype(np.int32),
        attention_mask=mask.astype(np.int32),
        token_type_ids=tt.astype(np.int32),
        hidden_states=np.stack([h.numpy() for h in out.hidden_states]),
        last_hidden_state=out.last_hidden_state.numpy(),
        pooler_output=out.pooler_output.numpy(),
        causal_hidden_states=np.stack([h.numpy() for h in cout.hidden_states]),
    )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    gpt2()
    bert()
    decoders()
    meta = {"transformers": __import__("transformers").__version__, "torch": torch.__version__}
    (OUT / "VERSIONS.json").write_text(json.dumps(meta, indent=1) + "\n")
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            print(f"{f.relative_to(OUT)}: {f.stat().st_size} bytes")
    print(f"total {total} bytes")



DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=5e5, tie_word_embeddings=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, sliding_window=3, tie_word_embeddings=False)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=12, n_layer=2, n_head=6)),
}


def decoders() -> None:
    """Llama / Mistral / BLOOM goldens (tests/acceptance/test_models_llama_bloom.py::test_goldens)."""
    for i, (name, (cfg_cls, model_cls, kw)) in enumerate(DECODERS.items()):
        cfg = getattr(transformers, cfg_cls)(vocab_size=24, **kw, attn_implementation="eager")
        torch.manual_seed(0)
        model = getattr(transformers, model_cls)(cfg).eval()
        randomize(model, seed=3 + i)
        shutil.rmtree(OUT / f"{name}_tiny", ignore_errors=True)
        model.save_pretrained(OUT / f"{name}_tiny")
        ids = np.random.default_rng(4 + i).integers(0, 24, size=(2, 6)).astype(np.int64)
        with torch.no_grad():
            out = model(torch.tensor(ids), output_hidden_states=True, output_attentions=True)
        np.savez(OUT / f"{name}_tiny_outputs.npz", ids=ids.astype(np.int32),
                 hidden_states=np.stack([h.numpy() for h in out.hidden_states]),
                 logits=out.logits.numpy(), attentions=np.stack([a.numpy() for a in out.attentions]))


if __name__ == "__main__":
    main()
