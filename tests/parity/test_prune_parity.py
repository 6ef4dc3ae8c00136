"""disthook.nn.utils.prune against torch 2.13's on the same weights: masks, pruned weights,
parameter / buffer / state_dict names, forward outputs, gradients of ``<name>_orig``,
containers of several prunings, global pruning, remove, and the errors (type and text).
The random methods draw from different generators, so they are compared by structure in
tests/test_prune.py, not here."""
import math

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

import torch.nn.utils.prune as t_prune

import disthook.nn.utils.prune as dh_prune


def distinct(shape, seed=0) -> np.ndarray:
    """Values of distinct magnitudes (no ties for a top-k to break differently)."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    magnitude = rng.permutation(size) / size + 0.05 + seed * 1.4142e-4  # none shared
    return (magnitude * rng.choice([-1, 1], size)).reshape(shape).astype(np.float32)


def make_pair(make):
    """The same model in both libraries, with distinct-magnitude weights."""
    dh_m, t_m = make(disthook.nn), make(torch.nn)
    for seed, (name, p) in enumerate(dh_m.named_parameters()):
        value = distinct(tuple(p.shape), seed)
        p.data = disthook.tensor(value)
        t_m.get_parameter(name).data = torch.tensor(value)
    return dh_m, t_m


def linear(nn):
    return nn.Linear(6, 5)


def conv(nn):
    return nn.Conv2d(3, 4, 3)


def mlp(nn):
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def assert_same(dh_m, t_m, x: np.ndarray) -> None:
    """Names, values of state, the forward output and the gradients of every parameter."""
    assert [n for n, _ in dh_m.named_parameters()] == [n for n, _ in t_m.named_parameters()]
    assert [n for n, _ in dh_m.named_buffers()] == [n for n, _ in t_m.named_buffers()]
    dh_state, t_state = dh_m.state_dict(), t_m.state_dict()
    assert list(dh_state) == list(t_state)
    for k in dh_state:
        np.testing.assert_allclose(dh_state[k].numpy(), t_state[k].numpy(), err_msg=k)
    assert dh_prune.is_pruned(dh_m) == t_prune.is_pruned(t_m)
    dh_out, t_out = dh_m(disthook.tensor(x)), t_m(torch.tensor(x))
    np.testing.assert_allclose(dh_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    dh_out.pow(2).sum().backward()
    t_out.pow(2).sum().backward()
    for (name, p), (_, q) in zip(dh_m.named_parameters(), t_m.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=2e-5,
                                   err_msg=name)
        if name.endswith("_orig"):  # no gradient where pruned
            owner, _, leaf = name.rpartition(".")
            mask = getattr(dh_m.get_submodule(owner), leaf[:-len("orig")] + "mask").numpy()
            assert (p.grad.numpy()[mask == 0] == 0).all()
    for name, module in dh_m.named_modules():  # the plain attribute, recomputed by the hook
        t_module = t_m.get_submodule(name)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, dh_prune.BasePruningMethod):
                tn = hook._tensor_name
                assert tn not in module._parameters and tn not in t_module._parameters
                np.testing.assert_allclose(getattr(module, tn).detach().numpy(),
                                           getattr(t_module, tn).detach().numpy())


def x_for(make) -> np.ndarray:
    return distinct((2, 3, 6, 6) if make is conv else (2, 6), 99)


@pytest.mark.parametrize("make", [linear, conv])
@pytest.mark.parametrize("amount", [0, 3, 0.3, 0.5, 1.0])
def test_l1_unstructured(make, amount):
    dh_m, t_m = make_pair(make)
    dh_prune.l1_unstructured(dh_m, "weight", amount=amount)
    t_prune.l1_unstructured(t_m, "weight", amount=amount)
    assert_same(dh_m, t_m, x_for(make))


# torch.norm's "fro" takes two dims at most, so torch raises for a Conv2d's weight: "fro"
# is compared on a Linear's
@pytest.mark.parametrize("make, n", [(make, n) for make in (linear, conv)
                                     for n in (1, 2, 3, "fro", math.inf, -math.inf)
                                     if (make, n) != (conv, "fro")])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_ln_structured(make, n, dim):
    dh_m, t_m = make_pair(make)
    dh_prune.ln_structured(dh_m, "weight", amount=0.5, n=n, dim=dim)
    t_prune.ln_structured(t_m, "weight", amount=0.5, n=n, dim=dim)
    assert_same(dh_m, t_m, x_for(make))


def test_importance_scores_and_bias():
    dh_m, t_m = make_pair(linear)
    scores = distinct((5, 6), 7)
    dh_prune.l1_unstructured(dh_m, "weight", 0.4, importance_scores=disthook.tensor(scores))
    t_prune.l1_unstructured(t_m, "weight", 0.4, importance_scores=torch.tensor(scores))
    dh_prune.ln_structured(dh_m, "weight", 2, n=1, dim=0,
                           importance_scores=disthook.tensor(scores))
    t_prune.ln_structured(t_m, "weight", 2, n=1, dim=0, importance_scores=torch.tensor(scores))
    dh_prune.l1_unstructured(dh_m, "bias", 2)
    t_prune.l1_unstructured(t_m, "bias", 2)
    assert_same(dh_m, t_m, x_for(linear))


def test_custom_from_mask_and_identity():
    dh_m, t_m = make_pair(linear)
    mask = (distinct((5, 6), 3) > 0).astype(np.float32)
    dh_prune.custom_from_mask(dh_m, "weight", disthook.tensor(mask))
    t_prune.custom_from_mask(t_m, "weight", torch.tensor(mask))
    dh_prune.identity(dh_m, "bias")
    t_prune.identity(t_m, "bias")
    assert_same(dh_m, t_m, x_for(linear))


def test_containers_of_several_prunings():
    """Each new mask is computed on what the earlier ones kept: unstructured on the kept
    entries, structured on the kept channels, a custom mask over everything."""
    dh_m, t_m = make_pair(conv)
    mask = (distinct((4, 3, 3, 3), 5) > -0.6).astype(np.float32)
    steps = [("l1_unstructured", {"amount": 0.3}),
             ("ln_structured", {"amount": 1, "n": 2, "dim": 0}),
             ("l1_unstructured", {"amount": 5}),
             ("ln_structured", {"amount": 0.5, "n": 1, "dim": 1}),
             ("custom_from_mask", {"mask": mask})]
    for fn, kwargs in steps:
        dh_kwargs = {k: disthook.tensor(v) if isinstance(v, np.ndarray) else v
                     for k, v in kwargs.items()}
        t_kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                    for k, v in kwargs.items()}
        getattr(dh_prune, fn)(dh_m, "weight", **dh_kwargs)
        getattr(t_prune, fn)(t_m, "weight", **t_kwargs)
        np.testing.assert_array_equal(dh_m.weight_mask.numpy(), t_m.weight_mask.numpy(),
                                      err_msg=fn)
    (dh_hook,) = dh_m._forward_pre_hooks.values()
    (t_hook,) = t_m._forward_pre_hooks.values()
    assert isinstance(dh_hook, dh_prune.PruningContainer)
    assert [type(h).__name__ for h in dh_hook] == [type(h).__name__ for h in t_hook]
    assert_same(dh_m, t_m, x_for(conv))


def test_global_unstructured():
    dh_m, t_m = make_pair(mlp)
    dh_prune.l1_unstructured(dh_m[2], "weight", 4)  # a tensor pruned before: kept pruned
    t_prune.l1_unstructured(t_m[2], "weight", 4)
    scores = distinct((5,), 11)
    dh_prune.global_unstructured(
        [(dh_m[0], "weight"), (dh_m[0], "bias"), (dh_m[2], "weight")],
        pruning_method=dh_prune.L1Unstructured, amount=0.4,
        importance_scores={(dh_m[0], "bias"): disthook.tensor(scores)})
    t_prune.global_unstructured(
        [(t_m[0], "weight"), (t_m[0], "bias"), (t_m[2], "weight")],
        pruning_method=t_prune.L1Unstructured, amount=0.4,
        importance_scores={(t_m[0], "bias"): torch.tensor(scores)})
    assert_same(dh_m, t_m, x_for(mlp))


@pytest.mark.parametrize("make", [linear, mlp])
def test_remove(make):
    dh_m, t_m = make_pair(make)
    dh_sub, t_sub = (dh_m, t_m) if make is linear else (dh_m[2], t_m[2])
    dh_prune.l1_unstructured(dh_sub, "weight", 0.5)
    t_prune.l1_unstructured(t_sub, "weight", 0.5)
    dh_prune.ln_structured(dh_sub, "weight", 1, n=2, dim=1)
    t_prune.ln_structured(t_sub, "weight", 1, n=2, dim=1)
    dh_prune.remove(dh_sub, "weight")
    t_prune.remove(t_sub, "weight")
    assert isinstance(dh_sub.weight, disthook.nn.Parameter)
    assert not dh_sub._forward_pre_hooks
    assert_same(dh_m, t_m, x_for(make))


def test_gradients_only_where_kept_and_load_state_dict():
    dh_m, t_m = make_pair(linear)
    dh_prune.l1_unstructured(dh_m, "weight", 0.5)
    t_prune.l1_unstructured(t_m, "weight", 0.5)
    assert_same(dh_m, t_m, x_for(linear))
    assert (dh_m.weight_orig.grad.numpy()[dh_m.weight_mask.numpy() == 0] == 0).all()
    fresh = linear(disthook.nn)
    dh_prune.identity(fresh, "weight")
    fresh.load_state_dict({k: disthook.tensor(v.numpy()) for k, v in t_m.state_dict().items()})
    x = x_for(linear)
    np.testing.assert_allclose(fresh(disthook.tensor(x)).detach().numpy(),
                               t_m(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_deepcopy_as_torch():
    """torch refuses to deepcopy a module whose pruned attribute still holds a graph (right
    after pruning) and copies it after a forward under no_grad; the same here."""
    import copy

    dh_m, t_m = make_pair(linear)
    dh_prune.l1_unstructured(dh_m, "weight", 0.5)
    t_prune.l1_unstructured(t_m, "weight", 0.5)
    with pytest.raises(RuntimeError) as t_error:
        copy.deepcopy(t_m)
    with pytest.raises(RuntimeError) as dh_error:
        copy.deepcopy(dh_m)
    assert str(dh_error.value) == str(t_error.value)
    x = x_for(linear)
    with disthook.no_grad():
        dh_m(disthook.tensor(x))
    with torch.no_grad():
        t_m(torch.tensor(x))
    dh_copy, t_copy = copy.deepcopy(dh_m), copy.deepcopy(t_m)
    assert_same(dh_copy, t_copy, x)
    assert dh_copy.weight_orig is not dh_m.weight_orig


def errors(call):
    """(type name, message) of what ``call`` raises in each library."""
    out = []
    for lib, prune in ((disthook, dh_prune), (torch, t_prune)):
        with pytest.raises(Exception) as info:
            call(lib, prune)
        out.append((type(info.value).__name__, str(info.value)))
    return out


SAME_MESSAGE = {  # disthook's text is torch's, at most followed by what was expected
    "type": lambda lib, p: p.l1_unstructured(lib.nn.Linear(3, 2), "weight", "half"),
    "negative": lambda lib, p: p.l1_unstructured(lib.nn.Linear(3, 2), "weight", -1),
    "over one": lambda lib, p: p.random_unstructured(lib.nn.Linear(3, 2), "weight", 1.5),
    "too many": lambda lib, p: p.l1_unstructured(lib.nn.Linear(3, 2), "weight", 7),
    "too many channels": lambda lib, p: p.ln_structured(lib.nn.Linear(3, 2), "weight", 3,
                                                        n=2, dim=0),
    "structured 1-d": lambda lib, p: p.ln_structured(lib.nn.Linear(3, 2), "bias", 1, n=2,
                                                     dim=0),
    "bad dim": lambda lib, p: p.random_structured(lib.nn.Linear(3, 2), "weight", 1, dim=2),
    "global not iterable": lambda lib, p: p.global_unstructured(3, p.L1Unstructured,
                                                                amount=1),
    "global scores": lambda lib, p: p.global_unstructured(
        [(lib.nn.Linear(3, 2), "weight")], p.L1Unstructured, importance_scores=[], amount=1),
    "remove unpruned": lambda lib, p: p.remove(lib.nn.Linear(3, 2), "weight"),
    "scores shape": lambda lib, p: p.l1_unstructured(lib.nn.Linear(3, 2), "weight", 1,
                                                     importance_scores=lib.ones(3)),
    "custom mask shape": lambda lib, p: p.custom_from_mask(lib.nn.Linear(3, 2), "weight",
                                                           lib.ones(3)),
    "container of a non-method": lambda lib, p: p.PruningContainer(
        p.Identity.apply(lib.nn.Linear(3, 2), "weight")).add_pruning_method(3),
    "unknown attribute": lambda lib, p: p.l1_unstructured(lib.nn.Linear(3, 2), "nope", 1),
}

SAME_TYPE = {  # the texts name each library's classes
    "global structured": lambda lib, p: p.global_unstructured(
        [(lib.nn.Linear(3, 2), "weight")], p.LnStructured, amount=1, n=2),
    "container of another tensor": lambda lib, p: p.PruningContainer(
        p.Identity.apply(lib.nn.Linear(3, 2), "weight")).add_pruning_method(
        p.Identity.apply(lib.nn.Linear(3, 2), "bias")),
}


@pytest.mark.parametrize("case", sorted(SAME_MESSAGE))
def test_errors_same_message(case):
    (dh_type, dh_text), (t_type, t_text) = errors(SAME_MESSAGE[case])
    assert dh_type == t_type
    assert dh_text.startswith(t_text), (dh_text, t_text)


@pytest.mark.parametrize("case", sorted(SAME_TYPE))
def test_errors_same_type(case):
    (dh_type, dh_text), (t_type, t_text) = errors(SAME_TYPE[case])
    assert dh_type == t_type, dh_text
    assert dh_text.split("<")[0] == t_text.split("<")[0]


def test_failed_pruning_leaves_the_module_as_it_was():
    names = []
    for lib, prune in ((disthook, dh_prune), (torch, t_prune)):
        m = lib.nn.Linear(3, 2)
        weight = m.weight
        with pytest.raises(ValueError):
            prune.l1_unstructured(m, "weight", 7)
        assert m.weight is weight
        names.append([n for n, _ in m.named_parameters()])
        assert not list(m.named_buffers()) and not m._forward_pre_hooks
    assert names[0] == names[1] == ["bias", "weight"]  # the parameter registered again


def test_a_pruning_method_of_ones_own():
    """The tutorial's kind: a subclass with its own compute_mask, written with tensor ops."""
    def foobar(prune, module, name):
        class FooBar(prune.BasePruningMethod):
            PRUNING_TYPE = "unstructured"

            def compute_mask(self, t, default_mask):
                mask = default_mask.clone()
                mask.view(-1)[::2] = 0
                return mask

        FooBar.apply(module, name)
        return module

    dh_m, t_m = make_pair(mlp)
    foobar(dh_prune, dh_m[0], "bias")
    foobar(t_prune, t_m[0], "bias")
    dh_prune.l1_unstructured(dh_m[0], "bias", 1)  # on the entries FooBar kept
    t_prune.l1_unstructured(t_m[0], "bias", 1)
    assert_same(dh_m, t_m, x_for(mlp))


def test_a_pruned_checkpoint_saved_by_torch_loads_here(tmp_path):
    """Lottery-ticket code saves a pruned model's state dict (weight_orig, weight_mask) and
    loads it into a model pruned with identity(): torch's file, disthook's model."""
    dh_m, t_m = make_pair(mlp)
    for i in (0, 2):
        t_prune.l1_unstructured(t_m[i], "weight", 0.4)
        dh_prune.identity(dh_m[i], "weight")
    torch.save(t_m.state_dict(), tmp_path / "pruned.pt")
    dh_m.load_state_dict(disthook.load(tmp_path / "pruned.pt"))
    assert_same(dh_m, t_m, x_for(mlp))
