"""One deployed model, four clients attached at once (issue 23), each in its own process with
its own hooks (a capture, a gradient scale, an output patch, a full backward hook), 20 rounds
of forward and backward each: every client's outputs, input gradients, hook log and
parameter gradients equal its own one-process run, and no hook fires for another client's
call; an attached client's weight writes are refused and the weights stay; models() lists the
model and its clients; a client stuck in its hook delays no one else, and when it is killed
what it held goes."""
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of
from disthook.service.rpc import Peer
from disthook.wire import HEARTBEAT_S, LOST_AFTER_BEATS

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2

CLIENT = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    import disthook as torch
    from disthook import nn
    from disthook.distributed import connect

    address, name, variant, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    cluster = connect(address)
    remote = cluster.attach(name)
    local = remote.to_local()  # the same weights, for this client's one-process run

    def hooks(model, log):
        if variant == 0:    # capture a layer's output
            return [model[2].register_forward_hook(
                lambda m, a, out: log.append(("capture", out.detach().numpy().copy())))]
        if variant == 1:    # scale a parameter's gradient
            return [model[0].weight.register_hook(lambda g: g * 0.5)]
        if variant == 2:    # patch an activation
            def patch(m, a, out):
                out = out.clone()
                out[:, :2] = 0
                log.append(("patched", out.detach().numpy().copy()))
                return out
            return [model[2].register_forward_hook(patch)]
        return [model[2].register_full_backward_hook(   # a full backward hook
            lambda m, gin, gout: log.append(("grad_out", gout[0].numpy().copy())))]

    def run(model):
        log, outs, grads = [], [], []
        handles = hooks(model, log)
        torch.manual_seed(100 + variant)
        for _ in range(20):
            x = torch.randn(4, 6, requires_grad=True)
            out = model(x)
            out.square().sum().backward()
            outs.append(out.detach().numpy())
            grads.append(x.grad.numpy())
        for h in handles:
            h.remove()
        params = {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}
        return log, outs, grads, params

    print("attached", flush=True)
    while not os.path.exists(go):  # all four attached: the rounds run side by side
        time.sleep(0.02)
    got, want = run(remote), run(local)
    assert len(got[0]) == len(want[0]) == (0 if variant == 1 else 20), len(got[0])
    for g, w in zip(got[0], want[0]):
        assert g[0] == w[0]
        np.testing.assert_allclose(g[1], w[1], rtol=1e-5, atol=1e-6)
    for part in (1, 2):
        for g, w in zip(got[part], want[part]):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert sorted(got[3]) == sorted(want[3])
    for n in want[3]:  # the sum of this client's own 20 backward passes
        np.testing.assert_allclose(got[3][n], want[3][n], rtol=1e-4, atol=1e-5)
    try:
        remote.load_state_dict({n: torch.zeros_like(v) for n, v in remote.state_dict().items()})
    except PermissionError as exc:
        print("write refused:", "shares read-only" in str(exc), flush=True)
    remote.close()
    print("ok", flush=True)
''')

STUCK = textwrap.dedent('''
    import sys, time
    import disthook as torch
    from disthook.distributed import connect

    remote = connect(sys.argv[1]).attach(sys.argv[2])
    remote[0].register_forward_hook(lambda m, a, o: (print("in hook", flush=True),
                                                     time.sleep(600)))
    remote(torch.randn(2, 6))
''')


def others(remote) -> list:
    """What clients other than the deployer hold on the model's stages, as the workers
    report it: [(stage, client, {"contexts", "hooks", "owner"})]."""
    held = []
    for address in deployment_of(remote)._addresses:
        with Peer(address) as peer:
            status = peer.request("status", {}, timeout=30)["result"]
        for name, stage in status["stage_stats"].items():
            if deployment_of(remote)._model_id in name:
                held += [(name, who, entry) for who, entry in stage["clients"].items()
                         if not entry["owner"] and (entry["contexts"] or entry["hooks"])]
    return held


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3))


def test_four_clients_attached_at_once_each_see_one_process(cluster, tmp_path):
    remote = cluster.deploy(model(), stages=2, name="shared-4")
    (tmp_path / "client.py").write_text(CLIENT)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "client.py", cluster.address, "shared-4",
                               str(v), str(go)], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for v in range(4)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "attached", p.stderr.read()
        (entry,) = [m for m in cluster.models() if m["name"] == "shared-4"]
        assert len(entry["clients"]) == 4, entry
        weights = {n: v.numpy().copy() for n, v in remote.state_dict().items()}
        go.write_text("")
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
            assert out.splitlines()[-2:] == ["write refused: True", "ok"], out + err
        for n, v in remote.state_dict().items():  # no client changed them
            np.testing.assert_array_equal(v.numpy(), weights[n])
        assert not remote.named_gradients()  # nor the deployer's gradients
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        remote.close()


def test_a_client_stuck_in_its_hook_delays_no_one_and_its_death_frees_its_graphs(cluster,
                                                                               tmp_path):
    remote = cluster.deploy(model(), stages=2, name="shared-stuck")
    (tmp_path / "stuck.py").write_text(STUCK)
    stuck = subprocess.Popen([sys.executable, "stuck.py", cluster.address, "shared-stuck"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        assert stuck.stdout.readline().strip() == "in hook", stuck.stderr.read()
        x = torch.randn(3, 6, requires_grad=True)
        started = time.monotonic()
        for _ in range(5):  # the deployer's calls go on while that client's call waits
            remote(x).sum().backward()
        assert time.monotonic() - started < 10
        assert others(remote)  # the stuck client holds a graph and a hook
        stuck.kill()
        stuck.wait(10)
        deadline = time.monotonic() + LOST_AFTER_BEATS * HEARTBEAT_S + 2  # 3 beats
        while others(remote) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not others(remote)  # its graph and hook are gone from every stage
        remote(x).sum().backward()  # still served
    finally:
        if stuck.poll() is None:
            stuck.kill()
            stuck.wait(10)
        remote.close()


STEPS_THEN_EXITS = textwrap.dedent('''
    import sys
    import disthook as torch
    from disthook import nn
    from disthook.distributed import connect, deployment_of

    remote = connect(sys.argv[1]).attach(sys.argv[2])
    opt = torch.optim.SGD(remote.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(remote(x), y).backward()
        opt.step()  # the second rides with a next request that never comes
    print("pending", len(deployment_of(remote)._hub.pending_optimizer), flush=True)
''')  # ... and the program ends without closing the model


def test_an_attached_clients_last_step_lands_when_its_program_ends(cluster, tmp_path):
    remote = cluster.deploy(model(), stages=2, name="stepped-at-exit", writable=True)
    (tmp_path / "client.py").write_text(STEPS_THEN_EXITS)
    try:
        done = subprocess.run([sys.executable, "client.py", cluster.address,
                               "stepped-at-exit"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "pending 1"
        local = model()
        opt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
        torch.manual_seed(1)
        x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
        for _ in range(2):
            opt.zero_grad()
            nn.functional.cross_entropy(local(x), y).backward()
            opt.step()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(remote.get_parameter(name).detach().numpy(),
                                       p.detach().numpy(), rtol=1e-6, atol=1e-7,
                                       err_msg=name)
    finally:
        remote.close()
