"""``to(dtype)``, ``double()``, ``half()`` and ``float()`` on a deployed model convert its
tensors on their workers, in place as in one process: the parameters stay the same objects
(an optimizer made before still steps them), their gradients are converted too, buffers
follow, and the model computes in the new dtype with one process's values. They were
refused before ("convert the model before deploying it")."""
import pytest
from helpers import norm_chain, norm_tree

import disthook as torch

pytestmark = pytest.mark.timeout(240)


def session(model):
    """Each conversion in turn, with a step of an optimizer made before them; what the
    model holds and computes after each."""
    torch.manual_seed(1)
    x = torch.randn(5, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []

    def look(tag, out):
        seen.append((tag, str(out.dtype), out.detach().numpy().tolist(),
                     sorted({str(t.dtype) for t in model.state_dict().values()}),
                     [None if p.grad is None else (str(p.grad.dtype), p.grad.numpy().tolist())
                      for p in model.parameters()]))

    out = model(x)
    out.sum().backward()
    model.double()  # the gradients of that backward are converted with the weights
    look("double", model(x.double()))
    opt.step()
    opt.zero_grad()
    out = model(x.double())
    out.pow(2).sum().backward()
    look("double, stepped", out)
    model.to(torch.float32)
    look("to float32", model(x))
    model.half()
    look("half", model(x.half()))
    model.float()
    look("float", model(x))
    return seen


@pytest.mark.parametrize("make", [norm_tree, norm_chain], ids=["tree", "chain"])
def test_conversions_run_on_the_workers_as_in_one_process(cluster_2_or_3, make):
    torch.manual_seed(0)
    want = session(make())
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(make(), stages=2 if make is norm_tree else cluster_2_or_3.stages)
    try:
        got = session(remote)
    finally:
        remote.close()
    assert [g[:2] for g in got] == [w[:2] for w in want]  # the steps' dtypes
    assert got == want


def test_a_conversion_that_changes_nothing_sends_nothing(cluster_2_or_3):
    remote = cluster_2_or_3.deploy(norm_chain(), stages=cluster_2_or_3.stages)
    try:
        remote.stats(reset=True)
        remote.float()
        remote.to(torch.float32)
        remote.to("cpu")
        assert remote.stats()["requests"] == 0
    finally:
        remote.close()
