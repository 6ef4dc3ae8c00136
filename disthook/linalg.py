"""``torch.linalg``: the norms, inverses, determinants, solves and decompositions (Cholesky,
QR, eigh, SVD), each differentiable as in torch."""
from __future__ import annotations

import numbers

import numpy as np

from disthook import _dtype
from disthook.ops import decomp as D
from disthook.ops import reduce as R
from disthook.ops.base import check_broadcast
from disthook.ops.decomp import LinAlgError
from disthook.tensor import Tensor


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ``ord``-norm of the elements over ``dim`` (all when None)."""
    if not isinstance(ord, numbers.Number):
        raise TypeError(f"linalg.vector_norm(): argument 'ord' must be Number, not "
                        f"{type(ord).__name__}")
    return R.vector_norm(x, float(ord), dim, keepdim, dtype)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *,
                dtype=None) -> Tensor:
    """'fro' (the 2-norm of the entries), the 1 / inf norms (largest absolute column / row
    sum; -1 / -inf the smallest), 'nuc' and 2 / -2 (from the singular values) over ``dim``."""
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
    if ord in ("nuc", 2, -2):
        A = A if dtype is None else A.to(dtype)
        row, col = dims
        moved = A.movedim((row, col), (-2, -1))
        sv = svdvals(moved)
        # (no singular values, an empty matrix: its 2-norm is 0, as torch's; -2 refuses)
        out = sv.sum(-1) if ord == "nuc" or (ord == 2 and not sv.shape[-1]) else \
            sv.amax(-1) if ord == 2 else sv.amin(-1)
        if keepdim:
            out = out.unsqueeze(min(row, col)).unsqueeze(max(row, col))
        return out
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


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


# ---- inverses, determinants, solves and decompositions (ops in disthook.ops.decomp) ----------

def inv(A: Tensor) -> Tensor:
    return D.LinalgInvEx.apply(A)


def inv_ex(A: Tensor, *, check_errors: bool = False):
    """(inverse, info): ``info`` is 0, or (1-based) the first zero on the diagonal of A's LU
    factorization where A is singular; that inverse is undefined in torch, NaN here. Nothing
    raises unless ``check_errors``."""
    info = _lu_info(A, "inv")
    _raise_if(check_errors, info, "linalg.inv_ex", "The diagonal element {} is zero, the "
              "inversion could not be completed because the input matrix is singular.")
    return _Result(("inverse", "info"), (_where_ok(info, inv, A), _as_info(info)))


def det(A: Tensor) -> Tensor:
    return D.LinalgDet.apply(A)


def slogdet(A: Tensor):
    sign, logabsdet = D.LinalgSlogdet.apply(A)
    return _Result(("sign", "logabsdet"), (sign, logabsdet))


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    vector, batch = _solve_shapes(A, B, left, "linalg.solve")
    return _solve(A, B, vector, batch, left)


def _solve_shapes(A: Tensor, B: Tensor, left: bool, name: str, vectors: bool = True) -> tuple:
    """torch's shape rule for ``A X = B`` (``X A = B`` when not ``left``): (whether B is a
    vector or a batch of them, the broadcast batch shape), or torch's RuntimeError. B is a
    vector when it is 1-D or has A's shape less its last dim (only where ``vectors``: the
    triangular solve takes matrices only); batch dims broadcast."""
    if A.dtype != B.dtype:
        raise RuntimeError(f"{name}: Expected A and B to have the same dtype, but found A of "
                           f"type {_dtype.scalar_type_name(A.dtype)} and B of type "
                           f"{_dtype.scalar_type_name(B.dtype)} instead")
    vector = vectors and (B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1]))
    b_shape = tuple(B.shape) + ((1,) if vector else ())
    D.check_square(A.shape, name)
    if len(b_shape) < 2:
        raise RuntimeError(f"{name}: The input tensor B must have at least 2 dimensions.")
    if A.shape[-2 if left else -1] != b_shape[-2 if left else -1]:
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation "
                           f"{'AX' if left else 'XA'} = B ({A.shape[-2]}x{A.shape[-1]} and "
                           f"{b_shape[-2]}x{b_shape[-1]})")
    check_broadcast(b_shape[:-2], tuple(A.shape[:-2]))
    if vector and not left:
        raise RuntimeError(f"{name}: Vector broadcasting of the left hand side is not supported "
                           "for left=False. In this case linalg.solve is equivalent to B / "
                           "A.squeeze(-1)")
    return vector, tuple(np.broadcast_shapes(b_shape[:-2], tuple(A.shape[:-2])))


def _solve(A: Tensor, B: Tensor, vector: bool, batch: tuple, left: bool) -> Tensor:
    """The solve, once ``solve_shapes`` has read the operands: batch dims expanded to ``batch``;
    ``X A = B`` taken as ``A^T X^T = B^T``."""
    if tuple(A.shape[:-2]) != batch:
        A = A.expand(batch + tuple(A.shape[-2:]))
    core = tuple(B.shape[-1:] if vector else B.shape[-2:])
    if tuple(B.shape) != batch + core:
        B = B.expand(batch + core)
    if not left:
        return D.LinalgSolveEx.apply(A.mT, B.mT, vector=False).mT
    return D.LinalgSolveEx.apply(A, B, vector=vector)


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    low = D.LinalgCholeskyEx.apply(A)
    return low.mT if upper else low


def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False):
    """(L, info): ``info`` is 0, or the order of the first leading minor of A that is not
    positive-definite (a GP's jitter loop reads it and retries); that L is undefined in torch,
    NaN here. Nothing raises unless ``check_errors``."""
    _square(A, "cholesky")
    info = np.zeros(A.shape[:-2], dtype=np.int32)
    n = A.shape[-1]
    for i in np.ndindex(*info.shape):
        m = A._data[i]
        try:
            np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            info[i] = next(k for k in range(1, n + 1) if not _positive_definite(m[:k, :k]))
    _raise_if(check_errors, info, "linalg.cholesky_ex", "The factorization could not be "
              "completed because the input is not positive-definite (the leading minor of "
              "order {} is not positive-definite).")
    low = _where_ok(info, lambda a: cholesky(a, upper=upper), A)
    return _Result(("L", "info"), (low, _as_info(info)))


def _square(A: Tensor, name: str) -> None:
    D.check_square(A.shape, f"linalg.{name}")


def _at_least_2d(A: Tensor, message: str) -> None:
    """torch's RuntimeError, its ``message``, for an input with fewer than 2 dims."""
    if A.ndim < 2:
        raise RuntimeError(message)


def _positive_definite(m: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        return False
    return True


def _lu_info(A: Tensor, name: str) -> np.ndarray:
    """LAPACK getrf's info per matrix: (1-based) the first exact zero on U's diagonal, else 0."""
    _square(A, name)
    up = D.lu_np(A._data)[2]
    zero = np.diagonal(up, axis1=-2, axis2=-1) == 0
    if not zero.shape[-1]:  # 0 x 0 matrices: nothing to be singular
        return np.zeros(zero.shape[:-1], dtype=np.int32)
    return np.where(zero.any(-1), zero.argmax(-1) + 1, 0).astype(np.int32)


def _raise_if(check_errors: bool, info: np.ndarray, name: str, what: str) -> None:
    if not check_errors or not info.any():
        return
    at = tuple(np.argwhere(info)[0])
    batch = f"(Batch element {np.ravel_multi_index(at, info.shape)}): " if info.ndim else ""
    raise LinAlgError(f"{name}: {batch}{what.format(int(info[at]))}")


def _where_ok(info: np.ndarray, fn, A: Tensor) -> Tensor:
    """``fn(A)`` where ``info`` is 0; NaN in the matrices where it is not (fn runs on an
    identity there, so it does not raise)."""
    if not info.any():
        return fn(A)
    bad = Tensor._make(np.asarray(info != 0)[..., None, None], None, 0)
    safe = A.masked_fill(bad, 0) + _eye(A) * bad.to(A.dtype)
    out = fn(safe)
    return out.masked_fill(bad, float("nan"))


def _eye(A: Tensor) -> Tensor:
    return Tensor._make(np.eye(A.shape[-1], dtype=A._data.dtype), None, 0)


def _as_info(info: np.ndarray) -> Tensor:
    return Tensor._make(np.asarray(info, dtype=np.int32), None, 0)


def qr(A: Tensor, mode: str = "reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    _at_least_2d(A, "linalg.qr: The input tensor A must have at least 2 dimensions.")
    q, r = D.LinalgQr.apply(A, mode=mode)
    return _Result(("Q", "R"), (q, r))


def _no_gradient_through(A: Tensor, name: str) -> None:
    """Refuse, before computing, a decomposition whose gradient is not done here when the
    graph would need it."""
    from disthook.autograd import grad_mode

    if grad_mode._state.enabled and A.requires_grad:
        raise NotImplementedError(
            f"{name} is computed by disthook without a gradient; this input requires grad. "
            f"Compute it under torch.no_grad() or on A.detach() (as an initialisation does), "
            "or, for a real symmetric matrix, with a real dtype (linalg.eigh differentiates)")


def eigh(A: Tensor, UPLO: str = "L"):
    if A.is_complex():
        _no_gradient_through(A, "linalg.eigh of a complex matrix")
    values, vectors = D.LinalgEigh.apply(A, upper=UPLO == "U")
    return _Result(("eigenvalues", "eigenvectors"), (values, vectors))


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:
    return eigh(A, UPLO)[0]


def svd(A: Tensor, full_matrices: bool = True, *, driver=None):
    _at_least_2d(A, "linalg.svd: The input tensor A must have at least 2 dimensions.")
    u, s, vh = D.LinalgSvd.apply(A, full_matrices=full_matrices)
    return _Result(("U", "S", "Vh"), (u, s, vh))


def svdvals(A: Tensor, *, driver=None) -> Tensor:
    return svd(A, full_matrices=False)[1]


def pinv(A: Tensor, *, atol=None, rtol=None, hermitian: bool = False) -> Tensor:
    _at_least_2d(A, f"linalg.pinv({_dtype.scalar_type_name(A.dtype)}{{{list(A.shape)}}}): "
                 "expected a tensor with 2 or more dimensions of float, double, cfloat or "
                 "cdouble types")
    if 0 in A.shape[-2:]:  # no singular values: the pseudo-inverse is all (none) zeros
        return A.mT * 0
    u, s, vh = svd(A, full_matrices=False)
    top = s.amax(-1, keepdim=True)
    cutoff = top * (rtol if rtol is not None else
                    (0.0 if atol is not None else max(A.shape[-2:]) * np.finfo(
                        A._data.dtype).eps))
    if atol is not None:
        cutoff = cutoff.clamp_min(atol)
    keep = s > cutoff
    s_inv = s.where(keep, s.new_ones(())).reciprocal().where(keep, s.new_zeros(()))
    return (vh.mT * s_inv.unsqueeze(-2)).matmul(u.mT)


def matrix_rank(A: Tensor, *, atol=None, rtol=None, hermitian: bool = False) -> Tensor:
    _at_least_2d(A, "torch.linalg.matrix_rank: The input tensor input must have at least 2 "
                 "dimensions.")
    s = svdvals(A)
    top = s.amax(-1, keepdim=True) if s.shape[-1] else s.new_zeros(s.shape[:-1] + (1,))
    tol = top * (rtol if rtol is not None else max(A.shape[-2:]) * np.finfo(A._data.dtype).eps)
    if atol is not None:
        tol = tol.clamp_min(atol)
    return (s > tol).sum(-1)


def matrix_power(A: Tensor, n: int) -> Tensor:
    if n < 0:
        return matrix_power(inv(A), -n)
    out = None
    base = A
    while True:
        if n & 1:
            out = base if out is None else out.matmul(base)
        n >>= 1
        if not n:
            break
        base = base.matmul(base)
    if out is None:
        return A.new_zeros(A.shape) + D._eye_like(A)
    return out


def matrix_exp(A: Tensor) -> Tensor:
    """exp(A) by scaling and squaring a degree-18 Taylor polynomial: differentiable, since it
    is made of matmuls."""
    D.check_square(A.shape, "linalg.matrix_exp")
    norm = float(np.abs(A._data).sum(-2).max()) if A.numel() else 0.0
    squarings = max(0, int(np.ceil(np.log2(norm))) + 1) if norm > 0.5 else 0
    x = A / (2 ** squarings)
    eye = A.new_zeros(A.shape) + D._eye_like(A)
    out, term = eye, eye
    for k in range(1, 19):
        term = term.matmul(x) / k
        out = out + term
    for _ in range(squarings):
        out = out.matmul(out)
    return out


def multi_dot(tensors) -> Tensor:
    ts = list(tensors)
    if len(ts) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(ts)}")
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(1)
    out = ts[0]
    for t in ts[1:]:
        out = out.mm(t)
    if first_vec:
        out = out.squeeze(0)
    if last_vec:
        out = out.squeeze(-1)
    return out


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """The dot product along ``dim`` of floats or complex numbers, ``x`` conjugated."""
    if x.dtype != y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found "
                           f"x of type {_dtype.scalar_type_name(x.dtype)} and y of type "
                           f"{_dtype.scalar_type_name(y.dtype)} instead")
    if not (x.is_floating_point() or x.is_complex()):
        raise RuntimeError("linalg.vecdot: Expected a floating point or complex tensor as "
                           f"input. Got {_dtype.scalar_type_name(x.dtype)}")
    return (x.conj() * y).sum(dim)


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    return input.cross(other, dim=dim)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    return A.diagonal(offset, dim1, dim2)


def matmul(input: Tensor, other: Tensor) -> Tensor:
    return input.matmul(other)


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> Tensor:
    if B.dtype != A.dtype and A.is_floating_point():  # torch's takes B in A's dtype
        B = B.to(A.dtype)
    _, batch = _solve_shapes(A, B, left, "linalg.solve_triangular", vectors=False)
    A = A if tuple(A.shape[:-2]) == batch else A.expand(batch + tuple(A.shape[-2:]))
    B = B if tuple(B.shape[:-2]) == batch else B.expand(batch + tuple(B.shape[-2:]))
    return D.LinalgSolveTriangular.apply(A, B, upper=upper, left=left,
                                         unitriangular=unitriangular)


def _cholesky_solve(B: Tensor, L: Tensor, upper: bool = False) -> Tensor:
    """X with A X = B, A = L L^T (U^T U when ``upper``); torch's shape rule: B and L at least
    2-D (no vector B), their batch dims broadcast."""
    if B.dtype != L.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type "
                           f"{_dtype.scalar_type_name(B.dtype)} and A of type "
                           f"{_dtype.scalar_type_name(L.dtype)} instead.")
    for t, name in ((B, "b"), (L, "u")):
        if t.ndim < 2:
            raise RuntimeError(f"{name} should have at least 2 dimensions, but has {t.ndim} "
                               "dimensions instead")
    n = L.shape[-1]
    if L.shape[-2] != n:
        raise RuntimeError(f"A must be batches of square matrices, but they are {L.shape[-2]} "
                           f"by {n} matrices")
    if B.shape[-2] != n:
        raise RuntimeError(f"Incompatible matrix sizes for cholesky_solve: each A matrix is {n} "
                           f"by {n} but each b matrix is {B.shape[-2]} by {B.shape[-1]}")
    check_broadcast(tuple(B.shape[:-2]), tuple(L.shape[:-2]))
    batch = tuple(np.broadcast_shapes(B.shape[:-2], L.shape[:-2]))
    low = L.mT if upper else L
    return _solve(low.matmul(low.mT), B, False, batch, True)


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A: Tensor, B: Tensor, rcond=None, *, driver=None):
    """The least-squares solution of ``A X = B`` (of minimum norm: singular values at most
    ``rcond`` times the largest count as zero), with what torch's LAPACK ``driver`` gives
    beside it: residuals (not gelsy's; only where m > n and every matrix has full rank),
    ranks (not gels's) and singular values (gelsd's and gelss's); the others empty. Torch's
    shape rule: B has A's dims or one less, it is a (batch of) vector(s) as in ``solve``,
    batch dims broadcast."""
    driver = "gelsy" if driver is None else driver
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of "
                           "(gels, gelsy, gelsd, gelss)")
    vector = _lstsq_shapes(A, B)
    if not vector and A.ndim > B.ndim:  # see _lstsq_shapes
        B = B.unsqueeze(-3).expand(tuple(B.shape[:-1]) + tuple(B.shape[-2:]))
    m, n = A.shape[-2:]
    if rcond is None or rcond < 0:
        rcond = max(m, n) * np.finfo(A._data.dtype).eps
    rhs = B.unsqueeze(-1) if vector else B
    solution = pinv(A, rtol=rcond).matmul(rhs)
    s = svdvals(A.detach())
    top = s.amax(-1, keepdim=True) if s.shape[-1] else s.new_zeros(s.shape[:-1] + (1,))
    rank = (s > top * rcond).sum(-1)
    residuals = A.new_zeros((0,)).real
    if driver != "gelsy" and m > n and bool((rank == n).all()):
        residuals = (A.matmul(solution) - rhs).abs().pow(2).sum(-2)  # (a vector B: (1,))
    return _Result(("solution", "residuals", "rank", "singular_values"), (
        solution.squeeze(-1) if vector else solution, residuals,
        rank if driver != "gels" else rank.new_zeros((0,)),
        s if driver in ("gelsd", "gelss") else s.new_zeros((0,))))


def _lstsq_shapes(A: Tensor, B: Tensor) -> bool:
    """Is B a (batch of) vector(s)? Else torch's RuntimeError for operands lstsq refuses."""
    name = "torch.linalg.lstsq"
    if A.dtype != B.dtype:
        raise RuntimeError(f"{name}: Expected input and other to have the same dtype, but got "
                           f"input's dtype {_dtype.scalar_type_name(A.dtype)} and other's dtype "
                           f"{_dtype.scalar_type_name(B.dtype)}")
    if A.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if B.ndim < 1:
        raise RuntimeError(f"{name}: other must have at least 1 dimension.")
    if not 0 <= A.ndim - B.ndim <= 1:
        raise RuntimeError(f"{name}: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    vector = B.ndim == 1 or (A.ndim - B.ndim == 1 and B.shape == A.shape[:-1])
    if A.shape[-2] != B.shape[-1 if vector else -2]:
        raise RuntimeError(f"{name}: input.size(-2) should match other.size("
                           f"{-1 if vector else -2})")
    # torch reads the batch of a matrix B with one dim less than A as B.shape[:-1] (each of
    # its rows paired with all of B): measured against torch 2.13
    check_broadcast(tuple(A.shape[:-2]), tuple(B.shape[:-1 if vector or A.ndim > B.ndim else -2]))
    return vector


class _Result(tuple):
    """The named tuple torch.linalg functions return (``.Q``, ``.eigenvalues``, ...)."""

    def __new__(cls, names, values):
        self = super().__new__(cls, values)
        self._names = names
        return self

    def __getattr__(self, name):
        try:
            return self[self._names.index(name)]
        except ValueError:
            raise AttributeError(name) from None


# ---- LU --------------------------------------------------------------------------------------

def lu(A: Tensor, *, pivot: bool = True):
    """(P, L, U) with A = P L U, for square A."""
    if not pivot:
        raise NotImplementedError("linalg.lu(pivot=False) is not supported by disthook (numpy "
                                  "has no unpivoted LU); use pivot=True")
    p, low, up = D.LinalgLu.apply(A)
    return _Result(("P", "L", "U"), (p, low, up))


def lu_factor(A: Tensor, *, pivot: bool = True):
    """(LU, pivots): L below the diagonal and U on and above it in one matrix; pivots in
    LAPACK's form (1-based row swaps)."""
    p, low, up = lu(A, pivot=pivot)
    packed = low.tril(-1) + up
    return _Result(("LU", "pivots"), (packed, _pivots(p)))


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False):
    """(LU, pivots, info): ``info`` as ``inv_ex``'s (the factorization itself exists)."""
    packed, pivots = lu_factor(A, pivot=pivot)
    info = _lu_info(A, "lu_factor_ex")
    _raise_if(check_errors, info, "torch.linalg.lu_factor_ex", "The factorization could not "
              "be completed because the input matrix is singular: U[{0},{0}] is zero.")
    return _Result(("LU", "pivots", "info"), (packed, pivots, _as_info(info)))


def _pivots(p: Tensor) -> Tensor:
    """LAPACK's row swaps (1-based) that produce the permutation P^T."""
    n = p.shape[-1]
    if n == 0:  # 0 x 0 matrices: no swaps
        return Tensor._make(np.zeros(p.shape[:-1], dtype=np.int32), None, 0)
    perm = np.argmax(np.swapaxes(p._data, -1, -2), axis=-1)  # A[perm] = L U
    flat = perm.reshape(-1, n)
    out = np.zeros_like(flat)
    for b, target in enumerate(flat):
        current = list(range(n))
        where = {v: i for i, v in enumerate(current)}
        for k in range(n):
            j = where[target[k]]
            out[b, k] = j + 1
            current[k], current[j] = current[j], current[k]
            where[current[j]], where[current[k]] = j, k
    return Tensor._make(out.reshape(perm.shape).astype(np.int32), None, 0)


def lu_unpack(LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True):
    n = LU_data.shape[-1]
    low = LU_data.tril(-1) + D._eye_like(LU_data)
    up = LU_data.triu()
    piv = LU_pivots._data.reshape(-1, LU_pivots.shape[-1]).astype(np.int64) - 1
    perms = []
    for row in piv:
        perm = list(range(n))
        for k, j in enumerate(row):
            perm[k], perm[j] = perm[j], perm[k]
        perms.append(perm)
    perm = np.array(perms).reshape(LU_pivots.shape[:-1] + (n,))
    p = np.zeros(perm.shape + (n,), dtype=LU_data._data.dtype)
    np.put_along_axis(p, perm[..., None], 1, axis=-1)
    P = Tensor._make(np.swapaxes(p, -1, -2).copy(), None, 0)
    return _Result(("P", "L", "U"), (P, low, up))


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,
             adjoint: bool = False) -> Tensor:
    p, low, up = lu_unpack(LU, pivots)
    A = p.matmul(low).matmul(up)
    return solve(A.mT if adjoint else A, B, left=left)


# ---- Householder representations (LAPACK's geqrf / orgqr / ormqr) -------------------------------

def _check_householder_operands(A: Tensor, tau: Tensor) -> None:
    """torch's checks of householder_product's operands, in its order and words: A at least
    2-D and not wider than tall, tau no longer than A is wide, of one dim fewer than A, with
    A's batch dims exactly (no broadcasting) and A's dtype, a floating one."""
    name = "torch.linalg.householder_product"
    _at_least_2d(A, f"{name}: input must have at least 2 dimensions.")
    if A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    if tau.ndim == 0:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    if A.shape[-1] < tau.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    if A.ndim - tau.ndim != 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but "
                           f"got tau.ndim equal to {tau.ndim} and input.ndim is equal to "
                           f"{A.ndim}")
    if A.ndim > 2 and tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{name}: Expected batch dimensions of tau to be equal to "
                           f"input.shape[:-2], but got {list(tau.shape[:-1])}")
    if tau.dtype != A.dtype:
        raise RuntimeError(f"{name}: tau dtype {_dtype.scalar_type_name(tau.dtype)} does not "
                           f"match input dtype {_dtype.scalar_type_name(A.dtype)}")
    if not A.is_floating_point():
        raise NotImplementedError(
            f'"orgqr_cpu" not implemented for \'{_dtype.scalar_type_name(A.dtype)}\'')


def householder_product(A: Tensor, tau: Tensor) -> Tensor:
    """The first n columns of H_1 H_2 ... H_k, H_i = I - tau_i v_i v_i^T, v_i being column i
    of A below the diagonal with a 1 on it: differentiable in A and tau (made of matmuls)."""
    _check_householder_operands(A, tau)
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    eye = Tensor._make(np.eye(m, dtype=A._data.dtype), None, 0)
    unit = A.tril(-1) + Tensor._make(np.eye(m, n, dtype=A._data.dtype), None, 0)
    q = eye.expand(A.shape[:-2] + (m, m))
    for i in range(k):
        v = unit[..., :, i:i + 1]
        q = q - (q.matmul(v) * tau[..., i:i + 1].unsqueeze(-1)).matmul(v.mT)
    return q[..., :, :n]


def _geqrf(A: Tensor) -> tuple:
    """(a, tau): R on and above the diagonal of a, the Householder vectors below it."""
    flat = A._data.reshape((-1,) + A.shape[-2:])
    packed, taus = [], []
    for mat in flat:
        h, tau = np.linalg.qr(mat, mode="raw")
        packed.append(h.T)
        taus.append(tau)
    a = np.stack(packed).reshape(A.shape)
    tau = np.stack(taus).reshape(A.shape[:-2] + (min(A.shape[-2:]),))
    return Tensor._make(a.astype(A._data.dtype), None, 0), \
        Tensor._make(tau.astype(A._data.dtype), None, 0)


def _ormqr(A: Tensor, tau: Tensor, C: Tensor, left: bool = True, transpose: bool = False):
    """Q C (or C Q, with Q^T when ``transpose``), Q the m x m Householder product of A, tau."""
    q = _square_q(A, tau)
    q = q.mT if transpose else q
    return q.matmul(C) if left else C.matmul(q)


def _square_q(A: Tensor, tau: Tensor) -> Tensor:
    """All m columns of the Householder product (A cut or padded with zeros to m columns)."""
    from disthook.tensor import cat

    m, n = A.shape[-2:]
    if n >= m:
        return householder_product(A[..., :, :m], tau)
    return householder_product(cat([A, A.new_zeros(A.shape[:-1] + (m - n,))], -1), tau)


# ---- more --------------------------------------------------------------------------------------

def cond(A: Tensor, p=None) -> Tensor:
    """The condition number: s_max / s_min for p None / 2 (s_min / s_max for -2), else
    norm(A, p) * norm(inv(A), p)."""
    _at_least_2d(A, "linalg.cond: The input tensor must have at least 2 dimensions.")
    if p in (None, 2, -2):
        s = svdvals(A)
        if not s.shape[-1]:  # an empty matrix: 0, as torch's
            return s.sum(-1)
        ratio = s.amax(-1) / s.amin(-1)
        return ratio if p != -2 else ratio.reciprocal()
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False):
    """(result, info): ``info`` as ``inv_ex``'s (LU's first zero pivot, 1-based, per matrix);
    where A is singular the result is undefined in torch, NaN here. Nothing raises unless
    ``check_errors``."""
    vector, batch = _solve_shapes(A, B, left, "linalg.solve")
    info = _lu_info(A, "solve_ex")
    _raise_if(check_errors, info, "torch.linalg.solve_ex", "The solver failed because the "
              "input matrix is singular.")
    if not info.any():
        return _Result(("result", "info"), (_solve(A, B, vector, batch, left), _as_info(info)))
    bad = np.asarray(info != 0)
    singular = Tensor._make(bad[..., None, None], None, 0)
    safe = A.masked_fill(singular, 0) + _eye(A) * singular.to(A.dtype)  # solvable: an identity
    result = _solve(safe, B, vector, batch, left)
    mask = np.broadcast_to(bad[..., None] if vector else bad[..., None, None], result.shape)
    result = result.masked_fill(Tensor._make(np.ascontiguousarray(mask), None, 0), float("nan"))
    return _Result(("result", "info"), (result, _as_info(info)))


def tensorinv(A: Tensor, ind: int = 2) -> Tensor:
    """The inverse of A seen as a map from its last dims to its first ``ind`` dims."""
    out_shape, in_shape = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    rows = int(np.prod(out_shape))
    if rows != int(np.prod(in_shape)):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {int(np.prod(in_shape))} != {rows}")
    return inv(A.reshape(rows, rows)).reshape(in_shape + out_shape)


def tensorsolve(A: Tensor, B: Tensor, dims=None) -> Tensor:
    """X with tensordot(A, X, X.ndim) = B."""
    if dims is not None:
        dims = [d % A.ndim for d in dims]
        A = A.permute(*[d for d in range(A.ndim) if d not in dims], *dims)
    x_shape = tuple(A.shape[B.ndim:])
    n = int(np.prod(x_shape))
    return solve(A.reshape(-1, n), B.reshape(-1)).reshape(x_shape)


def vander(x: Tensor, *, N: int | None = None) -> Tensor:
    """Increasing powers of x along a new last dim: x^0, x^1, ..., x^(N-1)."""
    from disthook.tensor import stack

    n = x.shape[-1] if N is None else N
    if n < 1:
        raise RuntimeError("N must be greater than 1.")
    powers = [x.new_ones(x.shape)] + [x ** k for k in range(1, n)]
    return stack(powers, -1)


def _check_eig_input(A: Tensor, name: str) -> None:
    """torch's own refusals of an eig input (fewer than 2 dims, not square, not floating),
    which come before disthook's of the complex result."""
    D.check_square(tuple(A.shape), name)
    if not (A.is_floating_point() or A.is_complex()):
        raise RuntimeError(f"Unknown Complex ScalarType for {_dtype.scalar_type_name(A.dtype)}")


def eigvals(A: Tensor) -> Tensor:
    return _eig(A, "linalg.eigvals")[0]


def eig(A: Tensor):
    return _Result(("eigenvalues", "eigenvectors"), _eig(A, "linalg.eig"))


def _eig(A: Tensor, name: str) -> tuple:
    """Eigenvalues and eigenvectors of a general square matrix, complex (as torch's, even for
    real ones), each eigenvector of norm 1 (LAPACK's geev, as torch); no gradient here."""
    _check_eig_input(A, name)
    _no_gradient_through(A, name)
    if A.dtype in (_dtype.float16, _dtype.bfloat16):
        raise NotImplementedError(f'"linalg_eig_out_cpu" not implemented for '
                                  f"'{_dtype.scalar_type_name(A.dtype)}'")
    values, vectors = np.linalg.eig(A.detach().numpy())
    kind = (A.dtype if A.is_complex() else A.dtype.to_complex()).np
    return Tensor._make(values.astype(kind), None, 0), Tensor._make(vectors.astype(kind), None, 0)
    raise NotImplementedError("linalg.eig returns complex tensors, which disthook does not "
                              "have; for symmetric matrices use linalg.eigh")
