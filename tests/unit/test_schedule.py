"""Run configs that cannot lie (issue 37): a run's length and its learning-rate schedule have one source
of truth, cadences divide the run, and the effective schedule is recorded.

The property test walks every task's presets (geomjax.train's and each experiment's) × a ``replace`` of
the length (and of the batch): either the replace raises a one-line ValueError naming the new length
and the number it clashes with, or the schedule the trainer builds ends on the configured final value
at the run's last step, spans the run (closed form of the cosine between the warm-up and the end),
finishes its warm-up inside the run, and every cadence divides the run. Expected values are closed
forms computed here with NumPy, not by geomjax.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.addition import config as addition_presets
from experiments.addition import run as addition_run
from experiments.grokking import config as grokking_presets
from experiments.localization import config as localization_presets
from experiments.token_randomization import config as randomization_presets
from geomjax import train
from geomjax.analysis.report import SCHEDULE_HEADING, RunDir, render_markdown, schedule_section
from geomjax.sources.clock.claims import claim_config
from geomjax.train.grokking import GrokkingConfig
from geomjax.train.locater import LocaterConfig


def _presets() -> dict[str, object]:
    """Every preset of every task that trains: name -> TrainConfig, GrokkingConfig or LocaterConfig."""
    out = {}
    for task, variants in (("shakespeare", ("smoke", "cpu", "paper")), ("addition", ("smoke", "cpu", "paper")),
                           ("modular", ("smoke", "cpu", "blog", "paper"))):
        for v in variants:
            out[f"train.{task}.{v}"] = train.get_config(task, v)
    for p in addition_presets.PRESETS:
        out[f"addition.{p}"] = addition_run.train_config(addition_presets.get_config(p), carry=False)
    for p in randomization_presets.PRESETS:
        out[f"token_randomization.{p}"] = randomization_presets.get_config(p).train
    for p in grokking_presets.GROK_PRESETS:
        out[f"grokking.{p}"] = grokking_presets.get_config(p)
    for b in ("quick", "full"):
        out[f"clock_claims.{b}"] = claim_config(b)
    for p in localization_presets.PRESETS:
        out[f"localization.{p}"] = localization_presets.get_config(p)
    return out


PRESETS = _presets()


def _length(cfg) -> int:
    return cfg.epochs if isinstance(cfg, GrokkingConfig) else cfg.steps if isinstance(cfg, LocaterConfig) \
        else cfg.total_steps


def _optim(cfg) -> train.OptimConfig:
    return cfg.train.optim if isinstance(cfg, GrokkingConfig) else cfg.optim


def _with_length(cfg, n: int):
    if isinstance(cfg, GrokkingConfig):
        return cfg.replace(epochs=n)
    return cfg.replace(steps=n) if isinstance(cfg, LocaterConfig) else cfg.replace(total_steps=n)


def _cadences(cfg) -> dict[str, int]:
    """Every cadence that must divide the run (0: only at the start and end)."""
    if isinstance(cfg, GrokkingConfig):
        t = cfg.train
        return {"log_every": cfg.log_every, "chunk": cfg.chunk, "steps_per_call": t.steps_per_call,
                "eval_every": t.eval_every, "ckpt_every": t.ckpt_every}
    return {"steps_per_call": cfg.steps_per_call, "eval_every": cfg.eval_every, "ckpt_every": cfg.ckpt_every}


def _trainer_schedule(cfg):
    """The optax schedule the trainer of ``cfg`` builds (build_programs, grokking's programs and
    locater.build all call make_optimizer(optim, the run's length))."""
    return train.make_optimizer(_optim(cfg), _length(cfg))[1]


def _expected_lr(o: train.OptimConfig, T: int, s: int) -> float:
    """The learning rate at step s of a run of T steps whose schedule spans the run: linear warm-up from 0
    over W steps, then a cosine from lr to final_lr between W and T (or constant lr)."""
    W = o.warmup_steps
    if s < W:
        return o.lr * s / W
    if o.schedule == "constant":
        return o.lr
    return o.final_lr + (o.lr - o.final_lr) * 0.5 * (1 + math.cos(math.pi * min(s - W, T - W) / (T - W)))


def _check_schedule_fits_run(cfg) -> None:
    o, T = _optim(cfg), _length(cfg)
    W = o.warmup_steps
    assert W < T, f"the warm-up ({W} steps) does not end inside the run ({T} steps)"
    final = o.final_lr if o.schedule == "cosine" else o.lr
    steps = np.asarray([T, W, W + (T - W) // 2, T - 1])
    lr = np.broadcast_to(np.asarray(_trainer_schedule(cfg)(steps)), steps.shape)  # one call: optax is elementwise
    # the value at the run's last step is the configured final value
    np.testing.assert_allclose(lr[0], final, rtol=1e-6, err_msg="lr at the last step != configured final")
    # the schedule spans the run: warm-up end and the middle of the decay as the closed form over [W, T]
    np.testing.assert_allclose(lr[1:], [_expected_lr(o, T, int(s)) for s in steps[1:]], rtol=1e-5, atol=1e-12,
                               err_msg=f"lr at steps {steps[1:]} of {T} is not the schedule over the run")
    for name, c in _cadences(cfg).items():
        assert c == 0 or T % c == 0, f"{name} = {c} does not divide the run ({T} steps)"


def _check_refusal(err: ValueError, n: int) -> None:
    msg = str(err)
    assert "\n" not in msg, f"not one line: {msg!r}"
    assert str(n) in msg and len(re.findall(r"\d+", msg)) >= 2, f"does not name both numbers: {msg!r}"


@st.composite
def _replaced(draw):
    name = draw(st.sampled_from(sorted(PRESETS)))
    cfg = PRESETS[name]
    T = _length(cfg)
    N = _cadences(cfg)["steps_per_call"]
    n = draw(st.one_of(st.integers(1, 3 * T), st.integers(1, max(1, 3 * T // N)).map(lambda k: k * N)))
    batch = None
    if not isinstance(cfg, GrokkingConfig) and not (isinstance(cfg, train.TrainConfig) and cfg.task == "modular"):
        batch = draw(st.none() | st.integers(1, 512))
    return name, cfg, n, batch


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_replaced())
def test_every_preset_keeps_schedule_and_cadences_with_its_length(case):
    name, cfg, n, batch = case
    _check_schedule_fits_run(cfg)  # the preset itself
    try:
        new = _with_length(cfg, n)
    except ValueError as e:
        _check_refusal(e, n)
        return
    assert _length(new) == n, name
    _check_schedule_fits_run(new)
    if batch is not None:
        _check_schedule_fits_run(new.replace(batch_size=batch))


def test_issue_snippet_trains_a_cosine_that_reaches_final_lr_at_16000():
    """The issue's snippet: the addition cpu preset, no-carry, made 16,000 steps long."""
    cfg = addition_presets.get_config("cpu")
    tc = addition_run.train_config(cfg, carry=False).replace(total_steps=16_000)
    o = tc.optim
    f = train.build_programs(tc).schedule  # what fit() trains with
    np.testing.assert_allclose(float(f(16_000)), o.final_lr, rtol=1e-6)
    mid = o.warmup_steps + (16_000 - o.warmup_steps) // 2  # half-way down the cosine: half-way between lr and final
    np.testing.assert_allclose(float(f(mid)), (o.lr + o.final_lr) / 2, rtol=1e-5)
    rec = tc.effective_schedule()
    assert (rec["horizon"], rec["total_steps"], rec["warmup_steps"]) == (16_000, 16_000, 100)
    np.testing.assert_allclose([rec["lr_first_step"], rec["lr_warmup_end"], rec["lr_end"]], [0.0, o.lr, o.final_lr],
                               rtol=1e-6)


def test_a_pinned_horizon_is_kept_only_on_purpose():
    base = train.get_config("addition", "smoke")  # 40 steps, warm-up 5, steps_per_call 10
    pinned = base.replace(optim=dataclasses.replace(base.optim, decay_steps=30))  # cosine ends at 30, then holds
    f = train.build_programs(pinned).schedule
    np.testing.assert_allclose([float(f(30)), float(f(39))], [base.optim.final_lr] * 2, rtol=1e-6)
    with pytest.raises(ValueError, match=r"total_steps 40 -> 80, but the cosine's horizon is pinned at "
                                         r"optim.decay_steps = 30") as e:
        pinned.replace(total_steps=80)
    assert "\n" not in str(e.value)
    restated = pinned.replace(total_steps=80, optim=dataclasses.replace(pinned.optim, decay_steps=None))
    assert restated.effective_schedule()["horizon"] == 80
    with pytest.raises(ValueError, match=r"decay_steps = 50 is pinned beyond the run \(total_steps = 40\)"):
        base.replace(optim=dataclasses.replace(base.optim, decay_steps=50))
    with pytest.raises(ValueError, match=r"warm-up \(10 steps\) must end inside the run \(total_steps = 10\)"):
        base.replace(total_steps=10, optim=dataclasses.replace(base.optim, warmup_steps=10))
    with pytest.raises(ValueError, match="follows the run"):
        train.make_schedule(base.optim)  # a following cosine needs the run's length


def test_cadences_must_divide_the_run():
    cpu = train.get_config("shakespeare", "cpu")  # 1000 steps, eval every 250, checkpoints every 500
    with pytest.raises(ValueError, match=r"eval_every = 250 must divide total_steps = 1100"):
        cpu.replace(total_steps=1100)
    assert cpu.replace(total_steps=1500, ckpt_every=250).effective_schedule()["horizon"] == 1500
    loc = localization_presets.get_config("cpu")  # 1000 steps, checkpoints every 200
    with pytest.raises(ValueError, match=r"ckpt_every = 200 must divide steps = 1100"):
        loc.replace(steps=1100)
    g = grokking_presets.get_config("cpu")  # constant lr, warm-up 10, chunks of 100 epochs
    g2 = g.replace(epochs=1200)
    assert (g2.train.total_steps, g2.train.eval_every, g2.train.ckpt_every) == (1200, 100, 100)
    with pytest.raises(ValueError, match=r"chunk_epochs \(100\).*epochs \(1250\)"):
        g.replace(epochs=1250)
    with pytest.raises(ValueError, match=r"warm-up \(10 steps\) must end inside the run \(total_steps = 10\)"):
        grokking_presets.get_config("smoke").replace(epochs=10, log_every=10, chunk_epochs=10)


def test_effective_schedule_is_read_off_the_schedule_that_runs():
    """The record against NumPy's closed form (shakespeare cpu: warm-up 100, cosine 2e-3 -> 2e-4 over
    1000 steps) and against the schedule fit() builds; the constant schedule of the grokking presets."""
    tc = train.get_config("shakespeare", "cpu")
    rec = tc.effective_schedule()
    o, T = tc.optim, tc.total_steps
    want = {"lr_first_step": 0.0, "lr_warmup_end": o.lr, "lr_last_step": _expected_lr(o, T, T - 1),
            "lr_end": o.final_lr}
    for k, v in want.items():
        np.testing.assert_allclose(rec[k], v, rtol=2e-6, err_msg=k)
    assert rec == train.schedule_record(train.build_programs(tc).schedule, o, T)
    assert (rec["schedule"], rec["warmup_steps"], rec["horizon"], rec["total_steps"], rec["end_lr"]) == (
        "cosine", 100, 1000, 1000, o.final_lr)
    g = grokking_presets.get_config("smoke").effective_schedule()
    assert g["horizon"] is None and g["lr_first_step"] == 0.0
    np.testing.assert_allclose([g["lr_warmup_end"], g["lr_last_step"], g["lr_end"]], [3e-3] * 3, rtol=1e-6)
    json.dumps(rec, allow_nan=False)  # plain JSON


def test_schedule_in_config_json_and_report(tmp_path):
    recs = {"carry": train.get_config("addition", "smoke").effective_schedule()}
    run = RunDir(tmp_path / "run", "test")
    run.write_config({"x": 1}, schedules=recs)
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written["effective_schedule"] == recs and written["config"] == {"x": 1}
    md = render_markdown("t", [schedule_section(recs)])
    assert f"## {SCHEDULE_HEADING}" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| carry |"))
    assert row.split(" | ")[1:5] == ["cosine", "5", "40", "40"]


def test_toy_run_config_json_with_the_schedule_round_trips(tmp_path):
    """fit()'s config.json holds the config's fields plus effective_schedule; the loader reads the config."""
    from geomjax.train.checkpoint import config_jsonable
    from geomjax.train.toy_run import _config_from_json

    cfg = train.get_config("shakespeare", "smoke")
    d = config_jsonable(cfg) | {"effective_schedule": cfg.effective_schedule()}
    assert _config_from_json(json.loads(json.dumps(d)), "config.json") == cfg


def test_resuming_a_run_written_before_issue_37_is_the_same_run():
    """Checkpoints written before stored the preset's horizon as a number (decay_steps = total_steps)."""
    from geomjax.train.checkpoint import config_jsonable
    from geomjax.train.tasks import _resolved

    cfg = train.get_config("shakespeare", "smoke")
    now = config_jsonable(cfg)
    before = json.loads(json.dumps(now))
    before["optim"]["decay_steps"] = cfg.total_steps
    assert now != before and _resolved(now) == _resolved(before)
    before["optim"]["decay_steps"] = cfg.total_steps // 2  # a different horizon is a different run
    assert _resolved(now) != _resolved(before)
