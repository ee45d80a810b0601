"""geomjax.models.toy_run: restore a trained toy run (params, tokenizer, config) and run the
geometry decomposition on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax import train
from geomjax.data import CharTokenizer, addition_tokenizer, tiny_shakespeare
from geomjax.theory.decomposition import decompose
from geomjax.tools.extraction import decompose_model_stream
from geomjax.models import ToyRun, toy_forward
from geomjax.train import load_toy_run

# The tests that use the trained run (the session's smoke training, tests/conftest.py) are slow; the
# addition test (an untrained checkpoint) keeps this module in the quick subset.

LINE = "First Citizen:\nBefore we proceed any further, hear me speak."


@pytest.fixture(scope="module")
def smoke_cfg(shakespeare_smoke):
    return shakespeare_smoke


@pytest.fixture(scope="module")
def trained(shakespeare_smoke_run):
    """(run directory, FitResult) of the session's smoke run (tests/conftest.py); read only."""
    return shakespeare_smoke_run.run_dir, shakespeare_smoke_run


@pytest.fixture(scope="module")
def run(trained):
    return load_toy_run(trained[0])


@pytest.fixture(scope="module")
def val_text():
    text = tiny_shakespeare()[0][1]
    return text[int(len(text) * 0.9):]


def windows(tok, text, n, T, start=0):
    ids = tok.encode(text[start: start + n * T])
    return ids.reshape(n, T)


@pytest.mark.slow
def test_params_equal_checkpoint(trained, run, smoke_cfg):
    run_dir, res = trained
    assert isinstance(run, ToyRun)
    assert run.step == smoke_cfg.total_steps == 60
    assert run.config == smoke_cfg
    assert run.max_positions == smoke_cfg.model.max_len == 32
    assert run.checkpoint == run_dir / "checkpoints" / "ckpt_00000060.npz"
    # every parameter equals the raw .npz entry bit-for-bit, and the state fit() ended with
    with np.load(run.checkpoint) as z:
        raw = {k: z[k] for k in z.files if k.startswith("params/")}
    flat = jax.tree_util.tree_flatten_with_path(run.params)[0]
    assert len(flat) == len(raw) > 0
    for path, leaf in flat:
        name = "params/" + "/".join(p.key for p in path)
        a = np.asarray(leaf)
        assert a.dtype == raw[name].dtype and np.array_equal(a, raw[name]), name
    for a, b in zip(jax.tree.leaves(run.params), jax.tree.leaves(res.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # an earlier step, and the checkpoints folder given directly
    early = load_toy_run(run_dir / "checkpoints", step=30)
    assert early.step == 30 and early.checkpoint.name == "ckpt_00000030.npz"
    k = "block_0/attn/q/kernel".split("/")
    w30 = np.asarray(early.params[k[0]][k[1]][k[2]][k[3]])
    w60 = np.asarray(run.params[k[0]][k[1]][k[2]][k[3]])
    assert not np.array_equal(w30, w60)


@pytest.mark.slow
def test_tokenizer_is_the_training_tokenizer(run, smoke_cfg, val_text):
    tok = run.tokenizer
    text = tiny_shakespeare()[0][1]
    assert tok.chars == "".join(sorted(set(text))) and tok.vocab_size == 65
    ids = tok.encode(LINE)
    assert ids.dtype == np.int32 and tok.decode(ids) == LINE
    # the ids the task's data pipeline trained on
    train_data, _, info = train.load_task_data(smoke_cfg)
    stream = np.asarray(train_data["stream"])
    n = int(len(text) * 0.9)
    np.testing.assert_array_equal(tok.encode(text[:n]), stream)
    assert tok == info["tokenizer"]
    # the trained model predicts text encoded with this tokenizer much better than with a permuted one
    def nll(t):
        ids = jnp.asarray(windows(t, val_text, 16, 32))
        logits, _ = run.model.apply({"params": run.params}, ids)
        lp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
        return -float(jnp.mean(jnp.take_along_axis(lp, ids[:, 1:, None], axis=-1)))

    good = nll(tok)
    permuted = nll(CharTokenizer(tok.chars[::-1]))
    assert good < 3.45 < np.log(65) < permuted, (good, permuted)


@pytest.mark.slow
def test_forward_equals_model_intermediates(run, val_text):
    ids = jnp.asarray(windows(run.tokenizer, val_text, 3, run.max_positions))
    _, inter = run.model.apply({"params": run.params}, ids)
    L = run.config.model.n_layers
    for which in ("residual", "hidden_states"):
        fwd = toy_forward(run, which)
        assert fwd is toy_forward(run, which)  # one function per (config, which): compilation reused
        states = fwd(run.params, ids)
        want = getattr(inter, which)
        assert isinstance(states, tuple) and len(states) == L + 1
        for s, w in zip(states, want):
            assert s.shape == (3, run.max_positions, run.config.model.d_model)
            np.testing.assert_array_equal(np.asarray(s), np.asarray(w))
        jitted = jax.jit(fwd)(run.params, ids)
        for s, w in zip(jitted, want):
            np.testing.assert_allclose(np.asarray(s), np.asarray(w), rtol=1e-5, atol=1e-5)
    res, hid = toy_forward(run)(run.params, ids), toy_forward(run, "hidden_states")(run.params, ids)
    np.testing.assert_array_equal(np.asarray(res[0]), np.asarray(hid[0]))
    assert not np.allclose(np.asarray(res[-1]), np.asarray(hid[-1]))  # ln_f only on hidden_states
    with pytest.raises(ValueError, match="which must be one of"):
        toy_forward(run, "logits")
    with pytest.raises(ValueError, match="max_len"):
        toy_forward(run)(run.params, jnp.zeros((1, run.max_positions + 1), jnp.int32))


@pytest.mark.slow
def test_decompose_model_stream_on_trained_run(run, val_text):
    T = run.max_positions
    batches = [windows(run.tokenizer, val_text, 4, T, start=i * 4 * T) for i in range(3)]
    stats = decompose_model_stream(toy_forward(run), run.params, batches, drop_first=True)
    assert len(stats) == run.config.model.n_layers + 1
    fwd = toy_forward(run)
    per_batch = [fwd(run.params, jnp.asarray(b)) for b in batches]
    for layer, st in enumerate(stats):
        assert st.n_contexts == 12 and st.n_positions == T - 1
        h = jnp.concatenate([s[layer] for s in per_batch], axis=0)  # (12, T, d)
        ref = decompose(h, drop_first=True)
        np.testing.assert_allclose(np.asarray(st.mean), np.asarray(ref.mean), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(st.pos), np.asarray(ref.pos), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(st.ctx), np.asarray(ref.ctx), rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_addition_run_loads_with_its_fixed_tokenizer(tmp_path):
    cfg = train.get_config("addition", "smoke")
    state = train.init_state(cfg)
    train.save_checkpoint(tmp_path / "checkpoints", state, cfg)
    r = load_toy_run(tmp_path)
    assert r.config == cfg and r.step == 0 and r.max_positions == cfg.model.max_len
    assert r.tokenizer == addition_tokenizer()
    for a, b in zip(jax.tree.leaves(r.params), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_errors(trained, tmp_path):
    run_dir, _ = trained
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_toy_run(tmp_path / "missing")
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no checkpoints.*geomjax train"):
        load_toy_run(empty)
    with pytest.raises(ValueError, match=r"no checkpoint at step 45; available steps: \[30, 60\]"):
        load_toy_run(run_dir, step=45)
    cfg = train.get_config("modular", "smoke")
    mod = tmp_path / "modular"
    train.save_checkpoint(mod / "checkpoints", train.init_state(cfg), cfg)
    with pytest.raises(ValueError, match="'modular' task.*no text tokenizer"):
        load_toy_run(mod)
    # a checkpoint whose stored config does not describe its arrays
    bad = tmp_path / "mismatch"
    wide = train.get_config("shakespeare", "smoke")
    state = train.init_state(wide)
    train.save_checkpoint(bad / "checkpoints", state,
                          wide.replace(model=wide.model.replace(d_model=64, d_mlp=256)))
    with pytest.raises(ValueError, match="shape"):
        load_toy_run(bad)


@pytest.mark.slow
def test_geometry_study_on_a_trained_toy_run(trained, tmp_path):
    """`geomjax geometry --model toy:RUN` (the paper's NanoGPT row): one document, so no cluster
    metrics; the pos/ctx statistics equal the in-memory decomposition of the same windows."""
    import json

    from geomjax import cli, data

    out = tmp_path / "geo"
    cli.main(["geometry", "--model", f"toy:{trained[0]}", "--corpus", "shakespeare",
              "--n-docs", "1", "--windows-per-doc", "8", "-T", "24", "--batch-size", "4",
              "--screenot-k", "3", "--ood-corpus", "none", "--out", str(out), "--no-progress"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["per_layer"]) == 3 and "ToyTransformer" in metrics["model"]
    assert metrics["per_layer"][0].get("intra_similarity") is None  # one document
    # Same windows through the in-memory decomposition: relative norm agrees.
    r = load_toy_run(trained[0])
    corpus = data.tokenize_documents(data.load_corpus("shakespeare"), r.tokenizer.encode)
    k_topics, _ = jax.random.split(jax.random.key(0))
    w = data.sample_topics(corpus, 1, 8, 24, k_topics)
    hs = jax.jit(toy_forward(r))(r.params, jnp.asarray(w.ids))
    for m, h in zip(metrics["per_layer"], hs):
        with jax.enable_x64(True):
            dec = decompose(np.asarray(h, np.float64), drop_first=True)
        M = (np.asarray(h, np.float64)[:, 1:] - np.asarray(dec.mean)).reshape(-1, h.shape[-1])
        rel = np.sqrt(8) * np.linalg.norm(np.asarray(dec.pos), 2) / np.linalg.norm(M, 2)
        np.testing.assert_allclose(m["relative_norm"], rel, rtol=1e-4)
