"""What a part may not do to what it is given, where one process would show it elsewhere:
change in place an argument that is the program's own tensor (``refuse_changed_arguments``),
or put a post hook on the node standing for its received input (``refuse_post_hook``, the
``register_hook`` of ``compute._StageInput``'s node), whose op ran elsewhere."""
from __future__ import annotations

from disthook.service.values import changed_container

__all__ = ["refuse_changed_arguments", "refuse_changed_containers", "refuse_post_hook"]


def refuse_changed_arguments(given: list, path: str) -> None:
    """A part that changed in place an argument that is the program's own tensor (its code
    or a hook on it): in one process the program's tensor changes; here the part has a
    copy, and the program's would keep its old value. (A value kept on the workers, which
    the program does not hold, may change there.)"""
    for t, version in given:
        if t._vc[0] != version:
            raise NotImplementedError(
                f"the deployed part {path!r} changed its argument in place (in its forward or "
                "a hook on it), a tensor the program holds: in one process that changes the "
                "program's tensor, but the part's worker holds a copy of it, and the "
                "program's tensor would keep its old value. Change a clone in the part "
                "(x = x.clone()), or return the changed value from a forward pre-hook; for "
                "a KV cache the part writes by position, keep it on the module (a buffer), "
                "or pass it in an object of your own class with the method that writes it "
                "(a part given one runs its forward here, and the cache stays the "
                "program's)")


def refuse_changed_containers(given: list, path: str) -> None:
    """A part that changed a list or dict it was given (fairseq's ``incremental_state[key] =
    {...}``, an attention log's ``append``): in one process the program's own container
    changes; here the part changed the copy it received, and the program's would stay as
    it was, silently. ``given``: ``values.containers_in`` of its arguments before the call."""
    container = changed_container(given)
    if container is not None:
        kind = type(container).__name__
        raise NotImplementedError(
            f"the deployed part {path!r} changed a {kind} it was given as an argument (in "
            f"its forward or a hook on it): in one process that changes the program's "
            f"{kind}, but the part's worker holds a copy of it, and the program's {kind} "
            "would stay as it was. Keep such state on the module (an attribute it changes "
            "comes back changed), return it from the forward, or hold it in an object of "
            "your own class (a cache object with an update method: a part given one runs "
            "its forward in the program, with it)")


def refuse_post_hook(node, fn):
    """A post hook on a stage input's node (a legacy backward hook of a module that returns
    its input as it came): in one process it sits on the node of the op that made that
    input, elsewhere here, and sees its grad_input, not the gradient unchanged."""
    module = fn.module() if getattr(fn, "with_module", False) else None
    what = ("grad_fn.register_hook" if module is None
            else f"a legacy register_backward_hook on {type(module).__name__}")
    raise NotImplementedError(
        f"a backward hook ({what}) "
        "is put on the node of a deployed part's input, whose op ran outside this part (on the "
        "client or another stage): in one process it would see that op's grad_input, here "
        "only the gradient as it came. Use register_full_backward_hook (or a hook on the "
        "tensor) instead, or register it on a module that computes something of its own")
