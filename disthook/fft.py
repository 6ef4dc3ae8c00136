"""``torch.fft``: the sample frequencies and the shifts, which are real; the transforms
themselves return (or take) complex tensors, which disthook does not hold (its tensors are
numpy arrays of float, integer and bool types), so each one raises at use, saying so."""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook._surface.refusal import MARK
from disthook.tensor import Tensor, _factory


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None,
            requires_grad: bool = False) -> Tensor:
    """The sample frequencies of an n-point transform with sample spacing ``d``."""
    dt = (dtype or _dtype.get_default_dtype()).np
    return _factory(np.fft.fftfreq(n, d).astype(dt), requires_grad, device)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """The non-negative sample frequencies of an n-point real transform."""
    dt = (dtype or _dtype.get_default_dtype()).np
    return _factory(np.fft.rfftfreq(n, d).astype(dt), requires_grad, device)


def _dims(input: Tensor, dim) -> tuple:
    if dim is None:
        return tuple(range(input.ndim))
    return (dim,) if isinstance(dim, int) else tuple(dim)


def fftshift(input: Tensor, dim=None) -> Tensor:
    """The zero frequency moved to the middle: a roll by half of each dim."""
    dims = _dims(input, dim)
    return input.roll([input.shape[d] // 2 for d in dims], dims)


def ifftshift(input: Tensor, dim=None) -> Tensor:
    """The inverse of fftshift."""
    dims = _dims(input, dim)
    return input.roll([-(input.shape[d] // 2) for d in dims], dims)


def _complex_transform(name: str):
    def transform(*args, **kwargs):
        raise NotImplementedError(
            f"torch.fft.{name} works on complex tensors, which disthook does not have (its "
            f"tensors hold float, integer and bool values). Without a gradient, numpy.fft.{name}"
            "(t.numpy()) computes the same transform.")

    transform.__name__ = name
    transform.__doc__ = f"``torch.fft.{name}``: refused (complex tensors)."
    transform.__dict__[MARK] = f"torch.fft.{name}"  # counted as refused (_surface.coverage)
    return transform


for _name in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2",
              "irfft2", "rfftn", "irfftn", "hfft", "ihfft", "hfft2", "ihfft2", "hfftn",
              "ihfftn"):
    globals()[_name] = _complex_transform(_name)
del _name
