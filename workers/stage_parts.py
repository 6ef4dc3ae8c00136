"""The pieces a stage's forward is made of, outside the request handlers
(``workers/compute.py``): a received activation as what it is in one process (the output of
an op, ``_StageInput``), a call's argument as the part's code takes it, the submodule a call
names, the random stream a job hands on or leaves, and the process's resident memory that a
training step reads after each forward."""
from __future__ import annotations

import os
import random

import disthook
from workers.given_args import refuse_post_hook

__all__ = ["leave_stream", "rss_bytes"]


class _StageInput(disthook.autograd.Function):
    """A stage's input as what it is in one process: the output of an op (the previous
    stage's last), not a leaf, so that a hook may change it in place; it shares the leaf's
    memory, and its gradient goes to the leaf, whose .grad the previous stage gets. No
    gradient stays none (not zeros): the earlier stages' ``.grad`` stay None, as in one
    process, where a Function of the stage returned None for its input."""

    @staticmethod
    def forward(ctx, leaf):
        ctx.set_materialize_grads(False)
        return disthook.Tensor._make(leaf._data, None, 0)

    @staticmethod
    def backward(ctx, grad):
        return grad


_StageInput._backward_cls.register_hook = refuse_post_hook


def _stream_state(msg) -> str | None:
    """The random stream to hand on after a forward that was given one."""
    return disthook.random._stream_state() if msg.get("rng") else None


_own_bits = random.Random()  # seeded from the system's entropy: this worker's, no client's


def leave_stream() -> None:
    """A job ends, or one that drew from its client's random stream waits: the default
    generator takes a fresh state of the worker's own, so that a job given no stream (a raw
    client's) never draws the next numbers of another client's or of another such job
    (which it could then tell apart)."""
    bits = disthook.random.default_generator._rng.bit_generator
    state = bits.state
    if state.get("bit_generator") == "PCG64":  # (disthook's: about 3 µs)
        state["state"] = {"state": _own_bits.getrandbits(128),
                          "inc": _own_bits.getrandbits(128) | 1}
        state["has_uint32"], state["uinteger"] = 0, 0
        bits.state = state
    else:
        bits.state = type(bits)(_own_bits.getrandbits(64)).state


def _as_computed(t):
    """A chain stage's received activation as its forward takes it (the pass made a float or
    complex one a leaf that requires grad)."""
    return _StageInput.apply(t) if t.requires_grad else t


def _as_received(t, computed: bool):
    """A call's argument as the part's code takes it: computed (``_as_computed``) where the
    client's tensor has a ``grad_fn`` (a value kept on a worker counts as one), else the
    leaf itself, as the program's leaf reaches the module in one process (a legacy backward
    hook then has no node to go on, and the part returns it as it is: ``model(x) is x``)."""
    return _as_computed(t) if computed else t


def _submodule(st, path: str):
    """The submodule of the stage at ``path`` (a path in the whole model; "": the stage
    holds the whole model). Each step is read from the registered children, as
    ``getattr`` finds it there; a name the module or its class also has otherwise goes
    through ``get_submodule`` (and so does whatever it refuses)."""
    if not path:
        return st.module
    mod = st.module
    for i, name in enumerate(path.split(".")):
        child = mod._modules.get(name)
        if child is None or name in mod.__dict__ or hasattr(type(mod), name):
            if i == 0 and name not in mod._modules:
                raise LookupError(f"{st.name} holds {', '.join(mod._modules)}, not {path!r}")
            return st.module.get_submodule(path)
        mod = child
    return mod


def rss_bytes() -> int | None:
    """This process's resident memory, in bytes (None where /proc is not there). A training
    step asks after every forward: the file stays open (per process: a fork's child opens
    its own), read again from its start."""
    global _statm
    try:
        if _statm is None or _statm[0] != os.getpid():
            _statm = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


_statm: tuple[int, int] | None = None  # (pid, descriptor of its /proc/self/statm)
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
