"""Matrix products: mm, mv, dot, batched matmul, addmm (the linear layer's op)."""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook.ops.base import Op, check_broadcast, save_crossed


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise RuntimeError(msg)


def check_same_dtype(a, b, kind: str) -> None:
    """Matrix products do not promote: RuntimeError, worded as torch's ``kind`` kernel does,
    when the operands' dtypes differ."""
    if a._data.dtype == b._data.dtype:
        return
    s, c = _dtype.scalar_type_name, _dtype.c_type_name
    if kind == "dot":
        msg = (f"dot : expected both vectors to have same dtype, but found {s(a.dtype)} and "
               f"{s(b.dtype)}")
    elif kind == "mv":
        msg = (f"addmv input tensors must have the same dtype, but got {s(b.dtype)}, "
               f"{s(a.dtype)}, and {s(b.dtype)}")
    elif kind == "mm":
        msg = (f"expected m1 and m2 to have the same dtype, but got: {c(a.dtype)} != "
               f"{c(b.dtype)}")
    else:
        msg = f"expected scalar type {s(a.dtype)} but found {s(b.dtype)}"
    raise RuntimeError(msg)


class Mm(Op):
    @staticmethod
    def forward(ctx, a, b):
        x, y = a._data, b._data
        _check(x.shape[1] == y.shape[0],
               f"mat1 and mat2 shapes cannot be multiplied ({x.shape[0]}x{x.shape[1]} and "
               f"{y.shape[0]}x{y.shape[1]})")
        save_crossed(ctx, a, b)
        ctx.b_transposed = _transposed(y)
        return x @ y

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g.mm(b.t()) if ctx.needs_input_grad[0] else None
        gb = _right_grad(a, g, ctx.b_transposed) if ctx.needs_input_grad[1] else None
        return ga, gb


def _transposed(arr: np.ndarray) -> bool:
    return arr.ndim == 2 and arr.flags.f_contiguous and not arr.flags.c_contiguous


def _right_grad(a, g, b_transposed: bool):
    """``a.T @ g``, the gradient of the right operand ``b``, laid out like ``b``: when ``b``
    is a transposed view (``weight.t()`` in Linear) the product is taken as ``(g.T @ a).T``,
    so that the gradient reaching the weight through the transpose is contiguous and its
    accumulation into ``.grad`` is a plain add, not a strided one (~7 ms per 1024x1024)."""
    if b_transposed:
        return g.t().mm(a).t()
    return a.t().mm(g)


class Mv(Op):
    @staticmethod
    def forward(ctx, a, v):
        x, y = a._data, v._data
        _check(x.shape[1] == y.shape[0],
               f"size mismatch, got input ({x.shape[0]}), mat ({x.shape[0]}x{x.shape[1]}), "
               f"vec ({y.shape[0]})")
        save_crossed(ctx, a, v)
        return x @ y

    @staticmethod
    def backward(ctx, g):
        a, v = ctx.saved_tensors
        ga = g.unsqueeze(1) * v.unsqueeze(0) if ctx.needs_input_grad[0] else None
        gv = a.t().mv(g) if ctx.needs_input_grad[1] else None
        return ga, gv


class Dot(Op):
    @staticmethod
    def forward(ctx, a, b):
        x, y = a._data, b._data
        _check(x.shape == y.shape,
               "inconsistent tensor size, expected tensor [%d] and src [%d] to have the same "
               "number of elements, but got %d and %d elements respectively"
               % (x.shape[0], y.shape[0], x.shape[0], y.shape[0]))
        save_crossed(ctx, a, b)
        return np.dot(x, y)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g * b if ctx.needs_input_grad[0] else None), (
            g * a if ctx.needs_input_grad[1] else None)


class Bmm(Op):
    """Batched matmul with broadcast batch dims (both operands at least 2-D)."""

    @staticmethod
    def forward(ctx, a, b):
        x, y = a._data, b._data
        _check(x.shape[-1] == y.shape[-2],
               f"Expected size for first two dimensions of batch2 tensor to be: "
               f"{list(x.shape[:-2]) + [x.shape[-1]]} but got: {list(y.shape[:-1])}.")
        check_broadcast(x.shape[:-2], y.shape[:-2])
        save_crossed(ctx, a, b)
        return np.matmul(x, y)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g.matmul(b.transpose(-1, -2)) if ctx.needs_input_grad[0] else None
        gb = a.transpose(-1, -2).matmul(g) if ctx.needs_input_grad[1] else None
        return ga, gb


class Addmm(Op):
    """``bias + a @ b``, the op ``nn.Linear`` records for 2-D input."""

    @staticmethod
    def forward(ctx, bias, a, b):
        x, y = a._data, b._data
        _check(x.shape[1] == y.shape[0],
               f"mat1 and mat2 shapes cannot be multiplied ({x.shape[0]}x{x.shape[1]} and "
               f"{y.shape[0]}x{y.shape[1]})")
        need = ctx.needs_input_grad
        if need:  # each matrix only for the other's gradient
            ctx.save_for_backward(a if need[2] else None, b if need[1] else None)
            ctx.b_transposed = _transposed(y)
        out = x @ y
        out += bias._data
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        need = ctx.needs_input_grad
        return (g if need[0] else None,
                g.mm(b.t()) if need[1] else None,
                _right_grad(a, g, ctx.b_transposed) if need[2] else None)


def matmul(a, b):
    """torch.matmul's dispatch on the operands' ranks."""
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D")
    check_same_dtype(a, b, "dot" if da == db == 1 else "mv" if db == 1 else
                     "mm" if db == 2 else "bmm")
    if da == 1 and db == 1:
        return Dot.apply(a, b)
    if da == 2 and db == 1:
        return Mv.apply(a, b)
    if da == 1 and db == 2:
        return Mm.apply(a.unsqueeze(0), b).squeeze(0)
    if da == 2 and db == 2:
        return Mm.apply(a, b)
    if db == 2 and a.shape[-1] != b.shape[0]:
        # torch folds the batch into the rows of one mm, and its error says so
        rows = int(np.prod(a.shape[:-1]))
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{a.shape[-1]} "
                           f"and {b.shape[0]}x{b.shape[1]})")
    if db == 1:
        return Bmm.apply(a, b.unsqueeze(-1)).squeeze(-1)
    if da == 1:
        return Bmm.apply(a.unsqueeze(0), b).squeeze(-2)
    return Bmm.apply(a, b)
