"""The hook toolkit (disthook.hooks) on a local model: every function gives what the same
hooks registered by hand give, and leaves no hook behind, also when the block raises."""
import numpy as np
import pytest

import disthook as torch
from disthook import hooks as toolkit
from disthook import nn


class Block(nn.Module):
    def __init__(self, width=6):
        super().__init__()
        self.attn = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.Tanh())

    def forward(self, x):
        return self.mlp(self.attn(x) + x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_net(seed=0):
    torch.manual_seed(seed)
    return Net()


def data(seed=1):
    torch.manual_seed(seed)
    return torch.randn(4, 6)


def close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)


def hook_counts(model):
    """Hooks of every kind on every module of ``model``."""
    return sum(len(d) for m in model.modules()
               for d in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks,
                         m._backward_pre_hooks))


def manual_cache(model, x, loss_fn=None):
    """What forward (and full backward) hooks registered by hand on every submodule see."""
    seen, handles = {}, []
    for path, m in model.named_modules():
        if path:
            handles.append(m.register_forward_hook(
                lambda m, a, out, p=path: seen.__setitem__(p, out.detach().clone())))
            if loss_fn is not None:
                handles.append(m.register_full_backward_hook(
                    lambda m, gi, go, p=path: seen.__setitem__(p + ".grad", go[0])))
    out = model(x)
    if loss_fn is not None:
        loss_fn(out).backward()
    for h in handles:
        h.remove()
    return out, seen


# ---- hooks(): keys, removal -----------------------------------------------------------------

@pytest.mark.parametrize("key, paths", [
    ("head", ["head"]),
    ("blocks.*.attn", ["blocks.0.attn", "blocks.1.attn"]),
    ("blocks.?.mlp.[0]", ["blocks.0.mlp.0", "blocks.1.mlp.0"]),
    ("blocks.1.*", ["blocks.1.attn", "blocks.1.mlp", "blocks.1.mlp.0", "blocks.1.mlp.1"]),
    (lambda path, m: isinstance(m, nn.Tanh), ["blocks.0.mlp.1", "blocks.1.mlp.1"]),
])
def test_hooks_select_modules_by_path_pattern_or_predicate(key, paths):
    net, log = make_net(), []
    with toolkit.hooks(net, forward={key: lambda m, a, out: log.append(m)}) as added:
        net(data())
        assert [h.path for h in added] == paths
    names = {id(m): p for p, m in net.named_modules()}
    assert sorted(names[id(m)] for m in log) == paths  # each fired once


def test_hooks_of_every_kind_fire_in_the_block_and_are_gone_after():
    net, log = make_net(), []
    with toolkit.hooks(net, forward_pre={"head": lambda m, a: log.append("pre")},
                       forward={"head": lambda m, a, out: log.append("fwd")},
                       backward={"head": lambda m, gi, go: log.append("bwd")}):
        assert hook_counts(net) == 3
        net(data()).sum().backward()
    assert log == ["pre", "fwd", "bwd"]
    assert hook_counts(net) == 0 and toolkit.active_hooks(net) == []
    net(data()).sum().backward()
    assert log == ["pre", "fwd", "bwd"]


def test_an_exception_in_the_block_leaves_no_hook():
    net = make_net()
    with pytest.raises(ZeroDivisionError):
        with toolkit.hooks(net, forward={"blocks.?": lambda m, a, out: None},
                           backward={"head": lambda m, gi, go: None},
                           forward_pre={"*.attn": lambda m, a: None}):
            assert len(toolkit.active_hooks(net)) == 5
            net(data()).sum().backward()
            1 / 0
    assert toolkit.active_hooks(net) == [] and hook_counts(net) == 0


def test_a_registration_that_fails_removes_those_made_before_it():
    net = make_net()
    legacy = net.head.register_backward_hook(lambda m, gi, go: None)
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks"):
        with toolkit.hooks(net, forward={"*": lambda m, a, out: None},
                           backward={"head": lambda m, gi, go: None}):
            pass
    legacy.remove()
    assert toolkit.active_hooks(net) == [] and hook_counts(net) == 0


def test_active_hooks_lists_kind_path_place_and_handle_id():
    net = make_net()
    fn = lambda m, a, out: None  # noqa: E731
    with toolkit.hooks(net, forward={"head": fn},
                       backward={"blocks.1.attn": lambda *a: None}) as added:
        listed = toolkit.active_hooks(net)
        assert listed == added
        assert [(h.kind, h.path, h.where) for h in listed] == [
            ("forward", "head", "local"), ("full_backward", "blocks.1.attn", "local")]
        assert net.head._forward_hooks[listed[0].id] is fn
        assert listed[1].id in net.blocks[1].attn._backward_hooks
    other = make_net()
    with toolkit.hooks(other, forward={"head": fn}):
        assert toolkit.active_hooks(net) == [] and len(toolkit.active_hooks(other)) == 1


def test_keys_that_select_nothing_are_errors_naming_them():
    net = make_net()
    with pytest.raises(AttributeError, match=r"no submodule 'blocks.0.atn'.*did you mean "
                                             r"'blocks.0.attn'.*'blocks', 'blocks.0'"):
        toolkit.hooks(net, forward={"blocks.0.atn": print}).__enter__()
    with pytest.raises(ValueError, match=r"the pattern 'layers\.\*' selects no module of Net "
                                         r"\(its 12 module paths: 'blocks'"):
        toolkit.hooks(net, forward={"layers.*": print}).__enter__()
    with pytest.raises(ValueError, match="the predicate .* selects no module"):
        toolkit.run_with_cache(net, data(), names=lambda path, m: isinstance(m, nn.Conv2d))
    with pytest.raises(TypeError, match="a path, a glob pattern or a predicate"):
        toolkit.hooks(net, forward={3: print}).__enter__()
    with pytest.raises(TypeError, match="the forward hook for 'head' must be callable"):
        toolkit.hooks(net, forward={"head": "print"}).__enter__()
    with pytest.raises(TypeError, match="forward takes a dict"):
        toolkit.hooks(net, forward=[print]).__enter__()
    assert hook_counts(net) == 0


def test_a_worker_hook_on_a_local_model_is_refused():
    from disthook.distributed import hooks as worker_hooks

    net = make_net()
    with pytest.raises(TypeError, match=r"hooks.capture\(buffer='a'\) for 'head' runs on a "
                                        "worker"):
        toolkit.hooks(net, forward={"head": worker_hooks.capture("a")}).__enter__()
    assert hook_counts(net) == 0


# ---- run_with_cache -------------------------------------------------------------------------

def test_run_with_cache_holds_what_manual_forward_hooks_see():
    net, x = make_net(), data()
    want_out, want = manual_cache(net, x)
    out, cache = toolkit.run_with_cache(net, x)
    close(out, want_out)
    assert list(cache) == [p for p, _ in net.named_modules() if p]
    for path, value in want.items():
        close(cache[path], value)
    assert hook_counts(net) == 0


@pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")  # torch's
def test_run_with_cache_with_grads_holds_what_manual_backward_hooks_see():
    net, x = make_net(), data()
    loss_fn = lambda out: (out ** 2).mean()  # noqa: E731
    _, want = manual_cache(net, x, loss_fn)
    want_grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    _, cache = toolkit.run_with_cache(net, x, names=["head", "blocks.*.attn", "blocks.1"],
                                      include_grads=True, loss_fn=loss_fn)
    assert list(cache) == ["blocks.0.attn", "blocks.0.attn.grad", "blocks.1",
                           "blocks.1.grad", "blocks.1.attn", "blocks.1.attn.grad", "head",
                           "head.grad"]
    for key, value in cache.items():
        close(value, want[key])
    for n, p in net.named_parameters():  # the backward ran as a plain backward does
        close(p.grad, want_grads[n])
    assert hook_counts(net) == 0


def test_run_with_cache_errors():
    net = make_net()
    with pytest.raises(ValueError, match=r"include_grads=True\) needs loss_fn"):
        toolkit.run_with_cache(net, data(), include_grads=True)
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        toolkit.run_with_cache(net, data(), loss_fn=3)
    with pytest.raises(AttributeError, match="no submodule 'mlp'"):
        toolkit.run_with_cache(net, data(), names=["head", "mlp"])


def test_a_module_called_twice_keeps_its_last_call():
    torch.manual_seed(0)
    layer = nn.Linear(3, 3)
    net = nn.Sequential(layer, nn.Tanh(), layer)
    x = torch.randn(2, 3)
    _, cache = toolkit.run_with_cache(net, x, names="0")
    close(cache["0"], layer(torch.tanh(layer(x))))


# ---- patch ----------------------------------------------------------------------------------

def test_patch_with_a_tensor_is_the_rest_of_the_model_on_that_tensor():
    net, x = make_net(), data()
    value = torch.randn(4, 6)
    out = toolkit.patch(net, {"blocks.1": value}, x)
    close(out, net.head(value))
    value.add_(1.0)  # the patched output was a copy
    close(out, net.head(value - 1.0))
    assert hook_counts(net) == 0


def test_patch_with_functions_equals_manual_replacing_hooks_and_stays_differentiable():
    net, x = make_net(), data()
    fns = {"blocks.*.attn": lambda out: out * 0.5, "head": lambda out: out.relu()}
    hs = [net.blocks[i].attn.register_forward_hook(lambda m, a, out: out * 0.5)
          for i in (0, 1)]
    hs.append(net.head.register_forward_hook(lambda m, a, out: out.relu()))
    want = net(x)
    want.sum().backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    for h in hs:
        h.remove()
    net.zero_grad()
    out = toolkit.patch(net, fns, x)
    close(out, want)
    out.sum().backward()
    for n, p in net.named_parameters():
        close(p.grad, grads[n])


def test_a_patch_tensor_that_requires_grad_receives_its_gradient():
    net = make_net()
    value = torch.randn(4, 6, requires_grad=True)
    toolkit.patch(net, {"blocks.1": value}, data()).sum().backward()
    close(value.grad, net.head.weight.sum(0).expand(4, 6))


def test_patch_errors_name_the_path_and_the_shapes():
    net = make_net()
    with pytest.raises(RuntimeError, match=r"patch\('blocks.0.attn'\): the patch has shape "
                                           r"\(4, 5\) but the module's output has shape "
                                           r"\(4, 6\)"):
        toolkit.patch(net, {"blocks.0.attn": torch.zeros(4, 5)}, data())
    with pytest.raises(TypeError, match=r"patch\('head'\): a patch is a Tensor or a function"):
        toolkit.patch(net, {"head": np.zeros((4, 3))}, data())
    assert hook_counts(net) == 0


# ---- run_until ------------------------------------------------------------------------------

def test_run_until_returns_the_module_output_and_runs_nothing_after_it():
    net, x = make_net(), data()
    _, want = manual_cache(net, x)
    ran = []
    for path, m in net.named_modules():
        if path:
            m.register_forward_pre_hook(lambda m, a, p=path: ran.append(p))
    out = toolkit.run_until(net, x, "blocks.1.attn")
    close(out, want["blocks.1.attn"])
    assert ran[-1] == "blocks.1.attn" and "blocks.1.mlp" not in ran and "head" not in ran
    out.sum().backward()  # differentiable: the forward up to there kept its graph
    assert net.blocks[0].attn.weight.grad is not None and net.head.weight.grad is None


def test_run_until_errors():
    net = make_net()
    with pytest.raises(AttributeError, match="no submodule 'blocks.2'"):
        toolkit.run_until(net, data(), "blocks.2")
    with pytest.raises(TypeError, match="exact path of one module"):
        toolkit.run_until(net, data(), "blocks.*")
    net.blocks[0].spare = nn.Tanh()  # a module the forward never calls
    with pytest.raises(RuntimeError, match="'blocks.0.spare' did not run in the forward of Net"):
        toolkit.run_until(net, data(), "blocks.0.spare")
    assert hook_counts(net) == 0


# ---- trace ----------------------------------------------------------------------------------

def test_trace_one_layer_keeps_input_output_and_grad_of_its_last_call():
    net, x = make_net(), data()
    seen = {}
    h1 = net.blocks[1].register_forward_hook(
        lambda m, a, out: seen.update(input=a[0].detach().clone(), output=out.detach().clone()))
    h2 = net.blocks[1].register_full_backward_hook(lambda m, gi, go: seen.update(grad=go[0]))
    net(x).sum().backward()
    h1.remove()
    h2.remove()
    with toolkit.trace(net, "blocks.1", retain_input=True, retain_grad=True) as t:
        net(x * 3)
        net(x).sum().backward()
    assert hook_counts(net) == 0 and toolkit.active_hooks(net) == []
    for what in ("input", "output", "grad"):
        close(getattr(t, what), seen[what])


def test_trace_a_list_gives_a_dict_of_traces_and_retains_only_what_is_asked():
    net, x = make_net(), data()
    _, want = manual_cache(net, x)
    with toolkit.trace(net, ["head", "blocks.*.attn"]) as traces:
        net(x)
        close(traces["head"].output, want["head"])  # readable inside the block too
    assert isinstance(traces, toolkit.TraceDict)
    assert list(traces) == ["blocks.0.attn", "blocks.1.attn", "head"]
    for path, t in traces.items():
        close(t.output, want[path])
        assert t.input is None and t.grad is None


# ---- functions, not Module methods ---------------------------------------------------------

class OwnNames(nn.Module):
    """A model with an attribute ``hooks`` and a method ``patch`` of its own."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.hooks = ["the user's"]

    def patch(self, x):
        return x + 1.0

    def forward(self, x):
        return self.body(self.patch(x))


def test_the_toolkit_is_no_module_method_as_in_torch():
    for name in ("hooks", "run_with_cache", "patch", "run_until", "active_hooks", "trace"):
        assert not hasattr(nn.Module, name), name


def test_a_model_with_its_own_patch_and_hooks_works_with_the_toolkit_and_keeps_them():
    torch.manual_seed(0)
    net, x = OwnNames(), data()
    body_in = x + 1.0
    out, cache = toolkit.run_with_cache(net, x)
    assert list(cache) == ["body", "body.0", "body.1"]
    close(out, net.body(body_in))
    close(cache["body.0"], net.body[0](body_in))
    with toolkit.hooks(net, forward={"body.*": lambda m, a, o: None}) as added:
        assert toolkit.active_hooks(net) == added and len(added) == 2
    close(toolkit.patch(net, {"body.1": lambda o: o * 0.0}, x), torch.zeros(4, 6))
    close(toolkit.run_until(net, x, "body.0"), net.body[0](body_in))
    with toolkit.trace(net, "body.1") as t:
        net(x)
    close(t.output, out)
    assert net.hooks == ["the user's"] and net.patch(1.0) == 2.0
    assert hook_counts(net) == 0 and toolkit.active_hooks(net) == []
