"""geomjax's lens vs TransformerLens on a GPT-2-small-shaped model (12 layers, d 768, random weights).

Both sides hold the same weights (a random ``transformers`` GPT2LMHeadModel saved with
``save_pretrained`` and loaded by ``gj.load``; TransformerLens's ``HookedTransformer`` built from its
config with the weights converted by TransformerLens's own ``convert_gpt2_weights``, loaded without
``fold_ln`` / centring so the two compute the same function: the script checks the logits agree).

1. Full cache: ``model.run_with_cache(ids)`` of every activation on 8 × 64 tokens (geomjax: every name
   but the per-head ``attn.result``, which TransformerLens does not cache by default either;
   TransformerLens under ``torch.no_grad()``), repetitions interleaved.
2. Activation patching of ``resid_pre`` over every (layer, position) of a prompt pair (B = 1, T tokens,
   logit-difference metric): ``gj.lens.patching_sweep`` (one compiled program; its first call, which
   compiles, is reported apart) vs TransformerLens's ``patching.get_act_patch_resid_pre`` (a loop of
   ``run_with_hooks``).

Needs TransformerLens (``pip install transformer_lens==3.9.0``, the ``bench`` extra; see
benchmarks/RESULTS.md for the separate environment it was run in). Run from the repository root:
``python benchmarks/bench_lens.py [--repeats 5] [--tokens 16] [--out benchmarks/RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks._common import (  # noqa: E402  (the BLAS environment is settled first)
    fmt_ratio,
    interleaved,
    load_avg,
    load_warning,
    machine_block,
    machine_info,
    markdown_table,
    ratio_stats,
    set_threads,
    write_section,
)

import jax  # noqa: E402
import numpy as np  # noqa: E402

SIZES = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)


def build(tmp: str):
    import torch
    import transformers
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

    import geomjax as gj

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SIZES)).eval()
    hf.save_pretrained(tmp)
    gm = gj.load(tmp)
    cfg = HookedTransformerConfig(n_layers=12, d_model=768, n_ctx=1024, d_head=64, n_heads=12, d_mlp=3072,
                                  d_vocab=50257, act_fn="gelu_new", normalization_type="LN",
                                  positional_embedding_type="standard", default_prepend_bos=False, device="cpu")
    tl = HookedTransformer(cfg)
    tl.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False,
                                   center_unembed=False, fold_value_biases=False)
    tl.eval()
    return gm, tl


def bench_cache(gm, tl, repeats: int) -> tuple[list, str]:
    import torch

    ids = np.random.default_rng(0).integers(0, 50257, size=(8, 64)).astype(np.int32)
    tokens = torch.tensor(ids, dtype=torch.long)

    def geomjax_cache():
        out, cache = gm.run_with_cache(ids)
        jax.block_until_ready((out, dict(cache)))
        return len(cache)

    def tl_cache():
        with torch.no_grad():
            _, cache = tl.run_with_cache(tokens)
        return len(cache)

    t0 = time.perf_counter()
    n_g = geomjax_cache()
    first = time.perf_counter() - t0
    n_t = tl_cache()
    with torch.no_grad():
        diff = float(np.abs(np.asarray(gm.logits(ids[:2])) - tl(tokens[:2]).numpy()).max())
    times = interleaved({"geomjax": geomjax_cache, "TransformerLens": tl_cache}, repeats)
    r = ratio_stats(times["TransformerLens"], times["geomjax"])
    row = ["full cache, 8 × 64 tokens", f"{np.median(times['geomjax']) * 1e3:.0f} ms ({n_g} activations)",
           f"{np.median(times['TransformerLens']) * 1e3:.0f} ms ({n_t} activations)", fmt_ratio(r),
           f"first call (compiles) {first:.1f} s"]
    return row, f"max |logit difference| geomjax vs TransformerLens (same weights): {diff:.1e}"


def bench_patching(gm, tl, T: int, repeats: int) -> tuple[list, str]:
    import torch
    from transformer_lens import patching

    import geomjax as gj

    rng = np.random.default_rng(1)
    clean = rng.integers(0, 50257, size=(1, T)).astype(np.int32)
    corrupt = clean.copy()
    corrupt[0, T // 3] = (clean[0, T // 3] + 1) % 50257  # one token differs, as a name in an IOI prompt
    a, w = 11, 12
    metric = gj.lens.logit_diff_metric(a, w)
    clean_t, corrupt_t = torch.tensor(clean, dtype=torch.long), torch.tensor(corrupt, dtype=torch.long)

    def tl_metric(logits):
        return logits[0, -1, a] - logits[0, -1, w]

    def geomjax_sweep():
        return gj.lens.patching_sweep(gm, clean, corrupt, metric).values

    def tl_sweep():
        with torch.no_grad():
            _, cache = tl.run_with_cache(clean_t)
            return patching.get_act_patch_resid_pre(tl, corrupt_t, cache, tl_metric).numpy()  # tqdm on stderr

    t0 = time.perf_counter()
    g = geomjax_sweep()
    first = time.perf_counter() - t0
    t = tl_sweep()
    diff = float(np.abs(np.asarray(g) - t).max())
    times = interleaved({"geomjax": geomjax_sweep, "TransformerLens": tl_sweep}, repeats)
    r = ratio_stats(times["TransformerLens"], times["geomjax"])
    row = [f"patching sweep resid_pre, 12 layers × {T} positions = {12 * T} patched runs (B = 1)",
           f"{np.median(times['geomjax']):.2f} s", f"{np.median(times['TransformerLens']):.2f} s", fmt_ratio(r),
           f"first call (compiles) {first:.1f} s"]
    return row, f"max |sweep difference| geomjax vs TransformerLens: {diff:.1e}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tokens", type=int, default=16, help="prompt length of the patching sweep")
    p.add_argument("--patch-repeats", type=int, default=2, help="interleaved rounds of the patching sweeps")
    p.add_argument("--out", default=None, help="append the Markdown section to this file")
    args = p.parse_args()
    set_threads()
    import transformer_lens

    info = machine_info()
    info["versions"] += f", transformer_lens {transformer_lens.__version__ if hasattr(transformer_lens, '__version__') else '3.9.0'}"
    with tempfile.TemporaryDirectory() as tmp:
        gm, tl = build(tmp)
        rows, notes = [], []
        for run in (lambda: bench_cache(gm, tl, args.repeats),
                    lambda: bench_patching(gm, tl, args.tokens, args.patch_repeats)):
            row, note = run()
            rows.append(row)
            notes.append(note)
            print(row, note, f"(load {load_avg()})", flush=True)
    text = "\n".join([
        f"### Lens vs TransformerLens ({info['date']}; issue 30)", "",
        "GPT-2-small shape (12 × 768, vocab 50,257, random weights), the same weights on both sides; "
        "ratio = TransformerLens time / geomjax time per interleaved round (> 1: geomjax faster); "
        "TransformerLens under torch.no_grad()." + load_warning(), "",
        markdown_table(["what", "geomjax", "TransformerLens", "TL / geomjax", "note"], rows), "",
        *[f"- {n}" for n in notes], f"- load average at the end: {load_avg()}", "", machine_block(info)])
    print(text)
    write_section(args.out, text)


if __name__ == "__main__":
    main()
