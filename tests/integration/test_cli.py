"""The geomjax command end to end on the real MiniLM weights (small sizes), checked against an
independent in-memory NumPy computation of the same windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geomjax import cli, pipeline

SMALL = ["--n-docs", "2", "--windows-per-doc", "4", "-T", "48", "--batch-size", "4",
         "--screenot-k", "5", "--no-progress"]
# The study's optional stages (Table 2 OOD, Theorem 1 on the layers, token clusters) are covered
# by tests/integration/test_study.py; the metric checks here skip them to keep the suite fast.
SMALL = SMALL + ["--ood-corpus", "none", "--no-theorem1", "--cluster-windows", "0"]


@pytest.fixture(scope="module")
def geometry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("geo")
    assert cli.main(["geometry", "--out", str(out), *SMALL]) == 0
    return out


@pytest.fixture(scope="module")
def small_inputs():
    """MiniLM and the study's inputs for SMALL: ``(model, params, inputs)``.

    The study's windows depend on the corpus, sizes and seed only (pipeline.prepare_inputs draws them
    before the OOD windows), so the OOD corpus is not tokenized here."""
    cfg = pipeline.GeometryConfig(n_docs=2, windows_per_doc=4, seq_len=48, batch_size=4, screenot_k=5,
                                  ood_corpus=None)
    model, params, tok, _ = pipeline.load_model_and_tokenizer(cfg.model)
    return model, params, pipeline.prepare_inputs(cfg, tok)


@pytest.fixture(scope="module")
def numpy_reference(small_inputs):
    """Hidden states of the windows of SMALL in memory (float64 NumPy statistics), and their document labels."""
    model, params, inputs = small_inputs
    _, inter = model.apply({"params": params}, inputs.windows.ids)
    return [np.asarray(h, np.float64)[:, 1:] for h in inter.residual], inputs.windows.doc_labels


def _cos(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


@pytest.mark.slow
def test_geometry_run_directory(geometry_run):
    for name in ("config.json", "metrics.json", "report.md", "report.html", "report.json",
                 "figures/fig1_pca.png", "figures/fig2_gram.png", "figures/fig3_dct.png",
                 "figures/fig3_singular_values.png", "figures/metrics_by_layer.png"):
        assert (geometry_run / name).is_file(), name
    cfg = json.loads((geometry_run / "config.json").read_text())["config"]
    assert cfg["drop_first"] is True and cfg["n_docs"] == 2 and cfg["seq_len"] == 48
    md = (geometry_run / "report.md").read_text()
    assert "Per-layer geometry" in md and "figures/fig2_gram.png" in md


@pytest.mark.slow
def test_geometry_metrics_match_in_memory_numpy(geometry_run, numpy_reference):
    metrics = json.loads((geometry_run / "metrics.json").read_text())
    hs, labels = numpy_reference
    assert len(metrics["per_layer"]) == len(hs) == 7
    for m, h in zip(metrics["per_layer"], hs):
        C, T, d = h.shape
        mu = h.mean((0, 1))
        pos = h.mean(0) - mu
        ctx = h.mean(1) - mu
        M = (h - mu).reshape(-1, d)
        rel = np.sqrt(C) * np.linalg.norm(pos, 2) / np.linalg.norm(M, 2)
        s = np.linalg.svd(pos, compute_uv=False)
        inc = np.abs(_cos(pos, ctx))
        same = labels[:, None] == labels[None, :]
        cc = np.abs(_cos(ctx, ctx))
        np.testing.assert_allclose(m["relative_norm"], rel, rtol=1e-4)
        np.testing.assert_allclose(m["stable_rank"], (s**2).sum() / s[0] ** 2, rtol=1e-4)
        np.testing.assert_allclose(m["incoherence_max"], inc.max(), rtol=1e-4)
        np.testing.assert_allclose(m["incoherence_mean"], inc.mean(), rtol=1e-4)
        np.testing.assert_allclose(m["intra_similarity"], cc[same].mean(), rtol=1e-4)
        np.testing.assert_allclose(m["inter_similarity"], cc[~same].mean(), rtol=1e-4)
        tot = (M**2).sum()
        np.testing.assert_allclose(m["share_pos"], C * (pos**2).sum() / tot, rtol=1e-4)
        np.testing.assert_allclose(m["share_pos"] + m["share_ctx"] + m["share_resid"], 1.0,
                                   rtol=1e-6)


@pytest.mark.slow
def test_report_rerenders(geometry_run):
    (geometry_run / "report.md").unlink()
    assert cli.main(["report", str(geometry_run)]) == 0
    assert (geometry_run / "report.md").is_file()


@pytest.mark.slow
def test_raw_relative_norm_includes_mean(tmp_path, numpy_reference):
    out = tmp_path / "raw"
    cli.main(["geometry", "--out", str(out), "--raw-relative-norm", "--no-figures", *SMALL])  # metrics only
    metrics = json.loads((out / "metrics.json").read_text())
    hs, _ = numpy_reference
    for m, h in zip(metrics["per_layer"], hs):
        C = h.shape[0]
        pos = h.mean(0) - h.mean((0, 1))
        rel = np.sqrt(C) * np.linalg.norm(pos, 2) / np.linalg.norm(h.reshape(-1, h.shape[2]), 2)
        np.testing.assert_allclose(m["relative_norm"], rel, rtol=1e-4)


def _one_line_error(capsys, argv, match):
    """cli.main(argv) fails as a user error: exit status 2, one stderr line, no traceback."""
    import re

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("geomjax: error: "), err
    assert "Traceback" not in err[0] and re.search(match, err[0]), err[0]


def test_bad_sizes_are_named(tmp_path, capsys):
    _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "a"), "--n-docs", "2",
                             "--windows-per-doc", "3", "--batch-size", "4", "--no-progress"],
                    "not a multiple of --batch-size 4")
    _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "b"), "--n-docs", "2",
                             "--windows-per-doc", "2", "-T", "600", "--batch-size", "2", "--no-progress",
                             "--corpus", "shakespeare"], "exceeds the 512 positions")
    _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "c"), "--final-ln", *SMALL],
                    "BERT has no final LayerNorm")
    assert not any(tmp_path.iterdir())  # nothing was created for a refused run


# `geomjax train` end to end (first session, resume, nothing left to do): tests/acceptance/test_cli_acceptance.py's
# test_resume_keeps_the_whole_history.


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for c in ("demo", "geometry", "verify", "train", "report"):
        assert c in text


def test_compilation_cache_switch(tmp_path, monkeypatch):
    import jax

    from geomjax.base.parallel import enable_compilation_cache

    old = jax.config.jax_compilation_cache_dir
    old_min = (jax.config.jax_persistent_cache_min_compile_time_secs,
               jax.config.jax_persistent_cache_min_entry_size_bytes)
    try:
        monkeypatch.setenv("GEOMJAX_NO_COMPILE_CACHE", "1")
        assert enable_compilation_cache(str(tmp_path / "c")) is None
        monkeypatch.setenv("GEOMJAX_NO_COMPILE_CACHE", "0")
        monkeypatch.setenv("GEOMJAX_CACHE_DIR", str(tmp_path / "env"))
        assert enable_compilation_cache() == str(tmp_path / "env")
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "env")
        assert (tmp_path / "env").is_dir()
        monkeypatch.delenv("GEOMJAX_CACHE_DIR")
        monkeypatch.setenv("GEOMJAX_CACHE", str(tmp_path / "root"))
        assert enable_compilation_cache() == str(tmp_path / "root" / "jax")
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0  # the demo's small programs too
    finally:
        jax.config.update("jax_compilation_cache_dir", old)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", old_min[0])
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", old_min[1])


def test_partial_multihost_arguments_are_an_error(tmp_path, capsys):
    _one_line_error(capsys, ["geometry", "--num-processes", "2", "--out", str(tmp_path / "x"), *SMALL],
                    "together")


def test_geometry_options_are_built_from_the_config_fields():
    """Every GeometryConfig field that declares a CliOption is an option of ``geometry`` and ``demo``
    (dest = the field name); the defaults give the default config, and each flag sets its field."""
    import dataclasses

    from geomjax.analysis.study_config import GeometryConfig, cli_option

    parser = cli.build_parser()
    assert cli._config_from_args(parser.parse_args(["geometry"])) == GeometryConfig()
    assert cli._config_from_args(parser.parse_args(["demo"])) == GeometryConfig()
    flagged = [f.name for f in dataclasses.fields(GeometryConfig) if cli_option(f) is not None]
    assert set(flagged) == {f.name for f in dataclasses.fields(GeometryConfig)} - {"n_cvec"}
    cfg = cli._config_from_args(parser.parse_args(
        ["geometry", "--keep-first", "--no-theorem1", "--raw-relative-norm", "--cluster-windows", "3",
         "--no-final-ln", "--ood-corpus", "none", "--accum-dtype", "float64", "--devices", "2"]))
    assert (cfg.drop_first, cfg.theorem1, cfg.centered_relative_norm) == (False, False, False)
    assert (cfg.n_cluster_windows, cfg.final_ln, cfg.ood_corpus, cfg.accum_dtype, cfg.devices) == \
        (3, False, None, "float64", 2)
    with pytest.raises(SystemExit):
        parser.parse_args(["geometry", "--accum-dtype", "float16"])  # choices come from the field


def _intra_inter(ctx: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean |cos| between context vectors of the same / of different documents (Table 1)."""
    u = ctx / np.linalg.norm(ctx, axis=1, keepdims=True)
    cc = np.abs(u @ u.T)
    same = labels[:, None] == labels[None, :]
    return float(cc[same].mean()), float(cc[~same].mean())


@pytest.mark.slow
def test_cluster_mu_general_centres_topics_on_the_general_draw(geometry_run, numpy_reference, small_inputs,
                                                               tmp_path):
    """`geometry --cluster-mu topics|general` (issue 16, item 8): the centring of Table 1's topic clusters is an
    option recorded in config.json, and "general" centres the topic windows' ctx on μ of the separate uniform
    draw (as Song & Zhong's topics script centres on μ from its general-corpus run). The module's run is the
    default, "topics"; both against the in-memory NumPy computation of the same windows."""
    out = tmp_path / "general"
    assert cli.main(["geometry", "--out", str(out), "--cluster-mu", "general", "--no-figures", *SMALL]) == 0
    runs = {}
    for mu, run in (("topics", geometry_run), ("general", out)):
        assert json.loads((run / "config.json").read_text())["config"]["cluster_mu"] == mu
        runs[mu] = json.loads((run / "metrics.json").read_text())["per_layer"]
    hs, labels = numpy_reference
    labels = np.asarray(labels)
    model, params, inputs = small_inputs
    _, general = model.apply({"params": params}, np.asarray(inputs.cvec_ids))
    changed = 0
    for layer, (h, g) in enumerate(zip(hs, general.residual)):
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
