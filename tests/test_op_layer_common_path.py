"""The products' common path (plain tensors, one dtype, shapes that fit) builds no error
message: issue 33 measured the Python around a large product running cold right after its
kernel, each formatted message costing microseconds there. The messages themselves, built
only on failure, stay torch's."""
import dis
import sys

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

_FORMATTING = {name for name in dis.opname if name.startswith("FORMAT") or name == "BUILD_STRING"}


def _string_ops_run(fn, *args) -> list:
    """The string-building opcodes executed in disthook.ops.linalg while ``fn(*args)`` runs."""
    seen = []

    def trace(frame, event, arg):
        if frame.f_code.co_filename.endswith("ops/linalg.py"):
            frame.f_trace_opcodes = True
            if event == "opcode":
                name = dis.opname[frame.f_code.co_code[frame.f_lasti]]
                if name in _FORMATTING:
                    seen.append((frame.f_code.co_name, name))
        return trace

    sys.settrace(trace)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return seen


def _operands(lib, shapes):
    rng = np.random.default_rng(0)
    return [lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
            for s in shapes]


CASES = {
    "mm": (lambda a, b: a.mm(b), [(3, 4), (4, 5)], [(3, 4), (5, 5)]),
    "matmul": (lambda a, b: a @ b, [(3, 4), (4, 5)], [(3, 4), (5, 5)]),
    "addmm": (lambda c, a, b: disthook.addmm(c, a, b) if isinstance(c, disthook.Tensor)
              else torch.addmm(c, a, b), [(5,), (3, 4), (4, 5)], [(5,), (3, 4), (5, 5)]),
    "mv": (lambda a, v: a.mv(v), [(3, 4), (4,)], [(3, 4), (5,)]),
    "dot": (lambda a, b: a.dot(b), [(4,), (4,)], [(4,), (5,)]),
    "bmm": (lambda a, b: a.bmm(b), [(2, 3, 4), (2, 4, 5)], [(2, 3, 4), (2, 5, 5)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_product_that_fits_builds_no_message(name):
    fn, good, _ = CASES[name]
    assert _string_ops_run(fn, *_operands(disthook, good)) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_product_that_does_not_fit_says_what_torch_says(name):
    fn, _, bad = CASES[name]
    errors = []
    for lib in (disthook, torch):
        with pytest.raises(RuntimeError) as info:
            fn(*_operands(lib, bad))
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def _leaf():
    return disthook.tensor(np.ones(3, np.float32), requires_grad=True)


def test_a_leafs_accumulator_is_made_without_init_calls():
    """Made anew each step (as torch's), right after a product's kernel: no __init__ frames."""
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__init__":
            calls.append(frame.f_code.co_qualname)

    w = _leaf()
    sys.setprofile(profile)
    try:
        y = w * 2
    finally:
        sys.setprofile(None)
    assert type(y.grad_fn.next_functions[0][0]).__name__ == "AccumulateGrad"
    assert not {"Node.__init__", "AccumulateGrad.__init__"} & set(calls)


def test_the_accumulator_is_as_its_constructor_makes_it():
    from disthook.autograd.graph import AccumulateGrad

    w = _leaf()
    first = (w * 2).grad_fn
    made = first.next_functions[0][0]
    after = (w * 2).grad_fn  # the same accumulator while the first graph holds it
    assert after.next_functions[0][0] is made
    built = AccumulateGrad(w)
    assert made.variable is built.variable is w
    for name in ("next_functions", "needs_input_grad", "_input_meta", "_seq", "_pre_hooks",
                 "_post_hooks", "_saved", "metadata_"):
        assert getattr(made, name) == getattr(built, name), name
    assert made.name() == built.name() and made.metadata == {}
    # the sequence advances as the constructor's did: one number per accumulator made
    v = _leaf()
    a = (w * 2).grad_fn._sequence_nr()
    b = (v * 2).grad_fn._sequence_nr()  # (a node takes its number before its edges)
    c = (w * 2).grad_fn._sequence_nr()  # v's accumulator took one between b and c
    assert (b - a, c - b) == (1, 2)
    seen = []
    made.register_hook(lambda gi, go: seen.append(go[0].numpy().tolist()))
    after.next_functions[0][0] is made and (w * 2).sum().backward()
    assert seen == [[2.0, 2.0, 2.0]] and w.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_under_anomaly_mode_the_accumulator_records_where_it_was_made():
    w = _leaf()
    with disthook.autograd.detect_anomaly():
        acc = (w * 2).grad_fn.next_functions[0][0]
    assert "traceback_" in acc.metadata


# ---- the Python a large product and a bias add run (issue 33, fifteenth session) ---------------

def _functions_called(fn, *args) -> list:
    """The Python functions (qualified names) called while ``fn(*args)`` runs."""
    calls = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return calls


def _mlp_layer():
    rng = np.random.default_rng(1)
    x = disthook.tensor(rng.standard_normal((128, 1024)).astype(np.float32))
    w = disthook.tensor(rng.standard_normal((1024, 1024)).astype(np.float32), requires_grad=True)
    b = disthook.tensor(rng.standard_normal(1024).astype(np.float32), requires_grad=True)
    return x, w, b


def test_a_large_product_and_its_bias_take_no_frame_they_need_not():
    """``x @ w + b`` of an MLP layer: ``@`` is matmul itself, MKL's pointers passed as read (no int made and wrapped again), the output's layout
    worked out once per shape, a bias's shape seen to broadcast without a check's frames."""
    x, w, b = _mlp_layer()
    x @ w + b  # (the shapes' first time)
    h = x @ w
    called = _functions_called(lambda: x @ w) + _functions_called(lambda: h + b)
    assert not {"Tensor.__matmul__", "_lib", "address", "_empty_plan",
                "_check_broadcast", "check_broadcast"} & set(called), called
    assert "gemm" in called


@pytest.mark.parametrize("shapes", [((4, 3), (5, 3)), ((2, 4, 3), (5, 3)), ((3,), (2, 4))])
def test_shapes_that_do_not_broadcast_still_say_what_torch_says(shapes):
    errors = []
    for lib in (disthook, torch):
        a, b = (lib.ones(*s) for s in shapes)
        with pytest.raises(RuntimeError) as info:
            a + b
        errors.append(str(info.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("shape", [(128, 1024), (1 << 14,), (3, 5, 4096), (64, 64, 2, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.dtype(np.int64)])
def test_an_aligned_new_array_is_the_root_of_its_own_memory(shape, dtype):
    """``_blas.empty``: on a 64-byte line, writable, C-ordered, its base chain ending in a
    memoryview (a storage of exactly its bytes), the same again from its cached layout."""
    from disthook import _blas

    for _ in range(2):
        a = _blas.empty(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
        assert a.flags.writeable and _blas.address(a) % _blas.ALIGN == 0
        assert _blas.owns_memory(a) or a.ndim == 1  # (a flat one's base is the memoryview)
        flat = a if a.ndim == 1 else a.base
        assert flat.ndim == 1 and flat.nbytes == a.nbytes and type(flat.base) is memoryview
        t = disthook.Tensor._make(a, None, 0)
        assert t.untyped_storage().nbytes() == a.nbytes and t.storage_offset() == 0
    small = _blas.empty((3, 4), dtype)  # under ALIGN_MIN_BYTES: numpy's own
    assert small.base is None and small.shape == (3, 4)


def test_mkl_takes_its_pointers_as_read_and_gives_the_int_calls_bits():
    """The pointer call ``gemm`` makes gives what the int-address call (a convolution's,
    ``matmul_into``) gives for the same product, bit for bit, for each layout of the
    operands, the few-rows transposed one taken as ``(y.T @ x.T).T`` by both."""
    from disthook import _blas

    if not _blas.backend().startswith("mkl"):
        pytest.skip("needs disthook[mkl]")

    def by_address(a, b):
        if (a.shape[0] <= _blas.SMALL_ROWS and _blas._layout(a)[0] == 111  # (row-major)
                and _blas._layout(b)[0] == 112):  # (read transposed)
            out = _blas.empty((b.shape[1], a.shape[0]), a.dtype)
            assert _blas.matmul_into(b.T, a.T, out)
            return out.T
        out = _blas.empty((a.shape[0], b.shape[1]), a.dtype)  # (aligned as gemm's)
        assert _blas.matmul_into(a, b, out)
        return out

    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        w = rng.standard_normal((512, 384)).astype(dtype)
        for rows in (16, 64):
            x = rng.standard_normal((rows, 512)).astype(dtype)
            for a, b in ((x, w), (x, np.asfortranarray(w)), (np.asfortranarray(x), w),
                         (x[:, :384], w[:384]), (x[:, :384], w[:384].T)):
                got = _blas.gemm(a, b)
                assert got is not None and got.flags.c_contiguous
                assert got.tobytes() == np.ascontiguousarray(by_address(a, b)).tobytes()
