"""Shapes: the jaxtyping annotations of the theory modules' public array functions, checked with
beartype (the checker jaxtyping's pytest hook uses) on valid inputs (annotations agree with what the
function returns) and on a wrong shape (the annotation rejects it).

The whole theory layer can also be run under the hook (see docs/DESIGN.md, "Shapes")::

    pytest --jaxtyping-packages=geomjax.decomposition,geomjax.geometry,...,beartype.beartype tests/...
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from beartype import beartype
from jaxtyping import TypeCheckError, jaxtyped

from geomjax import attention as att
from geomjax import decomposition as dec
from geomjax import fourier as fo
from geomjax import geometry as geo
from geomjax import kernel_factorization as kf
from geomjax import localization as loc
from geomjax import smoothness as sm
from geomjax import spectral as sp

R = np.random.default_rng(0)


def f32(*shape):
    return R.normal(size=shape).astype(np.float32)


P7 = f32(7, 3)
G7 = (P7 @ P7.T).astype(np.float32)
G7c = (G7 - G7.mean(0) - G7.mean(1)[:, None] + G7.mean()).astype(np.float32)

# (function, valid args, args with one wrong shape)
CASES = [
    (dec.decompose, (f32(4, 5, 3),), (f32(4, 5),)),
    (geo.normalized_gram, (f32(5, 3),), (f32(5),)),
    (geo.incoherence, (f32(5, 3), f32(4, 3)), (f32(5, 3), f32(4, 3, 1))),
    (sp.singular_values, (f32(6, 4),), (f32(6),)),
    (sp.stable_rank, (f32(6, 4),), (f32(6, 4, 2),)),
    (sp.dct_gram, (f32(6, 3),), (f32(6),)),
    (sm.reflected_gram, (G7,), (f32(7),)),
    (sm.double_center, (G7,), (f32(7),)),
    (att.causal_softmax, (f32(2, 5, 5),), (f32(5),)),
    (att.w_matrix, (f32(6, 3), f32(6, 3)), (f32(6, 3), f32(6, 2))),
    (kf.log_kernel, (f32(4, 4), f32(4) / 4, f32(4) / 4), (f32(4, 4), f32(4, 1), f32(4))),
    (loc.softmax_input, (f32(5, 3), f32(3, 3), 1.0), (f32(5, 3), f32(3, 2), 1.0)),
    (fo.fourier_coefficients, (f32(7, 3), 7), (f32(7), 7)),
]


def _checked(fn):
    """The function body (inside float64_aware and jit) under jaxtyping + beartype."""
    return jaxtyped(typechecker=beartype)(inspect.unwrap(fn))


@pytest.mark.parametrize("fn,good,bad", CASES, ids=[f"{c[0].__module__}.{c[0].__name__}" for c in CASES])
def test_annotations_hold_and_reject_wrong_shapes(fn, good, bad):
    checked = _checked(fn)
    checked(*good)  # arguments and the returned shape agree with the annotation
    with pytest.raises(TypeCheckError):
        checked(*bad)


def test_every_theory_function_in_cases_is_annotated():
    for fn, _, _ in CASES:
        hints = inspect.get_annotations(inspect.unwrap(fn), eval_str=True)
        assert "return" in hints and any("[" in str(h) for h in hints.values()), fn
