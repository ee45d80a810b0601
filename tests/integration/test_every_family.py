"""Every tool of geomjax.analysis.lens and .circuits on every registered family (issue 44): the test is
parametrized over ``registry.FAMILIES``, so registering a family (its record's ``tiny`` config.json) covers it.

Each family's tiny model (2 layers, d = 32, vocab 96) gets random parameters (norm gains around their identity,
everything else N(0, 0.2²)) and runs: the residual decomposition against the final stream, direct logit
attribution against the logits (before a final soft-cap), the logit lens and accumulated residuals against
``ln_final``, factored QK / OV circuits (grouped-query heads) against NumPy products of the weights, a patching
sweep against single patches through ``run_with_hooks``, and padding: a left-padded row with its mask gives the
unpadded row's logits, loss, hooked run, sweep and greedy continuation. The expected values are independent
computations (the model's own forward on other inputs, NumPy). No PyTorch: tests/acceptance compares the
families against transformers.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from geomjax.analysis import circuits, lens
from geomjax.convert import config_from_hf, load_pretrained, random_params, save_checkpoint
from geomjax.errors import GeomjaxError
from geomjax.models import model_from_config, registry
from tests._marks import slow_beyond_first

CAUSAL = [f for f in registry.FAMILIES if not f.bidirectional]
T, PAD = 6, 2
UNTIED = [f for f in CAUSAL if not f.parts(config_from_hf(f.tiny)).tied]


def tiny_model(fam, head: bool = True) -> lens.Model:
    """The family's tiny model with random parameters (:func:`geomjax.convert.random_params`)."""
    config = config_from_hf(fam.tiny)
    params = random_params(config, sorted(f.name for f in registry.FAMILIES).index(fam.name), head=head)
    return lens.Model(model_from_config(config), params, None, f"tiny {fam.name}")


@pytest.fixture(scope="module", params=slow_beyond_first(CAUSAL), ids=lambda f: f.name)
def model(request):
    return tiny_model(request.param)


def _ids(model, B=2, seed=0):
    return np.random.default_rng(seed).integers(1, model.facts.vocab_size, (B, T)).astype(np.int32)


def rel(a, b) -> float:
    """max |a − b| / max |b| (float64)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def _raw_logits(model, cache):
    """ln_final @ W_U: the logits before a final soft-cap (the model's logits where it has none)."""
    _, W_U = model.interface.embed_unembed(model.params)
    return np.asarray(cache["ln_final"], np.float64) @ np.asarray(W_U, np.float64)


def test_residual_decomposition_and_attribution_sum_exactly(model):
    ids = _ids(model)
    parts = circuits.residual_decomposition(model, ids)
    f = model.facts
    assert parts.components.shape[0] == len(parts.labels) == (
        (2 if model.interface.parts.positions == "learned" else 1) + f.n_layers * (f.n_heads + 2))
    assert rel(np.asarray(parts.components, np.float64).sum(0), parts.resid) < 1e-5
    labels, dla = circuits.direct_logit_attribution(model, parts, [3, 4], [5, 6], pos=-2)
    raw = _raw_logits(model, parts.cache)
    want = raw[[0, 1], -2, [3, 4]] - raw[[0, 1], -2, [5, 6]]
    assert rel(np.asarray(dla, np.float64).sum(0), want) < 1e-5 and labels[-1] == "ln_final.bias"
    _, one = circuits.direct_logit_attribution(model, parts, 7)
    assert rel(np.asarray(one, np.float64).sum(0), raw[:, -1, 7]) < 1e-5
    cap = model.interface.parts.final_softcap
    logits = np.asarray(model.logits(ids), np.float64)
    np.testing.assert_allclose(logits, raw if cap is None else cap * np.tanh(raw / cap), rtol=1e-4, atol=1e-5)


def test_logit_lens_and_accumulated_residuals(model):
    cache = circuits.residual_decomposition(model, _ids(model, seed=1)).cache  # holds what the lens reads
    acc = circuits.accumulated_resid(model, cache)
    assert acc.shape == (model.facts.n_layers + 1, 2, T, model.facts.d_model)
    assert rel(acc[-1], cache["ln_final"]) < 1e-5
    raw = circuits.accumulated_resid(model, cache, apply_ln=False)
    np.testing.assert_array_equal(raw[1], cache["blocks.1.hook_resid_pre"])
    _, W_U = model.interface.embed_unembed(model.params)
    lens_logits = np.asarray(acc, np.float64) @ np.asarray(W_U, np.float64)  # the logit lens at every depth
    assert rel(lens_logits[-1], _raw_logits(model, cache)) < 1e-5


def test_factored_circuits_read_grouped_query_heads(model):
    f = model.facts
    w = {k: np.asarray(v, np.float64) for k, v in model.interface.head_weights(model.params, 1).items()}
    kv = np.arange(f.n_heads) // (f.n_heads // f.n_kv_heads)
    qk = circuits.qk_circuits(model, 1)
    np.testing.assert_allclose(qk.full(), np.einsum("hdk,hek->hde", w["W_q"], w["W_k"][kv]), rtol=1e-4, atol=1e-5)
    ov = circuits.ov_circuits(model, 1)
    np.testing.assert_allclose(ov.full(), np.einsum("hdk,hke->hde", w["W_v"][kv], w["W_o"]), rtol=1e-4, atol=1e-5)
    comp = np.asarray(circuits.composition_scores(model, "V"))
    assert comp.shape == (f.n_layers, f.n_heads, f.n_layers, f.n_heads) and np.all(comp[1] == 0)


def _left_pad(model, ids):
    """Row 0 of ``ids`` shortened by PAD tokens and left-padded; row 1 unpadded; the mask."""
    padded, mask = ids.copy(), np.ones_like(ids)
    padded[0, PAD:], padded[0, :PAD], mask[0, :PAD] = ids[0, :-PAD], 0, 0
    return padded, mask


def test_left_padding_gives_the_unpadded_rows(model):
    """Row 0 is the first T − PAD tokens of ``ids`` left-padded: its logits (through ``logits``, hence
    ``run_with_hooks``), loss and decomposition at real tokens are the unpadded run's (which, causal, are the
    first T − PAD positions of the unpadded row); row 1 is unpadded."""
    ids = _ids(model, seed=2)
    padded, mask = _left_pad(model, ids)
    short = ids[:1, :-PAD]
    ref = np.asarray(model.logits(ids))
    got = np.asarray(model.logits(padded, attention_mask=mask))
    assert rel(got[0, PAD:], ref[0, :-PAD]) < 1e-4 and rel(got[1], ref[1]) < 1e-4
    loss, ref_loss = np.asarray(model.loss(padded, attention_mask=mask)), np.asarray(model.loss(ids))
    assert np.all(loss[0, :PAD] == 0) and rel(loss[0, PAD:], ref_loss[0, :-PAD]) < 1e-4
    parts = circuits.residual_decomposition(model, padded, attention_mask=mask)
    assert rel(np.asarray(parts.components, np.float64).sum(0)[0, PAD:], parts.resid[0, PAD:]) < 1e-5
    new = np.asarray(model.generate(padded, 3, attention_mask=mask))
    np.testing.assert_array_equal(new[0, PAD:], np.asarray(model.generate(short, 3))[0])
    np.testing.assert_array_equal(new[1], np.asarray(model.generate(ids[1:], 3))[0])
    with pytest.raises(GeomjaxError, match="left padding"):
        model.generate(padded, 2, attention_mask=mask[:, ::-1])


def test_patching_sweep_equals_single_patches_with_masks(model):
    """A left-padded prompt pair: the sweep's cells equal single patches through ``run_with_hooks`` (masked);
    its clean and corrupted metrics equal the masked logits'. (The unpadded sweep: tests/acceptance.)"""
    (clean, mask), (corrupted, _) = _left_pad(model, _ids(model, seed=3)), _left_pad(model, _ids(model, seed=4))
    metric = lens.logit_diff_metric([5, 6], [7, 8])
    sweep = lens.patching_sweep(model, clean, corrupted, metric, batch_size=4, attention_mask=mask)
    diff = lambda lg: float(np.mean(lg[[0, 1], -1, [5, 6]] - lg[[0, 1], -1, [7, 8]]))
    np.testing.assert_allclose(sweep.clean, diff(np.asarray(model.logits(clean, attention_mask=mask))), rtol=1e-4,
                               atol=1e-5)
    src = model.run_with_cache(clean, names="blocks.1.hook_resid_pre", attention_mask=mask)[1]
    s = src["blocks.1.hook_resid_pre"]
    for t in (PAD, T - 1):
        lg = np.asarray(model.logits(corrupted, {"blocks.1.hook_resid_pre": lambda x, t=t: x.at[:, t].set(s[:, t])},
                                     attention_mask=mask))
        np.testing.assert_allclose(sweep.values[1, t], diff(lg), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fam", registry.FAMILIES, ids=lambda f: f.name)
def test_written_checkpoint_reads_back_exactly(fam, tmp_path):
    """save_checkpoint runs the family's weight table backwards: load_pretrained gives the same tree, bit for bit
    (transformers reads it too: tests/acceptance/test_every_family_transformers.py)."""
    config = config_from_hf(fam.tiny)
    params = random_params(config, seed=3)
    save_checkpoint(tmp_path, fam.tiny, params)
    module, back = load_pretrained(tmp_path)
    assert module.config == config and jax.tree.structure(back) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
        np.testing.assert_array_equal(a, np.asarray(b))


@pytest.mark.parametrize("fam", UNTIED, ids=lambda f: f.name)
def test_base_checkpoints_load_headless(fam, tmp_path):
    """A base checkpoint (no untied read-out: LlamaModel, GPTNeoXModel, ...) loads with has_logits False; its
    hidden states are the full model's; asking for logits names the missing head tensor."""
    full = tiny_model(fam)
    save_checkpoint(tmp_path, fam.tiny, {k: v for k, v in full.params.items() if k != "lm_head"})
    base = lens.load(tmp_path)
    assert not base.has_logits and "no lm_head" in repr(base)
    ids = _ids(full)
    np.testing.assert_array_equal(base.run_with_cache(ids)[0], full.run_with_cache(ids)[1]["ln_final"])
    with pytest.raises(GeomjaxError, match=rf"no language-model head \({fam.head_tensor}"):
        base.logits(ids)
