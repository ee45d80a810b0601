"""The import layering of geomjax, checked on the source (ast), function-level imports included.

A module's layer is its folder (a file at the top of the package is named in LAYERS); lowest first, a
module may import its own layer or lower ones, never a higher one:

  0 base      geomjax/base/ (io, _checks: the numerics policy, _repr, parallel), errors, typing
  1 theory    geomjax/theory/ (array math only: no model, no data, no training)
  2 data      geomjax/data/ (corpora, character tokenizers, sampling)
  3 models    geomjax/models/ (the Flax networks and their one interface)
  4 tools     geomjax/tools/ (extraction, attention_probe, clock_probe), geomjax/convert/, geomjax/train/
  5 analysis  geomjax/analysis/ (lens, study, study_config, report, plots, comparison)
  6 drivers   geomjax/drivers/ (pipeline, multihost), geomjax/claims/ (the claims engine), geomjax/sources/ (one package per source)
  7 entry     cli, the package geomjax itself

Theory modules import only the base layer, and models, data, convert and train import theory but never
drivers, claims or experiments. Inside the theory layer the order is THEORY_ORDER (a module imports only
earlier ones). No geomjax import sits inside a function, except the lazy exports of
``geomjax/__init__.py`` (``__getattr__``: ``import geomjax`` stays cheap) and the command dispatch of
``geomjax/cli.py`` (``geomjax --help`` stays fast).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "geomjax"

LAYERS: dict[str, int] = {
    # a module's layer is its folder (a top-level file is named here): docs/DESIGN.md, Layers
    "geomjax.errors": 0, "geomjax._version": 0, "geomjax.typing": 0, "geomjax.base": 0,
    "geomjax.theory": 1,
    "geomjax.data": 2,
    "geomjax.models": 3,
    "geomjax.convert": 4, "geomjax.train": 4, "geomjax.tools": 4,
    "geomjax.analysis": 5,
    "geomjax.drivers": 6, "geomjax.claims": 6, "geomjax.sources": 6,
    "geomjax.cli": 7, "geomjax": 7,
}

THEORY_ORDER = [
    "geomjax.theory.positional", "geomjax.theory.geometry", "geomjax.theory.spectral", "geomjax.theory.smoothness", "geomjax.theory.decomposition",
    "geomjax.theory.gaussian", "geomjax.theory.localization", "geomjax.theory.fourier", "geomjax.theory.kernel_factorization",
    "geomjax.theory.montecarlo", "geomjax.theory.attention",
]

# Function-level imports that are allowed (see the module docstring).
ALLOWED_FUNCTION_IMPORTS = {"geomjax", "geomjax.cli"}

# Known exceptions to the order (empty: the pipeline/study restructuring and the claims modules
# removed the last ones); an entry may only ever be removed.
KNOWN_VIOLATIONS: set[tuple[str, str, str]] = set()  # none left; a new violation fails the test


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The geomjax modules an import statement loads (``from pkg import sub`` counts as pkg.sub)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "geomjax"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
    if src.split(".")[0] != "geomjax":
        return []
    subs = [f"{src}.{a.name}" for a in node.names if _is_module(f"{src}.{a.name}")]
    return subs if len(subs) == len(node.names) else [src, *subs]


@functools.lru_cache(maxsize=1)
def _edges() -> tuple[tuple[str, str, bool, str], ...]:
    """(importer, imported, inside a function?, location) for every geomjax import in geomjax/."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                in_function |= {id(n) for n in ast.walk(fn) if n is not fn}
        for node in ast.walk(tree):
            for target in _targets(node, module, path.name == "__init__.py"):
                out.append((module, target, id(node) in in_function, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return tuple(out)


def _layer(module: str) -> int:
    while module not in LAYERS:
        module = module.rsplit(".", 1)[0]
    return LAYERS[module]


def _theory_rank(module: str) -> int | None:
    return THEORY_ORDER.index(module) if module in THEORY_ORDER else None


def _violations() -> set[tuple[str, str, str, str]]:
    bad = set()
    for src, dst, in_fn, where in _edges():
        if src == dst or dst.startswith(src + ".") and src != "geomjax":
            continue  # a package importing its own submodules
        if in_fn and src not in ALLOWED_FUNCTION_IMPORTS:
            bad.add((src, dst, "function", where))
        if src == "geomjax" or src.startswith("geomjax.cli"):
            continue
        if _layer(dst) > _layer(src):
            bad.add((src, dst, "order", where))
        rs, rd = _theory_rank(src), _theory_rank(dst)
        if rs is not None and rd is not None and rd >= rs:
            bad.add((src, dst, "order", where))
    return bad


def test_every_module_has_a_layer():
    for path in PKG.rglob("*.py"):
        _layer(_module_name(path))  # KeyError names a module missing from LAYERS


def test_imports_follow_the_layer_order():
    bad = {v for v in _violations() if v[:3] not in KNOWN_VIOLATIONS}
    assert not bad, "imports against the layer order or inside functions:\n" + "\n".join(
        f"  {where}: {src} -> {dst} ({kind})" for src, dst, kind, where in sorted(bad))


def test_known_violations_are_still_real():
    """An entry that no longer occurs must be removed from KNOWN_VIOLATIONS (the list only shrinks)."""
    real = {v[:3] for v in _violations()}
    assert not KNOWN_VIOLATIONS - real, f"fixed, remove from KNOWN_VIOLATIONS: {sorted(KNOWN_VIOLATIONS - real)}"


def test_checker_sees_function_level_and_upward_imports(tmp_path):
    """The walker itself: a function-level import and an upward edge are both reported."""
    src = "import os\n\ndef f():\n    from geomjax.drivers import pipeline\n    return pipeline\n"
    tree = ast.parse(src)
    fn = tree.body[1]
    node = fn.body[0]
    assert _targets(node, "geomjax.theory.geometry", False) == ["geomjax.drivers.pipeline"]
    assert _layer("geomjax.drivers.pipeline") > _layer("geomjax.theory.geometry")
    assert _targets(ast.parse("from geomjax.base._checks import x64_context").body[0], "geomjax.theory.spectral", False) \
        == ["geomjax.base._checks"]


# Package-level cycles (the claims <-> pipeline cycle is gone: claims import theory modules, not pipeline).
KNOWN_CYCLES: set[frozenset[str]] = set()  # none left; a new cycle fails the test


LAYER_FOLDERS = ("geomjax.base", "geomjax.theory", "geomjax.tools", "geomjax.analysis", "geomjax.drivers")
"""Folders that group modules by layer: each module in them is a unit of its own for the cycle test."""


def _unit(module: str) -> str:
    if module.rsplit(".", 1)[0] in LAYER_FOLDERS:
        return module
    while module not in LAYERS:
        module = module.rsplit(".", 1)[0]
    return module


def test_no_cycles_between_packages():
    """Same-layer imports are allowed, but no two units (LAYERS keys) may import each other, even
    through function-level imports."""
    graph: dict[str, set[str]] = {}
    for src, dst, _, _ in _edges():
        a, b = _unit(src), _unit(dst)
        if a != b and "geomjax" not in (a, b):
            graph.setdefault(a, set()).add(b)

    def reach(a: str) -> set[str]:
        seen, todo = set(), [a]
        while todo:
            for b in graph.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    cycles = {frozenset({a, b}) for a in graph for b in reach(a) if a != b and a in reach(b)}
    assert cycles <= KNOWN_CYCLES, f"import cycles: {sorted(map(sorted, cycles - KNOWN_CYCLES))}"
    assert KNOWN_CYCLES <= cycles, f"fixed, remove from KNOWN_CYCLES: {sorted(map(sorted, KNOWN_CYCLES - cycles))}"


def test_old_module_paths_resolve_to_the_moved_modules():
    """Code written before the tree was split by layer (``geomjax.spectral``, ``from geomjax.study import
    run``) gets the moved module itself, not a copy; internal code uses the new paths (the order test
    above sees an old path as an import of the package ``geomjax``, layer 7)."""
    import importlib

    import geomjax

    for old, new in geomjax._MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from geomjax.study import run  # noqa: F401  (an old path in a from-import)

    assert run.__module__ == "geomjax.analysis.study"


def test_top_level_holds_only_the_entry_and_base_files():
    """Every other module sits in the folder of its layer."""
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert top == ["__init__.py", "_version.py", "cli.py", "errors.py", "typing.py"], top
