"""``torch.func``: function transforms on disthook's reverse-mode engine.

``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``, ``vmap``,
``functional_call`` and ``stack_module_state`` take and give what torch's do, and compose
(``grad(grad(f))``, ``jacrev(jacrev(f))``, ``vmap(grad(f))``). Two differences in how, not in what: there is no
forward mode, so ``jvp`` and ``jacfwd`` are computed with reverse passes (the same values); and
``vmap`` calls the function once per index of the mapped dimension and stacks the results (the
same values as torch's batched rules, at the cost of a Python loop; random ops draw per
sample, as torch's ``randomness="different"``).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from disthook.autograd import _vmap_functions
from disthook.autograd import functional as _F
from disthook.autograd import grad as _autograd_grad
from disthook.autograd.function import Function
from disthook.autograd.grad_mode import enable_grad, is_grad_enabled
from disthook.autograd.graph import AccumulateGrad, walk
from disthook.tensor import Tensor, stack, tensor

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp",
           "stack_module_state", "vjp", "vmap"]


# ---- pytrees (tuples, lists, dicts of tensors) -------------------------------------------------

def _leaves(tree) -> list:
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    if isinstance(tree, dict):
        return [leaf for item in tree.values() for leaf in _leaves(item)]
    return [tree]


def _rebuild(tree, leaves):
    """``tree`` with its leaves replaced, in order, from the iterator ``leaves``."""
    if isinstance(tree, (tuple, list)):
        items = [_rebuild(item, leaves) for item in tree]
        if isinstance(tree, tuple) and hasattr(tree, "_fields"):
            return type(tree)(*items)
        return type(tree)(items)
    if isinstance(tree, dict):
        return type(tree)((k, _rebuild(v, leaves)) for k, v in tree.items())
    return next(leaves)


def _map(fn, tree):
    return _rebuild(tree, iter([fn(leaf) for leaf in _leaves(tree)]))


# ---- grad ---------------------------------------------------------------------------------------

def _argnums(argnums, nargs: int, fn_name: str) -> tuple[tuple, bool]:
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    if not nums or not all(isinstance(n, int) for n in nums):
        raise RuntimeError(f"{fn_name}: argnums must be int or Tuple[int, ...], got: {argnums}")
    for n in nums:
        if not -nargs <= n < nargs:
            raise RuntimeError(f"Got argnums={n}, but only {nargs} positional inputs")
    return tuple(n % nargs for n in nums), single


def _nested(leaves) -> bool:
    """Whether an outer autograd tracks a transform's inputs (an outer transform's, or the
    caller's leaves): never under the caller's no_grad, where torch's results carry no graph
    (the transform still differentiates inside)."""
    return is_grad_enabled() and any(isinstance(x, Tensor) and x.requires_grad for x in leaves)


def _variable(x, nested: bool):
    """What to differentiate with respect to: a view when an outer autograd tracks ``x``
    (``nested``: so results stay differentiable), else a fresh leaf."""
    if not isinstance(x, Tensor):
        return x
    return x.view_as(x) if nested and x.requires_grad else x.detach().requires_grad_(True)


def _tracked_outside(outputs, wrt) -> bool:
    """Whether ``outputs`` depend on a leaf that requires grad other than the transform's own
    variables ``wrt`` (a closure's weights, an argument not differentiated): torch's outer
    autograd then tracks what the transform gives, so its results keep a graph to that leaf."""
    if _checking.off:
        return False
    own = {id(x) for x in wrt if isinstance(x, Tensor)}
    starts = [o.grad_fn for o in outputs if isinstance(o, Tensor) and o.grad_fn is not None]
    for node in walk(starts):
        if type(node) is AccumulateGrad:
            if id(node.variable) not in own:
                return True
        elif getattr(node, "weights_require_grad", None) is not None \
                and node.weights_require_grad():
            return True  # a deployed model's call, whose weights on its workers are leaves
    return False


class _Refused(Function):
    """A transform's result whose graph could not be kept (through a model deployed as a
    chain of stages): the values, tracked as torch's are, and the error that said why if a
    backward reaches them (a penalty on them), rather than a silent zero gradient."""

    @staticmethod
    def forward(ctx, value, anchor, why):
        ctx.why = why
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError(ctx.why)


def _kept_or_refused(compute):
    """``compute(True)``, the transform keeping its results' graph; where that graph cannot
    be kept (a deployed chain's), ``compute(False)``'s values, each refusing a backward."""
    try:
        return compute(True)
    except NotImplementedError as exc:
        why = str(exc)
    _checking.off = True
    try:
        plain = compute(False)
    finally:
        _checking.off = False
    anchor = tensor(0.0).requires_grad_(True)
    return _map(lambda t: _Refused.apply(t, anchor, why) if isinstance(t, Tensor) else t,
                plain)


class _Checking(threading.local):
    off = False  # while _kept_or_refused computes the values alone


_checking = _Checking()


class _TrackedOutside(Exception):  # (a signal inside jacrev and jvp, never raised out)
    """The function gave outputs that an outer autograd tracks (see _tracked_outside)."""


def _split_aux(result, has_aux: bool, fn_name: str):
    if not has_aux:
        return result, None
    if not (isinstance(result, tuple) and len(result) == 2):
        raise RuntimeError(f"{fn_name}(f, ...)(*args): output of function f should be a tuple: "
                           "(output, aux) if has_aux is True")
    return result


def _shown_aux(aux, nested: bool):
    """What a transform hands back as ``aux``: as computed when an outer transform tracks the
    inputs, else plain tensors without a graph (torch's, which unwraps them)."""
    return aux if nested else _map(lambda t: t.detach() if isinstance(t, Tensor) else t, aux)


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``f -> (x -> (df/dx, f(x)))`` for ``f`` giving one scalar tensor (and aux)."""
    def wrapper(*args, **kwargs):
        nums, single = _argnums(argnums, len(args), "grad_and_value")
        args = list(args)
        tracks = is_grad_enabled()  # (the caller's mode: an outer no_grad tracks nothing)
        nested = _nested(leaf for n in nums for leaf in _leaves(args[n]))
        for n in nums:
            args[n] = _map(lambda x: _variable(x, nested), args[n])
        with enable_grad():
            output, aux = _split_aux(func(*args, **kwargs), has_aux, "grad_and_value")
        if not isinstance(output, Tensor):
            raise RuntimeError(  # noqa: TRY004  # torch's type and text
                f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got "
                f"{type(output)}")
        if output.numel() != 1:
            raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a scalar "
                               f"Tensor, got tensor with {output.dim()} dims. Maybe you wanted "
                               "to use the vjp or jacrev APIs instead?")
        wrt = [leaf for n in nums for leaf in _leaves(args[n])]
        outside = tracks and not nested and _tracked_outside([output], wrt)
        nested = nested or outside
        if not output.requires_grad:
            grads = [None] * len(wrt)
        elif outside:  # (a deployed chain's graph cannot be kept: see _kept_or_refused)
            grads = _kept_or_refused(lambda deep: list(_autograd_grad(
                output, wrt, retain_graph=True, create_graph=deep, allow_unused=True)))
        else:
            grads = _autograd_grad(output, wrt, retain_graph=nested, create_graph=nested,
                                   allow_unused=True)
        grads = iter([(g if g is not None else x.new_zeros(x.shape)) if nested else
                      (g.detach() if g is not None else x.new_zeros(x.shape))
                      for g, x in zip(grads, wrt)])
        per_arg = tuple(_rebuild(args[n], grads) for n in nums)
        result = per_arg[0] if single else per_arg
        value = output if nested else output.detach()
        return (result, (value, _shown_aux(aux, nested))) if has_aux else (result, value)

    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """``f -> (x -> df/dx)`` for ``f`` giving one scalar tensor; ``(grad, aux)`` with aux."""
    both = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        result, value = both(*args, **kwargs)
        return (result, value[1]) if has_aux else result

    return wrapper


# ---- vjp, jvp, Jacobians --------------------------------------------------------------------

def vjp(func, *primals, has_aux: bool = False):
    """``(func(*primals), vjp_fn[, aux])``; ``vjp_fn(cotangents)`` gives one gradient per
    primal, as a tuple."""
    tracks = is_grad_enabled()  # (the caller's mode: an outer no_grad tracks nothing)
    nested = _nested(_leaves(primals))
    variables = tuple(_map(lambda x: _variable(x, nested), p) for p in primals)
    with enable_grad():
        output, aux = _split_aux(func(*variables), has_aux, "vjp")
    outs = _leaves(output)
    outside = not nested and _tracked_outside(outs, _leaves(variables))
    kept = nested or outside  # (vjp_fn's results are tracked as its caller's mode says)

    def vjp_fn(cotangents, *, retain_graph=True, create_graph=None):
        seeds = _leaves(cotangents)
        if len(seeds) != len(outs):
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               "pytree structure of outputs to the function")
        deep = kept and is_grad_enabled() if create_graph is None else create_graph
        wrt = _leaves(variables)
        live = [(o, s) for o, s in zip(outs, seeds) if o.requires_grad]

        def compute(deep, retain=retain_graph):
            return list(_autograd_grad([o for o, _ in live], wrt, [s for _, s in live],
                                       retain_graph=retain, create_graph=deep,
                                       allow_unused=True))

        if not live:
            grads = [None] * len(wrt)
        elif outside and deep and create_graph is None:  # (see _kept_or_refused)
            grads = _kept_or_refused(lambda deep: compute(deep, True))
        else:
            grads = compute(deep)
        grads = iter([(g if deep else g.detach()) if g is not None else x.new_zeros(x.shape)
                      for g, x in zip(grads, wrt)])
        return tuple(_rebuild(p, grads) for p in variables)

    shown = output if kept and tracks else _map(lambda t: t.detach(), output)
    return (shown, vjp_fn, _shown_aux(aux, kept and tracks)) if has_aux else (shown, vjp_fn)


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """``(func(*primals), J tangents)``, computed with two reverse passes."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError(  # noqa: TRY004  # torch's type and text
            "jvp(f, primals, tangents): Expected primals and tangents to be tuples. E.g. it "
            "should be valid to call f(*primals).")
    flat_primals, flat_tangents = _leaves(primals), _leaves(tangents)
    if len(flat_primals) != len(flat_tangents):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have "
                           "the same python structure.")
    aux_box, out_box = [], []
    tracks = is_grad_enabled()  # (the caller's mode: an outer no_grad tracks nothing)
    nested = _nested(flat_primals)

    def plain(*leaves):
        it = iter(leaves)
        out, aux = _split_aux(func(*(_rebuild(p, it) for p in primals)), has_aux, "jvp")
        if tracks and not nested and _tracked_outside(_leaves(out), leaves):
            raise _TrackedOutside  # (computed again, keeping the graph)
        aux_box.append(aux)
        out_box.append(out)
        return tuple(_leaves(out))

    try:
        outputs, products = _F.jvp(plain, tuple(flat_primals), tuple(flat_tangents),
                                   create_graph=nested, strict=strict)
    except _TrackedOutside:
        nested = True  # a closure's weight requires grad: the product keeps its graph
        outputs, products = _kept_or_refused(lambda deep: _F.jvp(
            plain, tuple(flat_primals), tuple(flat_tangents), create_graph=deep,
            strict=strict))
    output = _rebuild(out_box[0], iter(outputs))
    product = _rebuild(out_box[0], iter(products))
    return (output, product, _shown_aux(aux_box[0], nested)) if has_aux else (output, product)


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """``f -> (x -> J)``: for each output, a tensor of shape output.shape + input.shape (per
    argnum a tuple when argnums is a tuple). Inputs and outputs may be pytrees (a dict of
    parameters, as in the neural tangent kernel recipe): the Jacobian is the output's tree
    with each leaf replaced by the inputs' tree of blocks."""
    def wrapper(*args):
        nums, single = _argnums(argnums, len(args), "jacrev")
        chosen = tuple(args[n] for n in nums)
        wrt = _leaves(chosen)
        for leaf in wrt:
            if not isinstance(leaf, Tensor):
                raise ValueError(  # noqa: TRY004  # torch's type and text
                    f"Thing passed to transform API must be Tensor, got {type(leaf)}")
        aux_box, out_box = [], []
        tracks = is_grad_enabled()  # (the caller's mode: an outer no_grad tracks nothing)
        nested = _nested(wrt)

        def of_leaves(*leaves):
            full, it = list(args), iter(leaves)
            for n, arg in zip(nums, chosen):
                full[n] = _rebuild(arg, it)
            out, aux = _split_aux(func(*full), has_aux, "jacrev")
            if tracks and not nested and _tracked_outside(_leaves(out), leaves):
                raise _TrackedOutside  # (before any row: computed again, keeping the graph)
            aux_box.append(aux)
            out_box.append(out)
            return tuple(_leaves(out))

        try:
            rows = _F.jacobian(of_leaves, tuple(wrt), create_graph=nested)
        except _TrackedOutside:
            nested = True  # a closure's weight requires grad: the Jacobian keeps its graph
            rows = _kept_or_refused(lambda deep: _F.jacobian(of_leaves, tuple(wrt),
                                                             create_graph=deep))
        per_output = []
        for row in rows:
            blocks = iter(row)
            per_arg = tuple(_rebuild(arg, blocks) for arg in chosen)
            per_output.append(per_arg[0] if single else per_arg)
        jac = _rebuild(out_box[0], iter(per_output))
        return (jac, _shown_aux(aux_box[0], nested)) if has_aux else jac

    return wrapper


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """The same Jacobian as ``jacrev`` (disthook has no forward mode)."""
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """``f -> (x -> d2f/dx2)``: the Jacobian of the Jacobian."""
    return jacfwd(jacrev(func, argnums), argnums)


# ---- vmap ---------------------------------------------------------------------------------------

def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """``func`` over a batch: called per index of each mapped input's ``in_dims`` dimension,
    its outputs stacked along ``out_dims``."""
    def wrapper(*args, **kwargs):
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap(f, in_dims={in_dims}, ...)(<inputs>): in_dims is not "
                             f"compatible with the structure of `inputs`. in_dims has "
                             f"{len(dims)} entries but inputs has {len(args)}.")
        mapped = [(leaf, d) for arg, d in zip(args, dims) if d is not None
                  for leaf in _leaves(arg) if isinstance(leaf, Tensor)]
        if not mapped:
            raise ValueError(f"vmap(f, in_dims={in_dims}, ...)(<inputs>): at least one input "
                             "must be a Tensor mapped over (in_dims not None)")
        sizes = sorted({leaf.shape[d] for leaf, d in mapped})
        if len(sizes) != 1:
            raise ValueError(f"vmap(f, in_dims={in_dims}, ...)(<inputs>): Expected all tensors "
                             f"to have the same size in the mapped dimension, got sizes "
                             f"{sizes} for the mapped dimension")
        results = []
        run = _vmap_functions.mapping(sizes[0], randomness)
        for i in range(sizes[0]):
            slices = {}  # (a user's autograd.Function with a vmap of its own looks here)

            def sliced_at(t, d, i=i, slices=slices):
                if not isinstance(t, Tensor):
                    return t
                s = t.select(d, i)
                slices[id(s)] = (t, d % t.dim())
                return s

            sliced = [arg if d is None else _map(lambda t, d=d: sliced_at(t, d), arg)
                      for arg, d in zip(args, dims)]
            with run.at(i, slices):
                results.append(func(*sliced, **kwargs))
        columns = list(zip(*[_leaves(r) for r in results]))
        outs = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(columns)
        stacked = [stack([c if isinstance(c, Tensor) else tensor(c) for c in col], dim=d)
                   for col, d in zip(columns, outs)]
        return _rebuild(results[0], iter(stacked))

    return wrapper


# ---- functional_call ----------------------------------------------------------------------------

@contextmanager
def _swapped(module, tensors: dict, strict: bool):
    """Each ``name -> tensor`` put in place of the module's parameter or buffer of that name
    (the module's own objects come back afterwards, whatever happens)."""
    known = dict(module.named_parameters(remove_duplicate=False))
    known.update(module.named_buffers(remove_duplicate=False))
    unexpected = [k for k in tensors if k not in known]
    missing = [k for k in known if k not in tensors]
    if strict and (unexpected or missing):
        parts = []
        if unexpected:
            parts.append("Unexpected key(s): " + ", ".join(f"'{k}'" for k in unexpected) + ".")
        if missing:
            parts.append("Missing key(s): " + ", ".join(f"'{k}'" for k in missing) + ".")
        raise RuntimeError("Error(s) in reparametrizing for "
                           f"{type(module).__name__}:\n\t" + "\n\t".join(parts))
    saved = []
    try:
        for name, value in tensors.items():
            owner_path, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            table = owner._parameters if leaf in owner._parameters else (
                owner._buffers if leaf in owner._buffers else None)
            if table is None:
                raise AttributeError(f"{type(owner).__name__} has no parameter or buffer "
                                     f"named '{leaf}' (functional_call key '{name}')")
            saved.append((owner, table, leaf, table[leaf]))
            table[leaf] = value
            _tell_placement(owner, leaf, True)
        yield
    finally:
        for owner, table, leaf, original in reversed(saved):
            table[leaf] = original
            _tell_placement(owner, leaf, False)


def _tell_placement(owner, leaf: str, swapped: bool) -> None:
    """A deployed module hears of the swap (its forward then runs here, with the tensor
    given: its worker's copy has only its own)."""
    from disthook.nn.modules.module import placement_of

    placement = placement_of(owner)
    if placement is not None:
        placement.swapped(owner, leaf, swapped)


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):
    """``module(*args, **kwargs)`` with the given tensors in place of its parameters and
    buffers (by their names in ``named_parameters`` / ``named_buffers``)."""
    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, (tuple, list)):
        merged = {}
        for d in dicts:
            clash = set(merged) & set(d)
            if clash:
                raise ValueError(f"{sorted(clash)} appeared in multiple dictionaries; behavior "
                                 "of functional call is ambiguous")
            merged.update(d)
        dicts = merged
    args = () if args is None else (args if isinstance(args, tuple) else (args,))
    with _swapped(module, dict(dicts), strict):
        return module(*args, **(kwargs or {}))


# ---- model ensembling -----------------------------------------------------------------------

def stack_module_state(models) -> tuple[dict, dict]:
    """The parameters and buffers of ``models`` (modules of one class, in one mode), each
    name's tensors stacked along a new first dimension: new leaves (parameters keep requiring
    grad, unrelated to the models' own), for ``vmap`` over ``functional_call`` of one model."""
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or not any(m.training for m in models)):
        raise RuntimeError(
            "stack_module_state: Expected all models to have the same training/eval mode.")
    if any(type(m) is not type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    return (_stacked([dict(m.named_parameters()) for m in models]),
            _stacked([dict(m.named_buffers()) for m in models]))


def _stacked(tables: list[dict]) -> dict:
    """Per name of the first table, its tensors in every table stacked: a fresh leaf that
    requires grad when they all do (mixed is refused, as by torch)."""
    out = {}
    for name in tables[0]:
        tensors = [table[name] for table in tables]
        flags = {t.requires_grad for t in tensors}
        if len(flags) > 1:
            raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
        value = stack(tensors).detach()
        out[name] = value.requires_grad_() if flags == {True} else value
    return out
