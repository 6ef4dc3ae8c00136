"""``disthook bench toolkit``: caching every module's output on a deployed model.

A 16-layer MLP (Linear(256, 256) with ReLU between: 31 modules), batch 64, on 2 workers,
no_grad. ``run_with_cache`` records on the workers with ``hooks.capture`` and fetches the
records once; its time includes registering and removing those hooks. The baselines are the
same cache collected with client forward hooks registered beforehand (one round trip to the
client per module call, on a second deployment of the model), and a plain forward without
hooks. The three run in turn, round by round; each ratio is the median of the rounds'
ratios; lower is better.
"""
from __future__ import annotations

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
    rows = []
    with local_cluster(workers=2) as cluster, torch.no_grad():
        remote = cluster.deploy(net, stages=2)
        hooked = cluster.deploy(net, stages=2)  # the same model, with client hooks on it
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
