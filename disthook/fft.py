"""``torch.fft``: the transforms (complex to complex, real to complex, complex to real, in one,
two and n dims, with torch's ``n``/``s``, ``dim`` and ``norm``), the sample frequencies and
the shifts. The transforms are the ops of ``disthook.ops.fft``; the input is first cut or
padded with zeros to the sizes transformed, as torch does (by ``narrow`` and ``pad``)."""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook._surface.refusal import MARK
from disthook.ops import fft as F
from disthook.ops.shape import ConstantPad
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


# ---- the transforms -------------------------------------------------------------------------

def _check_norm(norm):
    if norm is None:
        return "backward"
    if norm not in F.NORMS:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return norm


def _plan(input: Tensor, s, dim, default_all: bool) -> tuple:
    """(dims, sizes) of an n-dim transform, as torch chooses them: ``dim`` (a dim or dims),
    else the last len(s) dims when ``s`` is given, else all dims (``default_all``) or the
    last two; the sizes are ``s`` or the input's (-1 in ``s``: the input's)."""
    if isinstance(dim, int):
        dim = (dim,)
    if isinstance(s, int):
        s = (s,)
    if dim is None:
        dim = (tuple(range(-len(s), 0)) if s is not None else
               tuple(range(input.ndim)) if default_all else (-2, -1))
    dims = tuple(input._dim(d) for d in dim)
    if len(set(dims)) != len(dims):
        raise RuntimeError("FFT dims must be unique")
    if s is None:
        return dims, [input.shape[d] for d in dims]
    if len(s) != len(dims):
        raise RuntimeError("When given, dim and shape arguments must have the same length")
    sizes = [input.shape[d] if n == -1 else int(n) for d, n in zip(dims, s)]
    for n in sizes:
        if n < 1:
            raise RuntimeError(f"Invalid number of data points ({n}) specified")
    return dims, sizes


def _resized(x: Tensor, dims, sizes) -> Tensor:
    """``x`` cut (narrow) or padded with zeros (pad) to ``sizes`` along ``dims``."""
    pad = [0, 0] * x.ndim
    for d, n in zip(dims, sizes):
        if x.shape[d] > n:
            x = x.narrow(d, 0, n)
        elif x.shape[d] < n:
            pad[2 * (x.ndim - 1 - d) + 1] = n - x.shape[d]
    return ConstantPad.apply(x, pad=tuple(pad), value=0.0) if any(pad) else x


def _floating(input: Tensor, name: str) -> Tensor:
    """The input as float or complex of the precision torch transforms in (integers and bool:
    the default float dtype); float16 and bfloat16 are refused, as torch's CPU transforms
    refuse them."""
    kind = input._data.dtype.kind
    if input._data.dtype == _dtype.BF16:
        raise RuntimeError("Unsupported dtype BFloat16")
    if kind not in "fc":
        return input.to(_dtype.get_default_dtype())
    if input._data.dtype == np.float16:
        raise RuntimeError("Unsupported dtype Half")
    return input


def _complex(input: Tensor) -> Tensor:
    if input._data.dtype.kind == "c":
        return input
    return input.to(_dtype.from_numpy_dtype(input._data.dtype).to_complex())


def _c2c(input, s, dim, norm, forward: bool, default_all: bool, name: str) -> Tensor:
    x = _floating(input, name)
    norm = _check_norm(norm)
    dims, sizes = _plan(x, s, dim, default_all)
    x = _resized(x, dims, sizes)
    if x._data.dtype.kind != "c":  # a real signal: a real-to-complex transform, as torch's
        if forward:
            return F.FftR2C.apply(x, dims=dims, norm=norm, onesided=False)
        # (the inverse of a real signal is the conjugate of its forward transform, scaled)
        return F.FftR2C.apply(x, dims=dims, norm=F.DUAL[norm], onesided=False).conj()
    return F.FftC2C.apply(_complex(x), dims=dims, norm=norm, forward=forward)


def _r2c(input, s, dim, norm, default_all: bool, name: str) -> Tensor:
    if input._data.dtype.kind == "c":
        raise RuntimeError(f"{name} expects a real input tensor, but got "
                           f"{_dtype.scalar_type_name(input.dtype)}")
    x = _floating(input, name)
    norm = _check_norm(norm)
    dims, sizes = _plan(x, s, dim, default_all)
    return F.FftR2C.apply(_resized(x, dims, sizes), dims=dims, norm=norm, onesided=True)


def _c2r(input, s, dim, norm, default_all: bool, name: str) -> Tensor:
    x = _complex(_floating(input, name))
    norm = _check_norm(norm)
    dims, sizes = _plan(x, s, dim, default_all)
    if s is None or s[-1] == -1:  # the signal's length from the half spectrum's
        sizes[-1] = 2 * (x.shape[dims[-1]] - 1)
    last = sizes[-1]
    if last < 1:
        raise RuntimeError(f"Invalid number of data points ({last}) specified")
    x = _resized(x, dims, sizes[:-1] + [last // 2 + 1])
    return F.FftC2R.apply(x, dims=dims, norm=norm, last_size=last)


def fft(input: Tensor, n=None, dim: int = -1, norm=None) -> Tensor:
    """The 1-D discrete Fourier transform along ``dim`` (``n``: cut or zero-pad to n first)."""
    return _c2c(input, None if n is None else (n,), (dim,), norm, True, False, "fft")


def ifft(input: Tensor, n=None, dim: int = -1, norm=None) -> Tensor:
    """The inverse of ``fft``."""
    return _c2c(input, None if n is None else (n,), (dim,), norm, False, False, "ifft")


def fft2(input: Tensor, s=None, dim=(-2, -1), norm=None) -> Tensor:
    return _c2c(input, s, dim, norm, True, False, "fft2")


def ifft2(input: Tensor, s=None, dim=(-2, -1), norm=None) -> Tensor:
    return _c2c(input, s, dim, norm, False, False, "ifft2")


def fftn(input: Tensor, s=None, dim=None, norm=None) -> Tensor:
    return _c2c(input, s, dim, norm, True, True, "fftn")


def ifftn(input: Tensor, s=None, dim=None, norm=None) -> Tensor:
    return _c2c(input, s, dim, norm, False, True, "ifftn")


def rfft(input: Tensor, n=None, dim: int = -1, norm=None) -> Tensor:
    """The transform of a real signal: the n // 2 + 1 non-negative frequencies."""
    return _r2c(input, None if n is None else (n,), (dim,), norm, False, "rfft")


def irfft(input: Tensor, n=None, dim: int = -1, norm=None) -> Tensor:
    """The inverse of ``rfft``: a real signal of ``n`` entries (default 2 * (m - 1))."""
    return _c2r(input, None if n is None else (n,), (dim,), norm, False, "irfft")


def rfft2(input: Tensor, s=None, dim=(-2, -1), norm=None) -> Tensor:
    return _r2c(input, s, dim, norm, False, "rfft2")


def irfft2(input: Tensor, s=None, dim=(-2, -1), norm=None) -> Tensor:
    return _c2r(input, s, dim, norm, False, "irfft2")


def rfftn(input: Tensor, s=None, dim=None, norm=None) -> Tensor:
    return _r2c(input, s, dim, norm, True, "rfftn")


def irfftn(input: Tensor, s=None, dim=None, norm=None) -> Tensor:
    return _c2r(input, s, dim, norm, True, "irfftn")


def _not_here(name: str):
    def transform(*args, **kwargs):
        raise NotImplementedError(
            f"torch.fft.{name} (a transform of a Hermitian signal) is not supported by "
            "disthook; fft, ifft, rfft, irfft and their 2-D and n-D forms are. Without a "
            f"gradient, numpy.fft.{name}(t.numpy()) computes the same transform.")

    transform.__name__ = name
    transform.__doc__ = f"``torch.fft.{name}``: refused (not supported here)."
    transform.__dict__[MARK] = f"torch.fft.{name}"  # counted as refused (_surface.coverage)
    return transform


for _name in ("hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn"):
    globals()[_name] = _not_here(_name)
del _name
