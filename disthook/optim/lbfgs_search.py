"""The strong-Wolfe line search of L-BFGS (Nocedal and Wright, algorithms 3.5 and 3.6): grow
the step until it brackets an acceptable one, then shrink the bracket by cubic
interpolation, with the constants and safeguards torch's LBFGS uses, so that the steps it
takes are torch's."""
from __future__ import annotations

import math

import numpy as np

SUFFICIENT_DECREASE = 1e-4  # c1: the loss must drop by this fraction of the slope
CURVATURE = 0.9  # c2: the slope must flatten to this fraction of the first one
TOLERANCE_CHANGE = 1e-9
MAX_EVALS = 25


def cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, kept in
    ``bounds`` (default: between x1 and x2); the middle of the bounds if the cubic has none."""
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 ** 2 - g1 * g2
    if disc < 0:
        return (low + high) / 2.0
    d2 = math.sqrt(disc)
    if x1 <= x2:
        point = x2 - (x2 - x1) * _divide(g2 + d2 - d1, g2 - g1 + 2 * d2)
    else:
        point = x1 - (x1 - x2) * _divide(g1 + d2 - d1, g1 - g2 + 2 * d2)
    return min(max(point, low), high)  # (a NaN point stays NaN, as torch's does)


def _divide(a: float, b: float) -> float:
    """``a / b`` as torch divides these slopes (0-d tensors): a zero ``b`` gives an infinity
    (then clamped to the bounds) or NaN, not ZeroDivisionError."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


class _End:
    """One end of the bracket: step, loss, gradient and slope along the direction."""

    __slots__ = ("f", "g", "gtd", "t")

    def __init__(self, t, f, g, gtd) -> None:
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


def strong_wolfe(evaluate, t: float, d, f: float, g, gtd: float, max_evals: int = MAX_EVALS):
    """(loss, flat gradient, step, evaluations) at a step along ``d`` meeting the strong
    Wolfe conditions; ``evaluate(step)`` gives (loss, flat gradient) there. ``max_evals``
    bounds the tries after the first evaluation (torch's ``max_ls``; its L-BFGS passes what
    is left of ``max_eval``)."""
    d_norm = d.abs().max().item()
    start = _End(0.0, f, g.clone(), gtd)
    f_new, g_new = evaluate(t)
    evals, tries = 1, 0
    gtd_new = g_new.dot(d).item()
    prev = start
    bracket = None
    # phase 1: grow the step until an acceptable one is inside [prev.t, t]
    while tries < max_evals:
        here = _End(t, f_new, g_new.clone(), gtd_new)
        if f_new > f + SUFFICIENT_DECREASE * t * gtd or (tries > 1 and f_new >= prev.f):
            bracket = [prev, here]
            break
        if abs(gtd_new) <= -CURVATURE * gtd:
            return f_new, g_new, t, evals
        if gtd_new >= 0:
            bracket = [prev, here]
            break
        low_bound, high_bound = t + 0.01 * (t - prev.t), t * 10
        t = cubic_minimum(prev.t, prev.f, prev.gtd, t, f_new, gtd_new, (low_bound, high_bound))
        prev = here
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = g_new.dot(d).item()
        tries += 1
    if bracket is None:  # out of evaluations while still growing
        bracket = [start, _End(t, f_new, g_new, gtd_new)]
        return _best(bracket).f, _best(bracket).g, _best(bracket).t, evals
    # phase 2: shrink the bracket around an acceptable step
    stuck = False
    while tries < max_evals:
        lo, hi = _order(bracket)
        if abs(bracket[1].t - bracket[0].t) * d_norm < TOLERANCE_CHANGE:
            break
        t = cubic_minimum(bracket[0].t, bracket[0].f, bracket[0].gtd,
                          bracket[1].t, bracket[1].f, bracket[1].gtd)
        top, bottom = max(bracket[0].t, bracket[1].t), min(bracket[0].t, bracket[1].t)
        margin = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < margin:  # too close to an end: move off it, or wait
            if stuck or t >= top or t <= bottom:
                t = top - margin if abs(t - top) < abs(t - bottom) else bottom + margin
                stuck = False
            else:
                stuck = True
        else:
            stuck = False
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = g_new.dot(d).item()
        tries += 1
        here = _End(t, f_new, g_new.clone(), gtd_new)
        if f_new > f + SUFFICIENT_DECREASE * t * gtd or f_new >= bracket[lo].f:
            bracket[hi] = here
            continue
        if abs(gtd_new) <= -CURVATURE * gtd:
            bracket[lo] = here
            break
        if gtd_new * (bracket[hi].t - bracket[lo].t) >= 0:
            bracket[hi] = bracket[lo]
        bracket[lo] = here
    best = bracket[_order(bracket)[0]]
    return best.f, best.g, best.t, evals


def _order(bracket) -> tuple[int, int]:
    """(index of the end with the lower loss, the other) — the first on a tie."""
    return (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)


def _best(bracket):
    return bracket[_order(bracket)[0]]
