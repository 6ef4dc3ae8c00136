"""A stage's part of a backward (``workers/compute.py``'s requests run it): the gradients
of its inputs from its outputs' gradients, as a backward (parameters' ``.grad`` grow) or an
autograd.grad (they stay as they are), and those of its taps: tensors client hooks kept in
the context, and parameters a backward names among its inputs, whose gradients go to the
client."""
from __future__ import annotations

import disthook

__all__ = ["run_backward", "taps_here"]


def run_backward(pairs: list, inputs: list, taps: list, tapped: dict, retain: bool,
                  accumulate: bool) -> list:
    """The stage's part of a backward from ``pairs`` (output, gradient): the gradients of
    its ``inputs`` (arrays or None), those of the ``taps`` (key, tensor) put in ``tapped``.
    ``accumulate``: a backward, whose parameters' ``.grad`` grow; else an autograd.grad,
    which leaves every ``.grad`` as it is (hooks fire as they do in it)."""
    if accumulate:
        handles = [_tap(t, key, tapped) for key, t in taps]
        reached: dict = {}  # (several inputs: which got one gradient tensor, see below)
        if len(inputs) > 1:
            handles += [t.register_hook(lambda g, i=i: reached.__setitem__(i, g))
                        for i, t in enumerate(inputs) if t.requires_grad]
        try:
            if pairs:
                disthook.autograd.backward([o for o, _ in pairs], [g for _, g in pairs],
                                           retain_graph=retain)
        finally:
            for handle in handles:
                handle.remove()
        out = [None if t.grad is None else t.grad._data for t in inputs]
        # inputs that one gradient tensor reached (an add's two operands) get one array: it
        # is one tensor in one process, and a hook's in-place change of it is seen by both
        first: dict = {}
        for i, g in reached.items():
            j = first.setdefault(id(g), i)
            if j != i and out[i] is not None and out[j] is not None:
                out[i] = out[j]
        return out
    wanted = [t for t in inputs if t.requires_grad] + [t for _, t in taps]
    got = disthook.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                 retain_graph=retain, allow_unused=True) \
        if pairs and wanted else [None] * len(wanted)
    by_id = {id(t): g for t, g in zip(wanted, got)}
    for (key, t), g in zip(taps, got[len(wanted) - len(taps):]):
        if g is not None:
            tapped[key] = g._data if key not in tapped else tapped[key] + g._data
    return [None if by_id.get(id(t)) is None else by_id[id(t)]._data for t in inputs]


def taps_here(st, context, keys) -> list:
    """(key, tensor) of the taps asked for that this stage holds: tensors client hooks kept
    in this context, and parameters of the stage a backward names among its inputs (a key
    "param:" + name; their gradients go to the client as a tap's, .grad left as it is)."""
    taps, params = [], None
    for key in keys:
        if key in context.taps:
            taps.append((key, context.taps[key]))
        elif key.startswith("param:"):
            if params is None:
                params = dict(st.module.named_parameters())
            p = params.get(key[len("param:"):])
            if p is not None and p.requires_grad:
                taps.append((key, p))
    return taps


def _tap(t, key: str, into: dict):
    """Keep the gradient that reaches ``t`` in this backward (after its own tensor hooks, as
    autograd.grad sees it) in ``into[key]``; the handle removes the tap."""
    def keep(grad):
        into[key] = grad._data if key not in into else into[key] + grad._data

    return t.register_hook(keep)
