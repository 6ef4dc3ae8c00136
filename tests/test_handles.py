"""torch.utils.hooks.RemovableHandle: hook_semantics.md §11 (without module hooks).

Each test runs under disthook and torch (``T`` fixture, see hook_conformance.py).
"""
from __future__ import annotations

import gc
import pickle
import weakref
from collections import OrderedDict

import pytest
from hook_conformance import exact, load, vals


@pytest.fixture(params=["disthook", "torch"])
def T(request):
    """The library under test (hook_conformance.load skips torch when it is missing)."""
    return load(request.param)


def RH(T):
    return T.utils.hooks.RemovableHandle


@pytest.fixture
def restore_next_id(T):
    """Tests that lower the class-wide counter put it back (never below where it was)."""
    before = RH(T).next_id
    yield
    RH(T).next_id = max(before, RH(T).next_id)


# ---- ids ----------------------------------------------------------------------------------


def test_ids_come_from_one_counter_shared_by_every_hook_kind(T):
    # [e11 11a]
    x = T.ones(1, requires_grad=True)
    y = x * 1
    start = RH(T).next_id
    handles = [
        x.register_hook(lambda g: g),
        (x * 1).grad_fn.register_prehook(lambda g: None),
        y.register_hook(lambda g: None),
        y.grad_fn.register_hook(lambda gi, go: None),
        x.register_post_accumulate_grad_hook(lambda t: None),
        RH(T)(OrderedDict()),
        y.grad_fn.next_functions[0][0].register_prehook(lambda go: None),
    ]
    assert [h.id for h in handles] == list(range(start, start + 7))
    assert RH(T).next_id == start + 7
    assert all(type(h) is RH(T) for h in handles)


def test_ids_are_ints_and_never_reused(T):
    x = T.ones(1, requires_grad=True)
    h1 = x.register_hook(lambda g: None)
    h1.remove()
    h2 = x.register_hook(lambda g: None)
    assert isinstance(h1.id, int)
    assert h2.id == h1.id + 1
    assert list(x._backward_hooks.keys()) == [h2.id]


# ---- standalone use ----------------------------------------------------------------------


def test_standalone_with_extra_dict_list(T):
    # [e11 11b]
    d, e1, e2 = OrderedDict(), OrderedDict(), OrderedDict()
    h = RH(T)(d, extra_dict=[e1, e2])
    d[h.id] = "f"
    e1[h.id] = True
    assert h.hooks_dict_ref() is d
    assert isinstance(h.extra_dict_ref, tuple)
    assert [r() for r in h.extra_dict_ref] == [e1, e2]
    h.remove()
    assert (dict(d), dict(e1), dict(e2)) == ({}, {}, {})
    h.remove()  # second remove: silent
    assert (dict(d), dict(e1), dict(e2)) == ({}, {}, {})


def test_standalone_with_single_extra_dict(T):
    d, e = OrderedDict(), OrderedDict()
    h = RH(T)(d, extra_dict=e)
    assert len(h.extra_dict_ref) == 1
    assert h.extra_dict_ref[0]() is e
    d[h.id] = "f"
    e[h.id] = True
    e["other"] = 1
    h.remove()
    assert dict(d) == {}
    assert dict(e) == {"other": 1}


def test_no_extra_dict_gives_empty_tuple(T):
    h = RH(T)(OrderedDict())
    assert h.extra_dict_ref == ()


def test_remove_only_deletes_own_id(T):
    d = OrderedDict()
    h1 = RH(T)(d)
    h2 = RH(T)(d)
    d[h1.id] = "a"
    d[h2.id] = "b"
    h1.remove()
    assert list(d.items()) == [(h2.id, "b")]


def test_remove_when_id_already_gone_is_silent(T):
    d = OrderedDict()
    h = RH(T)(d)
    h.remove()
    d[h.id] = "x"
    del d[h.id]
    h.remove()
    assert dict(d) == {}


def test_plain_dict_is_rejected(T):
    with exact(TypeError, "cannot create weak reference to 'dict' object"):
        RH(T)({})


def test_plain_dict_as_extra_dict_is_rejected(T):
    with exact(TypeError, "cannot create weak reference to 'dict' object"):
        RH(T)(OrderedDict(), extra_dict={})
    with exact(TypeError, "cannot create weak reference to 'dict' object"):
        RH(T)(OrderedDict(), extra_dict=[OrderedDict(), {}])


def test_context_manager(T):
    # [e11 11b]
    d = OrderedDict()
    with RH(T)(d) as hh:
        assert type(hh) is RH(T)
        d[hh.id] = "g"
        assert dict(d) == {hh.id: "g"}
    assert dict(d) == {}


def test_context_manager_does_not_suppress_exceptions(T):
    d = OrderedDict()
    with pytest.raises(ValueError, match="^boom$"), RH(T)(d) as hh:
        d[hh.id] = 1
        raise ValueError("boom")
    assert dict(d) == {}


def test_enter_returns_the_handle_itself(T):
    h = RH(T)(OrderedDict())
    assert h.__enter__() is h
    assert h.__exit__(None, None, None) in (None, False)


# ---- weak references ---------------------------------------------------------------------


def test_handle_holds_dict_weakly(T):
    d = OrderedDict()
    h = RH(T)(d)
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None
    assert h.hooks_dict_ref() is None
    h.remove()  # dead dict: a no-op


def test_handle_does_not_keep_leaf_alive(T):
    x = T.ones(1, requires_grad=True)
    h = x.register_hook(lambda g: None)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None
    assert h.hooks_dict_ref() is None
    h.remove()


def test_post_acc_handle_does_not_keep_leaf_alive(T):
    x = T.ones(1, requires_grad=True)
    h = x.register_post_accumulate_grad_hook(lambda t: None)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None
    h.remove()


def test_handle_dict_is_the_tensors_hook_dict(T):
    x = T.ones(1, requires_grad=True)

    def f(g):
        return None

    h = x.register_hook(f)
    assert h.hooks_dict_ref() is x._backward_hooks
    assert h.hooks_dict_ref()[h.id] is f


def test_removing_through_handle_stops_leaf_hook(T):
    x = T.tensor([1.0], requires_grad=True)
    h = x.register_hook(lambda g: g * 10)
    h.remove()
    (x * 1).sum().backward()
    assert vals(x.grad) == [1.0]


# ---- pickling ------------------------------------------------------------------------------


def test_pickle_keeps_id_and_bumps_next_id(T, restore_next_id):
    d = OrderedDict()
    h = RH(T)(d)
    d[h.id] = "v"
    data = pickle.dumps(h)
    RH(T).next_id = 0
    h2 = pickle.loads(data)
    assert h2.id == h.id
    assert RH(T).next_id == h.id + 1


def test_pickle_does_not_lower_next_id(T):
    d = OrderedDict()
    h = RH(T)(d)
    data = pickle.dumps(h)
    RH(T)(OrderedDict())
    RH(T)(OrderedDict())
    before = RH(T).next_id
    h2 = pickle.loads(data)
    assert h2.id == h.id
    assert RH(T).next_id == before


def test_pickle_with_extra_dict(T):
    d, e = OrderedDict(), OrderedDict()
    h = RH(T)(d, extra_dict=e)
    h2 = pickle.loads(pickle.dumps(h))
    assert h2.id == h.id
    assert len(h2.extra_dict_ref) == 1
    h2.remove()  # the unpickled dicts are dead copies: a no-op
