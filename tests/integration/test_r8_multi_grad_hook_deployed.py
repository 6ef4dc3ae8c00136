"""``torch.autograd.graph.register_multi_grad_hook`` with a deployed model's parameters. One
process fires ``mode="any"`` with the first gradient its engine computes: over the call's
input ``x`` and the first layer's weight, ``x``'s (the layer's node gives ``x``'s gradient
at once, the weight's only through the transpose's node). Deployed, the workers compute the
weight's gradient before this process gets ``x``'s, so such a mix is refused; so is
``mode="all"`` over a deployed parameter (this process cannot tell whether its backward
reaches it). ``mode="any"`` over parameters only fires as in one process."""
import numpy as np
import pytest
from helpers import TwoLayers, deployed_run, same_logs

import disthook as torch

CLUSTER_WORKERS = 2


def Net():
    torch.manual_seed(0)
    return TwoLayers()


def _x():
    rng = np.random.default_rng(0)
    return torch.tensor(rng.standard_normal((5, 3)).astype(np.float32), requires_grad=True)


def _run(mode, tensors):
    """The multi-grad hook over ``tensors(model, x)``; what it was given, per backward."""
    def run(model):
        log = []
        x = _x()
        if mode == "any":
            def fn(grad):
                log.append(grad.numpy().copy())
        else:
            def fn(grads):
                log.append([None if g is None else g.numpy().copy() for g in grads])
        torch.autograd.graph.register_multi_grad_hook(tensors(model, x), fn, mode=mode)
        for _ in range(2):
            model(x).sum().backward()
        return log
    return run


def _input_and(path):
    return lambda model, x: [x, model.get_parameter(path)]


def test_one_process_any_gives_the_inputs_gradient_first():
    """The pattern the deployed refusal is about (and torch's answer, in one process)."""
    log = _run("any", _input_and("p.weight"))(Net())
    assert [g.shape for g in log] == [(5, 3), (5, 3)]


@pytest.mark.parametrize("mode, path", [("any", "p.weight"), ("any", "q.weight"),
                                        ("all", "p.weight"), ("all", "q.weight")])
def test_mixed_with_this_process_is_refused(cluster, mode, path):
    remote = cluster.deploy(Net(), stages=2)
    try:
        with pytest.raises(RuntimeError, match=rf"mode='{mode}'.*'{path}'.*register_hook"):
            _run(mode, _input_and(path))(remote)
    finally:
        remote.close()


def test_all_over_parameters_only_is_refused(cluster):
    remote = cluster.deploy(Net(), stages=2)
    try:
        with pytest.raises(RuntimeError, match=r"mode='all'\) over a deployed model's param"):
            _run("all", lambda m, x: [m.p.weight, m.q.weight])(remote)
    finally:
        remote.close()


def test_any_over_parameters_only_as_one_process(cluster):
    got, want = deployed_run(cluster, Net,
                             _run("any", lambda m, x: [m.p.weight, m.q.bias, m.p.bias]))
    assert len(want) == 2
    same_logs(got, want)
