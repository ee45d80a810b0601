"""`geometry --cluster-mu topics|general` (issue 16, item 8): the centring of Table 1's topic clusters is an
option recorded in config.json, and "general" centres the topic windows' ctx on μ of the separate uniform
draw (as Song & Zhong's topics script centres on μ from its general-corpus run). Checked against an
in-memory NumPy computation of the same windows (MiniLM, small sizes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geomjax import cli, pipeline

SMALL = ["--n-docs", "2", "--windows-per-doc", "4", "-T", "48", "--batch-size", "4", "--screenot-k", "5",
         "--no-progress", "--ood-corpus", "none", "--no-theorem1", "--cluster-windows", "0"]


def _intra_inter(ctx: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean |cos| between context vectors of the same / of different documents (Table 1)."""
    u = ctx / np.linalg.norm(ctx, axis=1, keepdims=True)
    cc = np.abs(u @ u.T)
    same = labels[:, None] == labels[None, :]
    return float(cc[same].mean()), float(cc[~same].mean())


@pytest.mark.slow
def test_cluster_mu_general_centres_topics_on_the_general_draw(tmp_path):
    runs = {}
    for mu in ("topics", "general"):
        out = tmp_path / mu
        assert cli.main(["geometry", "--out", str(out), "--cluster-mu", mu, *SMALL]) == 0
        assert json.loads((out / "config.json").read_text())["config"]["cluster_mu"] == mu
        runs[mu] = json.loads((out / "metrics.json").read_text())["per_layer"]

    cfg = pipeline.GeometryConfig(n_docs=2, windows_per_doc=4, seq_len=48, batch_size=4, screenot_k=5,
                                  ood_corpus=None)
    model, params, tok, _ = pipeline.load_model_and_tokenizer(cfg.model)
    inputs = pipeline.prepare_inputs(cfg, tok)
    labels = np.asarray(inputs.windows.doc_labels)
    _, topic = model.apply({"params": params}, inputs.windows.ids)
    _, general = model.apply({"params": params}, np.asarray(inputs.cvec_ids))
    changed = 0
    for layer, (h, g) in enumerate(zip(topic.residual, general.residual)):
        h = np.asarray(h, np.float64)[:, 1:]
        g = np.asarray(g, np.float64)[:, 1:]
        for mu_name, mu in (("topics", h.mean((0, 1))), ("general", g.mean((0, 1)))):
            intra, inter = _intra_inter(h.mean(1) - mu, labels)
            np.testing.assert_allclose(runs[mu_name][layer]["intra_similarity"], intra, rtol=1e-3, atol=1e-5)
            np.testing.assert_allclose(runs[mu_name][layer]["inter_similarity"], inter, rtol=1e-3, atol=1e-5)
        changed += abs(runs["general"][layer]["intra_similarity"] - runs["topics"][layer]["intra_similarity"]) > 1e-3
    assert changed >= 1  # the option changes the μ actually used


def test_cluster_mu_rejects_unknown_values(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["geometry", "--out", str(tmp_path / "x"), "--cluster-mu", "corpus", *SMALL])
    assert e.value.code == 2 and "--cluster-mu" in capsys.readouterr().err
