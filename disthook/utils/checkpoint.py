"""Activation checkpointing (``torch.utils.checkpoint``): keep a segment's inputs, not the
tensors its ops save, and recompute the segment in backward.

Two variants, as in torch:
* ``use_reentrant=False``: the segment runs once with grad, under saved-tensor hooks that
  keep only a placeholder per saved tensor. The first unpack in a backward reruns the
  segment (same RNG state) under hooks that collect the recomputed tensors, stopping as soon
  as every saved tensor is back (``early_stop``), so module hooks late in the segment may
  not fire again. Works with ``autograd.grad`` and ``backward(inputs=)``.
* ``use_reentrant=True``: the segment runs under no_grad inside a custom Function; its
  backward reruns the whole segment with grad and calls ``backward`` inside backward.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import warnings
import weakref
from collections.abc import Callable

from disthook.autograd import grad_mode
from disthook.autograd.function import Function
from disthook.autograd.saved_hooks import saved_tensors_hooks

__all__ = ["CheckpointError", "GraphExecGroup", "checkpoint", "checkpoint_sequential",
           "get_device_states", "set_checkpoint_debug_enabled", "set_checkpoint_early_stop",
           "set_device_states"]

USE_REENTRANT_WARNING = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. "
    "Starting in PyTorch 2.9, calling checkpoint without use_reentrant will raise an "
    "exception. use_reentrant=False is recommended, but if you need to preserve the current "
    "default behavior, you can pass use_reentrant=True. Refer to docs for more details on "
    "the differences between the two variants."
)
REENTRANT_GRAD_MSG = (
    "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing "
    "an `inputs` parameter to .backward(). To resolve this error, you can either set "
    "use_reentrant=False, or call .backward() without passing the `inputs` argument."
)
NO_INPUT_GRAD_WARNING = "None of the inputs have requires_grad=True. Gradients will be None"


class CheckpointError(RuntimeError):
    """The recomputation did not give back what the forward saved."""


def get_device_states(*args) -> tuple[list, list]:
    """The accelerator devices of the tensors in ``args`` and their random states, for a
    block that replays its randomness (reversible networks): none, every tensor being on the
    CPU, as torch answers for CPU tensors."""
    return [], []


def set_device_states(devices, states, *, device_type=None) -> None:
    """Give back what ``get_device_states`` took: nothing, here. Devices it did not give can
    only be an accelerator's, which disthook lacks."""
    if devices or states:
        raise NotImplementedError(
            f"set_device_states: disthook has no accelerator devices (got {list(devices)}); "
            "its get_device_states gives empty lists, pass those")


def noop_context_fn():
    import contextlib

    return contextlib.nullcontext(), contextlib.nullcontext()


def checkpoint(function: Callable, *args, use_reentrant: bool | None = None,
               context_fn: Callable = noop_context_fn, determinism_check: str = "default",
               debug: bool = False, early_stop: bool = True, preserve_rng_state: bool = True,
               **kwargs):
    """``function(*args, **kwargs)`` without keeping its saved tensors; see the module doc."""
    if use_reentrant is None:
        warnings.warn(USE_REENTRANT_WARNING, UserWarning, stacklevel=2)
        use_reentrant = True
    if use_reentrant:
        if context_fn is not noop_context_fn or debug:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return CheckpointFunction.apply(function, preserve_rng_state, *args)
    on_error = None
    if _checkpoint_debug_enabled if _checkpoint_debug_enabled is not None else debug:
        if context_fn is not noop_context_fn:
            raise ValueError("debug=True is incompatible with non-default context_fn")
        on_error = _debug_report
    if determinism_check not in ("default", "none"):
        raise ValueError("determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    forward_ctx, recompute_ctx = context_fn()
    if not grad_mode.is_grad_enabled():
        return function(*args, **kwargs)
    frame = _Frame(function, args, kwargs, preserve_rng_state,
                   _enable_checkpoint_early_stop if _enable_checkpoint_early_stop is not None
                   else early_stop, determinism_check == "default", recompute_ctx, on_error)
    with saved_tensors_hooks(frame.pack, frame.unpack), forward_ctx:
        out = function(*args, **kwargs)
    frame.forward_completed = True
    for done in frame.after_forward:  # (a deployed model's word on what reruns where)
        done()
    return out


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None,
                          **kwargs):
    """Run the modules of ``functions`` (a Sequential or list) in ``segments`` checkpointed
    chunks; the last chunk runs normally, as in torch."""
    if use_reentrant is None:
        warnings.warn(USE_REENTRANT_WARNING, UserWarning, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    functions = list(functions.children()) if hasattr(functions, "children") else functions

    def run(start: int, end: int):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)


# ---- use_reentrant=False: saved-tensor hooks that recompute ---------------------------------
#
# As torch's: a checkpointed call saves nothing but its inputs, themselves saved tensors (so
# under an outer checkpoint they are the outer one's to recompute). Each tensor its ops save
# becomes a _Holder; the first unpack in a backward reruns the call under hooks that put each
# recomputed tensor in its holder, keyed by that backward's id (or by the GraphExecGroup),
# and stops once every holder is filled (early stop). An unpack hands the tensor over and
# forgets it, so recomputed tensors live no longer than their use, and a holder (with what it
# holds) dies with the saved variable that packed it.

_enable_checkpoint_early_stop: bool | None = None
_checkpoint_debug_enabled: bool | None = None


@contextlib.contextmanager
def set_checkpoint_early_stop(enable: bool):
    """Whether checkpoints made under this context stop recomputing once they have all they
    need (the default); it overrides ``checkpoint(early_stop=)`` and only needs to be active
    during forward."""
    global _enable_checkpoint_early_stop
    prev = _enable_checkpoint_early_stop
    _enable_checkpoint_early_stop = enable
    try:
        yield
    finally:
        _enable_checkpoint_early_stop = prev


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled: bool | None):
    """``checkpoint(debug=)`` for every checkpoint under this context (None: each call's)."""
    global _checkpoint_debug_enabled
    prev = _checkpoint_debug_enabled
    _checkpoint_debug_enabled = enabled
    try:
        yield
    finally:
        _checkpoint_debug_enabled = prev


class GraphExecGroup:
    """The backward calls under one instance recompute each checkpointed region at most once,
    so they must use disjoint parts of the graph (no saved tensor twice), even with
    retain_graph=True. Not nestable; no effect on use_reentrant=True."""

    _tls = threading.local()

    def __enter__(self) -> GraphExecGroup:
        current = self._get_current_group()
        if current is not None:
            raise RuntimeError("GraphExecGroup contexts cannot be nested. Already inside group "
                               f"{current}")
        self._tls.group = self
        return self

    def __exit__(self, *exc) -> None:
        self._tls.group = None

    @classmethod
    def _get_current_group(cls) -> GraphExecGroup | None:
        return getattr(cls._tls, "group", None)


class _Handle:
    """The key of one recomputed tensor for one backward."""

    __slots__ = ("__weakref__",)


class _Holder:
    """What the forward keeps for one saved tensor: a handle per backward, None once used."""

    __slots__ = ("__weakref__", "handles")

    def __init__(self) -> None:
        self.handles: dict = {}


class _StopRecomputation(Exception):
    pass


_outside_backward_ids = itertools.count(-2, -1)  # a fresh key for each unpack outside backward


class _Frame:
    """One checkpointed call: its saved inputs, RNG state, the holders of what its ops saved
    and, per backward, the recomputed tensors."""

    def __init__(self, function, args, kwargs, preserve_rng_state: bool, early_stop: bool,
                 check: bool, recompute_ctx, on_error) -> None:
        from disthook import random
        from disthook.autograd.graph import _SavedTensor
        from disthook.tensor import Tensor

        self.function, self.kwargs = function, kwargs
        # the inputs are saved tensors: under an outer checkpoint, its pack hook keeps them
        self.saved_args = [_SavedTensor(a, None, is_output=False) if isinstance(a, Tensor)
                           else a for a in args]
        self.rng_state = random.get_rng_state() if preserve_rng_state else None
        self.autocast = _autocast_now()  # the rerun computes in the forward's region
        self.early_stop, self.check = early_stop, check
        self.recompute_ctx = recompute_ctx
        self.on_error = on_error
        self.weak_holders: list = []
        self.metadata: list = []  # (shape, dtype, device) per saved tensor, at forward time
        self.recomputed: dict = collections.defaultdict(weakref.WeakKeyDictionary)
        self.recompute_count: dict = collections.defaultdict(int)
        self.is_recomputed: dict = collections.defaultdict(bool)
        self.recomputed_metadata: dict = collections.defaultdict(list)  # for debug reports
        self.forward_completed = False
        self.ignore_saved_mismatch = False
        self.after_forward: list = []  # called once its forward has run

    # -- the hooks of the original forward
    def pack(self, tensor) -> _Holder:
        holder = _Holder()
        self.weak_holders.append(weakref.ref(holder))
        self.metadata.append(_metadata(tensor))
        return holder

    def unpack(self, holder: _Holder):
        from disthook.autograd import engine

        gid = GraphExecGroup._get_current_group()
        if gid is None:
            gid = engine.current_task_id()
            if gid == -1:
                gid = next(_outside_backward_ids)
        try:
            if not self.is_recomputed[gid]:
                self._recompute(gid)
                self.is_recomputed[gid] = True
                self._check(gid)
            handle = holder.handles.get(gid)
            if handle is None:
                overlap = ("Performing two backward calls that overlap (i.e. require the same "
                           "saved activation in order to compute gradients) is not allowed "
                           "while under the torch.utils.checkpoint.GraphExecGroup context. "
                           if GraphExecGroup._get_current_group() is not None else "")
                raise CheckpointError(
                    "torch.utils.checkpoint: Unpack is being triggered for a tensor that was "
                    f"already unpacked once. {overlap}If you are calling ctx.saved_tensors in "
                    "backward, make sure to do so only once. Otherwise please open an issue "
                    "with details on your use case.")
        except CheckpointError as error:
            if self.on_error is None:
                raise
            self.on_error(self, gid, error)
        holder.handles[gid] = None
        return self.recomputed[gid].pop(handle)

    # -- the rerun
    def _recompute(self, gid) -> None:
        """Rerun the call with grad, under hooks that fill the holders for ``gid``."""
        from disthook import random
        from disthook.autograd.graph import _SavedTensor

        args = [a.unpack(None) if type(a) is _SavedTensor else a for a in self.saved_args]
        holders = self.weak_holders
        recomputed = self.recomputed[gid]

        def pack(tensor):
            tensor = tensor.detach() if tensor.requires_grad else tensor
            index = self.recompute_count[gid]
            self.recompute_count[gid] += 1
            if self.on_error is not None:
                self.recomputed_metadata[gid].append(_metadata(tensor))
            if index >= len(holders):
                if not self.forward_completed:
                    # early stop off and a backward inside the checkpointed call itself
                    self.ignore_saved_mismatch = True
                    return tensor
                raise CheckpointError(
                    "torch.utils.checkpoint: trying to save more tensors during recomputation "
                    f"than during the original forward pass.\n{DEBUG_TIP}")
            holder = holders[index]()
            if holder is not None:  # else freed already (a backward inside the forward)
                holder.handles[gid] = handle = _Handle()
                recomputed[handle] = tensor
            if self.early_stop and self.recompute_count[gid] == len(holders):
                raise _StopRecomputation
            return tensor  # kept, should the rerun itself be differentiated

        pack.keeps_values = True  # a placed part rerun here goes to its worker as before
        state_now = random.get_rng_state() if self.rng_state is not None else None
        if self.rng_state is not None:
            random.set_rng_state(self.rng_state)
        try:
            with saved_tensors_hooks(pack, _identity), grad_mode.enable_grad(), \
                    _autocast_as(self.autocast), self.recompute_ctx:
                self.function(*args, **self.kwargs)
        except _StopRecomputation:
            pass
        finally:
            if state_now is not None:
                random.set_rng_state(state_now)

    def _check(self, gid) -> None:
        """torch's determinism check: as many tensors saved again, each with the same
        shape, dtype and device."""
        if not self.check or self.ignore_saved_mismatch:
            return
        if self.recompute_count[gid] != len(self.weak_holders):
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the "
                "original forward and recomputation.\nNumber of tensors saved during forward: "
                f"{len(self.weak_holders)}\nNumber of tensors saved during recomputation: "
                f"{self.recompute_count[gid]}.\n{DEBUG_TIP}")
        mismatched = ""
        for i, ref in enumerate(self.weak_holders):
            holder = ref()
            if holder is None:
                continue
            again = _metadata(self.recomputed[gid][holder.handles[gid]])
            if again != self.metadata[i]:
                mismatched += (f"tensor at position {i}:\nsaved metadata: {self.metadata[i]}\n"
                               f"recomputed metadata: {again}\n")
        if mismatched:
            raise CheckpointError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have "
                f"different metadata than during the forward pass.\n{mismatched}.\n{DEBUG_TIP}")


DEBUG_TIP = """
Tip: To see a more detailed error message, either pass `debug=True` to
`torch.utils.checkpoint.checkpoint(...)` or wrap the code block
with `with torch.utils.checkpoint.set_checkpoint_debug_enabled(True):` to
enable checkpoint-debug mode globally.
"""


def _debug_report(frame: _Frame, gid, error: CheckpointError):
    """checkpoint(debug=True): the error again, with what each run saved. (torch logs the
    operators that ran, with stack traces; disthook, which has no operator dispatch to
    watch, lists the tensors each run saved.)"""
    def listing(metas: list) -> str:
        return "\n".join(f"{i}: {m}" for i, m in enumerate(metas)) or "(none)"

    raise CheckpointError(
        "An error happened while unpacking tensors; dumping logs of latest computation "
        "because you passed `debug=True` to `torch.utils.checkpoint.checkpoint()`.\n\n"
        f"Tensors saved during the original forward:\n{listing(frame.metadata)}\n\n"
        "Tensors saved during recomputation:\n"
        f"{listing(frame.recomputed_metadata[gid])}\n\n"
        " ERROR: Detected non-determinism while running activation checkpointing\n\n"
        " You are seeing this error because you passed `debug=True` to checkpoint and "
        "tensors to be saved during the original forward and differ between those saved "
        "during recomputation. This can happen if different operators were ran in the "
        "original forward and in the recomputation.\n") from error


def _metadata(tensor) -> dict:
    return {"shape": tensor.shape, "dtype": tensor.dtype, "device": tensor.device}


def _autocast_now() -> str | None:
    """The CPU autocast region a checkpointed call runs in (its dtype's name, or None), which
    its rerun in the backward computes under again, as torch's checkpoint does."""
    from disthook.amp import autocast_mode

    return autocast_mode.region_field().get("autocast")


def _autocast_as(name: str | None):
    from disthook.amp import autocast_mode

    return autocast_mode.region_as(name)


def _identity(x):
    return x


# ---- use_reentrant=True: a custom Function that reruns the segment in its backward ----------

class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        from disthook import random
        from disthook.tensor import Tensor

        ctx.run_function = run_function
        ctx.rng_state = random.get_rng_state() if preserve_rng_state else None
        ctx.autocast = _autocast_now()
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn(NO_INPUT_GRAD_WARNING, UserWarning, stacklevel=4)
        ctx.save_for_backward(*[args[i] for i in ctx.tensor_indices])
        with grad_mode.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grad_outputs):
        import disthook
        from disthook import random
        from disthook.autograd import engine
        from disthook.tensor import Tensor

        task = engine._running.tasks[-1]
        if not task.accumulate or task.runs is not None:
            raise RuntimeError(REENTRANT_GRAD_MSG)
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t.detach().requires_grad_(t.requires_grad)
        state_now = random.get_rng_state() if ctx.rng_state is not None else None
        if ctx.rng_state is not None:
            random.set_rng_state(ctx.rng_state)
        try:
            with grad_mode.enable_grad(), _autocast_as(ctx.autocast):
                outputs = ctx.run_function(*inputs)
        finally:
            if state_now is not None:
                random.set_rng_state(state_now)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
                 if isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        disthook.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        grads = tuple(inp.grad if isinstance(inp, Tensor) else None for inp in inputs)
        return (None, None, *grads)
