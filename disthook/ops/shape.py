"""Shape and indexing ops: view/reshape, permute, transpose, expand, squeeze, repeat,
cat/stack/split, getitem and index-put, masked_fill, pad, tril/triu, roll, scatter,
index_select."""
from __future__ import annotations

import weakref
from types import MappingProxyType

import numpy as np

from disthook._layout import restrided
from disthook.autograd.graph import gradient_edge
from disthook.ops.base import (  # noqa: F401
    _NO_CTX,
    INFERENCE_VIEW,
    MULTI_OUTPUT_VIEW,
    NO_GRAD_VIEW,
    Op,
    _wrap,
    as_shown,
    plain,
    plain_tensor,
    shown_dims,
    sum_to,
)
from disthook.ops.elementwise import NoDerivative


class View(Op):
    """reshape/view; the output shares memory with the input when numpy can view it."""

    complex_ok = True
    node_name = "ViewBackward0"
    view = True
    saved_values = MappingProxyType({"self_sym_sizes": lambda n: tuple(n.shape)})

    @staticmethod
    def forward(ctx, a, shape):
        ctx.shape = a._data.shape
        return a._data.reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.shape)


class UnsafeView(View):
    """reshape that has to copy (the input's strides admit no view)."""

    node_name = "UnsafeViewBackward0"
    view = False


class Permute(Op):
    complex_ok = True
    view = True
    saved_values = MappingProxyType({"dims": lambda n: tuple(n.dims)})

    @staticmethod
    def forward(ctx, a, dims):
        ctx.dims = dims
        return a._data.transpose(dims)

    @staticmethod
    def backward(ctx, g):
        return g.permute(tuple(np.argsort(ctx.dims)))


class Transpose(Op):
    complex_ok = True
    node_name = "TransposeBackward0"
    view = True
    saved_values = MappingProxyType({"dim0": lambda n: n.pair[0], "dim1": lambda n: n.pair[1]})

    @staticmethod
    def forward(ctx, a, dim0, dim1):
        ctx.pair = (dim0, dim1)
        return np.swapaxes(a._data, dim0, dim1)

    @staticmethod
    def backward(ctx, g):
        return g.transpose(*ctx.pair)


class T(Op):
    """``.t()``: transpose of a matrix, identity view of a vector or scalar."""

    complex_ok = True
    view = True

    @staticmethod
    def forward(ctx, a):
        return a._data.T

    @staticmethod
    def backward(ctx, g):
        if plain(g) and g._data.ndim <= 2:  # no graph of it: the view alone
            return _wrap(g._data.T, None, 0, (g,), True)
        return g.t()


_INPUT_SIZES = MappingProxyType({"self_sym_sizes": lambda n: tuple(n._input_meta[0][0])})


class Expand(Op):
    complex_ok = True
    view = True
    saved_values = _INPUT_SIZES

    @staticmethod
    def forward(ctx, a, shape):
        x = a._data
        ctx.shape = x.shape
        return expanded(x, shape)

    @staticmethod
    def backward(ctx, g):
        from disthook.ops.base import sum_to

        return sum_to(g, ctx.shape)


def expanded(x: np.ndarray, shape: tuple) -> np.ndarray:
    """``x`` broadcast to ``shape`` (which it fits), as a view."""
    lead = len(shape) - x.ndim
    if x.shape == tuple(shape[lead:]) and all(n == 1 for n in shape[:lead]):
        # no element repeated (leading dims of one): a view that can be written, as
        # torch's (numpy's broadcast views are read-only: a hook's in-place edit of
        # sum()'s gradient, expanded from 0-d to (1,), was refused)
        return x[(None,) * lead] if lead else x.view()
    return np.broadcast_to(x, shape)


class Squeeze(Op):
    complex_ok = True
    node_name = "SqueezeBackward1"
    view = True
    saved_values = MappingProxyType({"dim": shown_dims, **_INPUT_SIZES})

    @staticmethod
    def forward(ctx, a, dims=None, given=None):
        ctx.shape = a._data.shape
        ctx.dim = ctx.given = given  # the dim(s) as the program wrote them
        return np.squeeze(a._data, axis=dims)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.shape)


class SqueezeAll(Squeeze):
    """``squeeze()`` with no dim."""

    node_name = "SqueezeBackward0"
    saved_values = _INPUT_SIZES


class SqueezeDims(Squeeze):
    """``squeeze(dims)`` with a tuple of dims."""

    node_name = "SqueezeBackward2"


class Unsqueeze(Op):
    complex_ok = True
    node_name = "UnsqueezeBackward0"
    view = True
    saved_values = MappingProxyType({"dim": lambda n: n.dim})

    @staticmethod
    def forward(ctx, a, dim):
        ctx.dim = dim
        out = np.expand_dims(a._data, dim)
        if a._data.size:  # numpy's strides are torch's; an empty array's are made afresh
            return out
        return restrided(out, _unsqueezed_strides(a._data, dim))

    @staticmethod
    def backward(ctx, g):
        return g.squeeze(ctx.dim)


class Repeat(Op):
    complex_ok = True
    @staticmethod
    def forward(ctx, a, repeats):
        x = a._data
        lead = len(repeats) - x.ndim
        ctx.shape = (1,) * lead + x.shape
        ctx.in_shape = x.shape
        ctx.repeats = repeats
        return np.tile(x, repeats)

    @staticmethod
    def backward(ctx, g):
        # split every dim d into (repeats[d], size[d]) and sum over the repeats
        split = []
        for r, n in zip(ctx.repeats, ctx.shape):
            split += [r, n]
        g = g.reshape(tuple(split)).sum(dim=tuple(range(0, len(split), 2)))
        return g.reshape(ctx.in_shape)


class Cat(Op):
    complex_ok = True
    saved_values = MappingProxyType({"dim": lambda n: n.dim})

    @staticmethod
    def forward(ctx, *tensors, dim=0):
        ctx.dim = dim
        ctx.sizes = [t._data.shape[dim] if t._data.ndim else 0 for t in tensors]
        return np.concatenate([t._data for t in tensors], axis=dim)

    @staticmethod
    def backward(ctx, g):
        bounds = np.cumsum([0] + ctx.sizes)
        return tuple(g.narrow(ctx.dim, int(bounds[i]), n) if ctx.needs_input_grad[i] else None
                     for i, n in enumerate(ctx.sizes))


class Stack(Op):
    complex_ok = True
    @staticmethod
    def forward(ctx, *tensors, dim=0):
        ctx.dim = dim
        return np.stack([t._data for t in tensors], axis=dim)

    @staticmethod
    def backward(ctx, g):
        return tuple(g.select(ctx.dim, i) if need else None
                     for i, need in enumerate(ctx.needs_input_grad))


class Split(Op):
    """Split into pieces along a dim: one node, one output per piece (views)."""

    complex_ok = True
    node_name = "SplitBackward0"
    view = True
    saved_values = MappingProxyType({"dim": lambda n: n.dim,
                    "split_size": lambda n: n._output_meta[0][0][n.dim],
                    "self_sym_sizes": lambda n: tuple(n._input_meta[0][0])})

    @staticmethod
    def forward(ctx, a, sizes, dim=0):
        ctx.dim = dim
        bounds = np.cumsum(sizes)[:-1]
        return tuple(np.split(a._data, bounds, axis=dim))

    @staticmethod
    def backward(ctx, *grads):
        from disthook.ops.shape import Cat

        return Cat.apply(*grads, dim=ctx.dim)


class SplitWithSizes(Split):
    """``split([sizes])``."""

    node_name = "SplitWithSizesBackward0"
    saved_values = MappingProxyType({"dim": lambda n: n.dim,
                    "split_sizes": lambda n: tuple(m[0][n.dim] for m in n._output_meta),
                    "self_sym_sizes": lambda n: tuple(n._input_meta[0][0])})


class Unbind(Op):
    """One view per index along a dim: one node, one output each."""

    complex_ok = True
    view = True

    @staticmethod
    def forward(ctx, a, dim=0):
        ctx.dim = dim
        x = a._data
        # the Ellipsis keeps 0-d pieces views (numpy would return scalar copies)
        return tuple(x[(slice(None),) * dim + (i, Ellipsis)] for i in range(x.shape[dim]))

    @staticmethod
    def backward(ctx, *grads):
        return Stack.apply(*grads, dim=ctx.dim)


class Index(Op):
    """``a[index]`` with basic or advanced indexing."""

    complex_ok = True
    node_name = "IndexBackward0"
    saved_values = MappingProxyType({"indices": lambda n: _advanced_parts(n)[0],
                                     "self_sym_sizes": lambda n: _advanced_parts(n)[1]})

    @staticmethod
    def forward(ctx, a, index):
        ctx.index = index
        ctx.shape = a._data.shape
        return a._data[index]

    @staticmethod
    def backward(ctx, g):
        if plain(g) and g._data.dtype.kind in "fc":  # no graph of it: the op's pass alone
            return plain_tensor(ScatterIndex.forward(_NO_CTX, g, ctx.index, ctx.shape))
        return ScatterIndex.apply(g, index=ctx.index, shape=ctx.shape)


class Slice(Index):
    """Basic indexing (ints, slices, None, Ellipsis): the result is a view. ``given``: the
    values torch's node keeps, where a method (narrow, select) said them."""

    node_name = "SliceBackward0"
    view = True
    saved_values = MappingProxyType({
        "dim": lambda n: _index_value(n, "dim"), "start": lambda n: _index_value(n, "start"),
        "end": lambda n: _index_value(n, "end"), "step": lambda n: _index_value(n, "step"),
        "self_sym_sizes": lambda n: _index_value(n, "self_sym_sizes")})

    @staticmethod
    def forward(ctx, a, index, given=None):
        ctx.index = index
        ctx.shape = a._data.shape
        ctx.given = given
        out = a._data[index]
        items = index if isinstance(index, tuple) else (index,)
        if type(out) is not np.ndarray:
            # numpy gives a scalar copy when ints select one element; a trailing Ellipsis
            # makes it a 0-d view of the same memory, as torch's a[i] is
            out = a._data[items + (Ellipsis,)]
        elif any(item is None for item in items):
            out = _new_dims_as_torch(out, a._data, items)
        return out


def _unsqueezed_strides(array: np.ndarray, dim: int) -> tuple:
    """The strides (in elements) torch gives ``array`` unsqueezed at ``dim``: the new dim's is
    the size times the stride of the dim it goes before (1 at the end)."""
    old = [s // array.itemsize for s in array.strides]
    new = array.shape[dim] * old[dim] if dim < array.ndim else 1
    return (*old[:dim], new, *old[dim:])


def _new_dims_as_torch(out: np.ndarray, a: np.ndarray, items: tuple) -> np.ndarray:
    """``out`` (``a`` indexed by the basic ``items``) with torch's strides on the dims that
    ``None`` inserted (numpy gives them 0): torch inserts each as an unsqueeze before the input
    dim that comes next in ``items``, so its stride is that dim's size times its stride."""
    count = sum(item is not None and item is not Ellipsis for item in items)
    strides = [s // out.itemsize for s in out.strides]
    j = k = 0  # the output dim and the input dim that come next
    for item in items:
        if item is None:
            strides[j] = a.shape[k] * a.strides[k] // a.itemsize if k < a.ndim else 1
            j += 1
        elif item is Ellipsis:
            skipped = a.ndim - count
            j, k = j + skipped, k + skipped
        elif isinstance(item, slice):
            j, k = j + 1, k + 1
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            k += 1
        else:  # anything else: numpy's strides, as they are
            return out
    return restrided(out, tuple(strides))


class Select(Slice):
    node_name = "SelectBackward0"
    saved_values = MappingProxyType({
        "dim": lambda n: _index_value(n, "dim"), "index": lambda n: _index_value(n, "index"),
        "self_sym_sizes": lambda n: _index_value(n, "self_sym_sizes")})


class UnsqueezeIndex(Slice):
    node_name = "UnsqueezeBackward0"
    saved_values = MappingProxyType({"dim": lambda n: _index_value(n, "dim")})


class Alias(Slice):
    node_name = "AliasBackward0"
    saved_values = MappingProxyType({})


_INT64_MAX = 2**63 - 1


def _advanced_parts(n) -> tuple:
    """(indices, sizes) that torch's IndexBackward0 for ``n.index`` keeps: torch applies the
    basic items first (an int selects its dim away, a slice or None keeps or adds one), then
    indexes their result (``sizes``) with the index tensors, one entry per dim up to the last
    of them, None where a dim is not indexed."""
    from disthook.tensor import Tensor

    items = n.index if isinstance(n.index, tuple) else (n.index,)
    arrays = [isinstance(item, np.ndarray) for item in items]
    if any(a and (item.ndim == 0 or item.dtype.kind not in "biu")
           for a, item in zip(arrays, items)):
        raise AttributeError(f"'{type(n).__name__}' object has no attribute '_saved_indices' "
                             "(disthook keeps it where each index tensor has a dim and is an "
                             "integer or bool tensor)")
    taken = sum(item.ndim if a and item.dtype.kind == "b" else 1
                for a, item in zip(arrays, items) if item is not None and item is not Ellipsis)
    entries, basic = [], []
    for a, item in zip(arrays, items):
        if a:
            entries.append(Tensor._make(item, None, 0))
            basic.append(slice(None))
        elif item is Ellipsis:
            entries += [None] * (len(n.shape) - taken)
            basic.append(item)
        else:
            if item is None or isinstance(item, slice):
                entries.append(None)
            basic.append(item)
    while entries and entries[-1] is None:
        entries.pop()
    sizes = np.broadcast_to(np.zeros((), np.int8), n.shape)[tuple(basic)].shape
    return tuple(entries), sizes


def _index_value(n, name: str):
    """What torch's node for the basic index ``n.index`` keeps: torch applies the index item
    by item (a select, a slice, an unsqueeze each, full slices skipped), so its node is the
    last item's, on the dim where that item applies (the dims the items before it left), over
    the tensor they gave; the start, end, index as written (an open end is 2**63 - 1)."""
    if n.given is not None and name in n.given:
        return as_shown(n.given[name])
    if n.given is not None and name == "self_sym_sizes":
        return tuple(n.shape)
    items = n.index if isinstance(n.index, tuple) else (n.index,)
    last = max(i for i, item in enumerate(items)
               if item is not Ellipsis and not (isinstance(item, slice) and item == slice(None)))
    count = sum(item is not None and item is not Ellipsis for item in items)
    dim = 0  # the dim, in the tensor the items before it gave, where item ``last`` applies
    for item in items[:last]:
        if item is Ellipsis:
            dim += len(n.shape) - count
        elif item is None or isinstance(item, slice):
            dim += 1
    item = items[last]
    if name == "dim":
        return dim
    if name == "self_sym_sizes":
        return np.broadcast_to(np.zeros((), np.int8), n.shape)[items[:last]].shape
    if name == "index":
        return as_shown(item)
    value = {"start": item.start, "end": item.stop, "step": item.step}[name]
    return as_shown({"start": 0, "end": _INT64_MAX, "step": 1}[name] if value is None else value)


def basic_index_op(index) -> type:
    """The op for a basic index, named as torch names it: after its last item that is not a
    full slice or Ellipsis (``x[1, :]`` selects, ``x[:, None]`` unsqueezes, ``x[:, :]`` is
    an alias); a lone slice ``x[:]`` slices."""
    if isinstance(index, slice):
        return Slice
    items = index if isinstance(index, tuple) else (index,)
    for item in reversed(items):
        if item is None:
            return UnsqueezeIndex
        if isinstance(item, slice):
            if item != slice(None):
                return Slice
        elif item is not Ellipsis:
            return Select
    return Alias


class ScatterIndex(Op):
    """Zeros of ``shape`` with ``g`` added at ``index`` (repeats accumulate); the backward of
    indexing, differentiable in turn."""

    complex_ok = True
    node_name = "IndexPutBackward0"

    @staticmethod
    def forward(ctx, g, index, shape):
        ctx.index = index
        out = np.zeros(shape, dtype=g._data.dtype)
        if _is_basic(index):
            out[index] = g._data
        else:
            np.add.at(out, index, g._data)
        return out

    @staticmethod
    def backward(ctx, gg):
        return gg[ctx.index]


def _is_basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))
               for i in items)


class IndexPut(Op):
    """``out = a.clone(); out[index] = value``: the graph of ``a[index] = value``."""

    complex_ok = True
    node_name = "CopySlices"

    def name(self) -> str:
        return "torch::autograd::CopySlices"  # torch's qualified name for this C++ node

    @staticmethod
    def forward(ctx, a, value, index, accumulate=False):
        ctx.index = index
        ctx.accumulate = accumulate
        out = a._data.copy()
        if accumulate:
            np.add.at(out, index, value._data)
        else:
            out[index] = value._data
        return out

    @staticmethod
    def backward(ctx, g):
        ga = None
        if ctx.needs_input_grad[0]:
            ga = g if ctx.accumulate else g.index_put(ctx.index, g.new_zeros(()))
        gv = g[ctx.index] if ctx.needs_input_grad[1] else None
        return ga, gv


# ---- in-place on views: the root base's history is rebased (torch's CopySlices) ------------

def view_index(view: np.ndarray, root: np.ndarray) -> tuple:
    """Where each element of ``view`` sits in ``root``, whose memory it shares, as an
    advanced index into ``root``: a tuple of integer arrays shaped like ``view``."""
    item = root.itemsize
    if min(root.strides + view.strides, default=0) < 0:
        raise NotImplementedError("in-place on a view with negative strides is not supported")
    as_strided = np.lib.stride_tricks.as_strided
    # label the root's memory, element by element, with each element's C-order flat index
    span = 1 + sum((n - 1) * s for n, s in zip(root.shape, root.strides)) // item
    labels = np.full(max(span, 1), -1, dtype=np.int64)
    if root.size:
        in_labels = tuple(s // item * labels.itemsize for s in root.strides)
        as_strided(labels, root.shape, in_labels)[...] = np.arange(root.size).reshape(root.shape)
    offset = (view.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // item
    view_strides = tuple(s // item * labels.itemsize for s in view.strides)
    flat = as_strided(labels[offset:], view.shape, view_strides).copy() if view.size else \
        np.zeros(view.shape, np.int64)
    return np.unravel_index(flat, root.shape)


class AsStrided(Op):
    """The history of a view once its root changed in place: the view taken afresh from the
    root (torch's AsStridedBackward0). Built directly by ``rebase_views``; ``ctx.arrays`` is
    (view's array, root's array), whose geometry gives the index, found when backward runs."""

    complex_ok = True
    node_name = "AsStridedBackward0"

    @staticmethod
    def backward(ctx, g):
        view, root = ctx.arrays
        return ScatterIndex.apply(g, index=view_index(view, root), shape=root.shape)


class CopySlices(Op):
    """The root's history after an in-place op on one of its views: the op's node ``fn``
    takes the view's part of the root's gradient, the rest passes through unchanged; edges
    to the op's other inputs are ``fn``'s. Built directly by ``rebase_on_view_inplace``."""

    complex_ok = True
    node_name = "CopySlices"
    name = IndexPut.name  # the same C++ node in torch

    @staticmethod
    def backward(ctx, g):
        fn = ctx.fn
        index = view_index(*ctx.arrays)
        grads = fn._backward([g[index]])
        if type(grads) is not tuple:
            grads = (grads,)
        fitted = []
        for need, meta, gi in zip(fn.needs_input_grad, fn._input_meta, grads):
            if gi is None or not need:
                fitted.append(None)
                continue
            if gi.shape != meta[0]:
                gi = sum_to(gi, meta[0])  # undo broadcasting, as the engine does
            fitted.append(gi if gi._data.dtype == meta[1] else gi.to(meta[1]))
        view_grad = fitted[0] if fitted[0] is not None else g.new_zeros(())
        return (g.index_put(index, view_grad), *fitted[1:])

    def _release(self) -> None:
        self.fn._release()
        super()._release()


def _node(op: type, inputs_meta: tuple, edges: tuple, needs: tuple):
    node = op._node_cls()
    node.next_functions = edges
    node.needs_input_grad = needs
    node._input_meta = inputs_meta
    return node


def rebase_views(root) -> None:
    """After ``root``'s history changed in place, each live view of it takes the history
    ``AsStrided(root)``, so gradients through the view see the change."""
    views = root._views
    live = []
    for ref in views:
        v = ref()
        if v is None:
            continue
        if v._view_creation == MULTI_OUTPUT_VIEW:
            from disthook.tensor import break_view

            break_view(v)
            continue
        if v._data.dtype != root._data.dtype:  # (its elements are not the root's)
            from disthook.tensor import OTHER_DTYPE_VIEW_HINT, break_view

            break_view(v, OTHER_DTYPE_VIEW_HINT)
            continue
        live.append(ref)
        node = _node(AsStrided, ((root._data.shape, root._data.dtype),), (gradient_edge(root),),
                     (True,))
        node.arrays = (v._data, root._data)
        v._set_history(node, 0)
    views[:] = live


def rebase_on_view_inplace(view, fn) -> None:
    """``view`` (already written) was changed in place by the op whose node is ``fn`` (its
    input 0 is the view's old value): the root takes a CopySlices history and all its views
    are rebased onto it."""
    root = view._base
    edge = gradient_edge(root)
    node = _node(CopySlices, ((root._data.shape, root._data.dtype),) + fn._input_meta[1:],
                 (edge,) + fn.next_functions[1:],
                 (edge[0] is not None,) + fn.needs_input_grad[1:])
    node.fn = fn
    node.arrays = (view._data, root._data)
    root._set_history(node, 0)
    if root._views is None:
        root._views = []
    if not any(ref() is view for ref in root._views):
        root._views.append(weakref.ref(view))
    rebase_views(root)


class ScatterAlong(Op):
    """Zeros of ``shape`` with ``g`` placed at ``index`` along ``dim`` (max/min backward)."""

    node_name = "ScatterBackward0"
    complex_ok = True  # moves values: the same rule for complex

    @staticmethod
    def forward(ctx, g, index, dim, shape):
        ctx.index, ctx.dim = index, dim
        out = np.zeros(shape, dtype=g._data.dtype)
        np.put_along_axis(out, index, g._data, axis=dim)
        return out

    @staticmethod
    def backward(ctx, gg):

        return GatherAlong.apply(gg, index=ctx.index, dim=ctx.dim)


class GatherAlong(Op):
    node_name = "GatherBackward0"
    complex_ok = True  # moves values: the same rule for complex

    @staticmethod
    def forward(ctx, a, index, dim):
        x = a._data
        ctx.index, ctx.dim, ctx.shape = index, dim, x.shape
        if index.shape != x.shape:
            # the index may be smaller than the input in the other dims
            x = x[tuple(slice(None) if d == dim else slice(n) for d, n in enumerate(index.shape))]
        return np.take_along_axis(x, index, axis=dim)

    @staticmethod
    def backward(ctx, g):
        return ScatterAddAlong.apply(g, index=ctx.index, dim=ctx.dim, shape=ctx.shape)


class ScatterAddAlong(Op):
    node_name = "ScatterAddBackward0"
    complex_ok = True  # moves values: the same rule for complex

    @staticmethod
    def forward(ctx, g, index, dim, shape):
        ctx.index, ctx.dim = index, dim
        out = np.zeros(shape, dtype=g._data.dtype)
        idx = list(np.indices(index.shape, sparse=True))
        idx[dim] = index
        np.add.at(out, tuple(idx), g._data)
        return out

    @staticmethod
    def backward(ctx, gg):
        return GatherAlong.apply(gg, index=ctx.index, dim=ctx.dim)


class MaskedFill(Op):
    complex_ok = True
    @staticmethod
    def forward(ctx, a, mask, value):
        ctx.save_for_backward(mask)
        return np.where(mask._data, np.asarray(value, dtype=a._data.dtype), a._data)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g.masked_fill(mask, 0), None


class ConstantPad(Op):
    complex_ok = True
    node_name = "ConstantPadNdBackward0"

    @staticmethod
    def forward(ctx, a, pad, value=0.0):
        x = a._data
        if len(pad) % 2 or len(pad) // 2 > x.ndim:
            raise RuntimeError(
                f"Padding length must be divisible by 2 and at most twice the number of "
                f"dimensions of the input, got {len(pad)} for a {x.ndim}-D input")
        widths = [(0, 0)] * x.ndim
        for i in range(len(pad) // 2):
            widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
        ctx.widths = widths
        ctx.shape = x.shape
        if any(lo < 0 or hi < 0 for lo, hi in widths):
            # negative padding crops
            crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, x.shape))
            x = x[crop]
            widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
            ctx.crop = crop
        else:
            ctx.crop = None
        return np.pad(x, widths, mode="constant", constant_values=value)

    @staticmethod
    def backward(ctx, g):
        pos = [(max(lo, 0), max(hi, 0)) for lo, hi in ctx.widths]
        inner = tuple(slice(lo, g.shape[d] - hi) for d, (lo, hi) in enumerate(pos))
        g = g[inner]
        if ctx.crop is not None:
            g = ScatterIndex.apply(g, index=ctx.crop, shape=ctx.shape)
        return g


class Tril(Op):
    """The lower triangle of the last two dims (above diagonal ``k`` zeroed)."""

    complex_ok = True  # moves values: the same rule for complex

    fn = staticmethod(np.tril)
    method = "tril"

    @classmethod
    def forward(cls, ctx, a, diagonal=0):
        ctx.diagonal = diagonal
        return cls.fn(a._data, diagonal)

    @classmethod
    def backward(cls, ctx, g):
        return getattr(g, cls.method)(ctx.diagonal)


class Triu(Tril):
    """The upper triangle of the last two dims (below diagonal ``k`` zeroed)."""

    node_name = "TriuBackward0"
    fn = staticmethod(np.triu)
    method = "triu"


class Roll(Op):
    """Shift elements along dims, wrapping around (all flattened when ``dims`` is None)."""

    complex_ok = True
    @staticmethod
    def forward(ctx, a, shifts, dims):
        ctx.shifts, ctx.dims = shifts, dims
        x = a._data
        if dims is None:
            return np.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
        return np.roll(x, shifts, axis=dims)

    @staticmethod
    def backward(ctx, g):
        return Roll.apply(g, shifts=tuple(-s for s in ctx.shifts), dims=ctx.dims)


def _along_dim(index: np.ndarray, dim: int) -> tuple:
    """The advanced index that puts element ``j`` of a scatter at ``j`` with its ``dim``
    coordinate replaced by ``index[j]``."""
    idx = list(np.indices(index.shape, sparse=True))
    idx[dim] = index
    return tuple(idx)


def _index_region(index: np.ndarray) -> tuple:
    """The leading block of a tensor that an index of this shape addresses."""
    return tuple(slice(0, n) for n in index.shape)


class Scatter(Op):
    """``a.scatter(dim, index, src)``: ``a`` with ``src``'s values written at ``index``."""

    @staticmethod
    def forward(ctx, a, src, index, dim):
        ctx.index, ctx.dim, ctx.src_shape = index, dim, src._data.shape
        out = a._data.copy()
        out[_along_dim(index, dim)] = src._data[_index_region(index)]
        return out

    @staticmethod
    def backward(ctx, g):
        ga = g.scatter(ctx.dim, _tensor(ctx.index), 0.0) if ctx.needs_input_grad[0] else None
        gs = None
        if ctx.needs_input_grad[1]:
            gs = _grow(g.gather(ctx.dim, _tensor(ctx.index)), ctx.src_shape)
        return ga, gs


class ScatterValue(Op):
    """``a.scatter(dim, index, value)`` with a scalar value."""

    node_name = "ScatterBackward1"

    @staticmethod
    def forward(ctx, a, index, dim, value):
        ctx.index, ctx.dim = index, dim
        out = a._data.copy()
        out[_along_dim(index, dim)] = np.asarray(value, dtype=out.dtype)
        return out

    @staticmethod
    def backward(ctx, g):
        return g.scatter(ctx.dim, _tensor(ctx.index), 0.0)


class ScatterWithReduce(Op):
    """``a.scatter(dim, index, src or value, reduce="add" | "multiply")``: ``src``'s values
    (or the number) added to or multiplied into ``a`` at ``index``, repeats accumulating.
    torch defines no derivative for it: backward through it is torch's error."""

    node_name = "NotImplemented"

    @staticmethod
    def forward(ctx, a, *src, index, dim, reduce, value=None):
        out = a._data.copy()
        values = (src[0]._data[_index_region(index)] if src
                  else np.broadcast_to(np.asarray(value, dtype=out.dtype), index.shape))
        (np.add if reduce == "add" else np.multiply).at(out, _along_dim(index, dim), values)
        return out

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("derivative for aten::scatter is not implemented")


class ScatterAdd(Op):
    """``a.scatter_add(dim, index, src)``: ``src``'s values added at ``index`` (repeats
    accumulate)."""

    @staticmethod
    def forward(ctx, a, src, index, dim):
        ctx.index, ctx.dim, ctx.src_shape = index, dim, src._data.shape
        out = a._data.copy()
        np.add.at(out, _along_dim(index, dim), src._data[_index_region(index)])
        return out

    @staticmethod
    def backward(ctx, g):
        gs = None
        if ctx.needs_input_grad[1]:
            gs = _grow(g.gather(ctx.dim, _tensor(ctx.index)), ctx.src_shape)
        return g, gs


class IndexSelect(Op):
    """``a.index_select(dim, index)``: whole slices along ``dim`` picked by a 1-d index."""

    @staticmethod
    def forward(ctx, a, index, dim):
        ctx.index, ctx.dim, ctx.shape = index, dim, a._data.shape
        return np.take(a._data, index, axis=dim)

    @staticmethod
    def backward(ctx, g):
        index = (slice(None),) * ctx.dim + (ctx.index,)
        return ScatterIndex.apply(g, index=index, shape=ctx.shape)


def _tensor(array: np.ndarray):
    from disthook.tensor import Tensor

    return Tensor._make(array, None, 0)


def _grow(g, shape: tuple):
    """``g`` placed in the leading block of zeros of ``shape`` (a source larger than its
    index takes no gradient outside it)."""
    if tuple(g.shape) == tuple(shape):
        return g
    return ScatterIndex.apply(g, index=tuple(slice(0, n) for n in g.shape), shape=shape)


class PixelShuffle(Op):
    """``(*, C * r * r, H, W) -> (*, C, H * r, W * r)``: each channel block of r * r becomes
    an r x r patch."""

    @staticmethod
    def forward(ctx, a, upscale_factor):
        ctx.r = r = upscale_factor
        x = a._data
        *lead, c, h, w = x.shape
        y = x.reshape(*lead, c // (r * r), r, r, h, w)
        n = len(lead)
        y = y.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return np.ascontiguousarray(y).reshape(*lead, c // (r * r), h * r, w * r)

    @staticmethod
    def backward(ctx, g):
        return PixelUnshuffle.apply(g, downscale_factor=ctx.r)


class PixelUnshuffle(Op):
    """The inverse of PixelShuffle: each r x r patch becomes r * r channels."""

    @staticmethod
    def forward(ctx, a, downscale_factor):
        ctx.r = r = downscale_factor
        x = a._data
        *lead, c, h, w = x.shape
        y = x.reshape(*lead, c, h // r, r, w // r, r)
        n = len(lead)
        y = y.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
        return np.ascontiguousarray(y).reshape(*lead, c * r * r, h // r, w // r)

    @staticmethod
    def backward(ctx, g):
        return PixelShuffle.apply(g, upscale_factor=ctx.r)


# ops torch defines no derivative for, over their result computed already (``result=``)
class Unique2(NoDerivative):
    node_name = "Unique2Backward0"
    error = NotImplementedError
    message = "the derivative for '_unique2' is not implemented."


class UniqueDim(NoDerivative):
    node_name = "UniqueDimBackward0"
    error = NotImplementedError
    message = "the derivative for 'unique_dim' is not implemented."


class UniqueConsecutive(NoDerivative):
    node_name = "UniqueConsecutiveBackward0"
    error = NotImplementedError
    message = "the derivative for 'unique_consecutive' is not implemented."


class Bincount(NoDerivative):
    node_name = "NotImplemented"  # (each op class names its own node: Op.__init_subclass__)
    torch_name = "bincount"
