"""What the differential hook fuzzer (test_f1_hook_fuzz.py) found on deployed models, each as
the small program it came down to: a weight tied between two placed parts, its gradient
asked for by ``autograd.grad`` or ``backward(inputs=)`` (only one part's share came back); a
Node hook on the ``grad_fn`` of a placed call's output (it saw the call's inputs' gradients,
not those of the op one process gives it: refused now, saying what to hook instead); a
client hook changing in place the call's own argument, a tensor of the program's (one
process changes the program's tensor; deployed only the worker's copy changed: refused then,
changed back as in one process since test_d1_changed_arguments.py, while a value that stays
on the workers is changed there); ``backward(inputs=)`` naming
only a parameter of a placed part (the worker computed the part's input gradient anyway,
firing the full backward hook that one process never fires); retain_grad() called in a
forward hook, under an autograd.grad to a weight (the gradient never reached the client)."""
import warnings

import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Tied(nn.Module):
    """Two layers sharing one weight; its forward runs on the client once deployed, each
    layer a placed part of its own (both on one worker, as ties require)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x).tanh())


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), Tied()])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x))


def make():
    torch.manual_seed(0)
    return Root()


def _loss(model):
    x = torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]], requires_grad=True)
    return (model(x) * torch.arange(6.).reshape(2, 3)).sum()


@pytest.mark.parametrize("how", ["grad", "inputs", "backward"])
def test_a_tied_weight_gets_both_parts_gradients(cluster, how):
    def run(model):
        w = model.blocks[1].a.weight
        loss = _loss(model)
        if how == "grad":
            return torch.autograd.grad(loss, [w, model.blocks[1].b.bias])[0].numpy().copy()
        loss.backward(**({"inputs": [w]} if how == "inputs" else {}))
        return w.grad.numpy().copy()

    got, want = deployed_run(cluster, make, run)
    assert np.abs(want).max() > 0.1
    same_logs(got, want)


@pytest.mark.parametrize("method", ["register_hook", "register_prehook"])
def test_a_node_hook_on_a_placed_calls_output_is_refused(cluster, method):
    """One process: the post-hook sees AddmmBackward0's three gradients (bias, input,
    weight); the node here stands for the placed call and would see the call's input's."""
    def run(model):
        out = model.blocks[0](torch.ones(2, 3, requires_grad=True))
        getattr(out.grad_fn, method)(lambda *grads: None)
        return out.grad_fn.name()

    assert run(make()) == "AddmmBackward0"
    remote = cluster.deploy(make(), stages=2)
    try:
        with pytest.raises(NotImplementedError,
                           match=rf"grad_fn.{method}\(fn\) on an output of a deployed Root.*"
                                 r"AddmmBackward0 ran on the model's worker.*out.register_hook"):
            run(remote)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _loss(remote).backward()  # the model works on
    finally:
        remote.close()


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.b(self.a(x))


def _negate_input(module, args):
    args[0].mul_(-1)


@pytest.mark.parametrize("model, where", [(Pair, "a"), (lambda: nn.Sequential(
    nn.Linear(3, 3), nn.Linear(3, 3)), "0")], ids=["placed part", "chain"])
def test_a_hook_changing_the_programs_own_tensor_in_place_changes_it(cluster, model, where):
    """One process: the hook changes ``x`` itself (the program sees it negated after the
    call, its version moved by one); deployed, the worker's copy changed and ``x`` kept its
    values, silently (refused later; now changed as in one process)."""
    def run(m):
        m.get_submodule(where).register_forward_pre_hook(_negate_input)
        x = torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]])
        with torch.no_grad():
            out = m(x)
        return x.tolist(), x._version, out.tolist()

    torch.manual_seed(0)
    want = run(model())
    assert want[0][0] == pytest.approx([-0.3, 0.2, -0.5]) and want[1] == 1
    torch.manual_seed(0)
    remote = cluster.deploy(model(), stages=2)
    try:
        got = run(remote)
        assert got[1] == want[1]
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[2], want[2], rtol=1e-6)
    finally:
        remote.close()


def test_a_hook_changing_a_value_that_stays_on_the_workers_in_place_runs(cluster):
    """The second part's argument is the first part's output, kept on the workers (the
    program never holds it here): changed in place there, as in one process."""
    def run(m):
        m.b.register_forward_pre_hook(_negate_input)
        return m(torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]])).detach().numpy()

    got, want = deployed_run(cluster, lambda: (torch.manual_seed(0), Pair())[1], run)
    same_logs(got, want)


@pytest.mark.parametrize("how", ["inputs", "grad"])
def test_a_backward_to_a_parameter_alone_fires_no_hook_of_the_inputs_side(cluster, how):
    """backward(inputs=[pair.a.bias]): one process never runs the node on ``a``'s input
    side, so ``a``'s full backward hook does not fire (its pre-hook does); deployed the
    worker computed the input's gradient anyway and fired it."""
    def run(model):
        log = []
        model.a.register_full_backward_hook(lambda m, gi, go: log.append("a full"))
        model.a.register_full_backward_pre_hook(lambda m, go: log.append("a pre"))
        model.b.register_full_backward_hook(lambda m, gi, go: log.append("b full"))
        loss = model(torch.tensor([[0.3, -0.2, 0.5]], requires_grad=True)).sum()
        if how == "inputs":
            loss.backward(inputs=[model.a.bias])
            return log, model.a.bias.grad.numpy().copy()
        return log, torch.autograd.grad(loss, [model.a.bias])[0].numpy().copy()

    got, want = deployed_run(cluster, lambda: (torch.manual_seed(0), Pair())[1], run)
    assert want[0] == ["b full", "a pre"]
    same_logs(got, want)


@pytest.mark.parametrize("how", ["grad", "inputs"])
def test_retain_grad_in_a_hook_under_a_backward_to_parameters(cluster, how):
    """A forward hook keeps its output and calls retain_grad(); autograd.grad (or
    backward(inputs=)) to a weight of that part: the output's ``.grad`` is its gradient in
    one process; the worker stopped at the weight and never sent it (None)."""
    def run(model):
        kept = []

        def keep(module, args, out):
            out.retain_grad()
            kept.append(out)

        model.a.register_forward_hook(keep)
        loss = (model(torch.tensor([[0.3, -0.2, 0.5]], requires_grad=True))
                * torch.tensor([1., 2., 3.])).sum()
        if how == "grad":
            torch.autograd.grad(loss, [model.a.weight])
        else:
            loss.backward(inputs=[model.a.weight])
        return kept[0].grad.numpy().copy()

    got, want = deployed_run(cluster, lambda: (torch.manual_seed(0), Pair())[1], run)
    same_logs(got, want)
