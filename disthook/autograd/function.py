"""Custom ops: subclass ``Function`` with ``forward(ctx, ...)`` and ``backward(ctx, ...)``."""
from __future__ import annotations

import warnings

# Names from modules that import this one are looked up at call time in sys.modules: they
# are loaded by then, and a from-import inside a hot function costs about 1.7 us per call.
from sys import modules as _loaded

import numpy as np

from disthook import _dtype
from disthook.autograd import _vmap_functions, grad_mode
from disthook.autograd._vmap_functions import active as _vmaps
from disthook.autograd.graph import Node, _SavedTensor, gradient_edge

VIEW_INPLACE_MSG = (
    "Output {i} of {name} is a view and is being modified inplace. This view was created "
    "inside a custom Function (or because an input was returned as-is) and the autograd logic "
    "to handle view+inplace would override the custom backward associated with the custom "
    "Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by "
    "cloning the output of the custom Function."
)
VIEW_BASE_INPLACE_MSG = (
    "Output {i} of {name} is a view and its base or another view of its base has been "
    "modified inplace. This view was created inside a custom Function (or because an input "
    "was returned as-is) and the autograd logic to handle view+inplace would override the "
    "custom backward associated with the custom Function, leading to incorrect gradients. "
    "This behavior is forbidden. You can fix this by cloning the output of the custom Function."
)


ACCESSED_ONCE_MSG = (
    "saved_tensors can only be accessed once when clear_saved_tensors_on_access=True is set "
    "on the autograd.Function. Either access saved_tensors only once, or set "
    "clear_saved_tensors_on_access=False."
)


class BackwardCFunction(Node):
    """The node of a custom Function call; it is also the ``ctx`` its methods receive."""

    _forward_cls = None

    materialize_grads = False  # done here, so that set_materialize_grads(False) holds
    runs_without_grads = True  # backward runs even when no output got a gradient

    def __init__(self) -> None:
        super().__init__()
        self._materialize = True
        self._dirty = ()
        self._non_differentiable = ()
        self._to_save = None
        self._is_tensor_arg = ()

    def mark_dirty(self, *tensors) -> None:
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self._materialize = value

    def save_for_backward(self, *tensors) -> None:
        # kept as given: they are saved once the outputs are wired to this node, so that a
        # saved output is recognised as one (Function.apply)
        self._to_save = tensors

    def save_for_forward(self, *tensors) -> None:
        pass

    @property
    def saved_tensors(self) -> tuple:
        """What ``save_for_backward`` kept; with ``clear_saved_tensors_on_access = True`` on the
        Function, the first read also lets them go, and any later read raises, as in torch."""
        if not self._forward_cls.clear_saved_tensors_on_access:
            return self._unpack_saved()
        if self.__dict__.get("_saved_accessed"):
            raise RuntimeError(ACCESSED_ONCE_MSG)
        tensors = self._unpack_saved()
        self._saved = None
        self._saved_accessed = True
        return tensors

    def _backward(self, grads: list) -> tuple:
        typename = _loaded["disthook.autograd.engine"].typename
        Tensor = _loaded["disthook.tensor"].Tensor

        if self._materialize:  # (an output that is not a tensor gets None, as in torch)
            grads = [
                Tensor._make(np.zeros(meta[0], dtype=meta[1]), None, 0)
                if g is None and meta is not None else g
                for g, meta in zip(grads, self._output_meta)
            ]
        result = self._forward_cls.backward(self, *grads)
        if type(result) is not tuple:
            result = (result,)
        n_args = len(self._is_tensor_arg)
        if len(result) != n_args:
            if len(result) > n_args and all(r is None for r in result[n_args:]):
                result = result[:n_args]
            else:
                raise RuntimeError(
                    f"function {self.name()} returned an incorrect number of gradients "
                    f"(expected {n_args}, got {len(result)})")
        out = []
        for pos, (g, is_tensor) in enumerate(zip(result, self._is_tensor_arg)):
            if not is_tensor:
                if g is not None:
                    raise RuntimeError(
                        f"function {self.name()} returned a gradient different than None at "
                        f"position {pos + 1}, but the corresponding forward input was not a "
                        "Variable")
                continue
            if g is not None and not isinstance(g, Tensor):
                raise RuntimeError(f"expected Variable or None (got {typename(g)})")
            out.append(g)
        return tuple(out)


_view_class = None


def _custom_view_class():
    """``_CustomFunctionView``, made on first use (disthook.tensor imports this package)."""
    global _view_class
    if _view_class is not None:
        return _view_class
    Tensor = _loaded["disthook.tensor"].Tensor

    grad_fn_slot = Tensor.__dict__["_grad_fn"]

    class _CustomFunctionView(Tensor):
        """An output of a custom Function that is a view (an input returned as-is, or a view
        made in forward). As in torch, its history cannot be rebuilt: once it or its base is
        changed in place, reading its grad_fn (an op that records it, backward, is_leaf)
        raises."""

        __slots__ = ()

        @property
        def _grad_fn(self):
            if self._vc[0] != self.__dict__["_view_version"]:
                i, name = self.__dict__["_custom_view"]
                raise RuntimeError(VIEW_BASE_INPLACE_MSG.format(i=i, name=name))
            return grad_fn_slot.__get__(self, Tensor)

        @_grad_fn.setter
        def _grad_fn(self, node) -> None:
            grad_fn_slot.__set__(self, node)

    _view_class = _CustomFunctionView
    return _view_class


def _as_custom_view(view, base, node, output_nr: int, name: str):
    """Make Tensor ``view`` (sharing storage and version with ``base``) the custom-Function
    view output ``output_nr`` of ``node``."""
    view.__class__ = _custom_view_class()
    view._grad_fn, view._output_nr, view._requires_grad = node, output_nr, True
    view._vc = base._vc
    view._base = base._base if base._base is not None else base
    view.__dict__["_custom_view"] = (output_nr, name)
    view.__dict__["_view_version"] = base._vc[0]
    return view


def _alias(t):
    """A new tensor on ``t``'s storage and version counter, without history (torch returns
    one for a non-differentiable input that forward returned as-is)."""
    Tensor = _loaded["disthook.tensor"].Tensor

    alias = Tensor._make(t._data, None, 0)
    alias._vc = t._vc
    alias._base = t._base if t._base is not None else t
    return alias


class Function:
    """Base class of user-defined differentiable operations (torch.autograd.Function)."""

    # True: ctx.saved_tensors lets the saved tensors go at the first read (may be read once)
    clear_saved_tensors_on_access = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(f"{cls.__name__}Backward", (BackwardCFunction,),
                                 {"_forward_cls": cls, "__module__": cls.__module__})

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use "
            "new-style autograd function with static forward method. (Example: "
            "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    # under vmap: the forward per index (True), or the class's own vmap staticmethod, called
    # with the whole batch (see autograd/_vmap_functions.py)
    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("To use autograd.Function with vmap, you must either "
                                  "override the vmap staticmethod or set "
                                  "generate_vmap_rule=True.")

    @classmethod
    def apply(cls, *args, **kwargs):
        if _vmaps[0] and _vmap_functions.running() is not None and _vmap_functions.own(cls):
            return _vmap_functions.apply_in_vmap(cls, args, kwargs)
        Tensor = _loaded["disthook.tensor"].Tensor

        ctx = cls._backward_cls()
        is_tensor, needs, input_ids = [], [], set()
        for a in args:  # one loop, not a comprehension each: a frame apiece (Python 3.11)
            if isinstance(a, Tensor):
                is_tensor.append(True)
                needs.append(a._requires_grad)
                input_ids.add(id(a))
            else:
                is_tensor.append(False)
                needs.append(False)
        is_tensor, needs = tuple(is_tensor), tuple(needs)
        ctx.needs_input_grad = needs
        uses_setup = cls.setup_context is not Function.setup_context
        state = grad_mode._state  # forward runs under no_grad (the context manager, inlined)
        enabled, state.enabled = state.enabled, False
        try:
            if uses_setup:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        finally:
            state.enabled = enabled
        records = enabled and True in needs
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        dirty = _bump_dirty(ctx._dirty) if ctx._dirty else _NONE
        if records:
            edges, metas = [], []
            for a, t in zip(args, is_tensor):
                if t:
                    edges.append(gradient_edge(a))
                    metas.append((a._data.shape, a._data.dtype))
            ctx._is_tensor_arg = is_tensor
            ctx.next_functions = tuple(edges)
            ctx._input_meta = tuple(metas)
            ctx._output_meta = tuple([
                (o._data.shape, o._data.dtype) if isinstance(o, Tensor) else None
                for o in outs])
        node = ctx if records else None
        non_diff = {id(t) for t in ctx._non_differentiable} if ctx._non_differentiable else _NONE
        name = cls.__name__
        wrapped = tuple([
            _wrap_output(o, i, node, name, id(o) in input_ids, id(o) in dirty,
                         id(o) not in non_diff)
            for i, o in enumerate(outs)])
        to_save, ctx._to_save = ctx._to_save, None  # (no cycle via ctx if a pack hook raises)
        if records and to_save is not None:
            ctx._saved = tuple(_saved(t, i, ctx) for i, t in enumerate(to_save))
        return wrapped[0] if single else wrapped


_NONE = frozenset()


def _bump_dirty(tensors) -> set:
    """Validate ``ctx.mark_dirty`` arguments and bump their versions; their ids."""
    Tensor = _loaded["disthook.tensor"].Tensor

    ids = set()
    for t in tensors:
        if not isinstance(t, Tensor):
            # (torch's text really stops there)
            raise RuntimeError(
                "mark_dirty can only accept variables, but argument ")
        ids.add(id(t))
        t._vc[0] += 1
    return ids


def _wrap_output(o, i: int, node, name: str, is_input: bool, is_modified: bool,
                 marked_differentiable: bool):
    """Output ``i`` of a custom Function, wired to ``node`` as torch does (see its
    custom_function.cpp for the cases)."""
    Tensor = _loaded["disthook.tensor"].Tensor

    if not isinstance(o, Tensor):
        return o
    if node is None or not marked_differentiable or _dtype.kind(o._data.dtype) not in "fc":
        # not differentiable: no history; inputs come back as aliases
        if not o._requires_grad:
            return _alias(o) if is_input and not is_modified else o
        if is_input:
            return o.detach()
        if o._base is None:
            o.detach_()
        return o
    if is_modified:
        if o._grad_fn is None and o._requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad has been used in an in-place operation.")
        if not is_input:
            warnings.warn(
                "ctx.mark_dirty() received a tensor that was not an input. Only input Tensors "
                "that have been mutated should be passed to ctx.mark_dirty().", UserWarning,
                stacklevel=3)
        # modified in place and returned: the tensor itself takes the new history, as after
        # an in-place op (earlier tensor hooks stay with the old node, retain_grad follows)
        old_node, old_nr = o._grad_fn, o._output_nr
        o._grad_fn, o._output_nr, o._requires_grad = node, i, True
        o._backward_hooks = None
        if o._retains_grad:
            if old_node is not None and old_node._retains:
                old_node._retains.pop(old_nr, None)
            o._retains_grad = False
            o.retain_grad()
        return o
    if is_input:
        # an input returned as-is becomes a view of it; in-place on it is forbidden
        return _as_custom_view(Tensor._make(o._data, None, 0), o, node, i, name)
    if o._base is not None and type(o) is Tensor:
        return _as_custom_view(o, o._base, node, i, name)  # a view made in forward
    o._grad_fn, o._output_nr, o._requires_grad = node, i, True
    return o


def _saved(t, i: int, node):
    """One ``ctx.save_for_backward`` argument, saved once the outputs are wired."""
    Tensor = _loaded["disthook.tensor"].Tensor

    if t is None:
        return None
    if not isinstance(t, Tensor):
        typename = _loaded["disthook.autograd.engine"].typename

        raise TypeError(f"save_for_backward can only save variables, but argument {i} is of "
                        f"type {typename(t)}")
    return _SavedTensor(t, node)


class InplaceFunction(Function):
    pass


class NestedIOFunction(Function):
    pass


ONCE_DIFFERENTIABLE_MSG = ("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")


class DelayedError(Function):
    """Passes its inputs through; a backward that reaches it raises ``ctx.msg`` (what a
    gradient computed by a ``once_differentiable`` backward carries under ``create_graph``)."""

    @staticmethod
    def forward(ctx, msg, *tensors):
        ctx.msg = msg
        Tensor = _loaded["disthook.tensor"].Tensor
        outs = tuple(None if t is None else Tensor._make(t._data, None, 0) for t in tensors)
        return outs[0] if len(outs) == 1 else outs

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.msg)


def once_differentiable(fn):
    """Runs ``backward`` without recording a graph. Where a graph was asked for (under
    ``create_graph``, gradients that require grad coming in), the gradients it returns carry
    a node that raises if a later backward reaches it, as in torch: never a silent zero."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with grad_mode.no_grad():
            outputs = fn(ctx, *args)
        return _guarded_once(outputs, args)

    return wrapper


def _guarded_once(outputs, grads: tuple):
    """``outputs`` of a once_differentiable backward, behind a ``DelayedError`` where a
    graph is being recorded. (A function of this module, not of the wrapper: a deployed
    module's backward travels by value, and its wrapper's globals with it.)"""
    Tensor = _loaded["disthook.tensor"].Tensor
    if not grad_mode.is_grad_enabled() or not any(
            isinstance(g, Tensor) and g.requires_grad for g in grads):
        return outputs
    single = not isinstance(outputs, tuple)
    outs = (outputs,) if single else outputs
    fakes = [o.detach().requires_grad_() if isinstance(o, Tensor) else None for o in outs]
    if all(f is None for f in fakes):
        return outputs
    guarded = DelayedError.apply(ONCE_DIFFERENTIABLE_MSG, *fakes)
    guarded = (guarded,) if len(fakes) == 1 else guarded
    return guarded[0] if single else tuple(
        g if isinstance(o, Tensor) else o for g, o in zip(guarded, outs))
