"""Song & Zhong study pieces: Theorem 1 on a layer's pos Gram, token-level cluster compactness,
presets, and the geometry pipeline end to end on a random GPT-2 checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geomjax import cli, study
from geomjax.theory.decomposition import decompose_stream
from tests.integration.test_timing import check_stage_table
from tests.unit.test_geometry import _compactness_numpy


def _np_reflect(G):
    T = G.shape[0]
    Gt = np.empty((2 * T, 2 * T))
    Gt[:T, :T] = G
    Gt[:T, T:] = G[:, ::-1]
    Gt[T:, :T] = G[::-1, :]
    Gt[T:, T:] = G[::-1, ::-1]
    return Gt


def _np_delta_max(G, m):
    """‖Δ^{(m,m)} G̃‖max by explicit loops over eq. (5) (periodic extension of period 2T)."""
    T = G.shape[0]
    A = _np_reflect(G)
    N = A.shape[0]
    for _ in range(m):
        B = np.empty_like(A)
        for t in range(N):
            for s in range(N):
                B[t, s] = T * T * (A[t, s] - A[t - 1, s] - A[t, s - 1] + A[t - 1, s - 1])
        A = B
    return np.abs(A).max()


def _spiral_pos(T, d, rng, noise=0.0):
    t = (np.arange(T) + 0.5) / T
    cols = [np.cos(np.pi * j * t) / j for j in range(1, 5)]
    basis = np.linalg.qr(rng.standard_normal((d, 4)))[0]
    pos = np.stack(cols, 1) @ basis.T
    pos += noise * rng.standard_normal(pos.shape)
    return pos - pos.mean(0)


def test_theorem1_on_smooth_pos_holds_and_matches_loops():
    rng = np.random.default_rng(0)
    pos = _spiral_pos(24, 16, rng)
    r = study.theorem1_on_pos(pos, ks=(1, 2, 4, 8), ms=(1, 2))
    # eq. (6) holds on a smooth planted spiral, by a margin.
    assert r.max_ratio_printed < 1.0
    assert r.n_certified_violations_printed == 0
    # ‖Δ^{(m,m)}G̃‖max against explicit loops on the same normalised G (trace T).
    G = pos @ pos.T
    G *= 24 / np.trace(G)
    for j, m in enumerate((1, 2)):
        np.testing.assert_allclose(r.delta_max[j], _np_delta_max(G, m), rtol=1e-9)
    # RHS = 6/(8k)^m ‖Δ‖max exactly as printed.
    for i, k in enumerate((1, 2, 4, 8)):
        for j, m in enumerate((1, 2)):
            np.testing.assert_allclose(r.rhs_printed[i][j], 6 / (8 * k) ** m * r.delta_max[j],
                                       rtol=1e-12)
    # More low frequencies fit a smooth Gram better: the LHS falls with k (printed basis).
    lhs = np.asarray(r.lhs_over_opnorm)
    assert np.all(np.diff(lhs) < 0) and lhs[-1] < 0.25 * lhs[0]


def test_theorem1_on_pos_is_scale_free_and_recentres():
    rng = np.random.default_rng(1)
    pos = _spiral_pos(20, 8, rng, noise=0.01)
    a = study.theorem1_on_pos(pos, ks=(1, 3), ms=(1,))
    b = study.theorem1_on_pos(7.5 * pos + 1e-9, ks=(1, 3), ms=(1,))  # tiny offset: re-centred
    np.testing.assert_allclose(a.ratio_printed, b.ratio_printed, rtol=1e-6)


def test_token_cluster_metrics_against_numpy_and_planted_clusters():
    rng = np.random.default_rng(2)
    N, T, d = 6, 10, 5
    labels = np.array([0, 0, 1, 1, 2, 2])
    centers = 3.0 * rng.standard_normal((3, d))
    pos = 20.0 * rng.standard_normal((T, d))
    pos -= pos.mean(0)
    mean = rng.standard_normal(d)
    h = mean + pos[None] + centers[labels][:, None, :] + rng.standard_normal((N, T, d))
    r = study.token_cluster_metrics(h, labels, mean, pos)
    y = np.repeat(labels, T)
    cvec = (h - mean - pos[None]).reshape(-1, d)
    np.testing.assert_allclose(r.compactness_cvec, _compactness_numpy(cvec, y), rtol=1e-8)
    np.testing.assert_allclose(r.compactness_raw, _compactness_numpy(h.reshape(-1, d), y), rtol=1e-8)
    # Removing the (large, shared) positional part separates the documents better.
    assert r.compactness_cvec > 2 * r.compactness_raw
    assert r.pca_cvec.shape == (N * T, 2)


def test_token_cluster_metrics_bad_input():
    h = np.zeros((4, 3, 2))
    with pytest.raises(ValueError, match="at least two documents"):
        study.token_cluster_metrics(h, np.zeros(4, int), np.zeros(2), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="labels must have shape"):
        study.token_cluster_metrics(h, np.zeros(3, int), np.zeros(2), np.zeros((3, 2)))


def test_presets_resolve_and_flags_override():
    from geomjax.drivers.pipeline import PRESETS

    args = cli.build_parser().parse_args(["geometry", "--preset", "paper"])
    cfg = cli._config_from_args(args)
    assert (cfg.n_contexts, cfg.seq_len) == (6400, 512)
    args = cli.build_parser().parse_args(["geometry", "--preset", "paper", "-T", "64",
                                          "--ood-corpus", "none"])
    cfg = cli._config_from_args(args)
    assert cfg.seq_len == 64 and cfg.n_docs == PRESETS["paper"]["n_docs"]
    assert cfg.ood_corpus is None


@pytest.fixture(scope="module")
def random_gpt2_dir(tmp_path_factory):
    """A random GPT-2 checkpoint with the real vocabulary (so the BPE tokenizer applies)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64)
    model = transformers.GPT2Model(cfg)
    path = tmp_path_factory.mktemp("gpt2_random")
    model.save_pretrained(path)
    return path


@pytest.mark.slow
def test_geometry_end_to_end_on_random_gpt2(random_gpt2_dir, tmp_path, capsys):
    out = tmp_path / "run"
    cli.main(["geometry", "--model", str(random_gpt2_dir), "--out", str(out), "--n-docs", "2",
              "--windows-per-doc", "4", "-T", "40", "--batch-size", "4", "--screenot-k", "5",
              "--cluster-windows", "2", "--no-progress"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["per_layer"]) == 3  # embedding + 2 blocks (no final LayerNorm)
    m = metrics["per_layer"][1]
    for key in ("relative_norm", "incoherence_max", "theorem1_max_ratio_printed",
                "compactness_cvec", "ood_relative_norm"):
        assert np.isfinite(m[key]), key
    report = (out / "report.md").read_text()
    assert "Table 2: out of distribution (stdlib)" in report
    # the OOD text is the shipped snapshot, recorded in metrics.json and the report (issue 38)
    assert metrics["corpora"]["stdlib"].startswith("stdlib/cpython-3.11.7-lib.json shipped with geomjax")
    assert metrics["corpora"]["stdlib"] in report
    assert "GPT-2 arch." in report
    assert "ScreeNOT ran with k = 5" in capsys.readouterr().err  # k below the source's 20: said after the run
    check_stage_table(out)  # every stage timed in run.json and the report (issue 36)
    assert cli.main(["geometry", "--model", str(random_gpt2_dir), "--out", str(tmp_path / "b"),
                     "-T", "65", "--no-progress"]) == 2  # a user error: one line, exit status 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exceeds the 64 positions" in err[0] and not (tmp_path / "b").exists()


def test_layer_results_are_typed_and_serialise_to_the_documented_rows():
    """LayerMetrics / Theorem1OnPos are frozen dataclasses; their JSON rows keep metrics.json's keys and order."""
    import dataclasses

    h = np.random.default_rng(3).normal(size=(6, 12, 8)).astype(np.float32)
    m = study.layer_metrics(decompose_stream([h]), np.array([0, 0, 0, 1, 1, 1]),
                            study.StudyOptions(screenot_k=2, n_freq=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.stable_rank = 0.0
    assert list(m.to_json()) == [
        "n_contexts", "n_positions", "screenot_rank", "screenot_threshold", "explained_ratio", "stable_rank",
        "relative_norm", "share_pos", "share_ctx", "share_resid", "incoherence_max", "incoherence_mean",
        "intra_similarity", "inter_similarity", "dct_low_freq_energy"]
    assert isinstance(m.screenot_rank, int) and abs(m.share_pos + m.share_ctx + m.share_resid - 1) < 1e-5
    t = study.theorem1_on_pos(_spiral_pos(12, 8, np.random.default_rng(4)), ks=(1, 2, 3), ms=(1, 2))
    row = study.LayerResult("L1", dataclasses.replace(m, cluster_compactness=0.5), np.zeros((12, 2)),
                            np.zeros((1, 12, 2)), np.zeros((12, 12)), theorem1=t, ood=m).to_json(8)
    assert row["cluster_compactness"] == 0.5 and row["ood_stable_rank"] == m.stable_rank
    assert row["theorem1_lhs_k10_over_opnorm"] == t.lhs_over_opnorm[2]  # k = 10 capped at the largest k
    j = json.loads(json.dumps(t.to_json()))
    assert j["ks"] == [1, 2, 3] and j["argmax_printed"] == list(t.argmax_printed)
    assert np.asarray(j["ratio_corrected"]).shape == (3, 2)


def test_layer_metrics_records_why_screenot_cannot_run():
    """T = 6 positions cannot carry k = 20: no silent None, a note and a warning instead."""
    h = np.random.default_rng(0).normal(size=(5, 6, 8)).astype(np.float32)
    st = decompose_stream([h])
    with pytest.warns(UserWarning, match="screenot_rank n/a"):
        m = study.layer_metrics(st, None, study.StudyOptions(screenot_k=20, n_freq=3))
    assert m.screenot_rank is None and "k = 20 needs 2k + 1 < min(T, d) = 6" in m.screenot_note
    assert "screenot_note" not in study.layer_metrics(st, None, study.StudyOptions(screenot_k=2, n_freq=3)).to_json()


def test_a_new_layer_metric_reaches_the_report_table_without_editing_report():
    """The per-layer table is built from LayerMetrics' fields: a field that declares a column (with
    study._metric) is a column of the report, with its values, and a config field in braces is filled."""
    import dataclasses
    from types import SimpleNamespace

    from geomjax.analysis import report
    from geomjax.analysis.study_config import GeometryConfig

    @dataclasses.dataclass(frozen=True)
    class WithNew(study.LayerMetrics):
        new_metric: float | None = study._metric("my new metric (k={screenot_k})", default=None)

    base = dict(n_contexts=4, n_positions=8, screenot_rank=2, screenot_threshold=1.0, explained_ratio=0.5,
                screenot_note=None, stable_rank=1.5, relative_norm=0.3, share_pos=0.2, share_ctx=0.5,
                share_resid=0.3, incoherence_max=0.1, incoherence_mean=0.05, intra_similarity=None,
                inter_similarity=None, dct_low_freq_energy=0.9, cluster_compactness=None)
    layers = [SimpleNamespace(name=f"layer {i}", metrics=WithNew(**base, new_metric=0.25 * i)) for i in range(2)]
    r = SimpleNamespace(layers=layers, not_available={"intra_similarity": "one document"}, n_contexts=4, d_model=8,
                        config=GeometryConfig(screenot_k=7))
    section = report._layers_section(r, {"metrics_by_layer": "figures/m.png"})
    md = report.render_markdown("t", [section])
    assert "my new metric (k=7)" in md and "rank (ScreeNOT k=7)" in md and "one document" in md
    header = next(line for line in md.splitlines() if line.startswith("| layer"))
    assert header.count("|") - 1 == 1 + len(report.metric_columns()) + 1
    assert "| 0.25 |" in md.replace("0.250", "0.25")
