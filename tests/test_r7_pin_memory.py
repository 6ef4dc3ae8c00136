"""``pin_memory`` on a machine without an accelerator, as torch has it: every factory takes
``pin_memory=False`` (scripts pass ``pin_memory=torch.cuda.is_available()``), ``True`` and
``Tensor.pin_memory()`` raise torch's RuntimeError, and DataLoader's ``pin_memory=True`` is
accepted. Runs under disthook and, when installed, torch."""
from __future__ import annotations

import importlib
import importlib.util
import pickle
import re
import warnings

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
NO_PINNING = ("^" + re.escape("pin_memory=True requires a CUDA or other accelerator backend; "
                              "no pinned memory allocator is available on this system.") + "$")


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def factories(T):
    one = T.ones(2)
    return {"zeros": (2,), "ones": (2,), "empty": (2,), "full": ((2,), 1.0), "rand": (2,),
            "randn": (2,), "randint": (3, (2,)), "randperm": (3,), "arange": (3,),
            "linspace": (0, 1, 3), "logspace": (0, 1, 3), "eye": (2,), "empty_like": (one,),
            "zeros_like": (one,), "ones_like": (one,), "full_like": (one, 1.0),
            "rand_like": (one,), "randn_like": (one,), "tensor": ([1.0],),
            "empty_strided": ((2,), (1,)), "normal": (0.0, 1.0, (2,)),
            "bartlett_window": (3,), "hann_window": (3,), "tril_indices": (3, 3),
            "scalar_tensor": (1.0,)}


def test_factories_take_pin_memory_false_and_refuse_true(T):
    for name, args in factories(T).items():
        made = getattr(T, name)(*args, pin_memory=T.cuda.is_available())
        assert made.is_pinned() is False, name
        with pytest.raises(RuntimeError, match=NO_PINNING):
            getattr(T, name)(*args, pin_memory=True)


def test_tensor_pin_memory_raises_and_the_data_loader_accepts_it(T):
    with pytest.raises(RuntimeError, match="^Cannot access accelerator device when none is "
                                           "available.$"):
        T.ones(2).pin_memory()
    data = T.utils.data.TensorDataset(T.arange(6.0).reshape(3, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: no accelerator to pin for
        batches = [b.tolist() for (b,) in T.utils.data.DataLoader(data, batch_size=2,
                                                                    pin_memory=True)]
    assert batches == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0]]]


def test_the_factories_pickle_by_reference(T):
    assert pickle.loads(pickle.dumps(T.zeros)) is T.zeros
    assert T.zeros.__name__ == "zeros"
