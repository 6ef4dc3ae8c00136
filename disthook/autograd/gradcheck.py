"""``gradcheck`` / ``gradgradcheck``: autograd's Jacobians against central differences.

The numerical Jacobian perturbs one input element at a time by ``eps`` both ways; the
analytical one is built row by row from vector-Jacobian products (``autograd.grad`` with a
one-hot ``grad_outputs``). They must agree within ``atol + rtol * |numerical|``.

A complex tensor counts as its real and imaginary parts (two real coordinates per element):
its elements are perturbed in each part, and a complex output's rows come from the seeds 1
and 1j, whose gradients are d Re(out)/dx + i d Re(out)/dy and the same of Im(out) (torch's
convention), so a backward that forgets a conjugate fails, as in torch.
"""
from __future__ import annotations

import warnings

import numpy as np

from disthook.autograd.function import Function

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """An analytical Jacobian differs from the numerical one."""


def _as_tuple(x) -> tuple:
    from disthook.tensor import Tensor

    return (x,) if isinstance(x, Tensor) else tuple(x)


def _differentiable_outputs(outputs) -> list:
    from disthook.tensor import Tensor

    return [o for o in _as_tuple(outputs) if isinstance(o, Tensor) and o.requires_grad]


def _coords(data: np.ndarray) -> np.ndarray:
    """The real coordinates of an array, flat: a complex element's real and imaginary parts
    side by side."""
    if data.dtype.kind == "c":
        return np.stack([data.real, data.imag], -1).astype(np.float64).ravel()
    return data.astype(np.float64).ravel()


def _parts(data: np.ndarray) -> tuple:
    """The unit steps along an element's real coordinates: 1, and 1j when complex."""
    return (1, 1j) if data.dtype.kind == "c" else (1,)


def _numerical_jacobians(func, inputs: tuple, wrt: list, n_out: int, eps: float) -> list:
    """[output][input] -> array (input coordinates, output coordinates) by central
    differences."""
    def evaluate() -> list:
        # with grad mode as it is: func may itself differentiate (gradgradcheck)
        outs = _differentiable_outputs(func(*inputs))
        return [_coords(o._data).copy() for o in outs[:n_out]]

    jac = [[None] * len(wrt) for _ in range(n_out)]
    for j, i in enumerate(wrt):
        data = inputs[i]._data
        flat = data.reshape(-1)  # a view: writing it perturbs the input
        cols: list = [[] for _ in range(n_out)]
        for k in range(flat.size):
            for step in _parts(data):
                orig = flat[k]
                flat[k] = orig - eps * step
                lo = evaluate()
                flat[k] = orig + eps * step
                hi = evaluate()
                flat[k] = orig
                for o in range(n_out):
                    cols[o].append((hi[o] - lo[o]) / (2 * eps))
        for o in range(n_out):
            jac[o][j] = np.array(cols[o]).reshape(len(cols[o]), -1)
    return jac


def _analytical_jacobians(outputs: list, inputs: tuple, wrt: list) -> list:
    from disthook import autograd
    from disthook.tensor import Tensor

    jac = []
    for out in outputs:
        parts = _parts(out._data)
        per_input = [np.zeros((_coords(inputs[i]._data).size, out._data.size * len(parts)))
                     for i in wrt]
        column = 0
        for k in range(out._data.size):
            for part in parts:  # the row of Re(out[k]), then of Im(out[k])
                seed = np.zeros(out._data.size, dtype=out._data.dtype)
                seed[k] = part
                grads = autograd.grad(out, [inputs[i] for i in wrt],
                                      Tensor._make(seed.reshape(out._data.shape), None, 0),
                                      retain_graph=True, allow_unused=True)
                for j, g in enumerate(grads):
                    if g is not None:
                        per_input[j][:, column] = _coords(g._data)
                column += 1
        jac.append(per_input)
    return jac


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
              check_batched_grad: bool = False, check_batched_forward_grad: bool = False,
              check_forward_ad: bool = False, check_backward_ad: bool = True,
              fast_mode: bool = False, masked: bool | None = None) -> bool:
    """True when ``func``'s gradients w.r.t. every input that requires grad match finite
    differences; otherwise GradcheckError (or False with ``raise_exception=False``).

    As torch's, it then checks that backward scales with grad_output (zero in, zero out) and,
    with ``check_undefined_grad``, that backward copes with undefined (None) output
    gradients. ``fast_mode`` compares the full Jacobians (the same verdict as torch's
    projections, a message that starts the same). ``check_batched_grad`` and
    ``check_batched_forward_grad`` are accepted and not run: they test vmap's batching rules,
    and disthook has no vmap. ``check_forward_ad`` is not supported (no forward-mode AD).
    """
    if not check_forward_ad and not check_backward_ad:
        raise AssertionError(
            "Expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_forward_ad:
        raise NotImplementedError("disthook's gradcheck checks backward mode only: "
                                  "check_forward_ad is not supported")
    try:
        return _gradcheck(func, _as_tuple(inputs), eps, atol, rtol, check_undefined_grad)
    except GradcheckError:
        if raise_exception:
            raise
        return False


def _gradcheck(func, inputs: tuple, eps: float, atol: float, rtol: float,
               check_undefined_grad: bool) -> bool:
    from disthook.tensor import Tensor

    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not wrt:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of the them have requires_grad=True.")
    for i in wrt:
        if inputs[i]._data.dtype not in (np.float64, np.complex128):
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point "
                "or complex. This check will likely fail if all the inputs are not of double "
                "precision floating point or complex. ", UserWarning, stacklevel=3)
    outputs = _differentiable_outputs(func(*inputs))
    if not outputs:
        return True
    analytical = _analytical_jacobians(outputs, inputs, wrt)
    numerical = _numerical_jacobians(func, inputs, wrt, len(outputs), eps)
    for o in range(len(outputs)):
        for j, i in enumerate(wrt):
            a, n = analytical[o][j], numerical[o][j]
            if not np.allclose(a, n, rtol=rtol, atol=atol):
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i},\n"
                    f"numerical:{n}\nanalytical:{a}\n")
    diff_inputs = [inputs[i] for i in wrt]
    _check_backward_scales_with_grad_output(outputs, diff_inputs)
    if check_undefined_grad:
        _check_undefined_output_grads(func, inputs, diff_inputs)
    return True


def _zero_grads(outputs) -> list:
    from disthook.tensor import zeros_like

    return [zeros_like(o) for o in outputs]


def _check_backward_scales_with_grad_output(outputs: list, diff_inputs: list) -> None:
    """Zero output gradients must give zero input gradients."""
    from disthook import autograd

    grads = autograd.grad(outputs, diff_inputs, _zero_grads(outputs), allow_unused=True)
    for g, t in zip(grads, diff_inputs):
        if g is None:
            continue
        if not (g._data == 0).all():
            raise GradcheckError("backward not multiplied by grad_output")
        if g.dtype != t.dtype:
            raise GradcheckError("grad is incorrect type")


class UndefinedGrad(Function):
    """Identity whose backward gives no gradient: what follows it sees an undefined one."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return None


def _check_undefined_output_grads(func, inputs: tuple, diff_inputs: list) -> None:
    """Backward must work, and give nothing or zeros, when every output gradient is
    undefined; with several outputs, also when any one of them is."""
    from disthook import autograd

    def warn_bc_breaking():
        warnings.warn(
            "Backwards compatibility: New undefined gradient support checking feature is "
            "enabled by default, but it may break existing callers of this function. If this "
            'is true for you, you can call this function with "check_undefined_grad=False" '
            "to disable the feature", UserWarning, stacklevel=4)

    def check(outputs: list) -> None:
        try:
            grads = autograd.grad(outputs, diff_inputs, _zero_grads(outputs),
                                  allow_unused=True)
        except RuntimeError as error:
            warn_bc_breaking()
            raise GradcheckError(
                "Expected backward function to handle undefined output grads. Please look at "
                '"Notes about undefined output gradients" in "tools/autograd/derivatives.yaml"'
            ) from error
        if any(g is not None and not (g._data == 0).all() for g in grads):
            warn_bc_breaking()
            raise GradcheckError(
                "Expected all input grads to be undefined or zero when all output grads are "
                'undefined or zero. Please look at "Notes about undefined output gradients" '
                'in "tools/autograd/derivatives.yaml"')

    outputs = _differentiable_outputs(func(*inputs))
    check([UndefinedGrad.apply(o) for o in outputs])
    if len(outputs) > 1:
        for k in range(len(outputs)):
            again = _differentiable_outputs(func(*inputs))
            check([UndefinedGrad.apply(o) if i == k else o for i, o in enumerate(again)])


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, gen_non_contig_grad_outputs: bool = False,
                  raise_exception: bool = True, nondet_tol: float = 0.0,
                  check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
                  check_batched_grad: bool = False, check_fwd_over_rev: bool = False,
                  check_rev_over_rev: bool = True, fast_mode: bool = False,
                  masked: bool = False) -> bool:
    """gradcheck of the first derivative: the vector-Jacobian product of ``func`` (with
    ``grad_outputs``, random float64 ones by default) w.r.t. inputs and grad_outputs."""
    from disthook import autograd
    from disthook.random import gen
    from disthook.tensor import Tensor

    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        outputs = _differentiable_outputs(func(*inputs))
        grad_outputs = tuple(
            Tensor._make(gen().standard_normal(o._data.shape).astype(o._data.dtype), None, 0)
            .requires_grad_() for o in outputs)
    grad_outputs = _as_tuple(grad_outputs)
    n_in = len(inputs)
    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]

    def first_derivative(*args):
        ins, gos = args[:n_in], args[n_in:]
        outs = _differentiable_outputs(func(*ins))
        grads = autograd.grad(outs, [ins[i] for i in wrt], gos, create_graph=True,
                              allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, check_undefined_grad=check_undefined_grad)
