"""Gaps found running nanoGPT's train.py, minGPT's Trainer and Captum against disthook
(issue 20): RandomSampler drawing lazily, Future[T], nn.parallel.scatter_gather,
nn.DataParallel, the legacy tensor types (FloatTensor, ...), max unpooling.

Each test taking ``lib`` runs under disthook and torch (when installed) with the same asserts;
the unpooling ops go through check_op (forward, gradients and second order against finite
differences and torch).
"""
from __future__ import annotations

import importlib
import itertools
import re
from collections import namedtuple

import numpy as np
import pytest
from helpers import check_op
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch

import disthook

try:
    import torch
except ImportError:  # check_op then compares with finite differences only
    torch = None


# ---- RandomSampler(replacement=True) draws lazily ---------------------------------------------

def data_of(lib):
    return importlib.import_module(lib.name + ".utils.data")


def test_sampler_with_replacement_and_huge_num_samples_draws_lazily(lib):
    # minGPT's Trainer: drawing 1e10 indices at once needs 74.5 GiB
    torch, data = lib.torch, data_of(lib)
    sampler = data.RandomSampler(range(10), replacement=True, num_samples=int(1e10))
    assert len(sampler) == int(1e10)
    torch.manual_seed(3)
    first = list(itertools.islice(iter(sampler), 100))
    torch.manual_seed(3)
    again = list(itertools.islice(iter(sampler), 100))
    assert first == again and all(0 <= i < 10 for i in first) and len(set(first)) > 1
    loader = data.DataLoader(range(10), sampler=sampler, batch_size=4)
    assert next(iter(loader)).shape == (4,)


def test_sampler_with_replacement_draws_in_chunks_of_32(lib):
    # as torch: the first 32 indices do not depend on how many are asked for
    torch, data = lib.torch, data_of(lib)
    draws = []
    for num_samples in (40, 70, int(1e10)):
        gen = torch.Generator().manual_seed(5)
        sampler = data.RandomSampler(range(7), replacement=True, num_samples=num_samples,
                                     generator=gen)
        draws.append(list(itertools.islice(iter(sampler), 40)))
    assert draws[0][:32] == draws[1][:32] == draws[2][:32]
    gen = torch.Generator().manual_seed(5)
    sampler = data.RandomSampler(range(7), replacement=True, num_samples=70, generator=gen)
    assert len(list(sampler)) == 70


# ---- torch.futures.Future is generic -------------------------------------------------------------

def test_future_is_subscriptable_as_a_type(lib):
    torch = lib.torch
    hint = torch.futures.Future[torch.Tensor]  # Captum's annotation

    def takes(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        return fut.wait()

    assert hint is not None
    fut = torch.futures.Future()
    fut.set_result(torch.ones(2))
    assert takes(fut).tolist() == [1.0, 1.0]


# ---- torch.nn.parallel.scatter_gather, nn.DataParallel ----------------------------------------

Pair = namedtuple("Pair", "a b")


def test_scatter_and_gather_of_objects_that_are_not_tensors(lib):
    sg = importlib.import_module(lib.name + ".nn.parallel.scatter_gather")
    assert sg.scatter((3, "a"), [0, 1]) == [(3, "a"), (3, "a")]
    assert sg.scatter({"k": 1}, [0]) == [{"k": 1}]
    assert sg.scatter([1, 2], [0, 1]) == [[1, 2], [1, 2]]
    assert sg.scatter(Pair(1, 2), [0, 1]) == [Pair(1, 2), Pair(1, 2)]
    assert sg.scatter_kwargs((1,), {"a": 2}, [0, 1]) == (((1,), (1,)), ({"a": 2}, {"a": 2}))
    assert sg.scatter_kwargs((), {}, []) == ((), ())
    assert sg.gather([None, None], "cpu") is None
    with pytest.raises(TypeError):
        sg.gather([1, 2], "cpu")


def test_gather_of_tensors_is_torchs_cpu_error(lib):
    sg = importlib.import_module(lib.name + ".nn.parallel.scatter_gather")
    for outputs in ([lib.torch.ones(2)], [{"a": lib.torch.ones(1)}], [(lib.torch.ones(1), 3)]):
        with pytest.raises(AssertionError, match="^Gather function not implemented for CPU "
                                                 "tensors$"):
            sg.gather(outputs, "cpu")


def test_scatter_of_a_tensor_says_there_are_no_gpus():
    from disthook.nn.parallel.scatter_gather import scatter

    with pytest.raises(RuntimeError, match=re.escape(
            "scatter: disthook has no GPUs to split a tensor of shape [4, 2] over "
            "(target_gpus=[0, 1])")):
        scatter((disthook.ones(4, 2), 3), [0, 1])


def test_data_parallel_at_nn_level(lib):
    torch = lib.torch
    assert lib.nn.DataParallel is lib.nn.parallel.DataParallel
    torch.manual_seed(0)
    net = lib.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    wrapped = lib.nn.DataParallel(net)
    assert torch.equal(wrapped(x), net(x))
    assert list(wrapped.state_dict()) == ["module.weight", "module.bias"]


# ---- legacy tensor types ---------------------------------------------------------------------------

def test_legacy_constructors_from_data(lib):
    torch = lib.torch
    t = torch.FloatTensor([1, 2])
    assert t.dtype == torch.float32 and t.tolist() == [1.0, 2.0]
    assert torch.LongTensor([1.5, 2]).tolist() == [1, 2]
    assert torch.LongTensor([1.5, 2]).dtype == torch.int64
    assert torch.IntTensor([1, 2]).dtype == torch.int32
    assert torch.DoubleTensor((2, 3)).tolist() == [2.0, 3.0]
    assert torch.BoolTensor([1, 0]).tolist() == [True, False]
    assert torch.FloatTensor(np.array([1, 2])).tolist() == [1.0, 2.0]
    assert torch.FloatTensor([1], device="cpu").tolist() == [1.0]
    assert torch.FloatTensor().shape == (0,)


def test_legacy_constructors_from_sizes(lib):
    torch = lib.torch
    t = torch.LongTensor(3, 4)
    assert t.shape == (3, 4) and t.dtype == torch.int64 and not t.requires_grad
    assert torch.FloatTensor(torch.Size([2, 3])).shape == (2, 3)
    assert torch.FloatTensor(torch.Size([])).shape == ()
    assert torch.DoubleTensor(2).dtype == torch.float64
    assert torch.FloatTensor(np.int64(3)).shape == (3,)
    assert torch.LongTensor(0).shape == (0,)


def test_legacy_constructor_of_a_tensor_is_an_alias(lib):
    torch = lib.torch
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = torch.FloatTensor(x)
    assert y is not x and y.requires_grad and y.grad_fn.name() == "AliasBackward0"
    assert y.data_ptr() == x.data_ptr()


def test_legacy_constructor_errors(lib):
    torch = lib.torch
    with pytest.raises(TypeError, match=re.escape(
            "expected TensorOptions(dtype=float, device=cpu, layout=Strided, requires_grad=false "
            "(default), pinned_memory=false (default), memory_format=(nullopt)) (got "
            "TensorOptions(dtype=long int,")):
        torch.FloatTensor(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=re.escape("new(): data must be a sequence (got float)")):
        torch.FloatTensor(2.5)
    with pytest.raises(TypeError, match=re.escape(
            "new(): data must be a sequence (got numpy.float64)")):
        torch.FloatTensor(np.float64(3))
    with pytest.raises(TypeError, match=re.escape("new(): invalid data type 'str'")):
        torch.FloatTensor("ab")
    with pytest.raises(TypeError, match=re.escape(
            "new(): argument 'size' failed to unpack the object at pos 2 with error \"type must "
            "be tuple of ints,but got float\"")):
        torch.FloatTensor(2, 3.0)
    with pytest.raises(RuntimeError, match=re.escape(
            "Trying to create tensor with negative dimension -1: [-1]")):
        torch.FloatTensor(-1)
    with pytest.raises(RuntimeError, match="^legacy constructor expects device type: cpu but "
                                           "device type: cuda was passed$"):
        torch.FloatTensor([1], device="cuda")


def test_isinstance_of_a_legacy_type_asks_for_the_dtype(lib):
    torch = lib.torch
    assert isinstance(torch.zeros(2), torch.FloatTensor)
    assert not isinstance(torch.zeros(2, dtype=torch.float64), torch.FloatTensor)
    assert isinstance(torch.zeros(2, dtype=torch.float64), torch.DoubleTensor)
    assert isinstance(torch.zeros(2).long(), torch.LongTensor)
    assert not isinstance(torch.ones(1, dtype=torch.int64), torch.IntTensor)
    assert isinstance(torch.ones(1, dtype=torch.int32), torch.IntTensor)
    assert isinstance(torch.ones(1, dtype=torch.bool), torch.BoolTensor)
    assert isinstance(lib.nn.Parameter(torch.zeros(2)), torch.FloatTensor)
    assert not isinstance(3, torch.FloatTensor) and not isinstance([1.0], torch.FloatTensor)
    assert isinstance(torch.FloatTensor([1]), torch.Tensor)
    assert not issubclass(torch.FloatTensor, torch.Tensor)
    assert torch.FloatTensor.dtype == torch.float32 and torch.LongTensor.dtype == torch.int64
    assert torch.FloatTensor.__name__ == "FloatTensor" and not torch.FloatTensor.is_cuda
    assert torch.zeros(2).type() == "torch.FloatTensor"


# ---- max unpooling: values and gradients against torch -----------------------------------------

def _pooled(shape, pool, **kwargs):
    """Random values of the pooled shape and the indices max pooling of ``shape`` gives.
    The windows must not overlap: an index named twice would leave one value in the output
    (torch's kernel writes in no defined order) while the gradient reaches both."""
    x = disthook.tensor(np.random.default_rng(1).standard_normal(shape))
    values, indices = pool(x, return_indices=True, **kwargs)
    return tuple(values.shape), indices.numpy()


def F(x):
    return disthook.nn.functional if isinstance(x, disthook.Tensor) else torch.nn.functional


@pytest.mark.parametrize("shape, kwargs, unpool_kwargs", [
    ((2, 3, 4, 4), {"kernel_size": 2}, {}),
    ((1, 2, 5, 5), {"kernel_size": 2, "stride": 2, "padding": 1}, {"output_size": (5, 5)}),
    ((3, 4, 6), {"kernel_size": 2}, {}),
    ((1, 2, 5, 4), {"kernel_size": (2, 2), "stride": [2, 2]}, {"output_size": [1, 2, 5, 4]}),
])
def test_max_unpool2d(shape, kwargs, unpool_kwargs):
    values, indices = _pooled(shape, disthook.nn.functional.max_pool2d, **kwargs)
    check_op(lambda x, i: F(x).max_unpool2d(x, i, **kwargs, **unpool_kwargs), values, indices,
             double=True)


@pytest.mark.parametrize("shape, kwargs, unpool_kwargs", [
    ((2, 3, 6), {"kernel_size": 2}, {}),
    ((1, 2, 7), {"kernel_size": 2, "stride": 2, "padding": 1}, {"output_size": (7,)}),
    ((2, 5), {"kernel_size": 2}, {}),
])
def test_max_unpool1d(shape, kwargs, unpool_kwargs):
    values, indices = _pooled(shape, disthook.nn.functional.max_pool1d, **kwargs)
    check_op(lambda x, i: F(x).max_unpool1d(x, i, **kwargs, **unpool_kwargs), values, indices,
             double=True)


@pytest.mark.parametrize("shape, kwargs, unpool_kwargs", [
    ((1, 2, 4, 4, 4), {"kernel_size": 2}, {}),
    ((2, 3, 5, 4), {"kernel_size": 2, "stride": 2}, {"output_size": (3, 5, 4)}),
    ((1, 1, 5, 3, 4), {"kernel_size": (2, 2, 2), "stride": 2, "padding": (1, 0, 0)},
     {"output_size": (5, 3, 4)}),
])
def test_max_unpool3d(shape, kwargs, unpool_kwargs):
    values, indices = _pooled(shape, disthook.nn.functional.max_pool3d, **kwargs)
    check_op(lambda x, i: F(x).max_unpool3d(x, i, **kwargs, **unpool_kwargs), values, indices,
             double=True)


def test_max_unpool_modules_invert_max_pool(lib):
    torch = lib.torch
    pool = lib.nn.MaxPool2d(2, stride=2, return_indices=True)
    unpool = lib.nn.MaxUnpool2d(2, stride=2)
    x = torch.tensor([[[[1., 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15],
                        [16, 17, 18, 19, 20]]]])
    out, indices = pool(x[..., :4])
    assert unpool(out, indices).tolist() == [[[[0, 0, 0, 0], [0, 7, 0, 9], [0, 0, 0, 0],
                                               [0, 17, 0, 19]]]]
    out, indices = pool(x)
    assert unpool(out, indices, output_size=x.size()).tolist() == [[[
        [0, 0, 0, 0, 0], [0, 7, 0, 9, 0], [0, 0, 0, 0, 0], [0, 17, 0, 19, 0]]]]
    assert repr(unpool) == "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))"
    assert repr(lib.nn.MaxUnpool1d(2, stride=1)) == \
        "MaxUnpool1d(kernel_size=(2,), stride=(1,), padding=(0,))"
    assert repr(lib.nn.MaxUnpool3d((2, 1, 2))) == \
        "MaxUnpool3d(kernel_size=(2, 1, 2), stride=(2, 1, 2), padding=(0, 0, 0))"
    pool1, unpool1 = lib.nn.MaxPool1d(2, return_indices=True), lib.nn.MaxUnpool1d(2)
    seq = torch.tensor([[[1., 5, 2, 0, 3, 4]]])
    assert unpool1(*pool1(seq)).tolist() == [[[0, 5, 2, 0, 0, 4]]]
    pool3, unpool3 = lib.nn.MaxPool3d(2, return_indices=True), lib.nn.MaxUnpool3d(2)
    cube = torch.arange(8.0).reshape(1, 1, 2, 2, 2)
    assert unpool3(*pool3(cube)).flatten().tolist() == [0, 0, 0, 0, 0, 0, 0, 7]


def test_max_unpool_node_names(lib):
    torch, F_ = lib.torch, lib.F
    x = torch.ones(1, 1, 2, 2, requires_grad=True)
    i = torch.tensor([[[[0, 3], [8, 15]]]])
    assert F_.max_unpool2d(x, i, 2).grad_fn.name() == "MaxUnpool2DBackward0"
    seq = torch.ones(1, 2, requires_grad=True)
    assert F_.max_unpool1d(seq, torch.tensor([[1, 2]]), 2).grad_fn.name() == "SqueezeBackward1"
    cube = torch.ones(1, 1, 1, 1, 2, requires_grad=True)
    assert F_.max_unpool3d(cube, torch.tensor([[[[[0, 7]]]]]), 2).grad_fn.name() == \
        "MaxUnpool3DBackward0"


def test_max_unpool_errors(lib):
    torch, F_ = lib.torch, lib.F
    x, i = torch.randn(1, 1, 2, 2), torch.tensor([[[[0, 1], [4, 5]]]])
    with pytest.raises(RuntimeError, match=re.escape(
            "Found an invalid max index: 16 (output volumes are of size 4x4")):
        F_.max_unpool2d(x, torch.tensor([[[[0, 1], [2, 16]]]]), 2)
    with pytest.raises(RuntimeError, match=re.escape(
            "Found an invalid max index: -1 (output volumes are of size 4x4")):
        F_.max_unpool2d(x, torch.tensor([[[[0, 1], [2, -1]]]]), 2)
    with pytest.raises(RuntimeError, match="^elements in indices should be type int64 but got: "
                                           "Int$"):
        F_.max_unpool2d(x, i.int(), 2)
    with pytest.raises(RuntimeError, match=re.escape(
            "Expected shape of indices to be same as that of the input tensor ([1, 1, 2, 2]) "
            "but got indices tensor with shape: [1, 2, 2]")):
        F_.max_unpool2d(x, i[0], 2)
    with pytest.raises(ValueError, match=re.escape(
            'invalid output_size "(9, 9)" (dim 0 must be between 2 and 6)')):
        F_.max_unpool2d(x, i, 2, output_size=(9, 9))
    with pytest.raises(ValueError, match=re.escape(
            "output_size should be a sequence containing 2 or 4 elements, but it has a length "
            "of '3'")):
        F_.max_unpool2d(x, i, 2, output_size=(1, 2, 3))
    with pytest.raises(ValueError, match=re.escape(
            "max_unpooling: output_size must contain non-negative spatial dimensions, but got "
            "output_size[0]=-2")):
        F_.max_unpool2d(torch.randn(1, 1, 1, 2), torch.tensor([[[[0, 1]]]]), 2, padding=2)
    with pytest.raises(RuntimeError, match=re.escape(
            "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with 2 "
            "dimensions.")):
        F_.max_unpool2d(torch.randn(2, 2), torch.tensor([[0, 1], [2, 3]]), 2)
    with pytest.raises(RuntimeError, match=re.escape(
            "max_unpooling2d_forward_out_cpu(): Expected input to have non-zero size for "
            "non-batch dimensions, but got [1, 0, 2, 2] with dimension 1 being empty.")):
        F_.max_unpool2d(torch.randn(1, 0, 2, 2), torch.zeros(1, 0, 2, 2, dtype=torch.int64), 2)
    with pytest.raises(NotImplementedError, match="^\"max_unpool2d\" not implemented for "
                                                  "'Long'$"):
        F_.max_unpool2d(torch.tensor([[[[1, 2], [3, 4]]]]), i, 2)
    assert F_.max_unpool2d(torch.randn(0, 1, 2, 2), torch.zeros(0, 1, 2, 2, dtype=torch.int64),
                           2).shape == (0, 1, 4, 4)


def test_max_unpool3d_errors(lib):
    torch, F_ = lib.torch, lib.F
    cube, i = torch.randn(1, 1, 1, 1, 2), torch.tensor([[[[[0, 7]]]]])
    with pytest.raises(RuntimeError, match=re.escape(
            "Found an invalid max index: 80 (output volumes are of size 2x2x4")):
        F_.max_unpool3d(cube, torch.tensor([[[[[0, 80]]]]]), 2)
    with pytest.raises(RuntimeError, match="^elements in indices should be type int64$"):
        F_.max_unpool3d(cube, i.int(), 2)
    with pytest.raises(RuntimeError, match=re.escape(
            "Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor with 3 "
            "dimensions.")):
        F_.max_unpool3d(torch.randn(1, 1, 2), torch.tensor([[[0, 1]]]), 2)
    with pytest.raises(RuntimeError, match=re.escape(
            "strides should be greater than zero, but got stride: [0, 0, 0]")):
        F_.max_unpool3d(cube, i, 2, stride=0)
    with pytest.raises(NotImplementedError, match="^\"max_unpool3d\" not implemented for "
                                                  "'Long'$"):
        F_.max_unpool3d(cube.long(), i, 2)
    assert F_.max_unpool3d(torch.randn(1, 1, 1, 2), torch.tensor([[[[0, 7]]]]), 2).shape == \
        (1, 2, 2, 4)


def test_bfloat16_is_named_and_holds_tensors():
    """nanoGPT's train.py builds {"bfloat16": torch.bfloat16, ...} whatever it picks (without
    ml_dtypes making one raises: tests/test_b1_bfloat16.py)."""
    import pickle

    import disthook as torch

    assert repr(torch.bfloat16) == "torch.bfloat16" and torch.bfloat16.is_floating_point
    assert torch.bfloat16 != torch.float16 and torch.bfloat16.itemsize == 2
    assert pickle.loads(pickle.dumps(torch.bfloat16)) is torch.bfloat16
    assert torch.zeros(2, dtype=torch.bfloat16).dtype is torch.bfloat16


def test_warn_always_is_at_the_top_level():
    import disthook as torch

    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    assert torch.is_warn_always_enabled()
    torch.set_warn_always(before)


@pytest.mark.parametrize("kwargs", [{}, {"return_inverse": True, "return_counts": True},
                                    {"dim": 0, "return_inverse": True},
                                    {"dim": 1, "return_counts": True}, {"sorted": False}])
def test_unique_as_torch_gives_it(kwargs):
    """minGPT's demo calls Tensor.unique; torch's CPU kernels sort whatever sorted says."""
    torch_ = pytest.importorskip("torch")
    import disthook

    data = [[3, 1, 3], [1, 2, 1], [3, 1, 3]]
    got = disthook.tensor(data).unique(**kwargs)
    want = torch_.tensor(data).unique(**kwargs)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist() and str(g.dtype) == str(w.dtype)
    assert disthook.unique(disthook.tensor([2.0, 1.0, 2.0])).tolist() == [1.0, 2.0]
