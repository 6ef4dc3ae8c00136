"""``disthook bench``: disthook against torch (when installed), side by side in one run.

Every figure is a ratio disthook / torch measured in the same process, the two timed in
turn round by round (the median of the rounds' ratios), single-threaded (one BLAS thread,
``torch.set_num_threads(1)``), because absolute times on shared machines mean little.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

MLP_SIZES = (784, 1024, 1024, 1024, 10)
MLP_BATCH = 128
CHAIN_OPS = 2000
CHAIN_NUMEL = 16


# ---- timing, shared by every suite ----------------------------------------------------------

def _median(fn, repeats: int, inner: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` rounds of ``inner`` calls, after a
    warm-up call."""
    return statistics.median(_paired([fn], repeats, inner)[0])


def _paired(fns, repeats: int, inner: int = 1) -> list[list[float]]:
    """Seconds per call of each of ``fns`` over ``repeats`` rounds, each round running
    ``inner`` calls of every one in turn (after one warm-up call of each), so that the
    machine's drift hits them alike; compare them round by round (``_ratio``)."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t0) / inner)
    return times


def _ratio(ours: list[float], baseline: list[float]) -> float:
    """The median over rounds of ours / baseline."""
    return statistics.median(a / b for a, b in zip(ours, baseline))


# ---- workloads, written once against the torch API and run with either library ------------

def mlp_step(lib, seed: int = 0):
    """One SGD step of an MLP with cross-entropy, built from tensor ops only."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = []
    for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        bound = 1 / fan_in ** 0.5
        w = lib.tensor(rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32),
                       requires_grad=True)
        b = lib.tensor(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32),
                       requires_grad=True)
        weights.append((w, b))
    x = lib.tensor(rng.standard_normal((MLP_BATCH, MLP_SIZES[0])).astype(np.float32))
    y = lib.tensor(rng.integers(0, MLP_SIZES[-1], MLP_BATCH))
    rows = lib.arange(MLP_BATCH)

    def step():
        h = x
        for i, (w, b) in enumerate(weights):
            h = h @ w + b
            if i < len(weights) - 1:
                h = h.relu()
        loss = -h.log_softmax(dim=1)[rows, y].mean()
        loss.backward()
        with lib.no_grad():
            for w, b in weights:
                w -= 0.01 * w.grad
                b -= 0.01 * b.grad
                w.grad = None
                b.grad = None
        return loss

    return step


def tiny_chain(lib):
    """CHAIN_OPS elementwise ops on a CHAIN_NUMEL-element tensor, forward and backward."""
    x = lib.ones(CHAIN_NUMEL, requires_grad=True)

    def step():
        y = x
        for i in range(CHAIN_OPS // 2):
            y = y * 1.0001
            y = y + 0.0001
        y.sum().backward()
        x.grad = None

    return step


def small_cnn(lib, seed: int = 0):
    """Forward and backward of a small CNN on MNIST-sized input (batch 64, 1x28x28)."""
    import numpy as np

    lib.manual_seed(seed)
    nn = lib.nn
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(),
        nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * 12 * 12, 10),
    )
    rng = np.random.default_rng(seed)
    x = lib.tensor(rng.standard_normal((64, 1, 28, 28)).astype(np.float32))
    y = lib.tensor(rng.integers(0, 10, 64))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(x), y)
        loss.backward()
        model.zero_grad()
        return loss

    return step


HOOKED_LAYERS = 10
HOOKED_WIDTH = 64
HOOKED_BATCH = 32


def _hooked_mlp(lib, hooks: bool, seed: int = 0):
    """A 10-layer MLP step, with or without a no-op forward and full backward hook per Linear."""
    import numpy as np

    lib.manual_seed(seed)
    nn = lib.nn
    layers = []
    for _ in range(HOOKED_LAYERS):
        layers += [nn.Linear(HOOKED_WIDTH, HOOKED_WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers)
    if hooks:
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.register_forward_hook(lambda module, args, output: None)
                layer.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    rng = np.random.default_rng(seed)
    x = lib.tensor(rng.standard_normal((HOOKED_BATCH, HOOKED_WIDTH)).astype(np.float32),
                   requires_grad=True)

    def step():
        loss = model(x).square().mean()
        loss.backward()
        model.zero_grad()
        x.grad = None
        return loss

    return step


def hook_overhead(lib):
    """Two workloads whose time difference is the cost of 10 + 10 no-op module hooks."""
    return _hooked_mlp(lib, hooks=True), _hooked_mlp(lib, hooks=False)


# "dist" (disthook.bench_dist) starts a local cluster; its baselines are raw pyzmq and one
# process rather than torch. "pipeline" (disthook.bench_pipeline) and "peers"
# (disthook.bench_peers: torch RPC and torch.distributed.pipelining) print tables of their own.
# "toolkit" (disthook.bench_toolkit) compares run_with_cache on workers with client hooks.
SUITES = {
    "dist": [],
    "pipeline": [],
    "peers": [],
    "scaling": [],
    "toolkit": [],
    "engine": [
        ("MLP 784-1024x3-10 SGD step, batch 128", mlp_step, 1.15, (7, 3), (3, 1)),
        (f"{CHAIN_OPS} tiny ops fwd+bwd ({CHAIN_NUMEL} elems)", tiny_chain, 1.5, (7, 3),
         (3, 1)),
    ],
    "nn": [
        ("CNN 2xConv2d 3x3+pool+Linear fwd+bwd, b 64", small_cnn, 2.0, (5, 2), (3, 1)),
        # a difference of two ~2 ms steps: --quick keeps every repeat (about 2 s in all);
        # with 3 x 2 calls one run said 1.69x, with 15 x 10 in turn six runs 0.85x-1.06x
        (f"hook cost: {HOOKED_LAYERS} fwd + {HOOKED_LAYERS} full bwd hooks", hook_overhead,
         1.0, (15, 10), (15, 10)),
    ],
}
# each case: (label, workload, target, (repeats, calls per repeat), the same under --quick)


def _measure(workload, libs: list, repeats: int,
             inner: int) -> tuple[list[float], float | None]:
    """Median seconds per call with each library, and the ratio of the first to the second.

    Each round times every library in turn, so that a slow spell of the machine falls on
    both; the ratio is the median of the rounds' ratios. For a (hooked, plain) pair of
    workloads the figure is the median difference hooked - plain, both sides timed in the
    same round, and the ratio that of the medians (a difference is too noisy to divide
    round by round).
    """
    made = [workload(lib) for lib in libs]
    if not isinstance(made[0], tuple):
        times = _paired(made, repeats, inner)
        ratio = _ratio(times[0], times[1]) if len(times) > 1 else None
        return [statistics.median(t) for t in times], ratio
    sides = _paired([fn for pair in made for fn in pair], repeats, inner)
    diffs = [statistics.median(a - b for a, b in zip(sides[2 * i], sides[2 * i + 1]))
             for i in range(len(made))]
    ratio = diffs[0] / diffs[1] if len(diffs) > 1 and diffs[1] > 0 else None
    return diffs, ratio


def run_suite(name: str, quick: bool) -> list[dict]:
    import disthook

    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        torch = None
    if name == "dist":
        from disthook import bench_dist

        return bench_dist.run(quick)
    if name == "toolkit":
        from disthook import bench_toolkit

        return bench_toolkit.run(quick)
    rows = []
    for label, workload, target, full, fast in SUITES[name]:
        repeats, inner = fast if quick else full
        times, ratio = _measure(workload, [disthook] if torch is None else [disthook, torch],
                                repeats, inner)
        rows.append({
            "suite": name, "case": label, "disthook_s": times[0],
            "torch_s": times[1] if torch is not None else None, "ratio": ratio,
            "target": target,
            "baseline": "torch",
        })
    return rows


def _blas() -> str:
    import numpy as np

    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
        blas = deps.get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy
        return "unknown"


def _print(rows: list[dict]) -> None:
    print(f"{'case':<50} {'baseline':>21} {'disthook':>10} {'ratio':>7} {'target':>7}")
    for r in rows:
        base = f"{r['baseline']} {r['torch_s'] * 1e3:.2f}ms" if r["torch_s"] else "n/a"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "n/a"
        ok = "" if r["ratio"] is None else ("  ok" if r["ratio"] <= r["target"] else "  MISS")
        print(f"{r['case']:<50} {base:>21} {r['disthook_s'] * 1e3:>8.2f}ms {ratio:>7} "
              f"{r['target']:>6.2f}x{ok}")


def main(suite: str = "all", *, quick: bool = False, json_path: str | None = None,
         plot_path: str | None = None) -> int:
    if any(os.environ.get(v) != "1" for v in THREAD_VARS):
        # thread counts must be fixed before numpy loads its BLAS: run again in a child
        env = dict(os.environ, **{v: "1" for v in THREAD_VARS})
        cmd = [sys.executable, "-m", "disthook.bench", suite] + (["--quick"] if quick else [])
        cmd += ["--json", json_path] if json_path else []
        cmd += ["--plot", plot_path] if plot_path else []
        return subprocess.call(cmd, env=env)
    import numpy as np

    print(f"disthook bench {suite}: numpy {np.__version__} with BLAS {_blas()}, one thread")
    if suite not in ("dist", "toolkit"):
        try:
            import torch

            print(f"baseline: torch {torch.__version__}, torch.set_num_threads(1)")
        except ImportError:
            print("baseline: torch is not installed (pip install torch==2.13.0); ratios are "
                  "n/a")
    if suite in ("dist", "all"):
        print("dist: baselines are raw pyzmq between two processes and one process; the "
              "workers are local processes, one BLAS thread each")
    if suite in ("toolkit", "all"):
        print("toolkit: baselines are client forward hooks and a forward without hooks, on "
              "the same 2 local workers")
    names = sorted(SUITES) if suite == "all" else [suite]
    own_tables = {"pipeline", "peers", "scaling"}  # suites that print tables of their own
    rows = [row for name in names if name not in own_tables
            for row in run_suite(name, quick)]
    if rows:
        _print(rows)
    if "pipeline" in names:
        from disthook import bench_pipeline

        pipeline_rows = bench_pipeline.run(quick)
        bench_pipeline.print_rows(pipeline_rows)
        rows += [{"suite": "pipeline", **r} for r in pipeline_rows]
    if "scaling" in names:
        from disthook import bench_scaling

        scaling_rows = bench_scaling.run(quick)
        bench_scaling.print_rows(scaling_rows)
        rows += scaling_rows
    if "peers" in names:
        from disthook import bench_peers

        peer_rows = bench_peers.run(quick)
        bench_peers.print_rows(peer_rows)
        rows += peer_rows
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)
    if plot_path:
        from disthook.bench_plot import pipeline_plot

        print(f"plot: {pipeline_plot(rows, plot_path)}")
    return 0


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(prog="python -m disthook.bench")
    p.add_argument("suite", nargs="?", default="all", choices=["all", *sorted(SUITES)])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    p.add_argument("--plot")
    a = p.parse_args()
    sys.exit(main(a.suite, quick=a.quick, json_path=a.json, plot_path=a.plot))
