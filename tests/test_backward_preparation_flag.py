"""A backward that fails while it reads its graph (before any node runs) leaves no trace of
itself in what the engine tells code that reads edges: ``engine.names_inputs()`` (whether the
backward being prepared names its inputs, read by a deployed call's node when its edges are
asked for) is False again afterwards, not the failed backward's True."""
import pytest

import disthook as torch
from disthook.autograd import engine


def test_a_backward_failing_in_its_preparation_leaves_names_inputs_false():
    x = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        view = x[:2]  # requires grad through its base; no gradient reaches it
    w = torch.ones(2, requires_grad=True)
    out = (w * 2).sum()
    with torch.no_grad():
        x.mul_(2)  # its base changed: reading the view's edge raises, as torch's
    assert engine.names_inputs() is False
    with pytest.raises(RuntimeError, match="created in no_grad mode and its base"):
        torch.autograd.grad(out, [w, view], allow_unused=True)
    assert engine.names_inputs() is False
    (g,) = torch.autograd.grad((w * 3).sum(), [w])  # and the next one runs as ever
    assert g.tolist() == [3.0, 3.0]
