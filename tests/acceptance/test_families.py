"""Every family through the analyses: `geomjax geometry` end to end on tiny random Llama, Mistral and
BLOOM checkpoints (with their own tokenizer.json), the hidden states the study streams vs
transformers, the eq. (7) decomposition for rotary / ALiBi models, the Wertich adapter with
grouped-query attention, and Hugging Face names resolved offline (cache hit, one-line error)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import geomjax as gj
from geomjax import attention as A
from geomjax import attention_probe as AP
from geomjax import cli, pipeline
from geomjax.models import model_interface
from tests._marks import slow_beyond_first

V, T = 128, 16
SMALL = ["--n-docs", "2", "--windows-per-doc", "4", "-T", str(T), "--batch-size", "4", "--screenot-k", "3",
         "--no-progress", "--ood-corpus", "none", "--no-theorem1", "--cluster-windows", "0"]
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                                      num_attention_heads=4, num_key_value_heads=2)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(hidden_size=64, intermediate_size=96,
                                                            num_hidden_layers=2, num_attention_heads=4,
                                                            num_key_value_heads=2, sliding_window=5)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=48, n_layer=2, n_head=6)),
}
WORDS = ("alpha beta gamma delta river stone light shadow forest mountain music number table window garden "
         "silver golden quiet rapid ancient modern simple complex north south east west").split()


def _corpus(root: Path) -> Path:
    """Three seeded documents of random words (a text-file corpus directory)."""
    rng = np.random.default_rng(0)
    d = root / "corpus"
    d.mkdir()
    for i in range(3):
        (d / f"doc{i}.txt").write_text(" ".join(rng.choice(WORDS, 400)) + "\n")
    return d


def _tokenizer_json(corpus: Path, out: Path) -> None:
    """A word-level BPE tokenizer.json trained on the corpus (<unk> 0, <s> 1, </s> 2), vocabulary <= V."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([str(p) for p in sorted(corpus.iterdir())],
              trainers.BpeTrainer(vocab_size=V, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    tok.save(str(out / "tokenizer.json"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family -> checkpoint directory (random weights, tokenizer.json); plus the corpus directory."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("families")
    corpus = _corpus(root)
    out = {}
    for i, (fam, (cfg_cls, model_cls, kw)) in enumerate(FAMILIES.items()):
        torch.manual_seed(i)
        cfg = getattr(transformers, cfg_cls)(vocab_size=V, bos_token_id=1, **kw, attn_implementation="eager")
        model = getattr(transformers, model_cls)(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape))
        model.save_pretrained(root / fam)
        _tokenizer_json(corpus, root / fam)
        out[fam] = (root / fam, model)
    return out, corpus


@pytest.mark.slow
@pytest.mark.parametrize("fam", list(FAMILIES))
def test_geometry_end_to_end(tiny, tmp_path, fam):
    (ckpts, corpus) = tiny
    path, _ = ckpts[fam]
    out = tmp_path / "run"
    # the family's port and the study's numbers; the figures (the same code for every family) are drawn by
    # tests/integration/test_study.py and test_cli.py
    assert cli.main(["geometry", "--model", str(path), "--corpus", str(corpus), "--out", str(out), *SMALL,
                     "--no-figures"]) == 0
    assert not any((out / "figures").iterdir()) and "Not drawn: the run was made with --no-figures" in (
        out / "report.md").read_text()
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["figures"] is False
    conv = cfg["model_conventions"]
    assert conv["family"] == fam and conv["final_norm_applied"] is True and conv["first_position_dropped"]
    assert conv["positions"] == ("alibi" if fam == "bloom" else "rotary") and conv["bos_prepended"] is None
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["per_layer"]) == 3 and metrics["n_positions"] == T - 1
    assert all(np.isfinite(m["relative_norm"]) for m in metrics["per_layer"])


@pytest.mark.slow
def test_study_states_equal_transformers(tiny):
    """The states the study streams (final norm applied, and with --bos the BOS prepended) are HF's."""
    torch = pytest.importorskip("torch")
    (ckpts, corpus) = tiny
    path, hf = ckpts["llama"]
    cfg = pipeline.GeometryConfig(model=str(path), corpus=str(corpus), n_docs=2, windows_per_doc=4, seq_len=T,
                                  batch_size=4, bos=True)
    model, params, tok, _ = pipeline.load_model_and_tokenizer(cfg.model)
    ids = pipeline.prepare_inputs(cfg, tok).windows.ids[:4]
    conv = pipeline.model_conventions(model, cfg)
    assert conv["bos_prepended"] == 1 and conv["final_norm_applied"]
    states = model_interface(model).study_forward(final_norm=True, bos=1)(params, ids)
    with torch.no_grad():
        ref = hf(torch.tensor(np.concatenate([np.ones((4, 1), np.int64), ids], 1)), output_hidden_states=True)
    assert len(states) == len(ref.hidden_states)
    for a, b in zip(states, ref.hidden_states):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fam", slow_beyond_first(["llama", "bloom"]))
def test_qk_decomposition_rotary_and_alibi(tiny, fam):
    """eq. (7) parts of a rotary (GQA) / ALiBi head add up to the model's scores; their softmax is the
    model's own attention probabilities."""
    (ckpts, _) = tiny
    model, params = gj.convert.load_pretrained(ckpts[fam][0])
    rng = np.random.default_rng(1)
    batches = [rng.integers(3, V, (4, 12)) for _ in range(2)]
    basis = AP.estimate_attention_basis(model, params, batches)
    ids = batches[0][0]
    _, att = AP.attention_inputs_jit(model, params, ids[None])
    for layer, head in ((0, 3), (1, 1)):
        parts = AP.head_qk_decomposition(model, params, basis, ids, layer, head)
        np.testing.assert_allclose(np.asarray(parts.sum_of_parts()), np.asarray(parts.total), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(parts.attention), np.asarray(att[layer][0, head]), atol=2e-6)
    w = AP.qk_weights(model, params, 0)
    assert w["W_k"].shape == w["W_q"].shape  # GQA keys expanded to one per query head
    if fam == "llama":
        np.testing.assert_array_equal(np.asarray(w["kv_head"]), [0, 0, 1, 1])
        np.testing.assert_array_equal(np.asarray(w["W_k"][0]), np.asarray(w["W_k"][1]))
        assert float(np.abs(np.asarray(parts.pos_pos)).max()) > 0


def test_wertich_adapter_gqa_and_alpha(tiny):
    """The Wertich experiment's adapter on a GQA Llama: Tr(W_qᵀW_k) per query head with its shared key
    head, matrices by role (SwiGLU gate), and α-scaling multiplying every score by α²."""
    (ckpts, _) = tiny
    from experiments.wertich_models import run as wertich

    ad = wertich.hf_adapter(str(ckpts["llama"][0]))
    Tq, Z, rows = wertich.trace_qk(ad)
    assert Tq.shape == (2, 4) and len(rows) == 2
    w = ad.iface.head_weights(ad.params, 1)
    ref = [float(np.sum(np.asarray(w["W_q"][h], np.float64) * np.asarray(w["W_k"][h // 2], np.float64)))
           for h in range(4)]
    np.testing.assert_allclose(Tq[1], ref, rtol=1e-10)
    m = wertich.matrices(ad, 0)
    assert m["q"].shape == (64, 64) and m["k"].shape == (64, 32) and m["gate"].shape == (64, 96)
    ids = np.random.default_rng(2).integers(3, V, 10)
    basis = AP.estimate_attention_basis(ad.model, ad.params, [np.stack([ids, ids[::-1]])])
    p2 = wertich.scaled_params(ad, 1.5)
    s1 = AP.head_qk_decomposition(ad.model, ad.params, basis, ids, 0, 2).total
    x = AP.attention_inputs_jit(ad.model, ad.params, ids[None])[0][0][0]
    w2 = AP.qk_weights(ad.model, p2, 0)
    s2 = A.qk_decomposition(x, basis.mean[0], basis.pos[0], w2["W_q"][2], w2["W_k"][2],
                            rope_inv_freq=w2["rope_inv_freq"]).total
    np.testing.assert_allclose(np.asarray(s2), 2.25 * np.asarray(s1), rtol=1e-4, atol=1e-5)


def _cache_entry(hub: Path, repo: str, src: Path) -> None:
    """A Hugging Face hub cache entry laid out as huggingface_hub writes it (refs/main -> snapshots/<rev>)."""
    entry = hub / ("models--" + repo.replace("/", "--"))
    shutil.copytree(src, entry / "snapshots" / "abc123")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("abc123")


def test_hf_names_offline(tiny, tmp_path, monkeypatch, capsys):
    (ckpts, corpus) = tiny
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_entry(tmp_path / "hf" / "hub", "someorg/tiny-bloom", ckpts["bloom"][0])
    model, params, tok, path = pipeline.load_model_and_tokenizer("someorg/tiny-bloom")
    assert model_interface(model).facts.family == "bloom" and path.name == "abc123"
    for name in ("gpt2", "meta-llama/Llama-2-7b-hf"):
        assert cli.main(["geometry", "--model", name, "--out", str(tmp_path / "x"), *SMALL]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("geomjax: error: "), err
        assert "neither in the Hugging Face cache" in err[0] and "--model" in err[0], err
        assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_sharded_params_on_a_mesh(tiny):
    """load_pretrained(mesh=...) splits matrices over the devices; the forward is unchanged."""
    from geomjax.base.parallel import data_mesh

    path = tiny[0]["llama"][0]
    model, params = gj.convert.load_pretrained(path)
    mesh = data_mesh(jax.device_count())
    _, sharded = gj.convert.load_pretrained(path, mesh=mesh)
    ids = np.arange(3, 11)[None]
    forward = jax.jit(model_interface(model).hidden_states)  # one program per layout, not an op at a time
    a, b = forward(params, ids), forward(sharded, ids)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)
    assert sharded["layers_0"]["attn"]["q"]["kernel"].sharding.mesh.shape == mesh.shape


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_interface_qkv_reproduces_attention(tiny):
    """q, k, v from the interface (rotated, shared kv heads) give the model's own probabilities."""
    (ckpts, _) = tiny
    model, params = gj.convert.load_pretrained(ckpts["mistral"][0])
    m = model_interface(model)
    ids = np.arange(3, 15)[None]
    xs, att = m.attention_inputs(params, ids)
    q, k, _ = m.qkv(params, 1, xs[1])
    kv = np.asarray(m.head_weights(params, 1)["kv_head"])
    s = np.einsum("bthk,bshk->bhts", np.asarray(q), np.asarray(k)[:, :, kv]) / np.sqrt(m.facts.head_dim)
    t = np.arange(12)
    s = np.where((t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - 5), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(p / p.sum(-1, keepdims=True), np.asarray(att[1]), atol=2e-6)
    f = m.facts
    assert (f.n_heads, f.n_kv_heads, f.max_positions, f.positions) == (4, 2, None, "rotary")
