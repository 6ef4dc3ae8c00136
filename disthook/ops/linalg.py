"""Matrix products: mm, mv, dot, batched matmul, addmm (the linear layer's op)."""
from __future__ import annotations

import functools
from collections import Counter

import numpy as np

from disthook import _blas, _dtype
from disthook.ops.base import Op, check_broadcast, plain_float, plain_tensor, save_crossed


def _cannot_multiply(x: np.ndarray, y: np.ndarray) -> RuntimeError:
    """torch's error for matrices ``x @ y`` whose inner sizes differ (built only then: an op's
    common path makes no message)."""
    return RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({x.shape[0]}x{x.shape[1]} "
                        f"and {y.shape[0]}x{y.shape[1]})")


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


def refuse_bool(kernel: str, x: np.ndarray, out_size: int = 1, inner: int = 1) -> None:
    """torch's NotImplementedError for a bool operand of a matrix product, named by the
    kernel torch's call reaches (``addmm_impl_cpu_``, ``addmv_impl_cpu``, ``bmm``, ``dot``):
    they take no bool (integers they compute), though an empty product (no output, or nothing
    to sum: ``out_size`` or ``inner`` 0) returns before it, but for ``dot``."""
    if x.dtype == np.bool_ and (kernel == "dot" or out_size and inner):
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


def stack_rows(node, rows: list, grads: list, edges) -> dict | None:
    """The gradients of ``edges`` of a product node (``Mm``, ``Addmm``) summed over several
    micro-batches, as one product over their rows stacked: ``rows`` the left operands,
    ``grads`` the outputs' gradients, one per micro-batch. None when they are not 2-D
    matrices alike (the caller then takes them one by one)."""
    from disthook.tensor import Tensor

    xs, gs = [t._data for t in rows], [t._data for t in grads]
    for arrays in (xs, gs):
        if (any(a.ndim != 2 for a in arrays) or len({a.shape[1] for a in arrays}) != 1
                or len({a.dtype for a in arrays}) != 1):
            return None
    g = Tensor._make(np.concatenate(gs), None, 0)
    out = {}
    right = len(node.next_functions) - 1
    if right in edges:
        x = Tensor._make(np.concatenate(xs), None, 0)
        out[right] = _right_grad(x, g, getattr(node, "b_transposed", False))
    if right != 0 and 0 in edges:  # Addmm's bias: broadcast over the rows, or not stackable
        shape = node._input_meta[0][0]
        if len(shape) == 2 and shape[0] != 1:
            return None
        out[0] = g
    return out


class Mm(Op):
    saved_names = ("self", "mat2")
    # the gradient of mat2 sums over the rows of self and of the output's gradient: several
    # micro-batches' share of it is one product over their rows stacked (stack_rows;
    # disthook.autograd.split.run_together): (saved position of the rows, such edges)
    stacked_rows = (0, frozenset({1}))
    stack_rows = staticmethod(stack_rows)

    @staticmethod
    def forward(ctx, a, b):
        x, y = a._data, b._data
        if x.shape[1] != y.shape[0]:
            raise _cannot_multiply(x, y)
        if x.dtype.kind == "b":
            refuse_bool("addmm_impl_cpu_", x, x.shape[0] * y.shape[1], x.shape[1])
        save_crossed(ctx, a, b)
        ctx.b_transposed = _transposed(y)
        return _product(x, y)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = _left_grad(g, b) if ctx.needs_input_grad[0] else None
        gb = _right_grad(a, g, ctx.b_transposed) if ctx.needs_input_grad[1] else None
        return ga, gb


def _transposed(arr: np.ndarray) -> bool:
    return arr.ndim == 2 and arr.flags.f_contiguous and not arr.flags.c_contiguous


def _product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` for 2-D operands, C-ordered: on MKL where it is installed (disthook._blas),
    else numpy's, a product ``x @ W.T`` of a few rows taken as ``(W @ x.T).T`` (at micro-batch
    sizes OpenBLAS's kernel for a transposed right operand is much the slower one)."""
    out = _blas.gemm(x, y)
    if out is not None:
        return out
    if x.shape[0] <= _blas.SMALL_ROWS and _transposed(y) and x.flags.c_contiguous:
        return np.ascontiguousarray((y.T @ x.T).T)
    return x @ y


def _plain_matrices(p, q, dim: int) -> bool:
    """Are ``p`` and ``q`` matrices of one real float dtype, alike along ``dim``, whose
    product records no graph (``plain_float``)? Then it is taken on the arrays."""
    if not plain_float(p, q):
        return False
    x, y = p._data, q._data
    return x.ndim == 2 == y.ndim and x.dtype == y.dtype and x.shape[dim] == y.shape[dim]


def _left_grad(g, b):
    """``g @ b.T``, the gradient of a product's left operand."""
    if _plain_matrices(g, b, 1):  # no graph of it: the product of the arrays, wrapped once
        return plain_tensor(_product(g._data, b._data.T))
    return g.mm(b.t())


def _right_grad(a, g, b_transposed: bool):
    """``a.T @ g``, the gradient of the right operand ``b``, laid out like ``b``: when ``b``
    is a transposed view (``weight.t()`` in Linear) the product is taken as ``(g.T @ a).T``,
    so that the gradient reaching the weight through the transpose is contiguous and its
    accumulation into ``.grad`` is a plain add, not a strided one (~7 ms per 1024x1024)."""
    if _plain_matrices(a, g, 0):  # no graph of it: the product of the arrays, wrapped once
        x, y = a._data, g._data
        return plain_tensor(_product(y.T, x).T if b_transposed else _product(x.T, y))
    if b_transposed:
        return g.t().mm(a).t()
    return a.t().mm(g)


class Mv(Op):
    saved_names = ("self", "vec")

    @staticmethod
    def forward(ctx, a, v):
        x, y = a._data, v._data
        if x.shape[1] != y.shape[0]:
            raise RuntimeError(f"size mismatch, got input ({x.shape[0]}), mat ({x.shape[0]}x"
                               f"{x.shape[1]}), vec ({y.shape[0]})")
        if x.dtype.kind == "b":
            refuse_bool("addmv_impl_cpu", x, x.shape[0], x.shape[1])
        save_crossed(ctx, a, v)
        return x @ y

    @staticmethod
    def backward(ctx, g):
        a, v = ctx.saved_tensors
        ga = g.unsqueeze(1) * v.unsqueeze(0) if ctx.needs_input_grad[0] else None
        gv = a.t().mv(g) if ctx.needs_input_grad[1] else None
        return ga, gv


class Dot(Op):
    saved_names = ("self", "tensor")

    @staticmethod
    def forward(ctx, a, b):
        x, y = a._data, b._data
        if x.shape != y.shape:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{x.shape[0]}] and src "
                f"[{y.shape[0]}] to have the same number of elements, but got {x.shape[0]} and "
                f"{y.shape[0]} elements respectively")
        refuse_bool("dot", x)
        save_crossed(ctx, a, b)
        return np.dot(x, y)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g * b if ctx.needs_input_grad[0] else None), (
            g * a if ctx.needs_input_grad[1] else None)


class Bmm(Op):
    """Batched matmul with broadcast batch dims (both operands at least 2-D)."""

    saved_names = ("self", "mat2")

    @staticmethod
    def forward(ctx, a, b):
        x, y = a._data, b._data
        if x.shape[-1] != y.shape[-2]:
            raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                               f"{list(x.shape[:-2]) + [x.shape[-1]]} but got: "
                               f"{list(y.shape[:-1])}.")
        check_broadcast(x.shape[:-2], y.shape[:-2])
        if x.dtype.kind == "b":
            batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
            refuse_bool("bmm", x, int(np.prod(batch)) * x.shape[-2] * y.shape[-1], x.shape[-1])
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

    saved_names = ("mat1", "mat2")
    stacked_rows = (0, frozenset({0, 2}))  # as Mm's, and the bias's (a sum over rows)
    stack_rows = staticmethod(stack_rows)

    @staticmethod
    def forward(ctx, bias, a, b):
        x, y = a._data, b._data
        if x.shape[1] != y.shape[0]:
            raise _cannot_multiply(x, y)
        if x.dtype.kind == "b":
            refuse_bool("addmm_impl_cpu_", x, x.shape[0] * y.shape[1], x.shape[1])
        need = ctx.needs_input_grad
        if need:  # each matrix only for the other's gradient
            ctx.save_for_backward(a if need[2] else None, b if need[1] else None)
            ctx.b_transposed = _transposed(y)
        if x.dtype == np.float16:  # torch adds the bias to the product in float32 and
            # rounds once (half's product, then its sum, rounded twice: up to 2 ulps off)
            out = _product(x.astype(np.float32), y.astype(np.float32))
            out += bias._data
            return out.astype(np.float16)
        out = _product(x, y)
        out += bias._data
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        need = ctx.needs_input_grad
        return (g if need[0] else None,
                _left_grad(g, b) if need[1] else None,
                _right_grad(a, g, ctx.b_transposed) if need[2] else None)


def matmul(a, b):
    """torch.matmul's dispatch on the operands' ranks."""
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D")
    if a._data.dtype != b._data.dtype:
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
    if db <= 2:  # torch folds the batch into the rows of one mm (mv), and its errors say so
        rows = int(np.prod(a.shape[:-1]))
        if db == 2 and a.shape[-1] != b.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x"
                               f"{a.shape[-1]} and {b.shape[0]}x{b.shape[1]})")
        if a._data.dtype.kind == "b":
            refuse_bool("addmm_impl_cpu_" if db == 2 else "addmv_impl_cpu", a._data,
                        rows * (b.shape[1] if db == 2 else 1), a.shape[-1])
    if db == 1:
        return Bmm.apply(a, b.unsqueeze(-1)).squeeze(-1)
    if da == 1:
        return Bmm.apply(a.unsqueeze(0), b).squeeze(-2)
    return Bmm.apply(a, b)


# ---- einsum ---------------------------------------------------------------------------------

class Einsum(Op):
    """``einsum(equation, *operands)`` with explicit subscripts (``'ij,jk->ik'``; the
    ellipsis is expanded to letters before this op). The gradient of each operand is one
    more einsum: the other operands and the output gradient contracted to its subscripts,
    a ones vector supplying each letter only it has, an identity matrix each repeated
    letter (a diagonal)."""

    @staticmethod
    def forward(ctx, *operands, inputs, output):
        ctx.inputs, ctx.output = inputs, output
        ctx.sizes = {c: n for subs, t in zip(inputs, operands)
                     for c, n in zip(subs, t._data.shape)}
        ctx.save_for_backward(*operands)
        arrays = [t._data for t in operands]
        out = np.einsum(",".join(inputs) + "->" + output, *arrays, optimize=len(arrays) > 2)
        return np.asarray(out, dtype=np.result_type(*arrays))

    @staticmethod
    def backward(ctx, g):
        from disthook.tensor import Tensor

        operands = ctx.saved_tensors
        grads = []
        for i, subs in enumerate(ctx.inputs):
            if not ctx.needs_input_grad[i]:
                grads.append(None)
                continue
            terms = [(s, t) for j, (s, t) in enumerate(zip(ctx.inputs, operands)) if j != i]
            terms.append((ctx.output, g))
            known = set("".join(s for s, _ in terms))
            target, seen = [], {}
            unused = iter(c for c in _LETTERS if c not in ctx.sizes)
            dtype = g._data.dtype
            for c in subs:
                if c in seen:  # a repeated letter: its own letter, tied by an identity
                    fresh = next(unused)
                    eye = np.eye(ctx.sizes[c], dtype=dtype)
                    terms.append((c + fresh, Tensor._make(eye, None, 0)))
                    target.append(fresh)
                    continue
                seen[c] = True
                if c not in known:  # summed away in forward: every position gets the same
                    ones = np.ones(ctx.sizes[c], dtype=dtype)
                    terms.append((c, Tensor._make(ones, None, 0)))
                    known.add(c)
                target.append(c)
            grads.append(Einsum.apply(*[t for _, t in terms],
                                      inputs=tuple(s for s, _ in terms), output="".join(target)))
        return tuple(grads)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def einsum_dtype(inputs: tuple, output: str, arrays: list, sizes: dict) -> np.dtype:
    """The dtype torch's einsum computes in, with its errors. An operand's letters that no
    other operand and not the output has are summed away first: an integer or bool operand's
    sum is int64, as torch's sum. Letters shared by operands and not in the output are
    contracted by ``bmm``, which takes operands of one dtype only and no bool (unless the
    product is empty); without them the operands are multiplied, promoting."""
    counts = Counter(c for subs in inputs for c in set(subs))
    dtypes = []
    for subs, x in zip(inputs, arrays):
        dt = x.dtype
        if dt.kind in "biu" and any(counts[c] == 1 and c not in output for c in subs):
            dt = np.dtype(np.int64)
        dtypes.append(dt)
    contracted = [c for c, n in counts.items() if n > 1 and c not in output]
    if not contracted or len(arrays) < 2:
        return functools.reduce(np.promote_types, dtypes)
    inner = int(np.prod([sizes[c] for c in contracted]))  # (the first operand's dtype picks
    refuse_bool("bmm", np.empty(0, dtypes[0]), int(np.prod([sizes[c] for c in output])), inner)
    name = _dtype.scalar_type_name  # the kernel, which then checks the others)
    for dt in dtypes[1:]:
        if dt != dtypes[0]:
            raise RuntimeError(f"expected scalar type {name(_dtype.from_numpy_dtype(dtypes[0]))}"
                               f" but found {name(_dtype.from_numpy_dtype(dt))}")
    return dtypes[0]


def parse_einsum(equation: str, shapes: list) -> tuple:
    """(input subscripts, output subscripts) of ``equation`` with the ellipsis replaced by
    letters and an implicit output made explicit (letters seen once, in alphabetical order,
    after the ellipsis dims). RuntimeError with torch's wording when it does not fit."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation" if len(shapes) > len(inputs) else
                           "einsum(): fewer operands were provided than specified in the "
                           "equation")
    used = {c for c in eq if c.isalpha()}
    spare = [c for c in _LETTERS if c not in used]
    ell = max((len(shape) - len(s.replace("...", "")) for s, shape in zip(inputs, shapes)
               if "..." in s), default=0)
    ell_letters = "".join(spare[:ell])
    expanded = []
    for s, shape in zip(inputs, shapes):
        for c in s.replace("...", ""):
            if not c.isalpha():
                raise RuntimeError(f"einsum(): invalid subscript given at index "
                                   f"{eq.index(c)} in the equation string, subscripts must "
                                   "be in [a-zA-Z]")
        if "..." in s:
            n = len(shape) - len(s.replace("...", ""))
            s = s.replace("...", ell_letters[ell - n:])
        if len(s) != len(shape):
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(s)}) "
                               "does not match the number of dimensions "
                               f"({len(shape)}) for operand {len(expanded)}"
                               + ("" if "..." in lhs else " and no ellipsis was given"))
        expanded.append(s)
    if arrow:
        output = rhs.replace("...", ell_letters)
    else:
        letters = "".join(expanded)
        output = ell_letters + "".join(sorted(c for c in set(letters) if letters.count(c) == 1
                                              and c not in ell_letters))
    letters = set("".join(expanded))
    for c in output:
        if c not in letters:
            raise RuntimeError(f"einsum(): output subscript {c} does not appear in the "
                               "equation for any input operand")
    return tuple(expanded), output
