"""The one table of hook kinds: each kind registers through its method with its options."""
import pytest

from disthook import nn, randn
from disthook.service import hook_kinds


def test_every_kind_names_a_register_method_of_its_target():
    module, tensor = nn.Linear(2, 2), randn(2, requires_grad=True)
    for kind in hook_kinds.KINDS.values():
        target = tensor if kind.on == "tensor" else module
        assert callable(getattr(target, kind.method)), kind.name
    assert list(hook_kinds.KINDS) == ["forward_pre", "forward", "full_backward", "backward",
                                      "full_backward_pre", "tensor", "post_accumulate"]


def test_options_are_the_defaults_under_what_is_given():
    assert hook_kinds.options("forward", {"prepend": True}) == {
        "prepend": True, "with_kwargs": False, "always_call": False}
    assert hook_kinds.options("backward") == {}
    with pytest.raises(ValueError, match="a full_backward hook takes prepend, not with_kwargs"):
        hook_kinds.options("full_backward", {"with_kwargs": True})
    with pytest.raises(ValueError, match="a tensor hook takes no options, not prepend"):
        hook_kinds.options("tensor", {"prepend": True})
    with pytest.raises(ValueError, match="unknown hook kind 'sideways'"):
        hook_kinds.options("sideways")


def test_register_calls_the_method_with_the_options():
    log = []
    module = nn.Linear(2, 2)
    hook_kinds.register(module, "forward", lambda m, a, o: log.append("second"))
    first = hook_kinds.register(module, "forward", lambda m, a, o: log.append("first"),
                                {"prepend": True})
    hook_kinds.register(module, "forward_pre",
                        lambda m, args, kwargs: log.append(("kwargs", kwargs)),
                        {"with_kwargs": True})
    module(randn(1, 2))
    assert log == [("kwargs", {}), "first", "second"]
    first.remove()
    log.clear()
    module(randn(1, 2))
    assert log == [("kwargs", {}), "second"]


def test_register_a_tensor_hook_and_refuse_unknown_kinds_and_options():
    t = randn(3, requires_grad=True)
    seen = []
    hook_kinds.register(t, "tensor", lambda grad: seen.append(grad.shape))
    (t * 2).sum().backward()
    assert seen == [(3,)]
    with pytest.raises(ValueError, match="unknown hook kind"):
        hook_kinds.register(nn.Linear(2, 2), "forward_post", print)
    with pytest.raises(ValueError, match="not always_call"):
        hook_kinds.register(nn.Linear(2, 2), "full_backward_pre", print, {"always_call": True})
