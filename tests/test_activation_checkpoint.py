"""torch.utils.checkpoint: both variants against torch's measured behaviour (hook order in
forward and recompute, early stop, RNG replay, errors), and the memory it saves."""
from __future__ import annotations

import importlib
import tracemalloc
import warnings

import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch


def checkpoint_of(lib):
    return importlib.import_module(lib.name + ".utils.checkpoint").checkpoint


def hook_log(lib, use_reentrant: bool, x_requires_grad: bool = True) -> list:
    """Two hooked Linear layers in one checkpointed segment; what fires, and when."""
    torch, nn = lib.torch, lib.nn
    log = []
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    for name, m in [("a", a), ("b", b)]:
        m.register_forward_pre_hook(
            lambda m, args, name=name: log.append(f"{name}.fwd_pre {torch.is_grad_enabled()}"))
        m.register_forward_hook(
            lambda m, args, out, name=name: log.append(f"{name}.fwd {out.requires_grad}"))
        m.register_full_backward_hook(lambda m, gi, go, name=name: log.append(f"{name}.bw"))

    def segment(x):
        h = a(x).relu()
        if h.requires_grad:
            h.register_hook(lambda g: log.append("h.tensor_hook"))
        return b(h)

    x = torch.ones(2, 3, requires_grad=x_requires_grad)
    y = checkpoint_of(lib)(segment, x, use_reentrant=use_reentrant)
    log.append(f"backward {type(y.grad_fn).__name__}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y.sum().backward()
    log.append(f"grads {x.grad is not None} {a.weight.grad is not None}")
    return log


def test_non_reentrant_reruns_the_segment_until_all_is_recomputed(lib):
    assert hook_log(lib, use_reentrant=False) == [
        "a.fwd_pre True", "a.fwd True", "b.fwd_pre True", "b.fwd True",
        "backward BackwardHookFunctionBackward",
        # the recomputation stops inside b: its forward hook does not fire again
        "a.fwd_pre True", "a.fwd True", "b.fwd_pre True",
        "b.bw", "h.tensor_hook", "a.bw", "grads True True"]


def test_reentrant_runs_without_grad_then_reruns_all_in_backward(lib):
    assert hook_log(lib, use_reentrant=True) == [
        "a.fwd_pre False", "a.fwd False", "b.fwd_pre False", "b.fwd False",
        "backward CheckpointFunctionBackward",
        "a.fwd_pre True", "a.fwd True", "b.fwd_pre True", "b.fwd True",
        "b.bw", "h.tensor_hook", "a.bw", "grads True True"]


def test_non_reentrant_with_an_input_that_needs_no_grad(lib):
    assert hook_log(lib, use_reentrant=False, x_requires_grad=False)[-1] == "grads False True"


def test_gradients_equal_the_unchecked_ones(lib):
    torch, nn = lib.torch, lib.nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))
    x = torch.randn(5, 4, requires_grad=True)
    net(x).sum().backward()
    expected = [p.grad.clone() for p in net.parameters()] + [x.grad.clone()]
    for reentrant in (False, True):
        net.zero_grad()
        x.grad = None
        checkpoint_of(lib)(net, x, use_reentrant=reentrant).sum().backward()
        got = [p.grad for p in net.parameters()] + [x.grad]
        assert all(torch.allclose(g, e, atol=1e-6) for g, e in zip(got, expected))


@pytest.mark.parametrize("reentrant", [False, True])
def test_dropout_mask_is_replayed(lib, reentrant):
    torch = lib.torch
    torch.manual_seed(1)
    drop = lib.nn.Dropout(0.5)
    x = torch.ones(64, requires_grad=True)
    y = checkpoint_of(lib)(lambda t: drop(t) * t, x, use_reentrant=reentrant)
    y.sum().backward()
    assert torch.equal(x.grad != 0, y != 0)


def test_non_reentrant_recomputes_once_per_backward(lib):
    torch = lib.torch
    calls = []
    x = torch.ones(2, requires_grad=True)

    def f(t):
        calls.append(1)
        return (t * t).sum()

    y = checkpoint_of(lib)(f, x, use_reentrant=False)
    y.backward(retain_graph=True)
    y.backward()
    assert len(calls) == 3 and x.grad.tolist() == [4.0, 4.0]
    with pytest.raises(RuntimeError, match="^Trying to backward through the graph a second"):
        y.backward()


def test_autograd_grad_kwargs_and_outputs(lib):
    torch = lib.torch
    checkpoint = checkpoint_of(lib)
    x = torch.ones(2, requires_grad=True)
    y = checkpoint(lambda t: (t * 3).exp(), x, use_reentrant=False)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.allclose(g, 3 * (x * 3).exp().detach())
    y = checkpoint(lambda t: (t * 3).exp(), x, use_reentrant=True)
    with pytest.raises(RuntimeError, match="^When use_reentrant=True, torch.utils.checkpoint is "
                       "incompatible with .grad\\(\\) or passing an `inputs` parameter"):
        torch.autograd.grad(y.sum(), x)
    with pytest.raises(ValueError, match="^Unexpected keyword arguments: k$"):
        checkpoint(lambda t, k=1: t * k, x, k=2, use_reentrant=True)
    assert checkpoint(lambda t, k=1: t * k, x, k=2, use_reentrant=False).tolist() == [2.0, 2.0]
    for reentrant in (False, True):
        out, n = checkpoint(lambda t: (t * 2, 5), x, use_reentrant=reentrant)
        assert n == 5 and out.requires_grad


def test_use_reentrant_must_be_passed_or_it_warns(lib):
    x = lib.torch.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="^torch.utils.checkpoint: the use_reentrant parameter "
                      "should be passed explicitly"):
        y = checkpoint_of(lib)(lambda t: t * 2, x)
    assert type(y.grad_fn).__name__ == "CheckpointFunctionBackward"


def test_reentrant_without_inputs_that_need_grad_warns(lib):
    with pytest.warns(UserWarning, match="^None of the inputs have requires_grad=True. "
                      "Gradients will be None$"):
        y = checkpoint_of(lib)(lambda t: t * 2, lib.torch.ones(2), use_reentrant=True)
    assert not y.requires_grad


def _peak_mib(run) -> float:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    run()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak / 2**20


def test_checkpointing_a_deep_mlp_lowers_peak_memory():
    """16 Linear(64, 64)+Tanh layers, batch 2048, 4 checkpointed segments: each activation is
    0.5 MiB; unchecked, backward starts with ~32 of them alive, checkpointed with ~4 + one
    segment's recomputation. (The 256-wide, batch-4096 version in the docs: 76.6 -> 45.0 MiB.)
    """
    import disthook as torch
    from disthook.utils.checkpoint import checkpoint

    nn = torch.nn
    torch.manual_seed(0)
    layers = [m for _ in range(16) for m in (nn.Linear(64, 64), nn.Tanh())]
    segments = [nn.Sequential(*layers[i:i + 8]) for i in range(0, 32, 8)]
    x = torch.randn(2048, 64, requires_grad=True)

    def run(mode):
        h = x
        for s in segments:
            h = s(h) if mode is None else checkpoint(s, h, use_reentrant=mode)
        h.sum().backward()

    plain = _peak_mib(lambda: run(None))
    grad_plain = x.grad.clone()
    for mode in (False, True):
        x.grad = None
        checked = _peak_mib(lambda: run(mode))
        assert checked < 0.7 * plain, (mode, checked, plain)
        assert torch.allclose(x.grad, grad_plain)


def test_without_early_stop_the_whole_segment_reruns(lib):
    nn = lib.nn
    log = []
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    a.register_forward_hook(lambda *args: log.append("a"))
    b.register_forward_hook(lambda *args: log.append("b"))
    x = lib.torch.ones(1, 2, requires_grad=True)
    y = checkpoint_of(lib)(lambda t: b(a(t).tanh()), x, use_reentrant=False, early_stop=False)
    log.append("backward")
    y.sum().backward()
    assert log == ["a", "b", "backward", "a", "b"]


def test_backward_inputs_and_buffers_updated_by_the_rerun(lib):
    torch, nn = lib.torch, lib.nn
    checkpoint = checkpoint_of(lib)
    fc = nn.Linear(2, 2)
    x = torch.ones(1, 2, requires_grad=True)
    checkpoint(lambda t: fc(t).tanh(), x, use_reentrant=False).sum().backward(
        inputs=[fc.weight])
    assert x.grad is None and fc.weight.grad is not None
    bn = nn.BatchNorm1d(2)
    x = torch.tensor([[1.0, 2.0], [3.0, 5.0]], requires_grad=True)
    checkpoint(lambda t: bn(t).tanh(), x, use_reentrant=False).sum().backward()
    # the rerun updates the running statistics a second time, in torch too
    assert int(bn.num_batches_tracked) == 2
    assert bn.running_mean.tolist() == pytest.approx([0.38, 0.665])


def test_checkpoint_sequential_equals_the_plain_model(lib):
    torch, nn = lib.torch, lib.nn
    seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    x = torch.ones(2, 3, requires_grad=True)
    module = importlib.import_module(lib.name + ".utils.checkpoint")
    module.checkpoint_sequential(seq, 2, x, use_reentrant=False).sum().backward()
    got = x.grad.clone()
    x.grad = None
    seq(x).sum().backward()
    assert torch.allclose(got, x.grad)


@pytest.mark.parametrize("changed, message", [
    ("shape", "torch.utils.checkpoint: Recomputed values for the following tensors have "
     "different metadata than during the forward pass.\ntensor at position 0:\nsaved "
     "metadata: {'shape': torch.Size([2]), 'dtype': torch.float32, 'device': "
     "device(type='cpu')}\nrecomputed metadata: {'shape': torch.Size([1]), 'dtype': "
     "torch.float32, 'device': device(type='cpu')}\ntensor at position 1:\nsaved metadata: "
     "{'shape': torch.Size([2]), 'dtype': torch.float32, 'device': device(type='cpu')}\n"
     "recomputed metadata: {'shape': torch.Size([1]), 'dtype': torch.float32, 'device': "
     "device(type='cpu')}\n.\n"),
    ("count", "torch.utils.checkpoint: A different number of tensors was saved during the "
     "original forward and recomputation.\nNumber of tensors saved during forward: 2\nNumber "
     "of tensors saved during recomputation: 1.\n"),
])
def test_a_rerun_that_saves_differently_is_refused(lib, changed, message):
    """torch's message (it then adds tips about debug mode and torch.compile)."""
    module = importlib.import_module(lib.name + ".utils.checkpoint")
    calls = []
    x = lib.torch.ones(2, requires_grad=True)

    def f(t):
        calls.append(1)
        if len(calls) == 1:
            return (t * t).sum()
        return (t[:1] * t[:1]).sum() if changed == "shape" else t.exp().sum()

    y = module.checkpoint(f, x, use_reentrant=False)
    with pytest.raises(module.CheckpointError) as info:
        y.backward()
    assert str(info.value).startswith(message)


def test_nested_non_reentrant_checkpoints_give_the_plain_gradients():
    """Gradients equal the plain model's (the outer segment reruns first, as in torch)."""
    import disthook as torch
    from disthook.utils.checkpoint import checkpoint

    nn = torch.nn
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    x = torch.tensor([[0.5, -1.0]], requires_grad=True)

    def outer(t):
        return checkpoint(lambda u: b(u).tanh(), a(t).tanh(), use_reentrant=False)

    checkpoint(outer, x, use_reentrant=False).sum().backward()
    got = [x.grad.clone(), a.weight.grad.clone(), b.weight.grad.clone()]
    x.grad = a.weight.grad = b.weight.grad = None
    b(a(x).tanh()).tanh().sum().backward()
    assert all(torch.allclose(g, e) for g, e in zip(got, [x.grad, a.weight.grad,
                                                          b.weight.grad]))
