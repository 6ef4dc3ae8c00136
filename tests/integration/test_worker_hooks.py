"""Worker hooks (disthook.distributed.hooks) run inside the owning worker and change or
record exactly what the same hook written as a Python callable does in one process."""
import os

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, hooks, local_cluster

pytestmark = pytest.mark.timeout(180)

PROBES = '''
def scaled_output(module, args, output, factor=2.0):
    return output * factor
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pkg = tmp_path_factory.mktemp("probes")
    (pkg / "dh_probes.py").write_text(PROBES)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pkg), old]))
    try:
        with local_cluster(workers=2, allow_hook_modules=["dh_probes"]) as c:
            yield c
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def make_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.ReLU(),
                         nn.Linear(12, 3))


def data():
    torch.manual_seed(1)
    return torch.randn(4, 6), torch.tensor([0, 2, 1, 0])


def close(a, b):
    np.testing.assert_allclose(np.asarray(a.detach().numpy()), b.detach().numpy(), rtol=1e-6,
                               atol=1e-7)


def step(model, x, y):
    nn.functional.cross_entropy(model(x), y).backward()


def test_capture_keeps_outputs_and_gradients_in_call_order(cluster):
    net = make_net()
    x, y = data()
    seen = {"out": [], "gout": []}
    net[2].register_forward_hook(lambda m, a, out: seen["out"].append(out.detach().clone()))
    net[2].register_full_backward_hook(lambda m, gi, go: seen["gout"].append(go))
    step(net, x, y)
    step(net, x * 2, y)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        remote[2].register_forward_hook(hooks.capture("out"))
        remote[2].register_full_backward_hook(hooks.capture("gout"))
        step(remote, x, y)
        step(remote, x * 2, y)
        assert cluster.captured("nothing") == []
        peek = cluster.captured("out")  # reading keeps the buffer
        outs = cluster.captured("out", clear=True)
        assert len(peek) == len(outs) == 2 and cluster.captured("out") == []
        for kept, got in zip(peek, outs):
            close(kept, got)
        for got, want in zip(outs, seen["out"]):
            close(got, want)
        gouts = cluster.captured("gout")
        assert len(gouts) == 2 and all(isinstance(g, tuple) and len(g) == 1 for g in gouts)
        for got, want in zip(gouts, seen["gout"]):
            close(got[0], want[0])
    finally:
        remote.close()


def test_clamp_and_scale_change_gradients_as_the_callables_would(cluster):
    net = make_net()
    x, y = data()
    net[0].weight.register_hook(lambda g: g.clamp(-0.01, 0.01))
    net[4].register_full_backward_pre_hook(lambda m, go: tuple(g * 0.5 for g in go))
    net[2].register_full_backward_hook(lambda m, gi, go: tuple(g * 3 for g in gi))
    step(net, x, y)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        remote[0].weight.register_hook(hooks.clamp_grad(-0.01, 0.01))
        remote[4].register_full_backward_pre_hook(hooks.scale_grad(0.5))
        remote[2].register_full_backward_hook(hooks.scale_grad(3))
        step(remote, x, y)
        grads = remote.named_gradients()
        for name, p in net.named_parameters():
            close(grads[name], p.grad)
        assert np.abs(grads["0.weight"].numpy()).max() <= 0.01
    finally:
        remote.close()


def test_check_finite_names_the_place_and_the_cluster_stays_usable(cluster):
    remote = cluster.deploy(make_net(), stages=2)
    try:
        remote[0].register_forward_hook(hooks.check_finite())
        x, y = data()
        step(remote, x, y)  # finite: nothing happens
        bad = x.clone()
        bad[0, 0] = float("inf")
        with pytest.raises(RemoteError, match=r"check_finite: \d+ non-finite value\(s\) in a "
                                              r"tensor of shape \(4, 12\) seen by the forward "
                                              r"hook on '0'") as info:
            remote(bad)
        assert info.value.kind == "RuntimeError"
        step(remote, x, y)
    finally:
        remote.close()


def test_by_path_runs_an_allowed_function_and_refuses_others(cluster):
    net = make_net()
    x, _ = data()
    remote = cluster.deploy(make_net(), stages=2)
    try:
        h = remote[2].register_forward_hook(hooks.by_path("dh_probes:scaled_output", factor=3.0))
        with torch.no_grad():
            want = net[4](net[3](net[2](net[1](net[0](x))) * 3.0))
            close(remote(x), want)
        h.remove()
        with torch.no_grad():
            close(remote(x), net(x))
        with pytest.raises(RemoteError, match="module 'os' is not allowed on this worker"):
            remote[2].register_forward_hook(hooks.by_path("os:getcwd"))
        with pytest.raises(RemoteError, match="dh_probes has no 'missing'"):
            remote[2].register_forward_hook(hooks.by_path("dh_probes:missing"))
    finally:
        remote.close()


def test_record_norm_and_clip_grad_norm_match_the_callables(cluster):
    net = make_net()
    x, y = data()
    norms = []

    def clip(g, max_norm=0.05):
        norm = float(np.linalg.norm(g.numpy().astype(np.float64)))
        norms.append(norm)
        return g * (max_norm / norm) if norm > max_norm else g

    net[0].weight.register_hook(clip)
    net[4].register_full_backward_hook(
        lambda m, gi, go: norms.append(float(np.linalg.norm(go[0].numpy()))))
    step(net, x, y)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        remote[0].weight.register_hook(hooks.record_norm("norms"))
        remote[0].weight.register_hook(hooks.clip_grad_norm(0.05))
        remote[0].bias.register_hook(hooks.clip_grad_norm(1e6))  # never reached: unchanged
        remote[4].register_full_backward_hook(hooks.record_norm("norms"))
        step(remote, x, y)
        got = cluster.captured("norms", details=True)
        assert [(i["path"], i["kind"]) for i in got] == [("4", "full_backward"),
                                                         ("0.weight", "tensor")]
        assert all(i["value"].shape == () and i["value"].dtype == torch.float64 for i in got)
        np.testing.assert_allclose([float(i["value"]) for i in got], norms, rtol=1e-6)
        assert norms[1] > 0.05  # the clip did something
        grads = remote.named_gradients()
        for name, p in net.named_parameters():
            close(grads[name], p.grad)
        assert np.linalg.norm(grads["0.weight"].numpy()) == pytest.approx(0.05, rel=1e-5)
    finally:
        remote.close()


def test_hook_counts_say_how_often_hooks_fired_on_each_worker(cluster):
    remote = cluster.deploy(make_net(), stages=2, chunks=2)
    try:
        (_, first, _), (_, second, _) = remote.workers()
        before = cluster.hook_counts()
        remote[0].weight.register_hook(hooks.record_norm("n"))
        remote[0].register_forward_hook(hooks.capture("a"))
        remote[4].register_forward_hook(lambda m, args, out: None)  # a client hook
        x, y = data()
        step(remote, x, y)  # two micro-batches: every hook fires twice
        after = cluster.hook_counts()
        fired = {w: {k: v - before[w].get(k, 0) for k, v in after[w].items()
                     if v != before[w].get(k, 0)} for w in after}
        assert fired[first] == {"record_norm": 2, "capture": 2}
        assert fired[second] == {"client": 2}
        assert len(cluster.captured("n")) == len(cluster.captured("a")) == 2
    finally:
        remote.close()


def test_bad_worker_hooks_are_refused():
    with pytest.raises(ValueError, match="needs min or max"):
        hooks.clamp_grad()
    with pytest.raises(ValueError, match="min 2 is greater than max 1"):
        hooks.clamp_grad(2, 1)
    with pytest.raises(TypeError, match="takes a number"):
        hooks.scale_grad("2")
    with pytest.raises(ValueError, match="'package.module:function'"):
        hooks.by_path("no_colon")
    with pytest.raises(TypeError, match="non-empty buffer name"):
        hooks.capture("")
    with pytest.raises(TypeError, match=r"record_norm\(\) takes a non-empty buffer name"):
        hooks.record_norm(None)
    with pytest.raises(ValueError, match="max_norm must be positive and finite, got 0"):
        hooks.clip_grad_norm(0)
    with pytest.raises(TypeError, match="clip_grad_norm\\(\\) takes a number"):
        hooks.clip_grad_norm("1")
    net = make_net()
    net[0].register_forward_hook(hooks.capture("x"))
    with pytest.raises(TypeError, match="runs on a worker"):
        net(torch.ones(1, 6))


def test_gradient_hooks_refuse_forward_kinds(cluster):
    remote = cluster.deploy(make_net(), stages=1)
    try:
        with pytest.raises(RemoteError, match="changes gradients: register it as a tensor hook "
                                              "or a backward hook, not as a forward hook"):
            remote[0].register_forward_hook(hooks.clamp_grad(-1, 1))
    finally:
        remote.close()
