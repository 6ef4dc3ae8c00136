"""What optimizers and the gradient utilities do to a deployment's parameters, where they
live: ``grad_op`` over many parameters at once (one request per worker), ``zero_grad``, the
shares of a local optimizer that each worker steps, gradient norms and clipping.
``RemoteParameter`` offers them to ``disthook.optim`` and ``nn.utils.clip_grad`` as
``_grad_op``, ``_zero_grads``, ``_optimizer_share``, ``_grad_norms``, ``_scale_grads`` and
``_clamp_grads``."""
from __future__ import annotations

import itertools

import numpy as np

from disthook.tensor import Tensor

__all__ = ["clamp_grads", "grad_norms", "grad_op", "optimizer_share", "optimizer_state",
           "scale_grads",
           "zero_grads"]


def grad_op(params: list, op: str, value: float | None = None, grads=None) -> list:
    """Run ``grad_op`` on the workers holding ``params`` (RemoteParameters of one or
    more models): per model one request per worker, sent together; the results in the
    order of ``params``."""
    results: list = [None] * len(params)
    models: dict[int, tuple] = {}  # id(model) -> (model, {address: [indices]})
    for i, p in enumerate(params):
        model, owners = models.setdefault(id(p._model), (p._model, {}))
        owners.setdefault(model._owner(p._path), []).append(i)
    if op != "norm":  # (a p.grad kept with its graph is no longer the gradient)
        from disthook.distributed.graph_grads import forget_graph_grads

        forget_graph_grads(params)
    for model, owners in models.values():
        if op != "norm":  # a write (from a hook: what follows it in the pass changes)
            model._hub.writes += 1
        calls = []
        for address, indices in owners.items():
            fields = {"names": [params[i]._path for i in indices], "op": op,
                      "value": value}
            if grads is not None:
                fields["grads"] = [grads[i] for i in indices]
            calls.append((address, fields))
        replies = model._hub.request_all(calls, "grad_op", what=f"{op} of gradients")
        for indices, reply in zip(owners.values(), replies):
            for i, result in zip(indices, reply["result"] or [None] * len(indices)):
                results[i] = result
    return results


def zero_grads(params: list, set_to_none: bool = True, optimizer=None) -> None:
    """``optimizer.zero_grad()`` of these parameters, on their workers: with the model's
    next forward (each worker's share of ``optimizer`` zeroes its own parameters; the call
    makes the share if no step made it yet), or at once for parameters no optimizer holds
    (``module.zero_grad()``)."""
    from disthook.distributed.graph_grads import forget_graph_grads
    from disthook.distributed.state_entries import freeze_grads

    forget_graph_grads(params)  # (also where the zeroing rides with the next forward)
    for p in params:  # zeroed: no gradient of theirs has a graph on its worker any more
        p._model.__dict__.pop("_grads_with_graph", None)
    if set_to_none:  # (a kept p.grad is no longer the gradient: it keeps its value)
        freeze_grads(params)
    now = params
    if optimizer is not None and not _in_hook(params):
        later = set()
        for model, calls in share_calls(optimizer, "zero_grad"):
            later.add(id(model))
            for call in calls.values():
                call["set_to_none"] = set_to_none
            model._hub.defer(calls)
        now = [p for p in params if id(p._model) not in later]
    if not now:
        return
    if set_to_none:
        grad_op(now, "set", grads=[None] * len(now))
    else:
        grad_op(now, "scale", 0.0)


def _in_hook(params: list) -> bool:
    """Whether a client hook of a deployment holding ``params`` runs now: what it does to
    the weights is done before its answer (an optimizer step inside backward), not with
    the next forward."""
    return any(p._model._hub.firing for p in params)


def optimizer_share(optimizer, action: str, state: dict | None = None):
    """What a local optimizer (any ``disthook.optim.Optimizer``, param groups and all)
    does to its remote parameters: each worker keeps a share of it, made with the same
    class and defaults over the parameters it holds, and gets the groups' current
    hyperparameters with every call. ``action``: "step" (the first over a deployment
    makes the shares, the later ones ride with its next forward); "state" (each
    parameter's state: {parameter: {key: value}}); "load" (``state``, the same shape,
    into the shares)."""
    out = {}
    if action in ("step", "load"):  # what reads of its state fetched is old now
        optimizer.__dict__.pop("_fetched_state", None)
    for model, calls in share_calls(optimizer, action):
        share_id = next(iter(calls.values()))["id"]
        if action == "step" and share_id in model._hub.made_shares and not model._hub.firing:
            model._hub.defer(calls)
            continue
        if action == "load":
            for call in calls.values():
                call["state"] = {"param_groups": [], "state": {
                    p._path: {k: _array_of(v) for k, v in value.items()}
                    for p, value in (state or {}).items()
                    if p._model is model and p._path in call["params"]}}
        replies = []
        if action in ("step", "load"):  # a write: down the chain, as one
            model._hub.write_all([(address, "step", {"optimizer": call})
                                  for address, call in calls.items()],
                                 what=f"optimizer {action}")
        else:
            replies = model._hub.request_all([(address, {"optimizer": call})
                                              for address, call in calls.items()],
                                             "step", what=f"optimizer {action}")
        if action in ("step", "load"):  # the shares exist now
            model._hub.made_shares.add(share_id)
        if action == "state":
            for reply in replies:
                for path, value in reply["result"]["state"].items():
                    out[model._param_proxies[(model._canonical.get(path, path), False)]] = {
                        k: Tensor._make(np.array(v), None, 0) if isinstance(v, np.ndarray)
                        else v for k, v in value.items()}
    return out


def optimizer_state(optimizer, local, replace: bool = False):
    """``optimizer.state`` reading its remote parameters' state in their workers' shares
    (``optimizer_state.state_of``)."""
    from disthook.distributed.optimizer_state import state_of

    return state_of(optimizer, local, replace)


def share_calls(optimizer, action: str) -> list[tuple]:
    """(model, {address: optimizer_call}) of ``action`` on the shares of ``optimizer``,
    per model of its remote parameters."""
    share_id = optimizer.__dict__.get("_remote_share_id")
    if share_id is None:
        share_id = optimizer._remote_share_id = next(_optimizer_share_ids)
    kind = type(optimizer)
    from disthook import optim

    name = kind.__name__ if getattr(optim, kind.__name__, None) is kind else \
        f"{kind.__module__}:{kind.__qualname__}"
    kwargs = {k: _hyperparameter(k, v) for k, v in optimizer.defaults.items()}
    models: dict[int, tuple] = {}  # id(model) -> (model, {address: (names, groups)})
    for index, group in enumerate(optimizer.param_groups):
        hyper = {k: _hyperparameter(k, v) for k, v in group.items()
                 if k not in ("params", "param_names")}
        for p in group["params"]:
            if not _placed(p):
                continue
            model, shares = models.setdefault(id(p._model), (p._model, {}))
            names, groups = shares.setdefault(model._owner(p._path), ([], []))
            if not groups or groups[-1]["index"] != index:
                groups.append({"index": index, "params": [], "hyper": hyper})
            names.append(p._path)
            groups[-1]["params"].append(p._path)
    return [(model, {address: {"id": share_id, "class": name, "kwargs": kwargs,
                               "params": names, "groups": groups, "action": action}
                     for address, (names, groups) in shares.items()})
            for model, shares in models.values()]


def grad_norms(params: list, norm_type: float) -> list:
    """Each parameter's gradient norm (a 0-d tensor of its dtype; None: no gradient)."""
    norms = grad_op(params, "norm", float(norm_type))
    return [None if n is None else Tensor._make(np.array(n, p._twin._data.dtype), None, 0)
            for p, n in zip(params, norms)]


def scale_grads(params: list, factor: Tensor) -> None:
    grad_op(params, "scale", float(factor.item()))


def clamp_grads(params: list, clip_value: float) -> None:
    grad_op(params, "clamp", float(clip_value))


_optimizer_share_ids = itertools.count(1)  # every optimizer of a deployed model's share


def _hyperparameter(name: str, value):
    """A hyperparameter as it travels: numbers, bools, strings, None, and lists of them."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (np.bool_, np.integer, np.floating)):  # (a schedule using np.cos)
        return value.item()
    if isinstance(value, (tuple, list)):
        items = [v.item() if isinstance(v, (np.bool_, np.integer, np.floating)) else v
                 for v in value]
        if all(v is None or type(v) in (bool, int, float, str) for v in items):
            return items
    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    raise TypeError(f"the optimizer's {name!r} is a {type(value).__name__}; the workers that "
                    "step a deployed model's parameters take numbers, bools, strings and "
                    "lists of them")


def _array_of(value):
    return value.detach()._data if isinstance(value, Tensor) else value


def _placed(p) -> bool:
    """Whether ``p`` is a parameter placed on a worker (a ``RemoteParameter``: its type
    offers the operations of this module)."""
    return hasattr(type(p), "_optimizer_share") and not p.__dict__.get("_is_data", True)
