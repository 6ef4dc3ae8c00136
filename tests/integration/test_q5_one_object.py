"""One worker tensor is one object in every client hook event of a deployed call.

In one process the tensor a layer's forward hook gets as its output is the object the next
layer's hooks get as input, an input two layers take is one object, an in-place layer's
output is its input, and a gradient a full backward hook gets as grad_input is the next
one's grad_output. Programs lean on it: Captum's LRP marks a layer's input
(``hook_registered``) and hooks each tensor once; caches keyed by ``id(t)``; names set on a
tensor in one hook and read in the next. Deployed, each hook event gave its own copy: the
input of a residual's two branches was hooked twice, the caches missed."""
import gc
import weakref

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Branches(nn.Module):
    """``x`` feeds two layers: a residual with a projected skip."""

    def __init__(self, inplace):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=inplace)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.act(self.a(x)) + self.b(x)


def made(inplace=True):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), Branches(inplace), nn.Linear(4, 2))


def deployed(cluster, how, inplace=True):
    if how == "chain":
        return cluster.deploy(made(inplace), stages=2)
    return cluster.deploy(made(inplace), placement={"0": 0, "1": 1, "2": 1})


def layers(model):
    return [("1.a", model[1].a), ("1.act", model[1].act), ("1.b", model[1].b)]


def lrp_style(model):
    """Each layer marks its input and hooks it once; the hook keeps grad * input."""
    log, relevance = [], {}

    def forward_hook(name):
        def hook(module, inputs, output):
            x = inputs[0]
            if getattr(x, "hook_registered", False):
                log.append(("already", name))
                return
            x.hook_registered = True
            log.append(("registered", name))

            def keep(grad):
                relevance[name] = (grad * x).detach().numpy().copy()
                log.append(("relevance", name))
            x.register_hook(keep)
        return hook

    for name, module in layers(model):
        module.register_forward_hook(forward_hook(name))
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    model(x).sum().backward()
    return log, relevance


def one_object(model):
    """Names set on a tensor, id() keys and ``is`` from one hook to the next."""
    log, outputs, cache = [], {}, {}

    def pre(name):
        def hook(module, args):
            x = args[0]
            log.append(("pre", name, cache.get(id(x)), getattr(x, "made_by", None),
                        [n for n, o in outputs.items() if o is x]))
        return hook

    def forward(name):
        def hook(module, args, out):
            cache[id(out)] = name
            out.made_by = name
            outputs[name] = out
            log.append(("forward", name, args[0] is out, type(out.grad_fn).__name__))
        return hook

    for name, module in layers(model):
        module.register_forward_pre_hook(pre(name))
        module.register_forward_hook(forward(name))
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    model(x).sum().backward()
    return log


@pytest.mark.parametrize("how", ["chain", "tree"])
def test_an_input_of_two_layers_is_marked_and_hooked_once(cluster, how):
    log, relevance = lrp_style(made())
    assert ("already", "1.b") in log and log.count(("relevance", "1.a")) == 1
    model = deployed(cluster, how)
    try:
        got_log, got = lrp_style(model)
        assert got_log == log
        assert got.keys() == relevance.keys()
        for name in relevance:
            np.testing.assert_allclose(got[name], relevance[name], rtol=1e-5, atol=1e-6)
    finally:
        model.close()


@pytest.mark.parametrize("how", ["chain", "tree"])
def test_hooks_of_one_part_share_its_tensors(cluster, how):
    expected = one_object(made())
    assert ("pre", "1.act", "1.a", "1.a", ["1.a"]) in expected
    assert ("forward", "1.act", True, "ReluBackward0") in expected  # in place: one object
    model = deployed(cluster, how)
    try:
        assert one_object(model) == expected
    finally:
        model.close()


def gradients(model):
    """grad_input of one layer is the grad_output of the layer before it, one object."""
    log = []

    def backward(name):
        def hook(module, grad_input, grad_output):
            log.append((name, getattr(grad_output[0], "seen_by", None)))
            grad_input[0].seen_by = name
        return hook

    model[1].a.register_full_backward_hook(backward("1.a"))
    model[1].act.register_full_backward_hook(backward("1.act"))
    x = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
    model(x).sum().backward()
    return log


@pytest.mark.parametrize("how", ["chain", "tree"])
def test_a_gradient_is_one_object_in_two_backward_hooks(cluster, how):
    expected = gradients(made(inplace=False))
    assert expected == [("1.act", None), ("1.a", "1.act")]
    model = deployed(cluster, how, inplace=False)
    try:
        assert gradients(model) == expected
    finally:
        model.close()


@pytest.mark.parametrize("how", ["chain", "tree"])
def test_what_the_events_left_goes_with_the_call(cluster, how):
    """The client keeps the tensors its hooks were given while the call's requests run,
    and no longer: a graph dropped without its backward is freed."""
    model = deployed(cluster, how)
    hub = deployment_of(model)._hub
    kept = []
    try:
        model[1].a.register_forward_hook(lambda m, a, o: kept.append(len(hub.given)))
        x = torch.ones(2, 3)
        with torch.no_grad():
            model(x)
        out = model(x)
        assert kept == [1, 1] and not hub.given
        out.sum().backward()
        assert not hub.given
        node = weakref.ref(model(x).grad_fn)  # a graph dropped without its backward
        gc.collect()
        assert node() is None and not hub.given
    finally:
        model.close()


def passed_through(model):
    """A layer that returns its input (Identity): its forward hook gets one object twice,
    and a result computed from it takes the gradient once."""
    log = []

    def double(module, args, out):
        log.append(args[0] is out)
        return out * 2

    model[1].register_forward_hook(double)
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    model(x).square().sum().backward()
    return log, model[0].weight.grad.numpy().copy()


@pytest.mark.parametrize("how", ["chain", "tree"])
def test_a_layer_returning_its_input_gives_its_hook_one_object(cluster, how):
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 4), nn.Identity(), nn.Tanh(), nn.Linear(4, 2))

    log, grad = passed_through(build())
    assert log == [True]
    model = (cluster.deploy(build(), stages=2) if how == "chain" else
             cluster.deploy(build(), placement={"0": 0, "1": 0, "2": 1, "3": 1}))
    try:
        got_log, got = passed_through(model)
        assert got_log == log
        np.testing.assert_allclose(got, grad, rtol=1e-5, atol=1e-6)
    finally:
        model.close()


def across_stages(model):
    """The output of a stage's last layer is the next stage's first input: one object."""
    kept, log = {}, []

    def keep(module, args, out):
        kept["out"] = out
        out.made_by = "1"

    def look(module, args):
        log.append((args[0] is kept["out"], getattr(args[0], "made_by", None)))
        args[0].register_hook(lambda g: log.append("hooked once"))

    model[1].register_forward_hook(keep)
    model[2].register_forward_pre_hook(look)
    model(torch.linspace(-1, 1, 6).reshape(2, 3)).sum().backward()
    return log


def test_a_stage_output_is_the_next_stage_input(cluster):
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 4),
                             nn.Tanh())

    expected = across_stages(build())
    assert expected == [(True, "1"), "hooked once"]
    model = cluster.deploy(build(), stages=2)  # stages [0, 1] and [2, 3]
    try:
        assert across_stages(model) == expected
    finally:
        model.close()


def viewed(model):
    """A view a hook took of a layer's output sees the change of the next layer, in place,
    whose hook gets that output again."""
    views = []
    model[1].a.register_forward_hook(lambda m, a, out: views.append(out[0]))
    model[1].act.register_forward_hook(lambda m, a, out: None)
    model(torch.linspace(-1, 1, 6).reshape(2, 3))
    return views[0].detach().numpy().copy()


@pytest.mark.parametrize("how", ["chain", "tree"])
def test_a_view_of_an_output_sees_an_in_place_layer_change_it(cluster, how):
    expected = viewed(made())
    assert (expected >= 0).all()  # the ReLU after it ran in place
    model = deployed(cluster, how)
    try:
        np.testing.assert_allclose(viewed(model), expected, rtol=1e-6)
    finally:
        model.close()
