"""``torch.testing.assert_close`` (used by ten of the forty code bases measured, 208 times)
and the deprecated ``assert_allclose``: the same verdicts and the same messages as torch's,
for tensors of each dtype, 0-d tensors, numbers, containers, NaN, and the argument errors.
Both were refusals."""
import warnings

import pytest

import disthook

torch = pytest.importorskip("torch")

CASES = [
    "ac(T.tensor([1., 2., 3.]), T.tensor([1., 2., 3.1]))",
    "ac(T.tensor([[1., 2.], [3., 4.]]), T.tensor([[1., 2.5], [3., 4.]]))",
    "ac(T.tensor([1., 2.], dtype=T.float64), T.tensor([1., 2.0000001], dtype=T.float64))",
    "ac(T.tensor([1., 2.], dtype=T.float64), T.tensor([1., 2.001], dtype=T.float64))",
    "ac(T.tensor([1., 2.], dtype=T.float16), T.tensor([1., 2.001], dtype=T.float16))",
    "ac(T.tensor(1.), T.tensor(2.))",
    "ac(T.tensor([1, 2]), T.tensor([1, 3]))",
    "ac(T.tensor([True]), T.tensor([False]))",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.], dtype=T.float64))",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.], dtype=T.float64), check_dtype=False)",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2., 3.]))",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.]), rtol=0)",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.]), atol=0)",
    "ac(1, 1.0)", "ac(1.0, 1.0000001)", "ac(1.0, 1.1)", "ac(1, 2)", "ac(None, None)",
    "ac([T.ones(1)], [T.ones(1), T.ones(1)])",
    "ac({'a': T.ones(1)}, {'b': T.ones(1)})",
    "ac({'a': T.ones(1)}, {'a': T.zeros(1)})",
    "ac([T.ones(2), {'k': (T.ones(1),)}], [T.ones(2), {'k': (T.zeros(1),)}])",
    "ac(T.tensor([float('nan')]), T.tensor([float('nan')]))",
    "ac(T.tensor([float('nan')]), T.tensor([float('nan')]), equal_nan=True)",
    "ac(T.tensor([1., float('inf')]), T.tensor([1., float('inf')]))",
    "ac(T.tensor([1., float('inf')]), T.tensor([1., -float('inf')]))",
    "ac(T.tensor([1.]), 1.0)", "ac(T.ones(2), [1., 1.])", "ac('a', 'a')",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.1]), msg='custom')",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.1]), msg=lambda m: 'first line: ' + m[:20])",
    "ac(T.nn.Parameter(T.ones(2)), T.ones(2))",
    "ac(T.nn.Parameter(T.ones(2)), T.ones(2), allow_subclasses=False)",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.0001]), atol=1e-3, rtol=0)",
    "ac(T.tensor([0.]), T.tensor([1e-6]))",
    "ac(T.zeros(0, 3), T.zeros(0, 3))",
    "ac(T.tensor([1 + 1j]), T.tensor([1 + 2j]))",
    "ac(T.ones(2, requires_grad=True) * 2, T.full((2,), 2.0))",
    "ac(T.tensor([1., 2.]), T.tensor([1., 2.1]), rtol=0, atol=0)",
    "ac(T.ones(2, 3), T.ones(3, 2).t(), check_stride=True)",
    "ac(T.ones(2, 3), T.ones(3, 2).t())",
]


def _outcome(lib, expr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            eval(expr, {"T": lib, "ac": lib.testing.assert_close})
        except (AssertionError, TypeError, ValueError) as error:  # verdict and message
            return type(error).__name__, str(error).replace("disthook.", "torch.").replace(
                "torch.nn.parameter.Parameter", "P").replace("torch.tensor.Tensor",
                                                               "torch.Tensor").replace(
                "torch.nn.Parameter", "P")
    return "ok", ""


@pytest.mark.parametrize("expr", CASES)
def test_assert_close_gives_torch_s_verdict_and_message(expr):
    assert _outcome(disthook, expr) == _outcome(torch, expr)


def test_assert_allclose_is_deprecated_and_takes_numbers():
    for lib in (torch, disthook):
        with pytest.warns(FutureWarning, match="assert_allclose\\(\\)` is deprecated"):
            lib.testing.assert_allclose(lib.tensor([1.0, 2.0]), [1.0, 2.0])
        with pytest.warns(FutureWarning), pytest.raises(AssertionError, match="not close"):
            lib.testing.assert_allclose(lib.tensor([1.0, 2.0]), [1.0, 2.5])
    with pytest.raises(NotImplementedError, match="torch.testing.make_tensor"):
        disthook.testing.make_tensor((2,), dtype=disthook.float32, device="cpu")
