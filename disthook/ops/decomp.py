"""Matrix functions and decompositions, batched over leading dims: inverse, determinant,
log-determinant, solve, Cholesky, QR, symmetric eigendecomposition, SVD.

Forward is numpy's LAPACK; each backward is the decomposition's known adjoint written in
Tensor ops, so it is differentiable again (a multi-output decomposition is recomputed from its
saved input inside backward, so that second derivatives see how its outputs depend on it).
"""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook.ops.base import OUTPUT, Op


def _tensor(array):
    from disthook.tensor import Tensor

    return Tensor._make(array, None, 0)


def check_square(shape: tuple, name: str) -> None:
    """RuntimeError, worded as torch's, unless ``shape`` is a batch of square matrices
    (``name`` is the function's, ``linalg.det``)."""
    if len(shape) < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if shape[-1] != shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are "
                           f"{shape[-2]} by {shape[-1]} matrices")


def _square(a, name: str) -> None:
    check_square(a._data.shape, f"linalg.{name}")
    if _dtype.kind(a._data.dtype) not in "fc":  # (complex: allowed by the op's complex_ok)
        raise RuntimeError(f"linalg.{name}: Expected a floating point or complex tensor as "
                           f"input. Got {a.dtype}")


def _eye_like(x):
    n = x.shape[-1]
    return _tensor(np.eye(n, dtype=x._data.dtype))


class LinAlgError(RuntimeError):
    """``torch.linalg.LinAlgError``: a factorization or solve that failed on its input (a
    singular matrix, one that is not positive-definite); a RuntimeError, as torch's."""


def _adjoint(x):
    """The conjugate transpose of a batch of matrices (the transpose of real ones), which
    torch's complex gradients of inv and solve take where the real ones transpose."""
    return x.mH if x._data.dtype.kind == "c" else x.mT


class LinalgInvEx(Op):
    saved_names = ("inverse",)
    complex_ok = True  # (its gradient takes the conjugate transposes)

    @staticmethod
    def forward(ctx, a):
        _square(a, "inv")
        ctx.save_for_backward(OUTPUT)
        try:
            return np.linalg.inv(a._data)
        except np.linalg.LinAlgError:
            raise LinAlgError("linalg.inv: The diagonal element of the LU factorization is "
                              "zero, the inversion could not be completed because the input "
                              "matrix is singular.") from None

    @staticmethod
    def backward(ctx, g):
        (inv,) = ctx.saved_tensors
        inv_h = _adjoint(inv)
        return -inv_h.matmul(g).matmul(inv_h)


def adjugate_t(a: np.ndarray) -> np.ndarray:
    """The transposed adjugate, det(A) inv(A)^T, also where A is singular (through the SVD)."""
    u, s, vh = np.linalg.svd(a)
    n = s.shape[-1]
    others = np.stack([np.prod(np.delete(s, i, axis=-1), axis=-1) for i in range(n)], -1)
    sign = np.linalg.det(u) * np.linalg.det(vh)
    adj = np.swapaxes(vh, -1, -2) @ (others[..., :, None] * np.swapaxes(u, -1, -2))
    return np.swapaxes(adj * sign[..., None, None], -1, -2)


class LinalgDet(Op):
    saved_names = ("A", "result")

    @staticmethod
    def forward(ctx, a):
        _square(a, "det")
        ctx.save_for_backward(a, OUTPUT)
        return np.asarray(np.linalg.det(a._data))

    @staticmethod
    def backward(ctx, g):
        a, det = ctx.saved_tensors
        if bool((det._data == 0).any()):
            from disthook.autograd import grad_mode

            if grad_mode._state.enabled and (g.requires_grad or a.requires_grad):
                return g[..., None, None] * cofactors(a)  # recorded: differentiable again
            return g[..., None, None] * _tensor(adjugate_t(a._data))
        return (g * det)[..., None, None] * a.inverse().mT


def cofactors(a):
    """The matrix of cofactors of ``a`` (batched), det(A) inv(A)^T also where A is singular,
    from the determinants of its minors: made of ``LinalgDet``, so differentiable again at
    any matrix (torch's rule, through the SVD, gives NaN where singular values repeat)."""
    from disthook.tensor import stack

    n = a.shape[-1]
    if n == 1:
        return a * 0 + 1
    others = [[k for k in range(n) if k != i] for i in range(n)]
    rows = []
    for i in range(n):
        without_row = a[..., others[i], :]
        rows.append(stack([LinalgDet.apply(without_row[..., others[j]]) * (-1) ** (i + j)
                           for j in range(n)], -1))
    return stack(rows, -2)


class LinalgSlogdet(Op):
    saved_names = ("A",)

    @staticmethod
    def forward(ctx, a):
        _square(a, "slogdet")
        ctx.save_for_backward(a)
        sign, logabs = np.linalg.slogdet(a._data)
        return np.asarray(sign, a._data.dtype), np.asarray(logabs, a._data.dtype)

    @staticmethod
    def backward(ctx, g_sign, g_logabs):
        (a,) = ctx.saved_tensors
        if g_logabs is None:
            return a * 0
        # inv(A)^T g as torch takes it, a solve of A^T X = g I. At a singular A torch's plain
        # backward gives that LU solve's infinities and NaNs, unchecked; recorded for a second
        # derivative (create_graph) it raises its LinAlgError, as LinalgSolveEx does
        from disthook.autograd import grad_mode

        rhs = g_logabs[..., None, None] * _eye_like(a).expand(a.shape)
        recorded = grad_mode._state.enabled and (g_logabs.requires_grad or a.requires_grad)
        if not recorded and bool((np.linalg.det(a._data) == 0).any()):
            return _tensor(lu_solve_np(np.swapaxes(a._data, -1, -2), rhs._data))
        return LinalgSolveEx.apply(a.mT, rhs, vector=False)


class LinalgSolveEx(Op):
    """X with A X = B (``vector``: B is a batch of vectors)."""

    saved_names = ("A", "result")
    complex_ok = True  # (its gradient takes the conjugate transposes)

    @staticmethod
    def forward(ctx, a, b, vector):
        _square(a, "solve")
        ctx.save_for_backward(a, OUTPUT)
        ctx.vector = vector
        rhs = b._data[..., None] if vector else b._data
        try:
            x = np.linalg.solve(a._data, rhs)
        except np.linalg.LinAlgError:
            raise LinAlgError("torch.linalg.solve: The solver failed because the input matrix is "
                              "singular.") from None
        return x[..., 0] if vector else x

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        gb = LinalgSolveEx.apply(_adjoint(a), g, vector=ctx.vector)
        if ctx.vector:
            ga = -gb.unsqueeze(-1) * (x.conj() if x.is_complex() else x).unsqueeze(-2)
        else:
            ga = -gb.matmul(_adjoint(x))
        return (ga if ctx.needs_input_grad[0] else None), (
            gb if ctx.needs_input_grad[1] else None)


def _substitute(a: np.ndarray, b: np.ndarray, upper: bool, unit: bool) -> np.ndarray:
    """X with A X = B by back (``upper``) or forward substitution over A's triangle only, as
    BLAS's trsm: a zero on the diagonal gives inf and nan where trsm's do, never an error."""
    n = a.shape[-1]
    x = np.zeros(b.shape, np.result_type(a, b))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in (reversed(range(n)) if upper else range(n)):
            done = slice(i + 1, n) if upper else slice(0, i)
            r = b[..., i, :] - (a[..., i:i + 1, done] @ x[..., done, :])[..., 0, :]
            x[..., i, :] = r if unit else r / a[..., i, i, None]
    return x


class LinalgSolveTriangular(Op):
    """X with A X = B (X A = B unless ``left``), reading only A's upper or lower triangle
    (taking its diagonal as ones when ``unitriangular``); A and B share their batch dims."""

    node_name = "LinalgSolveTriangularBackward0"
    saved_names = ("self", "result")

    @staticmethod
    def forward(ctx, a, b, upper, left, unitriangular):
        _square(a, "solve_triangular")
        ctx.save_for_backward(a, OUTPUT)
        ctx.flags = upper, left, unitriangular
        if left:
            return _substitute(a._data, b._data, upper, unitriangular)
        xt = _substitute(np.swapaxes(a._data, -1, -2), np.swapaxes(b._data, -1, -2),
                         not upper, unitriangular)
        return np.swapaxes(xt, -1, -2)

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        upper, left, unit = ctx.flags
        gb = LinalgSolveTriangular.apply(a.mT, g, upper=not upper, left=left, unitriangular=unit)
        ga = None
        if ctx.needs_input_grad[0]:
            ga = -(gb.matmul(x.mT) if left else x.mT.matmul(gb))
            off = int(unit)  # a unit diagonal is not read, so gets no gradient
            ga = ga.triu(off) if upper else ga.tril(-off)
        return ga, (gb if ctx.needs_input_grad[1] else None)


def _phi(m):
    """The lower triangle of ``m`` with its diagonal halved."""
    return m.tril() - 0.5 * m.diagonal(0, -2, -1).diag_embed()


class LinalgCholeskyEx(Op):
    saved_names = ("L",)

    @staticmethod
    def forward(ctx, a):
        _square(a, "cholesky")
        ctx.save_for_backward(OUTPUT)
        try:
            return np.linalg.cholesky(a._data)
        except np.linalg.LinAlgError:
            raise LinAlgError("linalg.cholesky: The factorization could not be completed "
                              "because the input is not positive-definite.") from None

    @staticmethod
    def backward(ctx, g):
        (low,) = ctx.saved_tensors
        inv = low.inverse()
        s = inv.mT.matmul(_phi(low.mT.matmul(g))).matmul(inv)
        return 0.5 * (s + s.mT)


def _copyltu(m):
    """The lower triangle of ``m`` mirrored onto the upper one."""
    low = m.tril(-1)
    return low + low.mT + m.diagonal(0, -2, -1).diag_embed()


class LinalgQr(Op):
    saved_names = ("A",)

    @staticmethod
    def forward(ctx, a, mode):
        ctx.save_for_backward(a)
        q, r = np.linalg.qr(a._data, mode="complete" if mode == "complete" else "reduced")
        ctx.mode = mode
        ctx.shape = a._data.shape
        return (q, r) if mode != "r" else (np.zeros((0,), a._data.dtype), r)

    @staticmethod
    def backward(ctx, gq, gr):
        m, n = ctx.shape[-2:]
        if ctx.mode == "r":
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed "
                               "when mode='r'. Please use linalg.qr(A, mode='reduced') if you "
                               "are going to differentiate through linalg.qr.")
        if m < n or (ctx.mode == "complete" and m > n):
            raise NotImplementedError(
                "disthook differentiates linalg.qr for tall or square inputs in reduced mode "
                f"only (got {m} x {n}, mode={ctx.mode!r}); the wide case is not implemented")
        (a,) = ctx.saved_tensors
        q, r = LinalgQr.apply(a, mode="reduced")  # again, so higher orders see them depend on A
        gq = gq if gq is not None else q * 0
        gr = gr if gr is not None else r * 0
        mm = r.matmul(gr.mT) - gq.mT.matmul(q)
        b = gq + q.matmul(_copyltu(mm))
        return b.matmul(r.inverse().mT)


class LinalgEigh(Op):
    saved_names = ("A",)
    complex_ok = True  # a Hermitian matrix's, without a gradient (linalg.eigh refuses one)

    @staticmethod
    def forward(ctx, a, upper):
        _square(a, "eigh")
        ctx.save_for_backward(a)
        ctx.upper = upper
        values, vectors = np.linalg.eigh(a._data, UPLO="U" if upper else "L")
        # (the eigenvalues are real, in the real dtype of a complex input, as torch's)
        return values.astype(a._data.real.dtype), vectors.astype(a._data.dtype)

    @staticmethod
    def backward(ctx, gl, gv):
        (a,) = ctx.saved_tensors
        values, vectors = LinalgEigh.apply(a, upper=ctx.upper)
        inner = vectors.new_zeros(vectors.shape) if gl is None else gl.diag_embed()
        if gv is not None:
            gap = values.unsqueeze(-2) - values.unsqueeze(-1)  # gap[i, j] = l_j - l_i
            eye = _eye_like(vectors)
            scale = (gap + eye).reciprocal() * (1 - eye)
            inner = inner + vectors.mT.matmul(gv) * scale
        return vectors.matmul(inner).matmul(vectors.mT)


class LinalgSvd(Op):
    saved_names = ("A",)

    @staticmethod
    def forward(ctx, a, full_matrices):
        ctx.save_for_backward(a)
        u, s, vh = np.linalg.svd(a._data, full_matrices=full_matrices)
        return u, s.astype(a._data.dtype), vh

    @staticmethod
    def backward(ctx, gu, gs, gvh):
        (a,) = ctx.saved_tensors
        u, s, vh = LinalgSvd.apply(a, full_matrices=False)
        k = s.shape[-1]
        if (gu is not None and gu.shape[-1] != k) or (gvh is not None and gvh.shape[-2] != k):
            raise NotImplementedError(
                    "disthook differentiates linalg.svd's U and Vh with full_matrices=False "
                    "only; use full_matrices=False")
        v = vh.mT
        eye = _eye_like(s.unsqueeze(-1).expand(s.shape + (k,)))
        inner = s.new_zeros(s.shape + (k,)) if gs is None else gs.diag_embed()
        s_row, s_col = s.unsqueeze(-2), s.unsqueeze(-1)
        f = ((s_row * s_row - s_col * s_col) + eye).reciprocal() * (1 - eye)  # 1/(s_j^2-s_i^2)
        sm = s.diag_embed()
        out_u = out_v = None
        if gu is not None:
            ut_gu = u.mT.matmul(gu)
            inner = inner + (f * (ut_gu - ut_gu.mT)).matmul(sm)
            out_u = gu - u.matmul(ut_gu)  # the part of gU outside U's columns
        if gvh is not None:
            gv = gvh.mT
            vt_gv = v.mT.matmul(gv)
            inner = inner + sm.matmul(f * (vt_gv - vt_gv.mT))
            out_v = gv - v.matmul(vt_gv)
        ga = u.matmul(inner).matmul(vh)
        if out_u is not None:
            ga = ga + (out_u / s.unsqueeze(-2)).matmul(vh)
        if out_v is not None:
            ga = ga + u.matmul((out_v / s.unsqueeze(-2)).mT)
        return ga


def lu_np(a: np.ndarray) -> tuple:
    """Partial-pivoting LU of a batch of square matrices: (perm, L, U) with A[perm] = L U."""
    u = a.astype(a.dtype, copy=True)
    n = u.shape[-1]
    batch = u.shape[:-2]
    flat = u.reshape((int(np.prod(batch)), n, n))  # -1 is ambiguous for 0 x 0 matrices
    low = np.zeros_like(flat)
    perm = np.tile(np.arange(n), (flat.shape[0], 1))
    rows = np.arange(flat.shape[0])
    for k in range(n):
        p = k + np.argmax(np.abs(flat[:, k:, k]), axis=1)
        for arr in (flat, low, perm):
            top, piv = arr[rows, k].copy(), arr[rows, p].copy()
            arr[rows, k], arr[rows, p] = piv, top
        pivot = flat[:, k, k]
        safe = np.where(pivot == 0, 1, pivot)
        factors = np.where(pivot[:, None] == 0, 0, flat[:, k + 1:, k] / safe[:, None])
        low[:, k + 1:, k] = factors
        flat[:, k + 1:, k:] -= factors[:, :, None] * flat[:, k, None, k:]
    low += np.eye(n, dtype=a.dtype)
    return (perm.reshape(batch + (n,)), low.reshape(batch + (n, n)),
            np.triu(flat).reshape(batch + (n, n)))


def lu_solve_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """X with A X = B through ``lu_np``, as LAPACK's getrs: unchecked, a zero pivot gives
    infinities and NaNs rather than an error."""
    perm, low, up = lu_np(a)
    n = a.shape[-1]
    y = np.take_along_axis(b, perm[..., None], axis=-2).astype(b.dtype, copy=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n):
            y[..., i, :] -= (low[..., i, :i, None] * y[..., :i, :]).sum(-2)
        for i in reversed(range(n)):
            y[..., i, :] = ((y[..., i, :] - (up[..., i, i + 1:, None] * y[..., i + 1:, :]).sum(-2))
                            / up[..., i, i, None])
    return y


class LinalgLu(Op):
    """A = P L U for square A; the gradient reaches A through L and U."""

    saved_names = ("A",)

    @staticmethod
    def forward(ctx, a):
        shape = a._data.shape
        if len(shape) >= 2 and shape[-1] != shape[-2]:  # torch factors these: refused here
            raise NotImplementedError(
                f"linalg.lu of {shape[-2]} by {shape[-1]} matrices (not square) is not "
                "supported by disthook (torch factors them); factor square matrices, or take "
                "linalg.qr for rectangular ones")
        _square(a, "lu")
        ctx.save_for_backward(a)
        perm, low, up = lu_np(a._data)
        n = perm.shape[-1]
        p = np.zeros(perm.shape + (n,), dtype=a._data.dtype)
        np.put_along_axis(p, perm[..., None], 1, axis=-1)  # P^T has row i = e_perm[i]
        return np.swapaxes(p, -1, -2), low, up

    @staticmethod
    def backward(ctx, gp, gl, gu):
        (a,) = ctx.saved_tensors
        p, low, up = LinalgLu.apply(a)
        inner = a.new_zeros(a.shape)
        if gl is not None:
            inner = inner + low.mT.matmul(gl).tril(-1)
        if gu is not None:
            inner = inner + gu.matmul(up.mT).triu()
        return p.matmul(low.inverse().mT).matmul(inner).matmul(up.inverse().mT)
