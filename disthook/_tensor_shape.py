"""Tensor methods for shapes, views, indexing and storage metadata: flip/rot90/movedim/tile,
diagonals, unfold/as_strided, the split family, index_add/copy/fill, masked_select/scatter,
nonzero, the ``*_scatter`` ops, storage queries. Thin: each is one op from ``disthook.ops``
or a composition of Tensor methods.

``Tensor`` inherits ``ShapeMethods``; the methods reach the Tensor machinery through ``self``.
"""
from __future__ import annotations

import builtins
import itertools

import numpy as np

from disthook import _dtype
from disthook._limits import contiguous_format
from disthook.autograd import inference
from disthook.ops import views as V
from disthook.ops.base import check_broadcast, refuse_complex
from disthook.ops.reduce import norm_dims


def _tensor_cls():
    from disthook.tensor import Tensor

    return Tensor


def by_keyword(args: tuple, given, name: str, fn: str) -> tuple:
    """The ``*args`` of a method that takes its sizes or dims one by one or as torch's keyword
    ``name`` (``flip(dims=[0])``, ``view(size=(6, 4))``, ``zeros(size=(2, 3))``): ``args``,
    or ``(given,)`` when given by keyword; both at once is torch's TypeError."""
    if given is None:
        return args
    if args:
        raise TypeError(f"{fn}() got multiple values for argument '{name}'")
    if not isinstance(given, (tuple, list)):  # a bare int is a size only when positional
        raise TypeError(f"{fn}(): argument '{name}' must be tuple of ints, not "
                        f"{type(given).__name__}")
    return (given,)


def _ints(args) -> tuple:
    """``f(1, 2)`` or ``f((1, 2))`` / ``f([1, 2])``: the ints as a tuple."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(int(a) for a in args[0])
    return tuple(int(a) for a in args)


# what torch without an accelerator says when asked for one (device 0, pinned memory)
NO_ACCELERATOR = "Cannot access accelerator device when none is available."

class ShapeMethods:
    """Shape, view, indexing and storage methods of Tensor."""

    __slots__ = ()

    # ---- reordering ------------------------------------------------------------------------
    def flip(self, *args, dims=None):
        dims = _ints(by_keyword(args, dims, "dims", "flip"))
        return V.Flip.apply(self, dims=norm_dims(dims, self.ndim) or ())

    def fliplr(self):
        if self.ndim < 2:
            raise RuntimeError("Input must be >= 2-d.")
        return self.flip(1)

    def flipud(self):
        if self.ndim < 1:
            raise RuntimeError("Input must be >= 1-d.")
        return self.flip(0)

    def rot90(self, k=1, dims=(0, 1)):
        if len(dims) != 2:
            raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
        if self.ndim < 2:
            raise RuntimeError(f"expected total dims >= 2, but got total dims = {self.ndim}")
        d0, d1 = self._dim(dims[0]), self._dim(dims[1])
        if d0 == d1:
            raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} "
                               f"and dim1 = {d1}")
        k = k % 4
        if k == 1:
            return self.flip(d1).transpose(d0, d1)
        if k == 2:
            return self.flip(d0, d1)
        if k == 3:
            return self.flip(d0).transpose(d0, d1)
        return self.clone()

    def movedim(self, source, destination):
        src = (source,) if isinstance(source, int) else tuple(source)
        dst = (destination,) if isinstance(destination, int) else tuple(destination)
        if len(src) != len(dst):
            raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)}"
                               f" dims) should contain the same number of dims as destination "
                               f"({list(dst)} dims)")
        src = [self._dim(d) for d in src]
        dst = [self._dim(d) for d in dst]
        order = [d for d in range(self.ndim) if d not in src]
        perm = [None] * self.ndim
        for s, d in zip(src, dst):
            perm[d] = s
        rest = iter(order)
        perm = [p if p is not None else next(rest) for p in perm]
        return self.permute(*perm)

    moveaxis = movedim

    def swapdims(self, dim0, dim1):
        return self.transpose(dim0, dim1)

    def tile(self, *args, dims=None):
        reps = _ints(by_keyword(args, dims, "dims", "tile"))
        if len(reps) < self.ndim:
            reps = (1,) * (self.ndim - len(reps)) + reps
        return self.repeat(*reps)

    def ravel(self):
        return self.reshape(-1)

    def _matrices(self, what: str):
        if self.ndim < 2:
            raise RuntimeError(f"tensor.{what} is only supported on matrices or batches of "
                               f"matrices. Got {self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    def adjoint(self):
        return self._matrices("adjoint()").conj()  # (conj: a no-op for a real tensor)

    @property
    def H(self):
        if self.ndim != 2:
            raise RuntimeError("tensor.H is only supported on matrices (2-D tensors). Got "
                               f"{self.ndim}-D tensor.")
        return self.t().conj()

    @property
    def mH(self):
        return self._matrices("mH").conj()

    def sum_to_size(self, *args, size=None):
        from disthook.ops.base import sum_to

        shape = _ints(by_keyword(args, size, "size", "sum_to_size"))
        try:
            return sum_to(self, shape)
        except ValueError:
            raise RuntimeError(f"size {{{list(shape)}}} is not expandable to size "
                               f"{{{list(self.shape)}}}.") from None

    # ---- diagonals ----------------------------------------------------------------------------
    def diagonal(self, offset=0, dim1=0, dim2=1):
        d1, d2 = self._dim(dim1), self._dim(dim2)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        return V.Diagonal.apply(self, offset=offset, dim1=d1, dim2=d2)

    def diag_embed(self, offset=0, dim1=-2, dim2=-1):
        n = self.ndim + 1
        d1, d2 = dim1 % n, dim2 % n
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        size = self.shape[-1] + builtins.abs(offset) if self.ndim else 1 + builtins.abs(offset)
        rest = list(self.shape[:-1])
        shape = []
        for d in range(n):
            shape.append(size if d in (d1, d2) else rest.pop(0))
        src = self if self.ndim else self.reshape(1)
        return V.DiagEmbed.apply(src, shape=tuple(shape), offset=offset, dim1=d1, dim2=d2)

    def diag(self, diagonal=0):
        if self.ndim == 1:
            return self.diag_embed(diagonal, 0, 1)
        if self.ndim == 2:
            return self.diagonal(diagonal)
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {self.ndim}D")

    def diagflat(self, offset=0):
        return self.reshape(-1).diag(offset)

    def fill_diagonal_(self, fill_value, wrap=False):
        if self.ndim < 2:
            raise RuntimeError("dimensions must larger than 1")
        if self.ndim > 2 and len(set(self.shape)) != 1:
            raise RuntimeError("all dimensions of input must be of equal length")
        mask = np.zeros(self.shape, dtype=bool)
        if self.ndim == 2:
            rows, cols = self.shape
            step = cols + 1
            flat = np.arange(0, rows * cols if wrap or rows <= cols else cols * cols, step)
            mask.reshape(-1)[flat] = True
        else:
            mask[(np.arange(self.shape[0]),) * self.ndim] = True
        return self.masked_fill_(self._make(mask, None, 0), fill_value)

    # ---- windows and strides -------------------------------------------------------------------
    def unfold(self, dimension, size, step):
        d = self._dim(dimension) if self.ndim else 0
        n = self.shape[d] if self.ndim else 1
        if size > n:
            raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is "
                               f"{size}")
        if step <= 0:
            raise RuntimeError(f"step is {step} but must be > 0")
        return V.Unfold.apply(self, dim=d, size=size, step=step)

    def as_strided(self, size, stride, storage_offset=None):
        offset = None if storage_offset is None else int(storage_offset)
        return V.AsStridedView.apply(self, size=_ints((size,)), stride=_ints((stride,)),
                                     offset=offset)

    def storage_offset(self) -> int:
        return V.storage_offset(self._data)

    def untyped_storage(self):
        from disthook.storage import UntypedStorage

        return UntypedStorage(V.storage_root(self._data))

    def storage(self):
        from disthook.storage import TypedStorage

        return TypedStorage(V.storage_root(self._data))

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    @property
    def itemsize(self) -> int:
        return self._data.itemsize

    @property
    def is_cpu(self) -> bool:
        return True

    @property
    def layout(self):
        from disthook._layout import LAYOUTS, strided

        return LAYOUTS["sparse_coo"] if self.is_sparse else strided

    def is_inference(self) -> bool:
        return type(self._vc) is not list

    def is_shared(self) -> bool:
        return False

    def is_pinned(self, device=None) -> bool:
        return False

    def share_memory_(self):
        return self

    def pin_memory(self, device=None):
        """torch without an accelerator has no pinned memory: its error, in its words (pin only
        when ``torch.cuda.is_available()``; DataLoader's ``pin_memory=True`` is accepted)."""
        raise RuntimeError(NO_ACCELERATOR)

    def dim_order(self, *, ambiguity_check=False) -> tuple:
        strides = self.stride()
        return tuple(sorted(range(self.ndim), key=lambda d: (-strides[d], d)))

    def is_set_to(self, other) -> bool:
        return (self._data.__array_interface__["data"][0] == other._data.__array_interface__[
            "data"][0] and self.shape == other.shape and self.stride() == other.stride())

    def new(self, *args, **kwargs):
        from disthook import _legacy_type

        return _legacy_type(self.dtype)(*args, **kwargs)

    def new_empty_strided(self, size, stride, *, dtype=None, **kwargs):
        out = self.new_empty(tuple(size), dtype=dtype or self.dtype)
        return out.as_strided(size, stride, 0) if out.numel() else out

    def byte(self):
        return self.to(_dtype.uint8)

    def char(self):
        return self.to(_dtype.int8)

    def short(self):
        return self.to(_dtype.int16)

    def bfloat16(self):
        return self.to(_dtype.bfloat16)

    def as_subclass(self, cls):
        out = self.detach() if not self.requires_grad else self.view_as(self)
        out.__class__ = cls
        return out

    def apply_(self, callable):
        flat = self._data.reshape(-1)
        self.copy_(self._make(np.array([callable(v) for v in flat.tolist()],
                                       dtype=self._data.dtype).reshape(self.shape), None, 0))
        return self

    def map_(self, other, callable):
        b = np.broadcast_to(other._data, self._data.shape).reshape(-1).tolist()
        values = [callable(x, y) for x, y in zip(self._data.reshape(-1).tolist(), b)]
        self.copy_(self._make(np.array(values, dtype=self._data.dtype).reshape(self.shape),
                              None, 0))
        return self

    def resize_(self, *args, size=None, memory_format=None):
        shape = _ints(by_keyword(args, size, "size", "resize_"))
        if type(self._vc) is not list and shape != self._data.shape:
            inference.check_inplace(self)
        n = int(np.prod(shape))
        flat = self._data.reshape(-1)
        data = np.zeros(n, dtype=flat.dtype)
        data[:min(n, flat.size)] = flat[:n]
        if self.requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        self._data = data.reshape(shape)
        return self

    def resize(self, *sizes):
        """The same elements in a new shape (a copy); only resize_ changes the count."""
        shape = _ints(sizes)
        if int(np.prod(shape)) != self.numel():
            raise RuntimeError(f"resize to {list(shape)} ({int(np.prod(shape))} elements) "
                               f"from {list(self.shape)} ({self.numel()} elements): the "
                               "out-of-place resize keeps the number of elements; use "
                               "resize_ to change it")
        return self.reshape(shape).clone()

    def resize_as(self, other):
        return self.resize(tuple(other.shape))

    def map2_(self, x, y, callable):
        a = np.broadcast_to(x._data, self._data.shape).reshape(-1).tolist()
        b = np.broadcast_to(y._data, self._data.shape).reshape(-1).tolist()
        values = [callable(s, u, v) for s, u, v in zip(self._data.reshape(-1).tolist(), a, b)]
        self.copy_(self._make(np.array(values, dtype=self._data.dtype).reshape(self.shape),
                              None, 0))
        return self

    def const_data_ptr(self) -> int:
        return self.data_ptr()

    def as_strided_scatter(self, src, size, stride, storage_offset=None):
        out = self.clone()
        out.as_strided(size, stride, storage_offset).copy_(src)
        return out

    def resize_as_(self, other, memory_format=None):
        return self.resize_(tuple(other.shape))

    # ---- splitting ------------------------------------------------------------------------
    def tensor_split(self, indices_or_sections, dim=0):
        d = self._dim(dim)
        n = self.shape[d]
        sections = indices_or_sections
        if isinstance(sections, _tensor_cls()):
            sections = sections.tolist()
        if isinstance(sections, (int, np.integer)):
            if sections <= 0:
                raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
            size, extra = divmod(n, int(sections))
            bounds, start = [], 0
            for i in range(int(sections)):
                start += size + (1 if i < extra else 0)
                bounds.append(start)
            bounds = bounds[:-1]
        else:
            bounds = [int(i) for i in sections]
        edges = [0] + [min(max(b, 0), n) for b in bounds] + [n]
        return tuple(self.narrow(d, a, max(b - a, 0)) for a, b in itertools.pairwise(edges))

    def _split_dir(self, name, min_dim, dim, sections):
        if self.ndim < min_dim:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dim} "
                               f"dimension, but got a tensor with {self.ndim} dimensions!")
        if isinstance(sections, int) and self.shape[dim] % sections:
            raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but "
                               f"the size of the dimension {self.shape[dim]} is not divisible "
                               f"by the split_size {sections}!")
        return self.tensor_split(sections, dim)

    def hsplit(self, sections):
        return self._split_dir("hsplit", 1, 1 if self.ndim > 1 else 0, sections)

    def vsplit(self, sections):
        return self._split_dir("vsplit", 2, 0, sections)

    def dsplit(self, sections):
        return self._split_dir("dsplit", 3, 2, sections)

    def split_with_sizes(self, split_sizes, dim=0):
        if sum(split_sizes) != self.shape[self._dim(dim)]:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to "
                f"{self.shape[self._dim(dim)]} (input tensor's size at dimension {dim}), but "
                f"got split_sizes={list(split_sizes)}")
        return self.split(list(split_sizes), dim)

    def unsafe_split(self, split_size, dim=0):
        return self.split(split_size, dim)

    def unsafe_chunk(self, chunks, dim=0):
        return self.chunk(chunks, dim)

    def unsafe_split_with_sizes(self, split_sizes, dim=0):
        return self.split_with_sizes(split_sizes, dim)

    def narrow_copy(self, dim, start, length):
        # (C order, as torch's, where clone() would keep the view's strides)
        return self.narrow(dim, start, length).clone(memory_format=contiguous_format)

    # ---- indexing ------------------------------------------------------------------------
    def take(self, index):
        return self.reshape(-1)[index.reshape(-1)].reshape(index.shape)

    def take_along_dim(self, indices, dim=None):
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        d = self._dim(dim)
        indices = self._make(indices._data, None, 0)  # torch does not save it: no mark
        if self.ndim != indices.ndim:
            raise RuntimeError(
                "torch.take_along_dim(): input and indices should have the same number of "
                f"dimensions, but got {self.ndim} dimensions for input, and {indices.ndim} "
                "dimensions for indices")
        # they broadcast in every dimension but ``d``, where each keeps its own size
        outer_self, outer_idx = list(self.shape), list(indices.shape)
        outer_self[d] = outer_idx[d] = 1
        check_broadcast(tuple(outer_self), tuple(outer_idx))
        shape = list(np.broadcast_shapes(tuple(outer_self), tuple(outer_idx)))
        shape_self, shape_idx = list(shape), list(shape)
        shape_self[d], shape_idx[d] = self.shape[d], indices.shape[d]
        return self.expand(shape_self).gather(d, indices.expand(shape_idx))

    def _along(self, dim, index):
        """(self moved so ``dim`` is first, the undo) for the index_* ops."""
        d = self._dim(dim)
        if index.ndim > 1:
            raise IndexError("index_add_(): Index is supposed to be a vector")
        return d, self.movedim(d, 0)

    def index_add(self, dim, index, source, *, alpha=1):
        d, moved = self._along(dim, index)
        index = self._make(index._data, None, 0)  # torch does not save it: no mark
        src = source.movedim(d, 0) if source.ndim else source
        if alpha != 1:
            src = src * alpha
        return moved.index_put((index,), src, accumulate=True).movedim(0, d)

    def index_copy(self, dim, index, source):
        d, moved = self._along(dim, index)
        src = source.movedim(d, 0) if source.ndim else source
        inference.refuse_saved_index(index, self, src)
        return moved.index_put((index,), src).movedim(0, d)

    def index_fill(self, dim, index, value):
        d, moved = self._along(dim, index)
        if not isinstance(value, _tensor_cls()):
            value = self._make(np.asarray(value, dtype=self._data.dtype), None, 0)
        inference.refuse_saved_index(index, self, value)
        return moved.index_put((index,), value.to(self.dtype)).movedim(0, d)

    def index_reduce(self, dim, index, source, reduce, *, include_self=True):
        d = self._dim(dim)
        shape = [1] * self.ndim
        shape[d] = -1
        idx = index.reshape(shape).expand(source.shape)
        return self.scatter_reduce(d, idx, source, reduce, include_self=include_self)

    def masked_select(self, mask):
        shape = tuple(np.broadcast_shapes(self.shape, mask.shape))
        return self.expand(shape)[mask.expand(shape)]

    def masked_scatter(self, mask, source):
        shape = tuple(np.broadcast_shapes(self.shape, mask.shape))
        m = mask.expand(shape)
        count = int(m._data.sum())
        if source.numel() < count:
            raise RuntimeError("masked_scatter: expected source to have at least as many "
                               f"elements as ones in mask ({count}), got {source.numel()}")
        return self.expand(shape).index_put((m,), source.reshape(-1)[:count])

    def nonzero(self, *, as_tuple=False):
        idx = np.nonzero(self._data)
        if as_tuple:
            if self.ndim == 0:
                return (self._make(np.zeros(int(bool(self._data)), np.int64), None, 0),)
            return tuple(self._make(i.astype(np.int64), None, 0) for i in idx)
        return self._make(np.stack(idx, 1).astype(np.int64).reshape(-1, self.ndim), None, 0)

    def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
        if self._data.dtype.kind == "c":
            refuse_complex("unique", self)
        x = self._data.reshape(-1) if dim is None else np.moveaxis(self._data, self._dim(dim), 0)
        n = x.shape[0]
        if n:
            changed = (x[1:] != x[:-1]).reshape(n - 1, -1).any(1)
            starts = np.concatenate([[0], np.flatnonzero(changed) + 1])
        else:
            starts = np.zeros(0, np.int64)
        values = x[starts]
        if dim is not None:
            values = np.moveaxis(values, 0, self._dim(dim))
        from disthook.ops.shape import UniqueConsecutive  # (torch's node: backward its error)

        out = [UniqueConsecutive.apply(self, result=np.ascontiguousarray(values))]
        if return_inverse:
            inverse = np.cumsum(np.isin(np.arange(n), starts)) - 1
            out.append(self._make(inverse.reshape(self.shape if dim is None else (n,))
                                  .astype(np.int64), None, 0))
        if return_counts:
            out.append(self._make(np.diff(np.append(starts, n)).astype(np.int64), None, 0))
        return out[0] if len(out) == 1 else tuple(out)

    def nonzero_static(self, *, size, fill_value=-1):
        """nonzero padded with ``fill_value`` (or cut) to exactly ``size`` rows."""
        found = self.nonzero()._data[:size]
        out = np.full((size, self.ndim), fill_value, dtype=np.int64)
        out[:len(found)] = found
        return self._make(out, None, 0)

    def argwhere(self):
        return self.nonzero()

    def put(self, index, source, accumulate=False):
        return self.reshape(-1).index_put((index.reshape(-1),), source.reshape(-1),
                                          accumulate=accumulate).reshape(self.shape)

    def index_put_(self, indices, values, accumulate=False):
        from disthook.ops import shape as S

        if not isinstance(values, _tensor_cls()):
            values = self._make(np.asarray(values, dtype=self._data.dtype), None, 0)
        index = tuple(indices)
        return self._inplace(S.IndexPut, values.to(self.dtype), index=index,
                             accumulate=accumulate)

    def select_scatter(self, src, dim, index):
        out = self.clone()
        out.select(dim, index).copy_(src)
        return out

    def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
        d = self._dim(dim)
        index = (builtins.slice(None),) * d + (builtins.slice(start, end, step),)
        out = self.clone()
        out[index].copy_(src)
        return out

    def diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
        out = self.clone()
        out.diagonal(offset, dim1, dim2).copy_(src)
        return out

    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        from disthook.ops.gather_reduce import scatter_reduce

        return scatter_reduce(self, self._dim(dim), index, src, reduce, include_self)


# in-place forms of the view-changing methods: self takes the new geometry
def _inplace_view(name: str):
    def method(self, *args, **kwargs):
        if type(self._vc) is not list:
            inference.check_inplace(self)
        out = getattr(self, name)(*args, **kwargs)
        if self._leaf_requiring_grad():
            from disthook.tensor import LEAF_INPLACE_MSG

            raise RuntimeError(LEAF_INPLACE_MSG)
        self._data = out._data
        if out._grad_fn is not None:
            self._set_history(out._grad_fn, out._output_nr)
        return self

    method.__name__ = method.__qualname__ = name + "_"
    return method


for _name in ("squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims", "as_strided"):
    setattr(ShapeMethods, _name + "_", _inplace_view(_name))
del _name
