"""Backward graph nodes (``tensor.grad_fn``) and the per-leaf AccumulateGrad sink.

A Node is the backward half of one op. It holds its edges (``next_functions``), the tensors
its backward needs (checked against in-place changes and freed after backward unless
``retain_graph``), its own pre- and post-hooks, and the tensor hooks of its outputs, keyed by
output number: a tensor hook belongs to the grad_fn the tensor had when it was registered.
"""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict

# Names from modules that import this one are looked up at call time in sys.modules: they
# are loaded by then, and a from-import inside a hot function costs about 1.7 us per call.
from sys import modules as _loaded

from disthook.utils.hooks import RemovableHandle

_sequence = itertools.count()

SECOND_BACKWARD_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


class Node:
    """One backward function of the graph."""

    materialize_grads = True  # the engine gives zeros for outputs that got no gradient
    drops_unneeded_grads = False  # built-in ops: no gradient for inputs that need none
    runs_without_grads = False  # runs even when no output got a gradient (custom Functions)

    # hot fields live in slots; the rest are class-level defaults, set per node only when used
    __slots__ = ("next_functions", "_seq", "needs_input_grad", "_input_meta", "__weakref__",
                 "__dict__")
    _pre_hooks = None
    _post_hooks = None
    _tensor_hooks = None  # {output_nr: OrderedDict} of the outputs' tensor hooks
    _retains = None  # {output_nr: weakref to the tensor that retains grad}
    _saved = None
    _freed = False
    _output_meta = None  # (shape, np dtype) per output, for multi-output nodes
    metadata_ = None

    def __init__(self) -> None:
        self.next_functions: tuple = ()
        self._seq = next(_sequence)
        self.needs_input_grad: tuple = ()
        self._input_meta: tuple = ()  # (shape, np dtype) per input

    # ---- identity -------------------------------------------------------------------------
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {hex(id(self))}>"

    @property
    def metadata(self) -> dict:
        if self.metadata_ is None:
            self.metadata_ = {}
        return self.metadata_

    # ---- hooks ----------------------------------------------------------------------------
    def register_hook(self, fn) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs) -> tuple | None``, run after this node."""
        if self._post_hooks is None:
            self._post_hooks = OrderedDict()
        handle = RemovableHandle(self._post_hooks)
        self._post_hooks[handle.id] = fn
        return handle

    def register_prehook(self, fn) -> RemovableHandle:
        """``fn(grad_outputs) -> tuple | None``, run before this node."""
        if self._pre_hooks is None:
            self._pre_hooks = OrderedDict()
        handle = RemovableHandle(self._pre_hooks)
        self._pre_hooks[handle.id] = fn
        return handle

    def _hooks_for_output(self, output_nr: int) -> OrderedDict:
        """The tensor-hook dict of output ``output_nr``, created on first use."""
        if self._tensor_hooks is None:
            self._tensor_hooks = {}
        hooks = self._tensor_hooks.get(output_nr)
        if hooks is None:
            hooks = self._tensor_hooks[output_nr] = OrderedDict()
        return hooks

    # ---- saved tensors --------------------------------------------------------------------
    def save_for_backward(self, *tensors) -> None:
        self._saved = tuple(None if t is None else _SavedTensor(t, self) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._freed:
            raise RuntimeError(SECOND_BACKWARD_MSG)
        if self._saved is None:
            return ()
        return tuple(None if s is None else s.unpack(self) for s in self._saved)

    def _release(self) -> None:
        """Free saved tensors after a backward without retain_graph."""
        if self._saved is not None:
            self._saved = None
            self._freed = True

    # ---- backward -------------------------------------------------------------------------
    def _backward(self, grads: list) -> tuple:
        raise NotImplementedError(f"{self.name()} has no backward")


class _SavedTensor:
    """A tensor saved for backward: its data, version at save time, and graph position.

    Saving a node's own output keeps no reference to the output tensor (that would be a
    cycle); unpacking rebuilds it with this node as grad_fn.
    """

    __slots__ = ("tensor", "data", "version", "vc", "output_nr", "requires_grad", "is_output")

    def __init__(self, t, node: Node) -> None:
        self.version = t._vc[0]
        self.vc = t._vc
        self.is_output = t._grad_fn is node
        if self.is_output:
            self.tensor = None
            self.data = t._data
            self.output_nr = t._output_nr
        else:
            self.tensor = t

    def unpack(self, node: Node):
        if self.vc[0] != self.version:
            inplace_error = _loaded["disthook.autograd.engine"].inplace_error

            raise inplace_error(self, node)
        if self.is_output:
            Tensor = _loaded["disthook.tensor"].Tensor

            t = Tensor._make(self.data, node, self.output_nr)
            t._vc = self.vc
            return t
        return self.tensor


class AccumulateGrad(Node):
    """The sink of a leaf that requires grad: runs its hooks and accumulates into ``.grad``."""

    __slots__ = ("variable",)

    def __init__(self, variable) -> None:
        super().__init__()
        self._seq = float("inf")  # like torch: a ready AccumulateGrad runs first
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"  # torch's C++ nodes have qualified names

    def accumulate(self, grad, fresh: bool = False) -> None:
        """Add ``grad`` into ``.grad`` (``fresh``: it may become ``.grad`` without a copy),
        then run the post-accumulate-grad hooks."""
        engine = _loaded["disthook.autograd.engine"]
        accumulate_into_grad, run_post_acc_hooks = engine.accumulate_into_grad, engine.run_post_acc_hooks

        accumulate_into_grad(self.variable, grad, fresh)
        hooks = self.variable._post_acc_hooks
        if hooks:
            run_post_acc_hooks(hooks, self.variable)

    def _backward(self, grads: list) -> tuple:
        self.accumulate(grads[0])
        return ()


def grad_accumulator(t) -> AccumulateGrad:
    """The leaf's AccumulateGrad; the same object while anything holds it."""
    ref = t._grad_acc
    node = ref() if ref is not None else None
    if node is None:
        node = AccumulateGrad(t)
        t._grad_acc = weakref.ref(node)
    return node


def gradient_edge(t) -> tuple:
    """(node, output_nr) receiving the gradient of ``t``; (None, 0) when none does."""
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    if t._requires_grad:
        return (grad_accumulator(t), 0)
    return (None, 0)
