"""What GPU-first programs call on ``torch.cuda`` without a guard, on a machine without CUDA:
the queries give torch's answers, and the calls that need a GPU raise torch's AssertionError
Runs under disthook and, when installed, torch."""
from __future__ import annotations

import importlib
import importlib.util
import re
import warnings
from collections import OrderedDict

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
NO_CUDA = "^" + re.escape("Torch not compiled with CUDA enabled") + "$"


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def test_unguarded_queries_answer_as_a_cpu_build(T):
    assert T.cuda.empty_cache() is None
    for query in (T.cuda.memory_allocated, T.cuda.max_memory_allocated,
                  T.cuda.memory_reserved, T.cuda.max_memory_reserved):
        assert query() == 0
    assert T.cuda.is_initialized() is False
    assert T.cuda.memory_stats() == OrderedDict()
    assert T.cuda.get_arch_list() == []
    assert T.cuda.get_rng_state_all() == []
    assert T.cuda.seed() is None and T.cuda.seed_all() is None
    assert T.cuda.is_tf32_supported() is False
    with pytest.warns(FutureWarning, match="renamed to `?torch.cuda.memory_reserved"):
        assert T.cuda.memory_cached() == 0


@pytest.mark.parametrize("name", ["synchronize", "current_device", "get_device_name",
                                  "get_device_properties", "get_device_capability", "init",
                                  "ipc_collect", "mem_get_info", "current_stream",
                                  "default_stream", "get_rng_state", "initial_seed"])
def test_calls_that_need_a_gpu_raise_torchs_assertion(T, name):
    with pytest.raises(AssertionError, match=NO_CUDA):
        getattr(T.cuda, name)()


def test_a_training_loop_written_for_a_gpu_runs(T):
    """The loop as GPU-first scripts write it: device picked once, caches emptied and memory
    logged every step, synchronize only when CUDA is there."""
    device = T.device("cuda" if T.cuda.is_available() else "cpu")
    T.manual_seed(0)
    model = T.nn.Linear(3, 1).to(device)
    opt = T.optim.SGD(model.parameters(), lr=0.1)
    log = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            x = T.ones(4, 3).to(device, non_blocking=True)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if T.cuda.is_available():
                T.cuda.synchronize()
            T.cuda.empty_cache()
            log.append(T.cuda.max_memory_allocated() / 2**20)
    assert log == [0.0, 0.0]


def test_a_device_index_asks_for_an_accelerator(T):
    """``model.to(local_rank)``, ``x.to(0)``, ``device=0``: torch without an accelerator
    raises (disthook ignored the index on a module, and a tensor took it for a dtype)."""
    model, x = T.nn.Linear(2, 2), T.ones(2)
    for call in (lambda: model.to(0), lambda: x.to(0), lambda: x.to(0, T.float64),
                 lambda: x.to(device=0), lambda: T.zeros(2, device=0), lambda: T.device(0)):
        with pytest.raises(RuntimeError, match="^Cannot access accelerator device when none "
                                               "is available.$"):
            call()
    assert str(T.device("cpu", 0)) == "cpu:0" and x.to(T.int64).dtype == T.int64


def test_fork_rng_puts_the_default_generator_back(T):
    """``torch.random.fork_rng()``, as GPU-first code calls it (``devices=[]`` or
    ``device_type="cuda"``): draws inside leave the stream where it was; ``enabled=False``
    forks nothing."""
    T.manual_seed(0)
    first = T.rand(3).tolist()
    T.manual_seed(0)
    with T.random.fork_rng():
        T.rand(5)
    with T.random.fork_rng(devices=[], device_type="cuda"):
        T.manual_seed(7)
        T.rand(2)
    assert T.rand(3).tolist() == first
    T.manual_seed(0)
    with T.random.fork_rng(enabled=False):
        T.rand(1)
    T.manual_seed(0)
    T.rand(1)
    after_one = T.rand(2).tolist()
    T.manual_seed(0)
    with T.random.fork_rng(enabled=False):
        T.rand(1)
    assert T.rand(2).tolist() == after_one
