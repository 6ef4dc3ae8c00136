"""``autograd.grad(loss, [p0, p1])`` naming parameters of two stages of a deployed chain: in
one process the backward runs only what leads to them, so a full backward hook on the first
stage's module, whose input gradient is not asked for, does not fire. Deployed, the first
stage stopped at its parameter only when every parameter named was on it: with one on a
later stage it ran its whole backward, and the hook fired (fuzzer seed 1806)."""
from __future__ import annotations

import pytest

import disthook as T
from disthook import nn


def _log(deploy, names, roots) -> list:
    T.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(3, 3)), nn.Linear(3, 3))
    log = []
    model[0][0].register_full_backward_hook(lambda m, gi, go: log.append("full backward hook"))
    model = deploy(model)
    x = T.ones(2, 3, requires_grad=True)
    out = model(x)
    loss = out.sum()
    params = [model.get_parameter(n) for n in names]
    if roots:  # two roots, gradients given
        got = T.autograd.grad([out, loss], params, grad_outputs=[T.ones(2, 3) / 2, T.tensor(2.0)])
    else:
        got = T.autograd.grad(loss, params)
    log.append([g.detach().numpy().round(5).tolist() for g in got])
    return log


@pytest.mark.parametrize("roots", [False, True], ids=["one_root", "two_roots"])
@pytest.mark.parametrize("names", [["0.0.bias", "1.bias"], ["0.0.weight", "1.weight"],
                                   ["0.0.bias"]], ids=["biases", "weights", "first_only"])
def test_grad_to_parameters_of_two_stages_fires_no_input_side_hook(cluster, names, roots):
    want = _log(lambda m: m, names, roots)
    assert len(want) == 1  # no hook call in one process
    placed = []
    try:
        got = _log(lambda m: placed.append(cluster.deploy(m, stages=2)) or placed[-1],
                   names, roots)
    finally:
        for remote in placed:
            remote.close()
    assert got == want
