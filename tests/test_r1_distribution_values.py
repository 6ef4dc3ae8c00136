"""A probability distribution as a value between a worker and the client
(disthook.service.values): its attributes travel as its state; the client makes it of its
own class (disthook's, or the program's found by name), a worker a namedtuple of them, and a
class the client cannot find by name is a TypeError that says what to do."""
import numpy as np
import pytest

import disthook as torch
from disthook.service.values import opaque_in, pack, tensors_in, unpack


class Tempered(torch.distributions.Categorical):
    def mode(self):
        return self.probs.argmax(-1)


def test_a_distribution_comes_back_of_its_class_with_its_state():
    logits = torch.tensor([[0.1, 2.0, -1.0], [0.5, 0.5, 0.0]], requires_grad=True)
    for d in (torch.distributions.Normal(logits, logits.exp()), Tempered(logits=logits)):
        assert opaque_in(d) is None
        assert len(list(tensors_in(d))) == len([v for v in vars(d).values()
                                                 if isinstance(v, torch.Tensor)])
        back = unpack(pack(d), classes=True)
        assert type(back) is type(d)
        assert type(back.batch_shape) is torch.Size and back.batch_shape == d.batch_shape
        np.testing.assert_allclose(back.entropy().numpy(), d.entropy().detach().numpy())
    assert back.mode().tolist() == [1, 0]


def test_a_worker_gets_a_namedtuple_and_a_class_not_found_is_said():
    def make():
        class Local(torch.distributions.Categorical):
            pass
        return Local(logits=torch.zeros(2, 3))

    first = make()
    packed = pack(first)
    on_worker = unpack(packed)
    assert type(on_worker).__name__ == "Local" and on_worker.logits.shape == (2, 3)
    # the one class of that name made in a function here is the program's own: found
    assert type(unpack(packed, classes=True)) is type(first)
    second = make()  # a second call made another class of that name: which one is unknown
    assert type(second) is not type(first)
    with pytest.raises(TypeError, match=r"make.<locals>.Local, which is not found here "
                                        r"by that name.*define the class at the top level"):
        unpack(packed, classes=True)


def test_only_disthooks_modules_of_value_classes_are_imported_for_a_value():
    """A value naming a module to make its class imports only disthook's value modules,
    never a private one or a ``__main__`` (``disthook.bench.__main__`` would run a benchmark
    and exit the worker)."""
    import sys

    from disthook.service.values import _importable

    assert _importable("disthook.nn.utils.rnn") and _importable("disthook.distributions.normal")
    for name in ("disthook.bench.__main__", "disthook.bench", "disthook.nn._private",
                 "disthook.cli", "os", "disthook.nn.utils..rnn"):
        assert not _importable(name), name
    sys.modules.pop("disthook.bench.__main__", None)
    packed = pack(torch.distributions.Normal(torch.zeros(2), torch.ones(2)))
    packed["named"]["class"] = "disthook.bench.__main__:X"
    with pytest.raises(TypeError, match="not found here by that name"):
        unpack(packed, classes=True)
    assert "disthook.bench.__main__" not in sys.modules
