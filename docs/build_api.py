"""Render geomjax's API reference (HTML) from its docstrings with pdoc; unresolved names are errors.

Run from the repository root: ``python docs/build_api.py [OUT_DIR]`` (default ``docs/api``), then open
``OUT_DIR/geomjax.html``. ``tests/integration/test_docs.py`` builds it, so a broken reference fails the tests.
"""
import importlib
import inspect
import pkgutil
import re
import sys
import warnings
from pathlib import Path

import pdoc

import geomjax as gj


# pdoc's warnings that mean a broken reference (a module that does not import, an __all__ entry
# that does not resolve); its notes on string annotations it cannot evaluate are not.
BROKEN = re.compile(r"does not resolve|Error importing|[Cc]annot import|not found", re.I)


REFERENCE = re.compile(r":(?:func|class|mod|meth|data|attr|exc):`~?([\w.]+)`")


def _resolves(name: str, module, owner=None) -> bool:
    """A Sphinx-style reference resolves: as an absolute dotted path, or inside its class / module."""
    if name.startswith(".") and module is not None:  # Sphinx's relative form: a module of the same package
        package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
        name = package + name
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except (ImportError, TypeError, ValueError):  # no such module, or an empty / relative name
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
            return True
        except AttributeError:
            break
    for obj in [o for o in (owner, module) if o is not None]:
        try:
            for p in parts:
                obj = getattr(obj, p)
            return True
        except AttributeError:
            pass
    return False


def broken_references() -> list[str]:
    """``where: name`` for every :func:/:class:/:mod:/:meth: reference in a geomjax docstring that resolves
    to nothing (module, function, class and method docstrings of every submodule)."""
    bad = set()
    for info in pkgutil.walk_packages(gj.__path__, "geomjax."):
        mod = importlib.import_module(info.name)
        items = [(mod.__doc__, None, info.name)]
        for n, o in vars(mod).items():
            if getattr(o, "__module__", None) != info.name:
                continue
            items.append((o.__doc__, None, f"{info.name}.{n}"))
            if inspect.isclass(o):
                for k, v in vars(o).items():
                    v = v.fget if isinstance(v, property) else v
                    items.append((getattr(v, "__doc__", None), o, f"{info.name}.{n}.{k}"))
        for doc, owner, where in items:
            if isinstance(doc, str):
                bad.update(f"{where}: {r}" for r in REFERENCE.findall(doc) if not _resolves(r, mod, owner))
    return sorted(bad)


def build(out: Path) -> list[Path]:
    """Write the HTML pages for geomjax and every submodule into ``out``; return them.

    Raises:
      RuntimeError: a module failed to import, a public name or a docstring reference
        (:func:`broken_references`) does not resolve (listed).
    """
    for name in gj.__all__:  # the lazy top-level names made concrete so pdoc resolves gj.__all__
        setattr(gj, name, getattr(gj, name))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the package, and each public submodule at its path in the layer folders (gj.lens is
        # geomjax.analysis.lens): pdoc follows __all__ only to submodules of the same name
        pdoc.pdoc("geomjax", *sorted(set(gj._SUBMODULES.values())), output_directory=out)
    broken = sorted({str(w.message) for w in caught if BROKEN.search(str(w.message))}) + broken_references()
    if broken:
        raise RuntimeError("API reference: " + "; ".join(broken))
    return sorted(out.rglob("*.html"))


if __name__ == "__main__":
    pages = build(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/api"))
    print(f"{len(pages)} pages in {pages[0].parent}")
