"""``gradcheck`` / ``gradgradcheck``: autograd's Jacobians against central differences.

The numerical Jacobian perturbs one input element at a time by ``eps`` both ways; the
analytical one is built row by row from vector-Jacobian products (``autograd.grad`` with a
one-hot ``grad_outputs``). They must agree within ``atol + rtol * |numerical|``.
"""
from __future__ import annotations

import warnings

import numpy as np

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """An analytical Jacobian differs from the numerical one."""


def _as_tuple(x) -> tuple:
    from disthook.tensor import Tensor

    return (x,) if isinstance(x, Tensor) else tuple(x)


def _differentiable_outputs(outputs) -> list:
    from disthook.tensor import Tensor

    return [o for o in _as_tuple(outputs) if isinstance(o, Tensor) and o.requires_grad]


def _numerical_jacobians(func, inputs: tuple, wrt: list, n_out: int, eps: float) -> list:
    """[output][input] -> array (input numel, output numel) by central differences."""
    def evaluate() -> list:
        # with grad mode as it is: func may itself differentiate (gradgradcheck)
        outs = _differentiable_outputs(func(*inputs))
        return [o._data.astype(np.float64).ravel().copy() for o in outs[:n_out]]

    jac = [[None] * len(wrt) for _ in range(n_out)]
    for j, i in enumerate(wrt):
        data = inputs[i]._data
        flat = data.reshape(-1)  # a view: writing it perturbs the input
        cols: list = [[] for _ in range(n_out)]
        for k in range(flat.size):
            orig = flat[k]
            flat[k] = orig - eps
            lo = evaluate()
            flat[k] = orig + eps
            hi = evaluate()
            flat[k] = orig
            for o in range(n_out):
                cols[o].append((hi[o] - lo[o]) / (2 * eps))
        for o in range(n_out):
            jac[o][j] = np.array(cols[o]).reshape(flat.size, -1)
    return jac


def _analytical_jacobians(outputs: list, inputs: tuple, wrt: list) -> list:
    from disthook import autograd
    from disthook.tensor import Tensor

    jac = []
    for out in outputs:
        per_input = [np.zeros((inputs[i]._data.size, out._data.size)) for i in wrt]
        for k in range(out._data.size):
            seed = np.zeros(out._data.size, dtype=out._data.dtype)
            seed[k] = 1
            grads = autograd.grad(out, [inputs[i] for i in wrt],
                                  Tensor._make(seed.reshape(out._data.shape), None, 0),
                                  retain_graph=True, allow_unused=True)
            for j, g in enumerate(grads):
                if g is not None:
                    per_input[j][:, k] = g._data.astype(np.float64).ravel()
        jac.append(per_input)
    return jac


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
              check_batched_grad: bool = False, check_batched_forward_grad: bool = False,
              check_forward_ad: bool = False, check_backward_ad: bool = True,
              fast_mode: bool = False, masked: bool | None = None) -> bool:
    """True when ``func``'s gradients w.r.t. every input that requires grad match finite
    differences; otherwise GradcheckError (or False with ``raise_exception=False``)."""
    from disthook.tensor import Tensor

    if check_forward_ad or check_batched_grad or check_batched_forward_grad:
        raise NotImplementedError("disthook's gradcheck checks backward mode only: "
                                  "check_forward_ad and the batched checks are not supported")
    inputs = _as_tuple(inputs)
    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not wrt:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of the them have requires_grad=True.")
    for i in wrt:
        if inputs[i]._data.dtype != np.float64:
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point "
                "or complex. This check will likely fail if all the inputs are not of double "
                "precision floating point or complex. ", UserWarning, stacklevel=2)
    outputs = _differentiable_outputs(func(*inputs))
    if not check_backward_ad or not outputs:
        return True
    analytical = _analytical_jacobians(outputs, inputs, wrt)
    numerical = _numerical_jacobians(func, inputs, wrt, len(outputs), eps)
    for o in range(len(outputs)):
        for j, i in enumerate(wrt):
            a, n = analytical[o][j], numerical[o][j]
            if not np.allclose(a, n, rtol=rtol, atol=atol):
                if not raise_exception:
                    return False
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i},\n"
                    f"numerical:{n}\nanalytical:{a}\n")
    return True


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
                     raise_exception=raise_exception)
