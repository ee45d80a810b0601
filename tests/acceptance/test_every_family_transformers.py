"""transformers reads the checkpoints geomjax writes (geomjax.convert.save_checkpoint), for every family of
``registry.FAMILIES``: its outputs on the written tiny checkpoint equal geomjax's (≤ 1e-5), so the writer is the
exact inverse of the converters, checked from outside."""

from __future__ import annotations

import numpy as np
import pytest

from geomjax import lens
from geomjax.convert import config_from_hf, random_params, save_checkpoint
from geomjax.models import registry

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("fam", registry.FAMILIES, ids=lambda f: f.name)
def test_transformers_reads_the_written_checkpoint(fam, tmp_path):
    save_checkpoint(tmp_path, fam.tiny, random_params(config_from_hf(fam.tiny), seed=5))
    hf = getattr(transformers, fam.tiny["architectures"][0]).from_pretrained(tmp_path, attn_implementation="eager")
    model = lens.load(tmp_path)
    ids = np.random.default_rng(0).integers(0, model.facts.vocab_size, (2, 7))
    with torch.no_grad():
        ref = hf.eval()(torch.tensor(ids), output_hidden_states=True)
    out, cache = model.run_with_cache(ids)
    want = ref.last_hidden_state if fam.bidirectional else ref.logits
    np.testing.assert_allclose(np.asarray(out), want.numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(cache.hidden_states(), ref.hidden_states, strict=True):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-5)
