"""A client backward hook of a deployed model that returns a gradient made in
``inference_mode``: in one process that gradient is an inference tensor, and a later hook
that changes it in place raises torch's RuntimeError. Deployed, the worker got a plain
tensor: the change went through and the backward finished, with the doubled gradient
(fuzzer seed 1806, second difference)."""
from __future__ import annotations

import pytest

import disthook as T
from disthook import nn


def _run(deploy, in_place: bool):
    T.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(3, 3)), nn.Linear(3, 3))

    def replace(m, grad_input, grad_output):
        with T.inference_mode():
            return (grad_input[0] * 2,)

    def change(m, grad_input, grad_output):
        if in_place:
            grad_input[0].mul_(2)
        return None

    model[0][0].register_full_backward_hook(replace)
    model[0].register_full_backward_hook(change)
    model = deploy(model)
    x = T.ones(2, 3, requires_grad=True)
    model(x).sum().backward()
    return x.grad.numpy().round(5).tolist()


def _deployed(cluster, in_place: bool):
    placed = []
    try:
        return _run(lambda m: placed.append(cluster.deploy(m, stages=2)) or placed[-1],
                    in_place)
    finally:
        for remote in placed:
            remote.close()


@pytest.mark.filterwarnings("ignore:the backward of the deployed:RuntimeWarning")
def test_an_inference_gradient_changed_in_place_raises_deployed(cluster):
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        _run(lambda m: m, True)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        _deployed(cluster, True)


def test_an_inference_gradient_read_only_flows_deployed(cluster):
    assert _deployed(cluster, False) == _run(lambda m: m, False)
