"""The hook toolkit (disthook.hooks) on a deployed model gives what it gives on the same
model in one process; caches are recorded on the workers and fetched once, run_until leaves
the later stages idle, and no hook outlives its block on any process."""
import numpy as np
import pytest
from clusters import worker_statuses

import disthook as torch
from disthook import hooks as toolkit
from disthook import nn
from disthook.distributed import RemoteError, deployment_of
from disthook.distributed import hooks as worker_hooks

pytestmark = pytest.mark.timeout(180)


def make_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Sequential(nn.Linear(6, 8), nn.Tanh()),
                         nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3))


def data(seed=1):
    torch.manual_seed(seed)
    return torch.randn(5, 6)


def loss_fn(out):
    return (out ** 2).mean()


def close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def same_grads(remote, net, names=None):
    grads = remote.named_gradients()
    for name, p in net.named_parameters():
        if names is None or name.split(".")[0] in names:
            close(grads[name], p.grad)


def stage_stats(cluster, remote):
    """Per stage of ``remote``: {"forwards", "hooks"} from its worker's status."""
    statuses = worker_statuses(cluster)
    return [statuses[worker]["stage_stats"][f"stage {stage} of {deployment_of(remote)._model_id}"]
            for stage, worker, _ in remote.workers()]


@pytest.fixture
def deployed(cluster, request):
    """``make_net()`` on 2 workers (``chunks`` from the test's parameter, else 1)."""
    remote = cluster.deploy(make_net(), stages=2, chunks=getattr(request, "param", 1))
    yield remote
    remote.close()


@pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")  # torch's
@pytest.mark.parametrize("deployed", [1, 3], indirect=True)
def test_run_with_cache_is_recorded_on_the_workers_and_equals_one_process(deployed, cluster,
                                                                          monkeypatch):
    net, x = make_net(), data()
    out = net(x)
    want = {}
    for path, m in net.named_modules():  # what hooks registered by hand see
        if path:
            m.register_forward_hook(lambda m, a, o, p=path: want.__setitem__(p, o.detach()))
            m.register_full_backward_hook(lambda m, gi, go, p=path: want.__setitem__(
                p + ".grad", go[0]))
    out = net(x)
    loss_fn(out).backward()
    events, fetches = [], []
    serve, fetch = deployment_of(deployed)._hub._serve_event, deployment_of(deployed)._captured
    monkeypatch.setattr(deployment_of(deployed)._hub, "_serve_event",
                        lambda *a: events.append(a) or serve(*a))
    monkeypatch.setattr(deployment_of(deployed), "_captured", lambda *a: fetches.append(a) or fetch(*a))
    got_out, cache = toolkit.run_with_cache(deployed, x, include_grads=True, loss_fn=loss_fn)
    assert events == [] and len(fetches) == 1  # no round trip per module; one fetch
    close(got_out, out)
    assert sorted(cache) == sorted(want)
    for key, value in want.items():
        close(cache[key], value)
    same_grads(deployed, net)
    assert toolkit.active_hooks(deployed) == []
    assert [s["hooks"] for s in stage_stats(cluster, deployed)] == [0, 0]
    assert cluster.captured(fetches[0][0]) == []  # nothing left in the workers' buffers


def test_run_with_cache_selects_by_pattern_and_predicate(deployed):
    net, x = make_net(), data()
    names = ["*.0", lambda path, m: isinstance(m, nn.Tanh)]
    _, want = toolkit.run_with_cache(net, x, names=names)
    _, got = toolkit.run_with_cache(deployed, x, names=names)
    assert list(got) == list(want) == ["0.0", "0.1", "1.0", "3"]
    for key in want:
        close(got[key], want[key])


def test_hooks_run_where_they_belong_and_none_outlives_an_error(deployed, cluster):
    net, x = make_net(), data()
    log_local, log_remote = [], []
    for model, log in ((net, log_local), (deployed, log_remote)):
        with pytest.raises(KeyError, match="in the block"):
            with toolkit.hooks(model, forward={"*.0": lambda m, a, out, log=log: log.append(
                                   out.detach().clone())},
                               forward_pre={"4": lambda m, a, log=log: log.append(a[0])},
                               backward={"2": worker_hooks.capture("tk-grads")
                                         if model is deployed else lambda m, gi, go: None}
                               ) as added:
                assert toolkit.active_hooks(model) == added
                model(x).sum().backward()
                raise KeyError("in the block")
        assert toolkit.active_hooks(model) == []
    holder = {stage: worker for stage, worker, _ in deployed.workers()}[deployment_of(deployed)._stage_of("2")]
    assert [(h.kind, h.path, h.where) for h in added] == [
        ("forward_pre", "4", "client"), ("forward", "0.0", "client"),
        ("forward", "1.0", "client"), ("full_backward", "2", f"worker {holder}")]
    assert len(log_remote) == len(log_local) == 3
    for got, want in zip(log_remote, log_local):
        close(got, want)
    assert len(cluster.captured("tk-grads")) == 1
    # nothing anywhere: the client's table, the workers' stages, the local modules
    assert deployment_of(deployed)._hub.hooks == {}
    assert [s["hooks"] for s in stage_stats(cluster, deployed)] == [0, 0]
    assert all(not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks)
               for m in net.modules())
    deployed(x)
    assert len(log_remote) == 3


FN_PATCH = {"1.0": lambda out: out * 2 - 1, "*.1": lambda out: out.abs()}
TENSOR_PATCH = {"3": torch.linspace(-1, 1, 40).reshape(5, 8)}  # cuts "0".."2" off


def test_a_hook_a_worker_refuses_leaves_none_of_the_others(deployed, cluster):
    with pytest.raises(RemoteError, match="hooks.clamp_grad changes gradients"):
        with toolkit.hooks(deployed, forward={"*": lambda m, a, out: None,
                                              "4": worker_hooks.clamp_grad(-1, 1)}):
            pass
    assert toolkit.active_hooks(deployed) == [] and deployment_of(deployed)._hub.hooks == {}
    assert [s["hooks"] for s in stage_stats(cluster, deployed)] == [0, 0]


@pytest.mark.parametrize("deployed", [1, 2], indirect=True)
@pytest.mark.parametrize("patches, reached", [(FN_PATCH, {"0", "1", "2", "4"}),
                                              (TENSOR_PATCH, {"4"})])
def test_patch_equals_one_process_and_stays_differentiable(deployed, patches, reached):
    net, x = make_net(), data()
    want = toolkit.patch(net, patches, x)
    loss_fn(want).backward()
    out = toolkit.patch(deployed, patches, x)
    loss_fn(out).backward()
    close(out, want)
    same_grads(deployed, net, names=reached)
    got = deployed.named_gradients()
    for name, p in net.named_parameters():
        assert (name in got) == (p.grad is not None) == (name.split(".")[0] in reached)
    assert toolkit.active_hooks(deployed) == []


def test_patch_errors_name_the_path_and_shapes_and_the_model_stays_usable(deployed):
    x = data()
    with pytest.raises(RuntimeError, match=r"patch\('2'\): the patch has shape \(5, 7\) but "
                                           r"the module's output has shape \(5, 8\)"):
        toolkit.patch(deployed, {"2": torch.zeros(5, 7)}, x)
    with pytest.raises(ValueError, match=r"patch\('2'\): on a deployed model the patch tensor "
                                         "cannot receive a gradient"):
        toolkit.patch(deployed, {"2": torch.zeros(5, 8, requires_grad=True)}, x)
    assert toolkit.active_hooks(deployed) == []
    close(deployed(x), make_net()(x))


@pytest.mark.parametrize("chunks", [1, 2])
def test_run_until_leaves_the_later_stages_idle(cluster, chunks):
    net, x = make_net(), data()
    xl, xr = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want = toolkit.run_until(net, xl, "3")
    want.sum().backward()
    remote = cluster.deploy(make_net(), stages=3, split_points=[2, 4], chunks=chunks)
    try:
        before = [s["forwards"] for s in stage_stats(cluster, remote)]
        out = toolkit.run_until(remote, xr, "3")  # "3" is on stage 1 of 0..2
        after = [s["forwards"] for s in stage_stats(cluster, remote)]
        assert [a - b for a, b in zip(after, before)] == [chunks, chunks, 0]
        close(out, want)
        out.sum().backward()  # from stage 1 back to the client
        close(xr.grad, xl.grad)
        same_grads(remote, net, names={"0", "1", "2"})
        assert remote.named_gradients().get("4.weight") is None
        remote(x)  # a whole forward afterwards reaches every stage
        assert [s["forwards"] for s in stage_stats(cluster, remote)] == [
            a + chunks for a in after]
    finally:
        remote.close()


@pytest.mark.parametrize("deployed", [2], indirect=True)
def test_trace_equals_one_process_with_micro_batches(deployed):
    net, x = make_net(), data()
    results = []
    for model in (net, deployed):
        with toolkit.trace(model, ["1", "4"], retain_input=True, retain_grad=True) as traces:
            model(x * 2)
            inside = traces["4"].output  # readable inside the block
            loss_fn(model(x)).backward()  # the last call is the one kept
        with toolkit.trace(model, "2") as single:
            model(x)
        results.append((traces, inside, single))
        assert toolkit.active_hooks(model) == []
    (want, want_inside, want_single), (got, got_inside, got_single) = results
    close(got_inside, want_inside)
    close(got_single.output, want_single.output)
    assert list(got) == ["1", "4"]
    for path in got:
        for what in ("input", "output", "grad"):
            close(getattr(got[path], what), getattr(want[path], what))


def test_errors_on_a_deployed_model(deployed):
    with pytest.raises(AttributeError, match=r"Sequential has no submodule '5'.*"
                                             r"\(its 9 module paths: '0', '0.0'"):
        toolkit.run_with_cache(deployed, data(), names="5")
    with pytest.raises(ValueError, match="the pattern 'blocks.*' selects no module"):
        toolkit.hooks(deployed, forward={"blocks.*": print}).__enter__()
    with pytest.raises(ValueError, match="needs loss_fn"):
        toolkit.run_with_cache(deployed, data(), include_grads=True)
    with pytest.raises(AttributeError, match="no submodule '9'"):
        toolkit.run_until(deployed, data(), "9")
    assert toolkit.active_hooks(deployed) == []
