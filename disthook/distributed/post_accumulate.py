"""Post-accumulate-grad hooks on a deployed parameter: registered on its worker, which fires
the hook once the parameter's ``.grad`` was updated there, and run here on the parameter
itself while the worker waits (``HookServer`` sends the answer); and where the weight
writes of a client hook go (an optimizer stepped inside backward)."""
from __future__ import annotations

import warnings

from disthook.autograd import grad_mode
from disthook.service import hook_kinds
from disthook.tensor import NO_GRAD_HOOK_MSG

__all__ = ["register", "run", "straight_to_stage", "warn_unhooked"]


def register(param, hook):
    """``param.register_post_accumulate_grad_hook(hook)`` of a placed parameter: a
    ``RemoteHandle``; the errors torch gives, and a worker hook refused (it is no function
    of the parameter)."""
    from disthook.service.worker_hooks import WorkerHook

    if isinstance(hook, WorkerHook):
        raise TypeError(
            f"{hook!r} is a worker hook, which a post-accumulate-grad hook cannot be (that "
            f"is given the parameter, and runs here): register it on {param._path!r} with "
            "register_hook, where it sees the gradient on the worker")
    if not param._requires_grad:
        raise RuntimeError(NO_GRAD_HOOK_MSG)
    return param._model._add_hook("post_accumulate", param._path, hook, param,
                                  **hook_kinds.options("post_accumulate"))


def run(server, fn, param) -> dict:
    """Run ``fn(param)`` as its worker fired it, grad mode off, as in one process: what it
    reads and writes (``param.grad``, an optimizer step, ``param.grad = None``) is the
    worker's, which waits for this answer (the fields of an answer that returns nothing).
    On a model cut into micro-batches a write to its weights is refused meanwhile."""
    chunks = param._model._chunks
    outer = server.weight_writes_refused
    if chunks > 1:
        name = getattr(fn, "__name__", type(fn).__name__)
        server.weight_writes_refused = (
            f"the post-accumulate-grad hook {name!r} on {param._path!r} changed the weights "
            f"of a deployed model that cuts each call into {chunks} micro-batches (chunks=): "
            "the hook fires once per micro-batch, and the forwards of later micro-batches "
            "have run with the weights as they were, where one process steps once, on the "
            "whole batch's gradient. Step after backward() (optimizer.step()), or deploy "
            "with chunks=1 to step inside backward; a hook that only reads or changes .grad "
            "is fine")
    server.firing += 1
    try:
        with grad_mode.no_grad():
            out = fn(param)
    finally:
        server.firing -= 1
        server.weight_writes_refused = outer
    if out is not None:
        raise RuntimeError("Tensor post accumulate grad hooks should return None.")
    return {}


def warn_unhooked(param) -> None:
    """A gradient that code here computed through ``param`` (``F.linear(h, part.weight)``
    in a forward that runs here) was added into its ``.grad`` on its worker, where its
    tensor and post-accumulate hooks are: they do not see that share. Say so rather than
    let a hook that clips, steps or records act on a part of the gradient unnoticed."""
    hooks = [kind for _, kind, proxy, _ in param._model._hub.hooks.values()
             if proxy is param and kind in ("tensor", "post_accumulate")]
    if hooks:
        warnings.warn(
            f"the gradient computed on the client through {param._path!r}, a parameter of a "
            "deployed model that code running here uses directly, was added into its .grad "
            f"on its worker without passing its {' and '.join(sorted(set(hooks)))} hook(s), "
            "which fire there: they see only the share of the gradient its worker computes "
            "(in one process they see the sum once). Use the parameter only through its "
            "module (call the part), or hook the module (register_full_backward_hook)",
            RuntimeWarning, stacklevel=2)


def straight_to_stage(hub, calls: list, what: str) -> bool:
    """Whether a weight write (``calls``: (address, type, fields)) goes straight to its
    stage: from a client hook, a write to one stage does, to run at once (its call, a
    chain's train_step too, waits for the hook, and down the chain it would wait behind
    it); one to several stages keeps to the chain (another client's call between them
    keeps one version), and inside a train_step is refused, as is a write while ``run``
    refuses them."""
    if not hub.firing:
        return False
    if hub.weight_writes_refused:
        raise RuntimeError(hub.weight_writes_refused)
    one = len({address for address, _, _ in calls}) == 1
    if hub.in_step and not one:
        raise RuntimeError(
            f"{what} from a hook inside a chain's train_step writes the weights of several "
            "stages at once, which would wait for the step that waits for the hook: step "
            "each parameter in its own hook (an optimizer per parameter, as in the "
            "optimizer-in-backward recipe), or take the step with backward()")
    return one
