"""What a one-process user does with the README's GPT example keeps working once it is
deployed (issue 29, symptom 8), on 2 and 3 workers against one process: every function of the
hook toolkit with its default arguments (modules that run on the client, such as the
``transformer`` container whose blocks are on several workers, take ordinary hooks there);
save, load and recover with a plain optimizer (momentum and Adam state included); and
``cluster.load`` of a checkpoint of every placement (over the tree, a chain, whole)."""
import sys
from pathlib import Path

import numpy as np
import pytest

import disthook as torch
from disthook import hooks as toolkit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import gpt  # examples/gpt.py

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")]
CLUSTER_WORKERS = 3


def fresh_gpt():
    torch.manual_seed(0)
    return gpt.GPT(gpt.Config())


def batch(seed=3):
    torch.manual_seed(seed)
    return next(gpt.batches(gpt.Config(), 1))


def loss_fn(out):
    return out[0].pow(2).mean()


def same(got, want, where=""):
    """``got`` equals ``want``: the same keys in the same order, the same values."""
    if isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            same(a, b, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {got!r}"
        same(got.detach().numpy(), want.detach().numpy(), where)
    else:
        assert got == want, where


def toolkit_run(model):
    """Every toolkit function with its default arguments (and ``trace`` of every module),
    and what each gave (not ``run_until``: a model whose forward runs on the client between
    its parts refuses it, see docs/toolkit.md)."""
    x, _ = batch()
    seen = {"run_with_cache": toolkit.run_with_cache(model, x)[1]}
    seen["with grads"] = toolkit.run_with_cache(model, x, include_grads=True,
                                                loss_fn=loss_fn)[1]
    with toolkit.trace(model, "*", retain_input=True, retain_grad=True) as traced:
        loss_fn(model(x)).backward()
    seen["trace"] = {path: (t.input, t.output, t.grad) for path, t in traced.items()}
    with toolkit.trace(model, "transformer.h.1") as one:
        model(x)
    seen["trace one"] = one.output
    log = []
    with toolkit.hooks(model, forward={"*": lambda m, a, out: log.append(type(m).__name__)},
                       forward_pre={"transformer*": lambda m, a: log.append("pre")},
                       backward={"transformer.h.*": lambda m, gi, go: log.append("back")}
                       ) as added:
        loss_fn(model(x)).backward()
        active = toolkit.active_hooks(model)
    seen["hooks"] = (log, [(h.kind, h.path) for h in added], [(h.kind, h.path, h.id)
                                                              for h in active])
    assert [h.id for h in added] == [h.id for h in active]  # in the order registered
    seen["after"] = toolkit.active_hooks(model)
    seen["patch"] = toolkit.patch(model, {"transformer.h.*": lambda out: out * 0.5}, x)[0]
    return seen


@pytest.mark.parametrize("stages", [2, 3])
def test_every_toolkit_function_with_default_arguments_gives_what_one_process_gives(
        cluster, stages):
    want = toolkit_run(fresh_gpt())
    model = cluster.deploy(fresh_gpt(), stages=stages)
    try:
        got = toolkit_run(model)
        assert model._layout.split == ["", "transformer", "transformer.h"]  # run here
        want["hooks"] = (*want["hooks"][:2], [entry[:2] for entry in want["hooks"][2]])
        got["hooks"] = (*got["hooks"][:2], [entry[:2] for entry in got["hooks"][2]])
        same(got, want)
        # nothing stays registered: not on the workers, not on the modules that run here
        assert model._hooks_on_workers() == []
        for path in model._layout.split[1:]:
            module = model.get_submodule(path)
            assert not (module._forward_hooks or module._forward_pre_hooks
                        or module._backward_hooks)
    finally:
        model.close()


def test_a_worker_hook_on_a_module_that_runs_on_the_client_says_so(cluster):
    from disthook.distributed import hooks as worker_hooks

    model = cluster.deploy(fresh_gpt(), stages=2)
    try:
        with pytest.raises(TypeError, match="'transformer' runs on the client"), \
                toolkit.hooks(model, forward={"transformer*": worker_hooks.capture("x")}):
            pass
        assert model._hooks_on_workers() == []  # none stays
        assert toolkit.active_hooks(model) == []
    finally:
        model.close()
