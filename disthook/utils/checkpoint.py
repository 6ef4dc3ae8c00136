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

import warnings
import weakref
from collections.abc import Callable

from disthook.autograd import grad_mode
from disthook.autograd.function import Function
from disthook.autograd.saved_hooks import saved_tensors_hooks

__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential"]

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
    if determinism_check not in ("default", "none"):
        raise ValueError("determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    forward_ctx, recompute_ctx = context_fn()
    frame = _Frame(function, args, kwargs, preserve_rng_state, early_stop,
                   determinism_check == "default", recompute_ctx)
    with saved_tensors_hooks(frame.pack, frame.unpack), forward_ctx:
        return function(*args, **kwargs)


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

class _Holder:
    """What the forward keeps for one saved tensor: its position in the segment."""

    __slots__ = ("index", "__weakref__")

    def __init__(self, index: int) -> None:
        self.index = index


class _StopRecomputation(Exception):
    pass


class _Frame:
    """One checkpointed call: its inputs, RNG state, and the tensors recomputed per
    backward (keyed by the engine's task, so each backward recomputes once)."""

    def __init__(self, function, args, kwargs, preserve_rng_state: bool, early_stop: bool,
                 check: bool, recompute_ctx) -> None:
        from disthook import random

        self.function, self.args, self.kwargs = function, args, kwargs
        self.rng_state = random.get_rng_state() if preserve_rng_state else None
        self.early_stop, self.check = early_stop, check
        self.recompute_ctx = recompute_ctx
        self.metadata: list = []  # (shape, dtype) per saved tensor, at forward time
        self.recomputed = weakref.WeakKeyDictionary()

    def pack(self, tensor) -> _Holder:
        self.metadata.append(_metadata(tensor))
        return _Holder(len(self.metadata) - 1)

    def unpack(self, holder: _Holder):
        from disthook.autograd import engine

        tasks = getattr(engine._running, "tasks", None)
        key = tasks[-1] if tasks else _NO_TASK
        values = self.recomputed.get(key)
        if values is None:
            values = self.recomputed[key] = self._recompute()
            if self.check:
                self._check(values)
        return values[holder.index]

    def _recompute(self) -> list:
        """Rerun the segment with grad under hooks that keep each saved tensor detached."""
        from disthook import random

        values: list = []
        wanted = len(self.metadata)

        def pack(tensor):
            values.append(tensor.detach())
            if self.early_stop and len(values) == wanted:
                raise _StopRecomputation

        state_now = random.get_rng_state() if self.rng_state is not None else None
        if self.rng_state is not None:
            random.set_rng_state(self.rng_state)
        try:
            with grad_mode.enable_grad(), saved_tensors_hooks(pack, _identity), \
                    self.recompute_ctx:
                self.function(*self.args, **self.kwargs)
        except _StopRecomputation:
            pass
        finally:
            if state_now is not None:
                random.set_rng_state(state_now)
        return values

    def _check(self, values: list) -> None:
        """torch's determinism check: as many tensors saved again, each with the same
        shape, dtype and device."""
        if len(values) != len(self.metadata):
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the "
                "original forward and recomputation.\nNumber of tensors saved during forward: "
                f"{len(self.metadata)}\nNumber of tensors saved during recomputation: "
                f"{len(values)}.\n")
        mismatched = "".join(
            f"tensor at position {i}:\nsaved metadata: {saved}\nrecomputed metadata: {again}\n"
            for i, (saved, again) in enumerate(zip(self.metadata, map(_metadata, values)))
            if saved != again)
        if mismatched:
            raise CheckpointError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have "
                f"different metadata than during the forward pass.\n{mismatched}.\n")


def _metadata(tensor) -> dict:
    return {"shape": tensor.shape, "dtype": tensor.dtype, "device": tensor.device}


def _identity(x):
    return x


class _NoTask:
    """The key for unpacks outside any backward (reading saved tensors directly)."""


_NO_TASK = _NoTask()


# ---- use_reentrant=True: a custom Function that reruns the segment in its backward ----------

class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        from disthook import random
        from disthook.tensor import Tensor

        ctx.run_function = run_function
        ctx.rng_state = random.get_rng_state() if preserve_rng_state else None
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
            with grad_mode.enable_grad():
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
