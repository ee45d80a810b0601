"""Array type aliases (jaxtyping) and the shape legend used across geomjax.

Checked at test time by jaxtyping's pytest hook with beartype on the theory modules (see pyproject's
pytest addopts).

Shape legend: B batch, C contexts, T positions, d model width, H heads, K head dim,
F MLP width, V vocab, L layers, S samples, r rank, k number of components.
"""

from __future__ import annotations

from typing import Union

import jax
import numpy as np
from jaxtyping import Bool, Float, Int, PRNGKeyArray

Array = Union[jax.Array, np.ndarray]
"""What an array annotation accepts: a JAX array (or tracer) or a NumPy array, the public dtype rule
(:mod:`geomjax._checks`; lists are converted by ``float64_aware(arrays=...)`` before the checked body)."""
ArrayLike = Array
Key = PRNGKeyArray

__all__ = ["Array", "ArrayLike", "Bool", "Float", "Int", "Key", "PRNGKeyArray"]
