"""An optimizer class from a file run by path under a name of its own (``runpy``, a launcher's
or notebook's ``spec_from_file_location``) cannot be imported by that name on the workers: it
steps the deployed model's parameters here, as a class of the main script does, and trains
as in one process (the first ``step()`` failed on the workers, "No module named ...")."""
import importlib.util
import sys
import textwrap

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2

SOURCE = textwrap.dedent('''
    import disthook as torch
    from disthook.optim import Optimizer


    class SignMomentum(Optimizer):
        def __init__(self, params, lr=0.01, beta=0.9):
            super().__init__(params, dict(lr=lr, beta=beta))

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["buf"] = torch.zeros_like(p)
                    state["buf"].mul_(group["beta"]).add_(p.grad)
                    p.add_(state["buf"].sign(), alpha=-group["lr"])
''')


@pytest.fixture
def loose_module(tmp_path):
    path = tmp_path / "optimizer_file.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("r9_optimizer_by_path", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def train(model, optimizer_class):
    torch.manual_seed(1)
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    opt = optimizer_class(model.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def test_an_optimizer_from_a_file_run_by_path_steps_a_deployed_model(cluster, loose_module):
    expected = train(make(), loose_module.SignMomentum)
    model = cluster.deploy(make(), stages=2)
    try:
        got = train(model, loose_module.SignMomentum)
    finally:
        model.close()
    assert got.keys() == expected.keys()
    for name in got:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
