"""The hook fuzzer's ninth round (F13) on deployed models (seeds 2278, 2448): a forward hook
of a chain's last module calls ``retain_grad()`` on its output and keeps it; the program (or
the root's forward hook) then changes the call's output in place.

In one process the hook's output *is* what the call returns: ``kept is out``, and its
``.grad`` is the gradient of the output after the change (torch's retain_grad follows the
tensor). Deployed, the call returned a tensor of its own: ``kept is out`` was False and
``kept.grad`` was the worker's gradient from before the change (twice the one-process value
after ``out.mul_(2)``). The last stage now names its output where a hook event sent it, and
the call returns the hook's tensor for it, as the one object of one process.
"""
from __future__ import annotations

import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _Root(nn.Module):
    """A forward of its own: each block a placed part called from the client's code."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Linear(3, 3) for _ in range(2))

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x))


def _model(kind: str = "chain"):
    if kind == "glue":
        return _Root()
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))


def _block(model, at: int):
    return model.blocks[at] if hasattr(model, "blocks") else model[at]


def _retained_then_changed(model, change: str, at: int = 1):
    """A forward hook of block ``at`` retains and keeps its output; the output is changed
    in place after the call (``change``), then a backward."""
    kept, fired = [], []

    def keep(module, args, out):
        out.retain_grad()
        kept.append(out)

    def hooked(module, args, out):  # a tensor hook put before the change: the old value's
        out.register_hook(lambda g: fired.append(g.numpy().round(5).tolist()))
        kept.append(out)

    _block(model, at).register_forward_hook(hooked if change == "hooked" else keep)
    if change == "root":
        model.register_forward_hook(lambda m, args, out: out.neg_())
    x = torch.ones(2, 3, requires_grad=True)
    out = model(x)
    if change in ("program", "hooked"):
        out.mul_(2)
    if change == "later":  # retain_grad of the returned output itself, after the change
        out.mul_(3)
        out.retain_grad()
    (out * torch.arange(6.0).reshape(2, 3)).sum().backward()

    def grad(t):
        return t.grad.numpy().round(5).tolist() if t.retains_grad else None

    return {"grad": grad(kept[0]), "same": kept[0] is out, "fired": fired,
            "out_grad": grad(out),
            "x": x.grad.numpy().round(4).tolist()}


@pytest.mark.parametrize("kind", ["chain", "glue"])
@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("change", ["program", "root", "hooked", "later", "none"])
def test_the_hooks_output_is_the_calls_output(cluster, kind, stages, change):
    want = _retained_then_changed(_model(kind), change)
    assert want["same"]  # one process: one object
    remote = cluster.deploy(_model(kind), stages=stages)
    try:
        assert _retained_then_changed(remote, change) == want
    finally:
        remote.close()


@pytest.mark.parametrize("kind", ["chain", "glue"])
@pytest.mark.parametrize("stages", [1, 2])
def test_an_inner_blocks_output_stays_its_own(cluster, kind, stages):
    """The first block's output is not the call's: kept apart, as in one process."""
    want = _retained_then_changed(_model(kind), "program", at=0)
    assert not want["same"]
    remote = cluster.deploy(_model(kind), stages=stages)
    try:
        assert _retained_then_changed(remote, "program", at=0) == want
    finally:
        remote.close()


def _grad_to_kept(model):
    """The hook keeps its output without retain_grad; the program differentiates to it."""
    kept = []
    _block(model, 1).register_forward_hook(lambda m, args, out: kept.append(out))
    out = model(torch.ones(2, 3, requires_grad=True))
    out.hook_seen = True
    loss = (out * out).sum()
    (g,) = torch.autograd.grad(loss, kept[0])
    return kept[0] is out, getattr(kept[0], "hook_seen", False), g.numpy().round(5).tolist()


@pytest.mark.parametrize("kind", ["chain", "glue"])
def test_autograd_grad_to_the_kept_output(cluster, kind):
    want = _grad_to_kept(_model(kind))
    assert want[0]
    remote = cluster.deploy(_model(kind), stages=2)
    try:
        assert _grad_to_kept(remote) == want
    finally:
        remote.close()


def _changed_by_the_hook(model):
    """The hook changes its output in place, then retains and keeps it; the program changes
    the call's output again."""
    kept = []

    def keep(module, args, out):
        out.mul_(2)
        out.retain_grad()
        kept.append(out)

    _block(model, 1).register_forward_hook(keep)
    x = torch.ones(2, 3, requires_grad=True)
    out = model(x)
    out.mul_(3)
    (out * torch.arange(6.0).reshape(2, 3)).sum().backward()
    return kept[0].grad.numpy().round(5).tolist(), x.grad.numpy().round(4).tolist()


@pytest.mark.parametrize("kind", ["chain", "glue"])
@pytest.mark.parametrize("stages", [1, 2])
def test_a_hooks_tensor_changed_by_it_retains_the_outputs_gradient(cluster, kind, stages):
    """Its value moved on the worker since the hook got it: the call returns a tensor of
    its own (``kept is out`` is False, unlike one process), but what the hook retained is
    the gradient of the output as the program left it, as in one process."""
    want = _changed_by_the_hook(_model(kind))
    remote = cluster.deploy(_model(kind), stages=stages)
    try:
        assert _changed_by_the_hook(remote) == want
    finally:
        remote.close()


class _Pair(nn.Linear):
    def forward(self, x):
        h = super().forward(x)
        return h, h.sigmoid()  # h is used inside the part too


class _PairRoot(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([_Pair(3, 3)])

    def forward(self, x):
        a, b = self.blocks[0](x)
        if self.change:
            a.mul_(2)
        return a + b

    change = False


def _used_inside(model, change: bool):
    """A hook retains the first of a part's outputs, which the part used for the second:
    its gradient has both paths (unless the program changed it in place since)."""
    kept = []

    def keep(module, args, out):
        out[0].retain_grad()
        kept.append(out[0])

    model.blocks[0].register_forward_hook(keep)
    model.change = change
    x = torch.ones(2, 3, requires_grad=True)
    (model(x) * torch.arange(6.0).reshape(2, 3)).sum().backward()
    return kept[0].grad.numpy().round(5).tolist(), x.grad.numpy().round(4).tolist()


@pytest.mark.parametrize("change", [False, True])
def test_a_kept_output_the_part_used_too_retains_its_whole_gradient(cluster, change):
    want = _used_inside(_PairRoot(), change)
    remote = cluster.deploy(_PairRoot(), stages=1)
    try:
        assert _used_inside(remote, change) == want
    finally:
        remote.close()
