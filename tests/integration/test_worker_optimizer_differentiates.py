"""An optimizer class the workers can import steps there, each worker over its own stage's
parameters. A step that differentiates (AdaHessian's Hessian products from ``p.grad``) would
see only that stage's graph there: the other stages' terms, and the loss's own second
derivative computed on the client, missing. It is refused with an error that says so and how
to step it in the training process, where a class of the script's own gives one process's
values (before: a misleading "appears to not have been used in the graph")."""
import sys
import textwrap

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(240)

SOURCE = textwrap.dedent('''
    import disthook as torch
    from disthook.optim import Optimizer


    class HessianDiagonal(Optimizer):
        """A plain step by p.grad scaled with a Hutchinson estimate of the Hessian's diagonal."""

        def __init__(self, params, lr=0.05):
            super().__init__(params, dict(lr=lr))

        @torch.no_grad()
        def step(self, closure=None):
            params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            zs = [torch.ones_like(p) for p in params]
            products = torch.autograd.grad(grads, params, grad_outputs=zs)
            for p, g, h in zip(params, grads, products):
                p.sub_(self.param_groups[0]["lr"] * g / (h.abs() + 1))
''')


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 8)
        self.b = nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def train(model, optimizer_class):
    torch.manual_seed(1)
    x, y = torch.randn(10, 5), torch.randint(0, 3, (10,))
    opt = optimizer_class(model.parameters(), lr=0.05)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward(create_graph=True)
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def test_an_optimizer_that_differentiates_in_its_step_is_refused_on_the_workers(
        tmp_path, monkeypatch):
    (tmp_path / "hessian_opt.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the workers import it by name
    import hessian_opt

    class LocalHessianDiagonal(hessian_opt.HessianDiagonal):  # the script's own: steps here
        pass

    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        model = Net()
        want = train(_copy(model), hessian_opt.HessianDiagonal)  # one process
        with local_cluster(workers=2) as cluster:
            deployed = cluster.deploy(_copy(model), stages=2)
            with pytest.raises(RuntimeError, match="on their workers") as info:
                train(deployed, hessian_opt.HessianDiagonal)
            assert "HessianDiagonal.step() differentiates" in str(info.value)
            assert "class LocalHessianDiagonal(" in str(info.value)
            again = cluster.deploy(_copy(model), stages=2)
            got = train(again, LocalHessianDiagonal)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)
        sys.modules.pop("hessian_opt", None)


def _copy(model):
    import copy

    return copy.deepcopy(model)
