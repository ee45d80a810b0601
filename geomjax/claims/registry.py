"""Registry of checked statements: Claim, verdict rules, ClaimResult, run().

A :class:`Claim` is one quantitative statement of a source document, with the place it is printed
(``source``, e.g. "Song & Zhong Theorem 1, eq. (6)"), what it predicts, how to check it, and the
rule that turns the check into a verdict:

Three verdicts (:func:`decide`, one pure function, is the whole rule for equalities):

* Every claim declares its **margin** δ — the size of error that would make the statement wrong —
  and where that number comes from (``margin_origin``: the statement's printed precision, a
  numerical or physical scale; never a number tuned to pass). With e = estimate − predicted and s its
  standard error (0 for an exact evaluation; the Monte Carlo sem whenever a Monte Carlo number
  enters), elementwise and at the same k = 5 standard errors both ways:

  - **holds** iff |e| + k·s ≤ δ for every element — the two one-sided tests "error ≥ +δ" and
    "error ≤ −δ" are both rejected at kσ (an equivalence test);
  - **does not hold** iff |e| − k·s > δ for some element — the error exceeds the margin at kσ;
  - **inconclusive** otherwise, with a reason (not enough samples to decide at the stated margin,
    precondition not met, budget too small, no second witness, non-finite numbers).

  Each result reports ``detectable_error`` = k·s (the smallest error the test resolves at its
  sample size ``n``; "holds" needs detectable_error ≤ δ − |e|).
* Monte Carlo claims (``sampler`` given): the mean of ``sampler(key)`` is estimated with
  :func:`geomjax.theory.montecarlo.estimate` and judged by :func:`decide` with the claim's
  :class:`MonteCarloRule` margin.
* Deterministic claims (``evaluate`` given): the evaluator returns an :class:`Evaluation`, judged
  by the claim's rule: :class:`Tolerance` (margin δ = atol + rtol·|predicted|, judged by
  :func:`decide` with the evaluation's ``sem`` when a Monte Carlo number is inside) or
  :class:`Inequality` (lhs ≤ rhs for every instance: the margin is the certified ``slack``, at least
  the float64 rounding floor rtol·max(|lhs|, |rhs|), or for a threshold statement the tolerance its
  threshold already contains (``Inequality.margin``, reported, not added twice); with a
  certified interval [lhs_lower, lhs] widened by k·sem it is "holds" when lhs + k·sem ≤ rhs − slack
  everywhere, "does not hold" when lhs_lower − k·sem > rhs + slack somewhere, and "inconclusive"
  otherwise).
* **Limits** (n → ∞ statements) are checked along a sequence of sizes: :func:`fit_limit` fits
  v(n) = L + c·n^(−r) and :func:`limit_evaluation` judges the extrapolated L (with its standard
  error) against the printed limit; the finite-n deviation is reported as an observation.
* **Preconditions**: an evaluation with ``precondition`` set (e.g. "the model did not grok at this
  budget; `full` suffices") is "inconclusive".
* **Two witnesses for every refutation**: a "does not hold" on a claim is kept only when the
  claim's ``witness`` — a second, independent computation (exact closed form in float64,
  enumeration, quadrature, finite differences, or a Monte Carlo estimator sharing no code path) —
  rejects the statement too; otherwise the result is "inconclusive". Both numbers are reported
  (``witnesses``).

* **Readings, scopes and kinds** (issue 33): every claim records its *reading* (:data:`READINGS`: the
  statement as printed, as evidently intended, geomjax's correction, or geomjax's own extension), what
  it quantifies over (:data:`SCOPES`: every instance, a random instance — decided over at least
  :data:`MIN_DRAWS` independent draws, a fraction with its interval (:func:`over_draws`) — or one
  particular instance) and, where it can be refuted, the *kind* of error a refutation is
  (:data:`ERRATUM_KINDS`). The erratum (:func:`to_erratum`) groups by kind and lists as the authors'
  statements that do not hold only literal or intended readings of kind wrong statement, wrong
  constant or over-general statement; typos carry the intended statement's verdict beside them.

Claims live in the sources' packages ``geomjax.sources.<name>``, whose modules call :func:`register` on import;
:func:`all_claims` and :func:`run` import every source found there (:mod:`~geomjax.claims.registration`).

The registry is in parts (``geomjax/claims/``), each readable in one sitting; this module re-exports them all,
so ``from geomjax.claims.registry import Claim, register, ...`` keeps working:

* :mod:`~geomjax.claims.rules` — margins, :func:`decide`, :class:`MonteCarloRule`, :class:`Tolerance`,
  :class:`Inequality`, :class:`Evaluation`, :func:`over_draws` (the verdict rule);
* :mod:`~geomjax.claims.claim` — :class:`Claim` and :class:`ClaimResult`;
* :mod:`~geomjax.claims.registration` — :func:`register`, :func:`register_table`, :func:`annotate`, discovery
  and selection (a claim is registered in its source's module and nowhere else);
* :mod:`~geomjax.claims.sampling` — the Monte Carlo engine; :mod:`~geomjax.claims.judge` — deterministic
  evaluations and the second witness;
* :mod:`~geomjax.claims.runner` — :func:`run_claim`, :func:`run`, :class:`RunMemo`, :func:`per_run`;
* :mod:`~geomjax.claims.records` — recorded full verdicts, ``claims.json`` / ``claims.md``;
  :mod:`~geomjax.claims.erratum` — the erratum; :mod:`~geomjax.claims.catalogue` — ``verify --list``;
* :mod:`~geomjax.claims.limits` — :func:`fit_limit`, :func:`limit_evaluation`, :func:`exact_witness`.
"""

from geomjax.claims._format import _flat_tree, _fmt, _jsonable, _md_escape, _summary
from geomjax.claims.catalogue import (QUICK_SECONDS, ClaimInfo, cost_class, format_table, load_quick_seconds,
                                      record_quick_seconds, table)
from geomjax.claims.claim import Claim, ClaimResult
from geomjax.claims.erratum import erratum_groups, erratum_summary, to_erratum
from geomjax.claims.judge import _claim_key, _judge_deterministic, _judge_evaluation, _second_witness
from geomjax.claims.limits import exact_witness, fit_limit, limit_evaluation
from geomjax.claims.records import (FULL_VERDICTS, contradicts, load_full_verdicts, record_full_verdicts,
                                    results_as_records, tally, to_markdown, write_results)
from geomjax.claims.registration import (_REGISTRY, all_claims, annotate, claims_selection, load_claims, register,
                                         register_table, select_claims, unregister)
from geomjax.claims.rules import (BUDGETS, ERRATUM_KINDS, EXACT_IDENTITY, LOOKS, MIN_DRAWS, N_SIGMA, OWN_READINGS,
                                  READINGS, REFUTING_KINDS, SCOPES, VERDICTS, Budget, Decision, Evaluation, Inequality, Margin,
                                  MonteCarloRule, Rule, Tolerance, binomial_interval, decide, draws_needed,
                                  look_sigma, over_draws)
from geomjax.claims.runner import RunMemo, cost_order, per_run, run, run_claim, run_memo
from geomjax.errors import GeomjaxError
from geomjax.claims.sampling import _judge_monte_carlo, claim_seconds
from geomjax.claims.sequential import SECONDS, SequentialOutcome, Stats, samples_needed, sequential_decision

__all__ = [
    "Claim",
    "ClaimResult",
    "Evaluation",
    "MonteCarloRule",
    "Tolerance",
    "Inequality",
    "register",
    "annotate",
    "unregister",
    "all_claims",
    "select_claims",
    "load_claims",
    "claims_selection",
    "run",
    "run_claim",
    "write_results",
    "to_markdown",
    "BUDGETS",
    "VERDICTS",
    "N_SIGMA",
    "Margin",
    "Decision",
    "decide",
    "fit_limit",
    "limit_evaluation",
    "exact_witness",
    "READINGS",
    "OWN_READINGS",
    "SCOPES",
    "ERRATUM_KINDS",
    "MIN_DRAWS",
    "binomial_interval",
    "over_draws",
    "draws_needed",
    "FULL_VERDICTS",
    "record_full_verdicts",
    "load_full_verdicts",
    "contradicts",
    "to_erratum",
    "erratum_summary",
    "erratum_groups",
    "results_as_records",
    "tally",
    "ClaimInfo",
    "table",
    "format_table",
    "cost_class",
    "load_quick_seconds",
    "record_quick_seconds",
    "RunMemo",
    "run_memo",
    "per_run",
    "LOOKS",
    "look_sigma",
    "SECONDS",
    "claim_seconds",
    "sequential_decision",
    "SequentialOutcome",
    "Stats",
    "samples_needed",
    "cost_order",
]
