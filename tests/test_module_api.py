"""Module registration, traversal, state_dict, printing, Parameter, layers and losses.

Like test_module_hooks.py, each test runs under disthook and (when installed) torch 2.13.
"""
from __future__ import annotations

import copy
import importlib
import math
import pickle
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest


@pytest.fixture(params=["disthook", "torch"])
def lib(request):
    if request.param == "torch":
        torch = pytest.importorskip("torch")
    else:
        torch = importlib.import_module("disthook")
    return SimpleNamespace(name=request.param, torch=torch, nn=torch.nn, F=torch.nn.functional)


def node_names(t) -> list:
    """The grad_fn chain of ``t`` as (name, [next names]) pairs, depth first."""
    out = []

    def walk(node):
        if node is None:
            return
        out.append((node.name(), [n.name() if n is not None else None
                                  for n, _ in node.next_functions]))
        for n, _ in node.next_functions:
            if n is not None and "AccumulateGrad" not in n.name():
                walk(n)
    walk(t.grad_fn)
    return [(name, [_short(n) for n in nexts]) for name, nexts in out]


def _short(name):
    return "AccumulateGrad" if name and name.endswith("AccumulateGrad") else name


# ---- Parameter ------------------------------------------------------------------------------

def test_parameter_is_a_leaf_sharing_storage(lib):
    torch, nn = lib.torch, lib.nn
    t = torch.tensor([1.0, 2.0])
    p = nn.Parameter(t)
    assert isinstance(p, torch.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    with torch.no_grad():
        p.mul_(3)
    assert t.tolist() == [3.0, 6.0]  # same storage
    assert not nn.Parameter(t, requires_grad=False).requires_grad
    q = nn.Parameter(torch.ones(2, requires_grad=True) * 2)
    assert q.is_leaf and q.requires_grad
    assert type(p * 2) is torch.Tensor
    assert nn.Parameter().shape == (0,)


def test_parameter_repr(lib):
    torch, nn = lib.torch, lib.nn
    p = nn.Parameter(torch.tensor([[8.0, 8.0, 8.0, 8.0]]))
    assert repr(p) == "Parameter containing:\ntensor([[8., 8., 8., 8.]], requires_grad=True)"
    q = nn.Parameter(torch.tensor([2.0]), requires_grad=False)
    assert repr(q) == "Parameter containing:\ntensor([2.])"


def test_parameter_deepcopy_and_pickle(lib):
    torch, nn = lib.torch, lib.nn
    p = nn.Parameter(torch.tensor([1.0, 2.0]))
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert type(q) is nn.Parameter and q.requires_grad and q.tolist() == [1.0, 2.0]
        with torch.no_grad():
            q.add_(1)
        assert p.tolist() == [1.0, 2.0]


# ---- registration ---------------------------------------------------------------------------

def make_net(nn, torch):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 3)
            self.register_buffer("running", torch.zeros(3))
            self.register_buffer("scratch", torch.ones(1), persistent=False)
            self.scale = nn.Parameter(torch.ones(1))
            self.act = nn.ReLU()
            self.plain = 5

        def forward(self, x):
            return self.act(self.fc(x)) * self.scale + self.running
    return Net()


def test_setattr_registers_parameters_buffers_and_modules(lib):
    net = make_net(lib.nn, lib.torch)
    assert list(net._parameters) == ["scale"]
    assert list(net._buffers) == ["running", "scratch"]
    assert list(net._modules) == ["fc", "act"]
    assert net.plain == 5 and "plain" in net.__dict__
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc.weight", "fc.bias"]
    assert [n for n, _ in net.named_buffers()] == ["running", "scratch"]
    assert [n for n, _ in net.named_children()] == ["fc", "act"]
    assert [n for n, _ in net.named_modules()] == ["", "fc", "act"]
    assert len(list(net.parameters(recurse=False))) == 1
    assert [type(m).__name__ for m in net.modules()] == ["Net", "Linear", "ReLU"]
    assert net.get_submodule("fc") is net.fc and net.get_submodule("") is net
    with pytest.raises(AttributeError) as e:
        _ = net.missing
    assert str(e.value) == "'Net' object has no attribute 'missing'"


def test_reassignment_moves_names_between_kinds(lib):
    torch, nn = lib.torch, lib.nn
    net = make_net(nn, torch)
    net.fc = None  # a module slot can be cleared
    assert net._modules["fc"] is None
    net.scale = None
    assert net._parameters["scale"] is None
    net.running = torch.full((3,), 2.0)  # a buffer stays a buffer
    assert net._buffers["running"].tolist() == [2.0, 2.0, 2.0]
    net.plain = nn.Parameter(torch.zeros(1))  # plain attribute becomes a parameter
    assert "plain" in net._parameters and "plain" not in net.__dict__
    del net.plain
    assert "plain" not in net._parameters
    del net.scratch
    assert "scratch" not in net._buffers and "scratch" not in net._non_persistent_buffers_set
    with pytest.raises(TypeError) as e:
        net.scale = torch.ones(1)
    assert str(e.value) == ("cannot assign 'torch.FloatTensor' as parameter 'scale' "
                            "(torch.nn.Parameter or None expected)")
    with pytest.raises(TypeError, match="^cannot assign 'int' as child module 'act' "
                                        r"\(torch.nn.Module or None expected\)$"):
        net.act = 3
    with pytest.raises(TypeError, match="^cannot assign 'str' as buffer 'running'"):
        net.running = "x"


def test_registration_errors(lib):
    torch, nn = lib.torch, lib.nn
    m = nn.Module()
    m.attr = 1
    cases = [
        (lambda: m.register_buffer("a.b", None), KeyError, 'buffer name can\'t contain "."'),
        (lambda: m.register_buffer("", None), KeyError, 'buffer name can\'t be empty string ""'),
        (lambda: m.register_buffer("attr", None), KeyError, "attribute 'attr' already exists"),
        (lambda: m.register_buffer(3, None), TypeError, "buffer name should be a string. Got int"),
        (lambda: m.register_buffer("b", 3), TypeError,
         "cannot assign 'int' object to buffer 'b' (torch Tensor or None required)"),
        (lambda: m.register_parameter("p.q", None), KeyError,
         'parameter name can\'t contain "."'),
        (lambda: m.register_parameter("attr", None), KeyError,
         "attribute 'attr' already exists"),
        (lambda: m.register_parameter("p", torch.ones(1)), TypeError,
         ("cannot assign 'torch.FloatTensor' object to parameter 'p' (torch.nn.Parameter or "
          "None required)")),
        (lambda: m.add_module("a.b", nn.ReLU()), KeyError,
         'module name can\'t contain ".", got: a.b'),
        (lambda: m.add_module("", nn.ReLU()), KeyError, 'module name can\'t be empty string ""'),
        (lambda: m.add_module("attr", nn.ReLU()), KeyError, "attribute 'attr' already exists"),
        (lambda: m.add_module("x", 3), TypeError, "int is not a Module subclass"),
    ]
    for call, exc, msg in cases:
        with pytest.raises(exc) as e:
            call()
        got = e.value.args[0]
        assert got == msg


def test_assignment_before_init_raises(lib):
    torch, nn = lib.torch, lib.nn

    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)

    class ForgotParam(nn.Module):
        def __init__(self):
            self.p = nn.Parameter(torch.ones(1))
    with pytest.raises(AttributeError) as e:
        Forgot()
    assert str(e.value) == "cannot assign module before Module.__init__() call"
    with pytest.raises(AttributeError) as e:
        ForgotParam()
    assert str(e.value) == "cannot assign parameters before Module.__init__() call"


def test_module_without_forward(lib):
    with pytest.raises(NotImplementedError) as e:
        lib.nn.Module()(1)
    assert str(e.value) == 'Module [Module] is missing the required "forward" function'


def test_get_submodule_errors(lib):
    nn = lib.nn
    seq = nn.Sequential(nn.Linear(1, 1), nn.Sequential(nn.ReLU()))
    assert seq.get_submodule("1.0") is seq[1][0]
    with pytest.raises(AttributeError) as e:
        seq.get_submodule("1.7")
    assert str(e.value) == "Sequential has no attribute `7`"
    with pytest.raises(AttributeError) as e:
        seq.get_submodule("0.weight")
    assert str(e.value) == "`weight` is not an nn.Module"


def test_get_buffer_and_its_errors(lib):
    nn = lib.nn
    seq = nn.Sequential(nn.Linear(1, 1), nn.Sequential(nn.BatchNorm1d(3)))
    assert seq.get_buffer("1.0.running_var") is seq[1][0].running_var
    for target, message in (("1.0.weight", "`weight` is not a buffer"),
                            ("1.0.nope", "BatchNorm1d has no attribute `nope`"),
                            ("2.x", "Sequential has no attribute `2`")):
        with pytest.raises(AttributeError) as e:
            seq.get_buffer(target)
        assert str(e.value) == message


def test_shared_modules_and_parameters_are_listed_once(lib):
    nn = lib.nn
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    assert [n for n, _ in seq.named_modules()] == ["", "0", "1"]
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(seq.named_modules(remove_duplicate=False))) == 4
    assert len(list(seq.named_parameters(remove_duplicate=False))) == 4


def test_train_eval_apply_requires_grad_zero_grad(lib):
    torch, nn = lib.torch, lib.nn
    net = make_net(nn, torch)
    assert net.training and net.fc.training
    assert net.eval() is net and not net.fc.training and not net.act.training
    net.train()
    assert net.act.training
    with pytest.raises(ValueError, match="^training mode is expected to be boolean$"):
        net.train(1)
    visited = []
    assert net.apply(lambda m: visited.append(type(m).__name__)) is net
    assert visited == ["Linear", "ReLU", "Net"]
    net(torch.ones(1, 2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    grad = net.fc.weight.grad
    net.zero_grad(set_to_none=False)
    assert net.fc.weight.grad is grad and grad.abs().sum().item() == 0
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_to_double_float_keep_parameter_objects(lib):
    torch, nn = lib.torch, lib.nn
    net = make_net(nn, torch)
    weight = net.fc.weight
    assert net.double() is net
    assert net.fc.weight is weight and weight.dtype == torch.float64
    assert net.running.dtype == torch.float64
    net.to(torch.float32)
    assert weight.dtype == torch.float32 and isinstance(weight, nn.Parameter)
    assert net.to("cpu") is net and net.to(torch.device("cpu")) is net
    net.to(torch.ones(1, dtype=torch.float64))
    assert weight.dtype == torch.float64
    with pytest.raises(TypeError) as e:
        net.to(torch.int64)
    assert str(e.value) == ("nn.Module.to only accepts floating point or complex dtypes, but "
                            "got desired dtype=torch.int64")
    assert net.float().cpu() is net and weight.dtype == torch.float32


# ---- state dict -----------------------------------------------------------------------------

def test_state_dict_keys_and_detach(lib):
    torch, nn = lib.torch, lib.nn
    net = make_net(nn, torch)
    sd = net.state_dict()
    assert list(sd) == ["scale", "running", "fc.weight", "fc.bias"]
    assert isinstance(sd, OrderedDict)
    assert not sd["fc.weight"].requires_grad and sd["fc.weight"].grad_fn is None
    assert net.state_dict(keep_vars=True)["fc.weight"] is net.fc.weight
    assert list(net.state_dict(prefix="model.")) == ["model.scale", "model.running",
                                                     "model.fc.weight", "model.fc.bias"]


def test_load_state_dict_copies_values(lib):
    torch, nn = lib.torch, lib.nn
    a, b = make_net(nn, torch), make_net(nn, torch)
    weight = b.fc.weight
    result = b.load_state_dict(a.state_dict())
    assert repr(result) == "<All keys matched successfully>"
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert b.fc.weight is weight and torch.equal(weight, a.fc.weight)


def test_load_state_dict_strict_errors(lib):
    torch, nn = lib.torch, lib.nn
    net = make_net(nn, torch)
    sd = net.state_dict()
    del sd["fc.bias"]
    sd["extra"] = torch.ones(1)
    sd["fc.other"] = torch.ones(1)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(sd)
    assert str(e.value) == (
        "Error(s) in loading state_dict for Net:\n\t"
        'Missing key(s) in state_dict: "fc.bias". \n\t'
        'Unexpected key(s) in state_dict: "extra", "fc.other". ')
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc.bias"]
    assert result.unexpected_keys == ["extra", "fc.other"]
    assert repr(result) == ("_IncompatibleKeys(missing_keys=['fc.bias'], "
                            "unexpected_keys=['extra', 'fc.other'])")

    sd = net.state_dict()
    sd["fc.weight"] = torch.ones(2, 2)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(sd)
    assert str(e.value) == (
        "Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: copying a "
        "param with shape torch.Size([2, 2]) from checkpoint, the shape in current model is "
        "torch.Size([3, 2]).")


# ---- printing -------------------------------------------------------------------------------

def test_nested_repr(lib):
    torch, nn = lib.torch, lib.nn
    net = make_net(nn, torch)
    assert repr(net) == ("Net(\n  (fc): Linear(in_features=2, out_features=3, bias=True)\n"
                         "  (act): ReLU()\n)")
    seq = nn.Sequential(nn.Linear(2, 3, bias=False), nn.Sequential(nn.Tanh(), nn.Sigmoid()),
                        nn.ReLU(inplace=True), nn.Identity(), nn.MSELoss(), nn.L1Loss())
    assert repr(seq) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=False)\n"
        "  (1): Sequential(\n"
        "    (0): Tanh()\n"
        "    (1): Sigmoid()\n"
        "  )\n"
        "  (2): ReLU(inplace=True)\n"
        "  (3): Identity()\n"
        "  (4): MSELoss()\n"
        "  (5): L1Loss()\n"
        ")")
    ml = nn.ModuleList([nn.ReLU(), nn.ReLU(), nn.Tanh()])
    assert repr(ml) == "ModuleList(\n  (0-1): 2 x ReLU()\n  (2): Tanh()\n)"
    assert repr(nn.ModuleList()) == "ModuleList()"

    class Multi(nn.Module):
        def extra_repr(self):
            return "a=1\nb=2"
    m = Multi()
    m.child = nn.ReLU()
    assert repr(m) == "Multi(\n  a=1\n  b=2\n  (child): ReLU()\n)"


# ---- containers -----------------------------------------------------------------------------

def test_sequential_indexing(lib):
    torch, nn = lib.torch, lib.nn
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Tanh()
    seq = nn.Sequential(a, b)
    assert len(seq) == 2 and seq[0] is a and seq[-1] is b and list(seq) == [a, b]
    assert seq.append(c) is seq and seq[2] is c
    sub = seq[1:]
    assert type(sub) is nn.Sequential and list(sub) == [b, c]
    assert list(sub._modules) == ["1", "2"]
    with pytest.raises(IndexError) as e:
        seq[3]
    assert str(e.value) == "index 3 is out of range"
    seq[1] = nn.Sigmoid()
    assert type(seq[1]).__name__ == "Sigmoid"
    del seq[0]
    assert list(seq._modules) == ["0", "1"] and seq[1] is c
    named = nn.Sequential(OrderedDict([("first", a), ("second", b)]))
    assert named.first is a and named[1] is b
    x = torch.tensor([[1.0, -2.0]])
    assert torch.equal(named(x), b(a(x)))


def test_module_list(lib):
    nn = lib.nn
    layers = nn.ModuleList([nn.Linear(1, 1) for _ in range(2)])
    layers.append(nn.ReLU())
    layers.extend([nn.Tanh()])
    layers += [nn.Sigmoid()]
    assert len(layers) == 5 and list(layers._modules) == ["0", "1", "2", "3", "4"]
    assert type(layers[-1]).__name__ == "Sigmoid"
    assert type(layers[1:3]) is nn.ModuleList and len(layers[1:3]) == 2
    assert len(list(layers.parameters())) == 4
    with pytest.raises(IndexError, match="^index 5 is out of range$"):
        layers[5]
    del layers[0]
    assert list(layers._modules) == ["0", "1", "2", "3"]


# ---- layers and losses ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2,), (4, 2), (5, 4, 2)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("input_grad", [True, False])
def test_linear_records_torchs_graph(lib, shape, bias, input_grad):
    torch, F = lib.torch, lib.F
    w = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]], requires_grad=True)
    b = torch.tensor([0.1, 0.2, 0.3], requires_grad=True) if bias else None
    x = torch.arange(np.prod(shape), dtype=torch.float32).reshape(shape)
    x.requires_grad_(input_grad)
    out = F.linear(x, w, b)
    assert out.shape == (*shape[:-1], 3)
    expected = np.asarray(x.detach().numpy()) @ np.asarray(w.detach().numpy()).T
    if bias:
        expected = expected + np.asarray(b.detach().numpy())
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6)
    assert node_names(out) == EXPECTED_LINEAR_GRAPHS[(len(shape), bias, input_grad)]
    out.sum().backward()
    assert w.grad.shape == w.shape


EXPECTED_LINEAR_GRAPHS = {
    (1, True, True): [("ViewBackward0", ["AddmmBackward0"]),
                      ("AddmmBackward0", ["AccumulateGrad", "ViewBackward0", "TBackward0"]),
                      ("ViewBackward0", ["AccumulateGrad"]), ("TBackward0", ["AccumulateGrad"])],
    (1, True, False): [("ViewBackward0", ["AddmmBackward0"]),
                       ("AddmmBackward0", ["AccumulateGrad", None, "TBackward0"]),
                       ("TBackward0", ["AccumulateGrad"])],
    (2, True, True): [("AddmmBackward0", ["AccumulateGrad", "AccumulateGrad", "TBackward0"]),
                      ("TBackward0", ["AccumulateGrad"])],
    (2, True, False): [("AddmmBackward0", ["AccumulateGrad", None, "TBackward0"]),
                       ("TBackward0", ["AccumulateGrad"])],
    (3, True, True): [("ViewBackward0", ["AddmmBackward0"]),
                      ("AddmmBackward0", ["AccumulateGrad", "ViewBackward0", "TBackward0"]),
                      ("ViewBackward0", ["AccumulateGrad"]), ("TBackward0", ["AccumulateGrad"])],
    (3, True, False): [("ViewBackward0", ["AddmmBackward0"]),
                       ("AddmmBackward0", ["AccumulateGrad", None, "TBackward0"]),
                       ("TBackward0", ["AccumulateGrad"])],
    (1, False, True): [("SqueezeBackward4", ["MmBackward0"]),
                       ("MmBackward0", ["UnsqueezeBackward0", "TBackward0"]),
                       ("UnsqueezeBackward0", ["AccumulateGrad"]),
                       ("TBackward0", ["AccumulateGrad"])],
    (1, False, False): [("SqueezeBackward4", ["MmBackward0"]),
                        ("MmBackward0", [None, "TBackward0"]),
                        ("TBackward0", ["AccumulateGrad"])],
    (2, False, True): [("MmBackward0", ["AccumulateGrad", "TBackward0"]),
                       ("TBackward0", ["AccumulateGrad"])],
    (2, False, False): [("MmBackward0", [None, "TBackward0"]),
                        ("TBackward0", ["AccumulateGrad"])],
    (3, False, True): [("UnsafeViewBackward0", ["MmBackward0"]),
                       ("MmBackward0", ["ViewBackward0", "TBackward0"]),
                       ("ViewBackward0", ["AccumulateGrad"]), ("TBackward0", ["AccumulateGrad"])],
    (3, False, False): [("UnsafeViewBackward0", ["MmBackward0"]),
                        ("MmBackward0", [None, "TBackward0"]),
                        ("TBackward0", ["AccumulateGrad"])],
}


def test_linear_errors(lib):
    torch, F = lib.torch, lib.F
    with pytest.raises(RuntimeError) as e:
        F.linear(torch.ones(4, 2), torch.ones(3, 3))
    assert str(e.value) == "mat1 and mat2 shapes cannot be multiplied (4x2 and 3x3)"
    with pytest.raises(RuntimeError) as e:
        F.linear(torch.ones(5, 4, 2), torch.ones(3, 3), torch.ones(3))
    assert str(e.value) == "mat1 and mat2 shapes cannot be multiplied (20x2 and 3x3)"
    with pytest.raises(RuntimeError) as e:
        F.linear(torch.ones(2, 2, dtype=torch.float64), torch.ones(3, 2))
    assert str(e.value) == "expected m1 and m2 to have the same dtype, but got: double != float"


def test_linear_default_init_bounds(lib):
    torch, nn = lib.torch, lib.nn
    torch.manual_seed(0)
    lin = nn.Linear(16, 200)
    bound = 1 / math.sqrt(16)
    assert lin.weight.shape == (200, 16) and lin.bias.shape == (200,)
    assert lin.weight.abs().max().item() <= bound and lin.bias.abs().max().item() <= bound
    assert lin.weight.abs().max().item() > 0.9 * bound  # uniform over the whole range
    assert lin.weight.requires_grad and lin.weight.dtype == torch.float32
    assert nn.Linear(2, 3, bias=False).bias is None


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(lib, reduction):
    torch, nn = lib.torch, lib.nn
    a = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    b = torch.tensor([0.5, 0.0, 5.0], requires_grad=True)
    mse = nn.MSELoss(reduction=reduction)(a, b)
    diff = np.array([0.5, -2.0, -2.0])
    reduce = {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction]
    np.testing.assert_allclose(mse.detach().numpy(), reduce(diff ** 2))
    assert mse.grad_fn.name() == "MseLossBackward0"
    mse.sum().backward()
    scale = 2 / 3 if reduction == "mean" else 2
    np.testing.assert_allclose(a.grad.numpy(), scale * diff, rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), -scale * diff, rtol=1e-6)

    a.grad = b.grad = None
    l1 = nn.L1Loss(reduction=reduction)(a, b)
    np.testing.assert_allclose(l1.detach().numpy(), reduce(np.abs(diff)))
    top = {"mean": "MeanBackward0", "sum": "SumBackward0", "none": "AbsBackward0"}[reduction]
    assert l1.grad_fn.name() == top
    l1.sum().backward()
    l1_scale = 1 / 3 if reduction == "mean" else 1
    np.testing.assert_allclose(a.grad.numpy(), l1_scale * np.sign(diff), rtol=1e-6)


def test_loss_broadcast_warning_and_bad_reduction(lib):
    torch, F = lib.torch, lib.F
    with pytest.warns(UserWarning) as caught:
        out = F.mse_loss(torch.ones(3), torch.zeros(2, 3))
    assert out.item() == 1.0
    assert str(caught[0].message) == (
        "Using a target size (torch.Size([2, 3])) that is different to the input size "
        "(torch.Size([3])). This will likely lead to incorrect results due to broadcasting. "
        "Please ensure they have the same size.")
    with pytest.raises(ValueError) as e:
        F.mse_loss(torch.ones(3), torch.ones(3), reduction="bad")
    assert str(e.value) == "bad is not a valid value for reduction"
    out = F.mse_loss(torch.ones(3, requires_grad=True), torch.ones(3, dtype=torch.float64))
    assert out.dtype == torch.float64


def test_activations(lib):
    torch, nn = lib.torch, lib.nn
    x = torch.tensor([-1.0, 0.0, 2.0])
    assert nn.ReLU()(x).tolist() == [0.0, 0.0, 2.0]
    np.testing.assert_allclose(nn.Sigmoid()(x).numpy(), 1 / (1 + np.exp([1.0, 0.0, -2.0])),
                               rtol=1e-6)
    np.testing.assert_allclose(nn.Tanh()(x).numpy(), np.tanh([-1.0, 0.0, 2.0]), rtol=1e-6)
    assert nn.Identity(3, k=4)(x) is x
    y = x.clone()
    assert nn.ReLU(inplace=True)(y) is y and y.tolist() == [0.0, 0.0, 2.0]
