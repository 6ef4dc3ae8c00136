"""``disthook bench engine`` and ``disthook bench nn``: disthook against torch in one process.

Each workload is written once against the torch API and run with either library; every
figure is a ratio disthook / torch, the two timed in turn round by round (the median of the
rounds' ratios), single-threaded (one BLAS thread, ``torch.set_num_threads(1)``). Times are
this thread's CPU time (user and system, page faults included), which is all the work of
either library here, and which other processes on a shared machine do not inflate.
"""
from __future__ import annotations

import itertools
import time

from disthook.bench.table import comparison
from disthook.bench.timing import measure

MLP_SIZES = (784, 1024, 1024, 1024, 10)
MLP_BATCH = 128
CHAIN_OPS = 2000
CHAIN_NUMEL = 16


# ---- workloads, written once against the torch API and run with either library ------------

def mlp_step(lib, seed: int = 0):
    """One SGD step of an MLP with cross-entropy, built from tensor ops only."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = []
    for fan_in, fan_out in itertools.pairwise(MLP_SIZES):
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


def mlp_adam(lib, seed: int = 0):
    """One ``optim.Adam`` step over the parameters of ``mlp_step``'s MLP (2.9 M), with
    gradients in place: the optimizer alone."""
    import numpy as np

    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in itertools.pairwise(MLP_SIZES):
        for shape in ((fan_in, fan_out), (fan_out,)):
            p = lib.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
            p.grad = lib.tensor(rng.standard_normal(shape).astype(np.float32) * 0.01)
            params.append(p)
    return lib.optim.Adam(params, lr=1e-3).step


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


STAGE_LAYERS, STAGE_WIDTH, STAGE_ROWS = 8, 1024, 32


def _linear_relu(lib, count: int, width: int, seed: int):
    """``count`` x (Linear(width, width) + ReLU) in a Sequential, seeded."""
    lib.manual_seed(seed)
    layers = []
    for _ in range(count):
        layers += [lib.nn.Linear(width, width), lib.nn.ReLU()]
    return lib.nn.Sequential(*layers)


def stage_step(lib, seed: int = 0):
    """A pipeline stage's work on one micro-batch, in one process: 8 x (Linear(1024) + ReLU)
    forward and backward at 32 rows (the workspan bench's stage at p = 2), weights'
    gradients set to None after each step."""
    import numpy as np

    model = _linear_relu(lib, STAGE_LAYERS, STAGE_WIDTH, seed)
    rng = np.random.default_rng(seed)
    x = lib.tensor(rng.standard_normal((STAGE_ROWS, STAGE_WIDTH)).astype(np.float32),
                   requires_grad=True)
    g = lib.tensor(rng.standard_normal((STAGE_ROWS, STAGE_WIDTH)).astype(np.float32))

    def step():
        out = model(x)
        out.backward(g)
        model.zero_grad()
        x.grad = None
        return out

    return step


CNN_BATCH = 64


def small_cnn(lib, seed: int = 0):
    """Forward and backward of a small CNN on MNIST-sized input (batch CNN_BATCH, 1x28x28)."""
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
    x = lib.tensor(rng.standard_normal((CNN_BATCH, 1, 28, 28)).astype(np.float32))
    y = lib.tensor(rng.integers(0, 10, CNN_BATCH))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(x), y)
        loss.backward()
        model.zero_grad()
        return loss

    return step


ATTENTION_SHAPE = (8, 8, 128, 64)  # batch, heads, tokens, head dims


def attention(lib, seed: int = 0):
    """``F.scaled_dot_product_attention`` forward and backward (no mask)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    q, k, v = (lib.tensor(rng.standard_normal(ATTENTION_SHAPE).astype(np.float32),
                          requires_grad=True) for _ in range(3))

    def step():
        out = lib.nn.functional.scaled_dot_product_attention(q, k, v)
        out.sum().backward()
        q.grad = k.grad = v.grad = None
        return out

    return step


HOOKED_LAYERS = 10
HOOKED_WIDTH = 64
HOOKED_BATCH = 32


def _hooked_mlp(lib, hooks: bool, seed: int = 0):
    """A 10-layer MLP step, with or without a no-op forward and full backward hook per Linear."""
    import numpy as np

    model = _linear_relu(lib, HOOKED_LAYERS, HOOKED_WIDTH, seed)
    if hooks:
        for layer in model:
            if isinstance(layer, lib.nn.Linear):
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


CASES = {
    "engine": [
        # targets: the speed issue's (MLP <= 1.0x, CNN <= 1.2x, hooks <= 1.0x torch's)
        ("MLP 784-1024x3-10 SGD step, batch 128", mlp_step, 1.0, (7, 3), (3, 1)),
        (f"{CHAIN_OPS} tiny ops fwd+bwd ({CHAIN_NUMEL} elems)", tiny_chain, 1.5, (7, 3),
         (3, 1)),
        ("Adam step, the MLP's 2.9 M parameters", mlp_adam, 1.0, (9, 3), (3, 1)),
        (f"stage: {STAGE_LAYERS} x Linear({STAGE_WIDTH})+ReLU fwd+bwd, {STAGE_ROWS} rows",
         stage_step, 1.0, (9, 3), (3, 1)),
    ],
    "nn": [
        ("CNN 2xConv2d 3x3+pool+Linear fwd+bwd, b 64", small_cnn, 1.2, (5, 2), (3, 1)),
        ("sdpa fwd+bwd b 8, 8 heads, 128 tokens, 64 dims", attention, 1.5, (7, 3), (3, 1)),
        # a difference of two ~2 ms steps: --quick keeps every repeat (about 2 s in all);
        # with 3 x 2 calls one run said 1.69x, with 15 x 10 in turn six runs 0.85x-1.06x
        (f"hook cost: {HOOKED_LAYERS} fwd + {HOOKED_LAYERS} full bwd hooks", hook_overhead,
         1.0, (15, 10), (15, 10)),
    ],
}
# each case: (label, workload, target, (repeats, calls per repeat), the same under --quick)


def run(suite: str, quick: bool = False) -> list[dict]:
    """The rows of suite ``suite`` ("engine" or "nn"); torch's times are None without it."""
    import disthook

    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rows = []
    for label, workload, target, full, fast in CASES[suite]:
        repeats, inner = fast if quick else full
        times, ratio = measure(workload, [disthook] if torch is None else [disthook, torch],
                               repeats, inner, clock=time.thread_time)
        rows.append(comparison(suite, label, times[0], times[1] if torch is not None else None,
                               target, "torch", ratio))
    return rows
