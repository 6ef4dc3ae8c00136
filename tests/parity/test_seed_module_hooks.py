"""The seed programs (000, 001, 002, 004: torch hook examples from 2018-2020 posts) run under
disthook.

Each program is the seed's code with only its import lines changed (``as_disthook``). The
expected output is what torch 2.13 prints (docs/hook_semantics.md §6.6-§6.8, §7.3-§7.4); it is
hard-coded, so these tests run without torch, and each is also run under torch when it is
installed to prove the expectation. Where the 2018-2020 posts printed something else, torch
2.13 wins: e.g. seed 002's legacy hook on ``Linear(x)/4`` gets ``(grad, None)`` today.
"""
from __future__ import annotations

import importlib
import io
import warnings
from contextlib import redirect_stdout

import numpy as np
import pytest

DISTHOOK_IMPORTS = {
    "import torch": "import disthook as torch",
    "import torch.nn as nn": "import disthook.nn as nn",
    "import torch.nn.functional as F": "import disthook.nn.functional as F",
    "from torch.autograd import Variable": "from disthook.autograd import Variable",
    "from torch import Tensor": "from disthook import Tensor",
}


def as_disthook(source: str) -> str:
    """The program with its torch import lines pointed at disthook, nothing else changed."""
    lines = [DISTHOOK_IMPORTS.get(line, line) for line in source.split("\n")]
    assert not any(line.startswith(("import torch", "from torch")) for line in lines)
    return "\n".join(lines)


def run_program(source: str, lib: str) -> tuple:
    """Run ``source`` as ``__main__`` under ``lib``; returns (stdout, namespace, warnings)."""
    if lib == "torch":
        pytest.importorskip("torch")
    else:
        source = as_disthook(source)
    namespace = {"__name__": "__main__"}
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(out):
        warnings.simplefilter("always")
        exec(compile(source, f"<seed program under {lib}>", "exec"), namespace)
    return out.getvalue(), namespace, [(w.category.__name__, str(w.message)) for w in caught]


@pytest.fixture(params=["disthook", "torch"])
def lib(request):
    return request.param

# ---- seed 000: register_backward_hook on Model4cxq (legacy hook, §6.6-§6.7) ----------------

SEED_000_A = """\
import torch
from torch.autograd import Variable
import torch.nn as nn
import torch.nn.functional as F

def backward_hook(module, grad_input, grad_output):
    # 分析: grad_output 是loss相对于out的梯度
    # 分析: grad_input 是loss分别相对于(2*x+3*y)整体和(5*z)整体的梯度,
    # 因此两者互为相反数,即相差一个负号
    print("以下是Grad Input:")
    print(grad_input)
    print("以下是Grad Output:")
    print(grad_output)
    print("以下是修改后的Grad Input:")
    new_grad_input_0 = grad_input[0] #+ 888888.0
    new_grad_input_1 = grad_input[1] #- 777777.0
    new_grad_input = (new_grad_input_0, new_grad_input_1)
    print(new_grad_input)
    return new_grad_input


class Model4cxq(nn.Module):
    def __init__(self):
        super(Model4cxq,self).__init__()
        self.register_backward_hook(backward_hook)
    def forward(self,x,y,z):
        # 实际上是 (2*x + 3*y) - (5*z)  # 当作两个张量相减
        # 注意这里返回的梯度只有两项,而不是对应x、y、z三项,
        # 如果需要这样的三项,必须在张量上添加钩子函数
        return 2*x + 3*y - 5*z  # return 2*x + 3*y - 5*z  # return 2*x - 5*z + 3*y

x = torch.tensor([2.0, 3.0],requires_grad=True)
y = torch.tensor([6.0, 4.0],requires_grad=True)
z = torch.tensor([1.0, 5.0],requires_grad=True)

criterion = nn.MSELoss()
model = Model4cxq()
out = model(x,y,z)
target = torch.tensor([9.0, -1.0],requires_grad=True)
loss = criterion(out, target)
print('loss =',loss)
loss.backward()
print('backward()结束'.center(50,'-'))
print('out.grad:',out.grad)
print('x.grad:',x.grad)
print('y.grad:',y.grad)
print('z.grad:',z.grad)
print('target.grad:',target.grad)
"""

SEED_000_B = """\
import torch
from torch.autograd import Variable
import torch.nn as nn
import torch.nn.functional as F

def backward_hook(module, grad_input, grad_output):
    # 分析: grad_output 是loss相对于out的梯度
    # 分析: grad_input 是loss分别相对于(2*x)整体和(3*y)整体的梯度,
    # 因此两者相等
    print("以下是Grad Input:")
    print(grad_input)
    print("以下是Grad Output:")
    print(grad_output)
    print("以下是修改后的Grad Input:")
    new_grad_input_0 = grad_input[0] + 1000.0  #+ 1000.0
    new_grad_input_1 = grad_input[1] - 2000.0  #- 2000.0
    new_grad_input = (new_grad_input_0, new_grad_input_1)
    print(new_grad_input)
    return new_grad_input


class Model4cxq(nn.Module):
    def __init__(self):
        super(Model4cxq,self).__init__()
        self.register_backward_hook(backward_hook)
    def forward(self,x,y):
        # 实际上是 (2*x) + (3*y)  # 当作两个张量相加
        # 注意这里返回的梯度只有两项,分别相对于(2*x)整体和(3*y)整体的梯度
        # 如果需要分别相对于x和y的梯度,必须在张量上添加钩子函数
        return 2*x + 3*y  # 实际上是: return (2*x) + (3*y) 即两个张量相加操作

x = torch.tensor([2.0, 3.0],requires_grad=True)
y = torch.tensor([6.0, 4.0],requires_grad=True)

criterion = nn.MSELoss()
model = Model4cxq()
out = model(x,y)
target = torch.tensor([14.0, 12.0],requires_grad=True)
loss = criterion(out, target)
print('loss =',loss)
loss.backward()
print('backward()结束'.center(50,'-'))
print('out.grad:',out.grad)
print('x.grad:',x.grad)
print('y.grad:',y.grad)
print('target.grad:',target.grad)
"""

# ---- seed 001: SaveValues on Net (forward hook + full backward hook, random init) ---------

SEED_001 = """\
import torch
import torch.nn as nn


class SaveValues():
    def __init__(self, layer):
        self.model = None
        self.input = None
        self.output = None
        self.grad_input = None
        self.grad_output = None
        self.forward_hook = layer.register_forward_hook(self.hook_fn_act)
        self.backward_hook = layer.register_full_backward_hook(self.hook_fn_grad)

    def hook_fn_act(self, module, input, output):
        self.model = module
        self.input = input[0]
        self.output = output

    def hook_fn_grad(self, module, grad_input, grad_output):
        self.grad_input = grad_input[0]
        self.grad_output = grad_output[0]

    def remove(self):
        self.forward_hook.remove()
        self.backward_hook.remove()


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.l1 = nn.Linear(2, 5)
        self.l2 = nn.Linear(5, 10)

    def forward(self, x):
        x = self.l1(x)
        x = self.l2(x)
        return x


l1loss = nn.L1Loss()
model = Net()
value = SaveValues(model.l2)
gt = torch.ones((10,), dtype=torch.float32, requires_grad=False)
x = torch.ones((2,), dtype=torch.float32, requires_grad=False)
y = model(x)
loss = l1loss(y, gt)
loss.backward()
x += 1.2
value.remove()
"""

# ---- seed 002: MyNet, legacy hook on the module whose last op changes (§6.8) -------------

SEED_002 = """\
import torch
import torch.nn as nn
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
class MyMul(nn.Module):
    def forward(self, input):
        out = input * 2
        return out
class MyMean(nn.Module):            # 自定义除法module
    def forward(self, input):
        out = input/4
        return out
def tensor_hook(grad):
    print('tensor hook')
    print('grad:', grad)
    return grad
class MyNet(nn.Module):
    def __init__(self):
        super(MyNet, self).__init__()
        self.f1 = nn.Linear(4, 1, bias=True)
        self.f2 = MyMean()
        self.weight_init()
    def forward(self, input):
        self.input = input
        output = self.f1(input)       # 先进行运算1,后进行运算2
        output = self.f2(output)
        return output
    def weight_init(self):
        self.f1.weight.data.fill_(8.0)    # 这里设置Linear的权重为8
        self.f1.bias.data.fill_(2.0)      # 这里设置Linear的bias为2
    def my_hook(self, module, grad_input, grad_output):
        print('doing my_hook')
        print('original grad:', grad_input)
        print('original outgrad:', grad_output)
        # grad_input = grad_input[0]*self.input   # 这里把hook函数内对grad_input的操作进行了注释,
        # grad_input = tuple([grad_input])        # 返回的grad_input必须是tuple,所以我们进行了tuple包装。
        # print('now grad:', grad_input)
        return grad_input
if __name__ == '__main__':
    input = torch.tensor([1, 2, 3, 4], dtype=torch.float32, requires_grad=True).to(device)
    net = MyNet()
    net.to(device)
    net.register_backward_hook(net.my_hook)   # 这两个hook函数一定要result = net(input)执行前执行,因为hook函数实在forward的时候进行绑定的
    input.register_hook(tensor_hook)
    result = net(input)
    print('result =', result)
    result.backward()
    print('input.grad:', input.grad)
    for param in net.parameters():
        print('{}:grad->{}'.format(param, param.grad))
"""

# ---- seed 004: module hooks from the Elliot Waite tutorial (programs rebuilt from the
# text: pre-hook returning a+2, b; forward hook returning output+10; shape printer;
# feature extractor; gradient clipper) ------------------------------------------------------

SEED_004_PRE_AND_FORWARD = """\
import torch
import torch.nn as nn
from torch import Tensor


class MyModel(nn.Module):
    def forward(self, a, b):
        return a * b


myModel = MyModel()
a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
b = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
print(myModel(a, b))


def hook_func_pre_forward(module: nn.Module, inputs: Tensor):
    a, b = inputs
    return a+2, b


h1 = myModel.register_forward_pre_hook(hook_func_pre_forward)
print(myModel(a, b))


def hook_func_forward(module: nn.Module, inputs: Tensor, output: Tensor):
    return output + 10


h2 = myModel.register_forward_hook(hook_func_forward)
out = myModel(a, b)
print(out)
out.sum().backward()
print(a.grad, b.grad)
h1.remove()
h2.remove()
print(myModel(a, b))
"""

SEED_004_SHAPES = """\
import torch
import torch.nn as nn
from torch import Tensor


class VerboseExecution(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

        # Register a hook for each layer
        for name, layer in self.model.named_children():
            layer.__name__ = name
            layer.register_forward_hook(
                lambda layer, _, output: print(f"{layer.__name__}: {output.shape}")
            )

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Sigmoid())
verbose_model = VerboseExecution(model)
dummy_input = torch.ones(10, 8)

_ = verbose_model(dummy_input)
print(verbose_model)
"""

SEED_004_FEATURES = """\
from typing import Callable, Dict, Iterable

import torch
import torch.nn as nn
from torch import Tensor


class FeatureExtractor(nn.Module):
    def __init__(self, model: nn.Module, layers: Iterable[str]):
        super().__init__()
        self.model = model
        self.layers = layers
        self._features = {layer: torch.empty(0) for layer in layers}

        for layer_id in layers:
            layer = dict([*self.model.named_modules()])[layer_id]
            layer.register_forward_hook(self.save_outputs_hook(layer_id))

    def save_outputs_hook(self, layer_id: str) -> Callable:
        def fn(_, __, output):
            self._features[layer_id] = output
        return fn

    def forward(self, x: Tensor) -> Dict[str, Tensor]:
        _ = self.model(x)
        return self._features


model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 2), nn.Tanh()))
for p in model.parameters():
    p.data.fill_(0.1)
feature_extractor = FeatureExtractor(model, layers=["1", "2.0"])
dummy_input = torch.ones(2, 4)
features = feature_extractor(dummy_input)

print({name: output.shape for name, output in features.items()})
print(features["2.0"])
"""

SEED_004_CLIPPER = """\
import torch
import torch.nn as nn


def gradient_clipper(model: nn.Module, val: float) -> nn.Module:
    for parameter in model.parameters():
        parameter.register_hook(lambda grad: grad.clamp_(-val, val))

    return model


model = nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(4, 2))
for p in model.parameters():
    p.data.fill_(0.5)
clipped_model = gradient_clipper(model, 0.3)
dummy_input = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]])
pred = clipped_model(dummy_input)
loss = pred.mean()
loss.backward()
print(clipped_model[2].bias.grad)
print(clipped_model[0].weight.grad)
print(clipped_model[2].weight.grad)
"""


# ---- expected output (torch 2.13) ---------------------------------------------------------

SEED_000_A_EXPECTED = """\
loss = tensor(50., grad_fn=<MseLossBackward0>)
以下是Grad Input:
(tensor([ 8., -6.]), tensor([-8.,  6.]))
以下是Grad Output:
(tensor([ 8., -6.]),)
以下是修改后的Grad Input:
(tensor([ 8., -6.]), tensor([-8.,  6.]))
-------------------backward()结束-------------------
out.grad: None
x.grad: tensor([ 16., -12.])
y.grad: tensor([ 24., -18.])
z.grad: tensor([-40.,  30.])
target.grad: tensor([-8.,  6.])
"""

SEED_000_A_EDITED_EXPECTED = """\
loss = tensor(50., grad_fn=<MseLossBackward0>)
以下是Grad Input:
(tensor([ 8., -6.]), tensor([-8.,  6.]))
以下是Grad Output:
(tensor([ 8., -6.]),)
以下是修改后的Grad Input:
(tensor([888896., 888882.]), tensor([-777785., -777771.]))
-------------------backward()结束-------------------
out.grad: None
x.grad: tensor([1777792., 1777764.])
y.grad: tensor([2666688., 2666646.])
z.grad: tensor([-3888925., -3888855.])
target.grad: tensor([-8.,  6.])
"""

SEED_000_B_EXPECTED = """\
loss = tensor(50., grad_fn=<MseLossBackward0>)
以下是Grad Input:
(tensor([8., 6.]), tensor([8., 6.]))
以下是Grad Output:
(tensor([8., 6.]),)
以下是修改后的Grad Input:
(tensor([8., 6.]), tensor([8., 6.]))
-------------------backward()结束-------------------
out.grad: None
x.grad: tensor([16., 12.])
y.grad: tensor([24., 18.])
target.grad: tensor([-8., -6.])
"""

SEED_000_B_EDITED_EXPECTED = """\
loss = tensor(50., grad_fn=<MseLossBackward0>)
以下是Grad Input:
(tensor([8., 6.]), tensor([8., 6.]))
以下是Grad Output:
(tensor([8., 6.]),)
以下是修改后的Grad Input:
(tensor([1008., 1006.]), tensor([-1992., -1994.]))
-------------------backward()结束-------------------
out.grad: None
x.grad: tensor([2016., 2012.])
y.grad: tensor([-5976., -5982.])
target.grad: tensor([-8., -6.])
"""

# f1 then f2: the last node is the division, DivBackward0(ViewBackward0, None)
SEED_002_EXPECTED = """\
result = tensor([20.5000], grad_fn=<DivBackward0>)
doing my_hook
original grad: (tensor([0.2500]), None)
original outgrad: (tensor([1.]),)
tensor hook
grad: tensor([2., 2., 2., 2.])
input.grad: tensor([2., 2., 2., 2.])
Parameter containing:
tensor([[8., 8., 8., 8.]], requires_grad=True):grad->tensor([[0.2500, 0.5000, 0.7500, 1.0000]])
Parameter containing:
tensor([2.], requires_grad=True):grad->tensor([0.2500])
"""

# f2 then f1: Linear on 1-D input ends in ViewBackward0, a one-entry grad_input
SEED_002_SWAPPED_EXPECTED = """\
result = tensor([22.], grad_fn=<ViewBackward0>)
doing my_hook
original grad: (tensor([[1.]]),)
original outgrad: (tensor([1.]),)
tensor hook
grad: tensor([2., 2., 2., 2.])
input.grad: tensor([2., 2., 2., 2.])
Parameter containing:
tensor([[8., 8., 8., 8.]], requires_grad=True):grad->tensor([[0.2500, 0.5000, 0.7500, 1.0000]])
Parameter containing:
tensor([2.], requires_grad=True):grad->tensor([1.])
"""

# f2 then f1(...)/4: the division is last again
SEED_002_SWAPPED_DIV_EXPECTED = """\
result = tensor([5.5000], grad_fn=<DivBackward0>)
doing my_hook
original grad: (tensor([0.2500]), None)
original outgrad: (tensor([1.]),)
tensor hook
grad: tensor([0.5000, 0.5000, 0.5000, 0.5000])
input.grad: tensor([0.5000, 0.5000, 0.5000, 0.5000])
Parameter containing:
tensor([[8., 8., 8., 8.]], requires_grad=True):grad->tensor([[0.0625, 0.1250, 0.1875, 0.2500]])
Parameter containing:
tensor([2.], requires_grad=True):grad->tensor([0.2500])
"""

SEED_004_PRE_AND_FORWARD_EXPECTED = """\
tensor([ 4., 10., 18.], grad_fn=<MulBackward0>)
tensor([12., 20., 30.], grad_fn=<MulBackward0>)
tensor([22., 30., 40.], grad_fn=<AddBackward0>)
tensor([4., 5., 6.]) tensor([3., 4., 5.])
tensor([ 4., 10., 18.], grad_fn=<MulBackward0>)
"""

SEED_004_SHAPES_EXPECTED = """\
0: torch.Size([10, 16])
1: torch.Size([10, 16])
2: torch.Size([10, 4])
3: torch.Size([10, 4])
VerboseExecution(
  (model): Sequential(
    (0): Linear(in_features=8, out_features=16, bias=True)
    (1): ReLU()
    (2): Linear(in_features=16, out_features=4, bias=True)
    (3): Sigmoid()
  )
)
"""

SEED_004_FEATURES_EXPECTED = """\
{'1': torch.Size([2, 3]), '2.0': torch.Size([2, 2])}
tensor([[0.2500, 0.2500],
        [0.2500, 0.2500]], grad_fn=<AddmmBackward0>)
"""

SEED_004_CLIPPER_EXPECTED = """\
tensor([0.3000, 0.3000])
tensor([[-0.0362,  0.0359,  0.1079],
        [-0.0362,  0.0359,  0.1079],
        [-0.0362,  0.0359,  0.1079],
        [-0.0362,  0.0359,  0.1079]])
tensor([[0.3000, 0.3000, 0.3000, 0.3000],
        [0.3000, 0.3000, 0.3000, 0.3000]])
"""

LEGACY_MANY_NODES_WARNING = (
    "FutureWarning",
    ("Using a non-full backward hook when the forward contains multiple autograd Nodes is "
     "deprecated and will be removed in future versions. This hook will be missing some "
     "grad_input. Please use register_full_backward_hook to get the documented behavior."))


def _edit(source: str, *replacements) -> str:
    """The seed's own variants: lines the posts edited (each must be present once)."""
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


SEED_000_A_EDITED = _edit(SEED_000_A, ("grad_input[0] #+ 888888.0", "grad_input[0] + 888888.0"),
                          ("grad_input[1] #- 777777.0", "grad_input[1] - 777777.0"))
SEED_000_B_UNEDITED = _edit(SEED_000_B, ("grad_input[0] + 1000.0", "grad_input[0]"),
                            ("grad_input[1] - 2000.0", "grad_input[1]"))
SEED_002_SWAPPED = _edit(SEED_002, (
    ("        output = self.f1(input)       # 先进行运算1,后进行运算2\n"
     "        output = self.f2(output)\n"),
    "        output = self.f2(input)\n        output = self.f1(output)\n"))
SEED_002_SWAPPED_DIV = _edit(SEED_002_SWAPPED, ("self.f1(output)\n", "self.f1(output)/4\n"))


# ---- tests ----------------------------------------------------------------------------------

@pytest.mark.parametrize("source, expected", [
    (SEED_000_A, SEED_000_A_EXPECTED),
    (SEED_000_A_EDITED, SEED_000_A_EDITED_EXPECTED),
    (SEED_000_B_UNEDITED, SEED_000_B_EXPECTED),
    (SEED_000_B, SEED_000_B_EDITED_EXPECTED),
], ids=["000a", "000a+888888", "000b", "000b+1000"])
def test_seed_000_model4cxq(lib, source, expected):
    out, _, caught = run_program(source, lib)
    assert out == expected
    # one deprecation at the forward call, and the non-leaf .grad warning for out.grad
    assert caught[0] == LEGACY_MANY_NODES_WARNING
    assert [c for c, _ in caught] == ["FutureWarning", "UserWarning"]


@pytest.mark.parametrize("source, expected", [
    (SEED_002, SEED_002_EXPECTED),
    (SEED_002_SWAPPED, SEED_002_SWAPPED_EXPECTED),
    (SEED_002_SWAPPED_DIV, SEED_002_SWAPPED_DIV_EXPECTED),
], ids=["f1-f2", "f2-f1", "f2-f1/4"])
def test_seed_002_mynet(lib, source, expected):
    out, _, _ = run_program(source, lib)
    assert out == expected


@pytest.mark.parametrize("source, expected", [
    (SEED_004_PRE_AND_FORWARD, SEED_004_PRE_AND_FORWARD_EXPECTED),
    (SEED_004_SHAPES, SEED_004_SHAPES_EXPECTED),
    (SEED_004_FEATURES, SEED_004_FEATURES_EXPECTED),
    (SEED_004_CLIPPER, SEED_004_CLIPPER_EXPECTED),
], ids=["pre-and-forward", "shapes", "features", "clipper"])
def test_seed_004_tutorial_programs(lib, source, expected):
    out, _, caught = run_program(source, lib)
    assert out == expected
    assert caught == []


SEED_001_ON_L1 = _edit(SEED_001, ("value = SaveValues(model.l2)", "value = SaveValues(model.l1)"))
NO_INPUT_GRAD_WARNING = (
    "UserWarning",
    ("Full backward hook is firing when gradients are computed with respect to module outputs "
     "since no inputs require gradients. See https://docs.pytorch.org/docs/main/generated/"
     "torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more details."))


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


@pytest.mark.parametrize("layer", ["l2", "l1"])
def test_seed_001_save_values(layer):
    """The hooks store l2's (or l1's) input, output and gradients; checked by hand."""
    source = SEED_001 if layer == "l2" else SEED_001_ON_L1
    out, ns, caught = run_program(source, "disthook")
    model, value, y = ns["model"], ns["value"], ns["y"]
    assert out == ""
    w1, b1, w2, b2 = (_np(p) for p in (model.l1.weight, model.l1.bias, model.l2.weight,
                                       model.l2.bias))
    h = w1 @ np.ones(2) + b1
    y_np = w2 @ h + b2
    np.testing.assert_allclose(_np(y), y_np, rtol=1e-5, atol=1e-6)
    grad_y = np.sign(y_np - 1) / 10  # L1Loss, mean over 10
    layer_module = getattr(model, layer)
    assert value.model is layer_module
    if layer == "l2":
        np.testing.assert_allclose(_np(value.input), h, rtol=1e-5, atol=1e-6)
        # the forward hook saw forward's own output; the caller got its hook-node view
        assert value.output is not y and value.output.grad_fn.name() == "ViewBackward0"
        assert y.grad_fn.name() == "BackwardHookFunctionBackward"
        np.testing.assert_allclose(_np(value.output), y_np, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(value.grad_output), grad_y, rtol=1e-6)
        np.testing.assert_allclose(_np(value.grad_input), w2.T @ grad_y, rtol=1e-5, atol=1e-7)
        assert caught == []
    else:
        # x needs no grad: the hook fires at the output of l1, grad_input is (None,)
        np.testing.assert_allclose(_np(value.output), h, rtol=1e-5, atol=1e-6)
        assert value.grad_input is None
        np.testing.assert_allclose(_np(value.grad_output), w2.T @ grad_y, rtol=1e-5, atol=1e-7)
        assert caught == [NO_INPUT_GRAD_WARNING]
    # value.remove() took both hooks off
    assert len(layer_module._forward_hooks) == 0 and len(layer_module._backward_hooks) == 0
    assert ns["x"].tolist() == pytest.approx([2.2, 2.2])


@pytest.mark.parametrize("layer", ["l2", "l1"])
def test_seed_001_matches_torch_with_the_same_weights(layer):
    """Run the program under both; re-run torch's tail with disthook's weights copied in."""
    torch = pytest.importorskip("torch")
    source = SEED_001 if layer == "l2" else SEED_001_ON_L1
    _, dh, _ = run_program(source, "disthook")
    _, th, _ = run_program(source, "torch")
    th["model"].load_state_dict({k: torch.tensor(np.array(v.numpy()))
                                 for k, v in dh["model"].state_dict().items()})
    th["model"].zero_grad()
    th["x"] = torch.ones((2,), dtype=torch.float32)  # the first run added 1.2 to it
    tail = source[source.index("value = SaveValues"):]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(tail, "<seed 001 tail under torch>", "exec"), th)
    # l1's input is x itself, which the program's `x += 1.2` changes afterwards (see below)
    names = ("input", "output", "grad_input", "grad_output") if layer == "l2" else (
        "output", "grad_input", "grad_output")
    for name in names:
        got, want = getattr(dh["value"], name), getattr(th["value"], name)
        if want is None:
            assert got is None, name
            continue
        np.testing.assert_allclose(_np(got), want.detach().numpy(), rtol=1e-5, atol=1e-7,
                                   err_msg=name)
    for p, q in zip(dh["model"].parameters(), th["model"].parameters()):
        np.testing.assert_allclose(_np(p.grad), q.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("lib", ["disthook", "torch"], indirect=True)
def test_seed_001_saved_input_is_x_changed_in_place(lib):
    """On l1 the saved input is x itself (no wrapping: x needs no grad); ``x += 1.2`` shows."""
    _, ns, _ = run_program(SEED_001_ON_L1, lib)
    assert ns["value"].input is ns["x"]
    assert ns["value"].input.tolist() == pytest.approx([2.2, 2.2])


def test_as_disthook_changes_only_import_lines():
    source = SEED_000_A
    converted = as_disthook(source)
    changed = [(a, b) for a, b in zip(source.split("\n"), converted.split("\n")) if a != b]
    assert changed == [
        ("import torch", "import disthook as torch"),
        ("from torch.autograd import Variable", "from disthook.autograd import Variable"),
        ("import torch.nn as nn", "import disthook.nn as nn"),
        ("import torch.nn.functional as F", "import disthook.nn.functional as F"),
    ]
    assert importlib.import_module("disthook").nn.Linear is not None
