"""Hook handles shared by every hook kind, and the graph nodes behind full module hooks."""
from __future__ import annotations

import os
import sys
import warnings
import weakref

# Names from modules that import this one are looked up at call time in sys.modules: they
# are loaded by then, and a from-import inside a hot function costs about 1.7 us per call.
from sys import modules as _loaded
from typing import Any


class RemovableHandle:
    """Removes one hook from the dict(s) it was registered in.

    Ids come from one class-wide counter, so handles of every hook kind are ordered by
    registration. The handle holds its dicts by weak reference: it never keeps a module or
    tensor alive, and `remove()` is a silent no-op once they are gone or on a second call.
    """

    next_id: int = 0

    def __init__(self, hooks_dict: Any, *, extra_dict: Any = None) -> None:
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        self.extra_dict_ref: tuple = ()
        if isinstance(extra_dict, dict):
            self.extra_dict_ref = (weakref.ref(extra_dict),)
        elif isinstance(extra_dict, list):
            self.extra_dict_ref = tuple(weakref.ref(d) for d in extra_dict)

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __getstate__(self):
        if self.extra_dict_ref:
            return (self.hooks_dict_ref(), self.id, tuple(r() for r in self.extra_dict_ref))
        return (self.hooks_dict_ref(), self.id)

    def __setstate__(self, state) -> None:
        if state[0] is None:
            self.hooks_dict_ref = weakref.ref(_Dead())
        else:
            self.hooks_dict_ref = weakref.ref(state[0])
        self.id = state[1]
        RemovableHandle.next_id = max(RemovableHandle.next_id, self.id + 1)
        self.extra_dict_ref = tuple(weakref.ref(d) for d in state[2]) if len(state) > 2 else ()

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class _Dead(dict):
    """A weak-referenceable empty dict for handles unpickled without their dict."""


# ---- module backward hooks ------------------------------------------------------------------
#
# ``register_full_backward_hook`` / ``register_full_backward_pre_hook`` are real graph nodes:
# ``Module.__call__`` sends the module's tensor inputs, and then its tensor outputs, through
# the identity Function ``BackwardHookFunction``. The output-side node learns grad_output and
# runs the pre-hooks; the input-side node, which runs once every gradient w.r.t. the inputs
# is known, runs the full hooks.

NO_INPUT_GRAD_WARNING = (
    "Full backward hook is firing when gradients are computed with respect to module outputs "
    "since no inputs require gradients. See "
    "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
    "#torch.nn.Module.register_full_backward_hook for more details."
)
NO_INPUT_GRAD_RETURN_MSG = (
    "Backward hook for Modules where no input requires gradient should always return None or "
    "None for all gradients."
)


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside disthook.

    torch's warning from inside backward names the line that called ``backward()``.
    """
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package_dir):
        frame = frame.f_back
        level += 1
    return level


def _replacement(current: tuple, new: tuple) -> tuple | None:
    """What a node hook returns for ``new``: None when it holds ``current``'s very objects,
    so that the engine has nothing to replace or check."""
    if len(new) != len(current):
        return new
    for a, b in zip(new, current):
        if a is not b:
            return new
    return None


class BackwardHook:
    """The full backward (pre-)hooks of one module call, wired into its graph.

    Holds the module strongly (the graph keeps it alive) and the hook lists as they were at
    forward time. ``grad_outputs`` carries the output gradients from the output-side node to
    the input-side node of the same call.
    """

    def __init__(self, module, user_hooks: list, user_pre_hooks: list) -> None:
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs: tuple | None = None
        self.n_inputs = -1
        self.input_tensors_index: list | None = None
        self.n_outputs = -1
        self.output_tensors_index: list | None = None

    # ---- packing: one slot per argument, None where the argument is not a Tensor ----------
    @staticmethod
    def _pack_with_none(indices, values, size: int) -> tuple:
        if len(indices) == size:  # every argument a tensor (indices are 0 .. size - 1)
            return tuple(values)
        packed = [None] * size
        for i, value in zip(indices, values):
            packed[i] = value
        return tuple(packed)

    @staticmethod
    def _unpack_none(indices, values) -> tuple:
        if len(indices) == len(values):  # every argument a tensor, in order
            return tuple(values)
        return tuple([values[i] for i in indices])

    # ---- the two graph hooks ----------------------------------------------------------------
    def _input_node_hook(self, grad_inputs, _grad_outputs):
        """Post-hook of the input-side node: run the full backward hooks."""
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing through the outputs
            return None
        grads = self._pack_with_none(self.input_tensors_index, grad_inputs, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, grads, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(grads):
                raise RuntimeError(
                    "Backward hook returned an invalid number of grad_input, got "
                    f"{len(out)}, but expected {len(grads)}")
            grads = out
        self.grad_outputs = None
        return _replacement(grad_inputs, self._unpack_none(self.input_tensors_index, grads))

    def _output_node_hook(self, grad_inputs, grad_outputs):
        """Post-hook of the output-side node: record grad_output, run the pre-hooks."""
        self.grad_outputs = self._pack_with_none(
            self.output_tensors_index, grad_outputs, self.n_outputs)
        for hook in self.user_pre_hooks:
            out = hook(self.module, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(self.grad_outputs):
                raise RuntimeError(
                    "Backward pre hook returned an invalid number of grad_output, got "
                    f"{len(out)}, but expected {len(self.grad_outputs)}")
            self.grad_outputs = out
        grad_outputs = self.grad_outputs
        if self.input_tensors_index is None:
            # no input requires grad: the input-side node does not exist, fire here
            warnings.warn(NO_INPUT_GRAD_WARNING, UserWarning, stacklevel=_caller_stacklevel())
            grad_inputs = self._pack_with_none([], [], self.n_inputs)
            for hook in self.user_hooks:
                out = hook(self.module, grad_inputs, self.grad_outputs)
                if out is not None and not (
                        isinstance(out, tuple) and all(g is None for g in out)):
                    raise RuntimeError(NO_INPUT_GRAD_RETURN_MSG)
            self.grad_outputs = None
        return _replacement(grad_inputs,
                            self._unpack_none(self.output_tensors_index, grad_outputs))

    # ---- wrapping arguments and results -----------------------------------------------------
    def _apply_on_tensors(self, node_hook, args: tuple):
        """Send the Tensors of ``args`` through BackwardHookFunction; hook its node.

        Returns the new args and the positions of the Tensors, or ``(args, None)`` when
        nothing needs a gradient (or grad mode is off): then no node is made.
        """
        grad_mode = _loaded["disthook.autograd"].grad_mode
        BackwardHookFunction = _loaded["disthook.nn.modules._functions"].BackwardHookFunction
        Tensor = _loaded["disthook.tensor"].Tensor

        positions, tensors, needed = [], [], False
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                positions.append(i)
                tensors.append(a)
                needed = needed or a._requires_grad
        if not (needed and grad_mode._state.enabled):
            return args, None
        wrapped = BackwardHookFunction.apply(*tensors)
        for t in wrapped:  # the outputs that need a gradient have the function's node
            node = t._grad_fn
            if node is not None and type(node) is BackwardHookFunction._backward_cls:
                break
        def hook(grad_inputs, grad_outputs):  # the name torch's errors give this node's hook
            return node_hook(grad_inputs, grad_outputs)

        node.register_hook(hook)
        # whose node this is (a deployment's double backward reads it: workers/twice_split.py)
        node._module_hook = (self, node_hook == self._input_node_hook)
        new_args = list(args)
        for i, t in zip(positions, wrapped):
            new_args[i] = t
        if type(args) is not tuple:  # a namedtuple keeps its type
            return type(args)(*new_args), positions
        return tuple(new_args), positions

    def setup_input_hook(self, args: tuple) -> tuple:
        new_args, positions = self._apply_on_tensors(self._input_node_hook, args)
        self.n_inputs = len(args)
        self.input_tensors_index = positions
        return new_args

    def setup_output_hook(self, result):
        is_tuple = isinstance(result, tuple)
        outputs = result if is_tuple else (result,)
        new_outputs, positions = self._apply_on_tensors(self._output_node_hook, outputs)
        self.n_outputs = len(outputs)
        self.output_tensors_index = positions
        return new_outputs if is_tuple else new_outputs[0]
