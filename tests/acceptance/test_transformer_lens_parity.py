"""TransformerLens 3.9 against geomjax on the same tiny random checkpoints (written by geomjax, read by transformers,
converted by TransformerLens's own weight conversions): logits, every block's residual stream, attention patterns
and per-head results (``fold_ln=False``: TransformerLens's activations are then Hugging Face's), and the per-head
direct logit attributions (TransformerLens's ``logit_attrs`` of ``stack_head_results`` on the ``fold_ln=True``
model, where its attribution reads the folded gains, as geomjax's reads them unfolded) within 1e-4 relative.
GPT-NeoX / Pythia, Qwen 2 / 3, Gemma and Phi-3 here; GPT-2 in benchmarks/bench_lens.py.

TransformerLens is not a dependency (the ``bench-lens`` extra; benchmarks/RESULTS.md, "Lens vs TransformerLens",
says how to install it beside the project's torch): without it these tests skip. Run them with its interpreter:
``PYTHONPATH=. tl/bin/python -m pytest tests/acceptance/test_transformer_lens_parity.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from geomjax import lens
from geomjax.analysis import circuits
from geomjax.convert import config_from_hf, random_params, save_checkpoint
from geomjax.models import registry

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tl_lib = pytest.importorskip("transformer_lens")
from transformer_lens.loading_from_pretrained import convert_hf_model_config  # noqa: E402
from transformer_lens.pretrained import weight_conversions as wc  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # HookedTransformer, deprecated for 4.0

FAMILIES = {f.name: f for f in registry.FAMILIES}
# family -> (TransformerLens's weight conversion, the official name whose config TransformerLens hard-codes (its
# Gemma configs are keyed by name), or None: TransformerLens reads the checkpoint's config.json)
CASES = {"gpt_neox": (wc.convert_neox_weights, None), "qwen2": (wc.convert_qwen2_weights, None),
         "gemma": (wc.convert_gemma_weights, "google/gemma-2b"), "qwen3": (wc.convert_qwen3_weights, None),
         "phi3": (wc.convert_phi3_weights, None)}


def _tl(name: str, path, hf, fold: bool):
    conv, template = CASES[name]
    cfg = convert_hf_model_config(template or str(path))
    if template:  # the sizes of the tiny checkpoint; its activation is transformers' (GeGLU with tanh GELU)
        c = hf.config
        cfg.update(d_model=c.hidden_size, d_head=c.head_dim, n_heads=c.num_attention_heads, d_mlp=c.intermediate_size,
                   n_key_value_heads=c.num_key_value_heads, n_layers=c.num_hidden_layers, d_vocab=c.vocab_size,
                   n_ctx=c.max_position_embeddings, eps=c.rms_norm_eps, rotary_dim=c.head_dim,
                   act_fn="gelu_pytorch_tanh", original_architecture="GemmaForCausalLM")
    cfg["tokenizer_name"] = None  # the tiny checkpoints have none (and nothing is fetched)
    if name == "phi3":  # TransformerLens 3.9 rotates all of d_head; transformers (and geomjax) the partial share
        cfg["rotary_dim"] = int(cfg["d_head"] * hf.config.rope_parameters["partial_rotary_factor"])
    fields = {f.name for f in dataclasses.fields(tl_lib.HookedTransformerConfig)}
    cfg = tl_lib.HookedTransformerConfig(**{k: v for k, v in cfg.items() if k in fields}, device="cpu",
                                         dtype=torch.float32)
    model = tl_lib.HookedTransformer(cfg)
    model.load_and_process_state_dict(conv(hf, cfg), fold_ln=fold, center_writing_weights=False,
                                      center_unembed=False, fold_value_biases=False,
                                      refactor_factored_attn_matrices=False)
    model.set_use_attn_result(True)
    return model.eval()


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b.detach().numpy() if hasattr(b, "detach") else b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("name", list(CASES))
def test_activations_and_attributions_match_transformer_lens(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fam = FAMILIES[name]
    path = tmp_path / "m"  # a name without "llama" / "gemma": TransformerLens keys configs by such names
    save_checkpoint(path, fam.tiny, random_params(config_from_hf(fam.tiny), seed=2))
    hf = getattr(transformers, fam.tiny["architectures"][0]).from_pretrained(path, attn_implementation="eager").eval()
    model = lens.load(path)
    ids = np.random.default_rng(0).integers(1, model.facts.vocab_size, (2, 7))
    tokens = torch.tensor(ids)
    with torch.no_grad():
        tl_logits, tl_cache = _tl(name, path, hf, fold=False).run_with_cache(tokens)
    logits, cache = model.run_with_cache(ids, names=lambda n: True)
    assert rel(logits, tl_logits) < 1e-4
    for l in range(model.facts.n_layers):
        assert rel(cache[f"blocks.{l}.hook_resid_pre"], tl_cache[f"blocks.{l}.hook_resid_pre"]) < 1e-4
        assert rel(cache[f"blocks.{l}.hook_resid_post"], tl_cache[f"blocks.{l}.hook_resid_post"]) < 1e-4
        assert rel(cache[f"blocks.{l}.attn.pattern"], tl_cache[f"blocks.{l}.attn.hook_pattern"]) < 1e-4
        assert rel(cache[f"blocks.{l}.attn.result"], tl_cache[f"blocks.{l}.attn.hook_result"]) < 1e-4
    with torch.no_grad():
        _, folded = _tl(name, path, hf, fold=True).run_with_cache(tokens)
    heads, tl_labels = folded.stack_head_results(layer=-1, pos_slice=-1, return_labels=True)
    tl_attrs = folded.logit_attrs(heads, tokens=torch.tensor([3, 4]), incorrect_tokens=torch.tensor([5, 6]),
                                  pos_slice=-1)
    labels, dla = circuits.direct_logit_attribution(model, circuits.residual_decomposition(model, ids), [3, 4], [5, 6])
    ours = np.stack([np.asarray(dla)[labels.index(lab)] for lab in tl_labels])
    assert rel(ours, tl_attrs) < 1e-4
