"""A model deployed on real worker processes computes what it computes in one process.

Forward crosses the stages worker to worker, backward comes back the same way, gradients
land in ``.grad`` of the parameters on their workers and in ``x.grad`` on the client.
"""
import copy
import gc
import time

import numpy as np
import pytest
from clusters import open_graphs

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, local_cluster
from disthook.distributed.autograd_node import RemoteBackward0
from disthook.distributed.placement import partition
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def make_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def data(seed=1):
    torch.manual_seed(seed)
    return torch.randn(5, 8), torch.tensor([0, 1, 2, 1, 0])


def close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)


def same_grads(remote, net):
    """Every parameter's .grad on the workers equals the one-process model's."""
    grads = remote.named_gradients()
    for name, p in net.named_parameters():
        close(grads[name], p.grad)


def contexts(cluster) -> list[int]:
    """Open forward graphs on each worker, in the coordinator's order."""
    return list(open_graphs(cluster).values())


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_forward_backward_same_as_one_process(cluster, stages):
    net = make_net()
    x, y = data()
    x_local = x.clone().requires_grad_(True)
    loss = nn.functional.cross_entropy(net(x_local), y)
    loss.backward()

    remote = cluster.deploy(copy.deepcopy(net), stages=stages)
    placed = [names for _, _, names in remote.workers()]
    assert len(placed) == stages and sum(placed, []) == ["0", "1", "2", "3", "4"]
    x_remote = x.clone().requires_grad_(True)
    out = remote(x_remote)
    assert isinstance(out.grad_fn, RemoteBackward0)
    assert out.grad_fn.name() == "AddmmBackward0"  # printed as the worker's last op
    with pytest.warns(UserWarning, match="next_functions lead straight to that call's inputs"):
        edges = out.grad_fn.next_functions  # (the stages' ops are on the workers)
    assert edges[0][0].variable is x_remote  # the input's AccumulateGrad
    loss_r = nn.functional.cross_entropy(out, y)
    assert loss_r.item() == pytest.approx(loss.item(), rel=1e-6)
    loss_r.backward()
    close(x_remote.grad, x_local.grad)
    grads = remote.named_gradients()
    assert sorted(grads) == sorted(n for n, _ in net.named_parameters())
    for name, p in net.named_parameters():
        close(grads[name], p.grad)
    for name, t in net.state_dict().items():
        close(remote.state_dict()[name], t)
    remote.close()


def test_retain_graph_and_accumulation(cluster):
    net = make_net()
    x, y = data()
    local = nn.functional.cross_entropy(net(x), y)
    local.backward(retain_graph=True)
    local.backward()
    remote = cluster.deploy(net, stages=3)
    out = nn.functional.cross_entropy(remote(x), y)
    out.backward(retain_graph=True)
    out.backward()  # the stages kept their graphs
    same_grads(remote, net)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()
    remote.zero_grad()
    assert remote.named_gradients() == {}
    remote.close()


def test_input_without_grad_still_gives_parameter_grads(cluster):
    net = make_net()
    x, y = data()
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    out = remote(x)
    assert out.requires_grad and x.grad is None
    nn.functional.cross_entropy(out, y).backward()
    assert x.grad is None
    nn.functional.cross_entropy(net(x), y).backward()
    same_grads(remote, net)
    remote.close()


def test_no_grad_inference_opens_no_context(cluster):
    net = make_net()
    x, _ = data()
    remote = cluster.deploy(copy.deepcopy(net), stages=3)
    with torch.no_grad():
        out = remote(x)
    assert out.grad_fn is None and not out.requires_grad
    close(out, net(x))
    assert contexts(cluster) == [0, 0, 0]
    remote.close()


def test_dropped_graph_is_released_on_every_stage(cluster):
    net = make_net()
    x, _ = data()
    remote = cluster.deploy(net, stages=3)
    out = remote(x)
    assert contexts(cluster) == [1, 1, 1]
    del out
    gc.collect()
    with torch.no_grad():
        remote(x)  # the next call carries the release
    deadline = time.monotonic() + 10
    while contexts(cluster) != [0, 0, 0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert contexts(cluster) == [0, 0, 0]
    remote.close()


def test_stage_error_reaches_the_client_and_the_cluster_stays_usable(cluster):
    net = make_net()
    remote = cluster.deploy(copy.deepcopy(net), stages=3)
    with pytest.raises(RemoteError) as info:
        remote(torch.randn(5, 7))  # 7 features where the first Linear takes 8
    err = info.value
    assert err.kind == "RuntimeError" and err.path == "0" and err.worker
    assert err.stage.startswith("stage 0 of Sequential-")
    assert "mat1 and mat2 shapes cannot be multiplied (5x7 and 8x16)" in str(err)
    assert "Remote traceback" in str(err)
    x, _ = data()
    close(remote(x), net(x))  # still serving
    remote.close()


def test_deploy_errors(cluster):
    net = make_net()
    with pytest.raises(ValueError, match="4 stages need 4 workers; the cluster has 3"):
        cluster.deploy(net, stages=4)
    with pytest.raises(ValueError, match="cannot place Sequential on 6 stages"):
        cluster.deploy(net, stages=6)
    with pytest.raises(ValueError, match=r"split_points=\[3, 2\] must be 2 increasing"):
        cluster.deploy(net, stages=3, split_points=[3, 2])
    with pytest.raises(TypeError, match="takes a disthook.nn.Module, got int"):
        cluster.deploy(3, stages=1)
    remote = cluster.deploy(net, stages=2, split_points=[1])
    assert [names for _, _, names in remote.workers()] == [["0"], ["1", "2", "3", "4"]]
    with pytest.raises(TypeError, match="takes one Tensor, got list"):
        remote([1.0])
    remote.close()


def test_batchnorm_running_stats_update_on_the_worker(cluster):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    x = torch.randn(8, 4)
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    remote(x).sum().backward()
    net(x).sum().backward()
    state = remote.state_dict()
    for name in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        close(state[name], net.state_dict()[name])
    remote.close()


@pytest.mark.parametrize("sizes,stages,cuts", [
    ([10, 0, 10, 0, 10], 3, [2, 4]),
    ([1, 1, 1, 1], 4, [1, 2, 3]),
    ([100, 1, 1, 1], 2, [1]),
    ([1, 1, 1, 100], 2, [3]),
    ([5], 1, []),
    ([0, 0, 0], 2, [2]),  # ties: parameter-free layers stay with the stage before
    ([3, 0, 0, 3], 3, [2, 3]),
])
def test_partition_balances_contiguous_stages(sizes, stages, cuts):
    assert partition(sizes, stages) == cuts


# ---- client hooks: registered on proxies, fired on the owning worker, run here ----------------

def hooked_program(model, x, y, log):
    """Hooks of every kind that crosses, with replacements, on a model or its remote twin."""
    handles = [
        model[2].register_forward_pre_hook(lambda m, args: (args[0] + 2,)),
        model[2].register_forward_hook(
            lambda m, args, out: log.append(("forward 2", args[0].detach(), out.detach()))),
        model[3].register_forward_hook(lambda m, args, out: out * 2),  # stays differentiable
        model[2].register_full_backward_hook(
            lambda m, gin, gout: log.append(("backward 2", gin[0], gout[0]))),
        model[4].register_full_backward_pre_hook(lambda m, gout: (gout[0] * 3,)),
        model[0].weight.register_hook(lambda g: g.clamp(-0.01, 0.01)),
        model[4].bias.register_hook(lambda g: log.append(("bias 4", g))),
    ]
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for h in handles:
        h.remove()
    return loss


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_client_hooks_give_the_same_log_and_gradients_as_one_process(cluster, stages):
    net = make_net()
    x, y = data()
    x_local, x_remote = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    local_log, remote_log = [], []
    local_loss = hooked_program(net, x_local, y, local_log)
    remote = cluster.deploy(copy.deepcopy(net), stages=stages)
    remote_loss = hooked_program(remote, x_remote, y, remote_log)
    close(remote_loss, local_loss)
    assert [e[0] for e in remote_log] == [e[0] for e in local_log] \
        == ["forward 2", "bias 4", "backward 2"]
    for got, want in zip(remote_log, local_log):
        for a, b in zip(got[1:], want[1:]):
            close(a, b)
    close(x_remote.grad, x_local.grad)
    same_grads(remote, net)
    # the handles were removed: a plain step now matches a plain local step
    net.zero_grad()
    remote.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    nn.functional.cross_entropy(remote(x), y).backward()
    same_grads(remote, net)
    remote.close()


def test_exception_in_a_client_hook_is_raised_at_the_caller(cluster):
    net = make_net()
    x, _ = data()
    remote = cluster.deploy(copy.deepcopy(net), stages=2)

    def bad(module, args, out):
        raise ValueError("hook says no")

    with remote[3].register_forward_hook(bad):
        with pytest.raises(ValueError, match="hook says no"):
            remote(x)
    close(remote(x), net(x))  # removed by the with block; the cluster goes on
    remote.close()


def test_hook_proxies_and_errors(cluster):
    net = make_net()
    remote = cluster.deploy(net, stages=2)
    assert len(remote) == 5 and list(remote) == [remote[i] for i in range(5)]
    assert remote[-1] is remote[4] and remote[2].weight.shape == (16, 16)
    with pytest.raises(IndexError, match="index 5 is out of range"):
        remote[5]
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        remote[0].nope
    with pytest.raises(TypeError, match="hook must be callable, got int"):
        remote[0].register_forward_hook(3)
    x, _ = data()
    remote(x).sum().backward()
    close(remote[0].weight.grad, remote.named_gradients()["0.weight"])
    remote.close()


# ---- training: the optimizer steps each worker's share ----------------------------------------

@pytest.mark.parametrize("name,kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}),
    ("Adam", {"lr": 1e-2, "betas": (0.8, 0.99)}),
], ids=["sgd-momentum", "adam"])
@pytest.mark.parametrize("stages", [2, 3])
def test_training_steps_match_one_process(cluster, stages, name, kwargs):
    from disthook.distributed import DistributedOptimizer

    cls = getattr(torch.optim, name)
    net = make_net()
    remote = cluster.deploy(copy.deepcopy(net), stages=stages)
    local_opt = cls(net.parameters(), **kwargs)
    remote_opt = DistributedOptimizer(cls, remote.parameters(), **kwargs)
    for step in range(3):
        x, y = data(seed=10 + step)
        local_opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        local_opt.step()
        remote_opt.zero_grad()
        nn.functional.cross_entropy(remote(x), y).backward()
        remote_opt.step()
    state = remote.state_dict()
    for n, t in net.state_dict().items():
        close(state[n], t)
    twin = remote.to_local()
    assert type(twin) is nn.Sequential and twin is not net
    x, _ = data(seed=99)
    close(twin(x), net(x))
    remote.close()


def test_zero_grad_rides_with_the_next_forward_and_keeps_its_order(cluster):
    """optimizer.zero_grad() costs no round trip of its own: the next forward carries it to
    every stage; any other request sends it first, so gradients read or made after it are
    the ones one process would have."""
    from disthook import wire
    from disthook.distributed import DistributedOptimizer

    net = make_net()
    remote = cluster.deploy(copy.deepcopy(net), stages=3)
    local_opt = torch.optim.SGD(net.parameters(), lr=0.1)
    remote_opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
    x, y = data()
    for opt, model in ((local_opt, net), (remote_opt, remote)):
        nn.functional.cross_entropy(model(x), y).backward()  # gradients to clear
        opt.zero_grad()
    before = wire.decoded_count()
    out = remote(x)
    assert wire.decoded_count() - before == 1  # the forward's answer, nothing for zero_grad
    assert not deployment_of(remote)._hub.pending_optimizer
    nn.functional.cross_entropy(out, y).backward()
    nn.functional.cross_entropy(net(x), y).backward()
    same_grads(remote, net)
    # zero_grad, then a gradient read: sent before the read (set_to_none=False keeps zeros)
    local_opt.zero_grad(set_to_none=False)
    remote_opt.zero_grad(set_to_none=False)
    assert float(remote[0].weight.grad.abs().sum()) == 0.0
    # zero_grad between a forward and its backward: sent before the backward
    out, ref = remote(x), net(x)
    remote_opt.zero_grad()
    local_opt.zero_grad()
    nn.functional.cross_entropy(out, y).backward()
    nn.functional.cross_entropy(ref, y).backward()
    same_grads(remote, net)
    # a forward that fails on a stage leaves them pending: the next request sends them
    remote_opt.zero_grad()
    with pytest.raises(RemoteError):
        remote(torch.ones(2, 3))
    assert deployment_of(remote)._hub.pending_optimizer
    assert remote[0].weight.grad is None
    assert not deployment_of(remote)._hub.pending_optimizer
    remote.close()


def test_zero_grad_rides_with_a_pipelined_train_step(cluster):
    from disthook import wire
    from disthook.distributed import DistributedOptimizer

    net = make_net()
    remote = cluster.deploy(copy.deepcopy(net), stages=3, chunks=2, schedule="1f1b")
    local_opt = torch.optim.SGD(net.parameters(), lr=0.1)
    remote_opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
    x, y = data()
    for _ in range(2):  # the second step would double the gradients without the zero_grad
        local_opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        remote_opt.zero_grad()
        before = wire.decoded_count()
        remote.train_step(x, y, nn.functional.cross_entropy)
        assert wire.decoded_count() - before == 3  # one answer per stage, none for zero_grad
        same_grads(remote, net)
        local_opt.step()
        remote_opt.step()
    remote.close()


class RefusesNan(nn.Module):
    """Passes its input on, and refuses one with NaN in it (a forward that fails on a later
    stage than the first)."""

    def forward(self, x):
        if bool(torch.isnan(x).any()):
            raise ValueError("NaN in the input")
        return x


def stepped_net():
    return nn.Sequential(*make_net(), RefusesNan())


@pytest.mark.parametrize("kind", ["distributed", "plain"])
def test_steps_after_the_first_ride_with_the_next_forward_and_run_once(cluster, kind):
    """optimizer.step() after an optimizer's first (which makes its shares on the workers,
    and says at once if one refuses) costs no round trip: the next forward carries it to
    every stage, before anything else there; any other request sends it first. A forward
    that fails on a later stage after the first ran it sends it again, and the first skips
    it: momentum shows a step run twice."""
    from disthook import wire
    from disthook.distributed import DistributedOptimizer

    net = stepped_net()
    remote = cluster.deploy(stepped_net(), stages=3)
    local_opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    remote_opt = (DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1,
                                       momentum=0.9) if kind == "distributed"
                  else torch.optim.SGD(remote.parameters(), lr=0.1, momentum=0.9))
    x, y = data()

    def step(opt, model):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    try:
        for opt, model in ((local_opt, net), (remote_opt, remote)):
            step(opt, model)  # the first: its shares are made at once
        assert not deployment_of(remote)._hub.pending_optimizer
        for opt, model in ((local_opt, net), (remote_opt, remote)):
            step(opt, model)
        assert len(deployment_of(remote)._hub.pending_optimizer) == 1  # the second step, not sent yet
        before = wire.decoded_count()
        out, ref = remote(x), net(x)
        assert wire.decoded_count() - before == 1  # the forward's answer only
        assert not deployment_of(remote)._hub.pending_optimizer
        close(out, ref)
        # a step, then a forward that fails on the last stage: every stage ran the step
        # before the failure, and runs it once however often it comes (the gradients are
        # still there: a second run would move the weights again)
        nn.functional.cross_entropy(out, y).backward()
        nn.functional.cross_entropy(ref, y).backward()
        local_opt.step()
        remote_opt.step()
        with pytest.raises(ValueError, match="NaN in the input"):
            remote(torch.full((5, 8), float("nan")))
        assert len(deployment_of(remote)._hub.pending_optimizer) == 1  # it goes again with the next request
        for name, p in net.named_parameters():  # a read sends it first
            close(remote.get_parameter(name), p)
        assert not deployment_of(remote)._hub.pending_optimizer
        same_grads(remote, net)
        step(local_opt, net)
        step(remote_opt, remote)
        close(remote(x), net(x))
    finally:
        remote.close()


def test_an_attached_clients_last_step_lands_when_it_closes(cluster):
    from disthook.distributed import DistributedOptimizer

    net = make_net()
    owner = cluster.deploy(make_net(), stages=2, name="stepped-by-a-guest", writable=True)
    guest = cluster.attach("stepped-by-a-guest")
    local_opt = torch.optim.SGD(net.parameters(), lr=0.1)
    guest_opt = DistributedOptimizer(torch.optim.SGD, guest.parameters(), lr=0.1)
    x, y = data()
    try:
        for opt, model in ((local_opt, net), (guest_opt, guest)):
            for _ in range(2):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        assert deployment_of(guest)._hub.pending_optimizer  # the second step
        guest.close()  # the stages stay: the step goes before the connections close
        for name, p in net.named_parameters():
            close(owner.get_parameter(name), p)
    finally:
        owner.close()


def test_load_state_dict_and_its_errors(cluster):
    net, other = make_net(seed=0), make_net(seed=5)
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    remote.load_state_dict(other.state_dict())
    x, _ = data()
    close(remote(x), other(x))
    partial = {k: v for k, v in other.state_dict().items() if k != "4.bias"}
    with pytest.raises(RuntimeError) as remote_error:
        remote.load_state_dict(partial)
    with pytest.raises(RuntimeError) as local_error:
        make_net(seed=0).load_state_dict(partial)
    assert str(remote_error.value) == str(local_error.value) == (
        'Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: '
        '"4.bias". ')
    result = remote.load_state_dict(partial, strict=False)  # torch's result, and what loads
    assert result.missing_keys == ["4.bias"] and result.unexpected_keys == []
    from disthook.distributed import DistributedOptimizer

    with pytest.raises(TypeError, match="optimizer class of disthook.optim"):
        DistributedOptimizer(dict, remote.parameters())
    with pytest.raises(TypeError, match="parameters of a deployed model"):
        DistributedOptimizer(torch.optim.SGD, net.parameters(), lr=0.1)
    remote.close()


def test_grad_cam_pattern_forward_hook_hooks_the_output(cluster):
    """A forward hook keeps the activation and puts a tensor hook on it for its gradient."""
    def grad_cam(model, x, y):
        seen = {}

        def keep(module, args, out):
            seen["activation"] = out.detach()
            out.register_hook(lambda g: seen.__setitem__("gradient", g))
            out.register_hook(lambda g: g * 0.5)  # and a replacement, chained after it

        handle = model[2].register_forward_hook(keep)
        nn.functional.cross_entropy(model(x), y).backward()
        handle.remove()
        return seen

    net = make_net()
    x, y = data()
    x_local, x_remote = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    local = grad_cam(net, x_local, y)
    remote = cluster.deploy(net, stages=3)
    got = grad_cam(remote, x_remote, y)
    close(got["activation"], local["activation"])
    close(got["gradient"], local["gradient"])
    close(x_remote.grad, x_local.grad)
    same_grads(remote, net)
    remote.close()


def test_legacy_backward_hook_sees_the_last_op(cluster):
    def program(model, x, y):
        log = []
        handle = model[2].register_backward_hook(
            lambda m, gin, gout: log.append([None if g is None else g.detach() for g in gin]
                                            + [gout[0].detach()]))
        nn.functional.cross_entropy(model(x), y).backward()
        handle.remove()
        return log

    net = make_net()
    x, y = data()
    with pytest.warns(FutureWarning, match="non-full backward hook when the forward contains"):
        local = program(net, x, y)
    remote = cluster.deploy(net, stages=2)
    with pytest.warns(FutureWarning, match="non-full backward hook when the forward contains"):
        got = program(remote, x, y)  # the worker warns; the client issues it again
    assert len(got) == len(local) == 1 and len(got[0]) == len(local[0]) == 4
    for a, b in zip(got[0], local[0]):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b)
    remote.close()


def test_hooks_on_the_whole_model_fire_on_the_client(cluster):
    def program(model, x, y):
        log = []
        hs = [model.register_forward_pre_hook(lambda m, args: log.append("pre") or (args[0] * 2,)),
              model.register_forward_hook(lambda m, args, out: out + 1),
              model.register_full_backward_hook(
                  lambda m, gin, gout: log.append(("bwd", gin[0].detach(), gout[0].detach())))]
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        for h in hs:
            h.remove()
        return loss, log

    net = make_net()
    x, y = data()
    xl, xr = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    local_loss, local_log = program(net, xl, y)
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    remote_loss, remote_log = program(remote, xr, y)
    close(remote_loss, local_loss)
    assert remote_log[0] == local_log[0] == "pre" and len(remote_log) == len(local_log) == 2
    close(remote_log[1][1], local_log[1][1])
    close(remote_log[1][2], local_log[1][2])
    close(xr.grad, xl.grad)
    assert [n for n, _ in remote.named_modules()] == [n for n, _ in net.named_modules()]
    assert [n for n, _ in remote.named_children()] == ["0", "1", "2", "3", "4"]
    remote.eval()
    assert not remote.training
    remote.train()
    remote.close()


def test_train_and_eval_reach_the_workers(cluster):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.Linear(6, 2))
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    x = torch.randn(3, 4)
    net.eval()
    remote.eval()
    close(remote(x), net(x))  # dropout off on the worker too
    remote.close()


def reported(cluster, model_id: str, n: int, timeout: float = 10.0) -> None:
    """Wait until the coordinator reports ``n`` stages of the model (workers report their
    stages with their heartbeats, right after each change)."""
    deadline = time.monotonic() + timeout
    while True:
        held = sum(model_id in s for w in cluster.workers() for s in w.stages)
        if held == n:
            return
        assert time.monotonic() < deadline, f"{held} stages of {model_id} reported, not {n}"
        time.sleep(0.05)


def test_two_models_share_workers_and_stay_apart(cluster):
    """Stages of two deployments on the same workers: interleaved calls, separate graphs,
    hooks and gradients, each equal to its model in one process."""
    net_a, net_b = make_net(0), make_net(7)
    x, y = data()
    local = {}
    for name, net in (("a", net_a), ("b", net_b)):
        nn.functional.cross_entropy(net(x), y).backward()
        local[name] = {n: p.grad.clone() for n, p in net.named_parameters()}
        net.zero_grad()
    a = cluster.deploy(net_a, stages=2)
    b = cluster.deploy(net_b, stages=3)
    try:
        fired = []
        a[2].register_forward_hook(lambda m, args, out: fired.append("a"))
        b[2].register_forward_hook(lambda m, args, out: fired.append("b"))
        loss_a = nn.functional.cross_entropy(a(x), y)
        loss_b = nn.functional.cross_entropy(b(x), y)
        assert fired == ["a", "b"]
        loss_b.backward()
        loss_a.backward()
        for name, remote in (("a", a), ("b", b)):
            grads = remote.named_gradients()
            assert set(grads) == set(local[name])
            for n, g in grads.items():
                close(g, local[name][n])
        reported(cluster, deployment_of(a)._model_id, 2)
        reported(cluster, deployment_of(b)._model_id, 3)
        assert all(isinstance(w.stage, int) for w in cluster.workers())
    finally:
        a.close()
        b.close()


def test_close_unloads_the_stages_and_a_closed_model_says_so(cluster):
    remote = cluster.deploy(make_net(), stages=2)
    dep = deployment_of(remote)
    model_id = dep._model_id
    reported(cluster, model_id, 2)
    with torch.no_grad():
        before = remote(torch.ones(2, 8))
    remote.close()
    reported(cluster, model_id, 0)
    # the model is back here, with its values; its deployment is closed
    assert deployment_of(remote) is None
    close(remote(torch.ones(2, 8)), before)
    with pytest.raises(RuntimeError, match=f"deployed model {model_id} is closed"):
        dep.save("unused")
    # a worker asked for a model it does not hold names what it holds
    w = cluster.workers()[0]
    with Peer(w.address) as peer, pytest.raises(RemoteError, match="holds no stage of model"):
        peer.request("get_state", {"model": model_id}, timeout=10)


def test_deploy_places_stages_on_the_least_loaded_workers():
    with local_cluster(workers=2) as c:
        first = c.deploy(make_net(), stages=1)
        second = c.deploy(make_net(1), stages=1)
        assert first.workers()[0][1] != second.workers()[0][1]
        x, _ = data()
        with torch.no_grad():
            close(first(x), make_net()(x))
            close(second(x), make_net(1)(x))


def test_stages_without_gradients_need_no_graph(cluster):
    """A first stage with no parameters and an input without grad keeps no graph: backward
    stops at the stage after it; frozen parameters give an output without grad_fn."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.ReLU(), nn.Tanh(), nn.Linear(8, 4))
    x = torch.randn(3, 8)
    net(x).sum().backward()
    expected = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    before = sum(contexts(cluster))
    remote = cluster.deploy(net, stages=2, split_points=[2])
    try:
        out = remote(x)
        assert out.requires_grad and isinstance(out.grad_fn, RemoteBackward0)
        out.sum().backward()
        assert x.grad is None
        for n, g in remote.named_gradients().items():
            close(g, expected[n])
        assert sum(contexts(cluster)) == before
    finally:
        remote.close()
    frozen = make_net().requires_grad_(False)
    remote = cluster.deploy(copy.deepcopy(frozen), stages=2)
    try:
        out = remote(x)
        assert not out.requires_grad and out.grad_fn is None
        with pytest.raises(RuntimeError, match="does not require grad"):
            out.sum().backward()
        close(out, frozen(x))
    finally:
        remote.close()


def test_remote_parameters_read_like_tensors_and_update_in_place(cluster):
    net = make_net()
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    try:
        w = remote[2].weight
        assert w.shape == (16, 16) and w.size(0) == 16 and w.dim() == 2 and w.numel() == 256
        assert w.requires_grad and w.is_leaf and w.dtype == torch.float32
        close(w.detach(), net[2].weight)
        np.testing.assert_array_equal(np.asarray(w), net[2].weight.detach().numpy())
        close(w.sum(), net[2].weight.sum())  # other methods read a local copy
        close(w * 2, net[2].weight * 2)
        with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that "
                                               "requires grad"):
            w.numpy()
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being "
                                               "used in an in-place operation"):
            w.fill_(0.5)
        w.data.fill_(0.25)  # through .data: allowed anywhere, as in one process
        np.testing.assert_array_equal(w.data.numpy(), np.full((16, 16), 0.25, np.float32))
        new = torch.randn(16)
        with torch.no_grad():
            remote[2].bias.copy_(new)
            remote[0].weight.mul_(0)
            remote[4].weight.add_(torch.ones(3, 16), alpha=2)
        close(remote[2].bias.detach(), new)
        assert not remote[0].weight.detach().numpy().any()
        close(remote[4].weight.detach(), net[4].weight.detach() + 2)
        # frozen on the worker: no gradient reaches it
        remote[0].weight.requires_grad_(False)
        assert not remote[0].weight.requires_grad
        x, y = data()
        nn.functional.cross_entropy(remote(x), y).backward()
        assert remote[0].weight.grad is None and remote[0].bias.grad is not None
        with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
            w.nonsense
    finally:
        remote.close()


@pytest.mark.parametrize("stages", [1, 3])
def test_retain_grad_in_a_client_hook_retains_on_the_worker(cluster, stages):
    """out.retain_grad() in a forward hook: after backward, out.grad on the client is the
    worker tensor's gradient, accumulated over backwards as in one process."""
    def run(model, x, y):
        kept = {}

        def keep(module, args, out):
            out.retain_grad()
            kept["out"] = out

        handle = model[2].register_forward_hook(keep)
        loss = nn.functional.cross_entropy(model(x), y)
        handle.remove()
        loss.backward(retain_graph=True)
        first = kept["out"].grad.clone()
        loss.backward()
        return first, kept["out"].grad

    net = make_net()
    x, y = data()
    local = run(net, x, y)
    remote = cluster.deploy(net, stages=stages)
    try:
        got = run(remote, x, y)
        close(got[0], local[0])
        close(got[1], local[1])
        close(got[1], 2 * local[0])

        def no_grad_hook(module, args, out):
            out.retain_grad()

        handle = remote[2].register_forward_hook(no_grad_hook)
        with torch.no_grad(), pytest.raises(RuntimeError, match="can't retain_grad on Tensor "
                                                                "that has requires_grad=False"):
            remote(x)
        handle.remove()
    finally:
        remote.close()


class Chain(nn.Module):
    """Not a Sequential, but its forward only chains its children: deployable."""

    def __init__(self):
        super().__init__()
        self.l1, self.act, self.l2 = nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 3)
        self.note = "plain attribute"

    def forward(self, x):
        return self.l2(self.act(self.l1(x)))


class Residual(Chain):
    def forward(self, x):
        h = self.act(self.l1(x))
        return self.l2(h + 1)


class OwnWeight(Chain):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))


def test_a_module_that_chains_its_children_deploys_and_others_run_their_forward_here(cluster):
    torch.manual_seed(0)
    net = Chain()
    x, _ = data()
    remote = cluster.deploy(copy.deepcopy(net), stages=2)
    try:
        assert remote.l2.out_features == 3 and remote.note == "plain attribute"
        close(remote(x), net(x))
        assert remote.l1.weight.shape == (6, 8)
    finally:
        remote.close()
    torch.manual_seed(0)
    residual = Residual()
    remote = cluster.deploy(copy.deepcopy(residual), stages=2)
    try:  # h + 1 between the children: the forward runs here, each child on its worker
        close(remote(x), residual(x))
        assert deployment_of(remote)._glue
    finally:
        remote.close()
    weighted = OwnWeight()
    own = cluster.deploy(copy.deepcopy(weighted), stages=2)  # its own parameter stays here
    try:
        assert type(own.scale) is nn.Parameter and deployment_of(own)._glue
        close(own(x), weighted(x))
    finally:
        own.close()
    bn = cluster.deploy(nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4)), stages=2)
    try:
        bn(x)
        assert bn[1].running_mean.abs().sum().item() > 0  # a buffer reads its current value
        assert bn[1].eps == 1e-5 and bn[1].training
    finally:
        bn.close()


def test_balance_by_time_puts_the_slow_child_alone(cluster):
    """Cheap elementwise children and one heavy convolution (which also holds every
    parameter): by time the convolution gets a stage of its own with the near-free Flatten;
    by parameters the cut falls after it."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.Tanh())
    x = torch.randn(256, 64)
    net_conv = nn.Sequential(nn.ReLU(), nn.Tanh(), nn.Unflatten(1, (1, 64)),
                             nn.Conv1d(1, 64, 31, padding=15), nn.Flatten())
    remote = cluster.deploy(copy.deepcopy(net_conv), stages=2, balance="time", sample_input=x)
    try:
        assert [names for _, _, names in remote.workers()] == [["0", "1", "2"], ["3", "4"]]
        with torch.no_grad():
            close(remote(x), net_conv(x))
    finally:
        remote.close()
    by_params = cluster.deploy(net_conv, stages=2)
    try:
        assert [names for _, _, names in by_params.workers()] == [["0", "1", "2", "3"], ["4"]]
    finally:
        by_params.close()
    with pytest.raises(ValueError, match="pass sample_input="):
        cluster.deploy(net, stages=2, balance="time")
    with pytest.raises(ValueError, match="balance must be 'params' or 'time', got 'flops'"):
        cluster.deploy(net, stages=2, balance="flops")
