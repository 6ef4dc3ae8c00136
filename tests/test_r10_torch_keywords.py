"""The keyword spellings real programs pass, as torch takes them (measured over 40 public code
bases): numpy's ``axis=`` / ``keepdims=`` on every operator torch binds from C++, an int-list
varargs parameter by its name (``view(size=)``, ``permute(dims=)``, ``torch.zeros(size=)``),
the ``*_like`` factories' ``input=`` / ``memory_format=`` / ``device=`` / ``generator=``,
``layout=torch.strided``, ``torch.split(split_size_or_sections=)``, ``gather(sparse_grad=)``,
``arange(end=)``, ``randint(high=, size=)``, ``x.type(torch.DoubleTensor)``. Each stopped a
program with a TypeError before. What torch writes in Python (``Tensor.split``,
``Tensor.norm``) refuses the aliases here as there."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SAME = [
    "x.mean(axis=1)", "x.sum(axis=1, keepdims=True)", "x.mean(1, keepdims=True)",
    "x.argmax(axis=1)", "x.cumsum(axis=0)", "x.max(axis=1, keepdims=True).values",
    "x.min(axis=0).indices", "x.squeeze(axis=0)", "x.unsqueeze(axis=0)",
    "x.std(axis=1, keepdims=True)", "x.var(axis=0)", "x.any(axis=1)", "x.logsumexp(axis=1)",
    "x.amax(axis=1)", "x.prod(axis=1)", "x.softmax(axis=1)", "x.chunk(2, axis=1)[1]",
    "x.narrow(axis=1, start=1, length=2)", "x.index_select(axis=1, index=T.tensor([0, 2]))",
    "T.sum(x, axis=1)", "T.mean(x, axis=(0, 1), keepdims=True)", "T.cat([x, x], axis=1)",
    "T.stack([x, x], axis=0)", "T.argmax(x, axis=1)", "T.max(x, axis=1).values",
    "x.view(size=(4, 3))", "x.reshape(shape=[2, 6])", "x.permute(dims=(1, 0))",
    "x.expand(size=(2, 3, 4))", "x.repeat(repeats=(2, 1))", "x.flip(dims=(0,))",
    "x.tile(dims=(2,))", "x.sum_to_size(size=(1, 4))", "T.flip(x, dims=(1,))",
    "T.permute(x, dims=(1, 0))", "T.reshape(x, shape=(12,))", "T.zeros(size=(2, 3))",
    "T.ones(size=[2])", "T.empty(size=(2, 2)).shape",
    "T.zeros_like(x, memory_format=T.contiguous_format)",
    "T.ones_like(x, memory_format=T.preserve_format)",
    "T.full_like(x, 2.0, memory_format=T.contiguous_format)",
    "T.empty_like(x, memory_format=T.preserve_format).shape",
    "T.zeros_like(input=x)", "T.full_like(input=x, fill_value=3)",
    "T.rand_like(x, device='cpu', memory_format=T.preserve_format).shape",
    "T.randn_like(x, device='cpu').dtype", "T.randint_like(x, 5, memory_format=T.preserve_format).shape",
    "T.zeros(2, 3, layout=T.strided)", "T.ones_like(x, layout=T.strided)",
    "T.randn(2, layout=T.strided).shape", "T.arange(5, layout=T.strided)",
    "T.normal(0.0, 1.0, size=(2, 3), device='cpu', dtype=T.float64).dtype",
    "T.split(x, split_size_or_sections=[1, 3], dim=1)[1]",
    "T.gather(x, 1, T.tensor([[0], [1], [2]]), sparse_grad=False)",
    "T.arange(end=5)", "T.randint(high=5, size=(3,)).shape",
    "x.type(T.DoubleTensor)", "x.type(T.LongTensor)",
]


def _assert_same(got, want):
    if isinstance(want, (tuple, list)) and not isinstance(want, torch.Size):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif isinstance(want, torch.Tensor):
        assert str(got.dtype) == str(want.dtype)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    else:
        def plain(v):
            return str(v).replace("disthook.", "").replace("torch.", "")

        assert plain(got) == plain(want)


@pytest.mark.parametrize("expr", SAME)
def test_a_keyword_spelling_torch_takes_gives_torch_s_result(expr):
    got = []
    for lib in (torch, disthook):
        x = lib.arange(12, dtype=lib.float32).reshape(3, 4) / 12
        got.append(eval(expr, {"T": lib, "x": x}))
    _assert_same(got[1], got[0])


REFUSED = [
    "x.sum(dim=0, axis=0)",  # the alias names a parameter given already
    "x.split(2, axis=1)", "x.norm(axis=0)",  # torch writes these in Python: no aliases
    "x.roll(1, axis=0)",  # roll's parameter is dims, not dim
    "T.zeros(2, size=(2,))", "x.view((3, 4), size=(3, 4))", "x.expand(3, 4, size=(3, 4))",
    "x.permute(dims=1)", "x.flip(dims=0)", "T.zeros(size=3)", "x.sum_to_size(size=4)",
    "T.zeros_like(x, memory_format='contiguous')",
]


@pytest.mark.parametrize("expr", REFUSED)
def test_a_spelling_torch_refuses_is_refused_with_its_error(expr):
    for lib in (torch, disthook):
        x = lib.arange(12, dtype=lib.float32).reshape(3, 4)
        with pytest.raises(TypeError):
            eval(expr, {"T": lib, "x": x})


def test_numpy_names_carry_the_gradient():
    grads = []
    for lib in (torch, disthook):
        x = lib.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
        y = (x.mean(axis=0, keepdims=True) * x).sum(axis=1).max(axis=0).values
        y.backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0])


def test_like_factories_take_a_generator_and_draw_as_the_plain_factory():
    x = disthook.zeros(2, 3, dtype=disthook.float64)
    a = disthook.randn_like(x, generator=disthook.Generator().manual_seed(3))
    b = disthook.randn((2, 3), dtype=disthook.float64,
                       generator=disthook.Generator().manual_seed(3))
    assert a.dtype == disthook.float64 and a.shape == (2, 3)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    c = disthook.rand_like(x, generator=disthook.Generator().manual_seed(3))
    np.testing.assert_array_equal(
        c.numpy(), disthook.rand(2, 3, dtype=disthook.float64,
                                 generator=disthook.Generator().manual_seed(3)).numpy())


def test_what_cannot_be_modelled_is_refused_with_the_reason():
    x = disthook.ones(2, 3)
    with pytest.raises(NotImplementedError, match="sparse layouts are not modelled"):
        disthook.zeros(2, layout=disthook.sparse_coo)
    with pytest.raises(NotImplementedError, match="sparse"):
        x.gather(1, disthook.zeros(2, 1, dtype=disthook.int64), sparse_grad=True)
    with pytest.raises(TypeError, match="tensor mean or std"):
        disthook.normal(disthook.zeros(2), 1.0, dtype=disthook.float64)
    with pytest.raises(AssertionError, match="CUDA"):  # a CPU-only torch's words
        disthook.randint_like(x, 5, device="cuda")
