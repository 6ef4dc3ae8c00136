"""A client hook that fails on a model deployed with ``chunks`` (BackPACK's per-sample
gradients from an input a forward hook kept, ``einsum`` of ``grad_output`` and
``module.input0``): the error is the hook's own, and a note on it says that the hook ran on
one micro-batch and that what hooks keep between calls may be another micro-batch's, which
is what the mismatch is about; without chunks, no note."""
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def keep_input(module, args, output):
    module.input0 = args[0].detach()


def per_sample_norms(module, grad_input, grad_output):
    per_sample = torch.einsum("ni,nj->nij", grad_output[0], module.input0)
    module.norms = per_sample.square().sum((1, 2))


def run(model):
    for m in (model.a, model.b) if isinstance(model, Net) else (model[0], model[2]):
        m.register_forward_hook(keep_input)
        m.register_full_backward_hook(per_sample_norms)
    torch.manual_seed(0)
    x = torch.randn(5, 4, requires_grad=True)  # 5 rows: micro-batches of 3 and 2
    model(x).sum().backward()


@pytest.mark.parametrize("chain", [False, True], ids=["forward-here", "chain"])
def test_a_hook_failing_on_a_micro_batch_says_so(cluster, chain):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)) if chain else Net()
    model = cluster.deploy(net, stages=2, chunks=2)
    try:
        with pytest.raises(RuntimeError) as info:
            run(model)
        notes = "\n".join(getattr(info.value, "__notes__", ()))
        assert "chunks=2" in notes and "micro-batch" in notes
    finally:
        model.close()


def test_without_chunks_the_hooks_see_the_batch(cluster):
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        run(model)
        assert model.a.norms.shape == (5,)
    finally:
        model.close()
