"""Methods and factories that take their sizes or dims one by one also take them by torch's
keyword (``flip(dims=[0])`` as Longformer writes it, ``permute(dims=...)``,
``view(size=...)``, ``zeros(size=...)``, ``mm(mat2=...)``), and refuse both at once as
torch does."""
import numpy as np
import pytest

import disthook as torch

X = np.arange(24.0).reshape(2, 3, 4)

CASES = {
    "flip": (lambda x: x.flip(dims=[0, 2]), lambda a: a[::-1, :, ::-1]),
    "torch.flip": (lambda x: torch.flip(x, dims=(1,)), lambda a: a[:, ::-1]),
    "permute": (lambda x: x.permute(dims=(2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    "torch.permute": (lambda x: torch.permute(x, dims=[1, 2, 0]),
                      lambda a: a.transpose(1, 2, 0)),
    "tile": (lambda x: x.tile(dims=(2,)), lambda a: np.tile(a, (1, 1, 2))),
    "view": (lambda x: x.view(size=(6, 4)), lambda a: a.reshape(6, 4)),
    "reshape": (lambda x: x.reshape(shape=(4, 6)), lambda a: a.reshape(4, 6)),
    "torch.reshape": (lambda x: torch.reshape(x, shape=(-1,)), lambda a: a.reshape(-1)),
    "expand": (lambda x: x[:1].expand(size=(3, 3, 4)), lambda a: np.repeat(a[:1], 3, 0)),
    "repeat": (lambda x: x.repeat(repeats=(1, 2, 1)), lambda a: np.tile(a, (1, 2, 1))),
    "mm": (lambda x: x[0].mm(mat2=x[0].t()), lambda a: a[0] @ a[0].T),
    "bmm": (lambda x: torch.bmm(x, mat2=x.transpose(1, 2)),
            lambda a: a @ a.transpose(0, 2, 1)),
    "torch.split": (lambda x: torch.split(x, split_size_or_sections=[1, 3], dim=2)[1],
                    lambda a: a[:, :, 1:]),
    "split": (lambda x: x.split(split_size=2, dim=1)[1], lambda a: a[:, 2:]),
    "swapaxes": (lambda x: x.swapaxes(axis0=0, axis1=2), lambda a: a.swapaxes(0, 2)),
    "torch.swapaxes": (lambda x: torch.swapaxes(x, axis0=1, axis1=2),
                       lambda a: a.swapaxes(1, 2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sizes_and_dims_by_keyword(name):
    call, expected = CASES[name]
    np.testing.assert_array_equal(call(torch.tensor(X)).numpy(), expected(X))


def test_the_keyword_forms_carry_the_gradient():
    x = torch.tensor(X, requires_grad=True)
    x.flip(dims=[1]).permute(dims=(2, 1, 0)).reshape(shape=(-1,)).view(size=(4, 6)).sum() \
        .backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_factories_take_size_by_keyword(name):
    out = getattr(torch, name)(size=(2, 3), dtype=torch.float64)
    assert out.shape == (2, 3) and out.dtype == torch.float64


@pytest.mark.parametrize("call, name", [
    (lambda x: x.flip(0, dims=[0]), "flip() got multiple values for argument 'dims'"),
    (lambda x: x.permute(0, 1, 2, dims=(0, 1, 2)),
     "permute() got multiple values for argument 'dims'"),
    (lambda x: torch.zeros(2, size=(2,)), "zeros() got multiple values for argument 'size'"),
    (lambda x: x.view(24, size=(24,)), "view() got multiple values for argument 'size'"),
])
def test_sizes_both_ways_at_once_are_refused(call, name):
    with pytest.raises(TypeError, match=name.replace("(", r"\(").replace(")", r"\)")):
        call(torch.tensor(X))
