"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad``, step hooks and
``state_dict`` / ``load_state_dict`` in torch's format (parameters as integer ids).

Subclasses define ``step``; it runs under ``no_grad`` and changes the parameters in place, so
each update bumps the parameter's version counter as torch's does.

Parameters that live elsewhere (a deployed model's ``RemoteParameter``: its type offers
``_optimizer_share``) may be among them, with any optimizer, param groups and schedulers:
the local step runs on the local parameters (and the closure), then each worker steps its
own parameters with the same class and the groups' current hyperparameters; ``state_dict``,
``load_state_dict`` and ``zero_grad`` reach them too. No parameter crosses the wire.
"""
from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections import OrderedDict, defaultdict
from copy import deepcopy
from itertools import chain

import numpy as np

from disthook.autograd import grad_mode, refuse_differentiation
from disthook.tensor import Tensor
from disthook.utils.hooks import RemovableHandle


class _RequiredParameter:
    """Default of a hyperparameter every group must set (``SGD``'s ``lr`` in old torch)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _typename(obj) -> str:
    """``torch.typename``: ``torch.FloatTensor`` for a tensor, else the qualified type name."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        module, qualname = type(obj).__module__, type(obj).__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def _step_with_hooks(step):
    """Wrap a subclass's ``step``: pre-hooks may replace (args, kwargs); post-hooks follow.

    An instance that ``Optimizer.__init__`` never ran on (a wrapper of another optimizer, as
    opacus' DPOptimizer) has no hooks: its ``step`` runs as written, as torch leaves it."""
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        if "_optimizer_step_pre_hooks" not in getattr(self, "__dict__", ()):
            return step(self, *args, **kwargs)
        for hook in list(self._optimizer_step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, "
                                       f"new_kwargs), but got {result}.")
                args, kwargs = result
        out = _step_local_then_remote(self, step, args, kwargs)
        for hook in list(self._optimizer_step_post_hooks.values()):
            hook(self, args, kwargs)
        return out

    wrapper._with_step_hooks = True
    return wrapper


def _remote_kind(p):
    """The type of a parameter that lives elsewhere and is stepped there, or None."""
    kind = type(p)
    return kind if hasattr(kind, "_optimizer_share") else None


def _remote_params(optimizer) -> dict:
    """{remote type: its parameters, in group order} of ``optimizer`` (at once empty for
    one that was never given a remote parameter: the common, local case pays nothing)."""
    out: dict = {}
    if not optimizer.__dict__.get("_has_remote") or _steps_here(optimizer):
        return out
    for group in optimizer.param_groups:
        for p in group["params"]:
            kind = _remote_kind(p)
            if kind is not None:
                out.setdefault(kind, []).append(p)
    return out


def _steps_here(optimizer) -> bool:
    """Whether ``optimizer`` takes its whole step here, remote parameters included: an update
    that is not one parameter at a time (L-BFGS's), or a class the workers cannot make
    (``_workers_can_make``). Their gradients are read, and their values written, through
    their storage; ``zero_grad`` and the state dict treat them as local ones."""
    kind = type(optimizer)
    if getattr(kind, "_steps_here", False):
        return True
    key = (kind, tuple(sorted(optimizer.defaults)))
    made = _MADE_THERE.get(key)
    if made is None:
        made = _MADE_THERE[key] = _workers_can_make(kind, optimizer.defaults)
    return not made


_MADE_THERE: dict = {}  # (optimizer class, names of its defaults) -> _workers_can_make


def _workers_can_make(kind: type, defaults: dict) -> bool:
    """Whether a worker can make its own ``kind`` over its parameters: a class it can import
    (not one of the client's script, nor one made inside a function), whose constructor
    takes the parameters and then only what ``defaults`` names (a wrapper of another
    optimizer, as SAM, takes that one too: it steps here, its inner optimizer on the
    workers)."""
    if kind.__module__ == "__main__" or "<locals>" in kind.__qualname__ \
            or not _importable_by_name(kind.__module__):
        return False
    try:
        signature = inspect.signature(kind)
    except (TypeError, ValueError):
        return True
    rest = list(signature.parameters.values())[1:]  # after the parameters
    return all(p.default is not inspect.Parameter.empty or p.name in defaults
               or p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
               for p in rest)


def _importable_by_name(module: str) -> bool:
    """Whether an import of ``module`` by its name finds it from ``sys.path`` (where a worker
    started with this process's path looks), rather than only in ``sys.modules``: a file run
    by path under another name (``runpy``, a notebook's or a launcher's
    ``spec_from_file_location``) is not found so."""
    top = module.partition(".")[0]
    for finder in sys.meta_path:  # (importlib.util.find_spec would answer from sys.modules)
        try:
            if getattr(finder, "find_spec", None) and finder.find_spec(top, None) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _step_local_then_remote(optimizer, step, args, kwargs):
    """The subclass's ``step`` over the local parameters (with the closure), then each
    remote parameter's owner steps it with the same class and hyperparameters."""
    remote = _remote_params(optimizer)
    if not remote:
        return step(optimizer, *args, **kwargs)
    groups = optimizer.param_groups
    optimizer.param_groups = [{**g, "params": [p for p in g["params"] if not _remote_kind(p)]}
                              for g in groups]
    args, kwargs = _closure_sees_every_group(optimizer, groups, args, kwargs)
    try:
        # (over the local parameters alone, a step's own autograd.grad would miss the
        # remote ones' terms: refused, as on the workers; the closure differentiates freely)
        with refuse_differentiation(differentiating_step(type(optimizer).__name__)):
            out = step(optimizer, *args, **kwargs)
    finally:
        for group, local in zip(groups, optimizer.param_groups):  # what the step changed
            group.update({k: v for k, v in local.items() if k != "params"})
        optimizer.param_groups = groups
    for kind in remote:
        kind._optimizer_share(optimizer, "step")
    return out


def differentiating_step(name: str) -> str:
    """Why an optimizer of class ``name`` whose parameters its workers step may not
    differentiate in its step (the message of the refusal, here and on the workers)."""
    return (f"{name}.step() differentiates (autograd.grad or backward in the step, as a "
            "second-order optimizer takes Hessian products from p.grad: AdaHessian, Sophia-H), "
            f"but {name} steps a deployed model's parameters on their workers, each over its "
            "own stage's, where the graph of the whole loss is not: its products would miss "
            "the other stages' terms. Step it in the training process: define the class there "
            f"(a subclass in the script will do: class Local{name}(<its module>.{name}): "
            "pass), as docs/distributed.md says of optimizer classes the workers cannot import")


def _closure_sees_every_group(optimizer, groups, args, kwargs):
    """``step``'s arguments with its closure (``step(closure)``, ``closure=``) run over the
    whole ``groups``: the step walks the local parameters only, but the closure's own
    ``optimizer.zero_grad()`` (Lightning's, and many a script's) must reach the remote ones
    too, or their gradients add up over the steps."""
    def whole(closure):
        @functools.wraps(closure)
        def run(*a, **kw):
            local, optimizer.param_groups = optimizer.param_groups, groups
            try:
                with refuse_differentiation(None):
                    return closure(*a, **kw)
            finally:
                optimizer.param_groups = local
        return run

    if args and callable(args[0]):
        args = (whole(args[0]), *args[1:])
    elif callable(kwargs.get("closure")):
        kwargs = {**kwargs, "closure": whole(kwargs["closure"])}
    return args, kwargs


class Optimizer:
    """Base of every optimizer: ``params`` is an iterable of tensors, of ``(name, tensor)``
    pairs, or of dicts (parameter groups with their own hyperparameters)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_with_step_hooks", False):
            cls.step = _step_with_hooks(step)

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + _typename(params))
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __setattr__(self, name: str, value) -> None:
        if name == "state" and self.__dict__.get("_has_remote"):
            for kind in _remote_params(self):  # a reset: the workers' shares take it too
                value = kind._optimizer_state(self, value, replace=True)
                break
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        text = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    # ---- parameter groups -------------------------------------------------------------------
    def __setstate__(self, state: dict) -> None:
        """An unpickled optimizer (torch pickles only defaults, state and param_groups):
        hook tables it was saved without start empty, as torch's do."""
        self.__dict__.update(state)
        for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):
            self.__dict__.setdefault(name, OrderedDict())

    def add_param_group(self, param_group: dict) -> None:
        """Add a group; hyperparameters it does not set come from ``defaults``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        tensors, names = [], []
        for param in params:
            if isinstance(param, tuple):
                names.append(param[0])
                param = param[1]
            tensors.append(param)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError("all optimizer params should be with/without names. Some "
                                 "param names are missing")
            param_group["param_names"] = names

        for param in tensors:
            kind = _remote_kind(param)
            if kind is not None:  # stepped where it lives, its state kept there
                self._has_remote = True
                self.__dict__["state"] = kind._optimizer_state(self, self.state)
                continue
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(param))
            if not self.defaults.get("differentiable", None) and not (
                    param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)

        if len({id(p) for p in tensors}) != len(tensors):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          UserWarning, stacklevel=3)
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                kind = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {kind} to the optimizer")
        if any(id(p) in seen for p in tensors):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ---- gradients and steps ----------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's ``.grad`` (or zero it in place with ``set_to_none=False``)."""
        remote = _remote_params(self)
        for kind, params in remote.items():  # with the next forward, or one request a worker
            kind._zero_grads(params, set_to_none, self)
        for group in self.param_groups:
            for p in group["params"]:
                if remote and _remote_kind(p) is not None:
                    continue
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns the closure's loss.

        The closure (re-evaluating the model) runs with grad enabled; the updates run under
        no_grad, one parameter at a time, through the subclass's ``_update(p, group)``.
        """
        loss = None
        if closure is not None:
            with grad_mode.enable_grad():
                loss = closure()
        self._check_sparse_grads()
        with grad_mode.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self._update(p, group)
        return loss

    # torch's words when this algorithm meets a sparse gradient (nn.Embedding(sparse=True)):
    # it refuses before any parameter moves; None where it steps with one (SGD, Adagrad)
    sparse_refusal: str | None = None

    def _check_sparse_grads(self) -> None:
        if self.sparse_refusal is None:
            return
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    raise RuntimeError(self.sparse_refusal)

    def _update(self, p, group: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define _update(p, group)")

    step = _step_with_hooks(step)  # subclasses that define their own are wrapped on creation

    def register_step_pre_hook(self, hook) -> RemovableHandle:
        """``hook(optimizer, args, kwargs) -> None | (args, kwargs)`` before each ``step``."""
        handle = RemovableHandle(self._optimizer_step_pre_hooks)
        self._optimizer_step_pre_hooks[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` after each ``step``."""
        handle = RemovableHandle(self._optimizer_step_post_hooks)
        self._optimizer_step_post_hooks[handle.id] = hook
        return handle

    # ---- state dict -------------------------------------------------------------------------
    # Four hook kinds, kept as the step hooks are: before and after state_dict() (the
    # latter may return a replacement) and before (may return a replacement) and after
    # load_state_dict(). Dicts made on first registration: a wrapper that never ran
    # Optimizer.__init__ has none.
    def _state_dict_hooks(self, kind: str) -> OrderedDict:
        return self.__dict__.setdefault(f"_optimizer_{kind}_hooks", OrderedDict())

    def _register_state_dict_hook(self, kind: str, hook, prepend: bool) -> RemovableHandle:
        hooks = self._state_dict_hooks(kind)
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    def register_state_dict_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer)`` before each ``state_dict()``."""
        return self._register_state_dict_hook("state_dict_pre", hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer, state_dict) -> None | state_dict`` after each ``state_dict()``;
        what it returns is what ``state_dict()`` returns."""
        return self._register_state_dict_hook("state_dict_post", hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer, state_dict) -> None | state_dict`` before each
        ``load_state_dict()`` (given a shallow copy); what it returns is loaded instead."""
        return self._register_state_dict_hook("load_state_dict_pre", hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(optimizer)`` after each ``load_state_dict()``."""
        return self._register_state_dict_hook("load_state_dict_post", hook, prepend)

    def state_dict(self) -> dict:
        """``{"state": {id: {...}}, "param_groups": [{..., "params": [ids]}]}``; ids number
        the parameters in group order, as torch's do. The state tensors are not copied."""
        for hook in list(self.__dict__.get("_optimizer_state_dict_pre_hooks", {}).values()):
            hook(self)
        state_dict = self._state_dict_unhooked()
        for hook in list(self.__dict__.get("_optimizer_state_dict_post_hooks", {}).values()):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def _state_dict_unhooked(self) -> dict:
        ids: dict = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                ids.setdefault(id(p), len(ids))
            packed["params"] = [ids[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(ids[id(k)] if isinstance(k, Tensor) else k): v
                 for k, v in dict.items(self.state)}  # (the workers' shares: below)
        remote = _remote_params(self)
        for params in remote.values():  # held by their workers, read there when used
            for p in params:
                if p in self.state:
                    state[ids[id(p)]] = dict(self.state[p])
        if remote:  # in id order (group order), as one process steps them
            state = dict(sorted(state.items(), key=lambda kv: kv[0] if isinstance(kv[0], int)
                                else len(ids)))
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters and state from ``state_dict``; the ids are matched to this
        optimizer's parameters by position. Float state is cast to its parameter's dtype."""
        state_dict = state_dict.copy()
        for hook in list(self.__dict__.get("_optimizer_load_state_dict_pre_hooks",
                                           {}).values()):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._load_state_dict_unhooked(state_dict)
        for hook in list(self.__dict__.get("_optimizer_load_state_dict_post_hooks",
                                           {}).values()):
            hook(self)

    def _load_state_dict_unhooked(self, state_dict: dict) -> None:
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))
        # the parameters their workers step keep their state there; any other (a deployed
        # model's, stepped here by an optimizer made before the deploy) keeps it here
        there = {id(p) for params in _remote_params(self).values() for p in params}
        state: defaultdict = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = value if id(param) in there else _cast(param, value)
            else:
                state[key] = value
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            new_groups.append(saved)
        remote = {p: state.pop(p) for p in list(state) if id(p) in there}
        self.__dict__["state"] = state  # (the remote parameters' state: loaded below)
        self.param_groups = new_groups
        for kind, params in _remote_params(self).items():  # to the workers that hold them
            kind._optimizer_share(self, "load", {p: remote[p] for p in params if p in remote})
            self.__dict__["state"] = kind._optimizer_state(self, state)


def _check_hyperparameters(lr, eps=0.0, weight_decay=0.0, betas=None, **more) -> None:
    """torch's ValueErrors for out-of-range hyperparameters, checked in torch's order:
    lr, eps, betas, weight_decay, then the rest as given (``name=(value, low)``)."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if betas is not None:
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    for name, value in more.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {name} value: {value}")


def real_pairs(p, *tensors) -> tuple:
    """``tensors`` (the parameter, its gradient, its state; None stays None) as torch steps
    a complex parameter: each seen as real pairs (``view_as_real``, shape [..., 2], the same
    memory), so the real and imaginary parts are stepped as real numbers of their own. For a
    real ``p``, ``tensors`` as they are."""
    if not p.is_complex():
        return tensors
    from disthook import view_as_real

    return tuple(None if t is None else view_as_real(t) for t in tensors)


def filled_like(p, value: float):
    """State of ``p``'s shape filled with ``value``; for a complex ``p``, both parts of each
    element are ``value`` (as torch starts state that ``real_pairs`` steps)."""
    from disthook.tensor import full_like

    return full_like(p, complex(value, value) if p.is_complex() else value)


def weight_decayed(p, grad, lr: float, weight_decay: float, decoupled: bool):
    """The Adam family's weight decay: L2 added to the gradient, or (decoupled, as AdamW)
    the parameter shrunk by ``lr * weight_decay`` first."""
    if weight_decay != 0:
        if decoupled:
            p.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(p, alpha=weight_decay)
    return grad


# ---- updates on numpy arrays, a chunk at a time ---------------------------------------------
#
# An update is a dozen elementwise passes over each parameter; run on whole arrays, each pass
# goes through memory and allocates a temporary of the parameter's size. The same operations
# in the same order and dtype, run on one chunk of every operand at a time, give the same
# bits while the chunk stays in the CPU cache (Adam on the bench MLP's 2.9 M parameters:
# about 0.6x the time).
STEP_CHUNK = 1 << 15  # elements per chunk (128 KiB of float32 per operand)


def flat_arrays(p, grad, *state) -> list | None:
    """Flat views of the arrays of ``p``, ``grad`` and ``state`` (tensors of p's shape) for
    an update on numpy arrays, or None unless every one is a local, C-contiguous array of
    p's shape and floating dtype, writable but for ``grad``: the Tensor ops do the update
    then (and raise what they raise; bfloat16 is not "f": its updates take the Tensor ops,
    which compute it as torch does)."""
    data = p._data
    if type(data) is not np.ndarray or data.dtype.kind != "f":
        return None
    out = []
    for i, t in enumerate((p, grad, *state)):
        a = t._data
        if (type(a) is not np.ndarray or a.dtype != data.dtype or a.shape != data.shape
                or not a.flags.c_contiguous or (i != 1 and not a.flags.writeable)):
            return None
        out.append(a.reshape(-1))
    return out


def chunked(param: np.ndarray, buffers: int = 1) -> tuple:
    """``buffers`` scratch arrays of one chunk's size for flat array ``param``, and the slices
    of its chunks (STEP_CHUNK elements, the last may be shorter)."""
    n = param.size
    scratch = [np.empty(min(n, STEP_CHUNK), dtype=param.dtype) for _ in range(buffers)]
    return scratch, [slice(i, min(n, i + STEP_CHUNK)) for i in range(0, n, STEP_CHUNK)]


def bump_versions(*written) -> None:
    """Count in-place writes as the Tensor ops would: ``(tensor, writes)`` pairs."""
    for t, n in written:
        t._vc[0] += n


def moment_state(state: dict, p, *extra: str) -> dict:
    """Adam-style state on first use: ``step``, ``extra`` scalars at 1, the two moments."""
    from disthook.tensor import zeros_like

    if len(state) == 0:
        state["step"] = new_step()
        for name in extra:
            state[name] = new_step(1.0)
        state["exp_avg"] = zeros_like(p)
        state["exp_avg_sq"] = zeros_like(p)
    return state


def new_step(value: float = 0.0) -> Tensor:
    """A step counter as torch keeps it: a 0-d float tensor of the default float width."""
    from disthook import _dtype
    from disthook.tensor import tensor

    dtype = _dtype.float64 if _dtype.get_default_dtype() == _dtype.float64 else _dtype.float32
    return tensor(value, dtype=dtype)


def _cast(param: Tensor, value, key=None):
    """State ``value`` for ``param``: tensors take its dtype (``step`` keeps its own)."""
    if isinstance(value, Tensor):
        if key != "step" and param.is_floating_point():
            return value.to(param.dtype)
        return value
    if isinstance(value, dict):
        return {k: _cast(param, v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(param, v) for v in value)
    return value
