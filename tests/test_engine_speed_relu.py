"""ReLU's gradient is a mask applied to the gradient's bits (ops.elementwise.ReluGrad); it must still be torch's
threshold_backward: 0 where the output is <= 0 whatever the incoming gradient (inf, NaN),
the gradient where the output is NaN, and differentiable again under create_graph."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def _relu_grad(lib, x, g, inplace=False):
    t = lib.tensor(x, requires_grad=True)
    y = lib.nn.functional.relu(t * 1, inplace=inplace)
    y.backward(lib.tensor(g))
    return t.grad.numpy()


@pytest.mark.parametrize("inplace", [False, True])
def test_relu_gradient_with_inf_nan_gradients_and_nan_outputs_is_torchs(inplace):
    x = np.array([np.nan, -1.0, 2.0, 0.0, -3.0, 4.0, -0.0])
    g = np.array([1.0, np.inf, np.nan, np.nan, -np.inf, np.inf, np.nan])
    with np.errstate(invalid="raise"):  # and no warning from inside the op
        mine = _relu_grad(disthook, x, g, inplace)
    np.testing.assert_array_equal(mine, _relu_grad(torch, x, g, inplace))


def test_relu_double_backward_has_torchs_node_and_gradients():
    x_np, v_np = np.array([1.0, -1.0, 0.5]), np.array([2.0, 3.0, 4.0])
    out = []
    for lib in (disthook, torch):
        x = lib.tensor(x_np, requires_grad=True)
        v = lib.tensor(v_np, requires_grad=True)
        (g,) = lib.autograd.grad(x.relu(), x, v, create_graph=True)
        names = [type(n).__name__ for n, _ in g.grad_fn.next_functions]
        (gv,) = lib.autograd.grad((g * g).sum(), v)
        out.append((g.grad_fn.name(), names, g.detach().numpy(), gv.numpy()))
    (name, names, g, gv), (t_name, t_names, t_g, t_gv) = out
    assert (name, names) == (t_name, t_names)
    np.testing.assert_array_equal(g, t_g)
    np.testing.assert_array_equal(gv, t_gv)


@pytest.mark.parametrize("name", ["hardtanh", "relu6", "hardsigmoid", "hardswish",
                                  "hardshrink", "softshrink", "threshold"])
def test_flat_regions_of_other_activations_give_zero_for_inf_and_nan_gradients(name):
    """As ReLU: where the activation is flat, torch's gradient is 0 whatever comes in."""
    x = np.array([-5.0, -3.0, -0.5, 0.5, 3.0, 5.0, -30.0, 0.0])
    g = np.array([np.inf, np.nan, np.inf, 2.0, 3.0, np.inf, -np.inf, np.nan])
    grads = []
    for lib in (disthook, torch):
        t = lib.tensor(x, requires_grad=True)
        f = getattr(lib.nn.functional, name)
        (f(t, 0.1, 20.0) if name == "threshold" else f(t)).backward(lib.tensor(g))
        grads.append(t.grad.numpy())
    # hardsigmoid's 1/6 is a float constant in torch's kernel: equal to its rounding
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-7, atol=0)


@pytest.mark.parametrize("bounds", [(0.0, 1.0), (0.0, None), (None, 1.0)])
def test_clamp_gives_zero_outside_its_bounds_for_inf_and_nan_gradients(bounds):
    """The same rule for clamp (and clamp_min, clamp_max), with number bounds."""
    x = np.array([-1.0, 0.5, 2.0, -3.0, 0.0])
    g = np.array([np.inf, np.nan, -np.inf, np.nan, 1.0])
    grads = []
    for lib in (disthook, torch):
        t = lib.tensor(x, requires_grad=True)
        lib.clamp(t, *bounds).backward(lib.tensor(g))
        grads.append(t.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_relu_gradient_is_plus_zero_where_it_does_not_pass(dtype):
    """torch's threshold_backward writes 0 where the output is <= 0: +0, never the -0 that
    a negative gradient times a mask of 0 gives."""
    x = np.array([-1.0, -2.0, 0.0, -0.0, 3.0, np.nan], dtype=dtype)
    g = np.array([-1.0, -6.0, -2.0, -3.0, -4.0, -5.0], dtype=dtype)  # no inf: no NaN
    mine, theirs = _relu_grad(disthook, x, g), _relu_grad(torch, x, g)
    np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(np.signbit(mine), np.signbit(theirs))
    assert mine.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7,), (3, 37), (2, 5, 130), (4, 1)])
def test_relu_output_is_torchs_bit_for_bit(dtype, shape):
    """ReLU is ``x < 0 ? 0 : x``: -0.0 stays -0.0 and NaNs of either sign pass (the engine
    takes a maximum with a row of zeros: numpy's vector and scalar loops both checked)."""
    special = [-0.0, np.nan, -np.nan, -np.inf, np.inf, 1.5, -1.5, 1e-30, -1e-30, 0.0]
    n = int(np.prod(shape))
    x = np.array((special * (n // len(special) + 1))[:n], dtype=dtype).reshape(shape)
    for out in (disthook.tensor(x).relu(), disthook.nn.functional.relu(disthook.tensor(x))):
        mine = out.numpy()
        theirs = torch.relu(torch.from_numpy(x)).numpy()
        assert mine.dtype == theirs.dtype
        np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8))
    inplace = disthook.tensor(x)
    inplace.relu_()
    np.testing.assert_array_equal(inplace.numpy().view(np.uint8), theirs.view(np.uint8))


@pytest.mark.parametrize("shape", [(4, 8, 6, 6), (2, 3, 26, 26), (16, 1024), (3, 256), (300,),
                                   (5, 7), (2, 70000)])
def test_relu_in_long_rows_is_torchs_bit_for_bit(shape):
    """A C-ordered input is taken in rows of a long power of two where its size allows
    (ops.elementwise._relu): the values, -0.0 and NaNs of either sign, the shape and a
    result of its own memory are as before and as torch's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    flat = x.reshape(-1)
    flat[:4] = [-0.0, np.nan, -np.nan, 0.0]
    for dtype in (np.float32, np.float64):
        mine = disthook.tensor(x.astype(dtype)).relu()
        theirs = torch.tensor(x.astype(dtype)).relu().numpy()
        got = mine.numpy()
        assert got.shape == theirs.shape and got.flags.c_contiguous
        assert mine.storage_offset() == 0 and got.base is None
        bits = np.dtype(f"u{got.itemsize}")
        np.testing.assert_array_equal(got.view(bits), theirs.view(bits))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(("shape", "transposed"), [((), False), ((7,), False), ((3, 37), False),
                                                   ((3, 37), True), ((64, 130), True)])
def test_relu_gradient_masks_in_its_own_width_and_is_torchs_bit_for_bit(monkeypatch, dtype,
                                                                        shape, transposed):
    """ReLU's gradient ANDs the gradient's bits with a mask of their own width (numpy's
    cast buffers for a narrow mask cost a pass), and is still torch's threshold_backward:
    the gradient's bits where the output is > 0 or NaN (either sign), +0 elsewhere
    (-0.0 and +0.0 outputs, inf and NaN gradients), for a transposed gradient too."""
    special = [-0.0, np.nan, -np.nan, -np.inf, np.inf, 1.5, -1.5, 1e-30, -1e-30, 0.0, 3.0]
    n = int(np.prod(shape))
    rng = np.random.default_rng(1)
    x = np.array((special * (n // len(special) + 1))[:n], dtype=dtype).reshape(shape)
    g = np.array(rng.permutation(special * (n // len(special) + 1))[:n],
                 dtype=dtype).reshape(shape)
    def seed(lib):  # the gradient as given, or a transposed view of its own transpose
        return lib.tensor(g.T.copy()).t() if transposed else lib.tensor(g)

    operands = []
    real_and = np.bitwise_and

    def bitwise_and(a, b, *args, **kwargs):
        operands.append((np.asarray(a).dtype, np.asarray(b).dtype))
        return real_and(a, b, *args, **kwargs)

    monkeypatch.setattr(np, "bitwise_and", bitwise_and)
    t = disthook.tensor(x, requires_grad=True)
    t.relu().backward(seed(disthook))
    mine = t.grad.numpy()
    monkeypatch.undo()
    assert operands and all(a == b for a, b in operands), operands
    tt = torch.tensor(x, requires_grad=True)
    tt.relu().backward(seed(torch))
    theirs = tt.grad.numpy()
    bits = np.dtype(f"u{mine.itemsize}")
    assert mine.shape == theirs.shape and mine.dtype == theirs.dtype
    np.testing.assert_array_equal(mine.view(bits), theirs.view(bits))
