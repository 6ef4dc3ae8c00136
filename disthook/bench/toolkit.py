"""``disthook bench toolkit``: hooking every module of a deployed model.

A 16-layer MLP (Linear(256, 256) with ReLU between: 31 modules), batch 64, on 2 workers.

- ``run_with_cache`` (no_grad) records on the workers with ``hooks.capture`` and fetches the
  records once; its time includes registering and removing those hooks. The baselines are
  the same cache collected with client forward hooks registered beforehand (on a second
  deployment of the model), and a plain forward without hooks.
- The interpretability workloads as people write them, with client hooks on all 31 modules
  (whose firings run ahead of their answers once they answered without a change): a cache
  of every module's output (forward hooks, no_grad), and a trace of every module's output
  gradient (full backward hooks, forward and backward); each against the same hooks on the
  model in one process (torch when installed, else disthook), the number the issue on
  speed tracks; and the same with ``deploy(..., hooks_ahead=False)``, where every firing
  waits for its answer (what running ahead saves).

The sides of each comparison run in turn, round by round; each ratio is the median of the
rounds' ratios; lower is better.
"""
from __future__ import annotations

import copy
import statistics

from disthook import hooks
from disthook.bench.table import comparison
from disthook.bench.timing import paired, paired_ratio

WIDTH, LAYERS, BATCH = 256, 16, 64


def _model():
    import disthook as torch
    from disthook import nn

    torch.manual_seed(0)
    layers = []
    for i in range(LAYERS):
        layers.append(nn.Linear(WIDTH, WIDTH))
        if i < LAYERS - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def run(quick: bool = False) -> list[dict]:
    import disthook as torch
    from disthook.distributed import local_cluster

    repeats = 5 if quick else 11
    net = _model()
    x = torch.randn(BATCH, WIDTH)
    paths = [path for path, _ in net.named_modules() if path]
    rows: list[dict] = []
    with local_cluster(workers=2) as cluster:
        rows += _run_with_cache(cluster, net, x, paths, repeats)
        rows += _many_hooks(cluster, net, x, paths, repeats)
    return rows


def _run_with_cache(cluster, net, x, paths: list[str], repeats: int) -> list[dict]:
    """run_with_cache against client hooks and against no hooks."""
    import disthook as torch

    rows = []
    with torch.no_grad():
        remote = cluster.deploy(copy.deepcopy(net), stages=2)
        hooked = cluster.deploy(copy.deepcopy(net), stages=2)  # the same model, with client hooks on it
        cache: dict = {}
        for path in paths:
            hooked.get_submodule(path).register_forward_hook(
                lambda m, args, out, path=path: cache.__setitem__(path, out.detach()))

        def toolkit():
            _, got = hooks.run_with_cache(remote, x)
            assert len(got) == len(paths)

        def plain():
            remote(x)

        def client_hooks():
            cache.clear()
            hooked(x)
            assert len(cache) == len(paths)

        # the three run in turn, round by round; each ratio is the median of the rounds'
        t_toolkit, t_client, t_plain = paired([toolkit, client_hooks, plain], repeats)
        label = f"run_with_cache, {len(paths)} modules of a {LAYERS}-layer MLP, 2 workers"
        rows.append(comparison("toolkit", f"{label} vs client hooks",
                               statistics.median(t_toolkit), statistics.median(t_client), 0.5,
                               "client hooks", paired_ratio(t_toolkit, t_client)))
        rows.append(comparison("toolkit", f"{label} vs no hooks", statistics.median(t_toolkit),
                               statistics.median(t_plain), 2.0, "no hooks",
                               paired_ratio(t_toolkit, t_plain)))
        remote.close()
        hooked.close()
    return rows


def _many_hooks(cluster, net, x, paths: list[str], repeats: int) -> list[dict]:
    """Client hooks on every module against the same hooks in one process."""
    try:
        import torch as lib
    except ImportError:  # disthook in one process is the baseline then
        import disthook as lib
    baseline = "torch" if lib.__name__ == "torch" else "one process"
    if baseline == "torch":
        lib.set_num_threads(1)
        layers = []
        for i in range(LAYERS):
            layers.append(lib.nn.Linear(WIDTH, WIDTH))
            if i < LAYERS - 1:
                layers.append(lib.nn.ReLU())
        local, lx = lib.nn.Sequential(*layers), lib.randn(BATCH, WIDTH, requires_grad=True)
    else:
        local, lx = _model(), x.detach().requires_grad_(True)
    x = x.detach().requires_grad_(True)  # a backward hook on the first module sees its grad
    ahead = cluster.deploy(copy.deepcopy(net), stages=2)
    waiting = cluster.deploy(copy.deepcopy(net), stages=2, hooks_ahead=False)  # every firing waits
    rows = []
    try:
        for case, register, step in (
                (f"cache: {len(paths)} client forward hooks, no_grad",
                 "register_forward_hook", _cache_step),
                (f"trace: {len(paths)} client full bwd hooks, fwd+bwd",
                 "register_full_backward_hook", _trace_step)):
            seen: dict = {}
            handles = []
            for model in (ahead, waiting, local):
                for path in paths:
                    hook = (lambda m, args, out, path=path: seen.__setitem__(path, out))
                    handles.append(getattr(model.get_submodule(path), register)(hook))
            times = paired([lambda: step(ahead, x, seen, len(paths)),
                            lambda: step(waiting, x, seen, len(paths)),
                            lambda: step(local, lx, seen, len(paths))], repeats)
            for handle in handles:
                handle.remove()
            for label, mine in (("", times[0]), (" (hooks_ahead=False)", times[1])):
                rows.append(comparison("toolkit", f"{case}, 2 workers{label}",
                                       statistics.median(mine), statistics.median(times[2]),
                                       3.0, baseline, paired_ratio(mine, times[2])))
    finally:
        ahead.close()
        waiting.close()
    return rows


def _cache_step(model, x, seen: dict, hooks: int) -> None:
    import disthook

    seen.clear()
    grad_off = disthook.no_grad() if isinstance(x, disthook.Tensor) else _torch_no_grad()
    with grad_off:
        model(x)
    assert len(seen) == hooks


def _trace_step(model, x, seen: dict, hooks: int) -> None:
    seen.clear()
    model(x).sum().backward()
    assert len(seen) == hooks


def _torch_no_grad():
    import torch

    return torch.no_grad()
