"""Model surgery on a deployed model: children and parameters changed after the deploy (a
head replaced, a layer wrapped, every ReLU swapped, LoRA adapters added) are the program's,
as in one process: the changed module runs here, each placed one on its worker. And a
parameter frozen or unfrozen between calls gives the flags one process gives. Each check
against the same program run on the same model in one process."""
import copy

import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn
from disthook.distributed.placed import changed_here

pytestmark = pytest.mark.timeout(240)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.act, self.norm = nn.Linear(d, d), nn.ReLU(), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.act(self.fc(x)))


class Net(nn.Module):  # its own forward: runs here, its parts on their workers
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.Sequential(*[Block(8) for _ in range(3)])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


def net():
    torch.manual_seed(0)
    return Net()


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), *[Block(8) for _ in range(3)], nn.Linear(8, 3))


class GuidedReLU(nn.Module):
    def forward(self, x):
        out = torch.relu(x)
        if out.requires_grad:
            out.register_hook(lambda g: g.clamp(min=0))
        return out


class LoRA(nn.Module):
    def __init__(self, base, rank=2):
        super().__init__()
        self.base = base
        torch.manual_seed(3)
        self.A = nn.Linear(base.in_features, rank, bias=False)
        self.B = nn.Linear(rank, base.out_features, bias=False)
        nn.init.normal_(self.B.weight, std=0.1)

    def forward(self, x):
        return self.base(x) + self.B(self.A(x))


X = torch.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4))
Y = torch.tensor([0, 1, 2, 1, 0])


def surgery(m) -> list:
    """Guided backprop's ReLU swap, then LoRA on every block with the rest frozen, trained."""
    log = [m(X).detach().numpy()]
    for mod in list(m.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(mod, name, GuidedReLU())
    xi = X.clone().requires_grad_(True)
    m(xi)[:, 1].sum().backward()
    log.append(xi.grad.numpy())
    for p in m.parameters():
        p.requires_grad_(False)
    for mod in list(m.modules()):
        if isinstance(mod, Block):
            mod.fc = LoRA(mod.fc)
    trainable = [p for p in m.parameters() if p.requires_grad]
    log.append(len(trainable))
    opt = torch.optim.Adam(trainable, lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(X), Y)
        loss.backward()
        opt.step()
        log.append(loss.detach().numpy())
    state = m.state_dict()
    log.append(sorted(state))
    m.double()
    log.append(m(X.double()).detach().numpy())
    m.float()
    m.eval()
    log.append(m(X).detach().numpy())
    m.load_state_dict(state)
    log.append(m(X).detach().numpy())
    return log


@pytest.mark.parametrize("make", [net, chain], ids=["own-forward", "chain"])
def test_guided_relus_and_lora_adapters_after_the_deploy_train_as_in_one_process(
        cluster, make):
    def changed(m):
        return [*surgery(m), changed_here(m)]

    got, want = deployed_run(cluster, make, changed, stages=len(cluster.workers()))
    same_logs(got[:-1], want[:-1])
    assert got[-1]


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.seen = inner, []

    def forward(self, x):
        out = self.inner(x)
        self.seen.append(out.detach().clone())
        return out * 2


def test_a_wrapped_part_runs_here_and_on_its_worker_again_once_put_back(cluster):
    local = chain()
    remote = cluster.deploy(chain(), stages=len(cluster.workers()))
    try:
        base = remote(X).detach().numpy()
        inner = remote[2]
        remote[2], local[2] = Wrap(inner), Wrap(local[2])
        fired = []
        remote[2].inner.fc.register_forward_hook(lambda m, i, o: fired.append(o.shape))
        np.testing.assert_allclose(remote(X).detach().numpy(), local(X).detach().numpy(),
                                   rtol=1e-6)
        assert len(remote[2].seen) == 1 and fired == [(5, 8)]
        assert changed_here(remote)
        remote[2] = inner  # back as deployed: the chain runs on its workers again
        assert not changed_here(remote)
        np.testing.assert_array_equal(remote(X).detach().numpy(), base)
    finally:
        remote.close()


def test_a_parameter_set_on_a_placed_module_is_used_and_trained_here(cluster):
    local, remote_model = chain(), chain()
    remote = cluster.deploy(remote_model, stages=len(cluster.workers()))
    try:
        for m in (local, remote):
            m[-1].bias = nn.Parameter(torch.full((3,), 0.5))
            m[1].register_parameter("gain", nn.Parameter(torch.ones(8)))
        out, want = remote(X), local(X)
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        out.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(remote[-1].bias.grad.numpy(), local[-1].bias.grad.numpy())
        assert "1.gain" in remote.state_dict()
    finally:
        remote.close()
    # closed: the model is here, as changed
    np.testing.assert_allclose(remote(X).detach().numpy(), local(X).detach().numpy(),
                               rtol=1e-6)


def test_freezing_and_unfreezing_between_calls_gives_one_process_flags(cluster):
    def run(m):
        log = []
        for p in m.parameters():
            p.requires_grad = False
        out = m(X)
        log.append((out.requires_grad, out.grad_fn is None))
        m.inp.requires_grad_(True)  # progressive unfreezing: the first layer again
        out = m(X)
        log.append((out.requires_grad, type(out.grad_fn).__name__))
        out.sum().backward()
        log.append([p.grad is None for p in m.parameters()])
        log.append(m.inp.weight.grad.numpy().round(5).tolist())
        return log

    want = run(net())
    remote = cluster.deploy(net(), stages=len(cluster.workers()))
    try:
        assert run(remote) == want
    finally:
        remote.close()


def test_a_copy_of_a_changed_deployed_model_is_a_plain_one(cluster):
    local = chain()
    remote = cluster.deploy(chain(), stages=len(cluster.workers()))
    try:
        remote.append(nn.Softmax(dim=1))
        local.append(nn.Softmax(dim=1))
        twin = copy.deepcopy(remote)
        assert changed_here(remote) and not changed_here(twin)
        np.testing.assert_allclose(twin(X).detach().numpy(), local(X).detach().numpy(),
                                   rtol=1e-6)
    finally:
        remote.close()


def test_a_new_head_trains_with_train_step_in_micro_batches_as_in_one_process(cluster):
    from disthook.distributed import DistributedOptimizer

    def head(m):
        torch.manual_seed(3)
        m[-1] = nn.Linear(8, 3)
        return m

    local = head(chain())
    opt = torch.optim.SGD(local.parameters(), lr=0.1)
    want = []
    for _ in range(2):
        opt.zero_grad()
        for i in range(0, 4, 2):  # train_step's micro-batches: the mean of their losses
            loss = nn.functional.cross_entropy(local(X[i:i + 2]), Y[i:i + 2])
            (loss / 2).backward()
            want.append(loss.detach().numpy())
        opt.step()
    remote = head(cluster.deploy(chain(), stages=len(cluster.workers()), chunks=2))
    try:
        with pytest.raises(TypeError, match=r"2 of the \d+ given live here.*"
                                            r"SGD\(remote.parameters\(\), \.\.\.\)"):
            DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
        opt = torch.optim.SGD(remote.parameters(), lr=0.1)
        got = []
        for _ in range(2):
            opt.zero_grad()
            got += [np.asarray(v) for v in remote.train_step(X[:4], Y[:4],
                                                             nn.functional.cross_entropy)]
            opt.step()
        same_logs([g.astype(np.float32) for g in got], want, rtol=1e-5)
        same_logs(remote(X).detach().numpy(), local(X).detach().numpy())
    finally:
        remote.close()
