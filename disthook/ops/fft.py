"""Discrete Fourier transforms over some dims, forward and backward side by side: complex to
complex, real to complex (all of the spectrum, or its non-negative half along the last dim)
and complex to real (the half spectrum of a real signal back to the signal).

``norm`` is torch's and numpy's: "backward" scales the inverse transform by 1/n, "forward"
the forward one, "ortho" both by 1/sqrt(n). Each backward is the adjoint: the transform the
other way with the dual norm (the one that scales the other side), which is torch's rule.
The inputs come already cut or padded to the sizes transformed (``disthook.fft`` does it
with ``narrow`` and ``pad``, as torch, so those are nodes of their own).
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op
from disthook.ops.shape import ConstantPad

NORMS = ("backward", "ortho", "forward")
DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _complex_of(np_dtype):
    return np.complex128 if np_dtype in (np.float64, np.complex128) else np.complex64


def _real_of(np_dtype):
    return np.float64 if np_dtype in (np.float64, np.complex128) else np.float32


class FftC2C(Op):
    """``fftn`` (``forward``) or ``ifftn`` over ``dims`` of a complex tensor."""

    complex_ok = True

    @staticmethod
    def forward(ctx, z, dims, norm, forward):
        ctx.dims, ctx.norm, ctx.is_forward = dims, norm, forward
        x = z._data
        fn = np.fft.fftn if forward else np.fft.ifftn
        return fn(x, axes=dims, norm=norm).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        return FftC2C.apply(g, dims=ctx.dims, norm=DUAL[ctx.norm], forward=not ctx.is_forward)


class FftR2C(Op):
    """``fftn`` over ``dims`` of a real tensor: complex, all of the spectrum, or with
    ``onesided`` only its first n // 2 + 1 entries along the last of ``dims``."""

    complex_ok = False  # its input is real (rfft of a complex tensor is refused before)

    @staticmethod
    def forward(ctx, x, dims, norm, onesided):
        data = x._data
        ctx.dims, ctx.norm, ctx.onesided = dims, norm, onesided
        ctx.last_size = data.shape[dims[-1]]
        fn = np.fft.rfftn if onesided else np.fft.fftn
        return fn(data, axes=dims, norm=norm).astype(_complex_of(data.dtype), copy=False)

    @staticmethod
    def backward(ctx, g):
        if ctx.onesided:  # the half not returned took no part: its gradient is zero
            last = ctx.dims[-1]
            missing = ctx.last_size - g.shape[last]
            if missing:
                pad = (0, 0) * (g.ndim - 1 - last) + (0, missing)
                g = ConstantPad.apply(g, pad=pad, value=0.0)
        full = FftC2C.apply(g, dims=ctx.dims, norm=DUAL[ctx.norm], forward=False)
        return full.real


class FftC2R(Op):
    """``irfftn`` over ``dims``: the half spectrum (n // 2 + 1 entries along the last of
    ``dims``) of a real signal of ``last_size`` entries there, back to the real signal."""

    complex_ok = True

    @staticmethod
    def forward(ctx, z, dims, norm, last_size):
        data = z._data
        ctx.dims, ctx.norm = dims, norm
        sizes = [data.shape[d] for d in dims[:-1]] + [last_size]
        out = np.fft.irfftn(data, s=sizes, axes=dims, norm=norm)
        return out.astype(_real_of(data.dtype), copy=False)

    @staticmethod
    def backward(ctx, g):
        from disthook.tensor import Tensor

        half = FftR2C.apply(g, dims=ctx.dims, norm=DUAL[ctx.norm], onesided=True)
        # the entries that stand for two (k and n - k) of the full spectrum count twice
        last = ctx.dims[-1]
        n, kept = g.shape[last], half.shape[last]
        twice = n - kept
        if twice <= 0:
            return half
        weight = np.ones(kept, g._data.dtype)
        weight[1:1 + twice] = 2
        shape = [1] * g.ndim
        shape[last] = kept
        return half * Tensor._make(weight.reshape(shape), None, 0)
