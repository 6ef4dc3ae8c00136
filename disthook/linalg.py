"""``torch.linalg``: the norms (vector, and the matrix norms that reduce to sums and
maxima of absolute values)."""
from __future__ import annotations

import numbers

import numpy as np

from disthook import _dtype
from disthook.ops import reduce as R
from disthook.tensor import Tensor


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ``ord``-norm of the elements over ``dim`` (all when None)."""
    if dtype is None and not x.is_floating_point():
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {_dtype.scalar_type_name(x.dtype)}")
    if not isinstance(ord, numbers.Number):
        raise TypeError(f"linalg.vector_norm(): argument 'ord' must be Number, not "
                        f"{type(ord).__name__}")
    x = x if dtype is None else x.to(dtype)
    return R.LinalgVectorNorm.apply(x, ord=float(ord), dim=R.norm_dims(dim, x.ndim),
                                    keepdim=keepdim)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *,
                dtype=None) -> Tensor:
    """'fro' (the 2-norm of the entries) or the 1 / inf norms (largest absolute column /
    row sum; -1 / -inf the smallest) over the two ``dim``."""
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    dims = R.norm_dims(dim, A.ndim)
    if dims is None or len(dims) != 2:
        raise RuntimeError("linalg.matrix_norm: dim must be a 2-tuple. Got "
                           + " ".join(str(d) for d in (dim if isinstance(dim, tuple) else (dim,))))
    if ord == "fro":
        return vector_norm(A, 2, dims, keepdim, dtype=dtype)
    if ord in (1, -1, np.inf, -np.inf):
        A = A if dtype is None else A.to(dtype)
        row, col = dims
        summed, over = (row, col) if abs(ord) == 1 else (col, row)
        sums = A.abs().sum(dim=summed, keepdim=keepdim)
        if not keepdim and over > summed:
            over -= 1
        return sums.amax(over, keepdim) if ord > 0 else sums.amin(over, keepdim)
    raise NotImplementedError(f"linalg.matrix_norm(ord={ord!r}) is not supported by disthook "
                              "(it needs a singular value decomposition)")


def norm(A: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """``vector_norm`` when ``ord`` is None or ``dim`` names one dim (or A is 1-d);
    ``matrix_norm`` when ``ord`` is given for a 2-d ``A`` or two dims."""
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) == 2 and ord is not None:
            return matrix_norm(A, ord, dims, keepdim, dtype=dtype)
        return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    if A.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be "
                       f"1D or 2D. Got {A.ndim}D.")
