"""Gaps found running nanoGPT's train.py, minGPT's Trainer and Captum against disthook
(issue 20): RandomSampler drawing lazily, Future[T], nn.parallel.scatter_gather,
nn.DataParallel, the legacy tensor types (FloatTensor, ...).

Each test taking ``lib`` runs under disthook and torch (when installed) with the same asserts.
"""
from __future__ import annotations

import importlib
import itertools
import re
from collections import namedtuple

import numpy as np
import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch

import disthook

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
