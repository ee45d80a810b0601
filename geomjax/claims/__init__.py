"""Every checked statement of the source documents: a registry plus one module per document.

``geomjax.claims.run(select=None, budget="quick", seed=0, out_dir=None)`` imports every module
``geomjax.claims.<source>`` present (``song_zhong``; ``wertich``, ``bao``, ``clock`` when they
exist), checks the selected claims and returns a list of :class:`ClaimResult`; with ``out_dir``
it writes ``claims.json`` and ``claims.md``; ``geomjax.claims.table()`` lists every claim's id,
source, kind, rule and recorded cost without running anything (``geomjax verify --list``). See
:mod:`geomjax.claims.registry` for the verdict rules. A source module registers its claims on import::

    from geomjax.claims.registry import Claim, Evaluation, Inequality, Tolerance, register
    register(Claim(id="bao.lemma1.mean", source="Bao Lemma 1", statement="...",
                   predicted=0.5, sampler=one_draw))
"""

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
    Tolerance,
    all_claims,
    decide,
    exact_witness,
    limit_evaluation,
    register,
    run,
    run_claim,
    select_claims,
    table,
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
    "Tolerance",
    "all_claims",
    "decide",
    "exact_witness",
    "limit_evaluation",
    "register",
    "run",
    "run_claim",
    "select_claims",
    "table",
    "to_markdown",
    "unregister",
    "write_results",
]
