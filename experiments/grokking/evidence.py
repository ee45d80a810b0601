"""Why two rows of the grokking report read "not reproduced": the blog's §5.2 ("W_L has the same key frequencies
as W_E") and §11.2 ("two circles of coprime frequencies suffice") measured over training and at a second setting.

* over training: :func:`geomjax.tools.clock_probe.key_series` at every parameter snapshot of the report's ReLU run
  (its key frequencies of W_E and W_L, and its logits restricted to its best coprime pair of key frequencies);
* a second setting: one seed of the clock claims' ReLU models (:func:`geomjax.sources.clock.claims.claim_config`: the
  blog's model; 32 seeds, ``quick`` stopped once they have grokked, ``full`` trained to 10,000 epochs), trained once
  as one vmapped program and cached under the geomjax cache (:func:`geomjax.sources.clock.claims.budget_seeds`), analysed by
  :func:`geomjax.tools.clock_probe.analyze` at its final epoch (the seeds' runs keep no snapshots).

:func:`evidence_section` draws both; :func:`w_l_why` and :func:`two_coprime_why` are the two rows' last column.
"""

from __future__ import annotations

from geomjax.analysis import plots
from geomjax.analysis.report import Section
from geomjax.sources.clock.claims import SEEDS, budget_seeds, claim_config
from geomjax.train.grokking_seeds import seed_result
from geomjax.tools.clock_probe import analyze
from geomjax.train.cost import toy_training_cost

SECOND_SETTINGS = ("quick", "full", "none")
SUFFICIENT = 0.99  # the two_coprime row's threshold (and clock.two_coprime_sufficient's)
SECTION = "Key frequencies of W_E and W_L, and coprime pairs, over training and at a second setting"


def figure_name(tag: str) -> str:
    """The file name of :func:`evidence_section`'s figure for a report tagged ``tag`` (the preset)."""
    return f"clock_{tag}_key_series.png"


def w_l_same(key_W_E, key_W_L) -> bool:
    """The W_L_same row's test (blog §5.2, "W_L has the same key frequencies as W_E"): W_L has key frequencies
    and every one of them is one of W_E's."""
    return bool(key_W_L) and set(key_W_L) <= set(key_W_E)


def _w_l_only(key_W_E, key_W_L) -> list[int]:
    """Key frequencies of W_L that are not W_E's (what breaks :func:`w_l_same`)."""
    return [k for k in key_W_L if k not in key_W_E]


def _best_pair(pairs: dict) -> str | None:
    """The pair ("k1,k2") of a sufficiency table with the highest restricted accuracy, None for no pair."""
    return max(pairs, key=pairs.get) if pairs else None


def second_setting_cost(which: str, seed: int) -> str:
    """The expected training cost of :func:`second_setting`'s model (printed before training; nothing is trained
    when it is cached): at most its epoch cap (``quick`` stops earlier, once it has grokked)."""
    c, k = claim_config(which, True, seed), SEEDS[which]
    return (f"second setting (the claims' {which} ReLU models, {k} seeds, trained only if not cached), at most "
            f"{c.epochs} epochs each: " + toy_training_cost(c.train.replace(total_steps=c.epochs * k)).describe())


def second_setting(which: str, seed: int, choose, progress: bool = False) -> dict | None:
    """Seed ``seed`` of the clock claims' ReLU models of budget ``which`` ("quick" / "full"; None for "none"), trained
    or loaded from the geomjax cache: ``{"name", "budget", "seed", "train_frac", "epochs", "checkpoint", "why", "an",
    "series"}`` with ``an`` its :func:`analyze` at the checkpoint ``choose(res)`` returns ((epoch, result at that
    epoch, reason), as the report's own :func:`experiments.grokking.run.choose_checkpoint`; the seeds' runs keep no
    snapshots, so that is the final epoch) and ``series`` its :func:`key_series` (empty: no snapshots)."""
    if which == "none":
        return None
    res = seed_result(budget_seeds(which, True, progress=progress), seed)
    ck, res_an, why = choose(res)
    return {"name": f"the claims' {which} ReLU model", "budget": which, "seed": seed,
            "train_frac": res.config.train.options.train_frac, "epochs": int(res.history["epoch"][-1]), "checkpoint": ck,
            "why": why,
            "an": analyze(res_an, seed=seed, with_snapshots=False), "series": []}


def _label(name: str, frac: float) -> str:
    return f"{name} ({frac:.0%} split)"


def _holds_at(series: list[dict], test) -> str:
    """'k of n snapshots (epochs a–b, c)' at which ``test(snapshot)`` holds: runs of consecutive snapshots as spans."""
    flags = [bool(test(q)) for q in series]
    spans, i = [], 0
    while i < len(series):
        if not flags[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(series) and flags[j + 1]:
            j += 1
        spans.append(str(series[i]["epoch"]) if i == j else f"{series[i]['epoch']}–{series[j]['epoch']}")
        i = j + 1
    where = f" (epoch{'s' * (sum(flags) > 1)} {', '.join(spans)})" if spans else ""
    return f"{sum(flags)} of {len(series)} snapshots{where}"


def _second_w_l(sec: dict) -> str:
    an = sec["an"]
    ok = w_l_same(an["key_W_E"], an["key_W_L"])
    only_E = f", W_E-only {an['key_W_E_only']}" if an["key_W_E_only"] else ""
    return (f"at the {sec['train_frac']:.0%} split ({sec['name']}, epoch {sec['checkpoint']}): W_E {an['key_W_E']}, W_L "
            f"{an['key_W_L']} — W_L ⊆ W_E {'holds' if ok else 'does not hold'}{only_E}"
            + ("; over its training the test holds at " + _holds_at(sec["series"], lambda q: w_l_same(q["key_W_E"], q["key_W_L"]))
               if sec["series"] else ""))


def w_l_why(an: dict, series: list[dict], sec: dict | None, fig: str) -> str:
    """The W_L_same row's last column: which frequencies break the test, at how many of this run's snapshots it
    holds (the curve ``fig`` of :func:`evidence_section`), and what the second setting gives."""
    only_L = _w_l_only(an["key_W_E"], an["key_W_L"])
    parts = [f"W_L-only {only_L}" if only_L else "", f"W_E-only {an['key_W_E_only']}: no W_L circle"
             if an["key_W_E_only"] else ""]
    if series:
        parts.append("over training the test (W_L ⊆ W_E) holds at "
                     + _holds_at(series, lambda q: w_l_same(q["key_W_E"], q["key_W_L"])) + f" (figure {fig})")
    if sec is not None:
        parts.append(_second_w_l(sec))
    return "; ".join(p for p in parts if p)


def _best_over(series: list[dict]) -> str:
    """The best coprime pair over a run's snapshots: where it reaches :data:`SUFFICIENT` (else its maximum), its value
    at the last snapshot, and how many snapshots have no key frequency or no coprime pair of them."""
    qs = [q for q in series if q["best_pair_acc"] is not None]
    if not qs:
        return "no snapshot has two coprime key frequencies"
    good = lambda q: q["best_pair_acc"] is not None and q["best_pair_acc"] >= SUFFICIENT  # noqa: E731
    if any(good(q) for q in qs):
        head = f"best coprime pair ≥ {SUFFICIENT:g} at " + _holds_at(series, good)
    else:
        b = max(qs, key=lambda q: q["best_pair_acc"])
        head = (f"best coprime pair below {SUFFICIENT:g} at every snapshot (at most {b['best_pair_acc']:.2f}, "
                f"{{{b['best_pair']}}} at epoch {b['epoch']})")
    last = series[-1]
    tail = "" if last["best_pair_acc"] is None else f", {last['best_pair_acc']:.2f} at the last (epoch {last['epoch']})"
    no_key = sum(not q["key"] for q in series)
    no_pair = len(series) - len(qs) - no_key
    return (head + tail + f"; {no_key} of {len(series)} snapshots have no key frequency yet"
            + (f", {no_pair} no coprime pair of them" if no_pair else ""))


def two_coprime_why(an: dict, series: list[dict], sec: dict | None, fig: str) -> str:
    """The two_coprime row's last column: how many pairs of this run's key frequencies are coprime, the best pair
    over this run's snapshots (the curve ``fig``), the second setting's best pair, and what the blog's statement is
    (an in-principle condition)."""
    key, n = an["key"], len(an["key"])
    parts = [f"coprime pairs among key {key}: {len(an['sufficiency']['pairs'])} of {n * (n - 1) // 2}; the logits "
             f"restricted to all key frequencies: {an['sufficiency']['all']:.2f}"]
    if series:
        parts.append("over training: " + _best_over(series) + f" (figure {fig})")
    if sec is not None:
        s2, e2 = sec["an"]["sufficiency"], sec["an"]["sufficiency_embed"]
        at = f"at the {sec['train_frac']:.0%} split ({sec['name']}, epoch {sec['checkpoint']}): key {sec['an']['key']}, "
        b = _best_pair(s2["pairs"])
        if b is not None:
            at += (f"best pair {{{b}}}: {s2['pairs'][b]:.2f} (logit-restricted), {e2.get(b, float('nan')):.2f} "
                   f"(embedding-restricted) — {'reproduced' if s2['pairs'][b] >= SUFFICIENT else 'not reproduced'}")
        else:
            at += "no coprime pair"
        parts.append(at + ("; over its training: " + _best_over(sec["series"]) if sec["series"] else ""))
    parts.append("the blog's §11.2 is an in-principle condition, which holds (ideal circles: "
                 "clock.two_coprime_sufficient.in_principle); this row reads it on the trained logits")
    return "; ".join(parts)


def evidence_section(run, tag: str, an: dict, series: list[dict], sec: dict | None, frac: float) -> Section:
    """The report section behind the two rows: a table of the final key sets and best coprime pairs of this run and
    the second setting, and a figure of the W_E-only and W_L-only counts and the restricted accuracies against
    epochs (one line per run)."""
    runs = [(_label("this run", frac), an, series)]
    if sec is not None:
        runs.append((_label(sec["name"], sec["train_frac"]), sec["an"], sec["series"]))
    s = Section(SECTION, [
        "Blog §5.2 says W_L has the same key frequencies as W_E; §11.2 that two circles of coprime frequencies "
        "suffice. Both are read at every parameter snapshot (geomjax.tools.clock_probe.key_series: each snapshot's "
        f"own key frequencies by the §5 rule on W_E and W_L; its logits restricted to its best coprime pair, Nanda et "
        "al. §5.1) and at a second setting: " + (
            f"{sec['name']} (--second-setting {sec['budget']}; the claims' models, the blog's model at the "
            f"{sec['train_frac']:.0%} split, {sec['epochs']} epochs, seed {sec['seed']}: geomjax.sources.clock.claims.claim_config), analysed "
            f"at epoch {sec['checkpoint']}: {sec['why']}." if sec else
            "none (--second-setting none).")])
    rows = []
    for name, a, _ in runs:
        pairs = a["sufficiency"]["pairs"]
        b = _best_pair(pairs)
        rows.append([name, a["key_W_E"], a["key_W_L"], a["key_W_E_only"], _w_l_only(a["key_W_E"], a["key_W_L"]),
                     "yes" if w_l_same(a["key_W_E"], a["key_W_L"]) else "no", "—" if b is None else f"{{{b}}}",
                     "—" if b is None else f"{pairs[b]:.3f}",
                     "—" if b is None else f"{a['sufficiency_embed'].get(b, float('nan')):.3f}",
                     f"{a['sufficiency']['all']:.3f}"])
    s.table(["run", "W_E key", "W_L key", "W_E only", "W_L only", "W_L ⊆ W_E", "best coprime pair",
             "its logit-restricted acc", "its embedding-restricted acc", "all key (logit)"], rows)
    panels = {"W_E-only key frequencies": {}, "W_L-only key frequencies": {}, "best coprime pair, restricted acc": {},
              "all key frequencies, restricted acc": {}}
    nan = float("nan")
    for name, _, ser in runs:
        ep = [q["epoch"] for q in ser]
        panels["W_E-only key frequencies"][name] = (ep, [len(q["key_W_E_only"]) for q in ser])
        panels["W_L-only key frequencies"][name] = (ep, [len(_w_l_only(q["key_W_E"], q["key_W_L"])) for q in ser])
        panels["best coprime pair, restricted acc"][name] = (ep, [nan if q["best_pair_acc"] is None else
                                                                  q["best_pair_acc"] for q in ser])
        panels["all key frequencies, restricted acc"][name] = (ep, [nan if q["all_acc"] is None else q["all_acc"]
                                                                    for q in ser])
    p, rel = run.figure_path(figure_name(tag))
    plots.save(plots.curves(panels, "epoch", "W_E/W_L key frequencies and restricted accuracy at every snapshot"), p)
    s.figure(rel, "Per snapshot: key frequencies strong in W_E only and in W_L only (blog §5 rule); the logits "
                  "restricted to the best coprime pair and to all key frequencies (accuracy over all p² pairs; a gap: "
                  "no coprime pair)")
    return s
