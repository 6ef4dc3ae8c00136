"""``div(..., rounding_mode=)`` of integers stays integer and exact, as torch's (HF beam
search's ``torch.div(next_tokens, vocab_size, rounding_mode="floor")`` indexes with it;
Longformer sizes views with it), and an integer divided by zero is torch's
``ZeroDivisionError`` (numpy gives 0). Against torch when it is installed."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

INTS = np.array([7, -7, 9, -9, 0, 2**40 + 1, -(2**40) - 1])


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("divisor", [2, 3, -4, "tensor"])
def test_integers_divided_with_rounding_stay_integers_as_torchs(mode, dtype, divisor):
    data = INTS if dtype == "int64" else (np.abs(INTS[:5]) if dtype == "uint8" else INTS[:5])
    if dtype == "uint8" and divisor == -4:
        divisor = 4
    results = []
    for lib in (torch, disthook):
        x = lib.tensor(data.astype(dtype))
        d = lib.tensor(np.resize([3, -2, 5], len(data)).astype(dtype) if dtype != "uint8"
                       else np.resize([3, 2, 5], len(data)).astype(dtype)) \
            if divisor == "tensor" else divisor
        results.append(x.div(d, rounding_mode=mode))
    want, got = results
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_the_function_form_with_two_numbers_is_an_integer(mode):
    got = disthook.div(8, 3, rounding_mode=mode)
    want = torch.div(8, 3, rounding_mode=mode)
    assert str(got.dtype) == str(want.dtype) == "torch.int64"
    assert got.item() == want.item()
    assert operator_index(disthook.div(8, 2, rounding_mode=mode) - 1) == 3  # a size


def operator_index(t):
    import operator

    return operator.index(t)


@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_a_float_operand_makes_the_rounded_quotient_float(mode):
    for other in (2.5, disthook.tensor(2.0)):
        got = disthook.tensor([7, -7]).div(other, rounding_mode=mode)
        want = torch.tensor([7, -7]).div(2.5 if other == 2.5 else torch.tensor(2.0),
                                         rounding_mode=mode)
        assert str(got.dtype) == str(want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy())


@pytest.mark.parametrize("call", [lambda t: t // 0, lambda t: t.div(0, rounding_mode="floor"),
                                  lambda t: t.div(0, rounding_mode="trunc"),
                                  lambda t: t.floor_divide(t.new_zeros(2))],
                         ids=["//", "floor", "trunc", "floor_divide"])
def test_an_integer_divided_by_zero_is_torchs_error(call):
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(torch.tensor([7, -7]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(disthook.tensor([7, -7]))


def test_div_in_place_takes_a_rounding_mode_as_torchs():
    for lib in (torch, disthook):
        t = lib.tensor([7, -7])
        assert t.div_(2, rounding_mode="trunc") is t
        assert t.tolist() == [3, -3]
        f = lib.tensor([7.0, -7.0])
        f.div_(2, rounding_mode="floor")
        assert f.tolist() == [3.0, -4.0]
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the "
                                               "desired output type Long"):
            lib.tensor([7, -7]).div_(2.5, rounding_mode="floor")
