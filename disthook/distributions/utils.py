"""``torch.distributions.utils``: the helpers torch exposes to people who write their own
distributions (parameter broadcasting, probs / logits conversions, lower-triangular
packing, ``lazy_property``)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from disthook.distributions.bernoulli import probs_to_logits
from disthook.distributions.distribution import finfo, lazy_property

__all__ = ["broadcast_all", "clamp_probs", "euler_constant", "lazy_property",
           "logits_to_probs", "probs_to_logits", "tril_matrix_to_vec", "vec_to_tril_matrix"]

euler_constant = 0.57721566490153286060


def broadcast_all(*values):
    """Numbers and tensors broadcast to one shape; numbers become tensors of the first
    tensor's dtype (as torch's: an int tensor first truncates them), else the default."""
    from disthook import broadcast_tensors, get_default_dtype, tensor
    from disthook.tensor import Tensor

    if not all(isinstance(v, (Tensor, numbers.Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, "
                         "torch.Tensor or objects implementing __torch_function__.")
    dtype = next((v.dtype for v in values if isinstance(v, Tensor)), get_default_dtype())
    return broadcast_tensors(*(v if isinstance(v, Tensor) else tensor(v, dtype=dtype)
                               for v in values))


def clamp_probs(probs):
    """``probs`` kept inside [eps, 1 - eps] of their dtype."""
    eps = finfo(probs, "eps")
    return probs.clamp(min=eps, max=1 - eps)


def logits_to_probs(logits, is_binary: bool = False):
    """Sigmoid of binary logits, else softmax over the last dimension."""
    return logits.sigmoid() if is_binary else logits.softmax(-1)


def _tril_positions(n: int, diag: int) -> np.ndarray:
    """Row-major flat positions of the entries at or below diagonal ``diag``."""
    rows, cols = np.tril_indices(n, diag)
    return rows * n + cols


def tril_matrix_to_vec(mat, diag: int = 0):
    """The entries of square matrices at or below diagonal ``diag``, row by row."""
    from disthook.tensor import tensor

    n = mat.shape[-1]
    if not -n <= diag < n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    flat = mat.reshape(tuple(mat.shape[:-2]) + (n * n,))
    return flat[..., tensor(_tril_positions(n, diag))]


def vec_to_tril_matrix(vec, diag: int = 0):
    """Vectors as the entries at or below diagonal ``diag`` of square matrices (row by row),
    zeros elsewhere; differentiable (a gather from the vector padded with one zero)."""
    from disthook.nn.functional import pad
    from disthook.tensor import tensor

    count = vec.shape[-1]
    # n (n + 1) / 2 + n diag - diag (diag + 1) / 2 entries sit at or below diagonal diag
    n = (-(1 + 2 * diag) + math.sqrt((1 + 2 * diag) ** 2 + 8 * count
                                     + 4 * abs(diag) * (diag + 1))) / 2
    if abs(round(n) - n) > 1e-6:
        raise ValueError(f"The size of last dimension is {count} which cannot be expressed as "
                         "the lower triangular part of a square D x D matrix.")
    n = round(n)
    index = np.full(n * n, count)  # the padded zero
    index[_tril_positions(n, diag)] = np.arange(count)
    flat = pad(vec, (0, 1))[..., tensor(index)]
    return flat.reshape(tuple(vec.shape[:-1]) + (n, n))
