"""What a one-process user does with the README's GPT example keeps working once it is
deployed (issue 29, symptom 8), on 2 and 3 workers against one process: every function of the
hook toolkit with its default arguments (modules that run on the client, such as the
``transformer`` container whose blocks are on several workers, take ordinary hooks there);
save, load and recover with a plain optimizer (momentum and Adam state included); and
``cluster.load`` of a checkpoint of every placement (over the tree, a chain, whole)."""
import os
import signal
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import disthook as torch
from disthook import hooks as toolkit
from disthook import nn
from disthook.distributed import deployment_of, local_cluster
from disthook.distributed.checkpoint import CheckpointError

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
        assert deployment_of(model)._layout.split == ["", "transformer", "transformer.h"]  # run here
        want["hooks"] = (*want["hooks"][:2], [entry[:2] for entry in want["hooks"][2]])
        got["hooks"] = (*got["hooks"][:2], [entry[:2] for entry in got["hooks"][2]])
        same(got, want)
        # nothing stays registered: not on the workers, not on the modules that run here
        assert deployment_of(model)._hooks_on_workers() == []
        for path in deployment_of(model)._layout.split[1:]:
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
        assert deployment_of(model)._hooks_on_workers() == []  # none stays
        assert toolkit.active_hooks(model) == []
    finally:
        model.close()


# ---- checkpoints with a plain optimizer ------------------------------------------------------

def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def adamw(model):  # the example's own: AdamW over two parameter groups
    return model.configure_optimizers(weight_decay=0.1, lr=3e-3)


def train(model, opt, steps, seed):
    torch.manual_seed(seed)
    for x, y in gpt.batches(gpt.Config(), steps):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def weights(model):
    return {n: v.numpy().copy() for n, v in model.state_dict().items()}


def same_weights(got, want):
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("make_optimizer", [sgd, adamw])
@pytest.mark.parametrize("stages", [2, 3])
def test_save_then_load_with_a_plain_optimizer_resumes_as_one_process(
        cluster, tmp_path, stages, make_optimizer):
    local = fresh_gpt()
    opt = make_optimizer(local)
    train(local, opt, 2, seed=1)
    train(local, opt, 2, seed=2)
    path = str(tmp_path / "ckpt")
    model = cluster.deploy(fresh_gpt(), stages=stages)
    loaded = None
    try:
        opt = make_optimizer(model)
        train(model, opt, 2, seed=1)
        model.save(path, optimizer=opt, step=2)
        train(model, opt, 2, seed=2)
        same_weights(weights(model), weights(local))
        # the same model, back to the checkpoint with a fresh optimizer
        opt = make_optimizer(model)
        assert model.load_checkpoint(path, optimizer=opt) == 2
        train(model, opt, 2, seed=2)
        same_weights(weights(model), weights(local))
        # a model rebuilt from the checkpoint alone, placed as it was
        loaded = cluster.load(path)
        assert deployment_of(loaded)._layout == deployment_of(model)._layout
        opt = make_optimizer(loaded)
        assert loaded.load_checkpoint(path, optimizer=opt) == 2
        train(loaded, opt, 2, seed=2)
        same_weights(weights(loaded), weights(local))
    finally:
        model.close()
        if loaded is not None:
            loaded.close()


def test_a_plain_optimizer_checkpoint_refuses_another_optimizer(cluster, tmp_path):
    from disthook.distributed import DistributedOptimizer

    path = str(tmp_path / "ckpt")
    model = cluster.deploy(fresh_gpt(), stages=2)
    try:
        opt = sgd(model)
        train(model, opt, 1, seed=1)
        model.save(path, optimizer=opt)
        with pytest.raises(CheckpointError, match="holds SGD state, not AdamW"):
            model.load_checkpoint(path, optimizer=adamw(model))
        head_only = torch.optim.SGD(model.lm_head.parameters(), lr=0.05, momentum=0.9)  # tied
        with pytest.raises(CheckpointError, match="differ first at position 1 .*nothing here"):
            model.load_checkpoint(path, optimizer=head_only)
        with pytest.raises(CheckpointError, match="plain SGD optimizer"):
            model.load_checkpoint(path, optimizer=DistributedOptimizer(
                torch.optim.SGD, model.parameters(), lr=0.05))
        other = torch.optim.SGD(fresh_gpt().parameters(), lr=0.05)
        with pytest.raises(ValueError, match="this model's parameters only"):
            model.save(path, optimizer=other)
    finally:
        model.close()


def test_recover_with_a_plain_optimizer_resumes_as_one_process(tmp_path):
    local = fresh_gpt()
    opt = adamw(local)
    train(local, opt, 2, seed=1)
    train(local, opt, 2, seed=2)
    path = str(tmp_path / "ckpt")
    with local_cluster(workers=2, restart=True) as cluster:
        model = cluster.deploy(fresh_gpt(), stages=2)
        opt = adamw(model)
        train(model, opt, 2, seed=1)
        model.save(path, optimizer=opt, step=2)
        train(model, opt, 1, seed=7)  # a step the crash loses
        victim = model.workers()[1][1]
        os.kill(next(w.pid for w in cluster.workers() if w.id == victim), signal.SIGKILL)
        with pytest.raises(Exception, match="lost|Lost"):
            train(model, opt, 1, seed=7)
        assert model.recover(optimizer=opt) == 2
        train(model, opt, 2, seed=2)
        same_weights(weights(model), weights(local))


# ---- cluster.load of every placement -------------------------------------------------------

def chain():
    """Twelve children: "10" and "11" sort before "2" as strings, not as children."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), *[nn.Sequential(nn.Tanh(), nn.Linear(8, 8))
                                            for _ in range(10)], nn.Linear(8, 3))


@pytest.mark.parametrize("how", ["tree", "placement", "chain", "whole"])
def test_cluster_load_deploys_every_checkpoint_save_writes(cluster, tmp_path, how):
    if how in ("tree", "placement"):
        module, x = fresh_gpt(), batch()[0]
        options = ({"stages": 3} if how == "tree" else
                   {"stages": 2, "placement": {"transformer": 0, "lm_head": 1}})
        if how == "placement":  # tied to the token embedding: on its stage
            options["placement"]["lm_head"] = 0
            options["placement"]["transformer.h.3"] = 1
    elif how == "chain":
        module, x, options = chain(), torch.randn(4, 6), {"stages": 2}
    else:
        module, x, options = nn.Linear(6, 3), torch.randn(4, 6), {"stages": 1}
    path = str(tmp_path / "ckpt")
    model = cluster.deploy(module, **options)
    loaded = None
    try:
        with torch.no_grad():
            want = model(x)
        model.save(path)
        loaded = cluster.load(path)
        assert deployment_of(loaded)._layout == deployment_of(model)._layout and deployment_of(loaded)._placement_given == deployment_of(model)._placement_given
        with torch.no_grad():
            same(loaded(x), want)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            same(weights(loaded), weights(model))
    finally:
        model.close()
        if loaded is not None:
            loaded.close()
