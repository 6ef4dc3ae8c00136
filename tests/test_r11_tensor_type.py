"""``Tensor.type(t)`` with a class: ``torch.Tensor`` is the default tensor type (its dtype
follows ``set_default_dtype``; loss-landscape's ``d.type(type(w))``), a legacy class gives its
dtype, and any other class is refused with torch's ValueError (``x.type(int)`` was cast to
int64 and ``x.type(float)`` to float32, silently)."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("default", ["float32", "float64"])
@pytest.mark.parametrize("target", ["Tensor", "FloatTensor", "DoubleTensor", "IntTensor",
                                    "torch.LongTensor"])
def test_type_of_a_class_or_name_is_torchs(default, target):
    values = np.array([1.5, -2.25, 3.0])
    got, expected = [], []
    for lib, out in ((disthook, got), (torch, expected)):
        before = lib.get_default_dtype()
        lib.set_default_dtype(getattr(lib, default))
        try:
            x = lib.tensor(values, dtype=lib.float64 if default == "float32" else lib.float32)
            arg = target if target.startswith("torch.") else getattr(lib, target)
            y = x.type(arg)
            out.extend([str(y.dtype), y.tolist(), x.type()])
        finally:
            lib.set_default_dtype(before)
    assert got == expected


@pytest.mark.parametrize("cls", [int, float, object, "Parameter"])
def test_type_of_another_class_is_refused_as_torch_does(cls):
    messages = []
    for lib in (disthook, torch):
        c = lib.nn.Parameter if cls == "Parameter" else cls
        with pytest.raises(ValueError) as info:
            lib.ones(2).type(c)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
