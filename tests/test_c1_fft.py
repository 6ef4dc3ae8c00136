"""torch.fft's transforms: forward and gradient in complex128/float64 against central
differences and torch (values, dtypes, node names), with n/s, dim and norm; float32 in and
complex64 out; torch's errors."""
from __future__ import annotations

import numpy as np
import pytest
from test_c1_complex import _lib, check

import disthook

try:
    import torch
except ImportError:
    torch = None


@pytest.mark.parametrize("fn, inputs", [
    (lambda a: _lib(a).fft.fft(a), (("c", (3, 5)),)),
    (lambda a: _lib(a).fft.fft(a, n=7, norm="ortho"), (("c", (3, 5)),)),
    (lambda a: _lib(a).fft.fft(a, n=3, dim=0, norm="forward"), (("c", (4, 5)),)),
    (lambda a: _lib(a).fft.fft(a), ((3, 5),)),
    (lambda a: _lib(a).fft.ifft(a), ((3, 5),)),
    (lambda a: _lib(a).fft.ifft(a, norm="ortho"), (("c", (3, 5)),)),
    (lambda a: _lib(a).fft.rfft(a), ((3, 6),)),
    (lambda a: _lib(a).fft.rfft(a, n=5, norm="forward"), ((3, 6),)),
    (lambda a: _lib(a).fft.rfft(a, n=9), ((3, 6),)),
    (lambda a: _lib(a).fft.irfft(a), (("c", (3, 4)),)),
    (lambda a: _lib(a).fft.irfft(a, n=7, norm="ortho"), (("c", (3, 4)),)),
    (lambda a: _lib(a).fft.irfft(a, n=4), (("c", (3, 6)),)),
    (lambda a: _lib(a).fft.irfft(a, n=5, norm="forward", dim=0), (("c", (3, 4)),)),
    (lambda a: _lib(a).fft.fft2(a), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.ifft2(a, s=(5, 2)), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.rfft2(a), ((2, 3, 4),)),
    (lambda a: _lib(a).fft.irfft2(a), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.irfft2(a, s=(4, 5)), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.fftn(a), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.ifftn(a, dim=(0, 2), norm="ortho"), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.rfftn(a, s=(3, 3)), ((2, 3, 4),)),
    (lambda a: _lib(a).fft.irfftn(a), (("c", (2, 3, 4)),)),
    (lambda a: _lib(a).fft.irfftn(a, dim=(0,)), (("c", (3, 4)),)),
    (lambda a: _lib(a).fft.irfft(_lib(a).fft.rfft(a), n=6), ((3, 6),)),
])
def test_transform_and_its_gradient_match_torch(fn, inputs):
    check(fn, *inputs)


@pytest.mark.skipif(torch is None, reason="compares with torch")
@pytest.mark.parametrize("expr", [
    "t.fft.fft(x)", "t.fft.rfft(x)", "t.fft.irfft(t.fft.rfft(x))", "t.fft.fft2(x.double())",
    "t.fft.fft(t.arange(4))", "t.fft.irfft(x)", "t.fft.rfftn(x, s=(3, 3))",
    "t.fft.fft(x.to(t.cfloat), n=8)",
])
def test_dtypes_of_single_precision_and_integers_match_torch(expr):
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    got = eval(expr, {"t": disthook, "x": disthook.tensor(x)})
    want = eval(expr, {"t": torch, "x": torch.tensor(x)})
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: disthook.fft.fft(x, norm="bad"), RuntimeError,
     'Invalid normalization mode: "bad"'),
    (lambda x: disthook.fft.rfft(x.to(disthook.cfloat)), RuntimeError,
     "rfft expects a real input tensor, but got ComplexFloat"),
    (lambda x: disthook.fft.fft(x, n=0), RuntimeError,
     r"Invalid number of data points \(0\) specified"),
    (lambda x: disthook.fft.fft(x, dim=5), IndexError, "Dimension out of range"),
    (lambda x: disthook.fft.fftn(x, s=(3,), dim=(0, 1)), RuntimeError,
     "dim and shape arguments must have the same length"),
    (lambda x: disthook.fft.fft(x.half()), RuntimeError, "Unsupported dtype Half"),
    (lambda x: disthook.fft.hfft(x), NotImplementedError, "not supported by disthook"),
])
def test_errors_are_torchs(call, error, message):
    with pytest.raises(error, match=message):
        call(disthook.ones(4, 6))


def test_a_spectral_filter_trains_as_in_torch():
    """An FNO-style layer: rfft2, a complex weight on the low modes, irfft2 back; a few SGD
    steps on the complex parameter give the same losses as torch."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 8))
    w0 = (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))) / 3
    y = rng.standard_normal((2, 8, 8))

    def train(t):
        w = t.nn.Parameter(t.tensor(w0))
        opt = t.optim.SGD([w], lr=0.1)
        xs, ys, losses = t.tensor(x), t.tensor(y), []
        for _ in range(3):
            spec = t.fft.rfft2(xs)
            out = t.zeros_like(spec)
            out[:, :3, :3] = spec[:, :3, :3] * w
            loss = ((t.fft.irfft2(out, s=(8, 8)) - ys) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        return losses, w.detach().numpy()

    got = train(disthook)
    assert got[0][-1] < got[0][0]
    if torch is not None:
        want = train(torch)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-10)
