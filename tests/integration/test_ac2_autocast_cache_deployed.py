"""A deployed model called twice inside one ``torch.autocast("cpu")`` region, both calls'
outputs in one backward. One process casts the weights once for the region and sums the
two calls' bfloat16 gradients before that cast's backward (torch's cache of a region's
casts, ``tests/parity/test_ac2_autocast_cache.py``); the workers cast at each call and run
each call's backward on its own, so the gradients met in float32: other ``.grad`` bits,
silently. That backward is refused now, saying what to do; a region per call, a region
with ``cache_enabled=False``, or one call's output alone in the backward compute as one
process."""
import numpy as np
import pytest
from helpers import TANH_X, TanhNet, deployed_run, tanh_chain

import disthook as torch

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2
MAKES = pytest.mark.parametrize("make", [TanhNet, tanh_chain], ids=["own-forward", "chain"])


def _x(scale=1.0):
    return torch.tensor(TANH_X) * scale


def _loss(a, b):
    return a.float().pow(2).sum() + b.float().pow(2).sum() * 3


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def _same(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.filterwarnings("ignore:the backward failed after")  # (the first call's ran)
@MAKES
def test_two_calls_of_one_region_in_one_backward_are_refused(cluster, make):
    def run(model):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            a, b = model(_x()), model(_x(2))
            try:
                _loss(a, b).backward()
            except NotImplementedError as exc:
                return str(exc)
        return _grads(model)

    got, want = deployed_run(cluster, make, run)
    assert isinstance(want, list)  # one process: torch's gradients
    assert isinstance(got, str) and "autocast" in got and "cache_enabled=False" in got, got


@MAKES
def test_a_region_per_call_or_no_cache_or_one_output_is_one_process(cluster, make):
    def run(model):
        logs = []
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            a = model(_x())
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            b = model(_x(2))
        _loss(a, b).backward()
        logs.append(_grads(model))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, cache_enabled=False):
            a, b = model(_x()), model(_x(2))
        _loss(a, b).backward()
        logs.append(_grads(model))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            a, b = model(_x()), model(_x(2))
            a.float().sum().backward()  # one call's backward, then the other's
            b.float().sum().backward()
        logs.append(_grads(model))
        return logs

    got, want = deployed_run(cluster, make, run)
    for g, w in zip(got, want):
        _same(g, w)
