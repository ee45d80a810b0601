"""The expected training cost (geomjax.train.cost) against independent counts, and the issue-29 experiment
plumbing that needs no training: the addition budgets' own cosine horizon, the ReLU-free split settings, the
curves figure and the machine-load sentence."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.models.toy import ToyConfig, ToyTransformer, nanda_config
from geomjax.train import addition_config, modular_config
from geomjax.train.cost import CPU_FLOPS, count_params, toy_training_cost, training_cost


def test_count_params_matches_an_initialised_model():
    cfg = ToyConfig(vocab_size=13, n_layers=2, n_heads=2, d_model=16, d_mlp=32, max_len=9)
    params = ToyTransformer(cfg).lazy_init(jax.random.key(1), jax.ShapeDtypeStruct((1, 9), jnp.int32))["params"]
    leaves = jax.tree_util.tree_leaves_with_path(params)
    total = sum(int(np.prod(v.shape)) for _, v in leaves)
    emb = sum(int(np.prod(v.shape)) for p, v in leaves if jax.tree_util.keystr(p).endswith("['embedding']"))
    assert emb == 13 * 16 + 9 * 16  # token and learned position embeddings (lookups, not matrix products)
    assert count_params(cfg) == (total, total - emb)
    tied = dataclasses.replace(cfg, tie_embeddings=True)
    n, nm = count_params(tied)
    assert n == total - 16 * 13 and nm == n - 9 * 16  # the tied table is both the lookup and the de-embedding


def test_training_cost_formulas_by_hand():
    c = training_cost(1000, 600, batch=4, seq_len=8, steps=10, n_layers=2, d_model=16, n_heads=2, vocab=50, runs=3)
    tokens = 4 * 8
    assert c.flops == 3 * 10 * tokens * (6 * 600 + 6 * 2 * 8 * 16)  # Kaplan et al. Table 1
    assert c.param_bytes == 3 * 16 * 1000  # params, grads, two Adam moments, float32
    assert c.activation_bytes == 3 * (2 * 2 * (34 * tokens * 16 + 5 * 2 * 8 * tokens) + 8 * tokens * 50)
    assert c.memory_bytes == c.param_bytes + c.activation_bytes
    assert c.seconds(1e9, 0.0) == pytest.approx(c.flops / 1e9)
    assert c.seconds(1e9, 0.5) == pytest.approx(c.flops / 1e9 + 10 * 0.5)
    assert "FLOPs" in c.describe() and "GiB" in c.describe()


def test_toy_training_cost_of_the_presets():
    m = modular_config("cpu")  # full batch: half of the 113² pairs, 3 tokens each
    c = toy_training_cost(m)
    n, nm = count_params(m.model)
    batch = int(0.5 * 113**2)
    assert c.n_params == n and c.steps == m.total_steps
    assert c.flops == m.total_steps * batch * 3 * (6.0 * nm + 6.0 * 3 * 128)
    assert m.model == nanda_config(113)
    # the addition cpu calibration: 8,000 steps of batch 64 x 33 tokens took about 400 s on the quiet machine
    a = addition_config("cpu")
    a10 = dataclasses.replace(a, model=dataclasses.replace(a.model, max_len=33), seq_len=33, total_steps=8000)
    assert 200 < toy_training_cost(a10).seconds(CPU_FLOPS, 0.0) < 800


def test_addition_budget_has_its_own_horizon():
    from experiments.addition.config import AdditionExperimentConfig, budget_config, get_config

    cpu = get_config("cpu")
    assert cpu.budgets and cpu.train.optim.horizon(cpu.train.total_steps) == cpu.train.total_steps
    b = budget_config(cpu.train, 3000)
    assert b.total_steps == 3000 and b.optim.horizon(b.total_steps) == 3000 and b.optim.lr == cpu.train.optim.lr
    assert b.effective_schedule()["lr_end"] == pytest.approx(b.optim.end_lr, rel=1e-6)
    assert b.model == cpu.train.model and b.options == cpu.train.options
    with pytest.raises(ValueError, match="budgets"):
        AdditionExperimentConfig("x", cpu.train, budgets=(cpu.train.total_steps,))
    with pytest.raises(ValueError, match="budgets"):
        AdditionExperimentConfig("x", cpu.train, budgets=(150,))


def test_relu_free_settings():
    from experiments.grokking.config import RELU_FREE_SETTINGS, relu_free_configs

    cfgs = relu_free_configs("cpu")
    assert [(c.train.options.train_frac, c.epochs) for c in cfgs] == list(RELU_FREE_SETTINGS["cpu"])
    assert all(c.train.model.activation == "none" and c.train.optim.lr == 2e-3 for c in cfgs)
    assert relu_free_configs("blog")[0].train.optim.lr == 1e-3


def test_curves_figure_and_machine_load(tmp_path):
    from geomjax.analysis import plots
    from geomjax.analysis.report import machine_load

    fig = plots.curves({"a": {"x": ([0, 1, 2], [0.1, 0.5, 0.9])}, "b": {"x": ([0, 1], [1.0, 0.1])}}, "step",
                       logy=("b",), styles={"x": "--"})
    assert len(fig.axes) == 2 and fig.axes[1].get_yscale() == "log"
    assert plots.save(fig, tmp_path / "c.png").stat().st_size > 1000
    assert "CPUs" in machine_load()


def test_relu_free_log_seconds_sums_every_session(tmp_path):
    from experiments.grokking.relu_free import log_seconds

    log = tmp_path / "run.log"
    assert log_seconds(log) == 0.0
    log.write_text("epoch 100 train_acc 1.0 wall 10.0s\nepoch 200 train_acc 1.0 wall 25.5s\n"  # a killed session
                   "epoch 300 train_acc 1.0 wall 4.0s\nepoch 400 train_acc 1.0 wall 9.0s\n")  # the resumed one
    assert log_seconds(log) == pytest.approx(25.5 + 9.0)


@pytest.mark.slow  # compiles a training chunk (tens of seconds on the loaded 2-core machine)
def test_token_randomization_level_resumes_from_its_checkpoint(tmp_path):
    from experiments.token_randomization.config import get_config
    from experiments.token_randomization.run import train_config, train_level
    from geomjax.train import load_task_data

    tc = train_config(get_config("smoke")).replace(ckpt_every=10)
    data = load_task_data(tc)[0]
    p1, h1 = train_level(tc, 1, data, progress=False, run_dir=tmp_path)
    assert (tmp_path / "level1" / "checkpoints").is_dir() and h1["steps"].tolist() == list(range(tc.total_steps))
    p2, h2 = train_level(tc, 1, data, progress=False, run_dir=tmp_path)  # resumed at the end: nothing to train
    np.testing.assert_array_equal(h2["train"]["loss"], h1["train"]["loss"])
    for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow  # two smoke grokking runs (p = 23, 200 epochs): compilation dominates
def test_relu_free_smoke_report(tmp_path):
    from experiments.grokking.relu_free import main

    assert main(["--preset", "smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "relu_free_f30_e200" in md and "relu_free_f50_e200" in md and "By split" in md
    assert (tmp_path / "figures" / "relu_free_splits.png").stat().st_size > 1000
    # a re-run reuses both runs (nothing left to train) and reports the same table
    assert main(["--preset", "smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    table = lambda t: [line for line in t.splitlines() if line.startswith("| relu_free")]  # noqa: E731
    assert table((tmp_path / "report.md").read_text())[0].split("|")[:-2] == table(md)[0].split("|")[:-2]


def test_token_randomization_budget_has_its_own_horizon():
    from experiments.token_randomization.config import RandomizationConfig, budget_config, get_config

    cpu = get_config("cpu")
    assert cpu.budgets and cpu.train.optim.horizon(cpu.train.total_steps) == cpu.train.total_steps
    b = budget_config(cpu, cpu.budgets[0])
    assert b.train.total_steps == b.train.optim.horizon(b.train.total_steps) == cpu.budgets[0] and b.budgets == ()
    assert b.train.model == cpu.train.model and b.train.eval_batches == cpu.train.eval_batches
    with pytest.raises(ValueError, match="budgets"):
        RandomizationConfig("x", cpu.train, budgets=(cpu.train.total_steps,))
