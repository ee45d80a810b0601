"""Report sections of the claims sources: the prose, figures and tables that ``geomjax verify`` adds
after the claims table, one module per source that has them (:mod:`~geomjax.claim_reports.bao`,
:mod:`~geomjax.claim_reports.clock`, :mod:`~geomjax.claim_reports.wertich`).

A module ``geomjax.claim_reports.<source>`` defines
``report_sections(run: RunDir, *, budget: str, seed: int) -> (list[Section], dict)``;
``geomjax.drivers.pipeline.run_claims`` imports it and calls it once when a claim of that source was checked.
The claims themselves (statements, margins, checks, witnesses) stay in ``geomjax.claims.<source>``;
the figures go into the run through ``geomjax.analysis.plots.save_to_run``. Nothing is imported here, so a
run that checks no such claim loads none of them.
"""
