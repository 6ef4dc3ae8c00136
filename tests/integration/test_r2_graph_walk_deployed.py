"""A program that walks the autograd graph of a deployed model's output (torchviz's
``make_dot``, torch-pruning's dependency graph: ``grad_fn.next_functions`` down to the
leaves) meets nodes that stand for a placed part's call, or for the stages of a chain, whose
ops and parameters' AccumulateGrad nodes stayed on the workers. The walk is told so
(UserWarning naming the part), where it used to see a smaller graph in silence; the backward's
own reads of the same nodes say nothing, and a single op run on a worker (one node, as in one
process) is walked without a word."""
import warnings

import pytest
from helpers import TwoLayers

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def walk(out) -> list:
    """The node names a make_dot-style walk reaches from ``out``."""
    seen, names, stack = set(), [], [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.append(fn.name())
        stack.extend(f for f, _ in fn.next_functions)
    return names


def quiet_backward(out) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out.sum().backward()


def test_a_walk_through_a_placed_parts_call_is_told(cluster):
    torch.manual_seed(0)
    model = cluster.deploy(TwoLayers(), stages=2)
    try:
        x = torch.randn(5, 3, requires_grad=True)
        out = model(x)
        with pytest.warns(UserWarning, match=r"part 'q' of the deployed TwoLayers.*"
                                             r"AccumulateGrad nodes.*remote\.to_local\(\)"):
            names = walk(out)
        assert names[0] == "AddmmBackward0"  # (still printed as the worker's last op)
        quiet_backward(out)
        assert x.grad is not None
    finally:
        model.close()


def test_a_walk_through_a_chains_stages_is_told(cluster):
    torch.manual_seed(0)
    model = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)),
                           stages=2)
    try:
        out = model(torch.randn(5, 3, requires_grad=True))
        with pytest.warns(UserWarning, match="stages 0 to 1 of the deployed Sequential"):
            walk(out)
        quiet_backward(out)
    finally:
        model.close()


def test_an_op_run_on_a_worker_is_walked_without_a_word(cluster):
    torch.manual_seed(0)
    model = cluster.deploy(TwoLayers(), stages=2)
    try:
        h = model.p(torch.randn(5, 3, requires_grad=True))
        doubled = h * 2  # runs on p's worker, where h is: one node, MulBackward0
        assert doubled.grad_fn.name() == "MulBackward0"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            edges = doubled.grad_fn.next_functions
        assert edges[0][0] is h.grad_fn
    finally:
        model.close()
