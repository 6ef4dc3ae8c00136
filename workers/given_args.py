"""What a part does to what it is given, where one process would show it elsewhere: an
argument that is the program's own tensor changed in place goes back to the client with the
answer (``changed_arguments``; ``disthook.distributed.changed_args`` writes it there), or is
refused where it took a graph; a post hook on the node standing for its received input
(``refuse_post_hook``, the ``register_hook`` of ``stage_parts._StageInput``'s node), whose op ran
elsewhere, is refused; a list or dict it was given and changed is refused
(``refuse_changed_containers``)."""
from __future__ import annotations

from disthook.amp import autocast_mode
from disthook.service import values
from disthook.service.values import changed_container

__all__ = ["changed_arguments", "given_now", "refuse_changed_containers", "refuse_post_hook",
           "region_casts"]


def given_now(t, nr: int) -> tuple:
    """What ``changed_arguments`` compares with later: ``t``, the program's tensor given as
    the call's tensor ``nr`` (in ``pack``'s order), as it is now."""
    return t, nr, t._vc[0], t._grad_fn


def changed_arguments(given: list, path: str, keeps: list | None = None) -> list | None:
    """The arguments that are the program's own tensors which the part changed in place (its
    code or a hook on it; ``given``: ``given_now``'s tuples), each as ``{"arg": nr,
    "value": array, "moved": n}`` (``n``: how far its version counter moved), for the client
    to change the program's tensor as one process does; None where none changed. (A value
    kept on a worker, given by the program's tensor that stands for it, counts too: another
    part's worker, which saved it for backward, keeps its old value and version, and the
    client's tensor takes the change, its node's check then refusing that backward as one
    process's saved-tensor check does.) One changed by an
    op that recorded a graph takes that op's history in one process: where the call keeps
    its outputs here (``keeps``, a list), the tensor goes into ``keeps`` to be one more
    output of the call (its entry says ``"graph": True``, for its record), whose node the
    client gives the program's tensor; elsewhere (a chain's stage) it is refused."""
    changed = []
    for t, nr, version, node in given:
        moved = t._vc[0] - version
        if not moved:
            continue
        entry = {"arg": nr, "value": t.detach()._data, "moved": moved}
        if "_argument" in t.__dict__:  # returned, it is the program's tensor as changed
            values.as_argument(t, nr)
        if t._grad_fn is not node:
            if keeps is None:
                raise NotImplementedError(
                    f"the deployed {path} changed its input in place with a graph recorded "
                    "(its first layer, or a hook on it): in one process the program's tensor "
                    "takes that in-place op's history (its grad_fn), which a chain of stages "
                    "cannot give it. Change a clone (x = x.clone()), or deploy the model "
                    "with a placement= (its parts' calls can)")
            keeps.append(t)
            entry["graph"] = True
        changed.append(entry)
    return changed or None


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


def region_casts(given: list) -> list | None:
    """What the call's autocast region cast and keeps for the region (its cache), each as
    ``["arg", nr]`` (the program's leaf given as tensor ``nr``) or ``["w", id]`` (a tensor
    of this worker, a weight): one process casts such a tensor once for a region, so the
    client refuses a backward through two calls of one region that cast the same one
    (``autocast_mode.check_one_cast``). None where it cast none (no op the region lowers
    took such a tensor): then any number of calls compute as one process."""
    nrs = {id(t): nr for t, nr, *_ in given}
    casts = [["arg", nrs[id(x)]] if id(x) in nrs else ["w", id(x)]
             for x in autocast_mode.cached_leaves()]
    return casts or None


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
