"""Micro-batches (deploy(..., chunks=M)): the batch is cut along dim 0, the pieces flow
through the stages as a pipeline, and training equals whole-batch training in one process;
hooks fire once per micro-batch, as one process fires them on each micro-batch."""
import numpy as np
import pytest
from test_remote import make_net  # the same network as the other remote tests

import disthook as torch
from disthook import nn
from disthook.distributed import DistributedOptimizer, deployment_of

pytestmark = pytest.mark.timeout(240)


def batch(rows=10, seed=1):
    torch.manual_seed(seed)
    return torch.randn(rows, 8), torch.randint(0, 3, (rows,))


def train_three_steps(cluster, stages, chunks, schedule, remote_step):
    """Three SGD-momentum steps in one process on the whole batch, and on the workers with
    ``remote_step(remote, x, y)``: the parameters agree."""
    local = make_net()
    x, y = batch()
    opt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
    remote = cluster.deploy(make_net(), stages=stages, chunks=chunks, schedule=schedule)
    ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1, momentum=0.9)
    try:
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(local(x), y).backward()
            opt.step()
            ropt.zero_grad()
            remote_step(remote, x, y)
            ropt.step()
        state = remote.state_dict()
        for name, p in local.state_dict().items():
            np.testing.assert_allclose(state[name].numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("chunks", [1, 2, 4, 8])
def test_training_with_micro_batches_equals_whole_batch_training(cluster, stages, chunks):
    train_three_steps(cluster, stages, chunks, "gpipe",
                      lambda r, x, y: nn.functional.cross_entropy(r(x), y).backward())


def test_input_gradient_and_hooks_per_micro_batch(cluster):
    local, x = make_net(), batch()[0]
    remote = cluster.deploy(make_net(), stages=2, chunks=3)  # 10 rows: 4, 3, 3
    try:
        log_local, log_remote = [], []
        for piece in (x[:4], x[4:7], x[7:]):  # one process, micro-batch by micro-batch
            local[2].register_forward_hook(
                lambda m, a, out: log_local.append(out.detach().clone()))
            local(piece)
            local[2]._forward_hooks.clear()
        remote[2].register_forward_hook(lambda m, a, out: log_remote.append(out.detach()))
        xr = x.clone().requires_grad_(True)
        xl = x.clone().requires_grad_(True)
        (remote(xr) ** 2).sum().backward()
        (local(xl) ** 2).sum().backward()
        assert [t.shape[0] for t in log_remote] == [4, 3, 3]
        for got, want in zip(log_remote, log_local):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(xr.grad.numpy(), xl.grad.numpy(), rtol=1e-5, atol=1e-7)
    finally:
        remote.close()


class Total(nn.Module):
    def forward(self, x):
        return x.sum()


def test_micro_batches_need_outputs_that_keep_the_batch_dimension(cluster):
    remote = cluster.deploy(nn.Sequential(nn.Linear(8, 2), Total()), stages=2, chunks=2)
    try:
        with pytest.raises(RuntimeError, match=r"with chunks=2 the model's output must keep "
                                               r"the batch dimension: micro-batches of \[5, 5\]"):
            remote(batch()[0])
    finally:
        remote.close()
    with pytest.raises(ValueError, match="chunks must be a positive int, got 0"):
        cluster.deploy(make_net(), stages=2, chunks=0)
    few = cluster.deploy(make_net(), stages=2, chunks=8)
    try:  # more micro-batches than rows: one row each
        with torch.no_grad():
            np.testing.assert_allclose(few(batch(3)[0]).numpy(), make_net()(batch(3)[0]).numpy(),
                                       rtol=1e-6, atol=1e-7)
    finally:
        few.close()


# ---- train_step: the loss on the last stage, GPipe or 1F1B run by the workers ---------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("chunks", [1, 2, 4, 8])
def test_train_step_equals_whole_batch_training(cluster, schedule, stages, chunks):
    def step(remote, x, y):
        losses = remote.train_step(x, y, nn.functional.cross_entropy)
        assert losses.shape == (chunks,)

    train_three_steps(cluster, stages, chunks, schedule, step)


def test_train_step_losses_hooks_and_a_loss_module(cluster):
    """Per-micro-batch losses, hooks once per micro-batch in schedule order, a loss module."""
    x, y = batch(8)
    remote = cluster.deploy(make_net(), stages=2, chunks=4, schedule="1f1b")
    try:
        events = []
        remote[4].register_forward_hook(lambda m, a, out: events.append(("F", len(out))))
        remote[4].register_full_backward_hook(lambda m, gi, go: events.append(("B", len(go[0]))))
        losses = remote.train_step(x, y, nn.CrossEntropyLoss())
        local = make_net()
        want = [nn.functional.cross_entropy(local(x[i:i + 2]), y[i:i + 2]).item()
                for i in range(0, 8, 2)]
        np.testing.assert_allclose(losses.numpy(), want, rtol=1e-6)
        # the last stage of 1F1B alternates: forward 0, backward 0, forward 1, ...
        assert events == [("F", 2), ("B", 2)] * 4
        hub = deployment_of(remote)._hub
        for _ in range(3):  # what the hooks' events left on the client goes with the step
            remote.train_step(x, y, nn.CrossEntropyLoss())
        assert not hub.taps and not hub.vjps and not hub.watched
    finally:
        remote.close()


def test_train_step_errors_end_the_step_everywhere_and_the_model_stays_usable(cluster):
    from disthook.distributed import RemoteError

    x, y = batch(8)
    remote = cluster.deploy(make_net(), stages=3, chunks=4, schedule="1f1b")
    try:
        bad = y.clone()
        bad[5] = 7  # no such class: the last stage fails on micro-batch 2
        with pytest.raises(RemoteError, match="Target 7 is out of bounds"):
            remote.train_step(x, bad, nn.functional.cross_entropy)
        remote.zero_grad()
        losses = remote.train_step(x, y, nn.functional.cross_entropy)
        assert losses.shape == (4,)
        with pytest.raises(TypeError, match="loss_fn runs on the last worker"):
            remote.train_step(x, y, lambda out, t: out.sum())
        with pytest.raises(ValueError, match="x has 8 rows but target has 3"):
            remote.train_step(x, y[:3], nn.functional.cross_entropy)
    finally:
        remote.close()
    with pytest.raises(ValueError,
                       match="schedule must be 'gpipe', '1f1b', 'zb-h1' or 'zb-batched', got "
                             "'pipedream'"):
        cluster.deploy(make_net(), stages=2, schedule="pipedream")


@pytest.mark.parametrize("mode", ["call", "train_step"])
def test_captures_keep_the_micro_batch_index(cluster, mode):
    from disthook.distributed import hooks

    x, y = batch(9)
    remote = cluster.deploy(make_net(), stages=2, chunks=3, schedule="1f1b")
    try:
        remote[2].register_forward_hook(hooks.capture("mb-out"))
        remote[2].register_full_backward_hook(hooks.capture("mb-grad"))
        if mode == "call":
            nn.functional.cross_entropy(remote(x), y).backward()
        else:
            remote.train_step(x, y, nn.functional.cross_entropy)
        outs = cluster.captured("mb-out", details=True, clear=True)
        assert [o["micro_batch"] for o in outs] == [0, 1, 2]
        assert all(o["path"] == "2" and o["kind"] == "forward" for o in outs)
        assert [len(o["value"]) for o in outs] == [3, 3, 3]
        grads = cluster.captured("mb-grad", details=True, clear=True)
        assert sorted(g["micro_batch"] for g in grads) == [0, 1, 2]
        with torch.no_grad():
            remote(x[:2])  # fewer rows than chunks: one micro-batch per row
        assert [o["micro_batch"] for o in cluster.captured("mb-out", details=True,
                                                            clear=True)] == [0, 1]
    finally:
        remote.close()


def test_ctrl_c_while_a_train_step_is_being_sent_frees_the_stages(cluster, monkeypatch):
    """KeyboardInterrupt after the first stage got its train_step and before the second did:
    the first must not wait for the second (for minutes); the next calls work at once."""
    import time

    from disthook.distributed import channel as remote_module

    remote = cluster.deploy(make_net(), stages=2, chunks=2)
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
    real_send, sent = remote_module._Hub.send, []

    def interrupted_send(hub, address, msg_type, fields, **kwargs):
        if msg_type == "train_step":
            sent.append(address)
            if len(sent) == 2:
                raise KeyboardInterrupt
        return real_send(hub, address, msg_type, fields, **kwargs)

    monkeypatch.setattr(remote_module._Hub, "send", interrupted_send)
    with pytest.raises(KeyboardInterrupt):
        remote.train_step(x, y, nn.functional.cross_entropy)
    monkeypatch.setattr(remote_module._Hub, "send", real_send)
    started = time.monotonic()
    h = remote[0].register_forward_hook(lambda m, a, out: None)  # a request to stage 0
    h.remove()
    losses = remote.train_step(x, y, nn.functional.cross_entropy)
    assert time.monotonic() - started < 10
    assert losses.shape == (2,)
    remote.close()
