"""L-BFGS: a quasi-Newton method that builds its direction from the last ``history_size``
pairs of parameter and gradient changes (the two-loop recursion), calling the closure again
at each inner iteration; torch's algorithm, its stopping tests and its state, one parameter
group, fixed steps (``line_search_fn=None``) or the strong-Wolfe line search."""
from __future__ import annotations

from disthook import view_as_complex
from disthook.autograd import grad_mode
from disthook.optim.lbfgs_search import strong_wolfe
from disthook.optim.optimizer import Optimizer, real_pairs
from disthook.tensor import Tensor, cat


class LBFGS(Optimizer):
    # its direction is over every parameter at once and its line search calls the closure:
    # a deployed model's parameters are read and written here, through their storage
    _steps_here = True

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                    "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
                    "history_size": history_size, "line_search_fn": line_search_fn}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")

    # ---- the parameters as one flat vector -----------------------------------------------------
    def _params(self) -> list:
        return self.param_groups[0]["params"]

    # a complex parameter counts as its real and imaginary parts (real_pairs), as in torch
    def _flat_grad(self) -> Tensor:
        return cat([real_pairs(p, p.grad if p.grad is not None else p.new_zeros(p.shape))[0]
                    .reshape(-1) for p in self._params()])

    def _move(self, step_size: float, direction: Tensor) -> None:
        offset = 0
        for p in self._params():
            (pairs,) = real_pairs(p, p)
            n = pairs.numel()
            step = direction[offset:offset + n].reshape(pairs.shape)
            if pairs is p:
                p.add_(step, alpha=step_size)
            else:  # the pairs moved, then written through the parameter itself (a deployed
                # parameter's view is a copy of its value)
                p.copy_(view_as_complex(pairs.add(step, alpha=step_size)))
            offset += n

    def _values(self) -> list:
        return [p.detach().clone() for p in self._params()]

    def _restore(self, values: list) -> None:
        for p, value in zip(self._params(), values):
            p.copy_(value)

    def _loss_and_grad_at(self, closure, values: list, step_size: float, direction: Tensor):
        """The loss and flat gradient at ``values + step_size * direction`` (then back)."""
        self._move(step_size, direction)
        with grad_mode.enable_grad():
            result = closure()
        loss = _as_float(result)
        flat_grad = self._flat_grad()
        self._restore(values)
        return loss, flat_grad

    # ---- the step ---------------------------------------------------------------------------
    def step(self, closure):
        """Up to ``max_iter`` iterations; returns the loss the closure gave first."""
        if closure is None:
            raise RuntimeError("LBFGS requires a closure: a function that clears the "
                               "gradients, computes the loss, calls backward and returns it")
        with grad_mode.no_grad():
            return self._iterate(closure)

    def _iterate(self, closure):
        group = self.param_groups[0]
        lr, history_size = group["lr"], group["history_size"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state[self._params()[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with grad_mode.enable_grad():
            first_loss = closure()
        loss = _as_float(first_loss)
        evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if flat_grad.abs().max().item() <= tolerance_grad:
            return first_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_flat_grad = state.get("H_diag"), state.get("prev_flat_grad")
        alphas = state.get("al")
        prev_loss = state.get("prev_loss")
        n_iter = 0
        while n_iter < group["max_iter"]:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:  # the first direction: steepest descent
                d = -flat_grad
                old_dirs, old_stps, ro, h_diag = [], [], [], 1
            else:  # remember the last change if it keeps the curvature positive
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys.item() > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / y.dot(y)
                d, alphas = _two_loop(-flat_grad, old_dirs, old_stps, ro, h_diag, history_size)
            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.clone()
            else:
                prev_flat_grad.copy_(flat_grad)
            prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, (1.0 / flat_grad.abs().sum()).item()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d).item()
            if gtd > -tolerance_change:  # not a descent direction any more
                break
            spent = 0
            if group["line_search_fn"] not in (None, "strong_wolfe"):
                raise RuntimeError("only 'strong_wolfe' is supported")
            if group["line_search_fn"] == "strong_wolfe":
                values = self._values()
                loss, flat_grad, t, spent = strong_wolfe(
                    lambda step, values=values, d=d: self._loss_and_grad_at(closure, values,
                                                                            step, d),
                    t, d, loss, flat_grad, gtd, group["max_eval"] - evals)
                self._move(t, d)
            else:
                self._move(t, d)
                if n_iter != group["max_iter"]:
                    with grad_mode.enable_grad():
                        result = closure()
                    loss = _as_float(result)
                    flat_grad = self._flat_grad()
                    spent = 1
            evals += spent
            state["func_evals"] += spent
            if (n_iter == group["max_iter"] or evals >= group["max_eval"]
                    or flat_grad.abs().max().item() <= tolerance_grad
                    or (d * t).abs().max().item() <= tolerance_change
                    or abs(loss - prev_loss) < tolerance_change):
                break
        state.update({"d": d, "t": t, "old_dirs": old_dirs, "old_stps": old_stps, "ro": ro,
                      "al": alphas,
                      "H_diag": h_diag, "prev_flat_grad": prev_flat_grad,
                      "prev_loss": prev_loss})
        return first_loss


def _as_float(loss) -> float:
    """The closure's loss as a Python float (without the warning of float() on a tensor that
    requires grad, which torch gives once per process)."""
    return loss.item() if isinstance(loss, Tensor) else float(loss)


def _two_loop(q: Tensor, dirs: list, steps: list, ro: list, h_diag, history_size: int):
    """The L-BFGS direction: ``q`` (the negative gradient) times the inverse-Hessian estimate
    that the stored pairs define, by the two-loop recursion; and the first loop's
    coefficients (``history_size`` slots, kept in the state as torch keeps them)."""
    alphas = [None] * history_size
    q = q.clone()
    for i in range(len(dirs) - 1, -1, -1):
        alphas[i] = steps[i].dot(q) * ro[i]
        q.add_(dirs[i], alpha=-alphas[i].item())
    r = q * h_diag
    for i in range(len(dirs)):
        beta = dirs[i].dot(r) * ro[i]
        r.add_(steps[i], alpha=(alphas[i] - beta).item())
    return r, alphas
