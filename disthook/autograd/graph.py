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
from types import MappingProxyType
from typing import NamedTuple

from disthook.autograd import inference
from disthook.autograd import saved_hooks as _saved_hooks
from disthook.autograd.saved_hooks import (  # noqa: F401 - torch.autograd.graph's names
    disable_saved_tensors_hooks,
    save_on_cpu,
    saved_tensors_hooks,
)
from disthook.utils.hooks import RemovableHandle

_sequence = itertools.count()
_UINT64_MAX = 2**64 - 1

SECOND_BACKWARD_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)
DETACHED_INPUT_MSG = (
    "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_()."
    "This is not supported, please use out-of-place `.detach()` instead"
)
PACK_INPLACE_MSG = (
    "A saved tensor pack hook is modifying its input in place. Tensors provided as input to "
    "pack hook cannot be modified by in-place operations as this can lead to unexpected "
    "side-effects. Please open an issue if you need to perform in-place operations on the "
    "input to a pack hook."
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
    _edge_meta = None  # {output_nr: (shape, np dtype)} of the edges get_gradient_edge gave
    metadata_ = None

    def __init__(self) -> None:  # (anomaly mode wraps it while on: anomaly_mode.py)
        self.next_functions: tuple = ()
        self._seq = next(_sequence)
        self.needs_input_grad: tuple = ()
        self._input_meta: tuple = ()  # (shape, np dtype) per input

    # ---- identity -------------------------------------------------------------------------
    def name(self) -> str:
        name = type(self).__name__
        # torch's hand-written C++ nodes have qualified names; its generated ones do not
        return f"torch::autograd::{name}" if name == "NotImplemented" else name

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

    def _unpack_saved(self) -> tuple:
        """The saved tensors, unpacked: ``saved_tensors`` of the nodes that have one (a
        custom Function's; a built-in op's in its own backward)."""
        if self._freed:
            raise RuntimeError(SECOND_BACKWARD_MSG)
        saved = self._saved
        if saved is None:
            return ()
        if len(saved) == 1:  # no comprehension's frame for the common case
            s = saved[0]
            return (None if s is None else s.unpack(self),)
        return tuple([None if s is None else s.unpack(self) for s in saved])

    def _release(self) -> None:
        """Free saved tensors after a backward without retain_graph."""
        if self._saved is not None:
            self._saved = None
            self._freed = True

    # ---- torch's named views of the saved tensors: grad_fn._saved_self, _raw_saved_self --
    # An op names what it saves, position by position, in ``saved_names`` (torch's names:
    # "self", "other", "result", ...); a position it did not save reads as None.
    saved_names: tuple = ()
    # the other values torch's node keeps, ``_saved_dim``, ``_saved_keepdim``,
    # ``_saved_self_sym_sizes`` ...: name -> a function of the node, declared by the op beside
    # what its forward stores (graph readers such as torch-pruning read them)
    saved_values = MappingProxyType({})

    def __getattr__(self, name: str):
        if name.startswith("_saved_") and name[7:] in type(self).saved_values:
            return type(self).saved_values[name[7:]](self)
        for head, raw in (("_raw_saved_", True), ("_saved_", False)):
            if name.startswith(head) and name[len(head):] in type(self).saved_names:
                i = type(self).saved_names.index(name[len(head):])
                if raw:
                    return SavedTensor._of(self, i)
                if self._freed:
                    raise RuntimeError(SECOND_BACKWARD_MSG)
                saved = self._saved[i] if self._saved and i < len(self._saved) else None
                return None if saved is None else saved.unpack(self)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __dir__(self) -> list:
        names = type(self).saved_names
        return sorted({*super().__dir__(), *(f"_saved_{n}" for n in names),
                       *(f"_raw_saved_{n}" for n in names),
                       *(f"_saved_{n}" for n in type(self).saved_values)})

    # ---- scheduling -----------------------------------------------------------------------
    def _sequence_nr(self) -> int:
        """The node's priority in backward: a later node runs earlier (AccumulateGrad's is
        the largest 64-bit unsigned value, as in torch)."""
        return _UINT64_MAX if self._seq == float("inf") else self._seq

    def _set_sequence_nr(self, sequence_nr: int) -> None:
        self._seq = sequence_nr

    # ---- backward -------------------------------------------------------------------------
    def _backward(self, grads: list) -> tuple:
        raise NotImplementedError(f"{self.name()} has no backward")


class SavedTensor:
    """``grad_fn._raw_saved_<name>``: one saved tensor, to give its own pack/unpack hooks
    (``torch.autograd.SavedTensor``; made by autograd only, as in torch)."""

    __slots__ = ("index", "node")

    def __init__(self) -> None:
        raise RuntimeError("Trying to create a SavedTensor object from Python is forbidden.")

    @classmethod
    def _of(cls, node: Node, index: int) -> SavedTensor:
        raw = object.__new__(cls)
        raw.node, raw.index = node, index
        return raw

    def _saved(self):
        node = self.node
        return node._saved[self.index] if node._saved else None

    @property
    def data(self):
        """What is kept: the pack hook's result as it returned it; without hooks the saved
        input itself, or a detached tensor on a saved output's data."""
        saved = self._saved()
        if saved is None:
            return None
        if saved.unpack_hook is not None:
            return saved.packed
        if saved.is_output:
            Tensor = _loaded["disthook.tensor"].Tensor

            t = Tensor._make(saved.data, None, 0)
            t._vc = saved.vc
            return t
        return saved.tensor

    @property
    def unpack_hook(self):
        saved = self._saved()
        return None if saved is None else saved.unpack_hook

    def register_hooks(self, pack_hook, unpack_hook) -> None:
        """Pack the saved tensor now with ``pack_hook``; backward reads it through
        ``unpack_hook``. One pair per saved tensor."""
        if not (callable(pack_hook) and callable(unpack_hook)):
            raise TypeError("register_hooks(): incompatible function arguments: expected two "
                            f"callables (pack_hook, unpack_hook), got "
                            f"{type(pack_hook).__name__} and {type(unpack_hook).__name__}")
        node = self.node
        if node._freed:
            raise RuntimeError(SECOND_BACKWARD_MSG)
        saved = self._saved()
        if saved is None:
            raise RuntimeError("None is forbidden: this saved tensor was not saved")
        if saved.unpack_hook is not None:
            raise RuntimeError("Calling register_hooks on a saved tensor whose hooks have "
                               "already been set. Hint: only one pair of hooks is allowed at "
                               "a time.")
        tensor = saved.unpack(node)
        saved._pack(tensor, (pack_hook, unpack_hook))
        saved.tensor = saved.data = None  # only the packed value is kept from now on


class _SavedTensor:
    """A tensor saved for backward: its data, version at save time, and graph position.

    Saving a node's own output keeps no reference to the output tensor (that would be a
    cycle); unpacking rebuilds it with this node as grad_fn. Under saved_tensors_hooks only
    what the pack hook returned is kept, with the tensor's place in the graph (``edge``);
    as in torch, in-place changes are then not checked.
    """

    __slots__ = ("tensor", "data", "version", "vc", "output_nr", "had_grad_fn", "is_output",
                 "packed", "unpack_hook", "edge")

    def __init__(self, t, node: Node | None, is_output: bool | None = None) -> None:
        if type(t._vc) is not list:
            raise RuntimeError(inference.SAVED_MSG)
        grad_fn = t._grad_fn  # read once: on a custom Function's view it is a checked property
        self.is_output = grad_fn is node if is_output is None else is_output
        pairs = _saved_hooks._tls.pairs
        if pairs and not t.__dict__.get("_wrapped_number"):  # torch packs no python scalar
            self._pack(t, pairs[-1])
            return
        self.unpack_hook = None
        self.version = t._vc[0]
        self.vc = t._vc
        if self.is_output:
            self.tensor = None
            self.data = t._data
            self.output_nr = t._output_nr
        else:
            self.tensor = t
            self.had_grad_fn = grad_fn is not None

    def _pack(self, t, pair) -> None:
        pack_hook, self.unpack_hook = pair
        version = t._vc[0]
        grad_mode = _loaded["disthook.autograd.grad_mode"]
        prev = grad_mode._state.enabled
        grad_mode._state.enabled = False
        try:
            self.packed = pack_hook(t)
        finally:
            grad_mode._state.enabled = prev
        if t._vc[0] != version:
            raise RuntimeError(PACK_INPLACE_MSG)
        self.output_nr = t._output_nr
        if self.is_output:
            self.edge = None
        elif t._grad_fn is not None:
            self.edge = t._grad_fn
        elif t._requires_grad:
            self.edge = grad_accumulator(t)
        else:
            self.edge = None

    def unpack(self, node: Node):
        if self.unpack_hook is not None:
            return self._unpack_hooked(node)
        if not self.is_output and self.had_grad_fn and self.tensor._grad_fn is None:
            raise RuntimeError(DETACHED_INPUT_MSG)
        if self.vc[0] != self.version:
            inplace_error = _loaded["disthook.autograd.engine"].inplace_error

            raise inplace_error(self, node)
        if self.is_output:
            Tensor = _loaded["disthook.tensor"].Tensor

            t = Tensor._make(self.data, node, self.output_nr)
            t._vc = self.vc
            return t
        return self.tensor

    def _unpack_hooked(self, node: Node):
        """The unpack hook's tensor, put back in the saved tensor's place in the graph."""
        Tensor = _loaded["disthook.tensor"].Tensor

        value = self.unpack_hook(self.packed)
        if not isinstance(value, Tensor):
            typename = _loaded["disthook.autograd.engine"].typename
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but "
                            f"got result of type {typename(value)}")
        if self.is_output:
            return Tensor._make(value._data, node, self.output_nr)
        edge = self.edge
        if edge is None:
            return value
        if type(edge) is AccumulateGrad:
            if value is edge.variable:
                return value
            t = Tensor._make(value._data, None, 0)
            t._requires_grad = True
            t._grad_acc = weakref.ref(edge)
            return t
        return Tensor._make(value._data, edge, self.output_nr)


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


_INF = float("inf")
_PLAIN_INIT = Node.__init__


def grad_accumulator(t) -> AccumulateGrad | None:
    """The leaf's AccumulateGrad; the same object while anything holds it. None for a view
    made under no_grad that requires grad through its base only (``Tensor._grad_from_base``).

    As in torch, a new one each step (the graph that held the last is gone): it is made
    here without its two ``__init__`` calls, which cost ~20 us a product in a training step,
    run cold right after the product's kernel (issue 33); anomaly mode, which records in
    ``Node.__init__``, still goes through them."""
    ref = t._grad_acc
    node = ref() if ref is not None else None
    if node is None:
        if t._grad_from_base:  # a view made under no_grad: no gradient reaches it
            t._check_base_unchanged()
            return None
        if Node.__init__ is not _PLAIN_INIT:
            node = AccumulateGrad(t)
        else:  # AccumulateGrad.__init__'s and Node.__init__'s fields, the sequence as they do
            node = _new_node(AccumulateGrad)
            node.next_functions = node.needs_input_grad = node._input_meta = ()
            next(_sequence)
            node._seq = _INF
            node.variable = t
        t._grad_acc = weakref.ref(node)
    return node


_new_node = object.__new__


def gradient_edge(t) -> tuple:
    """(node, output_nr) receiving the gradient of ``t``; (None, 0) when none does.
    A GradientEdge stands for itself."""
    if type(t) is GradientEdge:
        return (t.node, t.output_nr)
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    if t._requires_grad:
        return (grad_accumulator(t), 0)
    return (None, 0)


def walk(starts, passed=None):
    """Each node reachable from the nodes ``starts`` (None among them ignored), once, depth
    first; a node that ``passed(node)`` says to go by is neither given nor gone through."""
    stack, seen = list(starts), set()
    while stack:
        node = stack.pop()
        if node is None or node in seen or (passed is not None and passed(node)):
            continue
        seen.add(node)
        yield node
        stack.extend(nxt for nxt, _ in node.next_functions)


class GradientEdge(NamedTuple):
    """Where a gradient enters the graph: input ``output_nr`` of ``node``, the gradient of
    the node's forward output of that number. ``autograd.grad`` and ``backward`` take it in
    place of a tensor, as an output or an input."""

    node: Node
    output_nr: int
    # torch needs it to keep a graph of Python nodes alive; disthook's node already does
    ownership_token: Node | None = None


def get_gradient_edge(tensor) -> GradientEdge:
    """The edge receiving ``tensor``'s gradient: its grad_fn, or a leaf's AccumulateGrad.
    ``autograd.grad(loss, get_gradient_edge(t))`` equals ``autograd.grad(loss, t)``, and keeps
    meaning the same tensor version after ``t`` is changed in place."""
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that "
                           "does not require gradients")
    node, output_nr = gradient_edge(tensor)
    if node._edge_meta is None:
        node._edge_meta = {}
    node._edge_meta[output_nr] = (tensor._data.shape, tensor._data.dtype)
    return GradientEdge(node, output_nr)


def increment_version(tensor) -> None:
    """Mark ``tensor`` (or each tensor of an iterable) as changed in place, for a change made
    to its data where autograd could not see it (``t.numpy()[:] = ...``): a backward that
    saved the old version then raises, as after any in-place op."""
    Tensor = _loaded["disthook.tensor"].Tensor
    tensors = (tensor,) if isinstance(tensor, Tensor) else tensor
    try:
        tensors = list(tensors)
    except TypeError:
        tensors = None
    if tensors is None or not all(isinstance(t, Tensor) for t in tensors):
        raise RuntimeError("increment_version expect a Iterable[Tensor] as input")
    for t in tensors:
        t._vc[0] += 1


def edge_metadata(edge: GradientEdge) -> tuple:
    """(shape, numpy dtype) of the gradient that flows into ``edge``."""
    node, nr = edge.node, edge.output_nr
    if type(node) is AccumulateGrad:
        return node.variable._data.shape, node.variable._data.dtype
    if node._output_meta is not None:
        return node._output_meta[nr]
    if node._edge_meta is not None and nr in node._edge_meta:
        return node._edge_meta[nr]
    raise RuntimeError(f"disthook does not know the shape of output {nr} of {node.name()}: "
                       "make the edge with torch.autograd.graph.get_gradient_edge(tensor)")


# ---- hooks over several tensors ---------------------------------------------------------------

class _MultiHandle(RemovableHandle):
    """One handle over the tensor hooks behind a multi-grad hook."""

    def __init__(self, handles: tuple) -> None:  # takes no id of its own, as in torch
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __getstate__(self):
        return self.handles

    def __setstate__(self, state) -> None:
        self.handles = state


def _current_task():
    """The backward now running in this thread (None outside backward)."""
    tasks = getattr(_loaded["disthook.autograd.engine"]._running, "tasks", None)
    return tasks[-1] if tasks else None


def _refuse_deployed_mix(tensors: tuple, mode: str) -> None:
    """A multi-grad hook whose answer the deployed order cannot give: ``mode="all"`` over a
    deployed model's parameter (this process cannot tell which of them its backward reaches),
    ``mode="any"`` over parameters of a deployed model and tensors of this process (the
    workers compute their gradients before this process gets the call's input gradient,
    while one process may compute the input's first)."""
    params = _loaded.get("disthook.distributed.parameters")
    if params is None:
        return
    remote = [t for t in tensors if isinstance(t, params.RemoteStorage)]
    if not remote or (mode == "any" and len(remote) == len(tensors)):
        return
    names = ", ".join(repr(t._path) for t in remote)
    what = ("over a deployed model's parameters" if mode == "all" else
            "over parameters of a deployed model and tensors of this process")
    also = ", or give mode='any' only parameters of the deployed model" if mode == "any" else ""
    why = ("this process cannot tell which of them a backward reaches" if mode == "all" else
           "their gradients are computed on the workers, before this process's")
    raise RuntimeError(
        f"register_multi_grad_hook(..., mode={mode!r}) {what} ({names}): the deployment "
        f"cannot fire it as one process does ({why}). Register a tensor hook on each of "
        f"them (tensor.register_hook) and combine their gradients in your own code{also}")


# torch's: a leaf among a mode "all" hook's tensors is an input of the autograd.grad running
_LEAF_IN_GRAD_MSG = (
    "A leaf node was passed to _will_engine_execute_node but we are currently running "
    "autograd.grad(). This is currently not supported.")


def register_multi_grad_hook(tensors, fn, *, mode: str = "all") -> RemovableHandle:
    """``fn`` once per backward over several tensors.

    ``mode="all"``: ``fn(grads)`` once every tensor that this backward reaches has its
    gradient, with ``None`` for the tensors it does not reach. ``mode="any"``: ``fn(grad)``
    with the first of their gradients to be computed. ``fn``'s return value is ignored.
    """
    modes = ("all", "any")
    if mode not in modes:
        raise ValueError(f"Expects mode to be one of {modes} but got {mode}")
    tensors = tuple(tensors)
    if mode == "any":  # (a tensor that requires no grad is left out, as torch does)
        tensors = tuple(t for t in tensors if t.requires_grad)
    for t in tensors:
        if not t.requires_grad:
            raise AssertionError("Expected gradient function to be set")
    _refuse_deployed_mix(tensors, mode)
    engine = _loaded["disthook.autograd.engine"]

    if mode == "any":
        fired = weakref.WeakKeyDictionary()

        def any_hook(grad):
            task = _current_task()
            if task is None or task in fired:
                return
            fired[task] = True
            fn(grad)

        return _MultiHandle(tuple(t.register_hook(any_hook) for t in tensors))

    pending = weakref.WeakKeyDictionary()  # task -> [grads so far, how many remain]

    def all_hook(index: int):
        def hook(grad):
            task = _current_task()
            if task is None:
                return
            state = pending.get(task)
            if state is None:
                nodes = [gradient_edge(t)[0] for t in tensors]
                captured = {node for node, _ in task.captures}
                if any(t.grad_fn is None and node in captured
                       for t, node in zip(tensors, nodes)):
                    raise RuntimeError(_LEAF_IN_GRAD_MSG)
                expected = sum(engine.will_execute(task, node) for node in nodes)
                state = pending[task] = [[None] * len(tensors), expected]
            state[0][index] = grad
            state[1] -= 1
            if state[1] == 0:
                del pending[task]
                fn(state[0])  # (a list, as torch gives it)
        return hook

    return _MultiHandle(tuple(t.register_hook(all_hook(i)) for i, t in enumerate(tensors)))
