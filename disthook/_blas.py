"""Matrix products on Intel MKL, when the optional ``mkl`` package is installed.

numpy's wheels carry OpenBLAS. For the products a pipeline stage takes at micro-batch sizes
(a few dozen rows against a 1024 x 1024 weight) its kernels are 1.2-2.5x slower than MKL's
on the x86 CPUs we measured (docs/performance.md, "Which BLAS"). With ``pip install
'disthook[mkl]'`` the 2-D float32 and float64 products of the engine, and a convolution's
forward and weight-gradient products (stacks of them: one call per matrix), go to MKL's
``gemm`` through ctypes; everything else (other dtypes, other batched products, operands MKL
cannot read as they lie in memory, products too small for the call to pay) stays on numpy,
and ``DISTHOOK_BLAS=numpy`` keeps every product on numpy.

Threads: MKL reads ``MKL_NUM_THREADS`` / ``OMP_NUM_THREADS`` and ``MKL_THREADING_LAYER`` as
usual, and ``disthook.set_num_threads(n)`` sets the count. Where one thread is asked for (by
those variables or by ``set_num_threads(1)`` before the first product) and no layer is named,
the products run on MKL's sequential layer: no OpenMP runtime is started, and a call costs
less.
"""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

__all__ = ["aligned", "backend", "empty", "gemm", "matmul_into", "matmul_plan", "owns_memory", "set_threads"]

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_INT_MAX = 2 ** 31 - 1
# below this many multiply-adds numpy's product is as fast or faster: an MKL call through
# ctypes costs ~8-15 us before it computes (docs/performance.md, "Which BLAS")
MIN_WORK = 1 << 21
# ... except a product over a short inner dimension (a classifier head's input gradient, 128 x
# 10 by 10 x 1024): from NARROW_MIN_WORK multiply-adds, with an inner dimension of at most
# NARROW_INNER, numpy's kernel took 1.0-2.4x MKL's time, call included (median 1.5x), in 39 of
# 40 shapes and layouts measured; a short outer dimension alone gave no such rule (0.6-1.7x)
NARROW_INNER, NARROW_MIN_WORK = 12, 1 << 20
_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL
# rows of a product ``x @ W.T`` up to which it is taken as ``(W @ x.T).T`` and made
# contiguous: at micro-batch sizes both BLAS libraries' kernels for a transposed right operand
# are the slower ones (docs/performance.md)
SMALL_ROWS = 32

# MKL's kernels read an operand that does not start on a 64-byte line more slowly (a right
# operand of x @ W: 15-20% at 128 x 1024 x 1024; of x @ W.T: ~5%), and numpy's allocations are
# only 16-byte aligned where torch's are 64: a tensor made by a factory (torch.tensor, zeros,
# empty, randn, ...) of at least ALIGN_MIN_BYTES starts on a line (``aligned``)
ALIGN = 64
ALIGN_MIN_BYTES = 1 << 16

_state: dict = {"loaded": False, "lib": None, "why": "not loaded yet", "threads": None,
                "gemm": {}, "direct": {}}


def _library_path() -> str | None:
    """Where the ``mkl`` distribution put its single dynamic library, if it is installed."""
    from importlib import metadata

    try:
        dist = metadata.distribution("mkl")
    except metadata.PackageNotFoundError:
        return None
    wanted = "mkl_rt" if sys.platform == "win32" else "libmkl_rt.so"
    for entry in dist.files or ():
        name = entry.name
        if name.startswith(wanted) and not name.endswith((".a", ".lib")):
            return os.path.realpath(dist.locate_file(entry))
    return None


def _load():
    _state["loaded"] = True
    if os.environ.get("DISTHOOK_BLAS", "").strip().lower() == "numpy":
        _state["why"] = "DISTHOOK_BLAS=numpy"
        return None
    path = _library_path()
    if path is None:
        _state["why"] = "the mkl package is not installed"
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:  # a broken or foreign install: numpy's products are still right
        _state["why"] = f"could not load {path}: {e}"
        return None
    c_int = ctypes.c_int
    for name in ("MKL_Set_Num_Threads", "MKL_Set_Threading_Layer"):
        getattr(lib, name).argtypes = [c_int]
    lib.MKL_Set_Num_Threads.restype = None
    threads = _state["threads"]
    if threads is None:
        asked = os.environ.get("MKL_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or ""
        threads = int(asked) if asked.strip().isdigit() else None
    if threads == 1 and not os.environ.get("MKL_THREADING_LAYER"):
        lib.MKL_Set_Threading_Layer(_SEQUENTIAL)
    elif _state["threads"] is not None:
        lib.MKL_Set_Num_Threads(_state["threads"])
    _state["lib"], _state["why"] = lib, path
    callers = {np.dtype(np.float32): _caller(lib.cblas_sgemm, ctypes.c_float),
               np.dtype(np.float64): _caller(lib.cblas_dgemm, ctypes.c_double)}
    _state["gemm"] = {dtype: call for dtype, (call, _) in callers.items()}
    _state["direct"] = {dtype: direct for dtype, (_, direct) in callers.items()}
    return lib


def _caller(fn, real):
    """``call(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc)``: MKL's
    row-major ``c = a @ b`` (``+=`` with ``accumulate``) at the addresses ``a``, ``b``, ``c``
    (ints), and ``direct``, the same call without ``accumulate`` and with ``a``, ``b``, ``c``
    ctypes pointers, passed as they are (``gemm``: no int made and wrapped again).

    ``fn`` has no ``argtypes``: with them ctypes converts each of the 14 arguments through
    its type's ``from_param`` on every call, ~8,000 instructions (cachegrind; a small
    product's whole ``gemm`` is ~53,000); here the scalars are made once, the three pointers
    wrapped, and the ints pass as C ints as they are (Python ints, each checked against
    ``_INT_MAX`` by the caller)."""
    fn.restype = None
    fn.argtypes = None
    one, zero, ptr = real(1.0), real(0.0), ctypes.c_void_p

    def call(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc):
        fn(_ROW_MAJOR, trans_a, trans_b, m, n, k, one, ptr(a), lda, ptr(b), ldb,
           one if accumulate else zero, ptr(c), ldc)

    def direct(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
        fn(_ROW_MAJOR, trans_a, trans_b, m, n, k, one, a, lda, b, ldb, zero, c, ldc)

    return call, direct


def _lib():
    return _state["lib"] if _state["loaded"] else _load()


def backend() -> str:
    """``"mkl (<path>)"`` or ``"numpy (<why not mkl>)"``: which library takes the products."""
    lib = _lib()
    return f"mkl ({_state['why']})" if lib is not None else f"numpy ({_state['why']})"


def set_threads(n: int) -> None:
    """The thread count for MKL's products (``set_num_threads``); before the first product
    it also picks the layer (one thread: the sequential one)."""
    _state["threads"] = int(n)
    if _state["lib"] is not None:
        _state["lib"].MKL_Set_Num_Threads(int(n))


def _data_offset() -> int | None:
    """Where an ndarray object keeps its data pointer (numpy's ``PyArray_DATA``: just past
    the object header), checked on two arrays against ``.ctypes.data``; None if not there."""
    offset = sys.getsizeof(object())  # the object header: 16 on CPython's usual builds
    probes = np.empty(8, np.uint8), np.empty((3, 5), np.float64)[1:, 2:]
    for probe in probes:
        if ctypes.c_void_p.from_address(id(probe) + offset).value != probe.ctypes.data:
            return None
    return offset


_DATA_AT = _data_offset()


_pointer = ctypes.c_void_p.from_address  # (a ctypes pointer read at an address)


def address(a: np.ndarray) -> int:
    """The address of ``a``'s first element, as ``a.ctypes.data`` gives it, read where the
    array object keeps it (``.ctypes.data`` and ``__array_interface__`` cost 2-8 us a call,
    several per product)."""
    if _DATA_AT is None:
        return a.ctypes.data
    return _pointer(id(a) + _DATA_AT).value or 0


def _pointer_of(a: np.ndarray):
    """``a``'s first element's address as a ctypes pointer, to pass to a C function as it is
    (read where ``address`` reads it: no int made and wrapped again)."""
    if _DATA_AT is None:
        return ctypes.c_void_p(a.ctypes.data)
    return _pointer(id(a) + _DATA_AT)


_EMPTY_PLANS: dict = {}  # (shape, dtype as given) -> (dtype, bytes, reshaped) or None: numpy's
_UNPLANNED = object()


def _empty_plan(shape: tuple, dtype):
    """What ``empty(shape, dtype)`` makes, worked out once per shape and dtype: None for
    numpy's own array (under ALIGN_MIN_BYTES), else the dtype, its byte count and whether
    the flat array is reshaped."""
    given = dtype
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    plan = (dtype, nbytes, len(shape) != 1) if nbytes >= ALIGN_MIN_BYTES else None
    if len(_EMPTY_PLANS) >= 512:  # (a program of many shapes: start again)
        _EMPTY_PLANS.clear()
    _EMPTY_PLANS[shape, given] = plan
    return plan


def empty(shape: tuple, dtype) -> np.ndarray:
    """A new C-ordered array, starting on an ALIGN-byte line where it has ALIGN_MIN_BYTES or
    more. It is the root of its own memory as numpy's are: its base chain ends in a
    memoryview, not in the larger buffer under it (``owns_memory``), so storages, offsets and
    sharing read as for any new array. ``shape`` is a tuple."""
    plan = _EMPTY_PLANS.get((shape, dtype), _UNPLANNED)
    if plan is _UNPLANNED:
        plan = _empty_plan(shape, dtype)
    if plan is None:
        return np.empty(shape, dtype)
    dtype, nbytes, reshaped = plan
    raw = np.empty(nbytes + ALIGN, np.uint8)
    at = _DATA_AT  # (``address``, without its call)
    start = -(raw.ctypes.data if at is None else _pointer(id(raw) + at).value) % ALIGN
    # (the flat array's base is a memoryview of all of raw: the chain ends there)
    out = np.frombuffer(memoryview(raw), dtype, nbytes // dtype.itemsize, start)
    return out.reshape(shape) if reshaped else out


def owns_memory(a: np.ndarray) -> bool:
    """Is ``a`` all of its memory, as a new array is: numpy's own (no base), or one of
    ``empty``'s (its base the whole flat array over the aligned buffer)?"""
    base = a.base
    return base is None or (type(base) is np.ndarray and type(base.base) is memoryview
                            and base.nbytes == a.nbytes)


def aligned(arr: np.ndarray, copy: bool = False) -> np.ndarray:
    """``arr``, or, where it is C-contiguous, at least ALIGN_MIN_BYTES and does not start on
    an ALIGN-byte line, a copy of it in ``empty``'s memory; ``copy``: always a new array
    (aligned by the same rule, so that a worker's copy of a received weight lies as the
    client's does)."""
    if arr.nbytes < ALIGN_MIN_BYTES or not arr.flags.c_contiguous:
        return np.array(arr) if copy else arr
    if not copy and address(arr) % ALIGN == 0:
        return arr
    out = empty(arr.shape, arr.dtype)
    np.copyto(out, arr)
    return out


def _layout(a: np.ndarray):
    """``(transpose flag, leading dimension)`` under which gemm reads ``a`` (row-major) where
    it lies, or None when it cannot: negative, zero or unaligned strides, gaps in both axes."""
    rows, cols = a.shape
    s0, s1 = a.strides
    item = a.itemsize
    if s1 == item and s0 % item == 0 and s0 // item >= max(cols, 1):
        return _NO_TRANS, s0 // item
    if s0 == item and s1 % item == 0 and s1 // item >= max(rows, 1):
        return _TRANS, s1 // item
    return None


def _pays(m: int, n: int, k: int) -> bool:
    """Is an ``m x k`` by ``k x n`` product faster on MKL than on numpy, call included?"""
    work = m * n * k
    return work >= MIN_WORK or (k <= NARROW_INNER and work >= NARROW_MIN_WORK)


def gemm(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """``x @ y`` for 2-D operands of one float dtype, C-ordered, on MKL; None where numpy
    should take it (no MKL, another dtype, too small, operands MKL cannot read in place)."""
    if not _state["loaded"]:
        _load()
    dtype = x.dtype
    fn = _state["direct"].get(dtype)  # (empty without MKL)
    if fn is None or dtype != y.dtype or x.ndim != 2 or y.ndim != 2:
        return None
    m, k = x.shape
    n = y.shape[1]
    if (y.shape[0] != k or not _pays(m, n, k)
            or max(m, n, k) > _INT_MAX // 2):  # (numpy says what is wrong with the shapes)
        return None
    lx, ly = _layout(x), _layout(y)
    if (lx is None or ly is None or max(lx[1], ly[1]) > _INT_MAX
            or not x.flags.aligned or not y.flags.aligned):
        return None
    if m <= SMALL_ROWS and ly[0] == _TRANS and lx[0] == _NO_TRANS:
        # (y.T @ x.T).T: y.T lies row-major, x.T is x read transposed
        out = empty((n, m), dtype)
        fn(_NO_TRANS, _TRANS, n, m, k, _pointer_of(y), ly[1], _pointer_of(x),
           lx[1], _pointer_of(out), m)
        result = empty((m, n), dtype)
        np.copyto(result, out.T)
        return result
    out = empty((m, n), dtype)
    fn(lx[0], ly[0], m, n, k, _pointer_of(x), lx[1], _pointer_of(y), ly[1],
       _pointer_of(out), n)
    return out


def matmul_into(x: np.ndarray, y: np.ndarray, out: np.ndarray, accumulate: bool = False) -> bool:
    """``out[...] = x @ y`` (``+=`` with ``accumulate``) for stacks of matrices, as
    ``np.matmul`` broadcasts them (the leading dims of ``x`` and ``y`` against ``out``'s), one
    MKL ``gemm`` per matrix; False, with ``out`` untouched, where numpy should take it (no MKL,
    another dtype, matrices too small for a call to pay, layouts MKL cannot read in place,
    ``out`` overlapping an operand). A convolution's products are such stacks: numpy's
    ``matmul`` would take each to OpenBLAS, 1.2-1.6x slower at their shapes."""
    run = matmul_plan(x, y, out, accumulate)
    if run is None:
        return False
    run(x, y, out)
    return True


def matmul_plan(x: np.ndarray, y: np.ndarray, out: np.ndarray, accumulate: bool = False):
    """``matmul_into``'s checks made once, for a product repeated over other operands laid out
    as these (the same shapes, strides and dtypes at other addresses: the next batch's slices
    of the same buffers): a function ``run(x, y, out)`` that makes the gemm calls
    ``matmul_into(x, y, out, accumulate)`` would make, or None where that would answer False.
    ``run`` checks nothing (its checks cost ~25 us, a convolution repeats them per sample):
    its caller passes operands of the planned layout and an ``out`` apart from both."""
    lib = _lib()
    if lib is None or x.ndim < 2 or y.ndim < 2 or out.ndim < 2:
        return None
    dtype = out.dtype
    fn = _state["gemm"].get(dtype)
    lead = out.shape[:-2]
    m, k = x.shape[-2:]
    n = y.shape[-1]
    if (fn is None or x.dtype != dtype or y.dtype != dtype or y.shape[-2] != k
            or out.shape[-2:] != (m, n) or not _pays(m, n, k)
            or max(m, n, k) > _INT_MAX // 2 or x.ndim > out.ndim or y.ndim > out.ndim
            or out.size == 0 or not (x.flags.aligned and y.flags.aligned and out.flags.aligned
                    and out.flags.writeable)):
        return None
    item = dtype.itemsize
    ox, oy = _layout(x[(0,) * (x.ndim - 2)]), _layout(y[(0,) * (y.ndim - 2)])
    rs, cs = out.strides[-2:]
    if (ox is None or oy is None or max(ox[1], oy[1]) > _INT_MAX or cs != item
            or rs % item or not n <= rs // item <= _INT_MAX
            or np.may_share_memory(out, x) or np.may_share_memory(out, y)):
        return None

    def steps(a: np.ndarray) -> list:
        """Per leading dim of ``out``: the bytes ``a``'s matrix moves (0 where broadcast)."""
        pad = len(lead) - (a.ndim - 2)
        got = [0] * pad
        for size, want, stride in zip(a.shape[:-2], lead[pad:], a.strides[:-2]):
            if size not in (1, want):
                return None
            got.append(stride if size == want else 0)
        return got

    sx, sy = steps(x), steps(y)
    if sx is None or sy is None:
        return None
    # each matrix's byte offsets from the operands' first elements
    offsets = [(sum(j * s for j, s in zip(idx, sx)), sum(j * s for j, s in zip(idx, sy)),
                sum(j * s for j, s in zip(idx, out.strides)))
               for idx in np.ndindex(*lead)]
    tx, ldx, ty, ldy, ldo = ox[0], ox[1], oy[0], oy[1], rs // item

    def run(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        ax, ay, ao = address(x), address(y), address(out)
        for px, py, po in offsets:
            fn(tx, ty, m, n, k, ax + px, ldx, ay + py, ldy, accumulate, ao + po, ldo)

    return run
