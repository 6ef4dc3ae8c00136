"""``torch.autograd.functional``: Jacobians, Hessians and their products, on disthook's
reverse-mode engine.

Each call differentiates ``func`` at ``inputs`` (a tensor, or a tuple of tensors: the results
then come as tuples too). Results are detached unless ``create_graph=True``. Forward-mode
products (``jvp``, ``hvp``) are computed with two reverse passes (the "double vjp": the
gradient of ``u -> J^T u`` is ``J``), and ``hvp`` equals ``vhp`` because a Hessian is
symmetric; ``vectorize`` and ``strategy="forward-mode"`` change nothing but are accepted.
"""
from __future__ import annotations

from disthook.autograd import grad as _grad
from disthook.autograd.grad_mode import enable_grad
from disthook.tensor import Tensor, stack, zeros_like

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


# ---- shared steps ---------------------------------------------------------------------------

def _as_tuple(value, arg_name: str, fn_name: str) -> tuple[tuple, bool]:
    """(tensors as a tuple, whether ``value`` was one tensor); torch's TypeError otherwise."""
    single = not isinstance(value, tuple)
    items = (value,) if single else value
    for i, item in enumerate(items):
        if not isinstance(item, Tensor):
            if single:
                raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or "
                                f"a tuple of Tensors but the given {arg_name} has type "
                                f"{type(item)}.")
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                            f"tuple of Tensors but the value at index {i} has type "
                            f"{type(item)}.")
    return items, single


def _variables(inputs: tuple, create_graph: bool) -> tuple:
    """The tensors to differentiate with respect to: a fresh leaf per input, or (when the
    caller's graph must reach the results) a view of the input, so ``inputs`` stay as they are."""
    return tuple(x.view_as(x) if create_graph and x.requires_grad
                 else x.detach().requires_grad_(True) for x in inputs)


def _grads(outputs: tuple, inputs: tuple, seeds: tuple, create_graph: bool, strict: bool,
           what: str) -> tuple:
    """d(sum(seeds * outputs)) / d(inputs), zeros where an input is not used (or, ``strict``,
    torch's error naming ``what`` depends on nothing)."""
    live = [(o, s) for o, s in zip(outputs, seeds) if o.requires_grad]
    grads = (_grad([o for o, _ in live], inputs, [s for _, s in live], retain_graph=True,
                   create_graph=create_graph, allow_unused=True)
             if live else (None,) * len(inputs))
    out = []
    for i, (g, x) in enumerate(zip(grads, inputs)):
        if g is None:
            if strict:
                raise RuntimeError(f"{what} is independent of input {i}. This is not allowed "
                                   "in strict mode.")
            g = zeros_like(x)
        out.append(g)
    return tuple(out)


def _finish(values: tuple, create_graph: bool) -> tuple:
    return tuple(v if create_graph else v.detach() for v in values)


def _call(func, inputs: tuple, fn_name: str) -> tuple[tuple, bool]:
    with enable_grad():
        result = func(*inputs)
    return _as_tuple(result, "outputs of the user-provided function", fn_name)


def _single_element(values: tuple, what: str) -> None:
    if len(values) != 1 or values[0].numel() != 1:
        raise RuntimeError(f"The vector v can only be None if {what} a single Tensor with a "
                           "single element.")


OUTPUT_0 = "Output 0 of the user-provided function"


# ---- products -------------------------------------------------------------------------------

def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T J): the vector-Jacobian product at ``inputs``."""
    inputs, one_in = _as_tuple(inputs, "inputs", "vjp")
    variables = _variables(inputs, create_graph)
    outputs, one_out = _call(func, variables, "vjp")
    if v is None:
        _single_element(outputs, "the user-provided function returns")
        seeds = (outputs[0].new_ones(outputs[0].shape),)
    else:
        seeds, _ = _as_tuple(v, "v", "vjp")
    grads = _grads(outputs, variables, seeds, create_graph, strict, "The output of the "
                   "user-provided function")
    outputs, grads = _finish(outputs, create_graph), _finish(grads, create_graph)
    return (outputs[0] if one_out else outputs), (grads[0] if one_in else grads)


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), J v): the Jacobian-vector product, as the gradient of u -> J^T u."""
    inputs, _ = _as_tuple(inputs, "inputs", "jvp")
    if v is None:
        _single_element(inputs, "the input to the user-provided function is")
        v = (inputs[0].new_ones(inputs[0].shape),)
    tangents, _ = _as_tuple(v, "v", "jvp")
    variables = _variables(inputs, create_graph)
    outputs, one_out = _call(func, variables, "jvp")
    with enable_grad():
        dummies = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
        try:
            transposed = _grads(outputs, variables, dummies, True, strict, "The output of the "
                                "user-provided function")
        except NotImplementedError as exc:  # (a model deployed as a chain of stages)
            raise NotImplementedError(
                "jvp (torch.func.jvp or torch.autograd.functional.jvp) is computed here with "
                "two reverse passes, the second differentiating the first (disthook has no "
                "forward mode), so it needs the first to keep its graph, whatever "
                f"create_graph says; that could not be done: {exc}") from exc
        products = _grads(transposed, dummies, tangents, create_graph, False, "")
    outputs, products = _finish(outputs, create_graph), _finish(products, create_graph)
    return (outputs[0] if one_out else outputs), (products[0] if one_out else products)


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T H) of a function with one scalar output."""
    inputs, one_in = _as_tuple(inputs, "inputs", "vhp")
    if v is None:
        _single_element(inputs, "the input to the user-provided function is")
        v = (inputs[0].new_ones(inputs[0].shape),)
    vectors, _ = _as_tuple(v, "v", "vhp")
    variables = _variables(inputs, create_graph)
    outputs, _ = _call(func, variables, "vhp")
    _scalar_output(outputs, "vhp")
    with enable_grad():
        first = _grads(outputs, variables, (outputs[0].new_ones(()),), True, strict, OUTPUT_0)
        second = _grads(first, variables, vectors, create_graph, strict, "The jacobian of the "
                        "user-provided function")
    output, second = _finish(outputs, create_graph)[0], _finish(second, create_graph)
    return output, (second[0] if one_in else second)


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), H v): equal to ``vhp``, since a Hessian is symmetric."""
    return vhp(func, inputs, v, create_graph, strict)


def _scalar_output(outputs: tuple, fn_name: str) -> None:
    if len(outputs) != 1:
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should "
                           "contain a single element")


# ---- full matrices --------------------------------------------------------------------------

def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for output i and input j, a tensor of shape
    ``outputs[i].shape + inputs[j].shape``, one reverse pass per output element."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". '
                         'Hint: If your function has more outputs than inputs, "forward-mode" '
                         'tends to be more performant. Otherwise, prefer to use '
                         '"reverse-mode".')
    inputs, one_in = _as_tuple(inputs, "inputs", "jacobian")
    variables = _variables(inputs, create_graph)
    outputs, one_out = _call(func, variables, "jacobian")
    rows = []
    for i, out in enumerate(outputs):
        per_input = [[] for _ in inputs]
        flat_seeds = out.new_zeros((out.numel(),))
        for k in range(out.numel()):
            seed = flat_seeds.detach().clone()
            seed[k] = 1.0
            seeds = tuple(seed.reshape(out.shape) if m == i else zeros_like(o)
                          for m, o in enumerate(outputs))
            with enable_grad():
                grads = _grads(outputs, variables, seeds, create_graph, strict,
                               f"Output {i} of the user-provided function")
            for j, g in enumerate(grads):
                per_input[j].append(g)
        blocks = []
        for j, x in enumerate(inputs):
            if per_input[j]:
                block = stack(per_input[j]).reshape(tuple(out.shape) + tuple(x.shape))
            else:
                block = x.new_zeros(tuple(out.shape) + tuple(x.shape))
            blocks.append(block if create_graph else block.detach())
        rows.append(blocks[0] if one_in else tuple(blocks))
    return rows[0] if one_out else tuple(rows)


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of a function with one scalar output: the Jacobian of its gradient."""
    _, one_in = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*xs):
        outputs, _ = _call(func, xs, "hessian")
        _scalar_output(outputs, "hessian")
        grads = _grads(outputs, xs, (outputs[0].new_ones(outputs[0].shape),), True, strict,
                       OUTPUT_0)
        return grads[0] if one_in else grads

    return jacobian(gradient, inputs, create_graph=create_graph, strict=strict)
