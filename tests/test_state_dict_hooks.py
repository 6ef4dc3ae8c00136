"""state_dict / load_state_dict hooks and nn.Buffer, with torch 2.13's semantics.

Each test runs under disthook and (when installed) torch, and asserts the same exact log,
so the expected values are torch's measured behaviour.
"""
from __future__ import annotations

import gc
from collections import OrderedDict

import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch


def tree(lib):
    """Parent(fc: Linear(2, 2), block: Sequential(Linear(2, 1)), running buffer)."""
    nn, torch = lib.nn, lib.torch

    class Parent(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.block = nn.Sequential(nn.Linear(2, 1))
            self.register_buffer("running", torch.zeros(2))

    return Parent()


# ---- state_dict hooks ------------------------------------------------------------------------

def test_state_dict_hook_order_and_arguments(lib):
    net = tree(lib)
    log = []
    for name, mod in [("net", net), ("fc", net.fc), ("block", net.block),
                      ("block.0", net.block[0])]:
        mod.register_state_dict_pre_hook(
            lambda m, prefix, keep_vars, name=name: log.append(
                ("pre", name, type(m).__name__, prefix, keep_vars)))
        mod.register_state_dict_post_hook(
            lambda m, sd, prefix, meta, name=name: log.append(
                ("post", name, prefix, list(sd), dict(meta))))
    net.state_dict(prefix="p.", keep_vars=True)
    assert log == [
        ("pre", "net", "Parent", "p.", True),
        ("pre", "fc", "Linear", "p.fc.", True),
        ("post", "fc", "p.fc.", ["p.running", "p.fc.weight", "p.fc.bias"], {"version": 1}),
        ("pre", "block", "Sequential", "p.block.", True),
        ("pre", "block.0", "Linear", "p.block.0.", True),
        ("post", "block.0", "p.block.0.",
         ["p.running", "p.fc.weight", "p.fc.bias", "p.block.0.weight", "p.block.0.bias"],
         {"version": 1}),
        ("post", "block", "p.block.",
         ["p.running", "p.fc.weight", "p.fc.bias", "p.block.0.weight", "p.block.0.bias"],
         {"version": 1}),
        ("post", "net", "p.",
         ["p.running", "p.fc.weight", "p.fc.bias", "p.block.0.weight", "p.block.0.bias"],
         {"version": 1}),
    ]


def test_state_dict_post_hook_edits_in_place_and_may_not_return(lib):
    net = tree(lib)

    def drop_bias(module, sd, prefix, meta):
        del sd[prefix + "bias"]

    net.fc.register_state_dict_post_hook(drop_bias)
    assert list(net.state_dict()) == ["running", "fc.weight", "block.0.weight", "block.0.bias"]

    def returns(module, sd, prefix, meta):
        return {}

    handle = net.register_state_dict_post_hook(returns)
    with pytest.raises(RuntimeError, match="^state_dict post-hook must return None$"):
        net.state_dict()
    handle.remove()
    assert "fc.weight" in net.state_dict()


def test_private_state_dict_hook_may_replace_the_dict(lib):
    net = tree(lib)
    net._register_state_dict_hook(lambda m, sd, prefix, meta: {"only": 1})
    assert net.state_dict() == {"only": 1}
    # a submodule's replacement is dropped: the parent keeps filling its own dict
    net = tree(lib)
    net.fc._register_state_dict_hook(lambda m, sd, prefix, meta: {"only": 1})
    assert "fc.weight" in net.state_dict()


def test_public_post_hook_cannot_be_registered_privately(lib):
    net = tree(lib)

    def hook(module, sd, prefix, meta):
        pass

    net.register_state_dict_post_hook(hook)
    with pytest.raises(RuntimeError, match="^Cannot register the same function as the state "
                       "dict post hook that was previously registered via "
                       "register_state_dict_post_hook$"):
        net._register_state_dict_hook(hook)


def test_state_dict_pre_hook_can_change_state_before_it_is_saved(lib):
    net = tree(lib)

    def fill(module, prefix, keep_vars):
        module.running.fill_(7.0)

    with net.register_state_dict_pre_hook(fill):
        assert net.state_dict()["running"].tolist() == [7.0, 7.0]
    net.running.fill_(0.0)
    assert net.state_dict()["running"].tolist() == [0.0, 0.0]


def test_state_dict_positional_args_warn(lib):
    net = tree(lib)
    dest = OrderedDict()
    with pytest.warns(FutureWarning, match="Positional args are being deprecated"):
        out = net.state_dict(dest, "x.")
    assert out is dest and list(dest)[0] == "x.running"


# ---- load_state_dict hooks -------------------------------------------------------------------

def test_load_hooks_order_arguments_and_incompatible_keys(lib):
    net = tree(lib)
    sd = net.state_dict()
    del sd["fc.bias"]
    sd["block.extra"] = lib.torch.ones(1)
    log = []
    for name, mod in [("net", net), ("fc", net.fc), ("block", net.block),
                      ("block.0", net.block[0])]:
        mod.register_load_state_dict_pre_hook(
            lambda m, state, prefix, meta, strict, missing, unexpected, errors, name=name:
            log.append(("pre", name, type(m).__name__, prefix, sorted(state), dict(meta),
                        strict, list(missing), list(unexpected), list(errors))))
        mod.register_load_state_dict_post_hook(
            lambda m, keys, name=name: log.append(
                ("post", name, type(m).__name__, type(keys).__name__, list(keys.missing_keys),
                 list(keys.unexpected_keys))))
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc.bias"] and result.unexpected_keys == ["block.extra"]
    everything = ["block.0.bias", "block.0.weight", "block.extra", "fc.weight", "running"]
    assert log == [
        ("pre", "net", "Parent", "", everything, {"version": 1}, True, [], [], []),
        ("pre", "fc", "Linear", "fc.", ["fc.weight"], {"version": 1}, True, [], [], []),
        ("post", "fc", "Linear", "_IncompatibleKeys", ["fc.bias"], []),
        ("pre", "block", "Sequential", "block.",
         ["block.0.bias", "block.0.weight", "block.extra"], {"version": 1}, True,
         ["fc.bias"], [], []),
        ("pre", "block.0", "Linear", "block.0.", ["block.0.bias", "block.0.weight"],
         {"version": 1}, True, ["fc.bias"], ["block.extra"], []),
        ("post", "block.0", "Linear", "_IncompatibleKeys", ["fc.bias"], ["block.extra"]),
        ("post", "block", "Sequential", "_IncompatibleKeys", ["fc.bias"], ["block.extra"]),
        ("post", "net", "Parent", "_IncompatibleKeys", ["fc.bias"], ["block.extra"]),
    ]


def test_load_post_hook_clearing_keys_makes_strict_load_pass(lib):
    net = tree(lib)
    sd = net.state_dict()
    sd["junk"] = lib.torch.ones(1)
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "junk"'):
        net.load_state_dict(sd)

    def forgive(module, keys):
        keys.unexpected_keys.clear()

    net.register_load_state_dict_post_hook(forgive)
    result = net.load_state_dict(sd)
    assert result.unexpected_keys == [] and result.missing_keys == []


def test_load_post_hook_adding_a_key_makes_strict_load_fail(lib):
    net = tree(lib)
    net.fc.register_load_state_dict_post_hook(
        lambda m, keys: keys.missing_keys.append("invented"))
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(net.state_dict())
    assert str(info.value) == ("Error(s) in loading state_dict for Parent:\n\t"
                               'Missing key(s) in state_dict: "invented". ')
    assert net.load_state_dict(net.state_dict(), strict=False).missing_keys == ["invented"]


def test_load_post_hook_may_not_return(lib):
    net = tree(lib)
    net.register_load_state_dict_post_hook(lambda m, keys: keys)
    with pytest.raises(AssertionError, match="^Hooks registered with "
                       "``register_load_state_dict_post_hook`` are not expected to return new "
                       "values, if incompatible_keys need to be modified, it should be done "
                       "inplace.$"):
        net.load_state_dict(net.state_dict())


def test_load_pre_hook_renames_keys_and_reports_errors(lib):
    torch = lib.torch
    net = tree(lib)
    old = {"running": torch.ones(2), "fc.w": torch.ones(2, 2), "fc.bias": torch.ones(2),
           "block.0.weight": torch.ones(1, 2), "block.0.bias": torch.ones(1)}

    def rename(module, state, prefix, meta, strict, missing, unexpected, errors):
        if prefix + "w" in state:
            state[prefix + "weight"] = state.pop(prefix + "w")

    net.fc.register_load_state_dict_pre_hook(rename)
    # the child sees a copy of its part: the rename happens where the child reads it
    net.load_state_dict(old)
    assert net.fc.weight.sum().item() == 4.0

    def complain(module, state, prefix, meta, strict, missing, unexpected, errors):
        errors.append("bad checkpoint")

    net.block.register_load_state_dict_pre_hook(complain)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(old)
    assert str(info.value) == "Error(s) in loading state_dict for Parent:\n\tbad checkpoint"


def test_private_load_pre_hook_without_module(lib):
    net = tree(lib)
    seen = []
    net._register_load_state_dict_pre_hook(lambda *args: seen.append(len(args)))
    net._register_load_state_dict_pre_hook(lambda *args: seen.append(type(args[0]).__name__),
                                           with_module=True)
    net.load_state_dict(net.state_dict())
    assert seen == [7, "Parent"]


def test_load_hooks_removed_by_handle(lib):
    net = tree(lib)
    seen = []
    h1 = net.register_load_state_dict_pre_hook(lambda *a: seen.append("pre"))
    h2 = net.register_load_state_dict_post_hook(lambda *a: seen.append("post"))
    h3 = net.register_state_dict_pre_hook(lambda *a: seen.append("sd_pre"))
    h4 = net.register_state_dict_post_hook(lambda *a: seen.append("sd_post"))
    net.load_state_dict(net.state_dict())
    assert seen == ["sd_pre", "sd_post", "pre", "post"]
    for h in (h1, h2, h3, h4):
        h.remove()
        h.remove()
    seen.clear()
    net.load_state_dict(net.state_dict())
    assert seen == []


def test_load_pre_hook_of_a_dead_module(lib):
    net = tree(lib)
    fc = net.fc
    hook = fc._load_state_dict_pre_hooks
    fc.register_load_state_dict_pre_hook(lambda *a: None)
    wrapped = next(iter(hook.values()))
    del net, fc
    gc.collect()
    with pytest.raises(RuntimeError, match="^You are trying to call the hook of a dead Module!$"):
        wrapped({}, "", {}, True, [], [], [])


def test_extra_state_round_trip(lib):
    nn = lib.nn

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.count = 0

        def get_extra_state(self):
            return {"count": self.count}

        def set_extra_state(self, state):
            self.count = state["count"]

    a, b = Counter(), Counter()
    a.count = 5
    sd = a.state_dict()
    assert list(sd) == ["_extra_state"]
    b.load_state_dict(sd)
    assert b.count == 5
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "_extra_state"'):
        b.load_state_dict({})
    plain = nn.Linear(1, 1)
    result = plain.load_state_dict({**plain.state_dict(), "_extra_state": 1}, strict=False)
    assert result.unexpected_keys == ["_extra_state"]


def test_load_assign_takes_the_given_tensors(lib):
    torch = lib.torch
    fc = lib.nn.Linear(2, 2)
    weight = torch.ones(2, 2)
    fc.load_state_dict({"weight": weight, "bias": torch.zeros(2)}, assign=True)
    assert isinstance(fc.weight, lib.nn.Parameter) and fc.weight.requires_grad
    assert fc.weight.sum().item() == 4.0
    fc.weight.requires_grad_(False)
    fc.load_state_dict({"weight": weight, "bias": torch.zeros(2)}, assign=True)
    assert not fc.weight.requires_grad


# ---- nn.Buffer -------------------------------------------------------------------------------

def test_buffer_assignment_registers_a_buffer(lib):
    torch, nn, Buffer = lib.torch, lib.nn, lib.nn.parameter.Buffer
    m = nn.Module()
    m.a = Buffer(torch.ones(2))
    m.b = Buffer(torch.zeros(1), persistent=False)
    m.c = torch.ones(1)  # a plain tensor stays a plain attribute
    assert [name for name, _ in m.named_buffers()] == ["a", "b"]
    assert list(m.state_dict()) == ["a"]
    assert type(m.a) is torch.Tensor and isinstance(m.a, Buffer)
    assert not isinstance(torch.ones(1), Buffer)
    assert m.a.persistent and not m.b.persistent
    # reassigning a plain tensor keeps the buffer's persistence
    m.b = torch.ones(1)
    assert list(m.state_dict()) == ["a"]
    m.b = Buffer(torch.ones(1))
    assert list(m.state_dict()) == ["a", "b"]


def test_buffer_detaches_and_keeps_requires_grad(lib):
    torch, Buffer = lib.torch, lib.nn.parameter.Buffer
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    b = Buffer(y)
    assert b.requires_grad and b.grad_fn is None and b.is_leaf
    assert Buffer().shape == (0,)


def test_buffer_errors(lib):
    nn, torch, Buffer = lib.nn, lib.torch, lib.nn.parameter.Buffer

    class Early(nn.Module):
        def __init__(self):
            self.b = Buffer(torch.ones(1))

    with pytest.raises(AttributeError, match="^cannot assign buffer before Module.__init__"):
        Early()
    m = nn.Module()
    m.register_buffer("b", torch.ones(1))
    with pytest.raises(TypeError, match="^cannot assign 'int' as buffer 'b' "
                       r"\(torch.nn.Buffer, torch.Tensor or None expected\)$"):
        m.b = 3


def _pickled_hook(*args):
    pass


def test_module_with_load_hooks_pickles_and_keeps_no_extra_reference(lib):
    import pickle

    m = lib.nn.Linear(2, 2)
    m._register_load_state_dict_pre_hook(_pickled_hook, True)
    m.register_load_state_dict_post_hook(_pickled_hook)
    copy = pickle.loads(pickle.dumps(m))
    wrapped = next(iter(copy._load_state_dict_pre_hooks.values()))
    assert wrapped.module() is copy
    copy.load_state_dict(m.state_dict())
    ref = __import__("weakref").ref(m)
    gc.disable()
    try:
        del m, copy, wrapped
        assert ref() is None
    finally:
        gc.enable()


def test_module_pickled_before_state_dict_hooks_existed_still_loads(lib):
    import pickle

    m = lib.nn.Softmax(1)
    sd = m.state_dict()
    for name in ("_load_state_dict_post_hooks", "_state_dict_hooks"):
        delattr(m, name)
    m = pickle.loads(pickle.dumps(m))
    m.load_state_dict(sd)
    called = []
    m.register_load_state_dict_post_hook(lambda mod, keys: called.append(mod))
    m.load_state_dict(sd)
    assert called == [m]


def test_values_returned_by_pre_hooks_are_ignored(lib):
    net = tree(lib)
    net.register_state_dict_pre_hook(lambda m, prefix, keep_vars: {"ignored": 1})
    net.register_load_state_dict_pre_hook(lambda *args: {"ignored": 1})
    sd = net.state_dict()
    assert "ignored" not in sd
    assert net.load_state_dict(sd).missing_keys == []
