"""Hook patterns of attribution toolkits on a deployed model, against one process.

A hook that removes another hook of the module it fires on: in one process the call that
fired it fires every hook it took as it started, the removed one too, and later calls no
longer do; one that removes a hook further on (a later module, a backward hook) stops that
one at once. Deployed, the removed hook's firing in that call must run its function here,
not fail as a hook the client no longer knows.

``torch.autograd.grad(score, kept)`` where ``kept`` is a tensor a forward hook was given
and put a tensor hook on (the Grad-CAM hook that saves the activation and hooks its
gradient, with an attribution that then differentiates to the saved activation): in one
process the gradient comes back, the tensor hook fires once and its change counts. Deployed,
the kept tensor was not reachable ("appears to not have been used in the graph")."""
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def made():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def removals(model):
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    log, handles = [], {}

    def killer(module, args, out):
        log.append("killer")
        handles["victim"].remove()
        handles["later"].remove()

    def once(module, args, out):
        log.append("once")
        handles["once"].remove()

    handles["killer"] = model[0].register_forward_hook(killer)
    handles["victim"] = model[0].register_forward_hook(lambda m, a, o: log.append("victim"))
    handles["once"] = model[0].register_forward_hook(once)
    handles["later"] = model[2].register_forward_hook(lambda m, a, o: log.append("later"))
    model(x)
    model(x)
    handles["killer"].remove()

    def backward_once(module, grad_input, grad_output):
        log.append("backward_once")
        handles["backward_once"].remove()

    handles["backward_once"] = model[2].register_full_backward_hook(backward_once)
    model(x).sum().backward()
    model(x).sum().backward()
    return log


def test_a_hook_removed_by_a_hook_fires_in_the_call_that_took_it(cluster):
    expected = removals(made())
    assert expected == ["killer", "victim", "once", "killer", "backward_once"]
    remote = cluster.deploy(made(), stages=2)
    try:
        assert removals(remote) == expected
    finally:
        remote.close()


def later_removal(model):
    """A hook that only looked twice (so its firings run ahead of their answers) removes,
    on its third call, a hook of the next module on its stage."""
    x = torch.ones(2, 3)
    log, handles, calls = [], {}, [0]

    def remover(module, args, out):
        calls[0] += 1
        log.append(("remover", calls[0]))
        if calls[0] == 3:
            handles["next"].remove()

    handles["remover"] = model[0].register_forward_hook(remover)
    handles["next"] = model[1].register_forward_hook(lambda m, a, o: log.append("next"))
    model[2].register_forward_hook(lambda m, a, o: log.append("other stage"))
    for _ in range(4):
        model(x)
    return log


def later_registration(model):
    """A hook that registers a hook on the next module of its stage, on its first call
    (waited for) and on its third (after it only looked: run ahead): torch fires the new
    hook in that same call."""
    x = torch.ones(2, 3)
    log, calls = [], [0]

    def adder(module, args, out):
        calls[0] += 1
        log.append(("adder", calls[0]))
        if calls[0] in (1, 3):
            model[1].register_forward_hook(lambda m, a, o, k=calls[0]: log.append(("new", k)))

    model[0].register_forward_hook(adder)
    for _ in range(4):
        model(x)
    return log


def test_a_hook_registered_by_a_hook_that_ran_ahead_fires_in_that_call(cluster):
    expected = later_registration(four())
    assert expected[4:7] == [("adder", 3), ("new", 1), ("new", 3)]
    remote = cluster.deploy(four(), stages=2)
    try:
        assert later_registration(remote) == expected
    finally:
        remote.close()


def four():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(3, 3) for _ in range(4)])


def test_a_hook_removed_by_a_hook_that_ran_ahead_fires_no_more(cluster):
    expected = later_removal(four())
    assert expected.count("next") == 2
    remote = cluster.deploy(four(), stages=2)
    try:
        assert next(children for _, _, children in remote.workers()) == ["0", "1"]
        assert later_removal(remote) == expected
    finally:
        remote.close()


def tanh_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))


def attribution(model):
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    kept, log = {}, []

    def save(module, args, out):
        kept["act"] = out
        out.register_hook(lambda g: log.append(round(g.sum().item(), 5)))
        out.register_hook(lambda g: g * 2)

    model[1].register_forward_hook(save)
    out = model(x)
    (g,) = torch.autograd.grad(out[:, 2].sum(), kept["act"], retain_graph=True)
    out.sum().backward()
    return [g.tolist(), log, model[0].weight.grad.tolist()]


def test_autograd_grad_to_a_kept_tensor_that_a_hook_hooked(cluster):
    expected = attribution(tanh_net())
    assert len(expected[1]) == 2  # each backward fired the hook once
    remote = cluster.deploy(tanh_net(), stages=2)
    try:
        got = attribution(remote)
    finally:
        remote.close()
    assert got[1] == pytest.approx(expected[1], abs=1e-4)
    for g, e in zip((got[0], got[2]), (expected[0], expected[2])):
        assert torch.allclose(torch.tensor(g), torch.tensor(e), atol=1e-6)


def node_hook_in_forward_hook(model, register):
    """A forward hook that hooks its output's ``grad_fn`` (doubling what flows into it)."""
    log = []

    def hook(module, args, out):
        register(out.grad_fn, log)

    model[0].register_forward_hook(hook)
    model(torch.ones(2, 4)).sum().backward()
    return log, model[0].weight.grad


@pytest.mark.parametrize("register", [
    lambda node, log: node.register_prehook(lambda go: (log.append("pre"), (go[0] * 2,))[1]),
    lambda node, log: node.register_hook(lambda gi, go: log.append(("post", len(gi)))),
], ids=["prehook", "hook"])
def test_a_node_hook_on_a_tensor_a_hook_was_given_is_refused(cluster, register):
    log, _ = node_hook_in_forward_hook(tanh_net(), register)
    assert log in (["pre"], [("post", 3)])  # in one process: AddmmBackward0, three inputs
    remote = cluster.deploy(tanh_net(), stages=2)
    try:  # deployed the node ran on the worker: it never fired, or saw one input
        with pytest.raises(NotImplementedError, match="AddmmBackward0 ran on the model's "
                                                      "worker.*t.register_hook"):
            node_hook_in_forward_hook(remote, register)
    finally:
        remote.close()


def halved_then_removed(model, deploy):
    """A tensor hook on a weight registered before the deploy (a composite applied to the
    local model), removed through its handle after."""
    handle = model[2].weight.register_hook(lambda g: g * 0.5)
    model = deploy(model)
    x = torch.ones(2, 4)
    model(x).sum().backward()
    first = model[2].weight.grad.clone()
    handle.remove()
    model.zero_grad()
    model(x).sum().backward()
    return first, model[2].weight.grad.clone()


def test_a_weight_hook_from_before_the_deploy_goes_with_its_handle(cluster):
    expected = halved_then_removed(tanh_net(), lambda m: m)
    assert torch.allclose(expected[0] * 2, expected[1])
    deployed = []
    try:
        got = halved_then_removed(tanh_net(), lambda m: deployed.append(
            cluster.deploy(m, stages=2)) or deployed[0])
    finally:
        for remote in deployed:
            remote.close()
    for g, e in zip(got, expected, strict=True):
        assert torch.allclose(g, e, atol=1e-6)


class Abort(Exception):
    """A tool's own exception raised in a forward hook (baukit's StopForward)."""


def always_call_after_a_failing_hook(model):
    """A forward hook that raises on the first call (its answer waited for) and on the
    fourth (after it only looked: its firing runs ahead), with always_call hooks on its
    module, which torch runs as the error unwinds, and on a later module, never reached."""
    log, calls = [], [0]

    def fails(module, args, out):
        calls[0] += 1
        log.append(("fails", calls[0]))
        if calls[0] in (1, 4):
            raise Abort(f"call {calls[0]}")

    model[0].register_forward_hook(fails)
    model[0].register_forward_hook(lambda m, a, o: log.append("always 0"), always_call=True)
    model[1].register_forward_hook(lambda m, a, o: log.append("always 1"), always_call=True)
    for _ in range(5):
        try:
            model(torch.ones(2, 3))
        except Abort as exc:
            log.append(str(exc))
    return log


def test_always_call_hooks_fire_when_a_hook_before_them_raises(cluster):
    expected = always_call_after_a_failing_hook(four())
    assert expected[:3] == [("fails", 1), "always 0", "call 1"]
    remote = cluster.deploy(four(), stages=2)
    try:
        assert always_call_after_a_failing_hook(remote) == expected
    finally:
        remote.close()


def eval_from_a_hook(model):
    """A hook on the first layer that switches the model to eval mode on its third call
    (after it only looked: its firing runs ahead): the dropout after it in that call runs
    in eval mode, as in one process."""
    calls = [0]

    def to_eval(module, args, out):
        calls[0] += 1
        if calls[0] == 3:
            model.eval()

    model.train()
    model[0].register_forward_hook(to_eval)
    x = torch.ones(2, 3)
    third = [model(x) for _ in range(3)][-1]
    return torch.allclose(third, model(x))  # the fourth call: in eval mode


def with_dropout():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.Linear(8, 3), nn.Linear(3, 3))


def test_eval_mode_set_by_a_hook_that_ran_ahead_holds_for_its_call(cluster):
    assert eval_from_a_hook(with_dropout())
    remote = cluster.deploy(with_dropout(), stages=2)
    try:
        assert next(children for _, _, children in remote.workers()) == ["0", "1"]
        assert eval_from_a_hook(remote)
    finally:
        remote.close()


def retained_on_a_frozen_model(model):
    """baukit's Trace(retain_grad=True) on a frozen model: the hook makes the layer's output
    (which needs no grad) a leaf that requires grad, retains it, hooks it and returns a
    clone; the backward of the model's output gives that leaf its .grad."""
    for p in model.parameters():
        p.requires_grad_(False)
    kept, fired = {}, []

    def retain(module, args, out):
        if not out.requires_grad:
            out.requires_grad = True
        out.retain_grad()
        out.register_hook(lambda g: fired.append(1) or g * 2)  # fires here, once
        kept["out"] = out
        return out.clone()

    model[1].register_forward_hook(retain)
    y = model(torch.linspace(-1, 1, 8).reshape(2, 4))
    y.pow(2).sum().backward()
    return y.requires_grad and fired == [1], kept["out"].grad


def test_retain_grad_on_a_frozen_models_layer_output(cluster):
    expected = retained_on_a_frozen_model(tanh_net())
    assert expected[0] and expected[1] is not None
    remote = cluster.deploy(tanh_net(), stages=2)
    try:
        got = retained_on_a_frozen_model(remote)
    finally:
        remote.close()
    assert got[0]
    assert torch.allclose(got[1], expected[1], atol=1e-6)


def hooked_then_changed(model):
    """A forward hook that hooks its output's gradient and then changes the output in place:
    in one process the hook belongs to the value before the change (it sees the gradient
    that passed the change)."""
    def hook(module, args, out):
        out.register_hook(lambda g: g * 2)
        out[:, 0] = 0.0

    model[0].register_forward_hook(hook)
    model(torch.ones(2, 4)).sum().backward()
    return model[0].weight.grad


def test_a_tensor_hook_before_an_in_place_change_in_one_hook_is_refused(cluster):
    assert hooked_then_changed(tanh_net())[0].abs().sum() == 0  # the change cut row 0
    remote = cluster.deploy(tanh_net(), stages=2)
    try:
        with pytest.raises(NotImplementedError, match="register the tensor hook after the "
                                                      "in-place change"):
            hooked_then_changed(remote)
    finally:
        remote.close()


class TwoParts(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 5), nn.Linear(5, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def output_hook_beside_a_backward_pre_hook(model):
    """Part ``a``'s full backward pre-hook shifts its grad_output; a forward hook of ``a``
    doubles its output's gradient. In one process the pre-hook runs first (its wrapper
    comes after the forward hooks), then the tensor hook: (g - 0.5) * 2."""
    model.a.register_full_backward_pre_hook(lambda m, go: (go[0] - 0.5,))

    def double_its_gradient(module, args, out):
        out.register_hook(lambda g: g * 2)

    model.a.register_forward_hook(double_its_gradient)
    model(torch.linspace(-1, 1, 8).reshape(2, 4)).sum().backward()
    return model.a.weight.grad


def test_a_parts_output_hook_and_backward_pre_hook_in_one_process_order(cluster):
    expected = output_hook_beside_a_backward_pre_hook(TwoParts())
    remote = cluster.deploy(TwoParts(), placement={"a": 0, "b": 1})
    try:
        got = output_hook_beside_a_backward_pre_hook(remote)
    finally:
        remote.close()
    assert torch.allclose(got, expected, atol=1e-6)


def global_hook_removing_itself(model):
    """A global forward hook that removes itself on its first firing: the modules the call
    reaches afterwards no longer fire it, as in one process."""
    log, box = [], {}

    def once(module, args, out):
        log.append(type(module).__name__)
        box["handle"].remove()

    box["handle"] = nn.modules.module.register_module_forward_hook(once)
    try:
        model(torch.ones(2, 3))
        model(torch.ones(2, 3))
    finally:
        box["handle"].remove()
    return log


def test_a_global_hook_that_removes_itself_fires_once(cluster):
    assert global_hook_removing_itself(four()) == ["Linear"]
    remote = cluster.deploy(four(), stages=2)
    try:
        assert global_hook_removing_itself(remote) == ["Linear"]
    finally:
        remote.close()
