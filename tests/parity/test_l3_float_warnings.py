"""numpy's float warnings ("divide by zero", "invalid value", "overflow" encountered) that
torch never gives (L3). Two ways they reached a program: a reduction computed by numpy's
Python wrappers (ndarray.sum/mean, np.cumsum, np.sinc ...) warned from numpy's module, which
the import-time filter for disthook's own modules does not cover, so ``x.sum()`` over
``[inf, -inf]`` printed a warning; and a program's own filter (``simplefilter("error")``, a
test suite's ``filterwarnings = error``) put in front of that one turned every op's inf or nan
(``log(0)``, ``1 / 0``, their gradients) into an exception. The values stay torch's; checking
them found lgamma raising at -inf and nan, digamma's sign at -0, and std_mean's mean alone
giving a nan gradient on a row holding inf (a zero gradient for the unused std times inf)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook
from disthook._settings import quiet_float_warnings

torch = pytest.importorskip("torch")

INF = float("inf")
ROWS = [[INF, -INF, 1.0], [float("nan"), 2.0, 0.0], [0.0, -0.0, -1.0]]

# each: lib, x -> a tensor, on ROWS (inf - inf, 0 * inf, log(0), 1 / 0 ... in forward or backward)
PROGRAMS = {
    "sum": lambda L, x: x.sum(),
    "sum_dim": lambda L, x: x.sum(1),
    "mean": lambda L, x: x.mean(),
    "mean_dim": lambda L, x: x.mean(0),
    "var": lambda L, x: x.var(1),
    "std_mean": lambda L, x: L.std_mean(x, 1)[1],
    "prod": lambda L, x: x.prod(1),
    "cumsum": lambda L, x: x.cumsum(1),
    "cumprod": lambda L, x: x.cumprod(1),
    "nansum": lambda L, x: x.nansum(),
    "layer_norm": lambda L, x: L.nn.functional.layer_norm(x, (3,)),
    "sinc": lambda L, x: x.sinc(),
    "log": lambda L, x: x.log(),
    "div": lambda L, x: x / x.flip(1),
    "mul": lambda L, x: x * x.flip(0),
    "pow": lambda L, x: x ** -1.5,
    "special.log_ndtr": lambda L, x: L.special.log_ndtr(x),
    "special.xlogy": lambda L, x: L.special.xlogy(x, x.flip(1)),
    "special.i1e": lambda L, x: L.special.i1e(x),
    "special.erfcx": lambda L, x: L.special.erfcx(x),
    "lgamma": lambda L, x: x.lgamma(),
    "digamma": lambda L, x: x.digamma(),
    "bce_with_logits": lambda L, x: L.nn.functional.binary_cross_entropy_with_logits(x, x * 0),
}


# gradients at inf (or nan) left different from torch's (values the same): prod's and cumprod's
# at an inf input (nan here, torch's product of the others), trigamma's (digamma's gradient)
# at -inf and the poles (inf here, torch's nan and ~6.6e32), i1e's at nan (nan, torch's 0.5)
GRADIENT_LEFT = {"prod", "cumprod", "digamma", "special.i1e"}


def _run(lib, program, dtype_name):
    """The program's value and its gradient (of the sum) as float64 arrays."""
    x = lib.tensor(ROWS, dtype=getattr(lib, dtype_name), requires_grad=True)
    y = PROGRAMS[program](lib, x)
    y.sum().backward()
    return (np.asarray(y.detach().tolist(), np.float64),
            np.asarray(x.grad.tolist(), np.float64))


def _same(ours, theirs, program=None, atol=1e-12):
    if program in GRADIENT_LEFT:
        ours, theirs = ours[:1], theirs[:1]
    for value, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        real = ~np.isnan(b)
        # the sign of an infinity, and of a zero value (a zero gradient's is rounding's)
        exact = real & (np.isinf(b) | ((b == 0) & (value == 0)))
        np.testing.assert_array_equal(np.signbit(a[exact]), np.signbit(b[exact]))
        np.testing.assert_allclose(a[real], b[real], rtol=1e-5, atol=atol)


_ATOL = {"float32": 1e-6, "float64": 1e-12}  # a zero gradient's rounding (layer_norm's)


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_no_warning_with_the_import_time_filters(program, dtype_name):
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        quiet_float_warnings()  # what importing disthook put in front
        ours = _run(disthook, program, dtype_name)
    assert [str(w.message) for w in seen] == []
    _same(ours, _run(torch, program, dtype_name), program, _ATOL[dtype_name])


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_a_programs_error_filter_gets_torchs_values(program, dtype_name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = _run(disthook, program, dtype_name)
    _same(ours, _run(torch, program, dtype_name), program, _ATOL[dtype_name])


def test_the_programs_own_numpy_still_warns():
    # the quiet is the ops' own: numpy called by the program warns as it always did
    disthook.tensor([0.0]).log()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="divide by zero"):
            np.log(np.zeros(1))


def test_an_error_filter_on_an_in_place_op_writes_once():
    x = disthook.tensor([1.0, 2.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x.div_(0.0)
    assert x.tolist()[:2] == [INF, INF] and np.isnan(x.tolist()[2])


def test_lgamma_and_digamma_at_their_edges_match_torch():
    edges = [INF, -INF, float("nan"), 0.0, -0.0, -1.0, -2.5, 1e30, -1e30]
    for name in ("lgamma", "digamma"):
        ours = getattr(disthook.tensor(edges, dtype=disthook.float64), name)().tolist()
        theirs = getattr(torch.tensor(edges, dtype=torch.float64), name)().tolist()
        _same([np.array(ours)], [np.array(theirs)])
