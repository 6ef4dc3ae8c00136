"""The eight things that broke when third-party programs had their model deployed with one
line (issue 19), each on a 3-layer nn.Sequential (or the model the case needs) on 2 and 3
workers, against the same program in one process."""
import copy

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.utils.hooks import RemovableHandle

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 3


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3))


def data():
    torch.manual_seed(1)
    return torch.randn(5, 6), torch.randint(0, 3, (5,))


def same(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=1e-6)


class Momentum(torch.optim.SGD):
    """A user's own optimizer subclass (importable: this module)."""


@pytest.fixture(params=[2, 3], ids=["2-workers", "3-workers"])
def deployed(cluster, request):
    """(one-process model, deployed copy)."""
    local = net()
    remote = cluster.deploy(copy.deepcopy(local), stages=request.param)
    yield local, remote
    remote.close()


def train(model, program):
    x, y = data()
    losses = []
    for _ in range(3):
        losses.append(program(model, x, y))
    return losses, {n: v.numpy().copy() for n, v in model.state_dict().items()}


def test_1_plain_optimizers_param_groups_and_subclasses(deployed):
    def program(model, x, y):
        if not hasattr(model, "opt"):
            params = list(model.parameters())
            model.opt = Momentum([{"params": params[:2], "lr": 0.05},
                                  {"params": params[2:]}], lr=0.1, momentum=0.9)
        model.opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        model.opt.step()
        return loss.item()

    local, remote = deployed
    want, got = train(local, program), train(remote, program)
    same(got[0], want[0])
    for name in want[1]:
        same(got[1][name], want[1][name])


def test_2_clip_grad_norm_clips_on_the_workers(deployed):
    for model in deployed:
        x, y = data()
        F.cross_entropy(model(x) * 50, y).backward()
    norms = [nn.utils.clip_grad_norm_(m.parameters(), 0.5).item() for m in deployed]
    same(norms[1], norms[0])
    local, remote = deployed
    grads = remote.named_gradients()
    for name, p in local.named_parameters():
        same(grads[name].numpy(), p.grad.numpy())
    assert sum(float(g.norm() ** 2) for g in grads.values()) ** 0.5 == pytest.approx(0.5,
                                                                                      rel=1e-4)


def test_3_grad_and_requires_grad_setters(deployed):
    for model in deployed:
        x, y = data()
        F.cross_entropy(model(x), y).backward()
        model[0].weight.grad = None
        model[2].bias.requires_grad = False
    local, remote = deployed
    assert remote[0].weight.grad is None and not remote[2].bias.requires_grad
    for model in deployed:
        x, y = data()
        F.cross_entropy(model(x), y).backward()
    same(remote[0].weight.grad.numpy(), local[0].weight.grad.numpy())
    # the frozen bias kept the gradient of the first backward only, as in one process
    same(remote[2].bias.grad.numpy(), local[2].bias.grad.numpy())


def test_4_in_place_edits_in_client_hooks_land_on_the_worker(deployed):
    for model in deployed:
        model[0].weight.register_hook(lambda g: g.clamp_(-0.01, 0.01))  # no return
        model[4].bias.register_hook(lambda g: g.mul_(0))  # no return

        def ablate(module, args, out):
            out[:, :4] = 0
            return out

        model[2].register_forward_hook(ablate)
    outs = []
    for model in deployed:
        x, y = data()
        out = model(x)
        F.cross_entropy(out, y).backward()
        outs.append(out.detach().numpy())
    same(outs[1], outs[0])
    local, remote = deployed
    assert np.abs(remote[0].weight.grad.numpy()).max() <= 0.01 + 1e-7
    assert not remote[4].bias.grad.numpy().any()
    for name, p in local.named_parameters():
        same(remote.named_gradients()[name].numpy(), p.grad.numpy())


def test_5_remote_modules_are_modules_and_handles_are_removable_handles(deployed):
    local, remote = deployed
    assert all(isinstance(m, nn.Module) for _, m in remote.named_modules())
    assert [type(m).__name__ for _, m in remote.named_modules()][1:] == \
        [type(m).__name__ for _, m in local.named_modules()][1:]
    handle = remote[2].register_forward_hook(lambda m, a, o: None)
    assert isinstance(handle, RemovableHandle)
    handle.remove()
    # a tool that walks named_modules and picks by type caches every Linear's output
    caches = []
    for model in deployed:
        cache = {}
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                module.register_forward_hook(
                    lambda m, a, out, name=name, cache=cache: cache.__setitem__(name, out))
        model(data()[0])
        caches.append(cache)
    assert list(caches[1]) == list(caches[0]) == ["0", "2", "4"]
    for name in caches[0]:
        same(caches[1][name].detach().numpy(), caches[0][name].detach().numpy())


def test_6_autograd_grad_with_respect_to_a_tensor_a_hook_kept(deployed):
    grads = []
    for model in deployed:
        kept = []
        model[2].register_forward_hook(lambda m, a, out, kept=kept: kept.append(out))
        x, _ = data()
        (g,) = torch.autograd.grad(model(x).square().sum(), kept[0])
        grads.append(g.numpy())
    same(grads[1], grads[0])


class Mnist(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return F.log_softmax(self.fc(torch.flatten(self.drop(x), 1)), dim=1)


@pytest.mark.parametrize("stages", [2, 3])
def test_7_a_forward_with_functional_code_between_children_deploys(cluster, stages):
    torch.manual_seed(0)
    local = Mnist()  # training mode: dropout draws the same masks on the workers
    remote = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        runs = []
        for model in (local, remote):
            torch.manual_seed(3)
            opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
            losses = []
            for _ in range(3):
                x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 3, (4,))
                opt.zero_grad()
                loss = F.nll_loss(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            runs.append(losses)
        same(runs[1], runs[0])
    finally:
        remote.close()


class Block(nn.Module):
    """minGPT's Block: its MLP is a lambda over a ModuleDict."""

    def __init__(self, width):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.mlp = nn.ModuleDict(dict(fc=nn.Linear(width, 2 * width), act=nn.GELU(),
                                      proj=nn.Linear(2 * width, width)))
        m = self.mlp
        self.mlpf = lambda x: m.proj(m.act(m.fc(x)))

    def forward(self, x):
        return x + self.mlpf(self.ln(x))


@pytest.mark.parametrize("stages", [2, 3])
def test_8_a_module_holding_a_lambda_deploys(cluster, stages):
    torch.manual_seed(0)
    local = nn.Sequential(Block(6), Block(6), Block(6), nn.Linear(6, 2))
    remote = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        x = torch.randn(3, 6, requires_grad=True)
        rx = x.detach().clone().requires_grad_(True)
        out, rout = local(x), remote(rx)
        same(rout.detach().numpy(), out.detach().numpy())
        out.sum().backward()
        rout.sum().backward()
        same(rx.grad.numpy(), x.grad.numpy())
    finally:
        remote.close()
