"""``torch.autocast("cpu")`` around a deployed model (timm's and HF Trainer's mixed-precision
step on the CPU). The region does not reach the workers: the placed layers computed in
float32 there, where one process computes them in bfloat16 (an output of another dtype and
other values, silently). The call is now refused, naming the region and what to do; a region
disabled inside it (``enabled=False``) and a forward after it give one process's values.

A part's output kept on its worker (the second call on: its answer's form is known), cast to
bfloat16 there (``h.to(torch.bfloat16)``, or a region's cast of it): the op's numpy dtype
travelled as ``"<V2"``, which the worker read as a plain void, so the cast made bytes of no
dtype and its answer could not be sent (WireError). It reads as bfloat16 now."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.service import op_calls

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2
X = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


@pytest.mark.parametrize("make", [Net, chain], ids=["own-forward", "chain"])
def test_a_deployed_forward_inside_cpu_autocast_is_refused(cluster, make):
    model = cluster.deploy(make(), stages=2)
    try:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            with pytest.raises(NotImplementedError,
                               match=r"runs on a worker inside torch.autocast\('cpu', "
                               r"dtype=torch.bfloat16\).*outside the autocast region"):
                model(torch.tensor(X))
            with torch.autocast(device_type="cpu", enabled=False):  # a region switched off
                inner = model(torch.tensor(X))
        loss = model(torch.tensor(X)).pow(2).sum()
        loss.backward()
        one = make()
        want = one(torch.tensor(X))
        want.pow(2).sum().backward()
        assert inner.dtype == torch.float32
        np.testing.assert_allclose(inner.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        for p, q in zip(model.parameters(), one.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    finally:
        model.close()


def test_a_deployed_train_step_inside_cpu_autocast_is_refused(cluster):
    model = cluster.deploy(chain(), stages=2, chunks=2)
    try:
        with torch.amp.autocast("cpu"), pytest.raises(
                NotImplementedError, match=r"train_step runs on a worker inside torch.autocast"):
            model.train_step(torch.tensor(X), torch.zeros(5, 2), nn.MSELoss())
    finally:
        model.close()


def test_ops_inside_autocast_on_a_deployed_parts_output_compute_as_one_process(cluster):
    """A part called outside the region, its output used by covered ops inside it: those ops
    cast their arguments here as one process does, so they go on (bfloat16 values equal)."""
    m = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2))

    def run(model):
        h = model.a(torch.tensor(X))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            y = h @ m
            z = nn.functional.linear(h, m.t()).relu().sum(-1)
        return y, z

    want = run(Net())
    model = cluster.deploy(Net(), stages=2)
    try:
        run(model)  # (the part's answer's form is known from the second call on: kept there)
        for a, b in zip(run(model), want):
            assert a.dtype == b.dtype == torch.bfloat16
            np.testing.assert_array_equal(a.float().detach().numpy(), b.float().detach().numpy())
    finally:
        model.close()


def test_a_numpy_bfloat16_dtype_parameter_decodes_as_bfloat16():
    dt = torch.bfloat16.np
    back = op_calls.decode_params(op_calls.encode_params({"dtype": dt}))
    assert back["dtype"] == dt and back["dtype"].name == "bfloat16"


def test_a_kept_output_converted_to_bfloat16_is_one_process_s(cluster):
    m = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2))

    def run(model):
        h = model.a(torch.tensor(X))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            y = h @ m
        return h.to(torch.bfloat16) * 2, y

    want = run(Net())
    model = cluster.deploy(Net(), stages=2)
    try:
        for _ in range(2):  # the second call's output is kept on the worker
            for a, b in zip(run(model), want):
                assert a.dtype == b.dtype == torch.bfloat16
                np.testing.assert_array_equal(a.float().detach().numpy(),
                                              b.float().detach().numpy())
    finally:
        model.close()
