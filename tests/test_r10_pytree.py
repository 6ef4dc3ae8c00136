"""``torch.utils._pytree`` as programs use it (x-transformers and vit-pytorch flatten a model's
nested outputs and put them back; denoising-diffusion-pytorch maps over ``(args, kwargs)``;
diffusers registers its output classes): leaves, specs, errors and ``tree_map`` against
torch's. It was an AttributeError."""
import collections

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")
import torch.utils._pytree as theirs

import disthook.utils._pytree as ours

Pair = collections.namedtuple("Pair", "left right")


def _trees(lib):
    t = lib.arange(6.0).reshape(2, 3)
    return [
        1, None, (), [], t,
        (t, [1, 2], {"b": t * 2, "a": (None, 3)}),
        collections.OrderedDict(x=[t], y=4),
        collections.defaultdict(list, {"k": [1, t]}),
        Pair(t, [5]),
        collections.deque([1, 2], maxlen=3),
        t.max(dim=1),
        [[[]], {}, ((),)],
    ]


def _plain(x):
    if hasattr(x, "numpy") and hasattr(x, "detach"):
        return ("tensor", x.detach().numpy().tolist())
    return repr(x)


@pytest.mark.parametrize("index", range(len(_trees(disthook))))
def test_flatten_and_unflatten_as_torch(index):
    mine, torchs = _trees(disthook)[index], _trees(torch)[index]
    leaves, spec = ours.tree_flatten(mine)
    t_leaves, t_spec = theirs.tree_flatten(torchs)
    assert [_plain(v) for v in leaves] == [_plain(v) for v in t_leaves]
    assert (spec.num_leaves, spec.num_nodes, spec.is_leaf()) == (
        t_spec.num_leaves, t_spec.num_nodes, t_spec.is_leaf())
    back = ours.tree_unflatten(leaves, spec)
    t_back = theirs.tree_unflatten(t_leaves, t_spec)
    assert type(back).__name__ == type(t_back).__name__ or hasattr(back, "indices")
    assert [_plain(v) for v in ours.tree_leaves(back)] == [_plain(v) for v in t_leaves]
    assert ours.tree_structure(back) == spec


def test_tree_map_and_its_errors_as_torch():
    for lib, pt in ((torch, theirs), (disthook, ours)):
        x = lib.ones(2, requires_grad=True)
        tree = ((x * 2, [x]), {"k": 3})
        mapped = pt.tree_map(lambda v, lib=lib: v.detach() if isinstance(v, lib.Tensor) else v,
                             tree)
        assert not mapped[0][0].requires_grad and mapped[1] == {"k": 3}
        assert pt.tree_map(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
        assert pt.tree_map(len, ([1], [[1, 2]]), is_leaf=lambda v: isinstance(v, list)) == (1, 1)
        with pytest.raises(ValueError, match="arity mismatch"):
            pt.tree_map(lambda a, b: a, (1, [2]), (10, [20, 3]))
        with pytest.raises(ValueError, match="has length 2 but the spec refers to a pytree "
                                             "that holds 3 items"):
            pt.tree_unflatten([1, 2], pt.tree_structure((1, [2, 3])))
        with pytest.raises(TypeError, match="to be an instance of PyTreeSpec"):
            pt.tree_unflatten([1], "spec")
        seen = []
        assert pt.tree_map_(seen.append, [1, (2,)]) == [1, (2,)]
        assert seen == [1, 2]
        assert pt.tree_all(lambda v: v > 0, [1, (2,)]) and pt.tree_any(lambda v: v > 1, [1])\
            is False


def test_a_registered_output_class_round_trips_as_in_diffusers():
    class Output(collections.OrderedDict):
        pass

    class Fresh:
        def __init__(self, a, b):
            self.a, self.b = a, b

    for pt in (theirs, ours):
        with pytest.warns(FutureWarning, match="_register_pytree_node` is deprecated"):
            pt._register_pytree_node(Output, pt._dict_flatten,
                                     lambda values, context, pt=pt: Output(
                                         **pt._dict_unflatten(values, context)))
        pt.register_pytree_node(Fresh, lambda f: ([f.a, f.b], None),
                                lambda values, _: Fresh(*values))
        with pytest.raises(ValueError, match="already registered"):
            pt.register_pytree_node(Fresh, lambda f: ([], None), lambda v, c: Fresh(0, 0))
        leaves, spec = pt.tree_flatten(Output(x=1, y=Fresh(2, [3])))
        assert leaves == [1, 2, 3]
        back = pt.tree_unflatten([10, 20, 30], spec)
        assert type(back) is Output and back["x"] == 10
        assert (back["y"].a, back["y"].b) == (20, [30])


def test_a_model_s_nested_outputs_go_through_a_flat_step():
    """x-transformers' pattern: flatten the outputs, change the first leaf, unflatten."""
    lin = disthook.nn.Linear(3, 2)
    x = disthook.ones(4, 3)
    out = (lin(x), {"hidden": [x]})
    (first, *rest), spec = ours.tree_flatten(out)
    again = ours.tree_unflatten((first.relu(), *rest), spec)
    again[0].sum().backward()
    assert lin.weight.grad is not None and again[1]["hidden"][0] is x
    np.testing.assert_array_equal(again[0].detach().numpy(), lin(x).relu().detach().numpy())
