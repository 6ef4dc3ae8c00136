"""householder_product's operand checks and eig/eigvals' input checks (L2): tau of the wrong
number of dims, of other batch dims (they were broadcast), of another dtype (it was taken),
integer inputs (they were computed) raise torch's error and words, in torch's order; eigvals
and eig refuse a non-square or under-2-D input with torch's own error (their complex results
are computed since R23)."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")


def _ones(lib, *shape, dtype="float64"):
    return lib.ones(*shape, dtype=getattr(lib, dtype))


HOUSEHOLDER = {
    "tau 0-d": lambda lib: (_ones(lib, 3, 2), lib.tensor(1.0, dtype=lib.float64)),
    "tau longer than A is wide": lambda lib: (_ones(lib, 3, 2), _ones(lib, 3)),
    "tau with as many dims as A": lambda lib: (_ones(lib, 3, 2), _ones(lib, 1, 2)),
    "tau without A's batch": lambda lib: (_ones(lib, 4, 3, 2), _ones(lib, 2)),
    "tau of another batch": lambda lib: (_ones(lib, 4, 3, 2), _ones(lib, 5, 2)),
    "tau batch of one": lambda lib: (_ones(lib, 4, 3, 2), _ones(lib, 1, 2)),
    "A wider than tall": lambda lib: (_ones(lib, 2, 3), _ones(lib, 2)),
    "A 1-d": lambda lib: (_ones(lib, 3), _ones(lib, 2)),
    "tau of another dtype": lambda lib: (_ones(lib, 3, 2), _ones(lib, 2, dtype="float32")),
    "integers": lambda lib: (_ones(lib, 3, 2, dtype="int64"), _ones(lib, 2, dtype="int64")),
}


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e).__name__, str(e)
    return None


@pytest.mark.parametrize("case", list(HOUSEHOLDER))
def test_householder_product_refuses_as_torch(case):
    ours = _error(lambda: disthook.linalg.householder_product(*HOUSEHOLDER[case](disthook)))
    theirs = _error(lambda: torch.linalg.householder_product(*HOUSEHOLDER[case](torch)))
    assert theirs is not None and ours == theirs


def test_householder_product_with_matching_batch_still_computes():
    a = torch.randn(4, 3, 2, dtype=torch.float64)
    tau = torch.rand(4, 2, dtype=torch.float64)
    ours = disthook.linalg.householder_product(disthook.tensor(a.numpy()),
                                               disthook.tensor(tau.numpy()))
    assert torch.allclose(torch.from_numpy(ours.numpy()),
                          torch.linalg.householder_product(a, tau))


EIG_INPUTS = {
    "not square": lambda lib: _ones(lib, 3, 2),
    "batch not square": lambda lib: _ones(lib, 2, 3, 2),
    "1-d": lambda lib: _ones(lib, 3),
    "0-d": lambda lib: lib.tensor(1.0),
    "integers": lambda lib: _ones(lib, 2, 2, dtype="int64"),
}


@pytest.mark.parametrize("fn", ["eigvals", "eig"])
@pytest.mark.parametrize("case", list(EIG_INPUTS))
def test_eig_refuses_bad_inputs_with_torchs_error(fn, case):
    ours = _error(lambda: getattr(disthook.linalg, fn)(EIG_INPUTS[case](disthook)))
    theirs = _error(lambda: getattr(torch.linalg, fn)(EIG_INPUTS[case](torch)))
    assert theirs is not None and ours == theirs


@pytest.mark.parametrize("fn", ["eigvals", "eig"])
def test_eig_of_a_good_input_is_computed_complex(fn):
    out = getattr(disthook.linalg, fn)(_ones(disthook, 2, 2))
    values = out if fn == "eigvals" else out.eigenvalues
    assert str(values.dtype) == str(torch.linalg.eigvals(_ones(torch, 2, 2)).dtype)
    assert sorted(values.real.tolist()) == pytest.approx([0.0, 2.0], abs=1e-6)
