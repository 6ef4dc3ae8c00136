"""A user's ``autograd.Function`` applied inside ``vmap``, by torch 2.13's rules
(``torch._functorch.autograd_function``): inside a vmap, such a Function must have a
``setup_context`` (RuntimeError otherwise), takes no tensor as a keyword-only argument
(NotImplementedError), and either sets ``generate_vmap_rule = True`` (then its forward runs
per sample, as here) or overrides the ``vmap`` staticmethod, which torch calls once with the
whole batch, ``vmap(info, in_dims, *args)`` returning ``(outputs, out_dims)``; one that does
both, or neither, raises RuntimeError.

disthook's vmap calls the function once per index (``func.vmap``): where a Function's own
``vmap`` applies, it is called once, at the first index, with the tensors given to vmap
(each with its mapped dimension, ``in_dims``) and the batch size, and each index takes its
slice of the outputs (``out_dims``). That needs every tensor argument to be one of vmap's
own slices (a tensor computed from them inside the function is batched too in torch, with a
batch dimension this loop does not have): otherwise NotImplementedError, saying what to do."""
from __future__ import annotations

import inspect
import threading
from collections import namedtuple

__all__ = ["VmapInfo", "active", "apply_in_vmap", "mapping", "own", "running"]

VmapInfo = namedtuple("VmapInfo", ["batch_size", "randomness"])

_DOCS = "For more details, please see https://pytorch.org/docs/main/notes/extending.func.html"
_state = threading.local()


def running():
    """The vmap running in this thread now (None outside one, or inside a Function's own
    ``vmap`` rule, which runs below it)."""
    return getattr(_state, "run", None)


active = [0]  # vmaps running now, in any thread (Function.apply looks no further if none)


class mapping:
    """The loop of one vmap call; ``at(i, slices)``: the context of its index ``i``, where
    ``slices`` maps the id of each slice given to the function to (the tensor given to
    vmap, its mapped dimension)."""

    def __init__(self, batch_size: int, randomness: str):
        self.info = VmapInfo(batch_size, randomness)
        self.results: list = []  # per Function call, in order: (cls, pattern, result)
        self.index, self.slices, self.count, self.outer = 0, {}, 0, []

    def at(self, index: int, slices: dict):
        self.index, self.slices, self.count = index, slices, 0
        return self

    def __enter__(self):
        self.outer.append(running())
        _state.run = self
        active[0] += 1
        return self

    def __exit__(self, *exc):
        active[0] -= 1
        _state.run = self.outer.pop()
        return False


def _below(cls, args: tuple, kwargs: dict, fn):
    """``fn(*args, **kwargs)`` below this thread's vmap (as torch's rules run: the
    Function's own apply then records as outside any vmap)."""
    run = running()
    _state.run = None
    try:
        return fn(*args, **kwargs)
    finally:
        _state.run = run


def own(cls) -> bool:
    """A user's Function (disthook's own ops are Functions too, and run per index)."""
    return not cls.__module__.startswith("disthook.")


def apply_in_vmap(cls, args: tuple, kwargs: dict):
    """``cls.apply(*args, **kwargs)`` of a user's Function inside ``vmap``."""
    from disthook.autograd.function import Function
    from disthook.tensor import Tensor

    run = running()
    name = cls.__name__
    if cls.setup_context is Function.setup_context:
        raise RuntimeError("In order to use an autograd.Function with functorch transforms "
                           "(vmap, grad, jvp, jacrev, ...), it must override the "
                           f"setup_context staticmethod. {_DOCS}")
    if kwargs:  # bound to the forward's parameters, as torch's apply binds them
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs  # (what is left: keyword-only)
    if any(isinstance(v, Tensor) for v in kwargs.values()):
        raise NotImplementedError(
            "Run vmap on autograd.Function with kwarg-only Tensor args. Please do not pass "
            f"kwarg-only Tensors to autograd.Function. Got: {kwargs}")
    overridden = cls.vmap is not Function.vmap
    if cls.generate_vmap_rule:
        if overridden:
            raise RuntimeError(
                f"You tried to vmap over {name}, but it has both generate_vmap_rule=True and "
                "an overridden vmap staticmethod. Please set generate_vmap_rule=False or "
                f"delete the overridden vmap staticmethod to avoid ambiguity. {_DOCS}")
        return _below(cls, args, kwargs, cls.apply)
    if not overridden:
        raise RuntimeError(
            f"You tried to vmap over {name}, but it does not have vmap support. Please "
            f"override and implement the vmap staticmethod or set generate_vmap_rule=True. "
            f"{_DOCS}")
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not tensors:  # nothing batched: torch runs it as it is
        return _below(cls, args, kwargs, cls.apply)
    if any(id(t) not in run.slices for t in tensors):
        raise NotImplementedError(
            f"{name}'s own vmap staticmethod applies here, which torch calls once with the "
            "whole batch; disthook's vmap calls the function once per index, and can call "
            f"{name}.vmap only where every tensor given to {name}.apply is one that vmap "
            f"passed to the function. Apply {name} to the function's arguments themselves "
            "(vmap(MyFn.apply)(x)), or set generate_vmap_rule=True (its forward then runs "
            "per index, as torch's generated rule computes)")
    pattern = tuple((id(run.slices[id(a)][0]), run.slices[id(a)][1])
                    if isinstance(a, Tensor) else ("value", a) for a in args)
    nr, run.count = run.count, run.count + 1
    if run.index == 0:
        full = [run.slices[id(a)][0] if isinstance(a, Tensor) else a for a in args]
        in_dims = tuple(run.slices[id(a)][1] if isinstance(a, Tensor) else None
                        for a in args)
        result = _below(cls, (run.info, in_dims, *full), kwargs, cls.vmap)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise RuntimeError(f"Expected the vmap staticmethod to have two returns, an "
                               f"output and out_dims with pytree structure compatible with "
                               f"the output. Got: {result}")
        run.results.append((cls, pattern, result))
    elif nr >= len(run.results) or run.results[nr][:2] != (cls, pattern):
        raise NotImplementedError(
            f"{name}.apply was called at index {run.index} of vmap otherwise than at index 0 "
            f"(another Function, or other arguments): its own vmap staticmethod, called once "
            "for the batch, cannot stand for it. Call it the same way at every index")
    outs, out_dims = run.results[nr][2]
    single = not isinstance(outs, tuple)
    outs = (outs,) if single else outs
    dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(outs)
    picked = tuple(o if d is None or not isinstance(o, Tensor) else o.select(d, run.index)
                   for o, d in zip(outs, dims))
    return picked[0] if single else picked
