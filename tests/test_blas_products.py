"""Products on MKL (``disthook[mkl]``): the same values as numpy's for every way an operand can
lie in memory that MKL reads in place, numpy's product wherever it cannot (the call says so by
returning None), a C-ordered result of the operands' dtype, and a switch back to numpy."""
import os
import subprocess
import sys

import numpy as np
import pytest

import disthook as torch
from disthook import _blas, nn
from disthook.ops import linalg

mkl = pytest.mark.skipif(not _blas.backend().startswith("mkl"),
                         reason="needs disthook[mkl] (pip install 'disthook[mkl]')")


def close(got, expected, inner, dtype, **kw):
    """Equal to the rounding of two summation orders over ``inner`` terms of order 1."""
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, expected, rtol=4 * eps * inner ** 0.5,
                               atol=4 * eps * inner, **kw)


def operands(rows, inner, cols, dtype, layout, seed=0):
    """``x`` (rows x inner) and ``y`` (inner x cols) laid out as ``layout`` says: "C" for
    row-major, "T" for a transposed row-major array, "slice" for a part of a wider array."""
    rng = np.random.default_rng(seed)
    lx, ly = layout

    def make(shape, how):
        if how == "C":
            return rng.standard_normal(shape).astype(dtype)
        if how == "T":
            return rng.standard_normal(shape[::-1]).astype(dtype).T
        wide = rng.standard_normal((shape[0] + 3, shape[1] + 5)).astype(dtype)
        return wide[2:2 + shape[0], 1:1 + shape[1]]

    return make((rows, inner), lx), make((inner, cols), ly)


@mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", [("C", "C"), ("C", "T"), ("T", "C"), ("T", "T"),
                                    ("slice", "C"), ("C", "slice"), ("slice", "T"),
                                    ("T", "slice")])
@pytest.mark.parametrize("rows", [1, 8, _blas.SMALL_ROWS, _blas.SMALL_ROWS + 1, 200])
def test_mkl_gives_numpys_product_for_every_layout_it_reads(dtype, layout, rows):
    inner = max(64, _blas.MIN_WORK // (rows * 1100) + 1)
    x, y = operands(rows, inner, 1100, dtype, layout)
    got = _blas.gemm(x, y)
    assert got is not None, f"MKL should take {layout} operands at {rows} rows"
    assert got.flags.c_contiguous and got.dtype == dtype and got.shape == (rows, 1100)
    close(got, x @ y, inner, dtype)


@mkl
def test_layouts_mkl_cannot_read_in_place_go_to_numpy():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((256, 512)).astype(np.float32)
    w = rng.standard_normal((512, 256)).astype(np.float32)
    refused = {
        "negative stride": (big[::-1], w),
        "every other column": (rng.standard_normal((256, 1024)).astype(np.float32)[:, ::2], w),
        "broadcast rows": (np.broadcast_to(big[:1], (256, 512)), w),
        "two dtypes": (big, w.astype(np.float64)),
        "integers": (big.astype(np.int64), w.astype(np.int64)),
        "complex": (big.astype(np.complex64), w.astype(np.complex64)),
        "too small to pay": (big[:4, :64], w[:64, :64]),
    }
    for name, (x, y) in refused.items():
        assert _blas.gemm(x, y) is None, name
        expected = x @ y
        got = linalg._product(x, y)
        assert got.dtype == expected.dtype, name
        close(got, expected, x.shape[1], np.float32, err_msg=name)


@mkl
def test_nan_and_inf_reach_the_same_places_as_in_numpy():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 300)).astype(np.float32)
    y = rng.standard_normal((300, 200)).astype(np.float32)
    x[3, 7], x[10, :] = np.nan, np.inf
    y[:, 5] = 0.0  # inf * 0 is nan, as in numpy
    with np.errstate(invalid="ignore"):
        got, expected = _blas.gemm(x, y), x @ y
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))


@mkl
@pytest.mark.parametrize("rows", [16, 128])
def test_a_linear_layers_values_and_gradients_on_mkl_are_numpys(rows, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 512)).astype(np.float32)

    def run():
        torch.manual_seed(0)
        layer = nn.Linear(512, 384)
        a = torch.tensor(x, requires_grad=True)
        out = layer(a)
        out.square().sum().backward()
        return [t.detach().numpy().copy() for t in (out, a.grad, layer.weight.grad,
                                                    layer.bias.grad)]

    on_mkl = run()
    monkeypatch.setattr(_blas, "gemm", lambda x, y: None)
    on_numpy = run()
    for name, got, expected in zip(("output", "input grad", "weight grad", "bias grad"),
                                   on_mkl, on_numpy):
        assert got.flags.c_contiguous == expected.flags.c_contiguous, name
        close(got, expected, 512 * rows, np.float32, err_msg=name)


@mkl
def test_set_num_threads_sets_mkls_count():
    code = ("import ctypes, disthook, numpy as np\n"
            "from disthook import _blas\n"
            "a = np.ones((256, 256), np.float32)\n"
            "assert _blas.gemm(a, a) is not None\n"
            "disthook.set_num_threads(2)\n"
            "lib = _blas._state['lib']\n"
            "print(lib.MKL_Get_Max_Threads())\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MKL_NUM_THREADS", "OMP_NUM_THREADS", "MKL_THREADING_LAYER")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"


def test_disthook_blas_numpy_keeps_every_product_on_numpy():
    code = ("import numpy as np\n"
            "from disthook import _blas\n"
            "from disthook.ops import linalg\n"
            "a = np.random.default_rng(0).standard_normal((300, 300))\n"
            "assert _blas.gemm(a, a) is None\n"
            "assert not _blas.matmul_into(a, a[None], np.empty((1, 300, 300)))\n"
            "assert (linalg._product(a, a) == a @ a).all()\n"
            "print(_blas.backend())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, DISTHOOK_BLAS="numpy"), check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "numpy (DISTHOOK_BLAS=numpy)"


def test_set_num_threads_refuses_what_torch_refuses():
    with pytest.raises(RuntimeError, match="set_num_threads expects a positive integer"):
        torch.set_num_threads(0)
    before = torch.get_num_threads()
    torch.set_num_threads(before)
    assert torch.get_num_threads() == before


@mkl
def test_operands_that_cannot_be_multiplied_get_numpys_error_not_a_read_past_them():
    x = np.ones((64, 300), np.float32)
    y = np.ones((301, 200), np.float32)
    assert _blas.gemm(x, y) is None
    with pytest.raises(ValueError, match="matmul"):
        linalg._product(x, y)


def test_address_is_where_numpy_says_an_array_starts():
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    for a in (base, base[2:, 3:], base[::-1], base.T, base[:, ::-2], base[:0],
              np.zeros(0, np.float32), np.ones(()), base.view(np.uint8)[5:]):
        assert _blas.address(a) == a.ctypes.data


@pytest.mark.parametrize("make", [
    lambda: torch.randn(128, 1024), lambda: torch.zeros(300, 301, dtype=torch.float64),
    lambda: torch.empty(70000), lambda: torch.tensor(np.ones((257, 129), np.float32)),
    lambda: torch.ones(64, 64, 9), lambda: nn.Linear(1024, 512).weight])
def test_large_tensors_from_factories_start_on_a_64_byte_line_and_own_their_memory(make):
    """Where MKL reads operands fastest (torch aligns the same way); the copy that aligns
    them is its own storage: offset 0, the storage's size the tensor's, views and saves as
    for any tensor."""
    t = make()
    assert _blas.address(t._data) % 64 == 0
    assert t.storage_offset() == 0
    assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
    view = t.reshape(-1)[5:]
    assert view.storage_offset() == 5 and view.untyped_storage().data_ptr() == t.data_ptr()
    with torch.no_grad():
        view[0] = 7
    assert t.reshape(-1)[5].item() == 7
    buf = __import__("io").BytesIO()
    torch.save({"t": t, "view": view}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["view"].storage_offset() == 5
    assert loaded["view"].untyped_storage().data_ptr() == loaded["t"].untyped_storage().data_ptr()
    np.testing.assert_array_equal(loaded["t"].detach().numpy(), t.detach().numpy())


def test_small_tensors_and_arrays_given_to_from_numpy_are_not_copied():
    arr = np.ones((300, 300), np.float32)[1:]  # 16 bytes past a line, large
    assert torch.from_numpy(arr)._data is arr
    small = torch.tensor([1.0, 2.0])
    assert small._data.base is None


def _off_the_line(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` 16 bytes past a 64-byte line, as a received frame may lie."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = -_blas.address(raw) % 64 + 16
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def test_a_workers_copy_of_a_received_weight_lies_as_the_clients_does():
    """Stages built on a worker (pickled with code, or as data) own aligned copies of the
    received frames: the products read them as fast as one process reads its own."""
    from disthook.distributed import shipping, spec

    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 4))
    code, arrays = shipping.dumps(model)
    loaded = shipping.loads(code, [_off_the_line(a) for a in arrays])
    tree = spec.module_spec(model)

    def off(node):
        if isinstance(node, np.ndarray):
            return _off_the_line(node)
        if isinstance(node, dict):
            return {k: off(v) for k, v in node.items()}
        if isinstance(node, list):
            return [off(v) for v in node]
        return node

    built = spec.build_module(off(tree))
    for module in (loaded, built):
        weight = module[0].weight
        assert _blas.address(weight._data) % 64 == 0 and weight.storage_offset() == 0
        np.testing.assert_array_equal(weight.detach().numpy(), model[0].weight.detach().numpy())
        small = module[2].weight  # under 64 KiB: an ordinary copy
        np.testing.assert_array_equal(small.detach().numpy(), model[2].weight.detach().numpy())


@mkl
def test_a_products_result_starts_on_a_line_and_becomes_grad_without_a_copy():
    """MKL writes a large result faster on a 64-byte line (5-7%); the result is still a
    root of its own memory, so a leaf's first gradient takes it as torch takes its own."""
    x = torch.randn(128, 1024)
    w = torch.randn(1024, 1024, requires_grad=True)
    out = x @ w
    assert _blas.address(out._data) % 64 == 0 and _blas.owns_memory(out._data)
    assert out.storage_offset() == 0 and out.untyped_storage().nbytes() == out.numel() * 4
    seen = []
    acc = w.view_as(w).grad_fn.next_functions[0][0]
    acc.register_hook(lambda gi, go: seen.append(go[0]))
    out.backward(torch.randn(128, 1024))
    assert w.grad.data_ptr() == seen[0].data_ptr() and _blas.address(w.grad._data) % 64 == 0
    small = torch.randn(32, 1024) @ torch.randn(1024, 8)  # 32 KiB: numpy's, unaligned
    assert _blas.owns_memory(small._data)


# ---- stacks of matrices (a convolution's products) -------------------------------------------

def _stack(shape, dtype, seed, transposed=False):
    rng = np.random.default_rng(seed)
    if transposed:  # the last two dims swapped in memory, as a convolution's columns read
        return rng.standard_normal((*shape[:-2], shape[-1], shape[-2])).astype(dtype).swapaxes(-1, -2)
    return rng.standard_normal(shape).astype(dtype)


@mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", [
    ((64, 289), (3, 289, 200), (3, 64, 200)),  # one weight against each sample's columns
    ((2, 64, 300), (3, 2, 300, 200), (3, 2, 64, 200)),  # per group, broadcast over samples
    ((3, 1, 64, 300), (1, 2, 300, 200), (3, 2, 64, 200)),  # both broadcast
])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("accumulate", [False, True])
def test_a_stack_of_products_on_mkl_is_numpys_matmul(dtype, shapes, transposed, accumulate):
    sx, sy, so = shapes
    x, y = _stack(sx, dtype, 0), _stack(sy, dtype, 1, transposed)
    start = _stack(so, dtype, 2)
    out = start.copy()
    assert _blas.matmul_into(x, y, out, accumulate=accumulate)
    expected = np.matmul(x, y) + (start if accumulate else 0)
    close(out, expected, sx[-1], dtype)


@mkl
def test_stacks_mkl_cannot_take_are_left_untouched_for_numpy():
    x, y = _stack((64, 300), np.float32, 0), _stack((2, 300, 200), np.float32, 1)
    out = np.full((2, 64, 200), 7, np.float32)
    frozen = out.copy()
    frozen.flags.writeable = False
    shared = np.zeros((2, 300, 300), np.float32)
    refused = [
        (x.astype(np.float64), y, out),  # mixed dtypes
        (x, y[:, :, ::2], out[:, :, :100]),  # a right operand with gaps in both dims
        (x[:2, :2], y[:, :2, :2], out[:, :2, :2]),  # too small for a call to pay
        (x, _stack((3, 300, 200), np.float32, 1), out),  # 3 samples against 2 outputs
        (x, shared[:, :, :200], shared[:, :64, :200]),  # the result over an operand
        (x, y, frozen),
        (x, y[:0], out[:0]),  # no matrices at all
    ]
    for a, b, o in refused:
        before = o.copy()
        assert not _blas.matmul_into(a, b, o)
        np.testing.assert_array_equal(o, before)


@mkl
@pytest.mark.parametrize("accumulate", [False, True])
def test_a_plan_repeats_matmul_intos_products_over_other_slices(accumulate):
    """A plan is checked on one batch's slices of a few buffers and run on the others': each
    run gives ``matmul_into``'s bits for that batch, and a plan is refused where
    ``matmul_into`` refuses."""
    x = _stack((2, 64, 300), np.float32, 0)
    y = _stack((4, 2, 300, 200), np.float32, 1, transposed=True)
    start = _stack((4, 2, 64, 200), np.float32, 2)
    out, into = start.copy(), start.copy()
    run = _blas.matmul_plan(x, y[:2], out[:2], accumulate=accumulate)
    for rows in (slice(0, 2), slice(2, 4)):
        run(x, y[rows], out[rows])
        assert _blas.matmul_into(x, y[rows], into[rows], accumulate=accumulate)
    np.testing.assert_array_equal(out, into)
    shared = np.zeros((2, 300, 300), np.float32)
    assert _blas.matmul_plan(x[0], shared[:, :, :200], shared[:, :64, :200]) is None
    assert _blas.matmul_plan(x[:, :2, :2], y[0, :, :2, :2], out[0, :, :2, :2]) is None


@mkl
def test_a_convolution_checks_its_products_once_a_call_not_once_a_sample(monkeypatch):
    """The checks before a product (layouts, overlap, sizes: ~25 us) cost more than MKL's
    call itself; a convolution repeats one product per sample over slices of the same
    buffers, so it checks them once a call: as many checks for 12 samples as for 2."""
    checked = []
    real = _blas._layout
    monkeypatch.setattr(_blas, "_layout", lambda a: checked.append(1) or real(a))
    layer = nn.Conv2d(32, 64, 3)
    counts = []
    for n in (2, 12):
        x = torch.randn(n, 32, 20, 20, requires_grad=True)
        checked.clear()
        layer(x).sum().backward()
        counts.append(len(checked))
    assert counts[0] == counts[1] > 0, counts


@mkl
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("groups", [1, 2])
def test_a_stride_1_input_gradient_reads_the_output_gradient_in_place_on_mkl(
        monkeypatch, dilation, groups):
    """On MKL the stride-1 input gradient makes one product per last kernel offset, each
    reading the held output gradient where it lies (shifted by the offset), added into one
    result; numpy's path copies the shifted blocks and makes one deeper product. The two
    agree within the rounding of their summation orders, over batches of 2 and 1."""
    from disthook.ops import conv

    rng = np.random.default_rng(5)
    spec = conv.ConvSpec((1, 1), ((1, 0), (dilation, dilation)), (dilation, dilation), groups)
    w = rng.standard_normal((128, 64 // groups, 3, 3)).astype(np.float32)
    x_shape = (3, 64, 20, 20)
    out = conv.conv_output_size(spec, x_shape[2:], w.shape[2:])
    g = rng.standard_normal((3, 128, *out)).astype(np.float32)
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", 2_000_000)  # 2 samples (~960 KB each)
    planned = []
    real = _blas.matmul_plan
    monkeypatch.setattr(_blas, "matmul_plan",
                        lambda *a, **k: planned.append(real(*a, **k)) or planned[-1])
    on_mkl = conv.conv_input_grad(g, w, spec, x_shape)
    assert len(planned) == 2 * 2 and None not in planned, planned  # two batch sizes
    monkeypatch.setattr(_blas, "matmul_plan", lambda *a, **k: None)
    on_numpy = conv.conv_input_grad(g, w, spec, x_shape)
    close(on_mkl, on_numpy, 128 // groups * 9, np.float32)


@mkl
@pytest.mark.parametrize("bias", [True, False])
def test_a_convolutions_products_go_to_mkl_with_numpys_values(bias, monkeypatch):
    """A Conv2d at sizes where each sample's product is worth a call (here 32 -> 64
    channels, 3x3, 20x20): its output and weight gradient take MKL's products, per sample,
    and are numpy's within the rounding of two summation orders."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 32, 20, 20)).astype(np.float32)
    g = rng.standard_normal((3, 64, 18, 18)).astype(np.float32)

    def run():
        torch.manual_seed(0)
        layer = nn.Conv2d(32, 64, 3, bias=bias)
        a = torch.tensor(x, requires_grad=True)
        out = layer(a)
        out.backward(torch.tensor(g))
        return [t.detach().numpy().copy() for t in (out, a.grad, layer.weight.grad)]

    calls = []
    real_into, real_plan = _blas.matmul_into, _blas.matmul_plan

    def plan(*a, **k):  # counts the products its plans make
        run = real_plan(*a, **k)
        return run and (lambda *ops: calls.append(True) or run(*ops))

    monkeypatch.setattr(_blas, "matmul_into",
                        lambda *a, **k: calls.append(real_into(*a, **k)) or calls[-1])
    monkeypatch.setattr(_blas, "matmul_plan", plan)
    on_mkl = run()
    assert calls.count(True) >= 1 + 3, calls  # the forward's stack, each sample's gradient
    monkeypatch.setattr(_blas, "matmul_into", lambda *a, **k: False)
    monkeypatch.setattr(_blas, "matmul_plan", lambda *a, **k: None)
    on_numpy = run()
    for name, got, expected in zip(("output", "input grad", "weight grad"), on_mkl, on_numpy):
        close(got, expected, 32 * 9 * 3 * 18 * 18, np.float32, err_msg=name)


@mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_gemm_call_converts_no_argument_through_ctypes_argtypes(dtype):
    """With ``argtypes`` set, ctypes converts each of gemm's 14 arguments through its type's
    ``from_param`` on every call (~8,000 instructions, a sixth of a small product's whole
    call); the products pass Python ints and pre-made scalars instead, with the same
    results (here and in the tests above: layouts, stacks, accumulation, both dtypes)."""
    lib = _blas._lib()
    for name in ("cblas_sgemm", "cblas_dgemm"):
        assert getattr(lib, name).argtypes is None, name
    x, y = operands(130, 300, 60, dtype, "CT")
    got = _blas.gemm(x, y)
    close(got, x @ y, 300, dtype)
    out = np.ones((2, 130, 60), dtype)
    assert _blas.matmul_into(x, np.stack([y, y]), out, accumulate=True)
    close(out, np.stack([x @ y] * 2) + 1, 300, dtype)


@mkl
@pytest.mark.parametrize("layout", [("C", "C"), ("C", "T")])
def test_a_product_over_a_short_inner_dimension_goes_to_mkl_from_a_million_multiply_adds(
        layout, monkeypatch):
    """A classifier head's input gradient (128 x 10 by 10 x 1024, the weight read transposed
    in ``g @ w.T``) is under MIN_WORK yet 1.2-2.4x faster on MKL than on numpy's BLAS; it goes
    there, with numpy's values; a short inner dimension in a smaller product stays on numpy, as
    does a product of the same work whose short dimension is not the inner one."""
    calls = []
    direct = _blas._state["direct"][np.dtype(np.float32)]
    monkeypatch.setitem(_blas._state["direct"], np.dtype(np.float32),
                        lambda *args: calls.append(args[2:5]) or direct(*args))
    x, y = operands(128, 10, 1024, np.float32, layout)
    assert 128 * 10 * 1024 < _blas.MIN_WORK
    got = _blas.gemm(x, y)
    assert calls == [(128, 1024, 10)], calls
    close(got, x @ y, 10, np.float32)
    for rows, inner, cols in ((8, 10, 1024), (1024, 128, 10), (128, 1024, 10)):
        x, y = operands(rows, inner, cols, np.float32, layout)
        assert _blas.gemm(x, y) is None, (rows, inner, cols)
    assert calls == [(128, 1024, 10)], calls


@mkl
def test_a_classifier_heads_gradients_on_mkl_are_torchs():
    """The MLP bench's last layer, ``h @ w + b`` with ten columns: its input gradient is the
    product over the ten-long inner dimension (on MKL), its output and weight gradient
    numpy's products; all within a product's rounding of torch's."""
    real_torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    h0 = rng.standard_normal((128, 1024)).astype(np.float32)
    w0 = (rng.standard_normal((1024, 10)) / 32).astype(np.float32)
    g0 = rng.standard_normal((128, 10)).astype(np.float32)
    results = []
    for lib in (torch, real_torch):
        h = lib.tensor(h0, requires_grad=True)
        w = lib.tensor(w0, requires_grad=True)
        out = h @ w
        out.backward(lib.tensor(g0))
        results.append([t.detach().numpy() for t in (out, h.grad, w.grad)])
    for name, got, expected, inner in zip(("output", "input grad", "weight grad"), *results,
                                          (1024, 10, 128)):
        close(got, expected, inner, np.float32, err_msg=name)
