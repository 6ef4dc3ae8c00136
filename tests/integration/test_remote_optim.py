"""Plain optimizers on a deployed model's parameters, as training programs write them:
torch.optim.X(remote.parameters()) with param groups, schedulers, clipping, a client-side
head, state_dict round trips and an optimizer class of the user's own. Each worker steps
the parameters it holds; every value equals one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn, optim

pytestmark = pytest.mark.timeout(180)


class SignSGD(optim.Optimizer):
    """An optimizer written by a user (importable by the workers: this test module)."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})

    def step(self, closure=None):
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad.sign(), alpha=-group["lr"])
                        self.state[p]["steps"] = self.state[p].get("steps", 0) + 1


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.LayerNorm(8),
                         nn.Linear(8, 3))


def groups_of(model):
    """GPT-style groups: weights of Linear layers decay, biases and norms do not."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and n != "3.weight"]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight")
                                                              and n != "3.weight")]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


def train(model, make_optimizer, steps=3, head=None, clip=None):
    torch.manual_seed(1)
    opt, sched = make_optimizer(model, head)
    for _ in range(steps):
        x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
        opt.zero_grad()
        out = model(x)
        if head is not None:
            out = head(out)
        nn.functional.cross_entropy(out, y).backward()
        if clip is not None:
            params = [*model.parameters(), *(head.parameters() if head is not None else [])]
            nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        if sched is not None:
            sched.step()
    return opt


def values(model):
    return {n: v.detach().numpy().copy() for n, v in model.state_dict().items()}


def same(got, expected, atol=1e-6):
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=atol,
                                   err_msg=name)


def sgd(model, head):
    return optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01), None


def adamw_groups(model, head):
    opt = optim.AdamW(groups_of(model), lr=0.01, betas=(0.9, 0.95))
    return opt, optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)


CASES = {"sgd momentum": sgd, "adamw two groups + cosine": adamw_groups,
         "a user's optimizer": lambda m, h: (SignSGD(m.parameters(), lr=0.05), None)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_plain_optimizer_trains_a_deployed_model_like_one_process(cluster, case, stages):
    local = make_net()
    train(local, CASES[case], clip=1.0)
    remote = cluster.deploy(make_net(), stages=stages)
    try:
        train(remote, CASES[case], clip=1.0)
        same(values(remote), values(local))
    finally:
        remote.close()


def test_local_and_remote_parameters_in_one_optimizer(cluster):
    def adam(model, head):
        return optim.Adam([*model.parameters(), *head.parameters()], lr=0.02), None

    torch.manual_seed(7)
    head = nn.Linear(3, 3)
    local = make_net()
    train(local, adam, head=head)
    torch.manual_seed(7)
    head_r = nn.Linear(3, 3)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        train(remote, adam, head=head_r)
        same(values(remote), values(local))
        np.testing.assert_allclose(head_r.weight.detach().numpy(), head.weight.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def test_state_dict_and_load_state_dict_reach_the_workers(cluster):
    local = make_net()
    opt_local = train(local, adamw_groups)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        opt_remote = train(remote, adamw_groups)
        saved_local, saved_remote = opt_local.state_dict(), opt_remote.state_dict()
        assert saved_remote["param_groups"] == saved_local["param_groups"]
        assert list(saved_remote["state"]) == list(saved_local["state"])
        for i, state in saved_local["state"].items():
            assert state.keys() == saved_remote["state"][i].keys()
            for key in state:
                np.testing.assert_allclose(np.asarray(saved_remote["state"][i][key]),
                                           np.asarray(state[key]), rtol=1e-5, atol=1e-7)
        # a fresh optimizer loaded with that state continues exactly as the first would
        fresh = optim.AdamW(groups_of(remote), lr=0.01)
        fresh.load_state_dict(saved_remote)
        torch.manual_seed(3)
        x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
        for model, opt in ((local, opt_local), (remote, fresh)):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        same(values(remote), values(local))
    finally:
        remote.close()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_reaches_the_workers(cluster, set_to_none):
    remote = cluster.deploy(make_net(), stages=2)
    try:
        opt = optim.SGD(remote.parameters(), lr=0.1)
        remote(torch.randn(2, 6)).sum().backward()
        opt.zero_grad(set_to_none=set_to_none)
        grads = remote.named_gradients()
        if set_to_none:
            assert grads == {}
        else:
            assert grads and all(not g.numpy().any() for g in grads.values())
    finally:
        remote.close()
