"""The interpretability toolkit of geomjax.analysis.lens and .circuits (issue 30) on tiny random checkpoints
written by transformers' save_pretrained: base checkpoints without an LM head or a tokenizer, the new
activations against PyTorch forward hooks on the same weights, hooks as data (compilations counted),
the patching sweep against a loop of single patches, the residual decomposition and direct logit
attribution against the stream and the logits, factored circuits against NumPy, generate and loss."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax import lens
from geomjax.analysis import circuits
from geomjax.errors import GeomjaxError
from tests._compiles import count_compiles
from tests._marks import slow_beyond_first
from tests.unit.test_shapes import unchecked_shapes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, L, H, D, F, P = 48, 2, 4, 16, 24, 16


def _randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name.lower() or "ln" in name.lower():
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / max(p.shape[0], p.shape[-1]) ** 0.5)


def _hf(kind: str):
    llama = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
                 num_key_value_heads=2, max_position_embeddings=P, bos_token_id=1, eos_token_id=2)
    cfgs = {
        "GPT2Model": transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=L, n_head=H),
        "GPT2LMHeadModel": transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=L, n_head=H),
        "BertModel": transformers.BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                             intermediate_size=F, max_position_embeddings=P),
        "LlamaModel": transformers.LlamaConfig(**llama),
        "LlamaForCausalLM": transformers.LlamaConfig(**llama),
        "MistralModel": transformers.MistralConfig(**llama, sliding_window=None),
        "BloomModel": transformers.BloomConfig(vocab_size=V, hidden_size=D, n_layer=L, n_head=H),
        "BloomForCausalLM": transformers.BloomConfig(vocab_size=V, hidden_size=D, n_layer=L, n_head=H),
    }
    model = getattr(transformers, kind)._from_config(cfgs[kind], attn_implementation="eager").eval()
    _randomize(model, sorted(cfgs).index(kind))
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """kind -> (directory written by save_pretrained, no tokenizer files; the transformers model)."""
    root = tmp_path_factory.mktemp("toolkit")
    out = {}
    for kind in ("GPT2Model", "GPT2LMHeadModel", "BertModel", "LlamaModel", "LlamaForCausalLM", "MistralModel",
                 "BloomModel", "BloomForCausalLM"):
        hf = _hf(kind)
        hf.save_pretrained(root / kind)
        out[kind] = (root / kind, hf)
    return out


def _ids(T=7, B=2, seed=0):
    return np.random.default_rng(seed).integers(3, V, size=(B, T)).astype(np.int32)


@pytest.mark.parametrize("kind", slow_beyond_first(["LlamaModel", "MistralModel", "BloomModel", "GPT2Model", "BertModel"]))
def test_base_checkpoints_load_and_match_transformers(saved, kind):
    """A base checkpoint (no LM head, no tokenizer) loads; every hidden state equals transformers' <= 1e-5."""
    path, hf = saved[kind]
    model = gj.load(path)
    ids = _ids()
    out, cache = model.run_with_cache(ids)
    with torch.no_grad():
        ref = hf(torch.tensor(ids, dtype=torch.long), output_hidden_states=True)
    for a, b in zip(cache.hidden_states(), ref.hidden_states, strict=True):
        np.testing.assert_allclose(a, b.numpy(), atol=1e-5, rtol=1e-5)
    with pytest.raises(GeomjaxError, match="without a tokenizer") as e:
        model.to_tokens("hello")
    assert "\n" not in str(e.value)
    if kind in ("LlamaModel", "MistralModel"):  # untied: the head is missing
        assert not model.has_logits and "no lm_head" in repr(model)
        np.testing.assert_allclose(out, ref.last_hidden_state.numpy(), atol=1e-5, rtol=1e-5)
        for call in (lambda: model.logits(ids), lambda: model.generate(ids, 2), lambda: model.loss(ids),
                     lambda: model.model.apply({"params": model.params}, ids)):
            with pytest.raises(GeomjaxError, match=r"no language-model head \(lm_head.weight"):
                call()
    elif kind in ("GPT2Model", "BloomModel"):  # tied: the head is the token embedding
        emb = hf.get_input_embeddings().weight.detach().numpy()
        np.testing.assert_allclose(model.logits(ids), ref.last_hidden_state.numpy() @ emb.T, atol=2e-5, rtol=1e-5)


def _torch_capture(hf, modules: dict, ids):
    """Run hf on ids with forward hooks: {key: (module, 'in' | 'out')} -> {key: numpy array}."""
    got, handles = {}, []
    for key, (mod, which) in modules.items():
        def hook(m, args, out, key=key, which=which):
            got[key] = (args[0] if which == "in" else out).detach().numpy()
        handles.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        hf(torch.tensor(ids, dtype=torch.long))
    for h in handles:
        h.remove()
    return got


def _per_head_result(z_merged, w_o_in_out):
    """(B, T, H*K) merged z and the output weight as (in = H*K, out = d) -> (B, T, H, d) per-head writes."""
    B, T, _ = z_merged.shape
    K = w_o_in_out.shape[0] // H
    return np.einsum("bthk,hkd->bthd", z_merged.reshape(B, T, H, K), w_o_in_out.reshape(H, K, -1))


def _scale(x, eps, center):
    x = x.astype(np.float64)
    if center:
        x = x - x.mean(-1, keepdims=True)
    return np.sqrt((x * x).mean(-1, keepdims=True) + eps)


@pytest.mark.parametrize("kind", slow_beyond_first(["LlamaForCausalLM", "GPT2LMHeadModel", "BloomForCausalLM", "BertModel"]))
def test_new_activations_match_transformers_hooks(saved, kind):
    path, hf = saved[kind]
    model, ids = gj.load(path), _ids(seed=2)
    _, cache = model.run_with_cache(ids, names=lambda n: True)
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a), b, atol=2e-5, rtol=1e-5)
    if kind == "GPT2LMHeadModel":
        t, blk = hf.transformer, hf.transformer.h[1]
        got = _torch_capture(hf, {"embed": (t.wte, "out"), "pos": (t.wpe, "out"), "pre": (blk.mlp.c_fc, "out"),
                                  "post": (blk.mlp.act, "out"), "z": (blk.attn.c_proj, "in"), "ln1_in": (blk.ln_1, "in"),
                                  "lnf_in": (t.ln_f, "in")}, ids)
        close(cache["hook_pos_embed"], np.broadcast_to(got["pos"], got["embed"].shape))
        w_o, eps = blk.attn.c_proj.weight.detach().numpy(), hf.config.layer_norm_epsilon
    elif kind == "LlamaForCausalLM":
        t, blk = hf.model, hf.model.layers[1]
        got = _torch_capture(hf, {"embed": (t.embed_tokens, "out"), "pre": (blk.mlp.gate_proj, "out"),
                                  "pre_linear": (blk.mlp.up_proj, "out"), "post": (blk.mlp.down_proj, "in"),
                                  "z": (blk.self_attn.o_proj, "in"), "ln1_in": (blk.input_layernorm, "in"),
                                  "lnf_in": (t.norm, "in")}, ids)
        close(cache["blocks.1.mlp.pre_linear"], got["pre_linear"])
        w_o, eps = blk.self_attn.o_proj.weight.detach().numpy().T, hf.config.rms_norm_eps
    elif kind == "BloomForCausalLM":
        t, blk = hf.transformer, hf.transformer.h[1]
        got = _torch_capture(hf, {"embed": (t.word_embeddings, "out"), "pre": (blk.mlp.dense_h_to_4h, "out"),
                                  "post": (blk.mlp.gelu_impl, "out"), "z": (blk.self_attention.dense, "in"),
                                  "ln1_in": (blk.input_layernorm, "in"), "lnf_in": (t.ln_f, "in")}, ids)
        w_o, eps = blk.self_attention.dense.weight.detach().numpy().T, hf.config.layer_norm_epsilon
    else:
        e, blk = hf.embeddings, hf.encoder.layer[1]
        got = _torch_capture(hf, {"embed": (e.word_embeddings, "out"), "pos": (e.position_embeddings, "out"),
                                  "tt": (e.token_type_embeddings, "out"), "pre": (blk.intermediate.dense, "out"),
                                  "post": (blk.intermediate, "out"), "z": (blk.attention.output.dense, "in")}, ids)
        w_o = blk.attention.output.dense.weight.detach().numpy().T
        close(cache["hook_pos_embed"], np.broadcast_to(got["pos"], got["embed"].shape))
        close(cache["hook_token_type_embed"], got["tt"])
    close(cache["hook_embed"], got["embed"])
    close(cache["blocks.1.mlp.pre"], got["pre"])
    close(cache["blocks.1.mlp.post"], got["post"])
    if kind != "BertModel":  # post-LN BERT has no ln1 / ln_final
        center = kind != "LlamaForCausalLM"
        close(cache["blocks.1.ln1.scale"], _scale(got["ln1_in"], eps, center))
        close(cache["ln_final.scale"], _scale(got["lnf_in"], eps, center))
    assert "blocks.1.attn.result" not in model.run_with_cache(ids)[1]  # kept only when asked for by name
    close(cache["blocks.1.attn.result"], _per_head_result(got["z"], w_o))
    with pytest.raises(GeomjaxError, match="read-only"):
        model.run_with_hooks(ids, {"blocks.0.attn.result": lambda r: 0 * r})


def test_hooks_are_data_new_closures_reuse_the_compilation(saved):
    model = gj.load(saved["GPT2LMHeadModel"][0])
    ids, clean = _ids(seed=3), model.run_with_cache(_ids(seed=4), names="blocks.1.attn.z")[1]["blocks.1.attn.z"]

    def patch(pos, head):  # a fresh closure per call; pos and head are captured ints, clean an array
        return {"blocks.1.attn.z": lambda z: z.at[:, pos, head].set(clean[:, pos, head])}

    ref = model.run_with_hooks(ids, patch(0, 0))
    misses = lens._compiled.cache_info().misses
    with count_compiles() as n:
        outs = {(p, h): model.run_with_hooks(ids, patch(p, h)) for p in range(3) for h in range(H)}
    assert n[0] == 0 and lens._compiled.cache_info().misses == misses
    np.testing.assert_array_equal(outs[0, 0], ref)
    z = model.run_with_cache(ids, names="blocks.1.attn.z", hooks=patch(2, 1))[1]["blocks.1.attn.z"]
    np.testing.assert_array_equal(z[:, 2, 1], clean[:, 2, 1])
    assert not np.array_equal(outs[2, 1], outs[1, 2])
    width = 2  # a captured number used as a size cannot be traced: it falls back to a static value
    sl = model.run_with_hooks(ids, {"blocks.0.attn.z": lambda z: z.at[:, :width].set(0.0)})
    np.testing.assert_array_equal(sl, model.run_with_hooks(ids, {"blocks.0.attn.z": lambda z: z.at[:, :2].set(0.0)}))


@pytest.mark.parametrize("per_head", slow_beyond_first([False, True]))
def test_patching_sweep_compiles_once_and_equals_the_loop(saved, per_head):
    """Every (layer, position) of a 2-layer model: one compilation; a new metric closure: none; equal to a
    loop of single patches through run_with_hooks."""
    model = gj.load(saved["GPT2LMHeadModel"][0])
    clean, corrupted = _ids(T=6, seed=5), _ids(T=6, seed=6)
    name = "attn.z" if per_head else "hook_resid_pre"
    with count_compiles() as n:
        sweep = lens.patching_sweep(model, clean, corrupted, lens.logit_diff_metric([5, 6], [7, 8]), name=name,
                                    per_head=per_head, batch_size=5)
    assert n[0] == 1
    with count_compiles() as n:
        other = lens.patching_sweep(model, clean, corrupted, lens.logit_diff_metric([9, 10], [11, 12]), name=name,
                                    per_head=per_head, batch_size=5)
    assert n[0] == 0
    assert sweep.values.shape == ((L, 6, H) if per_head else (L, 6))
    src = model.run_with_cache(clean, names=f"blocks.*.{name}")[1]
    logits = np.asarray(model.logits(clean)), np.asarray(model.logits(corrupted))
    diff = lambda lg, a, w: np.mean(lg[[0, 1], -1, a] - lg[[0, 1], -1, w])
    np.testing.assert_allclose(sweep.clean, diff(logits[0], [5, 6], [7, 8]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sweep.corrupted, diff(logits[1], [5, 6], [7, 8]), rtol=1e-5, atol=1e-5)
    for idx in np.ndindex(*sweep.values.shape):
        l, rest = idx[0], idx[1:]
        s = src[f"blocks.{l}.{name}"]
        # One index patched: the clean value where the mask is set. The mask is an array, so it is an argument
        # of the compiled run (one compile per hook name), where a captured index tuple would be static.
        only = np.zeros(s.shape[1:], bool)
        only[rest] = True
        hook = lambda x, s=s, only=only: jnp.where(only, s, x)
        lg = np.asarray(model.logits(corrupted, {f"blocks.{l}.{name}": hook}))
        np.testing.assert_allclose(sweep.values[idx], diff(lg, [5, 6], [7, 8]), atol=2e-5, rtol=1e-5)
        np.testing.assert_allclose(other.values[idx], diff(lg, [9, 10], [11, 12]), atol=2e-5, rtol=1e-5)
    with pytest.raises(GeomjaxError, match="same shape"):
        lens.patching_sweep(model, clean, corrupted[:, :5], lens.logit_diff_metric(5, 7))


@pytest.mark.parametrize("kind", slow_beyond_first(["GPT2LMHeadModel", "LlamaForCausalLM", "BloomForCausalLM"]))
def test_residual_decomposition_and_direct_logit_attribution(saved, kind):
    model, ids = gj.load(saved[kind][0]), _ids(seed=7)
    parts = circuits.residual_decomposition(model, ids)
    n = (2 if kind.startswith("GPT2") else 1) + L * (H + 2)
    assert parts.components.shape == (n, 2, 7, D) and len(parts.labels) == n and parts.labels[-1] == "L1.mlp"
    np.testing.assert_allclose(np.asarray(parts.components, np.float64).sum(0), parts.resid, atol=2e-5, rtol=1e-5)
    labels, dla = circuits.direct_logit_attribution(model, parts, [3, 4], [5, 6], pos=-2)
    logits = np.asarray(model.logits(ids))
    want = logits[[0, 1], -2, [3, 4]] - logits[[0, 1], -2, [5, 6]]
    assert dla.shape == (n + 1, 2) and labels[-1] == "ln_final.bias"
    np.testing.assert_allclose(np.asarray(dla, np.float64).sum(0), want, atol=5e-5, rtol=1e-5)
    cache = model.run_with_cache(ids)[1]
    acc = circuits.accumulated_resid(model, cache)
    assert acc.shape == (L + 1, 2, 7, D)
    np.testing.assert_allclose(acc[-1], cache["ln_final"], atol=1e-5)
    np.testing.assert_allclose(circuits.accumulated_resid(model, cache, apply_ln=False)[1], cache["blocks.1.hook_resid_pre"])
    with pytest.raises(GeomjaxError, match="pre-norm"):
        circuits.residual_decomposition(gj.load(saved["BertModel"][0]), ids)


def test_factored_circuits_and_composition_scores(saved):
    model = gj.load(saved["LlamaForCausalLM"][0])  # grouped-query: 4 query heads share 2 key/value heads
    qk, ov = circuits.qk_circuits(model, 1), circuits.ov_circuits(model, 0)
    w = {k: np.asarray(v, np.float64) for k, v in model.interface.head_weights(model.params, 1).items()}
    full = np.einsum("hdk,hek->hde", w["W_q"], w["W_k"][np.arange(H) // 2])
    np.testing.assert_allclose(qk.full(), full, atol=1e-5)
    U, S, Vh = qk.svd()
    np.testing.assert_allclose(S, np.linalg.svd(full, compute_uv=False)[:, :S.shape[-1]], atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(np.einsum("hik,hk,hkj->hij", U, S, Vh), full, atol=1e-5)
    np.testing.assert_allclose(qk.norm(), np.linalg.norm(full, axis=(1, 2)), rtol=1e-5)
    ov_full, qk_full = np.asarray(ov.full(), np.float64), full
    for kind, right in (("Q", qk_full), ("K", qk_full.transpose(0, 2, 1))):
        comp = np.asarray(circuits.composition_scores(model, kind))
        assert comp.shape == (L, H, L, H) and np.all(comp[1] == 0) and np.all(comp[0, :, 0] == 0)
        for h1, h2 in ((0, 0), (1, 3), (3, 2)):
            want = np.linalg.norm(ov_full[h1] @ right[h2]) / (np.linalg.norm(ov_full[h1]) * np.linalg.norm(right[h2]))
            np.testing.assert_allclose(comp[0, h1, 1, h2], want, rtol=1e-4)


@pytest.mark.slow  # compiles the generation loop and runs transformers' generate
def test_generate_and_per_token_loss(saved):
    path, hf = saved["GPT2LMHeadModel"]
    model, ids = gj.load(path), _ids(T=4, seed=8)
    greedy = np.asarray(model.generate(ids, 5))
    with torch.no_grad():
        ref = hf.generate(torch.tensor(ids, dtype=torch.long), max_new_tokens=5, do_sample=False, pad_token_id=0)
    np.testing.assert_array_equal(greedy, ref.numpy())
    a, b = (np.asarray(model.generate(ids, 5, temperature=1.0, top_k=8, seed=s)) for s in (1, 1))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:, :4], ids)
    others = [np.asarray(model.generate(ids, 5, temperature=1.0, seed=s)) for s in range(2, 6)]
    assert any(not np.array_equal(o, others[0]) for o in others)
    logits = np.asarray(model.logits(a[:, :-1]))  # each sampled token lies in the top 8 of its position
    for t in range(4, 9):
        top = np.argsort(-logits[:, t - 1], axis=-1)[:, :8]
        assert all(a[i, t] in top[i] for i in range(2))
    loss = np.asarray(model.loss(ids))
    with torch.no_grad():
        lg = hf(torch.tensor(ids, dtype=torch.long)).logits
        want = torch.nn.functional.cross_entropy(lg[:, :-1].reshape(-1, V), torch.tensor(ids[:, 1:]).reshape(-1).long(),
                                                 reduction="none").reshape(2, 3).numpy()
    np.testing.assert_allclose(loss, want, atol=2e-5, rtol=1e-5)


def test_readable_str_tokens_and_bos_flag(tmp_path):
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 4, vocab_size=280,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    n = tok.get_vocab_size()
    cfg = transformers.GPT2Config(vocab_size=n, n_positions=P, n_embd=D, n_layer=1, n_head=H)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path)
    tok.save(str(tmp_path / "tokenizer.json"))
    model = gj.load(tmp_path)
    bos = tok.token_to_id("<|endoftext|>")
    strs = model.to_str_tokens("the lazy fox")
    assert "".join(strs) == "the lazy fox" and strs[1].startswith(" ") and not any("Ġ" in t for t in strs)
    assert model.to_tokens("the fox").tolist() == [tok.encode("the fox").ids]  # GPT-2's default: no BOS
    assert model.to_tokens("the fox", prepend_bos=True).tolist() == [[bos] + tok.encode("the fox").ids]
    assert model.to_str_tokens(model.to_tokens("the", prepend_bos=True)[0]) == ["<|endoftext|>", "the"]


def test_sharded_checkpoint_reads_tensor_by_tensor(saved, tmp_path, monkeypatch):
    """A multi-file checkpoint (model.safetensors.index.json) is read one tensor at a time, each once, and
    equals the transformers model; the eager whole-checkpoint reader is never called."""
    from geomjax.convert import safetensors_io

    _, hf = saved["LlamaForCausalLM"]
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="8KB")
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 2
    reads = []
    orig = safetensors_io.ShardedTensors.__getitem__
    monkeypatch.setattr(safetensors_io.ShardedTensors, "__getitem__", lambda self, k: reads.append(k) or orig(self, k))
    monkeypatch.setattr(gj.convert, "load_tensors", lambda d: pytest.fail("read the whole checkpoint"))
    with unchecked_shapes():  # the test run's type checker would read one value of each Mapping it checks
        model = gj.load(tmp_path / "sharded")
    assert sorted(reads) == sorted(hf.state_dict())  # every tensor, each read once
    ids = _ids(seed=9)
    with torch.no_grad():
        ref = hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(model.logits(ids), ref, atol=2e-5, rtol=1e-5)
