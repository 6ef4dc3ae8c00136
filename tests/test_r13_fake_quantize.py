"""``torch.fake_quantize_per_tensor_affine`` / ``fake_quantize_per_channel_affine``, the float ops
QAT code rounds weights and activations with: torch's values (half-way points round to even,
``1 / scale`` taken in float32, float64 computed in float64), the straight-through gradient
(zero where the grid value was clamped), and torch's errors. They were refused as "quantized
tensors are not modelled", though they take and give float tensors."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def _values(lib, dtype):
    rs = np.random.RandomState(0)
    grid = np.arange(-40, 41) * 0.05  # half-way points of a 0.1 grid among them
    x = np.concatenate([grid, rs.randn(60) * 3, [-13.0, 13.0]])
    return lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)


def _run(lib, dtype, call):
    x = _values(lib, dtype)
    y = call(lib, x)
    y.backward(lib.arange(y.numel(), dtype=y.dtype).reshape(y.shape))
    return y.detach().float().numpy(), x.grad.float().numpy(), type(y.grad_fn).__name__


PER_TENSOR = {
    "numbers": lambda lib, x: lib.fake_quantize_per_tensor_affine(x, 0.1, 3, -128, 127),
    "uint8 range": lambda lib, x: lib.fake_quantize_per_tensor_affine(x, 0.07, 10, 0, 255),
    "tensors": lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, lib.tensor(0.1), lib.tensor(3), 0, 15),
    "number and tensor": lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, 0.2, lib.tensor(1), -4, 3),
    "float zero point": lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, lib.tensor([0.1]), lib.tensor([2.7]), 0, 15),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", PER_TENSOR)
def test_per_tensor_as_torch(name, dtype):
    got = _run(disthook, dtype, PER_TENSOR[name])
    want = _run(torch, dtype, PER_TENSOR[name])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == "FakeQuantizePerTensorAffineCachemaskBackward0"


def _per_channel(axis, zp_dtype):
    def call(lib, x):
        w = x[:120].reshape(4, 5, 6) if axis != 1 else x[:120].reshape(5, 4, 6)
        n = w.shape[axis]
        scale = lib.tensor([0.05, 0.11, 0.2, 0.3, 0.07, 0.13][:n])
        zp = lib.tensor([0, 1, -2, 3][:n] + [0] * (n - 4), dtype=getattr(lib, zp_dtype))
        if zp_dtype != "int32":
            zp = zp + 0.5
        return lib.fake_quantize_per_channel_affine(w, scale, zp, axis, -8, 7)
    return call


@pytest.mark.parametrize("zp_dtype", ["int32", "float32", "float16"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_channel_as_torch(axis, zp_dtype):
    call = _per_channel(axis, zp_dtype)
    got, want = _run(disthook, "float32", call), _run(torch, "float32", call)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == "FakeQuantizePerChannelAffineCachemaskBackward0"


def test_a_qat_linear_trains_as_in_torch():
    def train(lib):
        lin = lib.nn.Linear(6, 3)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(np.linspace(-1, 1, 18).reshape(3, 6),
                                        dtype=lib.float32))
            lin.bias.fill_(0.1)
        opt = lib.optim.SGD(lin.parameters(), lr=0.1)
        x = lib.tensor(np.random.RandomState(1).randn(8, 6), dtype=lib.float32)
        for _ in range(3):
            opt.zero_grad()
            s = lin.weight.detach().abs().amax(dim=1) / 7
            w = lib.fake_quantize_per_channel_affine(
                lin.weight, s, lib.zeros(3, dtype=lib.int32), 0, -8, 7)
            out = lib.fake_quantize_per_tensor_affine(x @ w.T + lin.bias, 0.05, 0, -128, 127)
            out.pow(2).mean().backward()
            opt.step()
        return lin.weight.detach().numpy()

    np.testing.assert_allclose(train(disthook), train(torch), rtol=1e-6, atol=1e-7)


ERRORS = {
    "min over max": (RuntimeError, lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, 0.1, 3, 5, 1)),
    "zero point outside": (RuntimeError, lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, 0.1, 300, 0, 255)),
    "integer input": (NotImplementedError, lambda lib, x: lib.fake_quantize_per_tensor_affine(
        lib.arange(3), 0.1, 3, 0, 255)),
    "two scales": (RuntimeError, lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, lib.tensor([0.1, 0.2]), lib.tensor([0, 0]), 0, 255)),
    "scale requires grad": (RuntimeError, lambda lib, x: lib.fake_quantize_per_tensor_affine(
        x, lib.tensor(0.1, requires_grad=True), lib.tensor(0), 0, 255)),
    "negative axis": (RuntimeError, lambda lib, x: lib.fake_quantize_per_channel_affine(
        x.reshape(2, 3), lib.ones(3), lib.zeros(3, dtype=lib.int32), -1, 0, 7)),
    "axis": (IndexError, lambda lib, x: lib.fake_quantize_per_channel_affine(
        x.reshape(2, 3), lib.ones(2), lib.zeros(2, dtype=lib.int32), 2, 0, 7)),
    "channels": (RuntimeError, lambda lib, x: lib.fake_quantize_per_channel_affine(
        x.reshape(2, 3), lib.ones(3), lib.zeros(3, dtype=lib.int32), 0, 0, 7)),
    "double scale": (RuntimeError, lambda lib, x: lib.fake_quantize_per_channel_affine(
        x.reshape(2, 3), lib.ones(2, dtype=lib.float64), lib.zeros(2, dtype=lib.int32), 0, 0,
        7)),
    "long zero point": (RuntimeError, lambda lib, x: lib.fake_quantize_per_channel_affine(
        x.reshape(2, 3), lib.ones(2), lib.zeros(2, dtype=lib.int64), 0, 0, 7)),
    "channel zero point outside": (RuntimeError, lambda lib, x: (
        lib.fake_quantize_per_channel_affine(x.reshape(2, 3), lib.ones(2),
                                             lib.tensor([0, 9], dtype=lib.int32), 0, 0, 7))),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_as_torch(name):
    """torch's exception type (not a refusal's NotImplementedError, a RuntimeError too) and
    its words, but for the integer input, where torch names a kernel of its own."""
    kind, call = ERRORS[name]
    said = []
    for lib in (torch, disthook):
        with pytest.raises(kind) as info:
            call(lib, lib.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
        assert type(info.value) is kind
        said.append(" ".join(str(info.value).split()))
    if name != "integer input":
        assert said[1] == said[0]


@pytest.mark.parametrize("name", ["ao.quantization.FakeQuantize",
                                  "ao.quantization.MovingAverageMinMaxObserver",
                                  "quantization.prepare_qat"])
def test_the_quantization_workflow_refusal_names_the_fake_quantize_functions(name):
    obj = disthook
    for part in name.split("."):
        obj = getattr(obj, part)
    with pytest.raises(NotImplementedError, match="fake_quantize_per_tensor_affine") as info:
        obj()
    assert f"torch.{name} is not implemented" in str(info.value)
