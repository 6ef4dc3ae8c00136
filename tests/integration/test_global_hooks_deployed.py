"""The global module hooks (``nn.modules.module.register_module_*_hook``) on a deployed
model fire for its parts on their workers as they fire in one process: for every module
call, before the module's own hooks, with the program's own module, their return values
used; removed, they stop. They fired only for the model itself before (its parts ran on
workers where the client's globals are not)."""
import pytest

import disthook as torch
from disthook import nn
from disthook.nn.modules import module as module_hooks

pytestmark = [pytest.mark.timeout(240),  # the first module's input needs no gradient:
              pytest.mark.filterwarnings("ignore:Full backward hook is firing")]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.act, self.b = nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)

    def forward(self, x):
        return self.b(self.act(self.a(x)))


def chain():
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 6), nn.ReLU(),
                         nn.Linear(6, 2))


def session(model):
    """What global and module hooks see through a forward and backward, then after the
    globals are removed."""
    log = []

    def name(m):
        return next(n for n, x in model.named_modules() if x is m) or "model"

    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    first.register_forward_hook(lambda m, args, out: log.append(("own forward", name(m))))
    handles = [
        module_hooks.register_module_forward_pre_hook(
            lambda m, args: log.append(("pre", name(m), tuple(args[0].shape)))),
        module_hooks.register_module_forward_hook(
            lambda m, args, out: log.append(("forward", name(m), out.detach().numpy().round(5).tolist()))),
        module_hooks.register_module_forward_hook(  # doubles every Tanh's output
            lambda m, args, out: out * 2 if isinstance(m, nn.Tanh) else None),
        module_hooks.register_module_full_backward_pre_hook(
            lambda m, g_out: log.append(("backward pre", name(m)))),
        module_hooks.register_module_full_backward_hook(
            lambda m, g_in, g_out: log.append(("backward", name(m), g_out[0].numpy().round(5).tolist()))),
    ]
    torch.manual_seed(1)
    x = torch.randn(3, 4)
    try:
        out = model(x)
        out.sum().backward()
    finally:
        for h in handles:
            h.remove()
    log.append(("after removal", model(x).detach().numpy().round(5).tolist()))
    grads = [p.grad.numpy().round(5).tolist() for p in model.parameters()]
    return log, out.detach().numpy().round(5).tolist(), grads


@pytest.mark.parametrize("make", [Net, chain], ids=["tree", "chain"])
def test_global_module_hooks_fire_on_the_parts_as_in_one_process(cluster_2_or_3, make):
    torch.manual_seed(0)
    want = session(make())
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(make(), stages=min(cluster_2_or_3.stages, 2 if make is Net else 5))
    try:
        got = session(remote)
    finally:
        remote.close()
    assert got[0] == want[0]
    assert got[1:] == want[1:]


def test_global_hooks_reach_a_chains_train_step(cluster_2_or_3):
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(chain(), stages=cluster_2_or_3.stages, chunks=2)
    seen = []
    handle = module_hooks.register_module_forward_hook(
        lambda m, args, out: seen.append(type(m).__name__))
    try:
        torch.manual_seed(2)
        remote.train_step(torch.randn(4, 4), torch.randint(0, 2, (4,)),
                          nn.functional.cross_entropy)
    finally:
        handle.remove()
        remote.close()
    per_micro_batch = ["Linear", "Tanh", "Linear", "ReLU", "Linear"]
    assert sorted(seen) == sorted(per_micro_batch * 2)


def test_a_legacy_global_backward_hook_is_refused_naming_the_full_one(cluster_2_or_3, monkeypatch):
    monkeypatch.setattr(module_hooks, "_global_is_full_backward_hook", None)
    remote = cluster_2_or_3.deploy(chain(), stages=cluster_2_or_3.stages)
    handle = module_hooks.register_module_backward_hook(lambda m, g_in, g_out: None)
    try:
        with pytest.raises(NotImplementedError, match="register_module_full_backward_hook"):
            remote(torch.randn(2, 4))
    finally:
        handle.remove()
        remote.close()
