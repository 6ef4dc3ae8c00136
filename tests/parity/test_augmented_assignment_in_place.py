"""Every augmented assignment torch's Tensor defines changes the tensor in place, as torch's
does: an alias sees the change, the name stays bound to the same tensor, its version moves.
Before, ``%=``, ``//=``, ``<<=`` and ``>>=`` rebound the name to a new tensor, silently."""
import pytest

import disthook

torch = pytest.importorskip("torch")

CASES = [("%=", lambda x: x.__imod__(4)), ("//=", lambda x: x.__ifloordiv__(4)),
         ("<<=", lambda x: x.__ilshift__(1)), (">>=", lambda x: x.__irshift__(1)),
         ("+=", lambda x: x.__iadd__(2)), ("-=", lambda x: x.__isub__(2)),
         ("*=", lambda x: x.__imul__(3)), ("&=", lambda x: x.__iand__(6)),
         ("|=", lambda x: x.__ior__(1)), ("^=", lambda x: x.__ixor__(5))]


@pytest.mark.parametrize("op,apply", CASES, ids=[c[0] for c in CASES])
def test_an_augmented_assignment_changes_the_tensor_itself(op, apply):
    results = []
    for T in (torch, disthook):
        x = T.tensor([0, 5, -7, 12, 33])
        alias, version = x, x._version
        out = apply(x)
        assert out is alias, op
        assert x._version > version, op
        results.append(alias.tolist())
    assert results[0] == results[1], op


def test_the_statement_form_keeps_the_alias():
    x = disthook.arange(6)
    alias = x
    x %= 4
    x //= 2
    x <<= 2
    x >>= 1
    assert x is alias and alias.tolist() == [0, 0, 2, 2, 0, 0]
