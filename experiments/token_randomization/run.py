"""Token randomization (Song & Zhong §5.1, App. E, Figs. 6a-c and 42-50) on the GPT-style toy transformer.

Trains one model per noise level (0 clean, 1 second half random, 2 fully random; the noise is applied to
the whole (T+1)-token window, inputs and targets alike, with :func:`geomjax.data.synthetic.randomize_tokens`),
evaluates every model at every level (3 × 3: loss over all positions and over each half), and for every
(train, eval) pair decomposes every layer's residual stream over the validation windows (eq. 2) and shows
the positional basis on its top-2 principal directions, coloured by position (darker = later), with two
numbers per half of the sequence that locate where the structure breaks: the share of the centred
variance that position explains, and the roughness ‖pos_{t+1} − pos_t‖ / rms‖pos‖.

    .venv/bin/python -m experiments.token_randomization.run --preset cpu --out runs/issue5/token_randomization
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.token_randomization.config import PRESETS, RandomizationConfig, budget_config, get_config
from experiments.token_randomization.source import SOURCE
from geomjax.analysis import plots
from geomjax.analysis.comparison import Row, source_section, verdict
from geomjax.data.synthetic import randomize_tokens
from geomjax.models import model_interface
from geomjax.models.toy import ToyTransformer
from geomjax.analysis.report import RunDir, Section, machine_load, schedule_section
from geomjax.train import build_programs, init_state, load_task_data, merged_history
from geomjax.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from geomjax.train.cost import toy_training_cost
from geomjax.train.loop import make_train_chunk, make_train_step, train_loop
from geomjax.train.losses import token_cross_entropy
from geomjax.train.anomalies import describe, detect_loss_spikes

LEVEL_NAMES = {0: "clean", 1: "second half random", 2: "fully random"}
SHORT = {0: "clean", 1: "2nd half random", 2: "all random"}


def train_config(cfg: RandomizationConfig, vocab_size: int = 65):
    """The geomjax TrainConfig (task ``shakespeare``) of the preset, its model's vocabulary set to ``vocab_size``."""
    t = cfg.train
    return t if t.model.vocab_size == vocab_size else t.replace(model=t.model.replace(vocab_size=vocab_size))


def train_level(tc, level: int, train_data, *, progress: bool = True, run_dir: Path | None = None):
    """Train the toy at noise ``level``: the task's batches pass through ``randomize_tokens``. With ``run_dir``,
    checkpoints go to ``run_dir/level<level>/checkpoints`` (every ``tc.ckpt_every`` steps and at the end) and a
    re-run resumes from the latest one, as :func:`geomjax.train.fit` does. Returns (params, merged history:
    ``steps``, ``train`` of every session)."""
    pr = build_programs(tc)
    V = tc.model.vocab_size

    def batch_fn(data, key):
        k_win, k_noise = jax.random.split(key)
        b = pr.batch_fn(data, k_win)
        return {"ids": randomize_tokens(k_noise, b["ids"], V, level)}

    step = make_train_step(pr.loss_fn, pr.tx, batch_fn, schedule=pr.schedule)
    chunk = make_train_chunk(step, tc.steps_per_call)
    state = jax.tree_util.tree_map(lambda x: x, init_state(tc, pr))
    d = None if run_dir is None else Path(run_dir) / f"level{level}"
    last = None if d is None else latest_checkpoint(d / "checkpoints")
    if last is not None:
        state, _ = load_checkpoint(last, state)
    start = int(jax.device_get(state.step))
    save = None if d is None else (lambda st, _h: save_checkpoint(d / "checkpoints", st, tc, keep=2))
    state, hist = train_loop(state, chunk, train_data, total_steps=tc.total_steps, steps_per_call=tc.steps_per_call,
                             checkpoint=save, ckpt_every=tc.ckpt_every, progress=progress, desc=f"level {level}")
    if d is None:
        return state.params, {"steps": hist.steps, "train": hist.train}
    (d / ("history.json" if last is None else f"history_from_{start:08d}.json")).write_text(json.dumps(hist.to_json()))
    return state.params, merged_history(d)


def per_position_loss(model, params, ids: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy at each input position t over (B, T+1) windows: (T,)."""
    logits, _ = model.apply({"params": params}, ids[:, :-1])
    return jnp.mean(token_cross_entropy(logits, ids[:, 1:]), axis=0)


def positional_profile(h: np.ndarray) -> dict[str, np.ndarray]:
    """Per-position statistics of one layer's states h (C, T, d) around its positional basis (eq. 2).

    Returns dict with ``pos`` (T, d), ``pos_sq`` (T,) = ‖pos_t‖², ``var`` (T,) = mean_c ‖h_{c,t} − μ‖²,
    ``step`` (T−1,) = ‖pos_{t+1} − pos_t‖.
    """
    h = np.asarray(h, np.float64)
    mu = h.mean(axis=(0, 1))
    pos = h.mean(axis=0) - mu
    return {"pos": pos, "pos_sq": (pos**2).sum(-1), "var": ((h - mu) ** 2).sum(-1).mean(0),
            "step": np.linalg.norm(np.diff(pos, axis=0), axis=-1)}


NULL_DRAWS = 8  # draws of random positions for the roughness rule's null (its spread is the rule's band)


def random_position_params(params: dict, key) -> dict:
    """``params`` with the learned position table replaced by i.i.d. Gaussian rows scaled to the table's Frobenius
    norm: the same model reading positions that carry no structure (the roughness rule's null)."""
    table = params["pos_embed"]["embedding"]
    g = jax.random.normal(key, table.shape, table.dtype)
    return {**params, "pos_embed": {"embedding": g * (jnp.linalg.norm(table) / jnp.linalg.norm(g))}}


def null_half_metrics(states, params, ids: np.ndarray, batch: int, T: int, key, draws: int = NULL_DRAWS) -> list:
    """:func:`half_metrics` of every layer (first token dropped, split as the runs' are) of the model ``params``
    with random positions (:func:`random_position_params`), on ``ids``, for each of ``draws`` draws: draw → layer →
    metrics. What the roughness rule reads when the positional structure is destroyed at the input."""
    out = []
    for k in range(draws):
        p = random_position_params(params, jax.random.fold_in(key, k))
        chunks = [jax.device_get(states(p, jnp.asarray(ids[i : i + batch, :T]))) for i in range(0, len(ids), batch)]
        hs = [np.concatenate(per_layer) for per_layer in zip(*chunks)]
        out.append([half_metrics(positional_profile(h[:, 1:]), noise_start(T) - 1) for h in hs])
    return out


def noise_start(T: int) -> int:
    """First position of a (T+1)-token window that level-1 noise replaces (``randomize_tokens`` replaces
    window positions >= (T+1)//2), i.e. the first model input t that is random."""
    return (T + 1) // 2


def split_positions(T: int) -> dict[str, np.ndarray]:
    """The T input positions of a level-1 window, split where the noise starts (every position in exactly one part).

    With m = :func:`noise_start` (T): ``first`` = t < m − 1 (clean input, clean target), ``boundary`` =
    t = m − 1 (clean input, first random target), ``second`` = t >= m (random input).
    """
    m = noise_start(T)
    return {"first": np.arange(0, m - 1), "boundary": np.arange(m - 1, m), "second": np.arange(m, T)}


def half_metrics(prof: dict[str, np.ndarray], start: int | None = None) -> dict[str, float]:
    """Share of variance explained by position and roughness of pos in the first and second half.

    Args:
      prof: :func:`positional_profile` of T positions.
      start: first position of the second half (default T // 2). Roughness uses the steps inside each
        half (the step across the boundary belongs to neither).
    """
    T = prof["pos_sq"].shape[0]
    m = T // 2 if start is None else start
    if not 1 < m < T - 1:
        raise ValueError(f"half_metrics: the split {m} must leave at least 2 positions in each half of {T}")
    rms = float(np.sqrt(prof["pos_sq"].mean()))
    out = {}
    for name, sl, st in (("first", slice(0, m), slice(0, m - 1)), ("second", slice(m, T), slice(m, T - 1))):
        out[f"pos_share_{name}"] = float(prof["pos_sq"][sl].sum() / prof["var"][sl].sum())
        out[f"roughness_{name}"] = float(prof["step"][st].mean() / rms) if rms > 0 else float("nan")
    return out


def change_point(prof: dict[str, np.ndarray], boundary: int) -> dict[str, float]:
    """Change point of the positional basis at a boundary position (Song & Zhong §5.1: the structure breaks "at
    exact positions where randomization takes place").

    Under level-1 noise the boundary position (input t = m − 1, :func:`split_positions`) has a clean input but the
    first random target, so a model that knows by position where prediction becomes hopeless may switch regime
    on entering it (the state encodes what to predict) or on leaving it (the state encodes the inputs): the break
    is one of the two steps next to it.

    Args:
      prof: :func:`positional_profile` of T positions (``step`` (T−1,) = ‖pos_{i+1} − pos_i‖).
      boundary: index of the boundary position in ``prof`` (1 <= boundary <= T−2).

    Returns:
      ``jump_ratio`` = max(‖pos_b − pos_{b−1}‖, ‖pos_{b+1} − pos_b‖) / max of the other T−3 steps: > 1 iff the
      largest step of the basis is next to the boundary (with no change point there, by chance 2 in T − 1);
      ``largest_step`` = index i of the largest step (from position i to i + 1 of ``prof``).
    """
    step = np.asarray(prof["step"], np.float64)
    if not 1 <= boundary <= step.shape[0] - 1:
        raise ValueError(f"change_point: the boundary {boundary} must have a position on each side among the "
                         f"{step.shape[0] + 1} positions")
    rest = np.delete(step, [boundary - 1, boundary])
    top, near = float(rest.max()), float(max(step[boundary - 1], step[boundary]))
    return {"jump_ratio": near / top if top > 0 else float("inf"), "largest_step": int(np.argmax(step))}


def run(cfg: RandomizationConfig, out, *, data_dir=None, progress: bool = True) -> dict:
    """Train, evaluate 3 × 3, decompose, write the report into ``out``; returns the metrics. Each of
    ``cfg.budgets`` is first run the same way into ``out/budget_<steps>``; its verdicts join the report."""
    t0 = time.perf_counter()
    other = {b: run(budget_config(cfg, b), Path(out) / f"budget_{b}", data_dir=data_dir, progress=progress)
             for b in cfg.budgets}
    rd = RunDir(out, "token_randomization")
    tc = train_config(cfg)
    schedules = {"every level (" + ", ".join(map(str, cfg.levels)) + ")": tc.effective_schedule()}
    rd.write_config({"experiment": dataclasses.asdict(cfg), "train_config": dataclasses.asdict(tc)}, schedules=schedules)
    train_data, eval_data, info = load_task_data(tc, data_dir)
    model = ToyTransformer(tc.model)
    V = tc.model.vocab_size
    val = np.asarray(eval_data["ids"]).reshape(-1, tc.seq_len + 1)
    ekey = jax.random.fold_in(jax.random.key(cfg.train.seed), 77)
    val_noisy = {j: np.asarray(randomize_tokens(jax.random.fold_in(ekey, j), val, V, j)) for j in cfg.levels}
    ploss = jax.jit(lambda p, i: per_position_loss(model, p, i))
    iface = model_interface(model)  # the residual stream through the one model interface (every family)
    states = jax.jit(lambda p, i: iface.hidden_states(p, i, final_norm=False))
    T = tc.seq_len
    metrics = {"preset": cfg.preset, "n_windows": int(len(val)), "train_seconds": {}, "loss": {}, "half_metrics": {},
               "change_point": {}, "final_train_loss": {}, "anomalies": []}
    anomaly_text = []
    table, half_rows, figs = [], [], Section("Positional basis on its top-2 principal directions (Figs. 6a-c, 42-50)")
    all_profs: dict = {}
    for i in cfg.levels:
        t1 = time.perf_counter()
        params, hist = train_level(tc, i, train_data, progress=progress, run_dir=Path(out) / "train")
        metrics["train_seconds"][i] = float(hist.get("seconds", time.perf_counter() - t1))  # every session
        metrics["final_train_loss"][i] = float(np.mean(hist["train"]["loss"][-cfg.train.steps_per_call:]))
        found = detect_loss_spikes(hist["steps"], hist["train"]["loss"], series=f"{LEVEL_NAMES[i]} model's train loss")
        metrics["anomalies"] += [a.to_json() for a in found]
        anomaly_text.append(describe(found, f"training the {LEVEL_NAMES[i]} model"))
        row = [f"{LEVEL_NAMES[i]} (train)"]
        for j in cfg.levels:
            ids = val_noisy[j]
            pl = np.mean([np.asarray(ploss(params, jnp.asarray(ids[k : k + tc.batch_size])))
                          for k in range(0, len(ids), tc.batch_size)], axis=0)
            sp = split_positions(T)
            loss = {"all": float(pl.mean()), "first_half": float(pl[sp["first"]].mean()),
                    "boundary": float(pl[sp["boundary"]].mean()), "second_half": float(pl[sp["second"]].mean())}
            metrics["loss"][f"{i}->{j}"] = loss
            row.append(f"{loss['all']:.3f} ({loss['first_half']:.3f} / {loss['boundary']:.3f} / {loss['second_half']:.3f})")
            chunks = [jax.device_get(states(params, jnp.asarray(ids[k : k + tc.batch_size, :T])))
                      for k in range(0, len(ids), tc.batch_size)]
            hs = [np.concatenate(per_layer) for per_layer in zip(*chunks)]  # L+1 arrays (C, T, d)
            profs = [positional_profile(h[:, 1:]) for h in hs]  # first token dropped (source convention)
            hm = [half_metrics(p, noise_start(T) - 1) for p in profs]  # profile index i = input position i + 1
            all_profs[(i, j)] = profs
            metrics["half_metrics"][f"{i}->{j}"] = hm
            if (i, j) == (2, 2):  # the roughness rule's null: the fully random model with random positions
                metrics["null_half_metrics"] = null_half_metrics(states, params, ids, tc.batch_size, T,
                                                                 jax.random.fold_in(ekey, 1000))
            cp = [change_point(p, noise_start(T) - 2) for p in profs]  # boundary input t = m − 1 is profile index m − 2
            metrics["change_point"][f"{i}->{j}"] = cp
            for l, (m, c) in enumerate(zip(hm, cp)):
                half_rows.append([LEVEL_NAMES[i], LEVEL_NAMES[j], l, round(m["pos_share_first"], 3),
                                  round(m["pos_share_second"], 3), round(m["roughness_first"], 3),
                                  round(m["roughness_second"], 3), round(c["jump_ratio"], 2),
                                  f"{c['largest_step'] + 1} → {c['largest_step'] + 2}"])  # profile i = input i + 1
        table.append(row)
    for layer in sorted({1, cfg.train.model.n_layers}):
        p, rel = rd.figure_path(f"pos_pca_grid_layer{layer}.png")
        _grid_figure(all_profs, cfg.levels, layer, noise_start(T) - 1, p)
        figs.figure(rel, f"Layer {layer}: positional basis of every (training, inference) pair on its top-2 principal "
                         f"directions (Fig. 6a–c as one grid); colour = position t, red ring = t = T/2 (first random "
                         "input under level-1 noise), orange ring = t = T/2 − 1 (clean input, first random target)")
    why = []  # the fully random row's curves, where both the clean and the fully random model ran
    if 0 in cfg.levels and 2 in cfg.levels:
        sec, metrics["random_model"] = random_model_section(all_profs, cfg.train.model.n_layers, rd,
                                                            metrics.get("null_half_metrics"))
        why.append(sec)
    metrics["seconds"] = time.perf_counter() - t0
    metrics["load"] = machine_load()
    s1 = Section("3 × 3 evaluation", [
        f"Tiny Shakespeare characters (vocabulary {V}); model {cfg.train.model.n_layers} layers, {cfg.train.model.n_heads} heads, d "
        f"{cfg.train.model.d_model}, T {T}; {cfg.train.total_steps} steps of batch {cfg.train.batch_size} per model; "
        f"{len(val)} validation windows. Cell: mean next-token loss over all positions (first half: inputs "
        f"t < {noise_start(T) - 1}, clean input and target under level-1 noise / boundary: t = {noise_start(T) - 1}, clean "
        f"input, random target / second half: t >= {noise_start(T)}, random input). "
        f"Uniform random tokens cost log {V} = {np.log(V):.3f} nats. Training {sum(metrics['train_seconds'].values()):.0f} s (the three models, every "
        f"session of a resumed run); wall time of this invocation {metrics['seconds']:.0f} s; at the end, "
        f"{metrics['load']}."])
    s1.paragraphs += anomaly_text
    s1.table(["model \\ inference"] + [LEVEL_NAMES[j] for j in cfg.levels], table, caption="validation loss (nats)")
    s2 = Section("Where the positional structure breaks", [
        "Per layer (residual stream, first token dropped): share of the centred variance explained by the "
        "positional basis, Σ‖pos_t‖² / Σ_c,t‖h − μ‖², and roughness mean‖pos_{t+1} − pos_t‖ / rms‖pos‖, "
        "each in the first and the second half of the positions; jump ratio: the larger of the two steps "
        f"next to the boundary position t = {noise_start(T) - 1} (clean input, first random target) over the largest "
        "other step (>= 2: a break at T/2, see the comparison's rule); largest step: between which inputs t → t + 1 "
        "the basis moves most."])
    s2.table(["train", "inference", "layer", "pos share 1st half", "pos share 2nd half", "roughness 1st half",
              "roughness 2nd half", "jump ratio at T/2", "largest step"], half_rows)
    cmp = source_section(SOURCE, cfg.preset, f"{cfg.train.model.n_layers} layers, {cfg.train.model.n_heads} heads, d {cfg.train.model.d_model}, T {T}, "
                         f"{cfg.train.total_steps} steps of batch {cfg.train.batch_size} per model, tiny Shakespeare characters.",
                         _departures(cfg), comparison_rows(metrics["half_metrics"], cfg.levels, metrics["n_windows"],
                                                           metrics["change_point"], metrics.get("null_half_metrics")))
    metrics["plumbing_only"] = cfg.preset == "smoke"
    metrics["budgets"] = {str(b): {k: m[k] for k in ("half_metrics", "change_point", "null_half_metrics") if k in m}
                          for b, m in other.items()}
    rd.write_json("metrics.json", metrics)
    rd.write_report("Token randomization (Song & Zhong §5.1)",
                    [cmp, schedule_section(schedules), budget_section(cfg, metrics, other), s1, s2, *why, figs])
    return metrics


def budget_section(cfg: RandomizationConfig, metrics: dict, other: dict) -> Section:
    """The comparison's verdicts at this run's budget and at each of ``cfg.budgets`` (their own runs,
    ``budget_<steps>/report.md``): whether a verdict depends on how long the models trained."""
    s = Section("The same verdicts at other training budgets", [
        "Each budget is a complete run (three models, cosine horizon at its own last step; report in "
        "budget_<steps>/). A verdict that changes with the budget depends on training length; one that holds at "
        "every budget does not."])
    runs = {cfg.train.total_steps: metrics, **other}
    names = {n.key: n.quantity for n in SOURCE.numbers}
    rows = []
    for steps in sorted(runs):
        m = runs[steps]
        for r in comparison_rows(m["half_metrics"], cfg.levels, m["n_windows"], m["change_point"],
                                 m.get("null_half_metrics")):
            rows.append([steps, names.get(r.key, r.key), r.run, verdict(None) if cfg.preset == "smoke" else r.verdict])
    return s.table(["steps", "quantity", "this run", "verdict"], rows)


ROUGH_RATIO = 2.0  # "destroyed": both halves at least 2x rougher than the clean model (the rule's original factor)
# "breaks at T/2": the step next to the boundary is at least twice every other step. On a basis with no change point
# the ratio is <= 1 up to the jitter of neighbouring steps (a smooth curve's steps near its fastest point are about
# equal); a break adds a displacement at least as large as a regular step, doubling it. Same factor as ROUGH_RATIO.
JUMP_RATIO = 2.0
NOISE_ROUGHNESS = float(np.sqrt(2.0))  # roughness of a basis of independent positions: E‖x − y‖ ≈ √2 rms (high d)


def _median_layers(hm: list[dict], name: str) -> float:
    return float(np.median([m[name] for m in hm[1:]]))  # layers 1..L (layer 0 = embeddings)


def has_positional_component(hm: list[dict], n_windows: int) -> bool:
    """Whether a model's positional basis stands above sampling noise: the median over layers 1..L of the
    position share is >= 2 / C in both halves. With no positional signal the mean over C windows still leaves
    ‖pos_t‖² ≈ tr Σ / C, i.e. a share of 1 / C; 2 / C asks for at least as much positional signal as noise."""
    floor = 2.0 / n_windows
    return all(_median_layers(hm, f"pos_share_{h}") >= floor for h in ("first", "second"))


def _split_at_half(cp: list[dict]) -> bool:
    return all(c["jump_ratio"] >= JUMP_RATIO for c in cp[1:])  # layers 1..L: a jump next to the boundary


def null_roughness(null: list) -> tuple[float, float]:
    """(lowest, highest) over the null's draws of min over halves of the median over layers 1..L roughness — the
    number the 6c rule reads, as random positions through the same model give it."""
    v = [min(_median_layers(hm, "roughness_first"), _median_layers(hm, "roughness_second")) for hm in null]
    return float(min(v)), float(max(v))


def comparison_rows(half: dict, levels, n_windows: int, change: dict | None = None,
                    null: list | None = None) -> list[Row]:
    """Verdicts from the per-layer half metrics (medians over layers 1..L) of the 0→0, 1→1 and 2→2 pairs.

    Args:
      half: pair "i->j" → per-layer :func:`half_metrics` (layers 0..L).
      levels: the noise levels run.
      n_windows: C, the number of validation windows the positional bases average over (noise floor 1 / C).
      change: pair → per-layer :func:`change_point`; ``None`` (a run that did not save it) leaves the T/2 split
        "not testable".
      null: :func:`null_half_metrics` of the fully random model (draw → layer → half metrics); ``None`` (a run
        that did not compute it) leaves Fig. 6c "not testable".

    Rules: the clean model must have a positional component (:func:`has_positional_component`), else Fig. 6a and
    6c are "not testable at this preset". 6a: that component is smooth, both halves' roughness <= √2 / 2 (half
    that of independent positions). 6b: in every layer 1..L of the 1→1 pair a step next to the boundary position
    t = T/2 − 1 is at least :data:`JUMP_RATIO` × every other step of the basis (:func:`change_point`), and not so
    in every layer of the clean or fully random model.
    6c: the fully random model has no positional component, or its roughness (the smaller half's, median over layers
    1..L) is at least the null's lowest over its draws: as rough as random positions pushed through the same model;
    the roughness test needs the clean model (its rougher half) below the null's lowest draw, else it cannot tell
    structure from none and the row is "not testable" unless the positional component is gone.
    (The rule was "2× rougher than the clean model's"; a causal running mean of random positions already reads far
    below √2 past layer 0, so 2× could not be reached whatever the model learned. The null is the same model's.)
    """
    rows, floor = [], 2.0 / n_windows

    def desc(hm):
        return (f"median over layers: pos share {_median_layers(hm, 'pos_share_first'):.3f} / "
                f"{_median_layers(hm, 'pos_share_second'):.3f}, roughness {_median_layers(hm, 'roughness_first'):.2f} / "
                f"{_median_layers(hm, 'roughness_second'):.2f} (1st / 2nd half)")

    clean = "0->0" in half and has_positional_component(half["0->0"], n_windows)
    pre = f"needs the clean model's pos share >= 2/C = {floor:.3f} (C = {n_windows} windows; noise alone gives 1/C)"
    if "0->0" in half:
        r = max(_median_layers(half["0->0"], "roughness_first"), _median_layers(half["0->0"], "roughness_second"))
        rows.append(Row("clean_smooth", desc(half["0->0"]), verdict(r <= NOISE_ROUGHNESS / 2 if clean else None),
                        f"{pre}; reproduced = roughness <= √2/2 = {NOISE_ROUGHNESS / 2:.2f} (√2: independent positions)"))
    if "1->1" in half:
        if change is None or "1->1" not in change:
            rows.append(Row("half_split", "jump ratio at T/2 not saved by this run", verdict(None),
                            "re-run the preset to record the change point"))
        else:
            ratios = ", ".join(f"{c['jump_ratio']:.2f}" for c in change["1->1"][1:])
            controls = [p for p in ("0->0", "2->2") if p in change and _split_at_half(change[p])]
            rows.append(Row("half_split", f"jump ratio at T/2, layers 1..L: {ratios}" + (
                f" (also split: {', '.join(controls)})" if controls else ""),
                verdict(_split_at_half(change["1->1"]) and not controls),
                f"reproduced = a step next to the boundary position T/2 − 1 (clean input, first random target) is >= "
                f"{JUMP_RATIO:g}× every other step of the basis in every layer 1..L, and not so in the clean and fully "
                "random models (a smooth curve's neighbouring steps are about equal, ratio ≈ 1 at most)"))
    if "2->2" in half and "0->0" in half:
        c = max(_median_layers(half["0->0"], "roughness_first"), _median_layers(half["0->0"], "roughness_second"))
        f = min(_median_layers(half["2->2"], "roughness_first"), _median_layers(half["2->2"], "roughness_second"))
        gone = not has_positional_component(half["2->2"], n_windows)
        if null is None:
            rows.append(Row("full_destroyed", f"{desc(half['2->2'])}; clean model's roughness {c:.2f} at most",
                            verdict(True if gone and clean else None),
                            f"{pre}; reproduced = pos share < 2/C, or as rough as the null (random positions through the "
                            "same model), which this run did not compute"))
        else:
            lo, hi = null_roughness(null)
            separates = c < lo  # the clean model is smoother than every draw of the null: roughness can tell them apart
            ok = True if gone else ((f >= lo) if separates else None)
            rows.append(Row("full_destroyed", f"{desc(half['2->2'])}; null (random positions through the same model, "
                            f"{len(null)} draws): roughness {lo:.2f}–{hi:.2f}; clean model's {c:.2f} at most",
                            verdict(ok if clean else None),
                            f"{pre}; reproduced = pos share < 2/C, or the smaller half's roughness >= the null's lowest "
                            f"draw ({lo:.2f}): as rough as positions that carry no structure, read through the same "
                            "model; roughness decides only where the clean model is smoother than every null draw"
                            + ("" if separates or gone else f" (here it is not: clean {c:.2f} within the null's "
                               f"{lo:.2f}–{hi:.2f}, so roughness cannot tell structure from none through this model)")
                            + " (the null per layer: the report's section 'Why the fully random row reads as it does')"))
    return rows


EARLY = 4  # the first positions (after the dropped first token) whose share of the positional energy is reported


def early_share(prof: dict[str, np.ndarray], k: int = EARLY) -> float:
    """Share of a positional basis' energy Σ_t ‖pos_t‖² on its first ``k`` positions (uniform: k / T)."""
    return float(prof["pos_sq"][:k].sum() / prof["pos_sq"].sum())


def roughness_after(prof: dict[str, np.ndarray], k: int = EARLY) -> float:
    """Roughness mean‖pos_{t+1} − pos_t‖ / rms‖pos‖ of the basis with its first ``k`` positions left out (re-centred):
    the roughness of the rest of the curve, without a few outlying early positions inflating the rms."""
    q = prof["pos"][k:] - prof["pos"][k:].mean(0)
    rms = float(np.sqrt((q**2).sum(-1).mean()))
    return float(np.linalg.norm(np.diff(q, axis=0), axis=-1).mean() / rms) if rms > 0 else float("nan")


def random_model_section(all_profs: dict, n_layers: int, rd: RunDir, null: list | None = None) -> tuple[Section, dict]:
    """Why Fig. 6c's row reads as it does: per layer of the clean (0→0) and fully random (2→2) models, the share of
    the centred variance that position explains at each position t (‖pos_t‖² / mean_c‖h_{c,t} − μ‖²) and the step
    ‖pos_{t+1} − pos_t‖ / rms‖pos‖ against t (curves), the energy share of the first :data:`EARLY` positions and the
    roughness without them. Returns (section, numbers per pair and layer)."""
    panels: dict = {"position's share of the variance at t": {}, "step ‖pos_{t+1} − pos_t‖ / rms‖pos‖": {}}
    styles, nums = {}, {}
    for pair, name, ls in (((0, 0), "clean", "-"), ((2, 2), "fully random", "--")):
        for l in range(n_layers + 1):
            p, lab = all_profs[pair][l], f"{name}, layer {l}"
            t = np.arange(2, p["pos_sq"].shape[0] + 2)  # profile index i = input position i + 1
            panels["position's share of the variance at t"][lab] = (t, p["pos_sq"] / p["var"])
            panels["step ‖pos_{t+1} − pos_t‖ / rms‖pos‖"][lab] = (t[:-1], p["step"] / np.sqrt(p["pos_sq"].mean()))
            styles[lab] = ls
            nums[f"{pair[0]}->{pair[1]}/{l}"] = {"early_share": early_share(p), "roughness_after": roughness_after(p)}
    path, rel = rd.figure_path("random_model_profiles.png")
    plots.save(plots.curves(panels, "input position t", "clean vs fully random model, per layer",
                            logy=tuple(panels), styles=styles), path)
    T = all_profs[(2, 2)][0]["pos_sq"].shape[0]
    f = [nums[f"2->2/{l}"] for l in range(1, n_layers + 1)]
    c = [nums[f"0->0/{l}"] for l in range(1, n_layers + 1)]
    r0 = half_metrics(all_profs[(2, 2)][0])
    s = Section("Why the fully random row reads as it does", [
        f"In the fully random model the embedding layer's positional basis (layer 0, the position embeddings the data "
        f"never shaped) has roughness {r0['roughness_first']:.2f} / {r0['roughness_second']:.2f} (1st / 2nd half), that of "
        f"independent positions (√2 = {NOISE_ROUGHNESS:.2f}): there the structure is destroyed, as the source says. In "
        f"layers 1..{n_layers}, the first {EARLY} positions hold "
        + ", ".join(f"{x['early_share']:.0%}" for x in f) + f" of the positional energy (clean model: "
        + ", ".join(f"{x['early_share']:.0%}" for x in c) + f"; uniform: {EARLY / T:.0%}): causal attention over 1 to "
        f"{EARLY} random tokens makes those states differ from the rest, and these few outlying positions set rms‖pos‖, so "
        "the mean step looks small beside it and the rule's roughness reads 'smooth'. Without those positions the "
        "roughness is " + ", ".join(f"{x['roughness_after']:.2f}" for x in f) + " (fully random) against "
        + ", ".join(f"{x['roughness_after']:.2f}" for x in c) + " (clean), layers 1..L. The curves show the share of "
        "the variance that position explains at each t and the step sizes along t."])
    s.figure(rel, "per position t, layers 0..L of the clean (solid) and fully random (dashed) models: the share of the "
                  "centred variance explained by position, and the step of the positional basis over its rms")
    if null:
        s.paragraphs.append(null_paragraph(len(null)))
        s.table(["layer", "clean 1st half", "clean 2nd half", "fully random 1st half", "fully random 2nd half",
                 "null 1st half: mean (range)", "null 2nd half: mean (range)"], null_rows(all_profs, null, n_layers),
                caption="roughness mean‖pos_{t+1} − pos_t‖ / rms‖pos‖ per layer")
    return s, nums


def null_paragraph(draws: int) -> str:
    """What the null of the roughness rule is, for the report."""
    return (f"The roughness rule's null: the fully random model with its learned position table replaced by i.i.d. "
            f"Gaussian rows of the same Frobenius norm ({draws} draws), on the same fully random windows. Layer 0 "
            "reads independent positions (≈ √2); past it, causal attention averages the positions of earlier tokens "
            "into each state, so even positions with no structure read far below √2, and differently from draw to "
            "draw. Fig. 6c's row compares the model with this null, not with a fixed factor, and is not testable "
            "by roughness where the clean model's roughness falls inside the null's range.")


def null_rows(all_profs: dict, null: list, n_layers: int) -> list[list]:
    """Per layer: roughness of the clean and fully random models' halves, and the null's mean (range) over its draws."""
    rows = []
    for l in range(n_layers + 1):
        row = [l]
        for pair in ((0, 0), (2, 2)):
            p = all_profs[pair][l]
            hm = half_metrics(p, noise_start(p["pos_sq"].shape[0] + 1) - 1)
            row += [round(hm["roughness_first"], 3), round(hm["roughness_second"], 3)]
        for h in ("first", "second"):
            v = [draw[l][f"roughness_{h}"] for draw in null]
            row.append(f"{np.mean(v):.3f} ({min(v):.3f}–{max(v):.3f})")
        rows.append(row)
    return rows


def _departures(cfg: RandomizationConfig) -> list[str]:
    return [f"{cfg.train.model.n_layers} layers, {cfg.train.model.n_heads} heads, d {cfg.train.model.d_model} (source 8, 8, 512)",
            f"T {cfg.train.seq_len} (source 256 / 512)", "tiny Shakespeare characters, vocabulary 65 (source OpenWebText, GPT-2 "
            "tokens, 50,257)", f"{cfg.train.total_steps} steps of batch {cfg.train.batch_size} (source 100K of 64)",
            f"lr {cfg.train.optim.lr:g} (source 5e-5)"] + (
        ["the `cpu` model was shrunk from 4 layers, d 128, batch 32 (1.8 s a step on the shared 2-core machine, "
         "~2 h for three models) to run in minutes"] if cfg.preset == "cpu" else [])


def _grid_figure(all_profs: dict, levels, layer: int, start: int, path):
    """Fig. 6a–c as one grid: rows = training level, columns = inference level; one layer's positional basis."""
    n = len(levels)
    fig, axes = plots.plt.subplots(n, n, figsize=(3.0 * n, 2.9 * n), squeeze=False)
    sc = None
    for r, i in enumerate(levels):
        for c, j in enumerate(levels):
            ax = axes[r, c]
            P = all_profs[(i, j)][layer]["pos"]
            _, sv, Vh = np.linalg.svd(P - P.mean(0), full_matrices=False)
            Z = P @ Vh[:2].T
            ev = sv**2 / max(float(np.sum(sv**2)), 1e-30)
            ax.plot(Z[:, 0], Z[:, 1], lw=0.4, color="0.75", zorder=0)
            sc = ax.scatter(Z[:, 0], Z[:, 1], c=np.arange(1, len(Z) + 1), cmap="viridis", s=10)
            ax.scatter(Z[start, 0], Z[start, 1], s=60, facecolors="none", edgecolors="red", linewidths=1.2)
            ax.scatter(Z[start - 1, 0], Z[start - 1, 1], s=60, facecolors="none", edgecolors="orange", linewidths=1.2)
            ax.set_xlabel(f"PC1 ({ev[0]:.0%} of pos variance)")
            ax.set_ylabel(f"PC2 ({ev[1]:.0%})")
            ax.set_title(f"train: {SHORT[i]}\ninference: {SHORT[j]}", fontsize=8)  # two lines: no overlap
    plots.colorbar(fig, sc, axes, "position t")
    fig.suptitle(f"Positional basis, layer {layer}")
    return plots.save(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    cfg = get_config(a.preset, seed=a.seed)
    t = cfg.train  # before training: the levels' models one after another, at every budget
    steps = (t.total_steps + sum(cfg.budgets)) * len(cfg.levels)
    print(f"{len(cfg.levels)} models at {[t.total_steps, *cfg.budgets]} steps: "
          + toy_training_cost(t.replace(total_steps=steps)).describe())
    m = run(cfg, a.out, data_dir=a.data_dir, progress=not a.no_progress)
    for k, v in m["loss"].items():
        print(k, {n: round(x, 3) for n, x in v.items()})
    print(f"report: {Path(a.out) / 'report.html'}  ({m['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
