"""What the differential hook fuzzer (test_f1_hook_fuzz_deployed.py, seeds 900-999 and
1000-1199) found on deployed models, each as the small program it came down to.

A deployed model, or a placed part, that returns its input as it is (``nn.Identity``,
seed 978): in one process the call's output is the program's own tensor, so a tensor hook
put on the output is put on the input (it runs after the input's earlier hooks, and a hook
of the input that raises stops it), ``model(x) is x``, and under ``no_grad`` the output
still requires grad. Deployed, the output was a new tensor standing for the worker's copy
of the input: its hooks ran first, and under ``no_grad`` it required no grad."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Around(nn.Module):
    """A forward on the client around two placed parts: a Linear, then an Identity that
    gets the Linear's output (a kept value of the first part's worker), then the Identity
    again on the program's own input; returns the three."""

    def __init__(self):
        super().__init__()
        self.lin, self.same = nn.Linear(3, 3), nn.Identity()

    def forward(self, x):
        h = self.lin(x)
        return h, self.same(h), self.same(x)


def _x():
    return torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]], requires_grad=True)


@pytest.mark.parametrize("make", [lambda: nn.Sequential(nn.Identity()), Around],
                         ids=["chain", "parts"])
@pytest.mark.parametrize("mode", ["grad", "no_grad"])
def test_a_model_that_returns_its_input_returns_the_program_s_tensor(cluster, make, mode):
    def run(model):
        x = _x()
        with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
            out = model(x)
        if isinstance(out, tuple):
            h, same_h, same_x = out
            return [same_h is h, same_x is x, same_x.requires_grad, same_h.requires_grad]
        return [out is x, out.requires_grad]

    remote = cluster.deploy(make(), stages=1)
    try:
        got = run(remote)
    finally:
        remote.close()
    assert got == run(make())
    assert got[0] is True


def test_a_hook_on_that_output_is_a_hook_on_the_input(cluster):
    """The input's hook, registered first, runs before the output's (seed 978: the input's
    hook raised there, and the output's hook must not have run)."""
    def run(model):
        log = []
        x = _x()
        x.register_hook(lambda g: log.append("x"))
        model[0].register_forward_hook(lambda m, args, out: log.append("forward"))
        out = model(x)
        out.register_hook(lambda g: log.append("out"))
        (out * 2).sum().backward()
        return log + [x.grad.tolist()]

    model = nn.Sequential(nn.Identity())
    remote = cluster.deploy(nn.Sequential(nn.Identity()), stages=1)
    try:
        got = run(remote)
    finally:
        remote.close()
    assert got == run(model)
    assert got[:3] == ["forward", "x", "out"]


def test_a_changed_or_hooked_input_is_not_the_program_s_tensor(cluster):
    """A part whose forward hook changed its output (the input) is no identity: the call
    then returns the worker's tensor, as before (the hook's change of the program's own
    argument is refused, as docs/hooks.md says)."""
    remote = cluster.deploy(nn.Sequential(nn.Identity()), stages=1)
    try:
        remote[0].register_forward_hook(lambda m, args, out: out * 2)
        x = _x()
        out = remote(x)
        assert out is not x
        assert out.tolist() == (x * 2).tolist()
    finally:
        remote.close()


# ---- a gradient that is one tensor in one process (seeds 986, 1058) ---------------------
#
# A backward hook on the worker that changes its gradient in place: in one process that
# gradient may be the program's own tensor, which its graph hands to other places too (the
# add of a residual, ``out + model(out)``, passes one gradient tensor to both operands; a
# part's two outputs added, ``a + b``, get one tensor for both), and they all see the
# change. Deployed, only the worker's copy changed: the other branch, and the part's other
# output, went on with the old value.

def _negate_grad_output(module, grad_output):
    grad_output[0].mul_(-1)


def make_chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))


@pytest.mark.parametrize("stages", [1, 2])
def test_a_hook_s_in_place_change_of_a_shared_gradient_reaches_the_other_branch(
        cluster, stages):
    def run(model):
        log = []
        model[2].register_full_backward_pre_hook(
            lambda m, go: log.append(go[0].tolist()) or _negate_grad_output(m, go))
        x = _x()
        out = model(x)
        out = out + model(out)  # the residual: one gradient tensor for both operands
        (out * torch.arange(1., 7.).reshape(2, 3)).sum().backward()
        return _lists([log, x.grad, [p.grad for p in model.parameters()]])

    remote = cluster.deploy(make_chain(), stages=stages)
    try:
        got = run(remote)
    finally:
        remote.close()
    want = run(make_chain())
    assert len(got[0]) == 2
    np.testing.assert_allclose(_flat(got), _flat(want), rtol=1e-5, atol=1e-6)


def _flat(value) -> np.ndarray:
    """Every number in nested lists, in order."""
    if isinstance(value, (list, tuple)):
        return np.concatenate([_flat(v) for v in value]) if value else np.zeros(0)
    return np.ravel(np.asarray(value, dtype=np.float64))


class Pair(nn.Module):
    """A part with two outputs, ``(h, h.sigmoid())``, that the client's forward adds."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        return h, h.sigmoid()


class Added(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.pair = nn.Linear(3, 3), Pair()

    def forward(self, x):
        a, b = self.pair(self.first(x))
        return a + b


def make_added():
    torch.manual_seed(0)
    return Added()


@pytest.mark.parametrize("how", ["backward", "grad"])
def test_a_hook_s_in_place_change_of_one_output_s_gradient_is_the_other_s(cluster, how):
    """The two outputs' gradients are one tensor in one process: the hook's change of
    the first is a change of the second (seed 1058, under autograd.grad)."""
    def run(model):
        log = []
        model.pair.register_full_backward_pre_hook(
            lambda m, go: log.append([g.tolist() for g in go]) or _negate_grad_output(m, go))
        x = _x()
        loss = (model(x) * torch.arange(1., 7.).reshape(2, 3)).sum()
        params = list(model.parameters())
        if how == "grad":
            return log, torch.autograd.grad(loss, params), log
        loss.backward()
        return log, x.grad, [p.grad for p in params]

    got, want = deployed_run(cluster, make_added, run)
    np.testing.assert_allclose(_flat(_lists(got)), _flat(_lists(want)), rtol=1e-5, atol=1e-6)


def _lists(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


# ---- the state a backward leaves where a hook raised (seeds 922, 984, 1029, 1056) --------
#
# One process runs the nodes of the whole program's backward in one order, a leaf's
# gradient (its hooks, its .grad) as soon as it is complete; a worker runs its part's or
# stages' backward whole. So where a hook raises, one process may have stopped before some
# of the workers' parameters got their gradient (a hook on the program's input that raises
# after the workers ran: seeds 922, 1029), or after the program's input got its own (a
# hook on the workers that raises before the input's gradient came back: 984, 1056). Which
# it is depends on that order, which the workers do not share: the program is warned, at
# the error, to zero the gradients before going on; a backward that does not fail is not.

class HookError(Exception):
    pass


def _raise(*_):
    raise HookError("the hook raised")


@pytest.mark.parametrize("where", ["input", "weight"])
def test_a_hook_that_raises_in_a_deployed_backward_warns_of_the_state_it_leaves(
        cluster, where):
    remote = cluster.deploy(make_chain(), stages=2)
    try:
        x = _x()
        (remote(x) * 2).sum().backward()  # (no error, no warning)
        target = x if where == "input" else remote[0].weight
        handle = target.register_hook(_raise)
        with pytest.warns(RuntimeWarning, match="zero the gradients before going on"), \
                pytest.raises(HookError):
            (remote(x) * 2).sum().backward()
        handle.remove()
    finally:
        remote.close()


def test_a_backward_that_does_not_fail_does_not_warn(cluster):
    import warnings

    remote = cluster.deploy(make_chain(), stages=2)
    try:
        x = _x()
        x.register_hook(lambda g: None)
        remote[0].weight.register_hook(lambda g: None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (remote(x) * 2).sum().backward()
    finally:
        remote.close()


# ---- a parameter's hook that fires once per call, said at its first firing (1112, 1118) ---

@pytest.mark.parametrize("how", ["grad", "inputs"])
def test_a_hook_fired_apart_is_said_at_its_first_firing(cluster, how):
    """Under autograd.grad or backward(inputs=) naming a parameter that two calls use, its
    hook fires once per call with that call's part (one process: once, with the sum). The
    warning came at the second firing, which a hook that removes itself (or raises) at
    its first never reaches."""
    remote = cluster.deploy(make_chain(), stages=2)
    try:
        weight = remote[0].weight
        handle = None

        def once(g):
            handle.remove()

        handle = weight.register_hook(once)
        x = _x()
        out = remote(x)
        loss = (out + remote(out)).sum()
        def run():
            if how == "grad":
                torch.autograd.grad(loss, [weight])
            else:
                loss.backward(inputs=[weight])

        with pytest.warns(RuntimeWarning, match="fires once for each call of the model in "
                                                "this backward"):
            run()
    finally:
        remote.close()


def test_a_chain_called_inside_checkpoint_is_refused(cluster):
    """A chain of stages inside torch.utils.checkpoint (seeds 1111, 1119, 1142, 1170 with
    the extras): the stages kept their saved tensors and never ran again in the backward,
    where one process recomputes the forward there, its forward hooks firing again and its
    buffers moving again; refused at the call, saying what to do."""
    remote = cluster.deploy(make_chain(), stages=2)
    try:
        fired = []
        remote[0].register_forward_hook(lambda m, args, out: fired.append(1))
        with pytest.raises(NotImplementedError, match="called inside torch.utils.checkpoint"):
            torch.utils.checkpoint.checkpoint(remote, _x(), use_reentrant=False)
        with torch.no_grad():  # (nothing saved, nothing to recompute: as before)
            torch.utils.checkpoint.checkpoint(remote, _x(), use_reentrant=False)
    finally:
        remote.close()


class Squashed(nn.Module):
    """A forward on the client around one placed part whose last op (tanh) saves its
    output."""

    def __init__(self):
        super().__init__()
        self.part = nn.Sequential(nn.Linear(3, 3), nn.Tanh())

    def forward(self, x):
        return self.part(x)


def make_squashed():
    torch.manual_seed(0)
    return Squashed()


def test_a_part_called_again_inside_checkpoint_is_answered_in_its_own_form(cluster):
    """A part's call whose answer's form the client knew from an earlier call with the same
    shapes goes on without the answer; inside checkpoint the worker's output is no saved
    output, the form differs, and the program got "the worker's answer differs" (seed
    1069 with the extras): a call inside checkpoint is a call of its own kind."""
    def run(model):
        grads = []
        for checkpointed in (False, False, True, True):
            x = _x()
            out = (torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)
                   if checkpointed else model(x))
            out.sum().backward()
            grads.append(x.grad.tolist())
        return grads

    got, want = deployed_run(cluster, make_squashed, run, stages=1)
    np.testing.assert_allclose(_flat(got), _flat(want), rtol=1e-5, atol=1e-6)


def test_a_hook_s_result_made_in_inference_mode_is_refused_where_a_graph_records(cluster):
    """A forward pre-hook whose new input was made in inference_mode (seed 1196 with the
    extras): one process's Linear refuses to save it for backward; deployed it reached the
    worker as a plain tensor and the call went through. Refused at the hook's answer; under
    no_grad (nothing saved) it goes through, as in one process."""
    def hook(module, args):
        with torch.inference_mode():
            return (args[0] * -1,)

    local = make_squashed()
    local.part.register_forward_pre_hook(hook)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        local(_x())
    with torch.no_grad():
        want = local(_x()).tolist()
    remote = cluster.deploy(make_squashed(), stages=1)
    try:
        remote.part.register_forward_pre_hook(hook)
        with pytest.raises(NotImplementedError, match="made in inference_mode"):
            remote(_x())
        with torch.no_grad():
            np.testing.assert_allclose(remote(_x()).tolist(), want, rtol=1e-6)
    finally:
        remote.close()


def test_two_parts_inside_one_checkpoint_warn_that_their_hooks_refire_apart(cluster):
    """One process reruns a checkpointed function whole when the backward first needs what
    it saved; placed parts inside it are each recomputed on their worker in their own
    backward, so their forward hooks fire again in another order (seeds 1130, 1132, 1139
    with the extras; the values are one process's). Said at the second part's call; one
    part per checkpoint is not."""
    import warnings

    remote = cluster.deploy(make_added(), stages=2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            h = torch.utils.checkpoint.checkpoint(remote.first, _x(), use_reentrant=False)
            out = torch.utils.checkpoint.checkpoint(remote.pair, h, use_reentrant=False)
            (out[0] + out[1]).sum().backward()
        with pytest.warns(RuntimeWarning, match="'first' and 'pair' of a deployed model are "
                                                "called inside one torch.utils.checkpoint"):
            out = torch.utils.checkpoint.checkpoint(remote, _x(), use_reentrant=False)
        out.sum().backward()
    finally:
        remote.close()
