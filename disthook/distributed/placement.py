"""Where a deployed model's parts go, decided on the client as pure functions: the stages'
split points (balanced by parameter count or measured forward time, or given), the workers
that hold them, and the micro-batches a batch is cut into. No sockets here."""
from __future__ import annotations

import copy
import itertools
import time

import numpy as np

from disthook import random
from disthook.autograd import grad_mode
from disthook.distributed.schedule import SCHEDULES
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor

__all__ = ["bare_copy", "chains_its_children", "check_options", "check_ties",
           "choose_workers", "forward_times", "micro_batch_sizes", "partition",
           "split_points", "split_rows"]


def partition(sizes: list[int], stages: int) -> list[int]:
    """Split points (indices where stages 2..N start) for contiguous stages of ``sizes``
    whose largest total is as small as possible; every stage gets at least one item."""
    n = len(sizes)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot cut {n} children into {stages} stages: need 1 <= stages <= {n}")
    prefix = [0, *itertools.accumulate(sizes)]

    def cuts_for(limit: int) -> list[int] | None:  # greedy: fill each stage up to the limit
        cuts, start = [], 0
        for k in range(stages - 1):
            end = start + 1
            # leave at least one item for each of the stages after this one
            while end < n - (stages - 1 - k) and prefix[end + 1] - prefix[start] <= limit:
                end += 1
            cuts.append(end)
            start = end
        return cuts if prefix[n] - prefix[start] <= limit else None

    lo, hi = max(sizes, default=0), prefix[n]
    while lo < hi:
        mid = (lo + hi) // 2
        if cuts_for(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return cuts_for(lo)


def check_options(chunks, schedule: str, balance: str, split_points, sample_input) -> None:
    """``deploy()``'s options, each with the error that names what it takes."""
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive int, got {chunks!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be 'gpipe', '1f1b', 'zb-h1' or 'zb-batched', got "
                         f"{schedule!r}")
    if balance not in ("params", "time"):
        raise ValueError(f"balance must be 'params' or 'time', got {balance!r}")
    if balance == "time" and split_points is None and not isinstance(sample_input, Tensor):
        raise ValueError("balance='time' times the children's forward on an example batch: "
                         "pass sample_input=<a Tensor shaped like the model's input>")


def split_points(sizes: list[int], stages: int, given=None) -> list[int]:
    """Where stages 2..N start among the children of ``sizes``: balanced by ``partition``,
    or ``given`` checked (stages - 1 increasing indices between 1 and len(sizes) - 1)."""
    if given is None:
        return partition(sizes, stages)
    given = list(given)
    if (len(given) != stages - 1 or given != sorted(set(given))
            or (given and not 0 < given[0] <= given[-1] < len(sizes))):
        raise ValueError(f"split_points={given} must be {stages - 1} increasing "
                         f"indices between 1 and {len(sizes) - 1}")
    return given


def choose_workers(alive: list, stages: int, placed: dict[str, set]) -> list:
    """The ``stages`` least loaded of the ``alive`` workers, in registration order among
    equals; a worker's load is the stages it holds, as reported (``w.stages``) or as this
    client placed them a moment ago (``placed``: worker id -> stage names)."""
    if len(alive) < stages:
        raise ValueError(f"{stages} stages need {stages} workers; the cluster has {len(alive)}")
    return sorted(alive, key=lambda w: len(set(w.stages) | placed.get(w.id, set())))[:stages]


def bare_copy(module: Module) -> Module:
    """A copy of ``module`` without the user's hooks, to time its children here."""
    twin = copy.deepcopy(module)
    for m in twin.modules():
        for hooks in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks,
                      m._backward_pre_hooks):
            hooks.clear()
    return twin


def check_ties(stage_modules: list) -> None:
    """A tensor shared by two stages (tied weights: an embedding and an output head) would
    become two tensors, each trained apart: ``ValueError`` naming both places."""
    owner: dict[int, tuple[int, str]] = {}
    for stage, module in enumerate(stage_modules):
        for name, t in [*module.named_parameters(remove_duplicate=False),
                        *module.named_buffers(remove_duplicate=False)]:
            first = owner.setdefault(id(t), (stage, name))
            if first[0] != stage:
                raise ValueError(
                    f"{first[1]} (stage {first[0]}) and {name} (stage {stage}) are one tensor "
                    "(tied weights): put the modules that share it in the same stage "
                    "(split_points), or deploy fewer stages")


def chains_its_children(module: Module) -> bool:
    """Whether ``module``'s forward is ``nn.Sequential``'s own (a ``Sequential``, or a
    subclass that keeps its forward): then a deployment runs its children's stages one after
    the other, worker to worker; any other forward runs on the client as written. Decided
    from the class alone: nothing runs to find out."""
    from disthook.nn.modules.container import Sequential

    return type(module).forward is Sequential.forward and "forward" not in module.__dict__


def forward_times(module: Module, x: Tensor, repeats: int = 3) -> list[int]:
    """Each child's forward time on ``x`` (chained, no_grad, best of ``repeats``), in
    microseconds, for balancing stages by time: the one placement that runs the children
    (on a copy, here), because ``balance="time"`` asks for it."""
    twin = bare_copy(module)
    best = [float("inf")] * len(twin._modules)
    state = random._stream_state()
    with grad_mode.no_grad():
        for _ in range(repeats):
            h = x
            for i, child in enumerate(twin._modules.values()):
                t0 = time.perf_counter()
                h = child(h)
                best[i] = min(best[i], time.perf_counter() - t0)
    random._set_stream_state(state)
    return [max(1, int(t * 1e6)) for t in best]


def micro_batch_sizes(rows: int, chunks: int) -> list[int]:
    """Rows per micro-batch, as torch.tensor_split cuts: the first rows % chunks get one
    more."""
    return [rows // chunks + (i < rows % chunks) for i in range(chunks)]


def split_rows(arr: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """``arr`` cut along dim 0 into consecutive parts of ``sizes`` rows (views)."""
    bounds = np.cumsum([0, *sizes])
    return [arr[a:b] for a, b in zip(bounds, bounds[1:])]
