"""``disthook bench peers``: the same p-stage training step with PyTorch's own tools.

The model is an unbalanced MLP 784-1024x3-10 at batch 256 (float32, SGD, cross-entropy).
At p = 2 stages (the default) stage 0 holds Linear(784, 1024), ReLU, Linear(1024, 1024),
ReLU and stage 1 the rest; at p = 3 or 4 (``--stages``) each of the first p - 1 Linear
layers is a stage of its own and the last stage holds the rest. Each contender runs it on p
local processes, one thread each; every figure is a median step time from this one run,
measured in rounds (2 under --quick, else 3), each round timing every contender right after
disthook's equivalent, and each ratio the median of the rounds':

- torch RPC: a driver process and p stage processes, the stages as RRefs, forward through
  ``rpc_sync``, ``dist_autograd.backward`` and ``torch.distributed.optim.DistributedOptimizer``
  (TensorPipe, the default agent);
- torch.distributed.pipelining with gloo on CPU, GPipe and 1F1B at m = 8 micro-batches;
- disthook: a client and p workers; the plain step (forward, backward through the workers,
  ``DistributedOptimizer``) against torch RPC, and ``train_step`` with ``chunks=8`` under
  GPipe and 1F1B against torch's schedules of the same name;
- one torch process running the whole model, for scale.

The ratio is disthook / peer: below 1.0, disthook's step is the faster. Without torch the
suite says so and measures nothing.
"""
from __future__ import annotations

import copy
import os
import statistics

from disthook.bench.stages import (
    LR,
    Mlp,
    one_torch_step,
    pipelining_seconds,
    quiet,
    spawned,
    torch_stage,
)
from disthook.bench.timing import median_seconds, paired_ratio

SIZES = (784, 1024, 1024, 1024, 10)
CUT = 2  # at p = 2 the first two Linear layers form stage 0: unbalanced (0.85M : 2.1M)
BATCH = 256
MICRO = 8
STAGES = (2,)
QUICK_REPEATS, QUICK_ROUNDS = 5, 2  # under --quick: steps timed per contender, rounds


def cuts(p: int) -> tuple[int, ...]:
    """The Linear layers that start stages 2..p of peers' MLP."""
    return (CUT,) if p == 2 else tuple(range(1, p))


def check(stages) -> None:
    """Refuse, naming them, stage counts that peers' MLP of 4 Linear layers cannot have."""
    allowed = range(2, len(SIZES))
    wrong = [p for p in stages if p not in allowed]
    if not stages or wrong:
        raise ValueError(f"peers: --stages {','.join(map(str, stages))}: peers' MLP has "
                         f"{len(SIZES) - 1} Linear layers, so each p must be one of "
                         f"{', '.join(map(str, allowed))}")


# ---- torch RPC + distributed autograd (runs in spawned processes) -------------------------

def _parameter_rrefs(stage_rref):
    from torch.distributed.rpc import RRef

    return [RRef(p) for p in stage_rref.local_value().parameters()]


def _rpc_process(rank: int, port: int, spec: Mlp, repeats: int, out: str) -> None:
    quiet()
    import torch
    import torch.distributed.autograd as dist_autograd
    from torch.distributed import rpc
    from torch.distributed.optim import DistributedOptimizer

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=300)
    rpc.init_rpc(f"p{rank}", rank=rank, world_size=spec.stages + 1,
                 rpc_backend_options=options)
    if rank == 0:
        stages = [rpc.remote(f"p{i + 1}", torch_stage, args=(spec, i))
                  for i in range(spec.stages)]
        params = [p for s in stages
                  for p in rpc.rpc_sync(s.owner(), _parameter_rrefs, args=(s,))]
        opt = DistributedOptimizer(torch.optim.SGD, params, lr=LR)
        x, y = spec.data(torch)

        def step():
            with dist_autograd.context() as ctx:
                h = x
                for s in stages:
                    h = s.rpc_sync().forward(h)
                loss = torch.nn.functional.cross_entropy(h, y)
                dist_autograd.backward(ctx, [loss])
                opt.step(ctx)

        seconds = median_seconds(step, repeats)
        with open(out, "w") as f:
            f.write(repr(seconds))
    rpc.shutdown()


# ---- disthook ------------------------------------------------------------------------------

def _disthook_steps(cluster, spec: Mlp) -> tuple[dict, list]:
    """disthook's three steps on ``cluster``, each on a deployment of its own: the plain step
    (against torch RPC) and ``train_step`` under GPipe and 1F1B; and the deployments."""
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer

    torch.manual_seed(0)
    net = spec.whole(nn)
    x, y = spec.data(torch)
    deployed = []

    def make(schedule: str | None):
        options = {} if schedule is None else {"chunks": MICRO, "schedule": schedule}
        remote = cluster.deploy(copy.deepcopy(net), stages=spec.stages, split_points=spec.split_points(),
                                **options)
        deployed.append(remote)
        opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=LR)

        def step():
            opt.zero_grad()
            if schedule is None:
                nn.functional.cross_entropy(remote(x), y).backward()
            else:
                remote.train_step(x, y, nn.functional.cross_entropy)
            opt.step()

        return step

    return {"plain": make(None), "gpipe": make("gpipe"), "1f1b": make("1f1b")}, deployed


def run(quick: bool = False, stages=STAGES) -> list[dict]:
    check(stages)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("peers: torch is not installed (pip install torch==2.13.0): nothing to compare")
        return []
    rows = []
    for p in stages:
        rows += _run_at(p, quick)
    return rows


def _run_at(p: int, quick: bool) -> list[dict]:
    """The rows of peers' comparison at ``p`` stages."""
    from disthook.distributed import local_cluster

    spec = Mlp(SIZES, cuts(p), BATCH)
    repeats = QUICK_REPEATS if quick else 15
    rounds = QUICK_ROUNDS if quick else 3
    # each round measures every contender right after disthook's equivalent, so that a slow
    # spell of the machine falls on both; the ratio is the median of the rounds' ratios
    cases = [("plain", f"{p}-stage step: torch RPC + dist autograd", "torch RPC",
              lambda: spawned(_rpc_process, p + 1, spec, repeats))]
    for schedule, label in (("gpipe", "GPipe"), ("1f1b", "1F1B")):
        cases.append((schedule, f"{p}-stage step m={MICRO} {label}: torch pipelining",
                      f"torch {label}",
                      lambda schedule=schedule: pipelining_seconds(spec, schedule, MICRO,
                                                                   repeats)))
    ours = {key: [] for key, *_ in cases}
    theirs = {key: [] for key, *_ in cases}
    ones = []
    one_torch = one_torch_step(spec)
    with local_cluster(workers=p) as cluster:
        steps, deployed = _disthook_steps(cluster, spec)
        try:
            for _ in range(rounds):
                ones.append(median_seconds(one_torch, repeats))
                for key, _, _, peer in cases:
                    ours[key].append(median_seconds(steps[key], repeats))
                    theirs[key].append(peer())
        finally:
            for remote in deployed:
                remote.close()
    one = statistics.median(ones)
    return [_row(p, case, ours[key], theirs[key], name, one)
            for key, case, name, _ in cases]


def _row(p: int, case: str, ours: list[float], theirs: list[float], name: str,
         one: float) -> dict:
    mine, peer = statistics.median(ours), statistics.median(theirs)
    return {"suite": "peers", "stages": p, "case": case, "disthook_s": mine, "torch_s": peer,
            "baseline": name, "ratio": paired_ratio(ours, theirs),
            # the speed issue's targets: ahead of torch's tools, by a margin
            "target": 0.8 if "RPC" in case else 0.9,
            "one_torch_process_s": one, "peer_vs_one_process": one / peer,
            "disthook_vs_one_process": one / mine}


def _where(p: int) -> str:
    layers = cuts(p)
    return f"cut after layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}"


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    one = rows[0]["one_torch_process_s"]
    ps = list(dict.fromkeys(r["stages"] for r in rows))
    where = _where(ps[0]) if len(ps) == 1 else "; ".join(f"p={p}: {_where(p)}" for p in ps)
    print(f"peers: MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, {where}; one torch "
          f"process: {one * 1e3:.1f} ms per step")
    case_w = max(len(r["case"]) for r in rows)
    print(f"{'case':<{case_w}} {'peer':>10} {'disthook':>10} {'ratio':>7}  "
          "speed vs one torch process (peer / disthook)")
    for r in rows:
        print(f"{r['case']:<{case_w}} {r['torch_s'] * 1e3:>8.1f}ms "
              f"{r['disthook_s'] * 1e3:>8.1f}ms {r['ratio']:>6.2f}x  "
              f"{r['peer_vs_one_process']:.2f}x / {r['disthook_vs_one_process']:.2f}x")
