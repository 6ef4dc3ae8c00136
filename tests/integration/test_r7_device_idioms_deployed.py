"""A GPU-first training script run on a deployed model, unchanged: the device picked with
``torch.cuda.is_available()``, ``model.to(device)``, inputs moved to the parameters' device,
``torch.compile(model)`` (an ``OptimizedModule`` holding the deployed model, its state dict
keys under ``_orig_mod.``), caches emptied and memory logged every step. It computes what the
same script computes in one process."""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.act, self.b = nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(self.act(self.a(x)))

    @property
    def device(self):  # the property people add
        return next(self.parameters()).device


def script(model):
    """The loop as written for a GPU; what it logs and the compiled model's checkpoint."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.compile(model.to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(3)
    data = [torch.randn(5, 4) for _ in range(3)]
    log = []
    for x in data:
        x = x.to(model.device, non_blocking=True)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        log.append((round(loss.item(), 6), torch.cuda.max_memory_allocated()))
    model.eval()
    with torch.no_grad():
        out = model(data[0].to(next(model.parameters()).device))
    return model, log, out.numpy(), {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_a_gpu_first_script_on_a_deployed_model(cluster):
    torch.manual_seed(0)
    here = Net()
    there = Net()
    there.load_state_dict(here.state_dict())
    cluster.deploy(there, stages=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, log_here, out_here, sd_here = script(here)
        compiled, log, out, sd = script(there)
    assert compiled._orig_mod is there and type(compiled).__name__ == "OptimizedModule"
    assert there.training is False  # eval() reached the deployed model
    assert log == log_here and np.allclose(out, out_here, atol=1e-6)
    assert list(sd) == list(sd_here) and next(iter(sd)) == "_orig_mod.a.weight"
    for key, value in sd.items():
        np.testing.assert_allclose(value, sd_here[key], atol=1e-6, err_msg=key)
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        compiled.cuda()
