"""The sources whose printed statements geomjax checks, one package per source: ``geomjax.sources.<name>``
holds the source's claims (registered with the public :mod:`geomjax.claims` API when the package is imported;
ids ``<name>.*``), its ``TITLE`` and ``SHORT`` name, and optionally a module ``report`` whose
``report_sections(run: RunDir, *, budget: str, seed: int) -> (list[Section], dict)`` adds the source's prose,
figures and tables to ``geomjax verify`` (called once when a claim of the source was checked).

The engine (:mod:`geomjax.claims`) finds the sources by listing this folder
(:func:`geomjax.claims.registration.source_names`): adding a source is adding a folder here. Nothing is imported
here, so a run that checks no claim loads no source.
"""
