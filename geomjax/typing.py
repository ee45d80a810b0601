"""Array type aliases (jaxtyping) and the shape legend used across geomjax.

Shape legend: B batch, C contexts, T positions, d model width, H heads, K head dim,
F MLP width, V vocab, L layers, S samples, r rank, k number of components.
"""

from __future__ import annotations

from typing import Union

import jax
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

ArrayLike = Union[jax.Array, np.ndarray]
Key = PRNGKeyArray

__all__ = ["Array", "ArrayLike", "Bool", "Float", "Int", "Key", "PRNGKeyArray"]
