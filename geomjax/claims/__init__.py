"""The claims engine: checked statements of source documents, their verdicts, records and erratum.

The sources are packages ``geomjax.sources.<name>`` (one folder each, found by listing that folder; see
:mod:`geomjax.claims.registration`), and they use only this module's public API.
``geomjax.claims.run(select=None, budget="quick", seed=0, out_dir=None)`` imports every source, checks the
selected claims and returns a list of :class:`ClaimResult`; with ``out_dir``
it writes ``claims.json`` and ``claims.md``; ``geomjax.claims.table()`` lists every claim's id,
source, kind, rule and recorded cost without running anything (``geomjax verify --list``). See
:mod:`geomjax.claims.registry` for the verdict rules. Results that several claims of one run share
(a Monte Carlo sample, a model's forward pass) are memoised with :func:`per_run` in the run's
:class:`RunMemo`, which :func:`run` opens and drops (:func:`run_memo`): nothing is cached across
runs. A source's module registers its claims on import::

    from geomjax.claims import Claim, Evaluation, Inequality, Tolerance, register
    register(Claim(id="bao.lemma1.mean", source="Bao Lemma 1", statement="...",
                   predicted=0.5, sampler=one_draw))

and claims that share a check, a rule or a prediction as one table,
``register_table(columns, rows, **common)`` (one :class:`Claim` per row).
"""

from geomjax.claims.judge import judge_inequality
from geomjax.claims.registry import (
    BUDGETS,
    VERDICTS,
    Claim,
    ClaimInfo,
    ClaimResult,
    Evaluation,
    Inequality,
    Margin,
    MonteCarloRule,
    RunMemo,
    MIN_DRAWS,
    N_SIGMA,
    Tolerance,
    all_claims,
    annotate,
    binomial_interval,
    claims_selection,
    decide,
    exact_witness,
    limit_evaluation,
    load_claims,
    look_sigma,
    over_draws,
    per_run,
    register,
    register_table,
    run,
    run_claim,
    run_memo,
    select_claims,
    table,
    tally,
    to_markdown,
    unregister,
    write_results,
)

__all__ = [
    "BUDGETS",
    "VERDICTS",
    "Claim",
    "ClaimInfo",
    "ClaimResult",
    "Evaluation",
    "Inequality",
    "Margin",
    "MonteCarloRule",
    "RunMemo",
    "MIN_DRAWS",
    "N_SIGMA",
    "Tolerance",
    "all_claims",
    "annotate",
    "binomial_interval",
    "claims_selection",
    "decide",
    "exact_witness",
    "judge_inequality",
    "limit_evaluation",
    "load_claims",
    "look_sigma",
    "over_draws",
    "per_run",
    "register",
    "register_table",
    "run",
    "run_claim",
    "run_memo",
    "select_claims",
    "table",
    "tally",
    "to_markdown",
    "unregister",
    "write_results",
]
