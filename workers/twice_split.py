"""A backward that reaches a call's forward graph on this worker both from the call's own
output and through the graph of that call's first backward (``backward(create_graph=True)``,
``_backward_with_graph``: a loss of forces and of the energy) runs here as two passes, one
per request. In one process both parts meet in one pass, so a hook in that forward graph
sees their sum once; here it would see each part alone (a module's full backward hook: only
the part that came through the module's output). Such a backward is refused, before the
second part reaches the hook."""

from __future__ import annotations

import contextlib

SEEN_PASSES = 4  # the client's backwards remembered per context (the latest ones)


def _hook_names(node, module) -> list:
    """What a user hooked on ``node`` of the forward graph of ``module`` (its stage's part):
    descriptions of the hooks a pass through it fires, or none."""
    names = []
    owner = node.__dict__.get("_module_hook")
    if owner is not None:
        hook, input_side = owner
        path = next((n for n, m in module.named_modules() if m is hook.module), "")
        what = f"module {path or type(hook.module).__name__!r}"
        if input_side and hook.user_hooks:
            names.append(f"the full backward hook of {what}")
        if len(node._post_hooks or ()) > 1 or node._pre_hooks or node._tensor_hooks:
            names.append(f"a hook on the graph node of {what}")
        return names
    variable = getattr(node, "variable", None)
    if variable is not None:  # a parameter's AccumulateGrad
        if variable._backward_hooks or variable._post_acc_hooks:
            path = next((n for n, p in module.named_parameters() if p is variable), "?")
            names.append(f"a hook on the parameter {path!r}")
        return names
    if node._tensor_hooks and any(node._tensor_hooks.values()):
        names.append(f"a tensor hook on an activation (the output of {node.name()})")
    if node._retains:
        names.append(f"retain_grad() of an activation (the output of {node.name()})")
    if node._pre_hooks or node._post_hooks:
        names.append(f"a hook on the graph node {node.name()}")
    return names


def hooked(context, module) -> list:
    """(node, descriptions) of the hooked nodes of a call context's forward graph (kept on
    the context: its graph does not change)."""
    found = context.__dict__.get("_hooked")
    if found is not None:
        return found
    outputs = context.output if isinstance(context.output, list) else [context.output]
    stack = [o.grad_fn for o in outputs if getattr(o, "grad_fn", None) is not None]
    seen, found = set(), []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names = _hook_names(node, module)
        if names:
            found.append((node, names))
        stack.extend(nxt for nxt, _ in node.next_functions)
    context.__dict__["_hooked"] = found
    return found


@contextlib.contextmanager
def watching(context, module, pass_id, through_first_backward: bool):
    """Around a backward pass of ``context``'s forward graph (a call's context whose first
    backward kept its graph), from the client's backward ``pass_id``: the call's own pass,
    or (``through_first_backward``) that of the graph of its first backward. A hooked node
    both reach in one client backward raises NotImplementedError."""
    nodes = [] if pass_id is None else hooked(context, module)
    if not nodes:
        yield
        return
    passes = context.__dict__.setdefault("_split_passes", {})
    reached = passes.setdefault(pass_id, {})
    while len(passes) > SEEN_PASSES:
        del passes[next(iter(passes))]
    mine = "twice" if through_first_backward else "call"

    def prehook(node, names):
        def note(grads):
            other = reached.get(id(node))
            if other is not None and other != mine:
                raise NotImplementedError(
                    f"this backward reaches {' and '.join(names)} in the deployed part both "
                    "through its output and through the graph of its first backward "
                    "(backward(create_graph=True) or autograd.grad(create_graph=True), "
                    "then a loss of both); the deployment computes the two parts in two "
                    "passes, so the hook would get only one of them (in one process it gets "
                    "their sum). Register the hook on a module outside the twice-"
                    "differentiated part, or run the model in one process: model.to_local()")
            reached[id(node)] = mine
        return note

    handles = [node.register_prehook(prehook(node, names)) for node, names in nodes]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
