"""What a forward answers the client with, beyond one tensor: a value that cannot go back
is refused (``refuse_opaque``); a chain's last stage that returns tuples, lists or str-keyed
dicts of tensors (and of plain values), as ``nn.Sequential``'s last module may (``return
logits, {"aux": aux}``), answers with the structure (``answer_items``), each tensor an output
of the chain's one node on the client with its own gradient; the stage keeps its graph with
those tensors as its outputs, whose gradients its backward takes (None for one the loss did
not reach)."""
from __future__ import annotations

import time

from disthook.service import values
from disthook.service.values import opaque_in, pack, tensors_in
from workers.state import Context

__all__ = ["answer_items", "refuse_opaque"]


def answer_items(worker, job, out, inputs: list, grad: bool, name: str, result: dict,
                 ahead) -> None:
    """Keep the graph of ``out`` (not one Tensor) and answer the client with it; ``result``:
    the answer's other fields (random stream, attributes, ...)."""
    refuse_opaque(out, name)
    outs = list(tensors_in(out))
    flags = [o.requires_grad for o in outs]
    worker._keep(job, grad and any(flags), Context(
        job.client, inputs, outs, job.retained, time.monotonic(), taps=job.taps))
    worker._to_client(job, "ok", {"result": {
        **result, "output": pack(out), "items": True, "requires_grad": flags,
        "cut": bool(grad and any(flags) and values.unreached_inputs(outs, inputs)),
        "saved": [bool(values.saved_by_its_node(o)) for o in outs]}, "ahead": ahead})


def refuse_opaque(out, what: str) -> None:
    """Refuse ``out``, what ``what`` (a part, a chain's last stage) returned, where it holds
    what cannot go back to the client."""
    opaque = opaque_in(out)
    if opaque:
        raise TypeError(f"{what} returned {opaque}, which cannot go back to the client: a "
                        "module called from the client (or a chain's last stage) must return "
                        "tensors, numbers, strings, None, or tuples, lists, str-keyed dicts "
                        f"and dataclasses of them{_distribution_advice(out)}")


def _distribution_advice(out) -> str:
    """What to do instead, where a module returned a probability distribution (an RL policy's
    head: ``return Categorical(logits=self.linear(x))``)."""
    from disthook.distributions import Distribution

    items = out if isinstance(out, (tuple, list)) else (out,)
    if not any(isinstance(v, Distribution) for v in items):
        return ""
    return ("; a distribution is made of its parameters: return those (its logits; its loc "
            "and scale) and make the distribution in the code that calls the module")
