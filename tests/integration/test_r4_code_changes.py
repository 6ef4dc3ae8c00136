"""The code of a deployed model changed on the client without setting anything on a module:
a module's class swapped (``block.__class__ = Wrapped``, as gradient-checkpointing and
quantization wrappers do) or a class patched (``nn.GELU.forward = f``, a method of the
program's own class replaced) or a function its code calls patched (``F.gelu = f``, a helper
of the model's file replaced) for a while, or a function the class's code looks for given to
a module (``block.act_fn = torch.tanh``, read by ``getattr(self, "act_fn", default)``). One process computes with the new code at once
and with the old once it is put back; before, the workers kept computing with the classes
they were deployed with, a silently different result. Each program runs on a chain of
stages and on a model whose forward runs here, against the same program in one process."""
import functools
import types

import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.utils.checkpoint import checkpoint

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.act = nn.Linear(d, d), nn.GELU()

    def forward(self, x):
        out = x + bias(self.act(self.fc(x)))
        scale = getattr(self, "rescale", None)  # a function the program may give it
        return out if scale is None else scale(out)


def bias(h):  # a helper of the model's file, which the program may patch
    return h


class Scaled(Block):  # what the program swaps a block's class for
    def forward(self, x):
        return super().forward(x) * 3.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.ModuleList([Block(8) for _ in range(3)])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def net():
    torch.manual_seed(0)
    return Net()


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), Block(8), Block(8), Block(8), nn.Linear(8, 3))


def block(m, i):
    return m.blocks[i] if isinstance(m, Net) else m[1 + i]


X = torch.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4))


def step(m) -> list:
    out = m(X)
    out.square().sum().backward()
    grads = [p.grad.numpy().copy() for p in m.parameters()]
    m.zero_grad()
    return [out.detach().numpy(), grads]


@pytest.mark.parametrize("make", [chain, net], ids=["chain", "tree"])
def test_a_class_swapped_after_the_deploy_computes_with_the_new_class(cluster, make):
    def program(m):
        log = step(m)
        block(m, 1).__class__ = Scaled  # this block only
        log += [type(block(m, 1)).__name__, *step(m)]
        block(m, 1).__class__ = Block  # back as deployed
        return log + step(m)

    same_logs(*deployed_run(cluster, make, program))


@pytest.mark.parametrize("make", [chain, net], ids=["chain", "tree"])
def test_a_class_patched_after_the_deploy_computes_with_the_patch_until_restored(
        cluster, make):
    def program(m):
        log = step(m)
        gelu, fwd = nn.GELU.forward, Block.forward
        nn.GELU.forward = lambda self, x: torch.tanh(x)  # every GELU of the model
        try:
            log += step(m)
            Block.forward = lambda self, x: self.act(self.fc(x)) - x  # the program's class
            log += step(m)
        finally:
            nn.GELU.forward, Block.forward = gelu, fwd
        return log + step(m)

    same_logs(*deployed_run(cluster, make, program))


@pytest.mark.parametrize("make", [chain, net], ids=["chain", "tree"])
def test_a_function_given_to_a_module_after_the_deploy_is_the_one_its_code_calls(
        cluster, make):
    def program(m):
        log = step(m)
        block(m, 0).rescale = torch.tanh
        block(m, 2).rescale = functools.partial(torch.clamp, min=-0.5, max=0.5)
        block(m, 2).note = print  # a function its code does not look for: the client's own
        log += step(m)
        del block(m, 0).rescale, block(m, 2).rescale
        return log + step(m)

    same_logs(*deployed_run(cluster, make, program))


@pytest.mark.parametrize("make", [chain, net], ids=["chain", "tree"])
def test_a_function_the_code_calls_patched_after_the_deploy_is_the_one_called(cluster, make):
    def program(m):
        global bias
        log = step(m)
        gelu, helper = F.gelu, bias
        F.gelu = lambda x, approximate="none": torch.sigmoid(x)  # what nn.GELU calls
        try:
            log += step(m)
            bias = lambda h: h - 1.0  # the model file's helper, patched
            log += step(m)
        finally:
            F.gelu, bias = gelu, helper
        return log + step(m)

    same_logs(*deployed_run(cluster, make, program))


def sigmoid_gelu(x, approximate="none"):
    return torch.sigmoid(x)


def halved_linear(self, x):
    return F.linear(x, self.weight, self.bias) * 0.5


@pytest.mark.parametrize("make", [chain, net], ids=["chain", "tree"])
def test_a_library_patched_before_the_deploy_is_patched_where_its_modules_compute(
        cluster, make):
    """The workers import disthook's classes by name, as the library has them: a patch this
    process made before the deploy (with functions of its own) computes here."""
    gelu, linear = F.gelu, nn.Linear.forward
    F.gelu, nn.Linear.forward = sigmoid_gelu, halved_linear
    try:
        same_logs(*deployed_run(cluster, make, lambda m: step(m) + step(m)))
    finally:
        F.gelu, nn.Linear.forward = gelu, linear


class Checkpointed(Net):  # HF's gradient checkpointing: each block's call checkpointed
    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(x)


def checkpointed():
    torch.manual_seed(0)
    return Checkpointed()


def test_a_block_computing_here_under_gradient_checkpointing_recomputes_as_in_one_process(
        cluster):
    """A block whose forward the program replaced computes here, under checkpoint: its ops on
    the small values that came with the answers ran here in the forward and on the worker in
    the rerun (whose calls go on without their answers), and the rerun's determinism check
    failed (CheckpointError)."""
    def program(m):
        log = step(m)
        block(m, 1).forward = types.MethodType(lambda self, x: x * torch.tanh(self.fc(x)),
                                               block(m, 1))
        return log + step(m) + step(m)

    same_logs(*deployed_run(cluster, checkpointed, program))


def test_an_attached_clients_class_swap_is_its_own_and_the_deployers_model_unchanged(cluster):
    """The attached client's model is made from the published structure: a class it swaps
    computes here, for it alone; the workers' modules, which the deployer's model computes
    with, keep theirs."""
    from disthook.distributed import connect

    plain, swapped = chain(), chain()
    swapped[2].__class__ = Scaled
    want = [plain(X).detach().numpy(), swapped(X).detach().numpy()]
    model = cluster.deploy(chain(), stages=2, name="r4-swap")
    try:
        with connect(cluster.address) as other:
            attached = other.attach("r4-swap", trust_code=True)  # (this test's classes)
            attached[2].__class__ = Scaled
            got = [model(X).detach().numpy(), attached(X).detach().numpy()]
            attached[2].__class__ = Block
            got.append(attached(X).detach().numpy())
        same_logs(got, [*want, want[0]])
    finally:
        model.close()
