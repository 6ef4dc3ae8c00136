"""``torch.utils._pytree``'s ``*_only`` functions over a model's nested outputs (HF-style dicts
of logits and caches with None and ints among them): what torch gives, leaf for leaf."""
import pytest

import disthook

torch = pytest.importorskip("torch")


def outputs(T):
    return {"logits": T.ones(2, 3), "past": (T.full((2,), 2.0), [3, None]), "loss": None}


@pytest.mark.parametrize("T", [torch, disthook], ids=["torch", "disthook"])
def test_only_functions_act_on_the_selected_leaves(T):
    pytree = T.utils._pytree
    out = outputs(T)
    summed = pytree.tree_map_only(T.Tensor, lambda t: t.sum().item(), out)
    assert summed == {"logits": 6.0, "past": (4.0, [3, None]), "loss": None}
    doubled = pytree.tree_map_only((int, float), lambda n: n * 2, out)
    assert doubled["past"][1] == [6, None] and doubled["logits"] is out["logits"]
    by_pred = pytree.tree_map_only(lambda x: x is None, lambda _: "none", out)
    assert by_pred["loss"] == "none" and by_pred["past"][1] == [3, "none"]
    seen = []
    assert pytree.tree_map_only_(T.Tensor, lambda t: seen.append(t.numel()), out) is out
    assert seen == [6, 2]
    assert pytree.tree_all_only(T.Tensor, lambda t: t.dim() >= 1, out)
    assert not pytree.tree_any_only(int, lambda n: n > 5, out)
    assert len(list(pytree.tree_iter(out))) == 5
    assert pytree.tree_is_leaf(out["logits"]) and not pytree.tree_is_leaf(out["past"])
    with pytest.raises(TypeError, match="must be a type, a tuple of types, or a callable"):
        pytree.tree_map_only(3, abs, out)
