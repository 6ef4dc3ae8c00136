"""disthook.nn.utils.prune on its own (the deterministic methods are compared with torch in
tests/parity/test_prune_parity.py): the random methods' counts, structure and
reproducibility, the module's form while pruned and after remove, a method used without a
module, and the refusals."""
import copy
import pickle

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.nn.utils import prune


def zero_channels(mask: np.ndarray, dim: int) -> int:
    """How many channels along ``dim`` are all zero; every other entry must be 1."""
    others = tuple(d for d in range(mask.ndim) if d != dim)
    kept = mask.sum(axis=others)
    whole = int(np.prod([mask.shape[d] for d in others]))
    assert set(kept.tolist()) <= {0.0, float(whole)}, "a channel half pruned"
    return int((kept == 0).sum())


@pytest.mark.parametrize("amount, pruned", [(0, 0), (5, 5), (0.25, 8), (1.0, 30)])
def test_random_unstructured_prunes_that_many_reproducibly(amount, pruned):
    masks = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        m = prune.random_unstructured(nn.Linear(6, 5), "weight", amount)
        masks.append(m.weight_mask.numpy())
        assert (masks[-1] == 0).sum() == pruned
        assert set(np.unique(masks[-1])) <= {0.0, 1.0}
    np.testing.assert_array_equal(masks[0], masks[1])
    if 0 < pruned < 30:
        assert not np.array_equal(masks[0], masks[2])


@pytest.mark.parametrize("dim", [0, 1, -1, 3])
def test_random_structured_prunes_whole_channels(dim):
    masks = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        m = prune.random_structured(nn.Conv2d(3, 6, 3), "weight", amount=0.5, dim=dim)
        masks.append(m.weight_mask.numpy())
        size = m.weight_orig.shape[dim]
        assert zero_channels(masks[-1], dim % 4) == round(0.5 * size)
    np.testing.assert_array_equal(masks[0], masks[1])


def test_random_structured_on_top_prunes_among_kept_channels():
    torch.manual_seed(0)
    m = nn.Conv2d(3, 8, 3)
    prune.ln_structured(m, "weight", amount=2, n=1, dim=0)
    first = m.weight_mask.numpy().copy()
    prune.random_structured(m, "weight", amount=0.5, dim=0)  # half of the 6 left: 3
    assert zero_channels(m.weight_mask.numpy(), 0) == 5
    assert (m.weight_mask.numpy() <= first).all()
    prune.random_unstructured(m, "weight", amount=10)
    assert (m.weight_mask.numpy() == 0).sum() == 5 * 27 + 10
    (hook,) = m._forward_pre_hooks.values()
    assert [type(h).__name__ for h in hook] == ["LnStructured", "RandomStructured",
                                                 "RandomUnstructured"]


def test_the_module_while_pruned_and_after_remove():
    torch.manual_seed(0)
    m = nn.Linear(4, 3)
    weight = m.weight
    prune.l1_unstructured(m, "weight", amount=0.5)
    assert m.weight_orig is weight
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight_orig"]
    assert [n for n, _ in m.named_buffers()] == ["weight_mask"]
    assert list(m.state_dict()) == ["bias", "weight_orig", "weight_mask"]
    assert not isinstance(m.weight, nn.Parameter) and "weight" in m.__dict__
    assert isinstance(next(iter(m._forward_pre_hooks.values())), prune.L1Unstructured)
    assert prune.is_pruned(nn.Sequential(nn.ReLU(), m)) and not prune.is_pruned(nn.Linear(2, 2))

    # an optimizer step moves weight_orig; the next forward's weight follows, still masked
    x = torch.randn(2, 4)
    m(x).pow(2).sum().backward()
    mask = m.weight_mask.numpy()
    assert (m.weight_orig.grad.numpy()[mask == 0] == 0).all()
    assert (m.weight_orig.grad.numpy()[mask == 1] != 0).all()
    torch.optim.SGD(m.parameters(), lr=0.5).step()
    m(x)
    np.testing.assert_array_equal(m.weight.detach().numpy(),
                                  m.weight_orig.detach().numpy() * mask)

    prune.remove(m, "weight")
    assert m.weight is weight and isinstance(m.weight, nn.Parameter)
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight"]
    assert not list(m.named_buffers()) and not m._forward_pre_hooks
    assert (m.weight.detach().numpy()[mask == 0] == 0).all()
    with pytest.raises(ValueError, match="has to be pruned before pruning can be removed"):
        prune.remove(m, "weight")


def test_copies_and_pickles_of_a_pruned_module():
    torch.manual_seed(0)
    m = prune.l1_unstructured(nn.Linear(4, 3), "weight", amount=4)
    with torch.no_grad():
        m(torch.ones(1, 4))  # the pruned weight no longer holds a graph (as torch wants)
    for twin in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert prune.is_pruned(twin)
        twin.weight_orig.data = twin.weight_orig.data * 2
        np.testing.assert_allclose(twin(torch.ones(1, 4)).detach().numpy(),
                                   (torch.ones(1, 4) @ (m.weight * 2).T + m.bias
                                    ).detach().numpy(), rtol=1e-6)


def test_a_method_without_a_module():
    t = torch.tensor([[0.5, -3.0, 1.0], [-0.1, 2.0, 0.2]])
    method = prune.L1Unstructured(amount=2)
    np.testing.assert_allclose(method.prune(t).numpy(), [[0.5, -3.0, 1.0], [0.0, 2.0, 0.0]])
    scores = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_allclose(method.prune(t, importance_scores=scores).numpy(),
                               [[0.0, 0.0, 1.0], [-0.1, 2.0, 0.2]])
    with pytest.raises(AssertionError, match="has to be pruned"):
        method.apply_mask(nn.Linear(3, 2))
    with pytest.raises(AssertionError, match="has to be pruned before pruning can be removed"):
        method.remove(nn.Linear(3, 2))


def test_global_unstructured_random_counts_over_all_tensors():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    prune.global_unstructured([(model[0], "weight"), (model[1], "weight")],
                              pruning_method=prune.RandomUnstructured, amount=0.5)
    pruned = (model[0].weight_mask.numpy() == 0).sum() + (model[1].weight_mask.numpy() == 0).sum()
    assert pruned == 9
    with pytest.raises(ValueError, match="parameters is empty"):
        prune.global_unstructured([], prune.L1Unstructured, amount=1)


def test_amounts_of_numpy_types_and_errors():
    m = prune.l1_unstructured(nn.Linear(4, 2), "weight", np.int64(3))
    assert (m.weight_mask.numpy() == 0).sum() == 3
    m = prune.l1_unstructured(nn.Linear(4, 2), "weight", np.float32(0.5))
    assert (m.weight_mask.numpy() == 0).sum() == 4
    with pytest.raises(TypeError, match="Invalid type for amount"):
        prune.RandomStructured(amount=None)
    with pytest.raises(ValueError, match=r"amount=9 should be smaller than the number of "
                                         r"parameters to prune=8"):
        prune.random_unstructured(nn.Linear(4, 2), "weight", 9)


def test_a_failed_second_pruning_keeps_the_first():
    """torch drops the hook of the pruning made before when the next one fails (the pruned
    weight would then go stale); here the module stays pruned as it was."""
    class Odd(prune.BasePruningMethod):  # structured, but no `dim`
        PRUNING_TYPE = "structured"

        def compute_mask(self, t, default_mask):
            return default_mask

    for first in (prune.identity, lambda m, n: prune.ln_structured(
            prune.l1_unstructured(m, n, 2), n, 1, n=1, dim=0)):
        m = first(nn.Linear(4, 2), "weight")
        hooks = list(m._forward_pre_hooks.items())
        methods = list(hooks[0][1]) if isinstance(hooks[0][1], prune.PruningContainer) else None
        mask = m.weight_mask.numpy().copy()
        with pytest.raises(AttributeError, match="no attribute `dim`"):
            Odd.apply(m, "weight")
        with pytest.raises(ValueError, match="amount=-1"):
            prune.l1_unstructured(m, "weight", -1)
        with pytest.raises(AssertionError, match="importance_scores should have the same"):
            prune.l1_unstructured(m, "weight", 1, importance_scores=torch.ones(3))
        assert list(m._forward_pre_hooks.items()) == hooks
        if methods is not None:
            assert list(hooks[0][1]) == methods
        np.testing.assert_array_equal(m.weight_mask.numpy(), mask)
        assert [n for n, _ in m.named_parameters()] == ["bias", "weight_orig"]


def test_containers_made_by_hand():
    m = nn.Linear(4, 2)
    first = prune.L1Unstructured.apply(m, "weight", 2)
    second = prune.L1Unstructured(1)
    second._tensor_name = "weight"
    for container in (prune.PruningContainer(first, second),
                      prune.PruningContainer([first, second])):
        assert container._tensor_name == "weight" and list(container) == [first, second]
        assert len(container) == 2 and container[-1] is second
    nested = prune.PruningContainer(prune.PruningContainer(first))
    assert len(nested) == 1 and isinstance(nested[0], prune.PruningContainer)
    with pytest.raises(ValueError, match="acting on the parameter named 'weight'"):
        prune.PruningContainer(first, prune.Identity.apply(nn.Linear(4, 2), "bias"))
