"""What the differential hook fuzzer (test_f1_hook_fuzz_deployed.py, seeds 900-939) found on
deployed models, each as the small program it came down to.

An output of a module with a full backward hook (or pre-hook) is, in one process, a view
made by the hook's custom Function: changing it in place raises torch's "is a view and is
being modified inplace" (seeds 918, 925: the program's ``out.mul_(2)``, a forward hook of
the model's root changing its output). Deployed, the output of a placed call stood for the
worker's tensor without that mark, and the change went through, giving gradients one
process never computes.

A forward hook that changes its output in place on a part placed after another (seed 901),
then ``autograd.grad`` or ``backward(inputs=)`` naming a parameter of the part before: the
backward took the hook's tensor's gradient twice, through the call's graph on the worker
(which asked the client for the hook's part) and again through the tensor's node here, and
raised "Trying to backward through the graph a second time".

An output that the op which made it saved for backward (tanh, sigmoid), changed in place by
the program (seeds 966, 995, 1028, 1043, 1172, 1182, 1204): one process's backward raises
"one of the variables needed for gradient computation has been modified by an inplace
operation"; deployed, the change was made to the client's copy only, the worker's backward
used the value it saved, and the gradients came out as if nothing had changed.

A forward hook of a placed part that returns a new dict for the part's dict output
(``{"y": -out["y"]}``, seed 1093): its tensors went to the worker as plain values, so the
call's output no longer required grad and the part's parameters got no gradient (tuples
and tensors kept their graph)."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2
VIEW_INPLACE = "is a view and is being modified inplace"


class Root(nn.Module):
    """Two blocks, each a placed part once deployed; the forward runs on the client."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([
            nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def make():
    torch.manual_seed(0)
    return Root()


def _x(requires_grad=True):
    return torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]], requires_grad=requires_grad)


def _hooked(model, where: str, pre: bool):
    """A full backward (pre-)hook on the module at ``where``: its output is the hook's view."""
    m = model.get_submodule(where)
    if pre:
        m.register_full_backward_pre_hook(lambda mod, g: None)
    else:
        m.register_full_backward_hook(lambda mod, gi, go: None)


@pytest.mark.parametrize("where", ["blocks.1", "blocks.1.2"])
@pytest.mark.parametrize("pre", [True, False], ids=["pre_hook", "hook"])
@pytest.mark.parametrize("x_grad", [True, False], ids=["x_grad", "x_no_grad"])
def test_changing_a_backward_hooked_output_in_place_is_refused_as_in_one_process(
        cluster, where, pre, x_grad):
    def run(model):
        _hooked(model, where, pre)
        out = model(_x(x_grad))
        with pytest.raises(RuntimeError, match=VIEW_INPLACE):
            out.mul_(2)
        out.sum().backward()  # the output unchanged: its backward as before
        return [p.grad.numpy().copy() for p in model.parameters()]

    got, want = deployed_run(cluster, make, run)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["blocks.1", "blocks.1.2"])
def test_a_root_forward_hook_changing_that_output_in_place_is_refused(cluster, where):
    def run(model):
        _hooked(model, where, pre=True)
        model.register_forward_hook(lambda m, args, out: out.mul_(-1))
        with pytest.raises(RuntimeError, match=VIEW_INPLACE):
            model(_x(False))
        return True

    assert deployed_run(cluster, make, run) == (True, True)


def test_a_clone_of_that_output_is_changed_and_differentiated_as_in_one_process(cluster):
    """What the error message says to do works deployed too; so do an output without
    backward hooks, and the in-place change under no_grad."""
    def run(model):
        _hooked(model, "blocks.1", pre=False)
        out = model(_x()).clone()
        out.mul_(2)
        with torch.no_grad():
            plain = model.blocks[0](_x())
        plain.mul_(3)
        (out.sum() + model.blocks[0](_x()).mul_(2).sum()).backward()
        return [p.grad.numpy().copy() for p in model.parameters()] + [plain.numpy().copy()]

    got, want = deployed_run(cluster, make, run)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_output_of_a_chain_ending_in_a_backward_hooked_module_is_refused_too(cluster):
    """The whole model deployed as a chain of stages: its output is the last stage's."""
    def make_chain():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))

    def run(model):
        model[2].register_full_backward_pre_hook(lambda mod, g: None)
        out = model(_x())
        with pytest.raises(RuntimeError, match=VIEW_INPLACE):
            out.mul_(2)
        out.sum().backward()
        return [p.grad.numpy().copy() for p in model.parameters()]

    got, want = deployed_run(cluster, make_chain, run)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)

    def forward(self, x):
        return self.a(x).tanh()


class Two(nn.Module):
    """Two placed parts, the forward on the client; the second has a submodule to hook."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), Inner()])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x))


def make_two():
    torch.manual_seed(0)
    return Two()


@pytest.mark.parametrize("how", ["grad", "inputs", "grad_with_x"])
def test_an_in_place_change_in_a_later_part_s_hook_under_inputs(cluster, how):
    def run(model):
        model.blocks[1].a.register_forward_hook(lambda m, args, out: out.mul_(-1))
        x = _x()
        loss = (model(x) * torch.arange(6.).reshape(2, 3)).sum()
        w = model.blocks[0].weight
        if how == "inputs":
            loss.backward(inputs=[w])
            return [w.grad.numpy().copy(), x.grad]
        wrt = [w, x] if how == "grad_with_x" else [w]
        return [g.numpy().copy() for g in torch.autograd.grad(loss, wrt)]

    got, want = deployed_run(cluster, make_two, run)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if b is None:
            assert a is None
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class Saves(nn.Module):
    """Its second part ends in tanh, which saves its output for backward."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3),
                                     nn.Sequential(nn.Linear(3, 3), nn.Tanh())])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x))


def make_saves():
    torch.manual_seed(0)
    return Saves()


def make_chain_saves():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3), nn.Sigmoid())


@pytest.mark.parametrize("make_model", [make_saves, make_chain_saves], ids=["parts", "chain"])
@pytest.mark.parametrize("mode", ["grad", "no_grad"])
@pytest.mark.parametrize("how", ["backward", "grad"])
def test_an_output_its_op_saved_changed_in_place_is_refused_in_backward(
        cluster, make_model, mode, how):
    def run(model):
        x = _x()
        out = model(x)
        if mode == "no_grad":
            with torch.no_grad():
                out.mul_(2)
        else:
            out.mul_(2)
        loss = (out * 3).sum()
        with pytest.raises(RuntimeError) as caught:
            if how == "backward":
                loss.backward()
            else:
                torch.autograd.grad(loss, [x])
        return str(caught.value)

    got, want = deployed_run(cluster, make_model, run)
    assert "modified by an inplace operation" in want
    assert got == want


def test_an_output_no_op_saved_is_changed_in_place_as_in_one_process(cluster):
    """A Linear's output is saved by nothing: changed in place, its backward goes on."""
    def run(model):
        x = _x()
        out = model.blocks[0](x)
        out.mul_(2)
        (out * 3).sum().backward()
        return [x.grad.numpy().copy(), model.blocks[0].weight.grad.numpy().copy()]

    got, want = deployed_run(cluster, make_saves, run)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class DictOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        return {"y": h * 0.5, "z": h.tanh()}


class WithDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), DictOut()])

    def forward(self, x):
        out = self.blocks[1](self.blocks[0](x))
        return out["y"] + out["z"]


def make_dict():
    torch.manual_seed(0)
    return WithDict()


@pytest.mark.parametrize("x_grad", [True, False], ids=["x_grad", "x_no_grad"])
def test_a_forward_hook_returning_a_new_dict_keeps_the_graph(cluster, x_grad):
    def run(model):
        # a new value for one key, the given tensor itself for the other
        model.blocks[1].register_forward_hook(
            lambda m, args, out: {"y": -out["y"] * 2, "z": out["z"]})
        x = _x(x_grad)
        out = model(x)
        (out * torch.arange(6.).reshape(2, 3)).sum().backward()
        return [out.requires_grad] + [p.grad.numpy().copy() for p in model.parameters()]

    got, want = deployed_run(cluster, make_dict, run)
    assert got[0] is want[0] is True
    for a, b in zip(got[1:], want[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_that_output_changed_in_place_after_a_forward_under_save_on_cpu_is_refused(cluster):
    """Under save_on_cpu one process's backward uses the changed value (the hooks keep the
    tensor itself, unchecked); the worker's saved copy never changed: refused, saying so."""
    def run(model, deployed):
        x = _x()
        with torch.autograd.graph.save_on_cpu():
            out = model(x)
        out.mul_(2)
        loss = (out * 3).sum()
        if deployed:
            with pytest.raises(NotImplementedError, match="changed in place here after a "
                                                          "forward under save_on_cpu"):
                loss.backward()
            return None
        loss.backward()
        return x.grad

    assert run(make_saves(), False) is not None
    remote = cluster.deploy(make_saves(), stages=2)
    try:
        run(remote, True)
    finally:
        remote.close()
