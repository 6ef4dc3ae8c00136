"""A forward or backward runs ahead of the answers of client hooks that only look: the
worker does not wait for them (its status counts them as ``hooks_ahead``), and everything
stays as in one process — values the hooks see, outputs, gradients, dropout's masks, a
hook's error. When a hook that only looked so far starts to change its value, the pass runs
again (``passes_again``) and the hooks after it see only the changed values, each hook
running as often as in one process; gradients accumulated before stay as they were. A stage
whose forward changes its buffers (batch norm in training mode) never runs ahead."""
import numpy as np
import pytest
from clusters import worker_statuses

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of
from disthook.distributed import hooks as worker_hooks

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


def model(norm: bool = False):
    torch.manual_seed(0)
    middle = nn.BatchNorm1d(6) if norm else nn.Dropout(0.3)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), middle, nn.Linear(6, 6), nn.Tanh(),
                         nn.Linear(6, 3))


def stage_stats(cluster, remote) -> dict:
    """The workers' stage_stats summed over the stages of ``remote``."""
    total = {"forwards": 0, "hooks_ahead": 0, "passes_again": 0, "answers_ahead": 0}
    for status in worker_statuses(cluster).values():
        for stage, stats in status["stage_stats"].items():
            if stage.endswith(f" of {deployment_of(remote)._model_id}"):
                for key in total:
                    total[key] += stats[key]
    return total


class Recorder:
    """Forward hooks on every module: what each saw, by path, in order of calls; the hook on
    ``switch`` returns its output doubled from its ``after``-th call on."""

    def __init__(self, net, switch: str | None = None, after: int = 2):
        self.seen: dict[str, list] = {}
        self.calls = 0
        self.handles = []
        for path, module in net.named_modules():
            if path:
                self.handles.append(module.register_forward_hook(self.hook(path, switch, after)))

    def hook(self, path, switch, after):
        def record(module, args, output):
            self.seen.setdefault(path, []).append(output.detach().numpy().copy())
            if path == switch and len(self.seen[path]) > after:
                return output * 2
            return None

        return record


def run(net, steps: int, grad: bool = True):
    """Outputs and the first layer's weight gradient of ``steps`` forwards (and backwards)."""
    outs, grads = [], []
    for step in range(steps):
        torch.manual_seed(100 + step)
        x = torch.randn(5, 4)
        if grad:
            y = net(x)
            y.square().sum().backward()
            outs.append(y.detach().numpy())
            grads.append(net[0].weight.grad.numpy().copy())
            net[0].weight.grad = None
        else:
            with torch.no_grad():
                outs.append(net(x).numpy())
    return outs, grads


def compare(cluster, name, *, switch=None, norm=False, grad=True, steps=4, train=True):
    local = model(norm)
    local.train(train)
    # stage 0: modules 0, 1, 2; stage 1: 3, 4, 5
    remote = cluster.deploy(model(norm), stages=2, split_points=[3], name=name)
    remote.train(train)
    try:
        mine, theirs = Recorder(local, switch), Recorder(remote, switch)
        want, got = run(local, steps, grad), run(remote, steps, grad)
        for a, b in zip(want[0] + want[1], got[0] + got[1]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert theirs.seen.keys() == mine.seen.keys()
        for path in mine.seen:  # every hook ran as often, on the same values
            assert len(theirs.seen[path]) == len(mine.seen[path]) == steps, path
            for a, b in zip(mine.seen[path], theirs.seen[path]):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=path)
        if norm:
            for key, value in local.state_dict().items():
                np.testing.assert_allclose(remote.state_dict()[key].numpy(), value.numpy(),
                                           rtol=1e-5, atol=1e-6, err_msg=key)
        return stage_stats(cluster, remote)
    finally:
        remote.close()


@pytest.mark.parametrize("grad", [True, False])
def test_hooks_that_only_look_run_ahead_and_see_what_one_process_shows(cluster, grad):
    stats = compare(cluster, f"look{grad}", grad=grad)
    # 6 hooks over 2 stages: each waits on its first call (and each stage on its first
    # forward, to learn that it leaves its buffers alone); later calls run ahead
    assert stats["hooks_ahead"] == 6 * 3
    assert stats["passes_again"] == 0
    # the last stage's output went to the client before its hooks' answers, in those 3
    assert stats["answers_ahead"] == 3


@pytest.mark.parametrize("switch, after", [("1", 1), ("3", 2), ("5", 0)])
def test_a_hook_that_starts_to_change_its_output_runs_the_forward_again(cluster, switch,
                                                                         after):
    # on its third call the hook doubles its module's output: the forward that ran ahead of
    # that answer runs again; the hooks after it never see the undoubled values
    stats = compare(cluster, f"switch{switch}", switch=switch)
    assert stats["passes_again"] == 1
    # 6 hooks run ahead in the second forward and the third, and again those after the
    # switch on its stage (``after``) when the third runs again; in the fourth the switch
    # waits for its answer (it changes things now), the 5 others run ahead
    assert stats["hooks_ahead"] == 6 + 6 + after + 5
    # the last stage's output goes to the client ahead of its hooks' answers in the second
    # forward, the third and the fourth; when the switch is there (module 3 or 5) that of
    # the third does not stand, and the third runs again, ahead of its hooks after the
    # switch (only module 3 has some)
    assert stats["answers_ahead"] == 3 + (switch == "3")


def test_a_stage_whose_forward_changes_its_buffers_never_runs_ahead(cluster):
    stats = compare(cluster, "norm", switch="4", norm=True)
    # batch norm (module 2, on stage 0) updates its running statistics: that stage waits
    # for every answer; on stage 1 (modules 3, 4, 5) 3 hooks run ahead in the second
    # forward, 3 in the third and 1 (module 5) when it runs again, 2 in the fourth
    assert stats["passes_again"] == 1
    assert stats["hooks_ahead"] == 3 + 3 + 1 + 2
    # in evaluation mode batch norm changes nothing: stage 0 runs ahead as well
    stats = compare(cluster, "norm_eval", switch="4", norm=True, train=False)
    assert stats["hooks_ahead"] == 9 + 3 * 3


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_an_error_of_a_hook_that_ran_ahead_reaches_the_caller_and_the_model_serves_on(
        cluster, kind):
    # the hook refuses its third call, which ran ahead (it only looked before); the hook
    # fired after it in the same pass never runs on that call, and the next call works
    remote = cluster.deploy(model(), stages=2, split_points=[3], name=f"raising{kind}")
    remote.eval()
    calls, seen = [], []

    def refuse_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("third call refused")

    if kind == "forward":
        remote[1].register_forward_hook(refuse_third)
        remote[3].register_forward_hook(lambda *args: seen.append(1))
    else:  # backward: stage 1 fires first, stage 0 after it
        remote[3].register_full_backward_hook(refuse_third)
        remote[0].register_full_backward_hook(lambda *args: seen.append(1))
    x = torch.randn(2, 4, requires_grad=True)

    def call():
        y = remote(x)
        if kind == "backward":
            y.sum().backward()
        return y.detach().numpy()

    try:
        call(), call()
        assert len(seen) == 2
        with pytest.raises(ValueError, match="third call refused"):
            call()
        assert len(seen) == 2  # the hook after the failing one never ran on that call
        want = model().eval()(x).detach().numpy()
        np.testing.assert_allclose(call(), want, rtol=1e-5, atol=1e-6)
        assert len(seen) == 3
    finally:
        remote.close()


def test_tensor_hooks_that_a_hook_ahead_puts_on_its_output_get_its_gradient(cluster):
    # the Grad-CAM pattern: a forward hook keeps the activation and hooks its gradient
    def gradcam(net):
        kept = {}

        def hook(module, args, output):
            kept.setdefault("acts", []).append(output.detach().numpy())
            output.register_hook(lambda g: kept.setdefault("grads", []).append(g.numpy()))

        net[3].register_forward_hook(hook)
        run(net, 4)
        return kept

    want = gradcam(model().eval())
    remote = cluster.deploy(model(), stages=2, split_points=[3], name="gradcam")
    remote.eval()
    try:
        got = gradcam(remote)
        # the forward hook runs ahead in forwards 2 to 4, and so does the tensor hook it put
        # on its output in backwards 2 to 4
        assert stage_stats(cluster, remote)["hooks_ahead"] == 3 + 3
    finally:
        remote.close()
    for key in ("acts", "grads"):
        assert len(got[key]) == len(want[key]) == 4
        for a, b in zip(want[key], got[key]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_a_forward_run_again_keeps_worker_captures_once(cluster):
    remote = cluster.deploy(model(), stages=2, split_points=[3], name="captures")
    remote.eval()
    try:
        Recorder(remote, switch="1")
        remote[0].register_forward_hook(worker_hooks.capture("ahead"))
        run(remote, 4, grad=False)
        assert stage_stats(cluster, remote)["passes_again"] == 1
        assert len(cluster.captured("ahead", clear=True)) == 4
    finally:
        remote.close()


def same_steps(cluster, local, remote, mine, theirs) -> None:
    """Three training steps of 2 micro-batches: every hook ran 6 times on the values one
    process shows, the gradients are one process's, and one pass ran again (the switch)."""
    for path in mine.seen:
        assert len(theirs.seen[path]) == len(mine.seen[path]) == 6, path
        for a, b in zip(mine.seen[path], theirs.seen[path]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=path)
    for name, p in local.named_parameters():
        np.testing.assert_allclose(remote.get_parameter(name).grad.numpy(),
                                   p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    stats = stage_stats(cluster, remote)
    assert stats["passes_again"] == 1 and stats["hooks_ahead"] > 0


def test_micro_batch_forwards_of_a_training_step_run_ahead_of_hooks_that_look(cluster):
    # chunks=2 under 1F1B: hooks fire once per micro-batch, with its rows, as when each
    # micro-batch runs through the model in one process; the hook on module 4 doubles its
    # output from its third call (the second step's first micro-batch) on
    def step(net, x, y, remote=False):
        if remote:
            net.train_step(x, y, nn.MSELoss())
            return
        for rows in (slice(0, 3), slice(3, 6)):
            (nn.MSELoss()(net(x[rows]), y[rows]) * 0.5).backward()

    local = model().eval()
    remote = cluster.deploy(model(), stages=2, split_points=[3], chunks=2, schedule="1f1b",
                            name="steps")
    remote.eval()
    try:
        mine, theirs = Recorder(local, "4"), Recorder(remote, "4")
        for i in range(3):
            torch.manual_seed(i)
            x, y = torch.randn(6, 4), torch.randn(6, 3)
            step(local, x, y)
            step(remote, x, y, remote=True)
        same_steps(cluster, local, remote, mine, theirs)
    finally:
        remote.close()


class BackwardRecorder:
    """Full backward hooks on every module and a tensor hook on the first weight: the
    gradients each saw, in order; the hook on ``switch`` doubles its grad_input from its
    ``after``-th call on (``"weight"``: the tensor hook doubles the weight's gradient)."""

    def __init__(self, net, switch: str | None = None, after: int = 2):
        self.seen: dict[str, list] = {}
        for path, module in net.named_modules():
            if path:
                module.register_full_backward_hook(self.hook(path, switch, after))
        net[0].weight.register_hook(self.tensor_hook(switch, after))

    def hook(self, path, switch, after):
        def record(module, grad_input, grad_output):
            self.seen.setdefault(path, []).append(grad_output[0].numpy().copy())
            if path == switch and len(self.seen[path]) > after:
                return tuple(None if g is None else g * 2 for g in grad_input)
            return None

        return record

    def tensor_hook(self, switch, after):
        def record(grad):
            self.seen.setdefault("weight", []).append(grad.numpy().copy())
            if switch == "weight" and len(self.seen["weight"]) > after:
                return grad * 2
            return None

        return record


def backwards(net, steps: int, accumulate: bool):
    """Input and weight gradients of ``steps`` backwards (the weights' .grad summed over
    them when ``accumulate``)."""
    got = []
    for step in range(steps):
        torch.manual_seed(200 + step)
        x = torch.randn(5, 4, requires_grad=True)
        net(x).square().sum().backward()
        got.append(x.grad.numpy())
        got += [p.grad.numpy().copy() for p in net.parameters()]
        if not accumulate:
            for p in net.parameters():
                p.grad = None
    return got


@pytest.mark.parametrize("switch, accumulate", [(None, False), ("1", False), ("4", True),
                                                ("weight", True)])
def test_backward_hooks_that_only_look_run_ahead_and_a_change_runs_the_backward_again(
        cluster, switch, accumulate):
    local = model().eval()
    remote = cluster.deploy(model(), stages=2, split_points=[3], name=f"back{switch}")
    remote.eval()
    try:
        mine, theirs = BackwardRecorder(local, switch), BackwardRecorder(remote, switch)
        want, got = backwards(local, 4, accumulate), backwards(remote, 4, accumulate)
        for i, (a, b) in enumerate(zip(want, got)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=str(i))
        for path in mine.seen:  # every hook ran as often, on the same gradients
            assert len(theirs.seen[path]) == len(mine.seen[path]) == 4, path
            for a, b in zip(mine.seen[path], theirs.seen[path]):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=path)
        stats = stage_stats(cluster, remote)
        assert stats["passes_again"] == (0 if switch is None else 1)
        # 7 hooks: each waits in the first backward (which learns that a backward leaves the
        # stages' buffers alone), runs ahead in the next 3 (the switch only up to its change)
        assert stats["hooks_ahead"] >= 6 * 3
        # stage 0's input gradient goes to the client ahead of its hooks' answers in the
        # last 3 backwards, and again when the third runs again after a switch on stage 0
        # (module 1, or the weight): hooks of stage 0 fire after the switch
        assert stats["answers_ahead"] == 3 + (switch in ("1", "weight"))
    finally:
        remote.close()


class Doubling(nn.Module):
    """A block whose forward puts a tensor hook of its own on its first layer's output."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 6)
        self.outer = nn.Linear(6, 6)

    def forward(self, x):
        h = self.inner(x)
        h.register_hook(lambda g: g * 2)
        return self.outer(torch.tanh(h))


def test_a_tensor_hook_the_model_puts_after_a_hook_ahead_fires_after_the_clients(cluster):
    # the client's forward hook on `inner` hooks its output's gradient; in one process that
    # tensor hook comes before the block's own (it is registered first), and sees the
    # gradient before the block doubles it. Run ahead, the client's hook reaches the tensor
    # after the block's: it takes the place it would have had. A hook after it (on `outer`)
    # runs once per forward
    def grads_seen(net):
        seen, outer = [], []

        def hook(module, args, output):
            output.register_hook(lambda g: seen.append(g.numpy().copy()))

        net[0].inner.register_forward_hook(hook)
        net[0].outer.register_forward_hook(lambda m, args, out: outer.append(1))
        net.eval()
        for step in range(4):
            torch.manual_seed(step)
            net(torch.randn(5, 4)).square().sum().backward()
        assert len(outer) == 4
        return seen

    def build():
        torch.manual_seed(0)
        return nn.Sequential(Doubling(), nn.Linear(6, 3))

    want = grads_seen(build())
    remote = cluster.deploy(build(), stages=2, split_points=[1], name="doubling")
    try:
        got = grads_seen(remote)
        stats = stage_stats(cluster, remote)
        assert stats["passes_again"] == 0 and stats["hooks_ahead"] > 0
    finally:
        remote.close()
    assert len(got) == len(want) == 4
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_with_hooks_ahead_false_every_firing_waits_and_sees_the_same(cluster):
    local = model().eval()
    remote = cluster.deploy(model(), stages=2, split_points=[3], name="waiting",
                            hooks_ahead=False)
    remote.eval()
    try:
        mine, theirs = Recorder(local, "4"), Recorder(remote, "4")
        mine_back, theirs_back = BackwardRecorder(local, "1"), BackwardRecorder(remote, "1")
        for a, b in zip(backwards(local, 4, False), backwards(remote, 4, False)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        for want, got in ((mine, theirs), (mine_back, theirs_back)):
            for path in want.seen:
                assert len(got.seen[path]) == len(want.seen[path]) == 4, path
                for a, b in zip(want.seen[path], got.seen[path]):
                    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=path)
        assert stage_stats(cluster, remote) == {"forwards": 8, "hooks_ahead": 0,
                                                "passes_again": 0, "answers_ahead": 0}
    finally:
        remote.close()
    with pytest.raises(TypeError, match="hooks_ahead must be True or False"):
        cluster.deploy(model(), stages=2, hooks_ahead="no")


def test_a_tensor_an_earlier_event_sent_crosses_once_unless_changed_in_place_since(cluster):
    # a layer's input is the output the layer before it gave its hook: it crosses once per
    # round; ReLU(inplace=True) changes that output in place before its own hooks see it,
    # so there it crosses again, changed
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 6),
                             nn.Tanh(), nn.Linear(6, 3))

    def seen(net):
        got = []
        for path, module in net.named_modules():
            if path:
                module.register_forward_pre_hook(
                    lambda m, args, path=path: got.append((path, "pre", args[0].numpy().copy())))
                module.register_forward_hook(
                    lambda m, args, out, path=path: got.append(
                        (path, "in", args[0].numpy().copy(), out.numpy().copy())))
        run(net, 3, grad=False)
        return got

    want = seen(build().eval())
    remote = cluster.deploy(build(), stages=1, name="again")
    remote.eval()
    try:
        got = seen(remote)
        assert stage_stats(cluster, remote)["hooks_ahead"] == 10 * 2
        assert deployment_of(remote)._hub._rounds == {}  # what the client kept for them went with the call
    finally:
        remote.close()
    assert [w[:2] for w in want] == [g[:2] for g in got]
    for w, g in zip(want, got):
        for a, b in zip(w[2:], g[2:]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=str(w[:2]))


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # module 0, as in torch
@pytest.mark.parametrize("switch", ["1", "weight"])
def test_micro_batch_backwards_of_a_training_step_run_ahead_of_hooks_that_look(cluster,
                                                                              switch):
    def step(net, x, y):
        if hasattr(net, "train_step"):
            net.train_step(x, y, nn.MSELoss())
            return
        for rows in (slice(0, 3), slice(3, 6)):
            (nn.MSELoss()(net(x[rows]), y[rows]) * 0.5).backward()

    local = model().eval()
    remote = cluster.deploy(model(), stages=2, split_points=[3], chunks=2, schedule="1f1b",
                            name=f"backsteps{switch}")
    remote.eval()
    try:
        mine, theirs = BackwardRecorder(local, switch), BackwardRecorder(remote, switch)
        for i in range(3):
            torch.manual_seed(i)
            x, y = torch.randn(6, 4), torch.randn(6, 3)
            step(local, x, y)
            step(remote, x, y)
        same_steps(cluster, local, remote, mine, theirs)
    finally:
        remote.close()


@pytest.mark.parametrize("grad", [True, False])
def test_a_waited_hook_after_a_change_ahead_is_answered_stale_and_runs_once(cluster, grad):
    # the hook on module 2 changes its output on every call, so it is always waited for;
    # the one on module 1 only looks until its third call, when it doubles its output: its
    # event ran ahead, so module 2's event of that forward reaches the client after the
    # change, is answered stale (its hook does not run), and the forward runs again
    def hooked(net):
        seen = Recorder(net, switch="1")
        calls = []

        def shift(module, args, output):
            calls.append(output.detach().numpy().copy())
            return output + 1.0

        net[2].register_forward_hook(shift)
        return seen, calls

    local = model().eval()
    remote = cluster.deploy(model(), stages=2, split_points=[3], name=f"stale{grad}")
    remote.eval()
    try:
        (mine, mine_calls), (theirs, their_calls) = hooked(local), hooked(remote)
        want, got = run(local, 4, grad), run(remote, 4, grad)
        for a, b in zip(want[0] + want[1], got[0] + got[1]):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert len(their_calls) == len(mine_calls) == 4
        for a, b in zip(mine_calls, their_calls):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        for path in mine.seen:
            assert len(theirs.seen[path]) == len(mine.seen[path]) == 4, path
        assert stage_stats(cluster, remote)["passes_again"] == 1
    finally:
        remote.close()


def test_a_forward_that_fails_after_its_output_went_ahead_keeps_no_graph(cluster):
    # the last stage's output leaves ahead of its hook's answer (keeping its graph for a
    # backward); the answer is an error, so the client never uses that output, and the
    # graph goes with the failed forward
    remote = cluster.deploy(model(), stages=1, name="graph_dropped")
    remote.eval()
    calls = []

    def refuse_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("third call refused")

    remote[4].register_forward_hook(refuse_third)
    x = torch.randn(2, 4, requires_grad=True)

    def graphs() -> int:
        return sum(client["contexts"] for status in worker_statuses(cluster).values()
                   for stage, stats in status["stage_stats"].items()
                   if stage.endswith(f" of {deployment_of(remote)._model_id}")
                   for client in stats["clients"].values())

    try:
        kept = [remote(x), remote(x)]  # their graphs stay while the outputs live
        with pytest.raises(ValueError, match="third call refused"):
            remote(x)
        assert graphs() == 2
        assert stage_stats(cluster, remote)["answers_ahead"] == 2
        kept.append(remote(x))
        assert graphs() == 3
        kept[-1].sum().backward()  # the output that went ahead has its graph
        np.testing.assert_allclose(
            x.grad.numpy(), torch.autograd.grad(model().eval()(x).sum(), x)[0].numpy(),
            rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def spy_on_requests(hub) -> list:
    """The kinds of the requests ``hub`` sends from now on, in order."""
    asked, request_all = [], hub.request_all

    def spy(calls, kind, **options):
        asked.append(kind)
        return request_all(calls, kind, **options)

    hub.request_all = spy
    return asked


def test_a_client_that_closes_after_a_call_answered_ahead_leaves_nothing_waiting(tmp_path):
    # the call returned before the worker took its hooks' answers; closing the model waits
    # for the worker to take them (a request behind them on the socket), so the worker
    # never sees the client go with a pass still waiting, which it would log as a client
    # gone mid-call
    from disthook.distributed import local_cluster

    log = tmp_path / "workers.log"
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(64, 64) for _ in range(24)])
    with open(log, "w") as stderr, local_cluster(workers=1, stderr=stderr) as cluster:
        for round_ in range(4):
            owner = cluster.deploy(net, stages=1, name=f"closing{round_}")
            remote = cluster.attach(f"closing{round_}")  # closing it leaves the stage
            for layer in remote:  # many answers to take after the result went
                layer.register_forward_hook(lambda *args: None)
            with torch.no_grad():
                for _ in range(3):
                    remote(torch.randn(32, 64))
            asked = spy_on_requests(deployment_of(remote)._hub)
            remote.close()
            # get_state: closing brings the model's values back here
            assert asked == ["get_state", "list_hooks"]
            assert stage_stats(cluster, owner)["answers_ahead"] == 2
            owner.close()
    assert "went away" not in log.read_text()
