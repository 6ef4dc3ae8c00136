"""Modules as data (disthook.distributed.spec): what a worker receives to build its stage."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn, wire
from disthook.distributed.spec import SpecError, build_module, module_spec, resolve_class


class Scaled(nn.Module):
    """A user module with plain attributes of every kind, a buffer and a child."""

    def __init__(self, n):
        super().__init__()
        self.inner = nn.Linear(n, n)
        self.scale = 0.5
        self.name = "s"
        self.dims = (1, -1)
        self.opts = {"mode": ["a", None], "on": True}
        self.dtype = torch.float64
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("scratch", torch.ones(2), persistent=False)

    def forward(self, x):
        return self.inner(x) * self.scale


def through_wire(spec):
    frames = wire.encode("load_stage", {"model": "m", "stage": 0, "spec": spec})
    return wire.decode([bytes(f) for f in frames])["spec"]


def test_roundtrip_rebuilds_the_same_module():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), Scaled(4))
    net[2].eval()
    copy = build_module(through_wire(module_spec(net)))
    assert type(copy) is nn.Sequential and type(copy[2]) is Scaled
    assert repr(copy) == repr(net)
    assert copy[2].scale == 0.5 and copy[2].dims == (1, -1) and copy[2].name == "s"
    assert copy[2].opts == {"mode": ["a", None], "on": True}
    assert copy[2].dtype is torch.float64
    assert copy.training and not copy[2].training and not copy[2].inner.training
    assert copy[2]._non_persistent_buffers_set == {"scratch"}
    assert list(copy.state_dict()) == list(net.state_dict())
    for (name, a), (_, b) in zip(net.state_dict().items(), copy.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    x = torch.randn(2, 3)
    np.testing.assert_array_equal(copy(x).detach().numpy(), net(x).detach().numpy())


def test_rebuilt_parameters_are_independent_writable_leaves():
    net = nn.Linear(2, 2)
    copy = build_module(through_wire(module_spec(net)))
    assert isinstance(copy.weight, nn.Parameter) and copy.weight.is_leaf
    assert copy.weight.requires_grad
    with torch.no_grad():
        copy.weight.add_(1.0)  # the received frame is read-only; the copy must not be
    assert not np.array_equal(copy.weight.detach().numpy(), net.weight.detach().numpy())
    copy(torch.ones(1, 2)).sum().backward()
    assert copy.weight.grad is not None and net.weight.grad is None


def test_frozen_parameter_and_none_entries_travel():
    net = nn.Linear(2, 2, bias=False)
    net.weight.requires_grad_(False)
    net.register_buffer("nothing", None)
    copy = build_module(module_spec(net))
    assert copy.bias is None and copy.nothing is None
    assert not copy.weight.requires_grad


def test_tied_weights_stay_tied():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight
    net = nn.Sequential(a, b)
    spec = module_spec(net)
    assert spec["children"]["1"]["params"]["weight"] == {"tied": "0.weight"}
    copy = build_module(through_wire(spec))
    assert copy[1].weight is copy[0].weight
    assert len(list(copy.parameters())) == 3


def test_unsendable_attribute_names_module_and_attribute():
    net = nn.Sequential(nn.Linear(2, 2))
    net[0].act = lambda x: x
    with pytest.raises(SpecError, match=r"attribute 'act' of 0 \(Linear\) is not data: a "
                                        r"lambda \(define it as a function"):
        module_spec(net)

    def local_fn(x):
        return x

    net[0].act = local_fn
    with pytest.raises(SpecError, match="local_fn, defined inside a function"):
        module_spec(net)
    root = nn.Linear(2, 2)
    root.table = {1: "x"}
    with pytest.raises(SpecError, match="attribute 'table' of the root module .*dict key 1"):
        module_spec(root)


def test_module_spec_refuses_non_modules():
    with pytest.raises(SpecError, match="expected a disthook.nn.Module, got int"):
        module_spec(3)


@pytest.mark.parametrize("path,text", [
    ("no_colon", "must look like 'package.module:ClassName'"),
    ("disthook.nn:NoSuchLayer", "cannot find class 'disthook.nn:NoSuchLayer'"),
    ("no_such_pkg_xyz:Thing", "cannot find class"),
    ("disthook.tensor:Tensor", "is not a disthook.nn.Module subclass"),
    ("os:system", "is not a disthook.nn.Module subclass"),
])
def test_resolve_class_errors(path, text):
    with pytest.raises(SpecError, match=text):
        resolve_class(path)


def test_resolve_class_allow_list():
    assert resolve_class("disthook.nn:Linear", allow=lambda m: m.startswith("disthook.")) \
        is nn.Linear
    with pytest.raises(SpecError, match="importing 'json' is not allowed here"):
        resolve_class("json:JSONDecoder", allow=lambda m: m.startswith("disthook."))


def test_malformed_specs_are_refused():
    good = module_spec(nn.Linear(2, 2))
    with pytest.raises(SpecError, match="must be a map with keys"):
        build_module({"class": "disthook.nn:Linear"})
    bad = dict(good, attrs={"_parameters": {}})
    with pytest.raises(SpecError, match="'_parameters' is Module state"):
        build_module(bad)
    bad = dict(good, attrs={"x": {"weird": 1}})
    with pytest.raises(SpecError, match="is not a plain attribute value"):
        build_module(bad)
    bad = dict(good, params={"weight": {"tied": "nowhere"}})
    with pytest.raises(SpecError, match="tied to 'nowhere', which was not built"):
        build_module(bad)
    bad = dict(good, params={"weight": {"requires_grad": True}})
    with pytest.raises(SpecError, match="has no array 'data'"):
        build_module(bad)


def test_a_class_defined_in_a_function_is_refused_on_the_client():
    class Inner(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(SpecError, match=r"1 is a .*<locals>.Inner, a class defined inside a "
                                        "function: workers cannot import it"):
        module_spec(nn.Sequential(nn.Identity(), Inner()))


def test_functions_and_classes_of_a_module_travel_by_name():
    """TransformerEncoderLayer holds F.relu; a model may hold a class to build things with."""
    import math

    net = nn.Sequential(nn.Linear(2, 2))
    net[0].act = nn.functional.gelu
    net[0].kinds = [math.sqrt, nn.Tanh]
    spec = module_spec(net)
    assert spec["children"]["0"]["attrs"]["act"] == {"ref": "disthook.nn.functional:gelu"}
    copy = build_module(wire.decode(wire.encode("load_stage", {
        "model": "m", "stage": 0, "spec": spec}))["spec"])
    assert copy[0].act is nn.functional.gelu and copy[0].kinds == [math.sqrt, nn.Tanh]
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    assert build_module(module_spec(layer)).activation is layer.activation
    bad = {**spec["children"]["0"]["attrs"], "act": {"ref": "json:loads.nothing"}}
    spec["children"]["0"]["attrs"] = bad
    with pytest.raises(SpecError, match="names no function or class here"):
        build_module(spec)
    with pytest.raises(SpecError, match="importing 'json' is not allowed here"):
        build_module(spec, allow=lambda m: m.startswith("disthook"))


def test_names_stay_inside_the_allowed_modules_and_objects_do_nothing_as_they_go(tmp_path):
    """A reference may not walk through a dunder or out of the allowed modules (through a
    module an allowed one imported), and a class with ``__del__`` makes no object from data
    even where every module may be imported (tempfile's closer unlinks the path it holds)."""
    victim = tmp_path / "victim"
    victim.write_text("keep me")

    def holding(name):
        spec = module_spec(nn.Identity())
        spec["attrs"] = {"x": {"object": {"class": name, "attrs": {
            "file": 1, "name": str(victim), "delete": True}}}}
        return spec

    only_disthook = lambda m: m == "disthook" or m.startswith("disthook.")
    with pytest.raises(SpecError, match=r"allowed modules \(to module tempfile\)"):
        build_module(holding("disthook.distributed.cluster:tempfile._TemporaryFileCloser"),
                     allow=only_disthook)
    with pytest.raises(SpecError, match="__del__"):
        build_module(holding("tempfile:_TemporaryFileCloser"))
    assert victim.read_text() == "keep me"
    with pytest.raises(SpecError, match="may not go through '__globals__'"):
        resolve_class("disthook.nn:Linear.forward.__globals__", allow=only_disthook)
    assert resolve_class("disthook:nn.Linear", allow=only_disthook) is nn.Linear
