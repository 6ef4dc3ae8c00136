"""torch functions that are not Tensor methods: stacking and splitting helpers, grids and
products of several tensors, index builders, bucketing, windows, dtype queries, and the
process-wide settings that a numpy engine answers trivially. ``disthook/__init__.py``
exports them."""
from __future__ import annotations

import builtins
import itertools
import math

import numpy as np

from disthook import _dtype
from disthook._limits import contiguous_format
from disthook._out import factory_out
from disthook.amp import cpu_policy
from disthook.ops import margin as _margin
from disthook.ops.base import refuse_complex
from disthook.tensor import Tensor, _factory, cat, stack, tensor

__all__ = [
    "alias_copy", "as_strided_copy", "asarray", "atleast_1d", "atleast_2d", "atleast_3d",
    "bartlett_window", "batch_norm", "binary_cross_entropy_with_logits", "binomial",
    "blackman_window", "block_diag", "bucketize", "can_cast", "cartesian_prod", "cdist",
    "chain_matmul", "cholesky_inverse", "cholesky_solve", "column_stack", "combinations",
    "constant_pad_nd", "cumulative_trapezoid", "detach_copy", "diagonal_copy", "dropout_",
    "dstack", "eig", "embedding", "empty_strided", "expand_copy", "fill", "frobenius_norm",
    "frombuffer", "geqrf", "gradient", "hamming_window", "hann_window", "histogramdd",
    "hstack", "instance_norm", "is_complex", "is_conj", "is_inference", "is_neg",
    "is_nonzero", "is_same_size", "is_signed", "is_storage", "isin", "kaiser_window",
    "logspace", "lstsq", "lu", "lu_solve", "lu_unpack", "matrix_rank",
    "max_pool1d_with_indices", "meshgrid", "nuclear_norm", "orgqr", "ormqr", "permute_copy",
    "poisson", "polygamma", "promote_types", "randint_like", "range", "result_type",
    "row_stack", "rsub", "scalar_tensor", "searchsorted", "select_copy", "slice_copy",
    "solve", "split_copy", "split_with_sizes_copy", "squeeze_copy", "symeig", "t_copy",
    "tensordot", "transpose_copy", "trapezoid", "trapz", "triangular_solve", "tril_indices",
    "triu_indices", "typename", "unbind_copy", "unfold_copy", "unique_consecutive",
    "unravel_index", "unsqueeze_copy", "vander", "view_copy", "vstack",
]


def _refuse_complex(name: str, *values) -> None:
    """These compute on numpy directly (no op's gate): a complex tensor among ``values`` is
    refused here, as torch refuses it."""
    for v in values:
        if isinstance(v, Tensor) and v._data.dtype.kind == "c":
            refuse_complex(name, v)


# ---- dimensions and stacking ----------------------------------------------------------------


def _atleast(n: int, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    out = []
    for t in tensors:
        if t.ndim >= n:
            out.append(t)
        elif n == 1 or t.ndim == 0:
            out.append(t.reshape((1,) * n))
        elif n == 2:
            out.append(t.unsqueeze(0))
        else:  # 3-d from 1-d (1, n, 1) or 2-d (r, c, 1)
            out.append(t.reshape(1, -1, 1) if t.ndim == 1 else t.unsqueeze(-1))
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*tensors):
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    return _atleast(3, tensors)


def hstack(tensors) -> Tensor:
    ts = [atleast_1d(t) for t in tensors]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    return cat([atleast_2d(t) for t in tensors], 0)


row_stack = vstack


def dstack(tensors) -> Tensor:
    return cat([atleast_3d(t) for t in tensors], 2)


def column_stack(tensors) -> Tensor:
    return cat([t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors], 1)


def block_diag(*tensors) -> Tensor:
    mats = [t.reshape(1, -1) if t.ndim == 1 else t.reshape(1, 1) if t.ndim == 0 else t
            for t in tensors]
    for t in mats:
        if t.ndim != 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {mats.index(t)} has {t.ndim} dimensions")
    dt = np.result_type(*[t._data.dtype for t in mats]) if mats else np.float32
    rows = builtins.sum(t.shape[0] for t in mats)
    cols = builtins.sum(t.shape[1] for t in mats)
    blocks, c = [], 0
    for t in mats:
        left = t.new_zeros((t.shape[0], c), dtype=_dtype.from_numpy_dtype(dt))
        right = t.new_zeros((t.shape[0], cols - c - t.shape[1]),
                            dtype=_dtype.from_numpy_dtype(dt))
        blocks.append(cat([left, t.to(_dtype.from_numpy_dtype(dt)), right], 1))
        c += t.shape[1]
    if not blocks:
        return tensor(np.zeros((rows, cols), dtype=dt))
    return cat(blocks, 0)


def meshgrid(*tensors, indexing: str | None = None):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    indexing = indexing or "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    ts = list(tensors)
    shape = tuple(t.numel() for t in ts)
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = -1
        out.append(t.reshape(view).expand(shape))
    if indexing == "xy" and len(ts) >= 2:  # the first two dims swapped: x runs along columns
        out = [o.transpose(0, 1) for o in out]
    return tuple(out)


def cartesian_prod(*tensors) -> Tensor:
    if len(tensors) == 1:
        return tensors[0]
    return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    pick = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    idx = list(pick(builtins.range(input.shape[0]), r))
    if not idx:
        return input.new_zeros((0,) if r == 0 else (0, r))
    index = tensor(np.array(idx, dtype=np.int64))
    return input[index.reshape(-1)].reshape(len(idx), r)


@cpu_policy.covered(cpu_policy.LOWER)
def tensordot(a: Tensor, b: Tensor, dims=2, out=None) -> Tensor:
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, (int, np.integer)):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(builtins.range(a.ndim - dims, a.ndim)), list(builtins.range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    da = [a._dim(d) for d in da]
    db = [b._dim(d) for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a.shape[x]} in dim {x} and second has size {b.shape[y]} in "
                               f"dim {y}")
    free_a = [d for d in builtins.range(a.ndim) if d not in da]
    free_b = [d for d in builtins.range(b.ndim) if d not in db]
    k = int(np.prod([a.shape[d] for d in da]))
    left = a.permute(*free_a, *da).reshape(-1, k)
    right = b.permute(*db, *free_b).reshape(k, -1)
    shape = [a.shape[d] for d in free_a] + [b.shape[d] for d in free_b]
    return left.mm(right).reshape(shape)


def chain_matmul(*matrices) -> Tensor:
    out = matrices[0]
    for m in matrices[1:]:
        out = out.mm(m)
    return out


@cpu_policy.covered(cpu_policy.FP32)
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode=None) -> Tensor:
    by_product = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or compute_mode in (
        None, "use_mm_for_euclid_dist_if_necessary") and max(x1.shape[-2], x2.shape[-2]) > 25)
    _margin.check_distance_dtypes("cdist", x1, x2, by_product)
    if by_product:  # torch's matrix-product form, composed of ops: it differentiates twice
        return (x1.unsqueeze(-2) - x2.unsqueeze(-3)).norm(2, dim=-1)
    return _margin.Cdist.apply(x1, x2, p=float(p))


def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:
    n = x.shape[0] if N is None else N
    powers = [x.pow(k) if k else x.new_ones(x.shape) for k in builtins.range(n)]
    if not increasing:
        powers = powers[::-1]
    out = stack(powers, 1) if powers else x.new_zeros((x.shape[0], 0))
    return out if out.dtype.np.kind != "b" else out.long()


def polygamma(n: int, input: Tensor) -> Tensor:
    return input.polygamma(n)


# ---- index builders and bucketing ---------------------------------------------------------------

def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None,
                 layout=None) -> Tensor:
    r, c = np.tril_indices(row, offset, col)
    return tensor(np.stack([r, c]).astype((dtype or _dtype.int64).np))


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None,
                 layout=None) -> Tensor:
    r, c = np.triu_indices(row, offset, col)
    return tensor(np.stack([r, c]).astype((dtype or _dtype.int64).np))


def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None, sorter=None) -> Tensor:
    if side is not None:
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites,"
                               " got side of left while right was True")
        right = side == "right"
    seq = sorted_sequence._data
    _refuse_complex("searchsorted", sorted_sequence, input)
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter._data, -1)
    values = input._data if isinstance(input, Tensor) else np.asarray(input)
    how = "right" if right else "left"
    if seq.ndim == 1:
        out = np.searchsorted(seq, values, side=how)
    else:
        if seq.shape[:-1] != values.shape[:-1]:
            raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or"
                               " the first N-1 dimensions of boundaries tensor and input value "
                               "tensor must match")
        flat_s = seq.reshape(-1, seq.shape[-1])
        flat_v = values.reshape(-1, values.shape[-1])
        out = np.stack([np.searchsorted(s, v, side=how) for s, v in zip(flat_s, flat_v)])
        out = out.reshape(values.shape)
    return tensor(np.asarray(out).astype(np.int32 if out_int32 else np.int64))


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False):
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def unravel_index(indices, shape) -> tuple:
    idx = indices._data if isinstance(indices, Tensor) else np.asarray(indices)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    size = int(np.prod(shape))
    if ((idx < -size) | (idx >= size)).any():
        raise RuntimeError("index out of bounds for the given shape")
    return tuple(tensor(a.astype(np.int64)) for a in np.unravel_index(idx % max(size, 1), shape))


# ---- integration ------------------------------------------------------------------------------

def _trapezoids(y: Tensor, x, dx, dim: int) -> tuple:
    """The area of each trapezoid along ``dim`` (spacing ``x`` coordinates, else ``dx``)."""
    d = y._dim(dim)
    n = y.shape[d]
    left, right = y.narrow(d, 0, max(n - 1, 0)), y.narrow(d, 1, max(n - 1, 0))
    if x is None:
        return (left + right) * ((1.0 if dx is None else dx) / 2), d
    spacing = x.diff(dim=-1 if x.ndim == 1 else d)
    if x.ndim == 1:
        shape = [1] * y.ndim
        shape[d] = -1
        spacing = spacing.reshape(shape)
    return (left + right) * spacing / 2, d


def trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    areas, d = _trapezoids(y, x, dx, dim)
    return areas.sum(d)


trapz = trapezoid


def cumulative_trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    areas, d = _trapezoids(y, x, dx, dim)
    return areas.cumsum(d)


# ---- factories -------------------------------------------------------------------------------

@factory_out
def logspace(start, end, steps, base=10.0, *, dtype=None, device=None,
             requires_grad=False) -> Tensor:
    dt = (dtype or _dtype.get_default_dtype()).np
    return _factory(np.logspace(start, end, steps, base=base).astype(dt), requires_grad, device)


@factory_out
def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """Deprecated in torch: like arange but including ``end``."""
    if end is None:
        start, end = 0, start
    count = math.floor((end - start) / step) + 1
    dt = (dtype or _dtype.get_default_dtype()).np
    return _factory((start + step * np.arange(count)).astype(dt), requires_grad, device)


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt = (dtype or _dtype.get_default_dtype()).np
    return _factory(np.asarray(s, dtype=dt), requires_grad, device)


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt = (dtype or _dtype.get_default_dtype()).np
    n = 1 + builtins.sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    base = tensor(np.zeros(max(n, 1), dtype=dt))
    out = base.as_strided(tuple(size), tuple(stride), 0)
    return out.requires_grad_(requires_grad) if requires_grad else out


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False) -> Tensor:
    if isinstance(obj, Tensor):
        out = obj if dtype is None else obj.to(dtype)
        out = out.clone() if copy else out
    elif isinstance(obj, np.ndarray) and not copy and (dtype is None or
                                                       _dtype.to_dtype(dtype).np == obj.dtype):
        from disthook.tensor import from_numpy

        out = from_numpy(obj)
    else:
        out = tensor(obj, dtype=dtype)
    return out.requires_grad_(True) if requires_grad else out


def frombuffer(buffer, *, dtype, count: int = -1, offset: int = 0,
               requires_grad: bool = False) -> Tensor:
    from disthook.tensor import from_numpy

    arr = np.frombuffer(buffer, dtype=_dtype.to_dtype(dtype).np, count=count, offset=offset)
    out = from_numpy(arr)
    return out.requires_grad_(True) if requires_grad else out


def _window(name: str, fn):
    def window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
               requires_grad=False) -> Tensor:
        dt = (dtype or _dtype.get_default_dtype()).np
        if window_length == 0:
            return _factory(np.zeros(0, dt), requires_grad, device)
        if window_length == 1:
            return _factory(np.ones(1, dt), requires_grad, device)
        n = window_length + 1 if periodic else window_length
        w = fn(n)[:window_length]
        return _factory(w.astype(dt), requires_grad, device)

    window.__name__ = name
    window.__doc__ = f"``torch.{name}``: the window of that name, periodic by default."
    return window


hann_window = _window("hann_window", np.hanning)
hamming_window = _window("hamming_window", np.hamming)
bartlett_window = _window("bartlett_window", np.bartlett)
blackman_window = _window("blackman_window", np.blackman)


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *,
                  dtype=None, device=None, requires_grad=False) -> Tensor:
    dt = (dtype or _dtype.get_default_dtype()).np
    if window_length <= 1:
        return _factory(np.ones(window_length, dt), requires_grad, device)
    n = window_length + 1 if periodic else window_length
    return _factory(np.kaiser(n, beta)[:window_length].astype(dt), requires_grad, device)


# ---- dtypes ------------------------------------------------------------------------------------

def result_type(tensor1, tensor2):
    from disthook.ops.base import result_dtype

    a = tensor1 if isinstance(tensor1, Tensor) else tensor(tensor1)
    if not isinstance(tensor1, Tensor) and not isinstance(tensor2, Tensor):
        return _dtype.from_numpy_dtype(np.result_type(a._data, np.asarray(tensor2)))
    if not isinstance(tensor1, Tensor):
        tensor1, tensor2 = tensor2, tensor1
    return _dtype.from_numpy_dtype(result_dtype(tensor1, tensor2))


def promote_types(type1, type2):
    from disthook.ops.base import _category

    a, b = type1.np, type2.np
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return type1 if ca > cb else type2
    return _dtype.from_numpy_dtype(np.promote_types(a, b))


def can_cast(from_, to) -> bool:
    return _dtype.can_cast(from_.np, to.np)


def is_complex(input: Tensor) -> bool:
    return input.is_complex()


def is_nonzero(input: Tensor) -> bool:
    return input.is_nonzero()


def is_same_size(input: Tensor, other: Tensor) -> bool:
    return input.is_same_size(other)


def is_signed(input: Tensor) -> bool:
    return input.is_signed()


def is_conj(input: Tensor) -> bool:
    return False


is_neg = is_conj


def is_inference(input: Tensor) -> bool:
    return input.is_inference()


def is_storage(obj) -> bool:
    from disthook.storage import UntypedStorage

    return isinstance(obj, UntypedStorage)


def typename(obj) -> str:
    if isinstance(obj, Tensor):
        return obj.type()
    kind = type(obj)
    return kind.__name__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


# ---- functions of a tensor that are not its methods ----------------------------------------------

def fill(input: Tensor, value) -> Tensor:
    return input.clone().fill_(value)


def rsub(input: Tensor, other, *, alpha=1) -> Tensor:
    """other - alpha * input."""
    return (input * alpha if alpha != 1 else input).__rsub__(other)


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    _refuse_complex("isin", elements, test_elements)
    e = elements._data if isinstance(elements, Tensor) else np.asarray(elements)
    t = test_elements._data if isinstance(test_elements, Tensor) else np.asarray(test_elements)
    return tensor(np.isin(e, t, invert=invert))


def unique_consecutive(input: Tensor, return_inverse=False, return_counts=False, dim=None):
    return input.unique_consecutive(return_inverse, return_counts, dim)


def matrix_rank(input: Tensor, tol=None, symmetric: bool = False) -> Tensor:
    from disthook import linalg

    return linalg.matrix_rank(input, atol=tol)


def frobenius_norm(input: Tensor, dim=(-2, -1), keepdim: bool = False) -> Tensor:
    return input.norm(2, dim, keepdim)


def nuclear_norm(input: Tensor, dim=(-2, -1), keepdim: bool = False) -> Tensor:
    from disthook import linalg

    return linalg.matrix_norm(input, "nuc", dim, keepdim)


def cholesky_inverse(input: Tensor, upper: bool = False) -> Tensor:
    return input.cholesky_inverse(upper)


def cholesky_solve(input: Tensor, input2: Tensor, upper: bool = False) -> Tensor:
    return input.cholesky_solve(input2, upper)


def triangular_solve(b: Tensor, A: Tensor, upper=True, transpose=False, unitriangular=False):
    return b.triangular_solve(A, upper, transpose, unitriangular)


def randint_like(input: Tensor, low=0, high=None, *, dtype=None, device=None,
                 requires_grad=False, generator=None, memory_format=None) -> Tensor:
    from disthook import randint
    from disthook._limits import check_memory_format

    check_memory_format(memory_format, "randint_like")
    _refuse_complex("randint_like", input)

    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype, device=device,
                   requires_grad=requires_grad, generator=generator)


def binomial(count: Tensor, prob: Tensor, generator=None) -> Tensor:
    from disthook import random

    draws = random.gen(generator).binomial(count._data.astype(np.int64), prob._data)
    return tensor(draws.astype(count._data.dtype))


def poisson(input: Tensor, generator=None) -> Tensor:
    from disthook import random

    return tensor(random.gen(generator).poisson(input._data).astype(input._data.dtype))


def histogramdd(input: Tensor, bins=10, *, range=None, weight=None, density=False):
    from disthook.tensor import _ValuesIndices

    _refuse_complex("histogramdd", input)

    b = [x._data for x in bins] if isinstance(bins, (list, tuple)) and bins and isinstance(
        bins[0], Tensor) else bins
    bounds = None if range is None else [range[i:i + 2] for i in builtins.range(0, len(range), 2)]
    w = None if weight is None else weight._data
    x = input._data.reshape(-1, input.shape[-1])
    hist, edges = np.histogramdd(x, bins=b, range=bounds, weights=w, density=density)
    dt = input._data.dtype
    return _ValuesIndices(tensor(hist.astype(dt)), [tensor(e.astype(dt)) for e in edges],
                          "histogramdd")


def gradient(input: Tensor, *, spacing=1, dim=None, edge_order: int = 1) -> tuple:
    """Central differences inside, one-sided at the edges (uniform spacing per dim)."""
    dims = builtins.range(input.ndim) if dim is None else \
        ([dim] if isinstance(dim, int) else list(dim))
    dims = [input._dim(d) for d in dims]
    steps = spacing if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(steps) != len(dims):
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or a "
                           f"list of length {len(dims)}, but got a list of length {len(steps)}")
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    out = []
    for d, h in zip(dims, steps):
        if isinstance(h, Tensor):
            if h.ndim != 0:
                raise NotImplementedError("torch.gradient with coordinate tensors is not "
                                          "supported by disthook; pass the (uniform) spacing")
            h = h.item()
        n = input.shape[d]
        if n < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least "
                               "edge_order+1")
        f = input._floating()
        inner = (f.narrow(d, 2, n - 2) - f.narrow(d, 0, n - 2)) / (2 * h)
        if edge_order == 1:
            first = (f.narrow(d, 1, 1) - f.narrow(d, 0, 1)) / h
            last = (f.narrow(d, n - 1, 1) - f.narrow(d, n - 2, 1)) / h
        else:
            first = (-1.5 * f.narrow(d, 0, 1) + 2 * f.narrow(d, 1, 1) - 0.5 * f.narrow(d, 2, 1)) / h
            last = (0.5 * f.narrow(d, n - 3, 1) - 2 * f.narrow(d, n - 2, 1)
                    + 1.5 * f.narrow(d, n - 1, 1)) / h
        out.append(cat([first, inner, last], d))
    return tuple(out)


def lu(A: Tensor, pivot: bool = True, get_infos: bool = False):
    """``torch.lu``: (LU, pivots) as ``linalg.lu_factor``, with the infos when asked."""
    from disthook import linalg

    packed, pivots = linalg.lu_factor(A, pivot=pivot)
    return (packed, pivots, linalg._info(A)) if get_infos else (packed, pivots)


def lu_unpack(LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True):
    from disthook import linalg

    return linalg.lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


def lu_solve(b: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:
    from disthook import linalg

    return linalg.lu_solve(LU_data, LU_pivots, b)


def geqrf(input: Tensor):
    """LAPACK's QR in Householder form: (a, tau)."""
    from disthook import linalg

    a, tau = linalg._geqrf(input)
    from disthook.tensor import _ValuesIndices

    return _ValuesIndices(a, tau, "geqrf")


def orgqr(input: Tensor, tau: Tensor) -> Tensor:
    from disthook import linalg

    return linalg.householder_product(input, tau)


def ormqr(input: Tensor, tau: Tensor, other: Tensor, left: bool = True,
          transpose: bool = False) -> Tensor:
    from disthook import linalg

    return linalg._ormqr(input, tau, other, left, transpose)


def _removed(name: str, instead: str):
    def fn(*args, **kwargs):
        raise RuntimeError(f"torch.{name} was removed in torch 1.9 (deprecated since then); "
                           f"use {instead} instead.")

    fn.__name__ = name
    return fn


solve = _removed("solve", "torch.linalg.solve(A, B) (its arguments are in the other order)")
lstsq = _removed("lstsq", "torch.linalg.lstsq(A, B) (its arguments are in the other order)")
symeig = _removed("symeig", "torch.linalg.eigh or torch.linalg.eigvalsh")
eig = _removed("eig", "torch.linalg.eig, whose results are complex (not supported by "
                      "disthook); for symmetric matrices torch.linalg.eigh")


# ---- copies of views: ``<view>_copy`` is the view's values in new memory --------------------------

def _c_copy(t: Tensor) -> Tensor:
    # (torch's ``*_copy`` ops give C order, where clone() would keep a view's strides)
    return t.clone(memory_format=contiguous_format)


def _copy_of(view: str):
    def fn(input: Tensor, *args, **kwargs):
        out = getattr(input, view)(*args, **kwargs)
        return tuple(_c_copy(o) for o in out) if isinstance(out, tuple) else _c_copy(out)

    fn.__name__ = view + "_copy"
    fn.__doc__ = f"``torch.{view}_copy``: ``{view}`` without aliasing the input."
    return fn


def slice_copy(input: Tensor, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:
    d = input._dim(dim)
    return _c_copy(input[(builtins.slice(None),) * d + (builtins.slice(start, end, step),)])


def alias_copy(input: Tensor) -> Tensor:
    return _c_copy(input)


as_strided_copy = _copy_of("as_strided")
detach_copy = _copy_of("detach")
diagonal_copy = _copy_of("diagonal")
expand_copy = _copy_of("expand")
permute_copy = _copy_of("permute")
select_copy = _copy_of("select")
split_copy = _copy_of("split")
split_with_sizes_copy = _copy_of("split_with_sizes")
squeeze_copy = _copy_of("squeeze")
t_copy = _copy_of("t")
transpose_copy = _copy_of("transpose")
unbind_copy = _copy_of("unbind")
unfold_copy = _copy_of("unfold")
unsqueeze_copy = _copy_of("unsqueeze")
view_copy = _copy_of("view")


# ---- nn functions that torch also exports at the top level ------------------------------------

# same positional order as in torch.nn.functional: exported as they are, where nn has them
NN_ALIASES = (
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "dropout", "alpha_dropout", "feature_alpha_dropout", "layer_norm", "group_norm",
    "pixel_shuffle", "pixel_unshuffle", "cosine_similarity", "pairwise_distance", "pdist",
    "celu", "selu", "rrelu", "threshold", "hardshrink", "prelu", "bilinear", "max_pool1d",
    "max_pool2d", "max_pool3d", "avg_pool1d", "adaptive_avg_pool1d", "channel_shuffle",
    "rms_norm", "celu_", "selu_", "rrelu_", "threshold_",
)


def embedding(weight: Tensor, indices: Tensor, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """``torch.embedding(weight, indices)``: the weight comes first here (not in F)."""
    from disthook.nn import functional as F

    return F.embedding(indices, weight, padding_idx=None if padding_idx < 0 else padding_idx,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled=True) -> Tensor:
    """``torch.batch_norm``: weight and bias before the running statistics (not as in F)."""
    from disthook.nn import functional as F

    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                        eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn_enabled=True) -> Tensor:
    """``torch.instance_norm``: weight and bias before the running statistics."""
    from disthook.nn import functional as F

    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                           momentum, eps)


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # torch's top-level losses take these ints


@cpu_policy.covered(cpu_policy.FP32)
def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None,
                                     reduction: int = 1) -> Tensor:
    """``torch.binary_cross_entropy_with_logits``: ``reduction`` is 0 / 1 / 2 (none, mean,
    sum), as torch's top-level form takes it."""
    from disthook.nn import functional as F

    return F.binary_cross_entropy_with_logits(input, target, weight,
                                              reduction=_REDUCTIONS[int(reduction)],
                                              pos_weight=pos_weight)


def constant_pad_nd(input: Tensor, pad, value=0) -> Tensor:
    from disthook.nn import functional as F

    return F.pad(input, list(pad), "constant", value)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False):
    from disthook.nn import functional as F

    return F.max_pool1d(input, kernel_size, stride if stride else None, padding, dilation,
                        ceil_mode, return_indices=True)


def dropout_(input: Tensor, p: float, train: bool) -> Tensor:
    from disthook.nn import functional as F

    return F.dropout(input, p, train, inplace=True)


def _nn_alias(name: str):
    from disthook.nn import functional as F

    return getattr(F, name, None)
