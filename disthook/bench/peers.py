"""``disthook bench peers``: the same 2-stage training step with PyTorch's own tools.

The model is an unbalanced MLP 784-1024x3-10 at batch 256 (float32, SGD, cross-entropy):
stage 0 holds Linear(784, 1024), ReLU, Linear(1024, 1024), ReLU; stage 1 the rest. Each
contender runs it on 2 local processes, one thread each; every figure is a median step time
from this one run, measured in rounds (2 under --quick, else 3), each round timing every
contender right after disthook's equivalent, and each ratio the median of the rounds':

- torch RPC: a driver process and 2 stage processes, the stages as RRefs, forward through
  ``rpc_sync``, ``dist_autograd.backward`` and ``torch.distributed.optim.DistributedOptimizer``
  (TensorPipe, the default agent);
- torch.distributed.pipelining with gloo on CPU, GPipe and 1F1B at m = 8 micro-batches;
- disthook: a client and 2 workers; the plain step (forward, backward through the workers,
  ``DistributedOptimizer``) against torch RPC, and ``train_step`` with ``chunks=8`` under
  GPipe and 1F1B against torch's schedules of the same name;
- one torch process running the whole model, for scale.

The ratio is disthook / peer: below 1.0, disthook's step is the faster. Without torch the
suite says so and measures nothing.
"""
from __future__ import annotations

import os
import socket
import statistics
import tempfile

from disthook.bench.timing import median_seconds, paired_ratio

SIZES = (784, 1024, 1024, 1024, 10)
CUT = 2  # the first two Linear layers form stage 0: the stages are unbalanced (0.85M : 2.1M)
BATCH = 256
MICRO = 8
LR = 0.01


def _stage_layers(nn, index: int):
    """The layers of stage ``index`` in either library (the same seeds give the same shapes;
    values differ between libraries, which does not matter for timing)."""
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(SIZES) - 2:
            layers.append(nn.ReLU())
    cut = 2 * CUT
    return nn.Sequential(*(layers[:cut] if index == 0 else layers[cut:]))


def _data(lib):
    lib.manual_seed(0)
    return lib.randn(BATCH, SIZES[0]), lib.randint(0, SIZES[-1], (BATCH,))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- torch RPC + distributed autograd (runs in spawned processes) -------------------------

def _make_torch_stage(index: int):
    import torch

    torch.manual_seed(index)
    return _stage_layers(torch.nn, index)


def _parameter_rrefs(stage_rref):
    from torch.distributed.rpc import RRef

    return [RRef(p) for p in stage_rref.local_value().parameters()]


def _quiet() -> None:
    """torch's deprecation notices about its own internals are not ours to show."""
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch")


def _rpc_process(rank: int, port: int, repeats: int, out: str) -> None:
    _quiet()
    import torch
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    from torch.distributed.optim import DistributedOptimizer

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=300)
    rpc.init_rpc(f"p{rank}", rank=rank, world_size=3, rpc_backend_options=options)
    if rank == 0:
        stages = [rpc.remote(f"p{i + 1}", _make_torch_stage, args=(i,)) for i in (0, 1)]
        params = [p for s in stages
                  for p in rpc.rpc_sync(s.owner(), _parameter_rrefs, args=(s,))]
        opt = DistributedOptimizer(torch.optim.SGD, params, lr=LR)
        x, y = _data(torch)

        def step():
            with dist_autograd.context() as ctx:
                h = stages[0].rpc_sync().forward(x)
                logits = stages[1].rpc_sync().forward(h)
                loss = torch.nn.functional.cross_entropy(logits, y)
                dist_autograd.backward(ctx, [loss])
                opt.step(ctx)

        seconds = median_seconds(step, repeats)
        with open(out, "w") as f:
            f.write(repr(seconds))
    rpc.shutdown()


# ---- torch.distributed.pipelining (runs in spawned processes) -----------------------------

def _pipelining_process(rank: int, port: int, schedule: str, repeats: int, out: str) -> None:
    _quiet()
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            init_method=f"tcp://127.0.0.1:{port}")
    try:
        module = _make_torch_stage(rank)
        stage = PipelineStage(module, rank, 2, torch.device("cpu"))
        kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
        plan = kind(stage, MICRO, loss_fn=torch.nn.functional.cross_entropy)
        opt = torch.optim.SGD(module.parameters(), lr=LR)
        x, y = _data(torch)

        def step():
            opt.zero_grad()
            if rank == 0:
                plan.step(x)
            else:
                plan.step(target=y, losses=[])
            opt.step()

        dist.barrier()
        seconds = median_seconds(step, repeats)
        if rank == 0:
            with open(out, "w") as f:
                f.write(repr(seconds))
    finally:
        dist.destroy_process_group()


def _spawned(fn, nprocs: int, *args) -> float:
    """Run ``fn(rank, port, *args, out)`` in ``nprocs`` spawned processes; rank 0's figure."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "seconds")
        env = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        # torch's notices about its own internals, raised in its RPC threads too
        env["PYTHONWARNINGS"] = "ignore::DeprecationWarning,ignore::UserWarning"
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # what the spawned children inherit
        try:
            mp.spawn(fn, args=(_free_port(), *args, out), nprocs=nprocs, join=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        with open(out) as f:
            return float(f.read())


# ---- disthook and one torch process ----------------------------------------------------

def _one_torch_process(repeats: int) -> float:
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*_make_torch_stage(0), *_make_torch_stage(1))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _data(torch)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return median_seconds(step, repeats)


def _disthook_steps(cluster) -> tuple[dict, list]:
    """disthook's three steps on ``cluster``, each on a deployment of its own: the plain step
    (against torch RPC) and ``train_step`` under GPipe and 1F1B; and the deployments."""
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer

    torch.manual_seed(0)
    net = nn.Sequential(*_stage_layers(nn, 0), *_stage_layers(nn, 1))
    x, y = _data(torch)
    deployed = []

    def make(schedule: str | None):
        if schedule is None:
            remote = cluster.deploy(net, stages=2, split_points=[2 * CUT])
        else:
            remote = cluster.deploy(net, stages=2, split_points=[2 * CUT], chunks=MICRO,
                                    schedule=schedule)
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


def run(quick: bool = False) -> list[dict]:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("peers: torch is not installed (pip install torch==2.13.0): nothing to compare")
        return []
    from disthook.distributed import local_cluster

    repeats = 5 if quick else 15
    rounds = 2 if quick else 3
    # each round measures every contender right after disthook's equivalent, so that a slow
    # spell of the machine falls on both; the ratio is the median of the rounds' ratios
    cases = [("plain", "2-stage step: torch RPC + dist autograd", "torch RPC",
              lambda: _spawned(_rpc_process, 3, repeats))]
    for schedule, label in (("gpipe", "GPipe"), ("1f1b", "1F1B")):
        cases.append((schedule, f"2-stage step m={MICRO} {label}: torch pipelining",
                      f"torch {label}",
                      lambda schedule=schedule: _spawned(_pipelining_process, 2, schedule,
                                                         repeats)))
    ours = {key: [] for key, *_ in cases}
    theirs = {key: [] for key, *_ in cases}
    ones = []
    with local_cluster(workers=2) as cluster:
        steps, deployed = _disthook_steps(cluster)
        try:
            for _ in range(rounds):
                ones.append(_one_torch_process(repeats))
                for key, _, _, peer in cases:
                    ours[key].append(median_seconds(steps[key], repeats))
                    theirs[key].append(peer())
        finally:
            for remote in deployed:
                remote.close()
    one = statistics.median(ones)
    return [_row(case, ours[key], theirs[key], name, one) for key, case, name, _ in cases]


def _row(case: str, ours: list[float], theirs: list[float], name: str, one: float) -> dict:
    mine, peer = statistics.median(ours), statistics.median(theirs)
    return {"suite": "peers", "case": case, "disthook_s": mine, "torch_s": peer,
            "baseline": name, "ratio": paired_ratio(ours, theirs), "target": 1.0,
            "one_torch_process_s": one, "peer_vs_one_process": one / peer,
            "disthook_vs_one_process": one / mine}


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    one = rows[0]["one_torch_process_s"]
    print(f"peers: MLP 784-1024x3-10, batch {BATCH}, cut after layer {CUT}; one torch "
          f"process: {one * 1e3:.1f} ms per step")
    print(f"{'case':<50} {'peer':>10} {'disthook':>10} {'ratio':>7} {'target':>7}  "
          "speed vs one torch process (peer / disthook)")
    for r in rows:
        ok = "ok  " if r["ratio"] < r["target"] else "MISS"
        print(f"{r['case']:<50} {r['torch_s'] * 1e3:>8.1f}ms {r['disthook_s'] * 1e3:>8.1f}ms "
              f"{r['ratio']:>6.2f}x {r['target']:>6.2f}x {ok}  "
              f"{r['peer_vs_one_process']:.2f}x / {r['disthook_vs_one_process']:.2f}x")
