"""Any module tree deploys with one line: a GPT (embeddings, causal self-attention blocks in a
ModuleList, a tied output head) placed over its tree automatically or by paths, trains with
AdamW on two parameter groups, clip_grad_norm_ and hooks exactly as in one process; parts
can be called with several arguments and give several outputs; dropout draws what it draws
in one process."""
import copy
import sys
from pathlib import Path

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import gpt  # examples/gpt.py

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 3


def run_gpt(model, steps=5):
    """The GPT example's training loop, with hooks of every kind; what it saw."""
    cfg = gpt.Config()
    seen = {"block": [], "grad_out": [], "losses": [], "norms": []}
    model.transformer.h[1].register_forward_hook(
        lambda m, args, out: seen["block"].append(out.detach().numpy().copy()))
    model.lm_head.weight.register_hook(lambda g: g * 0.5)
    model.transformer.h[-1].register_full_backward_hook(
        lambda m, gin, gout: seen["grad_out"].append(gout[0].numpy().copy()))
    opt = model.configure_optimizers(weight_decay=0.1, lr=3e-3)
    torch.manual_seed(5)
    for x, y in gpt.batches(cfg, steps):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        seen["norms"].append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
        opt.step()
        seen["losses"].append(loss.item())
    seen["state"] = {n: v.numpy().copy() for n, v in model.state_dict().items()}
    return seen


def fresh_gpt():
    torch.manual_seed(0)
    return gpt.GPT(gpt.Config())


def assert_same_run(got, expected):
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=1e-5)
    np.testing.assert_allclose(got["norms"], expected["norms"], rtol=1e-5)
    for a, b in zip(got["block"], expected["block"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(got["grad_out"], expected["grad_out"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert list(got["state"]) == list(expected["state"])
    for name, value in expected["state"].items():
        np.testing.assert_allclose(got["state"][name], value, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.fixture(scope="module")
def expected():
    return run_gpt(fresh_gpt())


@pytest.mark.parametrize("stages", [2, 3])
def test_a_gpt_deploys_with_one_line_and_trains_like_one_process(cluster, expected, stages):
    remote = cluster.deploy(fresh_gpt(), stages=stages)
    try:
        assert isinstance(remote, gpt.GPT) and isinstance(remote.lm_head, nn.Linear)
        held = [paths for _, _, paths in remote.workers()]
        assert len(held) == stages
        assert any("transformer.wte" in p and "lm_head" in p for p in held)  # tied: together
        assert_same_run(run_gpt(remote), expected)
    finally:
        remote.close()


def test_a_placement_by_paths_leaves_the_rest_on_the_client(cluster, expected):
    placement = {"transformer.wte": 0, "lm_head": 0, "transformer.h.0": 0,
                 "transformer.h.1": 1, "transformer.h.2": 1, "transformer.h.3": 2}
    remote = cluster.deploy(fresh_gpt(), placement=placement)
    try:
        assert [paths for _, _, paths in remote.workers()] == [
            ["transformer.wte", "transformer.h.0", "lm_head"],
            ["transformer.h.1", "transformer.h.2"], ["transformer.h.3"]]
        # left out: the client's own modules and parameters
        assert type(remote.transformer.wpe) is nn.Embedding
        assert type(remote.transformer.ln_f.weight) is nn.Parameter
        assert type(remote.transformer.h) is nn.ModuleList  # split: runs here
        assert repr(remote) == repr(fresh_gpt())  # the model prints as in one process
        assert_same_run(run_gpt(remote), expected)
    finally:
        remote.close()


def test_a_split_part_holding_a_callable_says_what_to_do(cluster):
    # a lambda over the model's parts, in a split part: it reaches the deployed parts (the
    # model's own objects, placed), as in one process
    model, local = fresh_gpt(), fresh_gpt()
    for m in (model, local):
        m.transformer.shortcut = lambda x, m=m: m.transformer.ln_f(x)
    cluster.deploy(model, stages=2)
    try:
        with torch.no_grad():
            model.transformer.ln_f.weight.mul_(2.0)  # a change the lambda must see
            local.transformer.ln_f.weight.mul_(2.0)
        x = torch.randn(2, 32)
        np.testing.assert_allclose(model.transformer.shortcut(x).detach().numpy(),
                                   local.transformer.shortcut(x).detach().numpy(), rtol=1e-6)
    finally:
        model.close()
    with pytest.raises(ValueError, match="placement uses stages 0 to 1, but stages=3"):
        cluster.deploy(fresh_gpt(), stages=3, placement={"transformer": 0, "lm_head": 1})
    # (chunks on a model whose forward runs here: tests/integration/test_remote_values.py)


class Attention(nn.Module):
    """Several tensors in, keywords, several outputs (a tuple with a dict in it)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)

    def forward(self, x, memory, *, scale=1.0, mask=None):
        scores = self.q(x) @ memory.transpose(-2, -1) * scale
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return weights @ memory, {"weights": weights, "scale": scale, "note": None}


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.attn = Attention()
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(4, 2)

    def forward(self, x, memory):
        mask = torch.zeros(x.shape[0], 5, 6, dtype=torch.bool)
        mask[:, :, -1] = True
        h, extra = self.attn(self.embed(x), memory, scale=0.5, mask=mask)
        assert extra["scale"] == 0.5 and extra["note"] is None
        return self.head(self.drop(h)) + extra["weights"].sum(-1, keepdim=True)


def test_parts_take_several_arguments_and_give_several_outputs(cluster):
    torch.manual_seed(0)
    local = Decoder()
    local.train()  # dropout on: the same masks are drawn on the workers
    remote = cluster.deploy(copy.deepcopy(local), stages=3)
    try:
        for _ in range(2):
            x, memory = torch.randn(2, 5, 3), torch.randn(2, 6, 4, requires_grad=True)
            rmemory = memory.detach().clone().requires_grad_(True)
            state = torch.get_rng_state()
            out = local(x, memory)
            after = torch.get_rng_state()
            torch.set_rng_state(state)
            rout = remote(x, rmemory)
            np.testing.assert_allclose(rout.detach().numpy(), out.detach().numpy(), rtol=1e-6)
            assert torch.equal(torch.get_rng_state(), after)  # the worker's draws, drawn here
            out.square().sum().backward()
            rout.square().sum().backward()
            np.testing.assert_allclose(rmemory.grad.numpy(), memory.grad.numpy(), rtol=1e-5,
                                       atol=1e-7)
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=name)
        # a module as an argument cannot go to the worker: the part's forward runs here,
        # and fails as in one process
        with pytest.raises(AttributeError, match="'Linear' object has no attribute 'transp"):
            remote.attn(torch.randn(1, 4), nn.Linear(1, 1))
    finally:
        remote.close()


def test_a_root_holding_a_callable_over_its_parts_calls_the_deployed_parts(cluster):
    """A lambda the root keeps over its parts reaches the placed parts: the same objects."""
    model, local = fresh_gpt(), fresh_gpt()
    for m in (model, local):
        m.head_of = lambda x, m=m: m.lm_head(x)
    cluster.deploy(model, stages=2)
    try:
        x = torch.randn(2, 32)
        np.testing.assert_allclose(model.head_of(x).detach().numpy(),
                                   local.head_of(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    finally:
        model.close()
