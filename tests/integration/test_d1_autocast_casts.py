"""Which backwards through deployed calls of one ``torch.autocast("cpu")`` region are refused
(``autocast_mode.check_one_cast``): one process keeps the region's cast of a leaf that
requires grad (a weight) and sums the gradients of every use of that cast in the region's
dtype before its backward; the workers cast at each call. The refusal asked about the
part called twice, whatever it did: a part with no op the region lowers (an elementwise
scale) was refused though it computes as one process; and a weight tied across two parts
(one Parameter in both) was not asked about at all, its gradients meeting in float32,
silently. The worker now says which tensors its call's region cast and kept: the refusal
fires where two calls of one backward cast the same one."""
import numpy as np
import pytest
from helpers import TANH_X, deployed_run

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 4))

    def forward(self, x):
        return torch.tanh(x * self.w)


class _ScaledTwice(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.s = _Scale()

    def forward(self, x):
        return self.s(self.s(x))


def test_two_calls_of_a_part_the_region_casts_nothing_of_compute_as_one_process(cluster):
    def run(model):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = model(torch.tensor(TANH_X)) + model(torch.tensor(TANH_X) * 2)
        out.pow(2).sum().backward()
        return [out.detach().numpy()] + [p.grad.numpy().copy() for p in model.s.parameters()]

    got, want = deployed_run(cluster, _ScaledTwice, run, stages=1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.b.weight = self.a.weight  # one Parameter in two parts

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.mark.filterwarnings("ignore:the backward failed after")  # (the call of b's ran)
def test_a_weight_tied_across_two_parts_cast_once_in_one_process_is_refused(cluster):
    def run(model):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = model(torch.tensor(TANH_X))
        try:
            out.float().pow(2).sum().backward()
        except NotImplementedError as exc:
            return str(exc)
        return model.a.weight.grad.numpy().copy()

    got, want = deployed_run(cluster, _Tied, run, stages=1)
    assert isinstance(want, np.ndarray)  # one process: torch's gradients
    assert isinstance(got, str) and "autocast" in got and "cache_enabled=False" in got, got


class _TiedRegionPerCall(_Tied):
    def forward(self, x):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            h = torch.tanh(self.a(x))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return self.b(h)


def test_a_tied_weight_in_a_region_per_call_is_one_process(cluster):
    def run(model):
        model(torch.tensor(TANH_X)).float().pow(2).sum().backward()
        return model.a.weight.grad.numpy().copy()

    got, want = deployed_run(cluster, _TiedRegionPerCall, run, stages=1)
    np.testing.assert_array_equal(got, want)


class _TwoOnOneInput(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x) + self.b(x)


@pytest.mark.filterwarnings("ignore:the backward failed after")
def test_a_leaf_of_the_program_given_to_two_parts_in_one_region_is_refused(cluster):
    def run(model):
        x = torch.tensor(TANH_X, requires_grad=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = model(x)
        try:
            out.float().pow(2).sum().backward(inputs=[x])
        except NotImplementedError as exc:
            return str(exc)
        return x.grad.numpy().copy()

    got, want = deployed_run(cluster, _TwoOnOneInput, run, stages=2)
    assert isinstance(want, np.ndarray)
    assert isinstance(got, str) and "autocast" in got, got
