"""What the differential hook fuzzer's sixth round left on deployed models (its seeds named
below), each as the small program it came down to.

A legacy ``register_backward_hook`` on a part that returns its input as it came (seed 1568:
an ``nn.Identity`` whose input is another part's output): in one process the hook sits on
the node of the op that made the input (``TanhBackward``) and sees that node's grad_input.
The worker put it on the node standing for the input it received, so the hook saw the
gradient unchanged (grad_input == grad_output), silently. That op ran elsewhere; the worker
now refuses the hook there, at the forward, with NotImplementedError.

``torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)`` of a deployed model whose
forward runs here (seeds 1364 and 1528 with F1_FUZZ_DEPLOYED_EXTRAS=1): one process reruns
the whole model in the backward, so the root's forward pre-hook fires again; deployed, only
the placed part is recomputed, on its worker, and the root's hook fired once, silently. The
checkpoint call now warns, naming the parts that are recomputed and what is not run again;
checkpointing the part itself still warns of nothing (it fires as in one process).

A part that changes its argument in place in its own forward (``x.mul_(-1)``), where that
argument is the program's tensor (found while minimising seed 1666, whose change is made
by a client forward pre-hook on a value kept on the workers, left as it is): in one process
the program's tensor changes; deployed the worker changed its copy and the program's
tensor kept its old value, silently. The worker refused it after the part's forward; now
the new value comes back with the answer and the program's tensor changes as in one process
(tests/integration/test_d1_changed_arguments.py)."""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _ThroughIdentity(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 3), nn.Identity(), nn.Linear(3, 3)

    def forward(self, x):
        return self.c(self.b(self.a(x).tanh()))


def _legacy_hook_on_identity(model) -> list:
    seen = []
    model.b.register_backward_hook(lambda m, gi, go: seen.append((gi[0].numpy(),
                                                                  go[0].numpy())))
    return seen


def test_a_legacy_hook_on_a_part_that_returns_its_input_is_refused(cluster):
    torch.manual_seed(0)
    model = _ThroughIdentity()
    seen = _legacy_hook_on_identity(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's word on legacy hooks)
        model(torch.ones(2, 3)).sum().backward()
    (grad_input, grad_output), = seen  # one process: tanh's node, its own grad_input
    assert not np.allclose(grad_input, grad_output)
    model = _ThroughIdentity()
    seen = _legacy_hook_on_identity(model)
    remote = cluster.deploy(model, stages=2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(NotImplementedError,
                               match="register_backward_hook on Identity.*full_backward"):
                remote(torch.ones(2, 3)).sum().backward()
        assert seen == []
    finally:
        remote.close()


class _RootOverAPart(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3)])

    def forward(self, x):
        return self.blocks[0](x).tanh()


def _checkpointed(model, fired: list, whole: bool) -> list:
    x = torch.ones(2, 3, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.utils.checkpoint.checkpoint(model if whole else model.blocks[0], x,
                                                use_reentrant=False)
    fired.append("--")
    out.sum().backward()
    return [str(w.message) for w in caught if w.category is RuntimeWarning]


@pytest.mark.parametrize("whole", [True, False])
def test_a_checkpoint_of_a_forward_that_runs_here_says_what_is_not_rerun(cluster, whole):
    def hooked():
        model, fired = _RootOverAPart(), []
        model.register_forward_pre_hook(lambda m, args: fired.append("root"))
        model.blocks[0].register_forward_pre_hook(lambda m, args: fired.append("part"))
        return model, fired

    model, fired = hooked()
    assert _checkpointed(model, fired, whole) == []
    assert fired == (["root", "part", "--", "root", "part"] if whole
                     else ["part", "--", "part"])
    model, fired = hooked()
    remote = cluster.deploy(model, stages=1)
    try:
        said = _checkpointed(remote, fired, whole)
        if whole:  # the root's hook is not run again: the call says so
            assert fired == ["root", "part", "--", "part"]
            assert len(said) == 1 and "only the placed part 'blocks.0'" in said[0] \
                and "not run again" in said[0], said
        else:  # the part itself: as in one process, nothing to say
            assert fired == ["part", "--", "part"] and said == []
    finally:
        remote.close()


class _NegatesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x.mul_(-1))


class _CallsIt(nn.Module):
    def __init__(self):
        super().__init__()
        self.part = _NegatesItsInput()

    def forward(self, x):
        return self.part(x)


def test_a_part_changing_the_program_s_tensor_in_place_changes_it(cluster):
    def run(model) -> list:
        x = torch.tensor([[0.3, -0.2, 0.5]])
        with torch.no_grad():
            model(x)
        return x.tolist(), x._version

    assert run(_CallsIt()) == ([pytest.approx([-0.3, 0.2, -0.5])], 1)  # one process
    remote = cluster.deploy(_CallsIt(), stages=1)
    try:
        assert run(remote) == ([pytest.approx([-0.3, 0.2, -0.5])], 1)
    finally:
        remote.close()
