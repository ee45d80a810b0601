"""The one exception type for anticipated user errors.

``GeomjaxError`` marks a mistake a user can fix (a bad path, a size the corpus cannot supply, an
unsupported model configuration, a corrupted file, an unknown name). The command line prints such
an error as one line, ``geomjax: error: <message>``, and exits with status 2; any other exception
is a bug and keeps its traceback (exit 1). It subclasses ``ValueError`` so that library callers
who already catch ``ValueError`` keep working.
"""

from __future__ import annotations

__all__ = ["GeomjaxError", "GeomjaxTypeError"]


class GeomjaxError(ValueError):
    """An anticipated, user-fixable error; its message names the problem and the fix.

    Example:
      >>> import geomjax as gj
      >>> try:
      ...     gj.claims.table("no_such_source")
      ... except gj.GeomjaxError as e:
      ...     print(str(e).split(";")[0])
      table: select pattern(s) ['no_such_source'] match no claim
    """


class GeomjaxTypeError(GeomjaxError, TypeError):
    """A GeomjaxError about a wrong dtype; also a ``TypeError`` (what NumPy/JAX raise for dtypes)."""
