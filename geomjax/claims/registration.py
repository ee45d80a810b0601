"""Where claims are registered: :func:`register` (called by a source's module on import), discovery of the
sources, and selection by id, prefix or glob.

A source is a package ``geomjax.sources.<name>`` (a folder, found by :func:`source_names`, never listed by name).
Its ``__init__`` only declares it: ``TITLE`` (the document, as the erratum cites it), ``SHORT`` (its name in a
sentence) and, for the one source ``geomjax demo`` checks, ``DEMO = True``. Each of its other modules (but
``report`` and those starting with "_") registers claims (ids ``<name>.*``) when :func:`_discover` imports it; an
optional module ``report`` defines ``report_sections`` (:func:`source_report`), imported only when needed."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from geomjax.claims.claim import Claim
from geomjax.errors import GeomjaxError

_REGISTRY: dict[str, tuple[Claim, str]] = {}
# module name -> the spec load_claims imported it from (geomjax.claims.workers re-imports it in a fresh process)
_USER_SPECS: dict[str, str] = {}
#: The package whose subpackages are the sources (each a folder geomjax/sources/<name>/).
SOURCES = "geomjax.sources"


def register(claim: Claim) -> Claim:
    """Add ``claim`` to the registry (returns it, so it can be used as an expression).

    Re-registering an id from the same module (e.g. after a reload) replaces it; the same id from
    another module raises ValueError.
    """
    return _add(claim, _caller_module())


def register_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], **common) -> list[Claim]:
    """Register a table of claims that share fields (a check, a rule and its margin, a prediction): one
    :class:`Claim` per row, ``Claim(**common, **dict(zip(columns, row)))`` — ``columns`` name the
    :class:`Claim` fields that differ from row to row (at least ``id``), ``common`` gives the rest. The
    claims' module is the caller's, as with :func:`register`.

    Returns:
      The registered claims, in row order.

    Raises:
      ValueError: a row whose length differs from the number of columns, or a column also in ``common``.
    """
    origin = _caller_module()
    if set(columns) & set(common):
        raise ValueError(f"register_table: {sorted(set(columns) & set(common))} given as a column and in common")
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"register_table: row {row[:1]} has {len(row)} fields for {len(columns)} columns")
    return [_add(Claim(**common, **dict(zip(columns, row))), origin) for row in rows]


def annotate(claim_id: str, **fields) -> Claim:
    """Set a registered claim's reading fields (``reading``, ``scope``, ``error_kind``, ``printed``, ``intended_by``,
    ``corrected_by``) after it was registered (e.g. by :func:`register_table`), from the module that registered it
    (or another module of the same source package ``geomjax.sources.<name>``).

    Raises:
      KeyError: no claim ``claim_id``.  ValueError: another field, or a claim of another module.
    """
    allowed = {"reading", "scope", "error_kind", "printed", "intended_by", "corrected_by"}
    if set(fields) - allowed:
        raise ValueError(f"annotate: only {sorted(allowed)} can be set, got {sorted(set(fields) - allowed)}")
    claim, origin = _REGISTRY[claim_id]
    if _source_package(origin) != _source_package(_caller_module()):
        raise ValueError(f"annotate: {claim_id} is registered by {origin}; annotate it from its source's modules")
    return _add(replace(claim, **fields), origin)


def claim_origin(claim_id: str) -> str | None:
    """The module that registered ``claim_id`` (a source's module, a ``--claims`` file's module, or the caller of
    :func:`register`), None for an unknown id."""
    entry = _REGISTRY.get(claim_id)
    return None if entry is None else entry[1]


def registered_claim(claim_id: str) -> Claim:
    """The registered :class:`Claim` ``claim_id`` (after discovering the sources).

    Raises:
      KeyError: no such claim.
    """
    _discover()
    return _REGISTRY[claim_id][0]


def user_spec(origin: str | None) -> str | None:
    """The ``--claims`` spec (a file's absolute path or a module name) that :func:`load_claims` imported as module
    ``origin``, so a fresh process can import it again; None for any other module."""
    return _USER_SPECS.get(origin) if origin is not None else None


def _source_package(module: str) -> str:
    """"geomjax.sources.<name>" for any module inside that source's folder, else the module itself (a user's
    claims file)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if ".".join(parts[:2]) == SOURCES else module


def _add(claim: Claim, origin: str) -> Claim:
    """Add ``claim`` registered by the module ``origin`` (see :func:`register`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"register: expected a Claim, got {type(claim).__name__}")
    if claim.id in _REGISTRY and _REGISTRY[claim.id][1] != origin:
        raise ValueError(
            f"register: claim id {claim.id!r} is already registered by {_REGISTRY[claim.id][1]}"
        )
    _REGISTRY[claim.id] = (claim, origin)
    return claim


def unregister(claim_id: str) -> None:
    """Remove a claim (tests use this to clean up claims they registered)."""
    _REGISTRY.pop(claim_id, None)


def _caller_module() -> str:
    frame = inspect.currentframe()
    try:
        f = frame.f_back.f_back if frame and frame.f_back else None
        return f.f_globals.get("__name__", "?") if f else "?"
    finally:
        del frame


def source_names() -> list[str]:
    """The sources present: every package ``geomjax.sources.<name>`` (a folder with an ``__init__.py``), sorted."""
    pkg = importlib.import_module(SOURCES)
    return sorted(name for _, name, ispkg in pkgutil.iter_modules(pkg.__path__) if ispkg and not name.startswith("_"))


def _claim_modules(name: str) -> list[str]:
    """The modules of source ``name`` that register claims: all but ``report`` and those starting with "_"."""
    pkg = importlib.import_module(f"{SOURCES}.{name}")
    return [f"{pkg.__name__}.{m}" for _, m, _ in pkgutil.iter_modules(pkg.__path__)
            if m != "report" and not m.startswith("_")]


def _discover(only: set[str] | None = None) -> None:
    """Import every source's claims modules (:func:`source_names`, :func:`_claim_modules`; ``only``: of the sources
    named): registers their claims.

    Raises:
      ImportError: a module fails to import — its claims would otherwise silently vanish from ``verify``; the
        message names the module.
    """
    for name in source_names():
        if only is not None and name not in only:
            continue
        for module in _claim_modules(name):
            try:
                importlib.import_module(module)
            except Exception as exc:
                raise ImportError(
                    f"geomjax.claims: could not import the claims module {module} ({exc!r}); "
                    "its claims cannot be checked — fix the module (or remove it from geomjax/sources/)"
                ) from exc


def source_module(group: str):
    """The module that declares the source of the claims ``<group>.*``: its package ``geomjax.sources.<group>``,
    else the module that registered them (a user's claims file); None when neither exists."""
    if group in source_names():
        return importlib.import_module(f"{SOURCES}.{group}")
    origins = sorted({origin for cid, (_, origin) in _REGISTRY.items() if cid.split(".", 1)[0] == group})
    return sys.modules.get(origins[0]) if origins else None


def source_title(group: str) -> str:
    """The ``TITLE`` its source declares (the document cited), else the group itself."""
    return getattr(source_module(group), "TITLE", group)


def source_short(group: str) -> str:
    """The ``SHORT`` name its source declares (for a sentence: "checking <SHORT>'s claims"), else the group."""
    return getattr(source_module(group), "SHORT", group)


def source_report(group: str):
    """``report_sections`` of the source of ``<group>.*`` (its ``report`` module, imported only now: a run that
    checks none of its claims loads no figures), or None when it has none."""
    mod = source_module(group)
    if mod is None:
        return None
    if hasattr(mod, "__path__"):  # a source package: its optional report module
        try:
            mod = importlib.import_module(f"{mod.__name__}.report")
        except ModuleNotFoundError as e:  # no report module; a broken one still raises
            if e.name != f"{mod.__name__}.report":
                raise
            return None
    hook = getattr(mod, "report_sections", None)
    return hook if callable(hook) else None


def demo_source() -> str:
    """The source whose package sets ``DEMO = True`` (the claims ``geomjax demo --claims`` checks).

    Raises:
      GeomjaxError: none or several sources declare it.
    """
    demo = [n for n in source_names() if getattr(importlib.import_module(f"{SOURCES}.{n}"), "DEMO", False)]
    if len(demo) != 1:
        raise GeomjaxError(f"geomjax.claims: exactly one source must set DEMO = True, found {demo}")
    return demo[0]


def load_claims(spec: str) -> list[str]:
    """Import a researcher's own claims: ``spec`` is a Python file (``my_claims.py``) or an importable module
    (``mypkg.claims``) that registers claims with :func:`register` like a source's module, and may set ``TITLE``
    and ``SHORT`` like a source package. The built-in sources are imported first, so an id clash is caught.

    Returns:
      The ids the file registered, sorted (``verify --claims`` checks exactly these).

    Raises:
      GeomjaxError: no such file or module, a file that fails to import, a file that registers no claim, or an id
        (or an id prefix) of a built-in source.
    """
    _discover()
    path = Path(spec)
    try:
        if path.suffix == ".py" or path.exists():
            if not path.is_file():
                raise GeomjaxError(f"--claims {spec}: no such file")
            name = f"geomjax_user_claims_{path.stem}"
            loader = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module  # its claims' origin; source_module finds its TITLE here
            loader.loader.exec_module(module)
        else:
            try:
                module = importlib.import_module(spec)
            except ModuleNotFoundError as e:
                if e.name is None or not spec.startswith(e.name):
                    raise
                raise GeomjaxError(f"--claims {spec}: neither a file nor an importable module") from None
    except GeomjaxError:
        raise
    except Exception as exc:  # a register() clash, or any error of the researcher's code
        raise GeomjaxError(f"--claims {spec}: importing it failed: {exc!r}") from exc
    ids = sorted(cid for cid, (_, origin) in _REGISTRY.items() if origin == module.__name__)
    _USER_SPECS[module.__name__] = str(path.resolve()) if module.__name__.startswith("geomjax_user_claims_") else spec
    if not ids:
        raise GeomjaxError(f"--claims {spec}: it registers no claim (call geomjax.claims.register(Claim(...)) "
                           "at import)")
    clash = sorted(cid for cid in ids if cid.split(".", 1)[0] in source_names())
    if clash:
        for cid in ids:
            unregister(cid)
        raise GeomjaxError(f"--claims {spec}: id(s) {clash} use the prefix of a built-in source; give your claims "
                           "their own prefix (e.g. 'mypaper.theorem1')")
    return ids


def claims_selection(source: str | None, claims_file: str | None = None):
    """What ``geomjax verify --source SOURCE [--claims FILE]`` checks, validated before any work: with
    ``claims_file`` the ids it registers (:func:`load_claims`), narrowed by ``source`` if given; else ``source``
    itself (None: every claim).

    Raises:
      GeomjaxError: ``source`` matches no claim (of the file, with ``claims_file``), or :func:`load_claims`'s errors.
    """
    if claims_file is None:
        if source is not None and not select_claims(source):
            sources = sorted({c.id.split(".", 1)[0] for c in all_claims()})
            raise GeomjaxError(f"--source {source!r} matches no claim; use a source ({', '.join(sources)}), "
                               f"an id glob such as '{sources[0]}.*', or a substring of a printed source")
        return source
    ids = load_claims(claims_file)
    if source is None:
        return ids
    chosen = [c.id for c in select_claims(source) if c.id in ids]
    if not chosen:
        raise GeomjaxError(f"--source {source!r} matches none of the claims of {claims_file} ({', '.join(ids)})")
    return chosen


def all_claims() -> list[Claim]:
    """Every registered claim (after importing every source package), sorted by id."""
    _discover()
    return [c for _, (c, _) in sorted(_REGISTRY.items())]


def _matches(claim: Claim, pattern: str) -> bool:
    """An exact id, an id prefix ("wertich.s6_2_2.eq6_12" matches "wertich.s6_2_2.eq6_12_printed";
    "bao" matches every Bao claim) or an id glob ("song_zhong.theorem1.*")."""
    p = pattern.strip()
    if not p:
        return False
    return claim.id.startswith(p) or fnmatch.fnmatchcase(claim.id, p)


def select_claims(select: str | Sequence[str] | None = None) -> list[Claim]:
    """Claims matching ``select``.

    Args:
      select: None (all), or one pattern or a list of patterns. A pattern matches a claim when it
        is the claim's id, a prefix of it (the source module "bao", "song_zhong.theorem1") or an id
        glob ("song_zhong.*.printed"). Statement and source text are not searched.

    Returns:
      Matching claims sorted by id (possibly empty).
    """
    claims = all_claims()
    if select is None:
        return claims
    patterns = [select] if isinstance(select, str) else list(select)
    return [c for c in claims if any(_matches(c, p) for p in patterns)]


def _select_strict(select, who: str) -> list[Claim]:
    """:func:`select_claims`, raising GeomjaxError for a pattern that matches no claim."""
    selected = select_claims(select)
    if select is not None:
        patterns = [select] if isinstance(select, str) else list(select)
        registered = all_claims()
        unmatched = [p for p in patterns if not any(_matches(c, p) for c in registered)]
        if unmatched:
            groups = sorted({c.group for c in registered})
            raise GeomjaxError(
                f"{who}: select pattern(s) {unmatched} match no claim; use an exact id, an id prefix "
                f"(a source module {groups}, e.g. 'bao.lemma1') or an id glob"
            )
    return selected
