"""Matrix products of bool tensors, and einsum's dtypes, as torch. torch's product kernels take
no bool (``"addmm_impl_cpu_"``, ``"addmv_impl_cpu"``, ``"bmm"``, ``"dot"``, ``"baddbmm"``
not implemented for 'Bool': NotImplementedError) but for an empty product, which returns
before its kernel; integer products they compute. einsum sums an operand's own letters
first (an integer or bool sum is int64) and contracts the rest with bmm, which takes one
dtype only. Here every bool product was computed (as a logical or of ands), einsum kept
bool and int8 sums in their dtype (int8 wrapped), and contracted operands of two dtypes
after promoting them; ``linalg.vecdot`` of complex vectors did not conjugate ``x``."""
from __future__ import annotations

import pytest

import disthook
from parity.l6_outcome import outcome

torch = pytest.importorskip("torch")


def same(call, *shapes, dtype="bool"):
    """``call(lib, *tensors)`` with tensors of ones in ``shapes`` gives the same in both."""
    results = []
    for lib in (torch, disthook):
        tensors = [lib.ones(s, dtype=getattr(lib, dtype)) for s in shapes]
        results.append(outcome(lambda: call(lib, *tensors)))  # noqa: B023 - called here
    assert results[1] == results[0]
    return results[0]


PRODUCTS = {
    "mm": (lambda lib, a, b: lib.mm(a, b), (2, 3), (3, 2)),
    "matmul 1d 1d": (lambda lib, a, b: a @ b, (3,), (3,)),
    "matmul 2d 1d": (lambda lib, a, b: a @ b, (2, 3), (3,)),
    "matmul 1d 2d": (lambda lib, a, b: a @ b, (3,), (3, 2)),
    "matmul 3d 2d": (lambda lib, a, b: a @ b, (4, 2, 3), (3, 2)),
    "matmul 3d 1d": (lambda lib, a, b: a @ b, (4, 2, 3), (3,)),
    "matmul 1d 3d": (lambda lib, a, b: a @ b, (3,), (4, 3, 2)),
    "matmul 2d 3d": (lambda lib, a, b: a @ b, (2, 3), (4, 3, 2)),
    "matmul 4d 3d": (lambda lib, a, b: a @ b, (2, 4, 2, 3), (4, 3, 2)),
    "bmm": (lambda lib, a, b: lib.bmm(a, b), (4, 2, 3), (4, 3, 2)),
    "mv": (lambda lib, a, b: lib.mv(a, b), (2, 3), (3,)),
    "dot": (lambda lib, a, b: lib.dot(a, b), (3,), (3,)),
    "vdot": (lambda lib, a, b: lib.vdot(a, b), (3,), (3,)),
    "inner": (lambda lib, a, b: lib.inner(a, b), (2, 3), (2, 3)),
    "addmm": (lambda lib, a, b: lib.addmm(a[:, :2], a, b), (2, 3), (3, 2)),
    "addmv": (lambda lib, a, b: lib.addmv(a[:, 0], a, b), (2, 3), (3,)),
    "addbmm": (lambda lib, a, b: lib.addbmm(a[0, :, :2], a, b), (4, 2, 3), (4, 3, 2)),
    "baddbmm": (lambda lib, a, b: lib.baddbmm(a[:, :, :2], a, b), (4, 2, 3), (4, 3, 2)),
    "linear": (lambda lib, a, b: lib.nn.functional.linear(a, b), (5, 3), (2, 3)),
    "multi_dot": (lambda lib, a, b: lib.linalg.multi_dot([a, b, b.t()]), (2, 3), (3, 2)),
    "matrix_power": (lambda lib, a, b: lib.linalg.matrix_power(a, 3), (3, 3), (1,)),
    "einsum contraction": (lambda lib, a, b: lib.einsum("ij,jk->ik", a, b), (2, 3), (3, 2)),
    "einsum full": (lambda lib, a, b: lib.einsum("i,i->", a, b), (3,), (3,)),
    "trace": (lambda lib, a, b: lib.trace(a), (3, 3), (1,)),
    "cross": (lambda lib, a, b: lib.linalg.cross(a, b), (2, 3), (2, 3)),
    "vecdot": (lambda lib, a, b: lib.linalg.vecdot(a, b), (2, 3), (2, 3)),
    # empty products return before the kernel: computed, in bool
    "mm no rows": (lambda lib, a, b: lib.mm(a, b), (0, 3), (3, 2)),
    "mm nothing to sum": (lambda lib, a, b: lib.mm(a, b), (2, 0), (0, 2)),
    "bmm no batch": (lambda lib, a, b: lib.bmm(a, b), (0, 2, 3), (0, 3, 2)),
    "mv nothing to sum": (lambda lib, a, b: lib.mv(a, b), (2, 0), (0,)),
    "dot empty": (lambda lib, a, b: lib.dot(a, b), (0,), (0,)),
    "einsum empty": (lambda lib, a, b: lib.einsum("ij,ij->", a, b), (0, 2), (0, 2)),
    # no product: computed, in bool
    "outer": (lambda lib, a, b: lib.outer(a, b), (2,), (3,)),
    "einsum no contraction": (lambda lib, a, b: lib.einsum("i,j->ij", a, b), (2,), (3,)),
}


@pytest.mark.parametrize("dtype", ["bool", "int32", "uint8"])
@pytest.mark.parametrize("name", PRODUCTS)
def test_products_of_bool_and_integer_tensors_as_torch(name, dtype):
    call, *shapes = PRODUCTS[name]
    same(call, *shapes, dtype=dtype)


def test_bool_product_is_refused_naming_the_kernel():
    assert same(lambda lib, a, b: a @ b, (4, 2, 3), (3, 2))[0] == "NotImplementedError"


EINSUMS = [
    ("ij->i", (2, 3)), ("ii->", (3, 3)), ("ii->i", (3, 3)), ("ij->ji", (2, 3)),
    ("i,j->", (2,), (3,)), ("i,j->i", (2,), (3,)), ("ij,jk->i", (2, 3), (3, 2)),
    ("ij,j->", (2, 3), (3,)), ("ij,jk->k", (2, 3), (3, 2)), ("i,i,i->", (3,), (3,), (3,)),
    ("i,i,i->i", (3,), (3,), (3,)), ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)), ("i->", (0,)),
]


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "float16", "float32"])
@pytest.mark.parametrize("equation", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_dtype_and_values_as_torch(equation, dtype):
    eq, *shapes = equation
    # int8's sum of 60s wraps in int8; torch sums in int64
    scale = 60 if dtype in ("int8", "uint8") else 1
    same(lambda lib, *ts: lib.einsum(eq, *[t * scale if scale > 1 else t for t in ts]),
         *shapes, dtype=dtype)


@pytest.mark.parametrize("dtypes", [("int8", "int16"), ("float16", "float32"),
                                    ("float32", "float64"), ("int32", "int64")])
@pytest.mark.parametrize("eq", ["ij,jk->ik", "ij,jk->ijk", "i,j->"])
def test_einsum_of_two_dtypes_as_torch(eq, dtypes):
    results = []
    for lib in (torch, disthook):
        a = lib.ones(2, 3, dtype=getattr(lib, dtypes[0]))
        b = lib.ones(3, 2, dtype=getattr(lib, dtypes[1]))
        if eq == "i,j->":
            a, b = a[0], b[0]
        results.append(outcome(lambda: lib.einsum(eq, a, b)))  # noqa: B023 - called here
    assert results[1] == results[0]


def test_addbmm_of_integers_keeps_their_dtype():
    same(lambda lib, a, b: lib.addbmm(a[0, :, :2], a * 100, b * 100), (4, 2, 3), (4, 3, 2),
         dtype="int32")


def test_vecdot_conjugates_x():
    results = []
    for lib in (torch, disthook):
        x = lib.tensor([1 + 2j, 3 - 1j])
        y = lib.tensor([2 - 1j, 1j])
        results.append(lib.linalg.vecdot(x, y).tolist())
    assert results[1] == results[0]
