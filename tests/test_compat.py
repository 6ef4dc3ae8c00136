"""Compatibility shims that let torch programs run unchanged: devices, CUDA queries, Size,
dtypes and legacy type strings, conversions (numpy / item / tolist / float / len /
iteration), pickling and deepcopy, manual_seed reproducibility, and the factory functions'
dtypes. Runs under disthook and (when installed) torch 2.13 against hard-coded values.
"""
from __future__ import annotations

import copy
import importlib
import importlib.util
import pickle
import re

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def libs(xfail: str | None = None):
    dh = "disthook" if xfail is None else pytest.param(
        "disthook", marks=pytest.mark.xfail(strict=True, reason=xfail))
    return pytest.mark.parametrize("T", [dh, pytest.param("torch", marks=needs_torch)],
                                   indirect=True)


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def exact(exc, msg: str):
    return pytest.raises(exc, match="^" + re.escape(msg) + "$")


# ---- devices and CUDA --------------------------------------------------------------------------

def test_device_cpu(T):
    d = T.device("cpu")
    assert repr(d) == "device(type='cpu')"
    assert str(d) == "cpu"
    assert d.type == "cpu" and d.index is None
    assert d == T.device("cpu")
    assert hash(d) == hash(T.device("cpu"))
    assert {d: 1}[T.device("cpu")] == 1
    assert T.device(d) == d


def test_device_cuda_objects_can_be_named(T):
    assert repr(T.device("cuda:0")) == "device(type='cuda', index=0)"
    assert repr(T.device("cuda", 1)) == "device(type='cuda', index=1)"
    assert str(T.device("cuda:1")) == "cuda:1"


def test_device_is_not_equal_to_string(T):
    assert (T.device("cpu") == "cpu") is False


def test_tensor_device(T):
    x = T.ones(2, 3)
    assert x.device == T.device("cpu")
    assert x.device.type == "cpu"
    assert not x.is_cuda
    assert x.get_device() == -1


def test_the_meta_device_is_refused_saying_what_to_do():
    """The model-ensembling tutorial moves a copy to 'meta' before functional_call; disthook
    has no meta tensors and says so, naming the way that works (it said only "not
    available")."""
    import disthook
    from disthook.func import functional_call, stack_module_state

    models = [disthook.nn.Linear(3, 2) for _ in range(2)]
    for make in (lambda: models[0].to("meta"), lambda: disthook.empty(2, device="meta"),
                 lambda: disthook.ones(2).to(disthook.device("meta"))):
        with pytest.raises(NotImplementedError, match=r"no 'meta' device.*functional_call.*"
                           r"leave out the \.to\('meta'\)"):
            make()
    params, buffers = stack_module_state(models)
    x = disthook.ones(4, 3)
    out = disthook.func.vmap(lambda p, b: functional_call(models[0], (p, b), (x,)))(params,
                                                                                    buffers)
    for i, m in enumerate(models):
        np.testing.assert_allclose(out[i].detach().numpy(), m(x).detach().numpy(), rtol=1e-6)


def test_to_cpu_returns_self(T):
    x = T.ones(2, requires_grad=True)
    assert x.to("cpu") is x
    assert x.to(T.device("cpu")) is x
    assert x.to(x.device) is x
    assert x.cpu() is x
    y = x.to("cpu", T.float64)
    assert y.dtype == T.float64 and y.requires_grad
    z = x.to(device="cpu", dtype=T.float64)
    assert z.dtype == T.float64
    assert x.to(T.ones(1, dtype=T.float64)).dtype == T.float64


def test_factories_accept_cpu_device(T):
    assert T.ones(2, device="cpu").tolist() == [1.0, 1.0]
    assert T.zeros(2, device=T.device("cpu")).device == T.device("cpu")
    assert T.tensor([1.0], device="cpu").device.type == "cpu"
    assert T.arange(3, device="cpu").tolist() == [0, 1, 2]


def test_cuda_queries(T):
    assert T.cuda.is_available() is False
    assert T.cuda.device_count() == 0
    T.cuda.manual_seed(0)  # no-op without CUDA
    T.cuda.manual_seed_all(0)


def test_cuda_method_raises(T):
    with exact(AssertionError, "Torch not compiled with CUDA enabled"):
        T.ones(2).cuda()


def test_to_cuda_raises_assertion_error(T):
    with exact(AssertionError, "Torch not compiled with CUDA enabled"):
        T.ones(2).to("cuda")
    with exact(AssertionError, "Torch not compiled with CUDA enabled"):
        T.zeros(2, device="cuda")


def test_other_devices_fail_as_in_a_cpu_build(T):
    with exact(AssertionError, "Torch not compiled with CUDA enabled"):
        T.ones(2).to(T.device("cuda", 0))
    with exact(AssertionError, "Torch not compiled with CUDA enabled"):
        T.tensor([1.0], device="cuda:0")
    with exact(RuntimeError, "PyTorch is not linked with support for mps devices"):
        T.ones(2).to("mps")
    assert T.device("cpu") != "cpu" and "cpu" != T.device("cpu")


# ---- Size --------------------------------------------------------------------------------------

def test_size(T):
    x = T.ones(2, 3)
    assert x.shape == (2, 3)
    assert x.size() == (2, 3)
    assert T.Size([2, 3]) == (2, 3)
    assert x.shape == T.Size([2, 3])
    assert isinstance(x.shape, tuple) and isinstance(x.shape, T.Size)
    assert repr(x.shape) == "torch.Size([2, 3])"
    assert str(x.shape) == "torch.Size([2, 3])"
    assert repr(T.Size([])) == "torch.Size([])"
    assert repr(T.tensor(1.0).shape) == "torch.Size([])"
    assert x.shape != [2, 3]  # a tuple, not a list
    assert list(x.shape) == [2, 3] and tuple(x.shape) == (2, 3)
    assert hash(x.shape) == hash((2, 3))
    assert x.shape.numel() == 6


def test_size_indexing(T):
    x = T.ones(2, 3, 4)
    assert x.size(1) == 3
    assert x.size(-1) == 4
    assert x.shape[0] == 2
    assert type(x.shape[0]) is int
    assert type(x.size(0)) is int
    s = x.shape[1:]
    assert isinstance(s, T.Size) and repr(s) == "torch.Size([3, 4])"
    a, b, c = x.shape
    assert (a, b, c) == (2, 3, 4)
    with exact(IndexError, "Dimension out of range (expected to be in range of [-3, 2], but "
               "got 3)"):
        x.size(3)


def test_size_concatenation_stays_size(T):
    s = T.ones(2, 3).shape + (1,)
    assert isinstance(s, T.Size) and repr(s) == "torch.Size([2, 3, 1])"


def test_size_arithmetic_from_either_side(T):
    s = T.Size([2, 3])
    for r in ((1,) + s, s + s, s * 2, 2 * s):
        assert isinstance(r, T.Size)
    assert (1,) + s == (1, 2, 3) and s * 2 == (2, 3, 2, 3)
    with exact(TypeError, "can only concatenate tuple (not list) to torch.Size"):
        s + [1]


# ---- dtypes-------------------------------------------------------------------------------------

def test_dtype_printing_and_aliases(T):
    assert str(T.float32) == "torch.float32"
    assert repr(T.float32) == "torch.float32"
    assert repr(T.int64) == "torch.int64"
    assert str(T.bool) == "torch.bool"
    assert f"{T.ones(2).dtype}" == "torch.float32"
    assert T.float is T.float32 and T.double is T.float64
    assert T.long is T.int64 and T.int is T.int32 and T.half is T.float16
    assert T.float32.is_floating_point and not T.int64.is_floating_point
    assert T.float32.itemsize == 4 and T.float64.itemsize == 8
    assert T.get_default_dtype() == T.float32
    assert T.ones(2).dtype == T.float32


def test_legacy_type_strings(T):
    x = T.ones(2)
    assert x.type() == "torch.FloatTensor"
    assert x.double().type() == "torch.DoubleTensor"
    assert x.long().type() == "torch.LongTensor"
    assert x.int().type() == "torch.IntTensor"
    assert x.bool().type() == "torch.BoolTensor"
    assert x.type(T.float64).dtype == T.float64
    assert x.type("torch.DoubleTensor").dtype == T.float64


def test_metadata(T):
    x = T.ones(2, 3)
    assert x.dim() == 2 and x.ndim == 2
    assert x.numel() == 6
    assert x.element_size() == 4
    assert x.is_floating_point()
    assert T.is_tensor(x) and not T.is_tensor(1.0)
    assert isinstance(x, T.Tensor)


# ---- conversions--------------------------------------------------------------------------------

def test_numpy_requires_detach(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "Can't call numpy() on Tensor that requires grad. Use "
               "tensor.detach().numpy() instead."):
        x.numpy()
    n = x.detach().numpy()
    assert isinstance(n, np.ndarray) and n.dtype == np.float32
    assert n.tolist() == [1.0, 2.0]


def test_numpy_of_requires_grad_tensor_under_no_grad(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with T.no_grad():
        n = x.numpy()
    assert n.tolist() == [1.0, 2.0]


def test_numpy_shares_memory(T):
    t = T.tensor([1.0, 2.0, 3.0])
    n = t.numpy()
    n[0] = 10.0
    assert t.tolist() == [10.0, 2.0, 3.0]
    t.add_(1)
    assert n.tolist() == [11.0, 3.0, 4.0]
    assert T.ones(2, dtype=T.int64).numpy().dtype == np.int64


def test_item(T):
    assert T.tensor(2.5).item() == 2.5
    assert T.tensor([7.0]).item() == 7.0
    assert type(T.tensor(3).item()) is int
    assert type(T.tensor(3.0).item()) is float
    assert type(T.tensor(True).item()) is bool
    assert T.tensor([[4.0]], requires_grad=True).item() == 4.0
    with exact(RuntimeError, "a Tensor with 6 elements cannot be converted to Scalar"):
        T.ones(2, 3).item()


def test_tolist(T):
    assert T.tensor([[1.0, 2.0], [3.0, 4.0]]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert T.tensor(2.0).tolist() == 2.0
    assert T.tensor([1, 2]).tolist() == [1, 2]
    assert type(T.tensor([1, 2]).tolist()[0]) is int
    assert T.tensor([1.0], requires_grad=True).tolist() == [1.0]


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True")
def test_python_number_conversions(T):
    assert float(T.tensor(2.5)) == 2.5
    assert float(T.tensor([2.5])) == 2.5
    assert int(T.tensor(3.7)) == 3
    assert int(T.tensor([-3.7])) == -3
    assert bool(T.tensor([0.0])) is False
    assert bool(T.tensor(2.0)) is True
    assert float(T.tensor(1.5, requires_grad=True)) == 1.5
    assert [1, 2, 3][T.tensor(1)] == 2  # __index__
    with exact(RuntimeError, "Boolean value of Tensor with more than one value is ambiguous"):
        bool(T.ones(2))


def test_float_of_requires_grad_tensor_warns():
    # disthook only: torch emits this with TORCH_WARN_ONCE (first call per process), so a
    # torch run inside a shared test process is not reliable
    import warnings

    import disthook as T

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        float(T.tensor(1.5, requires_grad=True))
    assert any(issubclass(m.category, UserWarning) and str(m.message).startswith(
        "Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
        "behavior.") for m in w)


def test_other_scalar_conversions_of_requires_grad_tensor_do_not_warn(T):
    import warnings

    x = T.tensor(1.5, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert int(x) == 1 and x.item() == 1.5 and bool(x) and f"{x:.1f}" == "1.5"
    assert w == []


def test_float_of_multi_element_tensor(T):
    with exact(ValueError, "only one element tensors can be converted to Python scalars"):
        float(T.ones(2, 3))
    with exact(ValueError, "only one element tensors can be converted to Python scalars"):
        int(T.ones(2))


def test_len_and_iteration(T):
    x = T.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert len(x) == 2
    rows = list(x)
    assert len(rows) == 2 and rows[1].tolist() == [4.0, 5.0, 6.0]
    assert [v.item() for v in T.tensor([1.0, 2.0])] == [1.0, 2.0]
    with exact(TypeError, "len() of a 0-d tensor"):
        len(T.tensor(1.0))
    with exact(TypeError, "iteration over a 0-d tensor"):
        iter(T.tensor(1.0))


def test_iteration_keeps_graph(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    parts = list(x * 2)
    assert all(p.requires_grad for p in parts)
    assert parts[0].grad_fn.name() == "UnbindBackward0"
    (parts[0] * parts[2]).backward()
    assert x.grad.tolist() == [12.0, 0.0, 4.0]


# ---- pickling / deepcopy------------------------------------------------------------------------

def test_pickle_leaf(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    w.grad = T.tensor([0.5, 0.5])
    w2 = pickle.loads(pickle.dumps(w))
    assert w2.tolist() == [1.0, 2.0]
    assert w2.requires_grad and w2.is_leaf and w2.dtype == T.float32
    assert w2.grad is None  # pickling drops .grad
    i = pickle.loads(pickle.dumps(T.tensor([1, 2, 3])))
    assert i.dtype == T.int64 and i.tolist() == [1, 2, 3]


def test_pickle_preserves_shape_and_dtype(T):
    x = T.arange(6, dtype=T.float64).view(2, 3)
    y = pickle.loads(pickle.dumps(x))
    assert y.shape == (2, 3) and y.dtype == T.float64
    assert y.tolist() == x.tolist()


def test_deepcopy_leaf(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    w.grad = T.tensor([0.5, 0.5])
    w3 = copy.deepcopy(w)
    assert w3 is not w
    assert w3.tolist() == [1.0, 2.0]
    assert w3.requires_grad and w3.is_leaf
    assert w3.grad.tolist() == [0.5, 0.5] and w3.grad is not w.grad
    w3.detach().add_(1)  # independent storage
    assert w.tolist() == [1.0, 2.0]


def test_deepcopy_memo_keeps_aliasing(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    a, b = copy.deepcopy([w, w])
    assert a is b
    d = copy.deepcopy({"w": w, "x": T.ones(2)})
    assert d["w"].requires_grad and d["x"].tolist() == [1.0, 1.0]


def test_deepcopy_non_leaf_raises(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="^Only Tensors created explicitly by the user "
                       r"\(graph leaves\) support the deepcopy protocol at the moment\."):
        copy.deepcopy(w * 2)


def test_deepcopy_non_leaf_exact_message(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "Only Tensors created explicitly by the user (graph leaves) "
               "support the deepcopy protocol at the moment.  If you were attempting to "
               "deepcopy a module, this may be because of a torch.nn.utils.weight_norm usage, "
               "see https://github.com/pytorch/pytorch/pull/103001"):
        copy.deepcopy(w * 2)


# ---- random seeds-------------------------------------------------------------------------------

def test_manual_seed_reproducibility(T):
    T.manual_seed(0)
    a, b, c = T.randn(3), T.rand(2, 2), T.randint(0, 10, (4,))
    T.manual_seed(0)
    a2, b2, c2 = T.randn(3), T.rand(2, 2), T.randint(0, 10, (4,))
    assert T.equal(a, a2) and T.equal(b, b2) and T.equal(c, c2)
    T.manual_seed(1)
    assert not T.equal(T.randn(3), a)
    assert T.initial_seed() == 1


def test_manual_seed_returns_generator(T):
    g = T.manual_seed(3)
    assert type(g).__name__ == "Generator"
    assert g.initial_seed() == 3


def test_random_factories_dtypes_and_ranges(T):
    T.manual_seed(0)
    r = T.rand(100)
    assert r.dtype == T.float32 and 0.0 <= r.min().item() and r.max().item() < 1.0
    n = T.randn(2, 3)
    assert n.dtype == T.float32 and n.shape == (2, 3)
    i = T.randint(0, 10, (50,))
    assert i.dtype == T.int64 and 0 <= i.min().item() and i.max().item() < 10
    assert T.randint(5, (3,)).dtype == T.int64
    assert T.randint(3, 5, (2, 2)).shape == (2, 2)
    assert T.randn(2, dtype=T.float64).dtype == T.float64
    assert T.rand((2, 3)).shape == (2, 3)
    assert T.randn(2, requires_grad=True).requires_grad
    assert T.randn_like(T.ones(2, dtype=T.float64)).dtype == T.float64
    assert T.rand_like(T.ones(2)).shape == (2,)
    p = T.randperm(5)
    assert p.dtype == T.int64 and sorted(p.tolist()) == [0, 1, 2, 3, 4]


def test_rng_state_roundtrip(T):
    s = T.get_rng_state()
    assert s.dtype == T.uint8
    a = T.rand(3)
    T.set_rng_state(s)
    assert T.equal(T.rand(3), a)


def test_generator_objects_are_independent(T):
    T.manual_seed(5)
    x1 = T.randn(3)
    T.manual_seed(5)
    g = T.Generator()
    g.manual_seed(99)  # must not touch the global stream
    _ = T.randn(3, generator=g)  # nor draw from it
    assert T.equal(T.randn(3), x1)


RANDOM_DRAWS = {
    "rand": lambda T, g: T.rand(4, generator=g),
    "randn": lambda T, g: T.randn(4, generator=g),
    "randint": lambda T, g: T.randint(0, 100, (4,), generator=g),
    "randperm": lambda T, g: T.randperm(6, generator=g),
    "normal": lambda T, g: T.normal(0.0, 1.0, (4,), generator=g),
    "uniform_": lambda T, g: T.empty(4).uniform_(-1.0, 1.0, generator=g),
    "normal_": lambda T, g: T.empty(4).normal_(2.0, 0.5, generator=g),
}


@pytest.mark.parametrize("draw", list(RANDOM_DRAWS))
def test_generator_argument_gives_its_own_stream(T, draw):
    g = T.Generator().manual_seed(7)
    first = RANDOM_DRAWS[draw](T, g)
    T.manual_seed(5)
    x1 = T.rand(3)
    T.manual_seed(5)
    g.manual_seed(7)
    again = RANDOM_DRAWS[draw](T, g)
    assert T.equal(first, again)
    assert T.equal(T.rand(3), x1)  # the default stream did not move
    assert g.initial_seed() == 7 and T.initial_seed() == 5
    assert T.manual_seed(5) is T.default_generator


# ---- factory functions--------------------------------------------------------------------------

FACTORY_CASES = [
    # name, program, dtype name, value (None: not checked)
    ("tensor_float_list", lambda T: T.tensor([1.0, 2.0]), "float32", [1.0, 2.0]),
    ("tensor_int_list", lambda T: T.tensor([1, 2]), "int64", [1, 2]),
    ("tensor_bool", lambda T: T.tensor([True]), "bool", [True]),
    ("tensor_scalar", lambda T: T.tensor(3.5), "float32", 3.5),
    ("tensor_mixed", lambda T: T.tensor([1, 2.5]), "float32", [1.0, 2.5]),
    ("tensor_dtype", lambda T: T.tensor([1, 2], dtype=T.float32), "float32", [1.0, 2.0]),
    ("tensor_nested", lambda T: T.tensor([[1, 2], [3, 4]]), "int64", [[1, 2], [3, 4]]),
    ("tensor_empty", lambda T: T.tensor([]), "float32", []),
    ("tensor_np_float64", lambda T: T.tensor(np.array([1.0, 2.0])), "float64", [1.0, 2.0]),
    ("tensor_np_int32", lambda T: T.tensor(np.array([1, 2], dtype=np.int32)), "int32", [1, 2]),
    ("tensor_of_tensors", lambda T: T.tensor([T.tensor(1.0), T.tensor(2.0)]), "float32",
     [1.0, 2.0]),
    ("as_tensor_np", lambda T: T.as_tensor(np.array([1.0, 2.0])), "float64", [1.0, 2.0]),
    ("as_tensor_list", lambda T: T.as_tensor([1, 2]), "int64", [1, 2]),
    ("as_tensor_dtype", lambda T: T.as_tensor(np.array([1.0]), dtype=T.float32), "float32",
     [1.0]),
    ("from_numpy", lambda T: T.from_numpy(np.array([1.0, 2.0])), "float64", [1.0, 2.0]),
    ("from_numpy_i32", lambda T: T.from_numpy(np.arange(3, dtype=np.int32)), "int32",
     [0, 1, 2]),
    ("zeros", lambda T: T.zeros(2, 3), "float32", [[0.0] * 3] * 2),
    ("zeros_tuple", lambda T: T.zeros((2, 3)), "float32", [[0.0] * 3] * 2),
    ("zeros_list", lambda T: T.zeros([2]), "float32", [0.0, 0.0]),
    ("zeros_size", lambda T: T.zeros(T.Size([2])), "float32", [0.0, 0.0]),
    ("zeros_int", lambda T: T.zeros(2, dtype=T.int64), "int64", [0, 0]),
    ("ones", lambda T: T.ones(3), "float32", [1.0, 1.0, 1.0]),
    ("empty", lambda T: T.empty(2, 2), "float32", None),
    ("full_int", lambda T: T.full((2,), 7), "int64", [7, 7]),
    ("full_float", lambda T: T.full((2,), 7.0), "float32", [7.0, 7.0]),
    ("full_bool", lambda T: T.full((2,), True), "bool", [True, True]),
    ("full_dtype", lambda T: T.full((2,), 7, dtype=T.float32), "float32", [7.0, 7.0]),
    ("zeros_like", lambda T: T.zeros_like(T.ones(2, dtype=T.int64)), "int64", [0, 0]),
    ("ones_like", lambda T: T.ones_like(T.ones(2, dtype=T.float64)), "float64", [1.0, 1.0]),
    ("ones_like_dtype", lambda T: T.ones_like(T.ones(2), dtype=T.int32), "int32", [1, 1]),
    ("full_like", lambda T: T.full_like(T.ones(2), 3), "float32", [3.0, 3.0]),
    ("full_like_int", lambda T: T.full_like(T.ones(2, dtype=T.int64), 2.7), "int64", [2, 2]),
    ("empty_like", lambda T: T.empty_like(T.ones(3)), "float32", None),
    ("arange_int", lambda T: T.arange(5), "int64", [0, 1, 2, 3, 4]),
    ("arange_start", lambda T: T.arange(2, 5), "int64", [2, 3, 4]),
    ("arange_float", lambda T: T.arange(0.0, 1.0, 0.25), "float32", [0.0, 0.25, 0.5, 0.75]),
    ("arange_float_step", lambda T: T.arange(0, 2, 0.5), "float32", [0.0, 0.5, 1.0, 1.5]),
    ("arange_neg", lambda T: T.arange(5, 0, -2), "int64", [5, 3, 1]),
    ("arange_dtype", lambda T: T.arange(3, dtype=T.float32), "float32", [0.0, 1.0, 2.0]),
    ("linspace", lambda T: T.linspace(0, 1, 5), "float32", [0.0, 0.25, 0.5, 0.75, 1.0]),
    ("linspace_ints", lambda T: T.linspace(0, 10, 3), "float32", [0.0, 5.0, 10.0]),
    ("eye", lambda T: T.eye(2), "float32", [[1.0, 0.0], [0.0, 1.0]]),
    ("eye_rect", lambda T: T.eye(2, 3), "float32", [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
    ("eye_int", lambda T: T.eye(2, dtype=T.int64), "int64", [[1, 0], [0, 1]]),
    ("new_zeros", lambda T: T.ones(2, dtype=T.float64).new_zeros(3), "float64", [0.0] * 3),
    ("new_ones", lambda T: T.ones(2, dtype=T.int64).new_ones((2,)), "int64", [1, 1]),
    ("new_tensor", lambda T: T.ones(2, dtype=T.float64).new_tensor([1, 2]), "float64",
     [1.0, 2.0]),
    ("new_full", lambda T: T.ones(2).new_full((2,), 5), "float32", [5.0, 5.0]),
    ("legacy_Tensor_data", lambda T: T.Tensor([1, 2]), "float32", [1.0, 2.0]),
    ("legacy_Tensor_sizes", lambda T: T.Tensor(2, 3), "float32", None),
]


@pytest.mark.parametrize("case", FACTORY_CASES, ids=[c[0] for c in FACTORY_CASES])
def test_factory_dtypes(T, case):
    _, prog, dtype_name, value = case
    t = prog(T)
    assert t.dtype == getattr(T, dtype_name)
    assert t.is_leaf and not t.requires_grad
    if value is not None:
        assert t.tolist() == value


def test_factory_shapes(T):
    assert T.empty(2, 2).shape == (2, 2)
    assert T.Tensor(2, 3).shape == (2, 3)
    assert T.empty_like(T.ones(3, 1)).shape == (3, 1)
    assert T.zeros(0).shape == (0,)
    assert T.ones(()).shape == ()


def test_factory_requires_grad(T):
    for t in (T.zeros(2, requires_grad=True), T.ones(2, requires_grad=True),
              T.full((2,), 1.0, requires_grad=True), T.tensor([1.0], requires_grad=True),
              T.zeros_like(T.ones(2), requires_grad=True), T.arange(0.0, 2.0,
                                                                     requires_grad=True),
              T.linspace(0, 1, 3, requires_grad=True), T.eye(2, requires_grad=True),
              T.randn(2, requires_grad=True)):
        assert t.requires_grad and t.is_leaf and t.grad_fn is None
    # *_like does not inherit requires_grad
    assert not T.zeros_like(T.ones(2, requires_grad=True)).requires_grad


def test_from_numpy_shares_memory(T):
    arr = np.array([1.0, 2.0, 3.0])
    t = T.from_numpy(arr)
    arr[0] = 100.0
    assert t.tolist() == [100.0, 2.0, 3.0]
    t.add_(1)
    assert arr.tolist() == [101.0, 3.0, 4.0]
    a2 = T.as_tensor(arr)
    arr[1] = -1.0
    assert a2.tolist()[1] == -1.0  # as_tensor of an ndarray also shares
    c = T.tensor(arr)
    arr[2] = -5.0
    assert c.tolist()[2] == 4.0  # tensor() copies
    with pytest.raises(TypeError, match=r"expected np.ndarray \(got list\)"):
        T.from_numpy([1.0, 2.0])


def test_tensor_copies_tensor_input(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about copy construction
        b = T.tensor(a)
    assert b.is_leaf and not b.requires_grad
    b.add_(1)
    assert a.tolist() == [1.0, 2.0]
    assert T.as_tensor(a) is a


def test_float_of_requires_grad_tensor_under_no_grad_does_not_warn():
    # torch warns only in grad mode (a fresh process: no warning under no_grad or
    # inference_mode, then one in grad mode); a view taken under no_grad of a tensor that
    # requires grad requires grad too, and a stage's float(x[0, 0]) under no_grad warned here
    import warnings

    import disthook as T

    x = T.zeros(2, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with T.no_grad():
            float(x[0])
            complex(x[1])
        with T.inference_mode():
            float(x[0])
    assert [str(m.message) for m in w] == []
