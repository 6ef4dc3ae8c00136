"""``alpha`` given as a one-element tensor (DARTS' Hessian-vector product steps parameters by
``p.data.add_(v, alpha=R)`` with ``R = r / v.norm()``): taken as its number, as torch takes
it, with grad mode on or off (off, the in-place forms failed: numpy times a Tensor; a
deployed parameter's write runs that way on its worker); a longer tensor is torch's
TypeError."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

CALLS = {
    "add_": lambda lib, t, v, a: t.clone().add_(v, alpha=a),
    "sub_": lambda lib, t, v, a: t.clone().sub_(v, alpha=a),
    "add": lambda lib, t, v, a: t.add(v, alpha=a),
    "sub": lambda lib, t, v, a: lib.sub(t, v, alpha=a),
}


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("name", CALLS)
def test_a_one_element_alpha_is_its_number(name, grad):
    out = []
    for lib in (torch, disthook):
        t = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64)
        v = lib.tensor([0.5, 0.25, 2.0], dtype=lib.float64)
        with lib.set_grad_enabled(grad):
            out.append(CALLS[name](lib, t, v, lib.tensor(0.01) / v.norm()).numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-7)


@pytest.mark.parametrize("name", CALLS)
def test_a_longer_alpha_is_refused_as_torch(name):
    t = disthook.ones(2)
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'alpha' must be Number, not "
                                        "Tensor"):
        CALLS[name](disthook, t, t, disthook.tensor([1.0, 2.0]))
