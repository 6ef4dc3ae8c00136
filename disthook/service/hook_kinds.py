"""The kinds of hook a deployed model takes, in one table: for each kind, the method of
``nn.Module`` (or ``Tensor``) that registers it, the options that method takes with their
defaults, and what the hook is called with. The client's proxies check options against it,
and a worker registers a hook on its stage with ``register``."""
from __future__ import annotations

import dataclasses

__all__ = ["KINDS", "HookKind", "options", "register", "steers"]


@dataclasses.dataclass(frozen=True)
class HookKind:
    """One kind of hook: where it is registered and how it is called."""

    name: str
    method: str  # the register method of the target
    on: str  # "module" or "tensor": what the target is
    defaults: dict  # option -> its default, the keyword arguments ``method`` takes
    sees: str  # the hook's signature (module hooks get ``with_kwargs``'s variant too)


KINDS: dict[str, HookKind] = {kind.name: kind for kind in (
    HookKind("forward_pre", "register_forward_pre_hook", "module",
             {"prepend": False, "with_kwargs": False},
             "hook(module, args) -> None or new args"),
    HookKind("forward", "register_forward_hook", "module",
             {"prepend": False, "with_kwargs": False, "always_call": False},
             "hook(module, args, output) -> None or a new output"),
    HookKind("full_backward", "register_full_backward_hook", "module", {"prepend": False},
             "hook(module, grad_input, grad_output) -> None or new grad_input"),
    HookKind("backward", "register_backward_hook", "module", {},
             "hook(module, grad_input, grad_output) of the last op of the module's forward"),
    HookKind("full_backward_pre", "register_full_backward_pre_hook", "module",
             {"prepend": False}, "hook(module, grad_output) -> None or new grad_output"),
    HookKind("tensor", "register_hook", "tensor", {},
             "hook(grad) -> None or a new grad"),
    HookKind("post_accumulate", "register_post_accumulate_grad_hook", "tensor", {},
             "hook(tensor) -> None, after the tensor's .grad was updated"),
)}


def options(kind: str, given: dict | None = None) -> dict:
    """Every option of ``kind``: ``given`` over the defaults. ``ValueError`` for an unknown
    kind or an option that kind does not take."""
    entry = KINDS.get(kind)
    if entry is None:
        raise ValueError(f"unknown hook kind {kind!r}; the kinds are {', '.join(KINDS)}")
    unknown = sorted(set(given or ()) - set(entry.defaults))
    if unknown:
        takes = ", ".join(entry.defaults) or "no options"
        raise ValueError(f"a {kind} hook takes {takes}, not {', '.join(unknown)}")
    return {**entry.defaults, **(given or {})}


def register(target, kind: str, fn, given: dict | None = None):
    """Register ``fn`` as a ``kind`` hook on ``target`` (a module, or a tensor for "tensor")
    with its options; the method's handle."""
    opts = options(kind, given)
    return getattr(target, KINDS[kind].method)(fn, **opts)


def steers(answer) -> bool:
    """Whether a client hook's answer (the fields of a ``hook_reply``) changes what the
    computation after the hook sees: a value to use in place of the hook's own, tensors it
    changed in place, or a write to the model (``wrote``: an attribute of a module, a
    weight). An answer without any only looks (or hooks tensors for later)."""
    return (answer.get("result") is not None or bool(answer.get("changed"))
            or bool(answer.get("wrote")))
