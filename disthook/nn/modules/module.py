"""``Module``: parameters, buffers and submodules by attribute, and every module hook.

``Module.__call__`` is the one place module hooks run (hook_semantics.md §13): global and
local forward pre-hooks, the BackwardHook wrapping of inputs, ``forward``, forward hooks,
the wrapping of outputs, then the legacy backward hooks attached to the output's grad_fn.
When an exception escapes, the ``always_call`` forward hooks that have not run yet still run.
"""
from __future__ import annotations

import functools
import warnings
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from disthook import _dtype
from disthook.autograd import grad_mode
from disthook.nn.modules import _functions  # noqa: F401 - utils.hooks finds it loaded
from disthook.nn.parameter import Buffer, Parameter
from disthook.tensor import Tensor, _check_device
from disthook.tensor import device as _device
from disthook.utils.hooks import BackwardHook, RemovableHandle

__all__ = [
    "Module",
    "register_module_backward_hook",
    "register_module_buffer_registration_hook",
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
    "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook",
    "register_module_module_registration_hook",
    "register_module_parameter_registration_hook",
]

MIXED_BACKWARD_HOOKS_MSG = (
    "Cannot use both regular backward hooks and full backward hooks on a single Module. "
    "Please use only one of them."
)
MIXED_GLOBAL_BACKWARD_HOOKS_MSG = (
    "Cannot use both regular backward hooks and full backward hooks as a global Module hook. "
    "Please use only one of them."
)
DEAD_MODULE_MSG = "You are trying to call the hook of a dead Module!"
# the per-module dicts that hold its hooks (forward, backward, state-dict): what a copy of a
# module's hooks copies, and what a module sent to a worker leaves behind
HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
              "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
              "_backward_pre_hooks", "_backward_hooks", "_state_dict_hooks",
              "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
              "_load_state_dict_post_hooks")
EXTRA_STATE_KEY_SUFFIX = "_extra_state"

class Placement:
    """Where a module lives when it is not only here: the one interface through which
    ``Module`` meets a deployment (``disthook.distributed`` fills it in; nothing in ``nn``
    knows more). A module has a placement when ``module.__dict__["_placement"]`` holds one;
    a module without is an ordinary module. Each method is asked only by the ``Module``
    method of the same purpose."""

    def forward_for(self, module: Module):
        """The forward that ``__call__`` runs between the module's hooks here, or None: the
        whole call (its hooks too) runs where the module lives (``call``)."""
        return None

    def call(self, module: Module, args: tuple, kwargs: dict):
        raise NotImplementedError

    def legacy_backward_hooks(self, module: Module, hooks: list) -> list:
        """Of the legacy backward hooks of a call whose forward runs here, those that
        ``__call__`` attaches to the output's node (the rest fire where the last op ran)."""
        return hooks

    def hooks_changed(self, module: Module) -> None:
        """The module's hook dicts changed (a hook was registered or removed)."""

    def set_attr(self, module: Module, name: str, value) -> bool:
        """Carry out ``module.name = value`` where the module lives; False: not its affair
        (``Module.__setattr__`` goes on as for any module)."""
        return False

    def del_attr(self, module: Module, name: str) -> bool:
        return False

    def register_buffer(self, module: Module, name: str, tensor, persistent: bool) -> None:
        raise NotImplementedError

    def change_structure(self, module: Module, what: str) -> None:
        """``what`` (``add_module``, ``register_parameter``) would change the module's
        children or parameters: raise to refuse, return to let it happen here."""

    def train(self, module: Module, mode: bool) -> None:
        raise NotImplementedError

    def apply(self, module: Module, fn) -> None:
        raise NotImplementedError

    def save_state(self, module: Module, destination, prefix: str, keep_vars: bool) -> None:
        raise NotImplementedError

    def load_state(self, module: Module, state_dict, prefix: str, local_metadata,
                   missing_keys: list, unexpected_keys: list, error_msgs: list,
                   strict: bool) -> None:
        raise NotImplementedError

    def attribute(self, module: Module, name: str):
        """A name the module lacks (``Module.__getattr__`` found nothing): AttributeError, or
        what the deployment answers for it."""
        raise AttributeError(name)

    def detached(self, module: Module, state: dict) -> dict:
        """The module's ``__dict__`` for a copy or a pickle, without the placement."""
        state.pop("_placement", None)
        return state

LOAD_POST_HOOK_RETURN_MSG = (
    "Hooks registered with ``register_load_state_dict_post_hook`` are not expected to return "
    "new values, if incompatible_keys need to be modified, it should be done inplace."
)
ALWAYS_CALL_SILENCED_MSG = (
    "module forward hook with ``always_call=True`` raised an exception that was silenced as "
    "another error was raised in forward: {}"
)

# The five deprecation warnings of legacy backward hooks, in the order they are checked.
LEGACY_OUTPUT_NOT_TENSORS = (
    "Using non-full backward hooks on a Module that does not return a single Tensor or a tuple "
    "of Tensors is deprecated and will be removed in future versions. This hook will be "
    "missing some of the grad_output. Please use register_full_backward_hook to get the "
    "documented behavior."
)
LEGACY_INPUT_NOT_TENSORS = (
    "Using non-full backward hooks on a Module that does not take as input a single Tensor or "
    "a tuple of Tensors is deprecated and will be removed in future versions. This hook will "
    "be missing some of the grad_input. Please use register_full_backward_hook to get the "
    "documented behavior."
)
LEGACY_NESTED_OUTPUTS = (
    "Using a non-full backward hook when outputs are nested in python data structure is "
    "deprecated and will be removed in future versions. This hook will be missing some "
    "grad_output."
)
LEGACY_MANY_OUTPUT_NODES = (
    "Using a non-full backward hook when outputs are generated by different autograd Nodes is "
    "deprecated and will be removed in future versions. This hook will be missing some "
    "grad_output. Please use register_full_backward_hook to get the documented behavior."
)
LEGACY_MANY_NODES = (
    "Using a non-full backward hook when the forward contains multiple autograd Nodes is "
    "deprecated and will be removed in future versions. This hook will be missing some "
    "grad_input. Please use register_full_backward_hook to get the documented behavior."
)


# ---- global hooks (every module call, before the module's own) ----------------------------

_global_forward_pre_hooks: OrderedDict = OrderedDict()
_global_forward_hooks: OrderedDict = OrderedDict()
_global_forward_hooks_with_kwargs: OrderedDict = OrderedDict()
_global_forward_hooks_always_called: OrderedDict = OrderedDict()
_global_backward_pre_hooks: OrderedDict = OrderedDict()
_global_backward_hooks: OrderedDict = OrderedDict()
_global_is_full_backward_hook: bool | None = None  # sticky: set by the first registration
_global_buffer_registration_hooks: OrderedDict = OrderedDict()
_global_module_registration_hooks: OrderedDict = OrderedDict()
_global_parameter_registration_hooks: OrderedDict = OrderedDict()


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, args)`` before every module's forward; never gets kwargs."""
    handle = RemovableHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    return handle


def register_module_forward_hook(hook: Callable, *, with_kwargs: bool = False,
                                 always_call: bool = False) -> RemovableHandle:
    """``hook(module, args, output)`` after every module's forward.

    Like torch, the handle forgets only the always_call flag on removal; the with_kwargs
    flag stays behind (harmless: handle ids are never reused).
    """
    handle = RemovableHandle(_global_forward_hooks,
                             extra_dict=_global_forward_hooks_always_called)
    _global_forward_hooks[handle.id] = hook
    if with_kwargs:
        _global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_backward_hook(hook: Callable) -> RemovableHandle:
    """Legacy ``hook(module, grad_input, grad_output)`` for every module (deprecated)."""
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is True:
        raise RuntimeError(MIXED_GLOBAL_BACKWARD_HOOKS_MSG)
    _global_is_full_backward_hook = False
    handle = RemovableHandle(_global_backward_hooks)
    _global_backward_hooks[handle.id] = hook
    return handle


def register_module_full_backward_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, grad_output)`` for every module, before the module's own."""
    handle = RemovableHandle(_global_backward_pre_hooks)
    _global_backward_pre_hooks[handle.id] = hook
    return handle


def register_module_full_backward_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, grad_input, grad_output)`` for every module, before the module's own."""
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is False:
        raise RuntimeError(MIXED_GLOBAL_BACKWARD_HOOKS_MSG)
    _global_is_full_backward_hook = True
    handle = RemovableHandle(_global_backward_hooks)
    _global_backward_hooks[handle.id] = hook
    return handle


def register_module_buffer_registration_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, name, buffer) -> None | new buffer`` whenever a buffer is registered."""
    handle = RemovableHandle(_global_buffer_registration_hooks)
    _global_buffer_registration_hooks[handle.id] = hook
    return handle


def register_module_module_registration_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, name, submodule) -> None | new submodule`` on every registration."""
    handle = RemovableHandle(_global_module_registration_hooks)
    _global_module_registration_hooks[handle.id] = hook
    return handle


def register_module_parameter_registration_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, name, param) -> None | new param`` whenever a parameter is registered."""
    handle = RemovableHandle(_global_parameter_registration_hooks)
    _global_parameter_registration_hooks[handle.id] = hook
    return handle


def _run_registration_hooks(hooks: OrderedDict, module, name: str, value):
    for hook in tuple(hooks.values()):
        new = hook(module, name, value)
        if new is not None:
            value = new
    return value


class _WrappedHook:
    """A hook that is handed its module first, held by weak reference (``module=None``:
    called as is). Legacy backward hooks and load_state_dict pre-hooks are stored so."""

    def __init__(self, hook: Callable, module: Module | None = None) -> None:
        self.hook = hook
        functools.update_wrapper(self, hook)  # the engine names the hook in its errors
        self.with_module = module is not None
        if self.with_module:
            self.module = weakref.ref(module)

    def __call__(self, *args, **kwargs):
        if not self.with_module:
            return self.hook(*args, **kwargs)
        module = self.module()
        if module is None:
            raise RuntimeError(DEAD_MODULE_MSG)
        return self.hook(module, *args, **kwargs)

    def __getstate__(self) -> dict:
        # pickled with its module (a weak reference cannot be): a module's copy keeps its hooks
        state = {"hook": self.hook, "with_module": self.with_module}
        if self.with_module:
            state["module"] = self.module()
        return state

    def __setstate__(self, state: dict) -> None:
        self.hook = state["hook"]
        self.with_module = state["with_module"]
        if self.with_module:
            if state["module"] is None:
                raise RuntimeError("You are trying to revive the hook of a dead Module!")
            self.module = weakref.ref(state["module"])


# ---- helpers -------------------------------------------------------------------------------

class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _typename(obj) -> str:
    """``torch.typename``: the legacy tensor type, or the object's qualified name."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module = type(obj).__module__ or ""
        qualname = type(obj).__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    first = lines.pop(0)
    rest = [(" " * spaces + line) if line.strip() else "" for line in lines]
    return first + "\n" + "\n".join(rest)


def _first_tensor(result):
    """The tensor a legacy hook attaches to: descend into ``[0]`` or a dict's first tensor."""
    var = result
    while not isinstance(var, Tensor):
        if isinstance(var, dict):
            var = next(v for v in var.values() if isinstance(v, Tensor))
        elif isinstance(var, str):
            return None  # torch loops forever on a str; there is no tensor to find
        else:
            var = var[0]
    return var


def _forward_unimplemented(self, *input: Any) -> None:
    raise NotImplementedError(
        f'Module [{type(self).__name__}] is missing the required "forward" function')


# ---- Module --------------------------------------------------------------------------------


def checked_state_value(value, key: str, target, error_msgs: list):
    """``value`` from a state dict for the tensor ``target`` at ``key``, as load_state_dict
    takes it (a one-element vector for a scalar), or None with the error noted in
    ``error_msgs`` when it is no tensor or has another shape."""
    if not isinstance(value, Tensor):
        error_msgs.append(
            f'While copying the parameter named "{key}", expected torch.Tensor or '
            f"Tensor-like object from checkpoint but received {type(value)}")
        return None
    if target.ndim == 0 and value.ndim == 1:
        value = value[0]
    if value.shape != target.shape:
        error_msgs.append(
            f"size mismatch for {key}: copying a param with shape {value.shape} from "
            f"checkpoint, the shape in current model is {target.shape}.")
        return None
    return value


def note_unexpected(state_dict, prefix: str, own, children, unexpected_keys: list,
                    skip: str | None = None) -> None:
    """The keys under ``prefix`` that name neither one of the module's own tensors
    (``own``) nor something under one of its ``children``, into ``unexpected_keys``."""
    for key in state_dict:
        if not key.startswith(prefix) or key == skip:
            continue
        head = key[len(prefix):].split(".", 1)
        if (head[0] not in children) if len(head) > 1 else (head[0] not in own):
            unexpected_keys.append(key)

class Module:
    """Base class of every layer and model (``torch.nn.Module``)."""

    dump_patches = False
    _version = 1
    training: bool
    call_super_init = False

    def __init__(self, *args, **kwargs) -> None:
        if self.call_super_init is False and kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword "
                            f"argument '{next(iter(kwargs))}'")
        if self.call_super_init is False and args:
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument "
                            f"but {len(args) + 1} were given")
        setattr_ = super().__setattr__
        setattr_("training", True)
        setattr_("_parameters", {})
        setattr_("_buffers", {})
        setattr_("_non_persistent_buffers_set", set())
        setattr_("_backward_pre_hooks", OrderedDict())
        setattr_("_backward_hooks", OrderedDict())
        setattr_("_is_full_backward_hook", None)
        setattr_("_forward_hooks", OrderedDict())
        setattr_("_forward_hooks_with_kwargs", OrderedDict())
        setattr_("_forward_hooks_always_called", OrderedDict())
        setattr_("_forward_pre_hooks", OrderedDict())
        setattr_("_forward_pre_hooks_with_kwargs", OrderedDict())
        setattr_("_state_dict_hooks", OrderedDict())
        setattr_("_state_dict_pre_hooks", OrderedDict())
        setattr_("_load_state_dict_pre_hooks", OrderedDict())
        setattr_("_load_state_dict_post_hooks", OrderedDict())
        setattr_("_modules", {})
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    forward: Callable[..., Any] = _forward_unimplemented

    # ---- the one dispatch point ---------------------------------------------------------
    def _call_impl(self, *args, **kwargs):
        placement = self.__dict__.get("_placement")
        if placement is None:
            forward_call = self.forward
        else:  # a deployed module: it runs where it lives, or its forward does
            forward_call = placement.forward_for(self)
            if forward_call is None:
                return placement.call(self, args, kwargs)
        if not (self._backward_hooks or self._backward_pre_hooks or self._forward_hooks
                or self._forward_pre_hooks or _global_backward_pre_hooks
                or _global_backward_hooks or _global_forward_hooks
                or _global_forward_pre_hooks):
            return forward_call(*args, **kwargs)

        result = None
        called_always_called = set()
        try:
            backward_pre_hooks = []
            if self._backward_pre_hooks or _global_backward_pre_hooks:
                backward_pre_hooks = self._get_backward_pre_hooks()
            full_backward_hooks, legacy_backward_hooks = [], []
            if self._backward_hooks or _global_backward_hooks:
                full_backward_hooks, legacy_backward_hooks = self._get_backward_hooks()
                if placement is not None and legacy_backward_hooks:
                    legacy_backward_hooks = placement.legacy_backward_hooks(
                        self, legacy_backward_hooks)

            # forward pre-hooks (globals first); each sees the args the previous ones left
            if _global_forward_pre_hooks or self._forward_pre_hooks:
                for hook_id, hook in (*_global_forward_pre_hooks.items(),
                                      *self._forward_pre_hooks.items()):
                    if hook_id in self._forward_pre_hooks_with_kwargs:
                        new = hook(self, args, kwargs)
                        if new is not None:
                            if not (isinstance(new, tuple) and len(new) == 2):
                                raise RuntimeError(
                                    "forward pre-hook must return None or a tuple of "
                                    f"(new_args, new_kwargs), but got {new}.")
                            args, kwargs = new
                    else:
                        new = hook(self, args)
                        if new is not None:
                            args = new if isinstance(new, tuple) else (new,)

            # full backward (pre-)hooks: identity nodes around the inputs ...
            bw_hook = None
            if full_backward_hooks or backward_pre_hooks:
                bw_hook = BackwardHook(self, full_backward_hooks, backward_pre_hooks)
                args = bw_hook.setup_input_hook(args)

            result = forward_call(*args, **kwargs)

            # forward hooks (globals first); a non-None return replaces the result
            if _global_forward_hooks or self._forward_hooks:
                for hook_id, hook in (*_global_forward_hooks.items(),
                                      *self._forward_hooks.items()):
                    if (hook_id in self._forward_hooks_always_called
                            or hook_id in _global_forward_hooks_always_called):
                        called_always_called.add(hook_id)
                    if (hook_id in self._forward_hooks_with_kwargs
                            or hook_id in _global_forward_hooks_with_kwargs):
                        new = hook(self, args, kwargs, result)
                    else:
                        new = hook(self, args, result)
                    if new is not None:
                        result = new

            # ... and around the (possibly replaced) outputs
            if bw_hook:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a "
                                  "Tensor or a tuple of Tensors but received "
                                  f"{type(result)}", UserWarning, stacklevel=2)
                result = bw_hook.setup_output_hook(result)

            # legacy backward hooks: post-hooks on the grad_fn of the first output tensor
            if legacy_backward_hooks:
                var = _first_tensor(result)
                grad_fn = var.grad_fn if var is not None else None
                if grad_fn is not None:
                    for hook in legacy_backward_hooks:
                        grad_fn.register_hook(_WrappedHook(hook, self))
                    self._maybe_warn_non_full_backward_hook(args, result, grad_fn)
            return result
        except Exception:
            self._run_always_called_hooks(args, kwargs, result, called_always_called)
            raise

    __call__ = _call_impl

    def _run_always_called_hooks(self, args, kwargs, result, already_called: set) -> None:
        """After an exception: the always_call forward hooks that did not run yet."""
        for hook_id, hook in tuple(_global_forward_hooks.items()):
            if hook_id in _global_forward_hooks_always_called and hook_id not in already_called:
                try:
                    new = hook(self, args, result)
                    if new is not None:
                        result = new
                except Exception as e:
                    warnings.warn("global " + ALWAYS_CALL_SILENCED_MSG.format(e),
                                  UserWarning, stacklevel=3)
        for hook_id, hook in tuple(self._forward_hooks.items()):
            if hook_id in self._forward_hooks_always_called and hook_id not in already_called:
                try:
                    if hook_id in self._forward_hooks_with_kwargs:
                        new = hook(self, args, kwargs, result)
                    else:
                        new = hook(self, args, result)
                    if new is not None:
                        result = new
                except Exception as e:
                    warnings.warn(ALWAYS_CALL_SILENCED_MSG.format(e), UserWarning,
                                  stacklevel=3)

    def _get_backward_hooks(self) -> tuple:
        """(full, legacy) backward hooks of this call, globals first, by the sticky flags."""
        full, legacy = [], []
        if _global_is_full_backward_hook is True:
            full += _global_backward_hooks.values()
        if self._is_full_backward_hook is True:
            full += self._backward_hooks.values()
        if _global_is_full_backward_hook is False:
            legacy += _global_backward_hooks.values()
        if self._is_full_backward_hook is False:
            legacy += self._backward_hooks.values()
        return full, legacy

    def _get_backward_pre_hooks(self) -> list:
        return [*_global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]

    def _maybe_warn_non_full_backward_hook(self, inputs, result, grad_fn) -> None:
        """One FutureWarning per forward telling how a legacy hook will mislead."""
        if isinstance(result, Tensor):
            result = (result,)
        elif not (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)):
            warnings.warn(LEGACY_OUTPUT_NOT_TENSORS, FutureWarning, stacklevel=2)
            return
        if isinstance(inputs, Tensor):
            inputs = (inputs,)
        elif not (isinstance(inputs, tuple) and all(isinstance(i, Tensor) for i in inputs)):
            warnings.warn(LEGACY_INPUT_NOT_TENSORS, FutureWarning, stacklevel=2)
            return
        out_nodes = {r.grad_fn for r in result if r.grad_fn is not None}
        if not out_nodes or (len(out_nodes) == 1 and grad_fn not in out_nodes):
            warnings.warn(LEGACY_NESTED_OUTPUTS, FutureWarning, stacklevel=2)
        elif len(out_nodes) > 1:
            warnings.warn(LEGACY_MANY_OUTPUT_NODES, FutureWarning, stacklevel=2)
        else:
            in_nodes = {i.grad_fn for i in inputs if i.grad_fn is not None}
            if in_nodes != {node for node, _ in grad_fn.next_functions}:
                warnings.warn(LEGACY_MANY_NODES, FutureWarning, stacklevel=2)

    # ---- hook registration --------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``(module, args, kwargs)``) before ``forward``."""
        handle = RemovableHandle(self._forward_pre_hooks,
                                 extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return self._placed_hook(handle)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or with kwargs) after ``forward``."""
        handle = RemovableHandle(
            self._forward_hooks,
            extra_dict=[self._forward_hooks_with_kwargs, self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return self._placed_hook(handle)

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        """Legacy hook on the last autograd node of ``forward`` (deprecated; see §6)."""
        if self._is_full_backward_hook is True:
            raise RuntimeError(MIXED_BACKWARD_HOOKS_MSG)
        self._is_full_backward_hook = False
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        return self._placed_hook(handle)

    def register_full_backward_hook(self, hook: Callable,
                                    prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` once the inputs' gradients are known."""
        if self._is_full_backward_hook is False:
            raise RuntimeError(MIXED_BACKWARD_HOOKS_MSG)
        self._is_full_backward_hook = True
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return self._placed_hook(handle)

    def register_full_backward_pre_hook(self, hook: Callable,
                                        prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` once the outputs' gradients are known."""
        handle = RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(handle.id, last=False)
        return self._placed_hook(handle)

    def _placed_hook(self, handle: RemovableHandle) -> RemovableHandle:
        """A hook just registered on a deployed module goes where the module lives (if it
        cannot, it is removed again and the error says why)."""
        placement = self.__dict__.get("_placement")
        if placement is None:
            return handle
        try:
            placement.hooks_changed(self)
        except BaseException:
            handle.remove()
            placement.hooks_changed(self)
            raise
        return _PlacedHandle(handle, self, placement)

    # ---- attribute registration ---------------------------------------------------------
    def __getattr__(self, name: str):
        d = self.__dict__
        if "_parameters" in d and name in d["_parameters"]:
            return d["_parameters"][name]
        if "_buffers" in d and name in d["_buffers"]:
            return d["_buffers"][name]
        if "_modules" in d and name in d["_modules"]:
            return d["_modules"][name]
        if "_placement" in d and not name.startswith("__"):
            try:
                return d["_placement"].attribute(self, name)
            except AttributeError:
                pass
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if "_placement" in d and d["_placement"].set_attr(self, name, value):
            return
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _discard(name, d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _discard(name, d, self._parameters, self._buffers,
                     self._non_persistent_buffers_set)
            modules[name] = _run_registration_hooks(_global_module_registration_hooks, self,
                                                    name, value)
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module "
                                f"'{name}' (torch.nn.Module or None expected)")
            modules[name] = _run_registration_hooks(_global_module_registration_hooks, self,
                                                    name, value)
            return
        buffers = d.get("_buffers")
        if isinstance(value, Buffer) or (buffers is not None and name in buffers):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                "(torch.nn.Buffer, torch.Tensor or None expected)")
            if isinstance(value, Buffer):
                persistent = value.persistent
            else:
                persistent = name not in self._non_persistent_buffers_set
            self.register_buffer(name, value, persistent)
            return
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if "_placement" in self.__dict__ and self.__dict__["_placement"].del_attr(self, name):
            return
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if "_placement" in state:  # a copy or a pickle of a deployed module is a plain one
            state = state["_placement"].detached(self, state)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        # state pickled before a hook kind existed: start it empty
        for name in ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs",
                     "_forward_hooks_always_called", "_state_dict_hooks",
                     "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                     "_load_state_dict_post_hooks", "_backward_pre_hooks"):
            if name not in self.__dict__:
                object.__setattr__(self, name, OrderedDict())
        if "_is_full_backward_hook" not in self.__dict__:
            object.__setattr__(self, "_is_full_backward_hook", None)

    def __dir__(self):
        keys = [*dir(type(self)), *self.__dict__, *self._parameters, *self._modules,
                *self._buffers]
        return sorted(k for k in keys if not k[0].isdigit())

    def register_buffer(self, name: str, tensor: Tensor | None,
                        persistent: bool = True) -> None:
        """A tensor that is state but not a parameter (in state_dict when persistent)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"buffer name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError('buffer name can\'t contain "."')
        if name == "":
            raise KeyError('buffer name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        if "_placement" in self.__dict__:
            self.__dict__["_placement"].register_buffer(self, name, tensor, persistent)
            return
        self._buffers[name] = _run_registration_hooks(_global_buffer_registration_hooks, self,
                                                      name, tensor)
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add ``param`` under ``name`` (``None`` keeps the name with no parameter)."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        if "_placement" in self.__dict__:
            self.__dict__["_placement"].change_structure(self, "register_parameter")
        if not isinstance(name, str):
            raise TypeError(f"parameter name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError('parameter name can\'t contain "."')
        if name == "":
            raise KeyError('parameter name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must "
                f"be created explicitly. To express '{name}' as a function of another Tensor, "
                "compute the value in the forward() method.")
        self._parameters[name] = _run_registration_hooks(_global_parameter_registration_hooks,
                                                         self, name, param)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add ``module`` as the child ``name``."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if "_placement" in self.__dict__:
            self.__dict__["_placement"].change_structure(self, "add_module")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = _run_registration_hooks(_global_module_registration_hooks, self,
                                                      name, module)

    def register_module(self, name: str, module: Module | None) -> None:
        self.add_module(name, module)

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` (``""`` is this module)."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    # ---- traversal ----------------------------------------------------------------------
    def _named_members(self, get_members, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True):
        seen = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (module_prefix + ("." if module_prefix else "") + name, value)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple]:
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                       remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple]:
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                       remove_duplicate)

    def children(self) -> Iterator[Module]:
        for _, module in self.named_children():
            yield module

    def named_children(self) -> Iterator[tuple]:
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def modules(self, remove_duplicate: bool = True) -> Iterator[Module]:
        for _, module in self.named_modules(remove_duplicate=remove_duplicate):
            yield module

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True):
        """Pre-order walk of the module tree, each module once (unless told otherwise)."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name,
                                            remove_duplicate)

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every submodule (children first), then on this module."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- modes and gradients ------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        if "_placement" in self.__dict__:  # the worker's copy and this tree, at once
            self.__dict__["_placement"].train(self, mode)
            return self
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        params = list(self.parameters())
        elsewhere = [p for p in params if hasattr(type(p), "_zero_grads")]
        if elsewhere:  # kept by a deployment: zeroed where they live, all at once
            type(elsewhere[0])._zero_grads(elsewhere, set_to_none)
            params = [p for p in params if not hasattr(type(p), "_zero_grads")]
        for param in params:
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                if param.grad.grad_fn is not None:
                    param.grad.detach_()
                else:
                    param.grad.requires_grad_(False)
                param.grad.zero_()

    # ---- conversion ---------------------------------------------------------------------
    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Module:
        """Convert every parameter (in place: same Parameter object) and buffer with ``fn``."""
        if "_placement" in self.__dict__:
            self.__dict__["_placement"].apply(self, fn)
            return self
        if recurse:
            for module in self.children():
                module._apply(fn)
        for param in self._parameters.values():
            if param is None:
                continue
            with grad_mode.no_grad():
                param.data = fn(param)
            if param.grad is not None:
                with grad_mode.no_grad():
                    param.grad.data = fn(param.grad)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    def to(self, *args, **kwargs) -> Module:
        """``to(device)``, ``to(dtype)``, ``to(tensor)``; floating tensors change dtype."""
        dtype = kwargs.get("dtype")
        _check_device(kwargs.get("device"))
        for arg in args:
            if isinstance(arg, Tensor):
                dtype = arg.dtype
            elif isinstance(arg, (str, _device)):
                _check_device(arg)
            elif isinstance(arg, _dtype.dtype):
                dtype = arg
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={dtype}")

        def convert(t: Tensor) -> Tensor:
            return t.to(dtype) if dtype is not None and t.is_floating_point() else t

        return self._apply(convert)

    def cpu(self) -> Module:
        return self

    def cuda(self, device=None) -> Module:
        raise AssertionError("Torch not compiled with CUDA enabled")

    def type(self, dst_type) -> Module:
        return self._apply(lambda t: t.type(dst_type))

    def float(self) -> Module:
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self) -> Module:
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def half(self) -> Module:
        return self._apply(lambda t: t.half() if t.is_floating_point() else t)

    # ---- state dict ---------------------------------------------------------------------
    # Four hook kinds, stored and removed like the forward hooks: pre/post hooks of
    # state_dict() and of load_state_dict(). load_state_dict pre-hooks are kept as
    # _WrappedHook (with or without the module); post-hooks of state_dict() registered
    # through the public API are marked and may not return a value.

    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, prefix, keep_vars) -> None`` before this module's state is saved."""
        handle = RemovableHandle(self._state_dict_pre_hooks)
        self._state_dict_pre_hooks[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata) -> None``, after the subtree's
        state is in ``state_dict`` (edit it in place; a returned value is an error)."""
        hook._from_public_api = True
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def _register_state_dict_hook(self, hook: Callable) -> RemovableHandle:
        """The private post-hook: a returned dict replaces the state dict from there on."""
        if getattr(hook, "_from_public_api", False):
            raise RuntimeError(
                "Cannot register the same function as the state dict post hook that was "
                "previously registered via register_state_dict_post_hook")
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def _register_load_state_dict_pre_hook(self, hook: Callable,
                                           with_module: bool = False) -> RemovableHandle:
        """``hook([module,] state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before this module loads its part."""
        handle = RemovableHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[handle.id] = _WrappedHook(
            hook, self if with_module else None)
        return handle

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None``; it may edit ``state_dict`` and the lists."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, incompatible_keys) -> None`` once this module's subtree is loaded;
        clearing or extending ``incompatible_keys``' lists changes what strict loading sees."""
        handle = RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    def get_extra_state(self) -> Any:
        """Extra state for ``state_dict`` under ``<prefix>_extra_state`` (override it)."""
        raise RuntimeError("Module.get_extra_state() is only called when a subclass "
                           "overrides it")

    def set_extra_state(self, state: Any) -> None:
        """Take back what ``get_extra_state`` gave (override it together with it)."""
        raise RuntimeError("Module.set_extra_state() is only called when a subclass "
                           "overrides it")

    def _has_extra_state(self, method: str) -> bool:
        return getattr(type(self), method, None) is not getattr(Module, method)

    def _save_to_state_dict(self, destination, prefix: str, keep_vars: bool) -> None:
        if "_placement" in self.__dict__:
            self.__dict__["_placement"].save_state(self, destination, prefix, keep_vars)
            return
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        if self._has_extra_state("get_extra_state"):
            destination[prefix + EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters and persistent buffers by dotted name (detached unless keep_vars).

        Per module: pre-hooks, its own state, its children's, then post-hooks.
        """
        if args:
            warnings.warn(
                "Positional args are being deprecated, use kwargs instead. Refer to "
                "https://pytorch.org/docs/main/generated/torch.nn.Module.html"
                "#torch.nn.Module.state_dict for details.", FutureWarning, stacklevel=2)
            if destination is None:
                destination = args[0]
            if len(args) > 1 and prefix == "":
                prefix = args[1]
            if len(args) > 2 and keep_vars is False:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in tuple(self._state_dict_pre_hooks.values()):
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        for hook in tuple(self._state_dict_hooks.values()):
            result = hook(self, destination, prefix, local_metadata)
            if getattr(hook, "_from_public_api", False):
                if result is not None:
                    raise RuntimeError("state_dict post-hook must return None")
            elif result is not None:
                destination = result
        return destination

    def _load_from_state_dict(self, state_dict, prefix: str, local_metadata, strict: bool,
                              missing_keys: list, unexpected_keys: list,
                              error_msgs: list) -> None:
        """Load this module's own parameters and buffers (not its children's)."""
        for hook in tuple(self._load_state_dict_pre_hooks.values()):
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                 error_msgs)
        if "_placement" in self.__dict__:
            self.__dict__["_placement"].load_state(self, state_dict, prefix, local_metadata,
                                                   missing_keys, unexpected_keys, error_msgs,
                                                   strict)
            return
        persistent = {k: v for k, v in self._buffers.items()
                      if k not in self._non_persistent_buffers_set}
        local_state = {k: v for k, v in (*self._parameters.items(), *persistent.items())
                       if v is not None}
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = checked_state_value(state_dict[key], key, param, error_msgs)
            if value is None:
                continue
            try:
                with grad_mode.no_grad():
                    if assign:
                        if isinstance(param, Parameter):
                            if isinstance(value, Parameter):
                                value.requires_grad_(param.requires_grad)
                            else:
                                value = Parameter(value, requires_grad=param.requires_grad)
                        setattr(self, name, value)
                    else:
                        param.copy_(value)
            except Exception as ex:
                error_msgs.append(
                    f'While copying the parameter named "{key}", whose dimensions in the '
                    f"model are {param.size()} and whose dimensions in the checkpoint are "
                    f"{value.size()}, an exception occurred : {ex.args}.")
        extra_key = prefix + EXTRA_STATE_KEY_SUFFIX
        if self._has_extra_state("set_extra_state"):
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        elif strict and extra_key in state_dict:
            unexpected_keys.append(extra_key)
        if strict:
            note_unexpected(state_dict, prefix, local_state, self._modules, unexpected_keys,
                            skip=extra_key)

    def load_state_dict(self, state_dict: Mapping, strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy ``state_dict`` into the parameters and buffers; report missing/unexpected.

        Per module: its pre-hooks and own state, its children, then its post-hooks, which
        see (and may edit) the missing and unexpected keys gathered so far.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing: list = []
        unexpected: list = []
        errors: list = []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata

        def load(module: Module, local: dict, prefix: str = "") -> None:
            meta = {} if metadata is None else metadata.get(prefix[:-1], {})
            if assign:
                meta["assign_to_params_buffers"] = assign
            module._load_from_state_dict(local, prefix, meta, True, missing, unexpected,
                                         errors)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    load(child, {k: v for k, v in local.items() if k.startswith(child_prefix)},
                         child_prefix)
            incompatible_keys = _IncompatibleKeys(missing, unexpected)
            for hook in tuple(module._load_state_dict_post_hooks.values()):
                if hook(module, incompatible_keys) is not None:
                    raise AssertionError(LOAD_POST_HOOK_RETURN_MSG)

        load(self, state_dict)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    # ---- printing -----------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """One or more lines shown inside ``Name(...)``; layers override it."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2)
                       for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        text = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                text += extra_lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"


def _discard(name: str, *containers) -> None:
    for c in containers:
        if name in c:
            if isinstance(c, dict):
                del c[name]
            else:
                c.discard(name)


class _PlacedHandle(RemovableHandle):
    """The handle of a hook on a deployed module: removing it removes the hook where the
    module lives too."""

    def __init__(self, handle: RemovableHandle, module: Module, placement: Placement):
        self.__dict__.update(handle.__dict__)
        self._module_ref = weakref.ref(module)
        self._placement = placement

    def remove(self) -> None:
        super().remove()
        module = getattr(self, "_module_ref", lambda: None)()
        if module is not None and module.__dict__.get("_placement") is self._placement:
            self._placement.hooks_changed(module)

    def __getstate__(self):
        return RemovableHandle.__getstate__(self)
