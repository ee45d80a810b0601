"""The families ported for issue 32 (GPT-NeoX / Pythia, Qwen 2, Qwen 3, Gemma, Gemma 2, Gemma 3 text) vs
Hugging Face transformers (PyTorch) on tiny random checkpoints written here with ``save_pretrained``; padded
batches (left and right) against the unpadded transformers run for every family; the lens names, the eq. (7)
decomposition and `geomjax geometry` on each new family; cache sizes and stop_at_layer.

Each model's every parameter is random (norm gains around 1; Gemma's 1 + w gains around 1 too), the
sequence (T = 9) is longer than every sliding window (4), and Gemma 2's soft-caps are small enough (5, 3)
to bend its scores and logits.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import geomjax as gj
from geomjax import attention as A
from geomjax import attention_probe as AP
from geomjax import cli
from geomjax.analysis import lens
from geomjax.errors import GeomjaxError
from geomjax.models import model_interface
from tests._marks import slow_beyond_first

V, T = 64, 9
_ROT = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8)
NEW = {
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.5)),
    "gpt_neox_sequential": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.25,
        use_parallel_residual=False, rotary_emb_base=500.0)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(_ROT, tie_word_embeddings=False)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(_ROT, tie_word_embeddings=True)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(_ROT, num_key_value_heads=1)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        _ROT, sliding_window=4, query_pre_attn_scalar=12, attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        _ROT, num_hidden_layers=3, sliding_window=4, query_pre_attn_scalar=12,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e5},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})),
}
OLD = {  # the first families, for the padding test
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=16)),
    "bert": ("BertConfig", "BertModel", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=48, max_position_embeddings=16)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(_ROT)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(_ROT, sliding_window=4)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=32, n_layer=2, n_head=4)),
}


def _randomize(model, seed: int) -> None:
    """Every parameter random; norm gains around 1 (Gemma's stored w around 0: its gain is 1 + w)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    gemma = "gemma" in type(model).__name__.lower()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            is_norm = "norm" in name.lower() or "ln_f" in name
            if is_norm and name.endswith("weight"):
                p.copy_((0.0 if gemma else 1.0) + 0.2 * noise)
            else:
                p.copy_(0.2 * noise)


def _build(root, name, spec, seed):
    import torch
    import transformers

    cfg_cls, model_cls, kw = spec
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_cls)(vocab_size=V, **kw, attn_implementation="eager")
    model = getattr(transformers, model_cls)(cfg).eval()
    _randomize(model, 100 + seed)
    model.save_pretrained(root / name)
    return root / name, model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (directory, transformers model) for the new and the first families (built once)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("newfam")
    return {name: _build(root, name, spec, i) for i, (name, spec) in enumerate({**NEW, **OLD}.items())}


def _hf(model, ids, **kw):
    import torch

    with torch.no_grad():
        return model(torch.tensor(ids), output_hidden_states=True, output_attentions=True, **kw)


@pytest.mark.parametrize("name", slow_beyond_first(NEW))
def test_parity_with_transformers(checkpoints, name):
    """Hidden states, logits and attention probabilities within 1e-5 of transformers (Gemma 2's soft-caps and
    every sliding window exercised: T = 9 > W = 4)."""
    path, hf = checkpoints[name]
    ids = np.random.default_rng(3).integers(0, V, (2, T))
    ref = _hf(hf, ids)
    model, params = gj.convert.load_pretrained(path)
    logits, inter = jax.jit(model.apply, static_argnames="return_attention")(
        {"params": params}, ids.astype(np.int32), return_attention=True)
    assert len(inter.hidden_states) == len(ref.hidden_states) == model.config.num_layers + 1
    for layer, (a, b) in enumerate(zip(inter.hidden_states, ref.hidden_states)):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{name} layer {layer}")
    np.testing.assert_allclose(np.asarray(logits), ref.logits.numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(inter.attentions, ref.attentions):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-6)
    if name == "gemma2":  # the caps bind: |logits| reach into tanh's curved part, and stay below 3
        assert 1.0 < float(np.abs(np.asarray(logits)).max()) < 3.0


def test_gemma_windows_and_bases(checkpoints):
    """Gemma 2 alternates local (W = 4) and global layers; Gemma 3 rotates with two bases."""
    model, params = gj.convert.load_pretrained(checkpoints["gemma2"][0])
    att = model.apply({"params": params}, np.arange(T)[None], return_attention=True)[1].attentions
    t, s = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    assert np.all(np.asarray(att[0])[..., s <= t - 4] == 0) and np.all(np.asarray(att[1])[..., s <= t] > 0)
    c = gj.convert.load_pretrained(checkpoints["gemma3"][0])[0].config
    np.testing.assert_allclose(c.layer_inv_freq(0), 100.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-6)
    np.testing.assert_allclose(c.layer_inv_freq(1), 1e5 ** (-np.arange(0, 8, 2) / 8) / 2.0, rtol=1e-6)


def test_study_scans_only_families_whose_blocks_are_alike(checkpoints):
    """The study's scanned forward applies block 0's module to every layer: Gemma 2 (alternating local and
    global layers) is not scannable and runs whole, and its study states equal transformers' hidden states."""
    from geomjax.analysis.study import GeometryConfig, _study_forward
    from geomjax.tools import extraction

    model, params = gj.convert.load_pretrained(checkpoints["gemma2"][0])
    assert not model.scannable() and gj.convert.load_pretrained(checkpoints["qwen2"][0])[0].scannable()
    with pytest.raises(ValueError, match="differ by layer"):
        extraction.scan_forward(model, True)
    conv = {"final_norm_applied": True, "bos_prepended": None}
    fwd = _study_forward(GeometryConfig(), model, conv)
    assert not isinstance(fwd, extraction.ScanForward)
    ids = np.arange(1, T + 1)[None] % 50
    ref = _hf(checkpoints["gemma2"][1], ids).hidden_states
    for got, want in zip(fwd(params, ids), ref):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", slow_beyond_first([*NEW, *OLD]))
def test_padding_left_and_right(checkpoints, name):
    """A batch padded on the left or the right gives, at every real token, transformers' states of the
    unpadded sequence (≤ 1e-5), through the model and through the lens."""
    path, hf = checkpoints[name]
    rng = np.random.default_rng(5)
    full, short = rng.integers(1, V, T), rng.integers(1, V, T - 3)
    ref = [_hf(hf, x[None]).hidden_states for x in (full, short)]
    m = lens.Model(*gj.convert.load_pretrained(path), tokenizer=None, name=name)
    for side in ("left", "right"):
        pad, one = np.zeros(3, np.int64), np.ones(T - 3, np.int64)
        row = np.concatenate([pad, short]) if side == "left" else np.concatenate([short, pad])
        mask = np.stack([np.ones(T, np.int64), np.concatenate([pad, one] if side == "left" else [one, pad])])
        ids = np.stack([full, row])
        real = mask[1].astype(bool)
        _, cache = m.run_with_cache(ids, names=["blocks.*.hook_resid_post", "blocks.0.hook_resid_pre"],
                                    attention_mask=mask)
        states = [cache["blocks.0.hook_resid_pre"]] + [cache[f"blocks.{l}.hook_resid_post"]
                                                       for l in range(m.facts.n_layers)]
        for layer, h in enumerate(states):
            want_full = ref[0][layer].numpy()[0]
            want_short = ref[1][layer].numpy()[0]
            if layer == len(states) - 1 and m.facts.final_norm:  # HF's last state is after the final norm
                continue
            np.testing.assert_allclose(np.asarray(h)[0], want_full, rtol=1e-5, atol=1e-5, err_msg=f"{side} {layer}")
            np.testing.assert_allclose(np.asarray(h)[1][real], want_short, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} {side} layer {layer}")
        hs = model_interface(m.model).hidden_states(m.params, ids, attention_mask=mask)
        np.testing.assert_allclose(np.asarray(hs[-1])[1][real], ref[1][-1].numpy()[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", slow_beyond_first(NEW))
def test_legend_names_of_each_family(checkpoints, name):
    """Every new family has the legend's block names (parallel GPT-NeoX: no hook_resid_mid), the rotary
    q_rot / k_rot, ln_final; the cache's hidden states are the model's."""
    m = lens.Model(*gj.convert.load_pretrained(checkpoints[name][0]), tokenizer=None, name=name)
    _, cache = m.run_with_cache(np.arange(1, 6)[None])
    names = {n.split(".", 2)[-1] for n in cache if n.startswith("blocks.0.")}
    want = {"hook_resid_pre", "ln1", "attn.q", "attn.k", "attn.v", "attn.q_rot", "attn.k_rot", "attn.scores",
            "attn.pattern", "attn.z", "attn.out", "ln2", "mlp.out", "hook_resid_post"}
    want |= set() if name == "gpt_neox" else {"hook_resid_mid"}
    want |= {"ln1.scale", "ln2.scale", "mlp.pre", "mlp.post"}  # the lens's names (issue 30); gated MLPs: pre_linear
    want |= set() if name.startswith("gpt_neox") else {"mlp.pre_linear"}
    assert want <= names, (name, want - names)
    assert {"ln_final", "ln_final.scale", "hook_embed"} <= set(cache)
    hs = jax.jit(model_interface(m.model).hidden_states, static_argnames="final_norm")(
        m.params, np.arange(1, 6)[None], final_norm=False)
    np.testing.assert_allclose(np.asarray(cache.hidden_states(final_norm=False)[-1]), np.asarray(hs[-1]),
                               rtol=1e-5, atol=1e-5)  # two compiled programs: rounding only


@pytest.mark.parametrize("name", slow_beyond_first(["qwen3", "gpt_neox", "qwen2", "gemma", "gemma2", "gemma3"]))
def test_qk_decomposition(checkpoints, name):
    """eq. (7) parts of a partial-rotary (GPT-NeoX), biased (Qwen 2), q/k-normed (Qwen 3, Gemma 3), soft-capped
    (Gemma 2) or Gemma head add up to the model's (pre-cap) scores; the (capped) softmax is the model's
    attention, for one head and for every head of the layer."""
    model, params = gj.convert.load_pretrained(checkpoints[name][0])
    rng = np.random.default_rng(1)
    batches = [rng.integers(1, V, (4, 8)) for _ in range(2)]
    basis = AP.estimate_attention_basis(model, params, batches)
    ids = batches[0][0]
    xs, att = AP.attention_inputs_jit(model, params, ids[None])
    parts = AP.head_qk_decomposition(model, params, basis, ids, 1, 2)
    np.testing.assert_allclose(np.asarray(parts.sum_of_parts()), np.asarray(parts.total), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(parts.attention), np.asarray(att[1][0, 2]), atol=2e-6)
    every = A.layer_qk_decomposition(xs[1][0], basis, AP.qk_weights(model, params, 1), 1)
    np.testing.assert_allclose(np.asarray(every.attention), np.asarray(att[1][0]), atol=2e-6)


@pytest.mark.parametrize("name", slow_beyond_first(["qwen2", "gpt_neox", "gemma2"]))
def test_lens_hooks_with_masks_and_stops(checkpoints, name):
    """The lens's activations on a new family: the heads' results sum to attn.out less b_o (Gemma 2: to
    its input, before the output norm), the neurons give mlp.out, and a hook closure (an array captured,
    hooks as data) on a padded batch with stop_at_layer equals the unpadded run it patches."""
    m = lens.Model(*gj.convert.load_pretrained(checkpoints[name][0]), tokenizer=None, name=name)
    ids = np.arange(1, 7)[None].repeat(2, 0)
    _, c = m.run_with_cache(ids, ["blocks.0.attn.*", "blocks.0.mlp.*"])
    b_o = np.asarray(m.interface.head_weights(m.params, 0)["b_o"])
    heads = np.asarray(c["blocks.0.attn.result"]).sum(axis=2) + b_o
    if name != "gemma2":
        np.testing.assert_allclose(heads, np.asarray(c["blocks.0.attn.out"]), rtol=1e-5, atol=1e-5)
    mp = m.params[m.interface.layer_key(0)]["mlp"]
    out_proj = mp["proj"] if "proj" in mp else mp["down"]
    mlp = np.asarray(c["blocks.0.mlp.post"]) @ np.asarray(out_proj["kernel"]) + np.asarray(out_proj.get("bias", 0.0))
    assert c["blocks.0.mlp.pre"].shape == c["blocks.0.mlp.post"].shape == mlp.shape[:2] + out_proj["kernel"].shape[:1]
    if name != "gemma2":
        np.testing.assert_allclose(mlp, np.asarray(c["blocks.0.mlp.out"]), rtol=1e-5, atol=1e-5)
    src = np.asarray(m.run_with_cache(ids + 3, "blocks.0.hook_resid_post")[1]["blocks.0.hook_resid_post"])
    patch = {"blocks.0.hook_resid_post": lambda x: x.at[:, 2].set(src[:, 2])}
    ref = m.run_with_cache(ids, "blocks.1.hook_resid_post", hooks=patch)[1]["blocks.1.hook_resid_post"]
    padded, mask = np.pad(ids, ((0, 0), (2, 0)), constant_values=0), np.pad(np.ones_like(ids), ((0, 0), (2, 0)))
    src_pad = np.pad(src, ((0, 0), (2, 0), (0, 0)))
    patch = {"blocks.0.hook_resid_post": lambda x: x.at[:, 4].set(src_pad[:, 4])}
    out, cache = m.run_with_cache(padded, "blocks.*.hook_resid_post", hooks=patch, attention_mask=mask,
                                  stop_at_layer=2)
    assert out is None and cache.n_layers == 2
    np.testing.assert_allclose(np.asarray(cache["blocks.1.hook_resid_post"])[:, 2:], np.asarray(ref),
                               rtol=1e-4, atol=1e-4)
    assert int(lens.cache_size(m, padded.shape, "blocks.*.hook_resid_post", stop_at_layer=2)) == sum(
        a.nbytes for a in cache.values())


def test_cache_size_and_stop_at_layer(checkpoints):
    """cache_size is the bytes of the cache run_with_cache returns; stop_at_layer stops the forward there."""
    m = lens.Model(*gj.convert.load_pretrained(checkpoints["qwen2"][0]), tokenizer=None, name="qwen2")
    ids = np.arange(1, 7)[None].repeat(3, 0)
    for names, stop in ((None, None), ("blocks.*.attn.pattern", None), (None, 1)):
        size = lens.cache_size(m, (3, 6), names, stop_at_layer=stop)
        out, cache = m.run_with_cache(ids, names, stop_at_layer=stop)
        assert int(size) == sum(a.nbytes for a in cache.values()) and set(size.per_name) == set(cache)
        assert "bytes" in str(size)
    assert out is None and not any(n.startswith("blocks.1.") for n in cache)
    full = m.run_with_cache(ids)[1]
    np.testing.assert_array_equal(np.asarray(cache["blocks.0.hook_resid_post"]),
                                  np.asarray(full["blocks.0.hook_resid_post"]))
    with pytest.raises(GeomjaxError, match="stop_at_layer must be"):
        m.run_with_cache(ids, stop_at_layer=3)


def test_cache_that_cannot_fit_is_refused_before_running(checkpoints, monkeypatch):
    """A cache larger than the device's free memory is one GeomjaxError line before anything runs."""
    m = lens.Model(*gj.convert.load_pretrained(checkpoints["gemma"][0]), tokenizer=None, name="gemma")
    need = int(lens.cache_size(m, (2, 5)))
    monkeypatch.setattr(lens, "_free_bytes", lambda: need - 1)
    with pytest.raises(GeomjaxError, match=r"would take .* free; keep fewer names") as e:
        m.run_with_cache(np.ones((2, 5), np.int64))
    assert "\n" not in str(e.value)
    monkeypatch.setattr(lens, "_free_bytes", lambda: need)
    m.run_with_cache(np.ones((2, 5), np.int64))


def test_unsupported_attributes_rejected_by_name(checkpoints):
    """Variants not implemented are rejected by name before any weight is read."""
    base = json.loads((checkpoints["qwen2"][0] / "config.json").read_text())
    with pytest.raises(GeomjaxError, match="use_sliding_window"):
        gj.convert.config_from_hf(base | {"use_sliding_window": True})
    with pytest.raises(GeomjaxError, match=r"unknown attribute\(s\) \['frobnicate'\]"):
        gj.convert.config_from_hf(base | {"frobnicate": 1})
    g = json.loads((checkpoints["gemma"][0] / "config.json").read_text())
    with pytest.raises(GeomjaxError, match="use_bidirectional_attention"):
        gj.convert.config_from_hf(g | {"use_bidirectional_attention": True})
    n = json.loads((checkpoints["gpt_neox"][0] / "config.json").read_text())
    with pytest.raises(GeomjaxError, match="rope type 'yarn'"):
        gj.convert.config_from_hf(n | {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}})


def test_revision_names(checkpoints, tmp_path, monkeypatch):
    """NAME@REVISION resolves a training checkpoint (a branch) through the Hugging Face cache, offline."""
    import shutil

    from geomjax.convert.safetensors_io import resolve_checkpoint, split_revision

    assert split_revision("EleutherAI/pythia-70m@step1000") == ("EleutherAI/pythia-70m", "step1000")
    assert split_revision("gpt2") == ("gpt2", None)
    for bad in ("a@", "@b", "a@b@c"):
        with pytest.raises(GeomjaxError, match="NAME@REVISION"):
            split_revision(bad)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    entry = tmp_path / "hf" / "hub" / "models--EleutherAI--pythia-tiny"
    (entry / "refs").mkdir(parents=True)
    for rev, commit, name in (("main", "c143000", "gpt_neox"), ("step1000", "c1000", "gpt_neox_sequential")):
        shutil.copytree(checkpoints[name][0], entry / "snapshots" / commit)
        (entry / "refs" / rev).write_text(commit)
    assert resolve_checkpoint("EleutherAI/pythia-tiny@step1000").name == "c1000"
    assert resolve_checkpoint("EleutherAI/pythia-tiny").name == "c143000"
    m = gj.convert.load_pretrained("EleutherAI/pythia-tiny@step1000")[0]
    assert m.config.use_parallel_residual is False
    with pytest.raises(FileNotFoundError):
        resolve_checkpoint("EleutherAI/pythia-tiny@step9")


def _word_tokenizer(corpus):
    """A word-level BPE tokenizer of the test corpus within the tiny models' V ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([str(p) for p in sorted(corpus.iterdir())],
              trainers.BpeTrainer(vocab_size=V, special_tokens=["<pad>", "<s>", "<bos>"], show_progress=False))
    return tok


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt_neox", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"])
def test_geometry_end_to_end(checkpoints, tmp_path, name):
    """`geomjax geometry --model DIR` on each new family (a word-level tokenizer.json of the test corpus)."""
    import shutil

    from tests.acceptance.test_families import SMALL, _corpus

    corpus = _corpus(tmp_path)
    d = tmp_path / name
    shutil.copytree(checkpoints[name][0], d)
    _word_tokenizer(corpus).save(str(d / "tokenizer.json"))
    out = tmp_path / "run"
    assert cli.main(["geometry", "--model", str(d), "--corpus", str(corpus), "--out", str(out), *SMALL,
                     "--no-figures"]) == 0  # figures: the same code for every family (test_study, test_cli)
    conv = json.loads((out / "config.json").read_text())["config"]["model_conventions"]
    assert conv["positions"] == "rotary" and conv["final_norm_applied"] is True
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["per_layer"]) == model_interface(gj.convert.load_pretrained(d)[0]).facts.n_layers + 1
    assert all(np.isfinite(m["relative_norm"]) for m in metrics["per_layer"])


def test_sweep_models_spec():
    from geomjax.analysis.study_config import sweep_models

    assert sweep_models("EleutherAI/pythia-70m@step1000,step2000, step3000") == [
        "EleutherAI/pythia-70m@step1000", "EleutherAI/pythia-70m@step2000", "EleutherAI/pythia-70m@step3000"]
    assert sweep_models("runs/a,runs/b") == ["runs/a", "runs/b"]
    assert sweep_models("gpt2") == ["gpt2"]


@pytest.mark.slow
def test_geometry_sweep_over_checkpoints(checkpoints, tmp_path, monkeypatch, capsys):
    """`geomjax geometry --model A,B` (two training revisions of a cached Pythia, offline) writes one report
    whose table has one row per checkpoint, equal to the single runs' across-layer means."""
    import shutil

    from tests.acceptance.test_families import SMALL, _corpus

    corpus = _corpus(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    entry = tmp_path / "hf" / "hub" / "models--EleutherAI--pythia-tiny"
    (entry / "refs").mkdir(parents=True)
    tok = _word_tokenizer(corpus)
    for rev, name in (("step1", "gpt_neox"), ("step2", "gpt_neox_sequential")):
        shutil.copytree(checkpoints[name][0], entry / "snapshots" / rev)
        tok.save(str(entry / "snapshots" / rev / "tokenizer.json"))
        (entry / "refs" / rev).write_text(rev)
    out = tmp_path / "sweep"
    spec = "EleutherAI/pythia-tiny@step1,step2"
    assert cli.main(["geometry", "--model", spec, "--corpus", str(corpus), "--out", str(out), *SMALL]) == 0
    sweep = json.loads((out / "metrics.json").read_text())["sweep"]
    assert [r["model"] for r in sweep] == ["EleutherAI/pythia-tiny@step1", "EleutherAI/pythia-tiny@step2"]
    assert "Metrics over training" in (out / "report.md").read_text()
    single = tmp_path / "single"
    assert cli.main(["geometry", "--model", "EleutherAI/pythia-tiny@step2", "--corpus", str(corpus), "--out",
                     str(single), *SMALL]) == 0
    want = json.loads((single / "metrics.json").read_text())["summary"]["relative_norm"]["mean"]
    assert sweep[1]["summary"]["relative_norm"]["mean"] == pytest.approx(want, rel=1e-6)
    assert sweep[0]["summary"]["relative_norm"]["mean"] != pytest.approx(want, rel=1e-3)
