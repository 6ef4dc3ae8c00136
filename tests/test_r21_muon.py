"""torch.optim.Muon: momentum, the bfloat16 Newton-Schulz orthogonalization, decoupled weight
decay and the shape-scaled step, compared with torch step by step (tall, wide and square
matrices; nesterov on and off; both learning-rate adjustments)."""
import numpy as np
import pytest

import disthook
from disthook import optim

torch = pytest.importorskip("torch")


def run(lib, shapes, steps=3, **options):
    rng = np.random.default_rng(0)
    params = [lib.nn.Parameter(lib.tensor(rng.standard_normal(s), dtype=lib.float32))
              for s in shapes]
    targets = [lib.tensor(rng.standard_normal(s), dtype=lib.float32) for s in shapes]
    opt = lib.optim.Muon(params, lr=0.02, **options)
    for _ in range(steps):
        opt.zero_grad()
        sum(((p * p * p - t) ** 2).sum() for p, t in zip(params, targets)).backward()
        opt.step()
    buffers = [opt.state[p]["momentum_buffer"].detach().numpy() for p in params]
    return [p.detach().numpy() for p in params], buffers


@pytest.mark.parametrize("options", [
    {}, {"nesterov": False, "weight_decay": 0.0},
    {"adjust_lr_fn": "match_rms_adamw", "momentum": 0.9},
    {"adjust_lr_fn": "original", "ns_steps": 3, "ns_coefficients": (2.0, -1.5, 0.5)},
], ids=["defaults", "plain-momentum", "match-rms-adamw", "original-3-steps"])
def test_muon_steps_as_torch(options):
    shapes = [(7, 3), (3, 7), (5, 5)]
    got_values, got_buffers = run(disthook, shapes, **options)
    want_values, want_buffers = run(torch, shapes, **options)
    for got, want in zip(got_values + got_buffers, want_values + want_buffers):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_muon_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match="only supports 2D parameters"):
        optim.Muon([disthook.nn.Parameter(disthook.zeros(3))])
    with pytest.raises(ValueError, match="not supported"):
        optim.Muon([disthook.nn.Parameter(disthook.zeros(3, 3))], adjust_lr_fn="other")
    with pytest.raises(ValueError, match="less than 100"):
        p = disthook.nn.Parameter(disthook.ones(2, 2))
        p.grad = disthook.ones(2, 2)
        optim.Muon([p], ns_steps=100).step()
