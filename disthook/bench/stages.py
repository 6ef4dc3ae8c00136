"""An MLP cut into pipeline stages, which the peers and scaleout suites build in either
library, and torch's side of it run in spawned processes (torch.distributed.pipelining over
gloo on CPU, one thread per process). This module imports no suite.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from dataclasses import dataclass

from disthook.bench.timing import median_seconds

LR = 0.01
LAYERS = 16  # of the scaleout and workspan model
SPAWNED_TIMEOUT_S = 600.0  # for one run of torch's processes, start to end


@dataclass(frozen=True)
class Mlp:
    """Linear layers ``sizes[0] -> sizes[1] -> ...`` with a ReLU after each but the last,
    trained on ``batch`` rows with cross-entropy over the last layer's outputs. ``cuts``:
    the indices of the Linear layers that start stages 2..p (empty: one stage)."""

    sizes: tuple[int, ...]
    cuts: tuple[int, ...]
    batch: int

    def __post_init__(self) -> None:
        layers = len(self.sizes) - 1
        if list(self.cuts) != sorted(set(self.cuts)) or not all(0 < c < layers
                                                                  for c in self.cuts):
            raise ValueError(f"cuts {self.cuts} must rise strictly within 1..{layers - 1} "
                             f"(the MLP has {layers} Linear layers)")

    @property
    def stages(self) -> int:
        return len(self.cuts) + 1

    def split_points(self) -> list[int]:
        """The cuts as ``deploy(split_points=...)`` takes them: indices of the whole model's
        children (a Linear and its ReLU are two children)."""
        return [2 * c for c in self.cuts]

    def stage(self, nn, index: int):
        """Stage ``index`` as an ``nn.Sequential`` of ``nn`` (disthook's or torch's)."""
        bounds = (0, *self.cuts, len(self.sizes) - 1)
        layers = []
        for i in range(bounds[index], bounds[index + 1]):
            layers.append(nn.Linear(self.sizes[i], self.sizes[i + 1]))
            if i < len(self.sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def whole(self, nn):
        """Every stage's layers in one ``nn.Sequential``."""
        return nn.Sequential(*(layer for s in range(self.stages) for layer in self.stage(nn, s)))

    def data(self, lib):
        """Inputs and class targets of one step (the same seed in either library)."""
        lib.manual_seed(0)
        return lib.randn(self.batch, self.sizes[0]), lib.randint(0, self.sizes[-1],
                                                                 (self.batch,))


def torch_stage(spec: Mlp, index: int):
    """Stage ``index`` in torch, seeded by its index (module level: RPC sends it by name)."""
    import torch

    torch.manual_seed(index)
    return spec.stage(torch.nn, index)


def one_torch_step(spec: Mlp):
    """One training step of the whole model in this process with torch on one thread, as a
    callable."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = spec.whole(torch.nn)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = spec.data(torch)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def quiet() -> None:
    """torch's deprecation notices about its own internals are not ours to show. Some it
    raises under ``simplefilter("always")``, past any filter: those are dropped where
    warnings are shown."""
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch")
    show = warnings.showwarning

    def show_ours(message, category, filename, lineno, file=None, line=None):
        if not (issubclass(category, (UserWarning, DeprecationWarning))
                and f"{os.sep}torch{os.sep}" in filename):
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = show_ours


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# what torch's processes import before they start (seconds of CPU each): a fork server
# imports them once for every process it starts, where spawning imported them in each
FORK_SERVER_PRELOAD = ("torch", "torch.distributed.pipelining", "torch.distributed.rpc",
                       "torch.distributed.autograd", "torch.distributed.optim")


def _start_method(fn) -> str:
    """"forkserver" where the platform has it, its server importing torch's distributed
    modules and ``fn``'s module once (set before the server first starts; it serves this
    process's later runs too, with the environment it started with); "spawn" elsewhere.
    Either way no process starts as a copy of this one (its threads, sockets, torch's
    state)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.set_forkserver_preload([*FORK_SERVER_PRELOAD, __name__, fn.__module__])
    return "forkserver"


def spawned(fn, nprocs: int, *args, read=lambda f: float(f.read())):
    """Run ``fn(rank, port, *args, out)`` in ``nprocs`` new processes (from a fork server
    that has torch imported, see ``_start_method``), one thread each; what rank 0 wrote to
    the file ``out``, read by ``read`` (by default the seconds it wrote)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "seconds")
        env = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        # torch's notices about its own internals, raised in its RPC threads too
        env["PYTHONWARNINGS"] = "ignore::DeprecationWarning,ignore::UserWarning"
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # what the spawned children inherit
        try:
            context = mp.start_processes(fn, args=(_free_port(), *args, out), nprocs=nprocs,
                                         join=False, start_method=_start_method(fn))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        deadline = time.monotonic() + SPAWNED_TIMEOUT_S
        try:
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"torch's {nprocs} processes ran past "
                                       f"{SPAWNED_TIMEOUT_S:.0f} s")
        finally:  # on any way out, none is left running
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
                process.join()
        with open(out) as f:
            return read(f)


def torch_pipeline(spec: Mlp, rank: int, schedule: str, micro: int):
    """In a rank of torch's process group: the rank's PipelineStage of ``spec`` and a
    callable running one training step of the ``schedule`` ("gpipe" or "1f1b") on it."""
    import torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    p = spec.stages
    module = torch_stage(spec, rank)
    stage = PipelineStage(module, rank, p, torch.device("cpu"))
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    plan = kind(stage, micro, loss_fn=torch.nn.functional.cross_entropy)
    opt = torch.optim.SGD(module.parameters(), lr=LR)
    x, y = spec.data(torch)

    def step():
        opt.zero_grad()
        if rank == 0:
            plan.step(x)
        elif rank == p - 1:
            plan.step(target=y, losses=[])
        else:
            plan.step()
        opt.step()

    return stage, step


def _pipelining_process(rank: int, port: int, spec: Mlp, schedule: str, micro: int,
                        repeats: int, out: str) -> None:
    quiet()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=spec.stages,
                            init_method=f"tcp://127.0.0.1:{port}")
    try:
        _, step = torch_pipeline(spec, rank, schedule, micro)
        dist.barrier()
        seconds = median_seconds(step, repeats)
        if rank == 0:
            with open(out, "w") as f:
                f.write(repr(seconds))
    finally:
        dist.destroy_process_group()


def pipelining_seconds(spec: Mlp, schedule: str, micro: int, repeats: int) -> float:
    """Median seconds of a training step of ``spec`` under torch.distributed.pipelining
    (``schedule`` "gpipe" or "1f1b", ``micro`` micro-batches), one process per stage."""
    if spec.stages < 2:
        raise ValueError(f"torch pipelining needs at least 2 stages, got {spec.stages}")
    return spawned(_pipelining_process, spec.stages, spec, schedule, micro, repeats)


# ---- the model of scaleout and workspan: 16 x Linear(w, w), p equal stages -----------
def bound(p: int, m: int) -> float:
    """The speedup of p equal stages over one at m micro-batches with no cost per
    micro-batch: p·m time units of work in m + p - 1 units of the slowest stage."""
    return p * m / (m + p - 1)


def check(stages, width: int, batch: int, micro: int, suite: str = "scaleout") -> None:
    """Refuse, naming the value and what is allowed, what the scaleout and workspan suites
    cannot run."""
    allowed = [p for p in range(1, LAYERS + 1) if LAYERS % p == 0]
    wrong = [p for p in stages if p not in allowed]
    if not stages or wrong:
        raise ValueError(f"{suite}: --stages {','.join(map(str, stages))}: each p must "
                         f"divide the {LAYERS} layers into equal stages: one of "
                         f"{', '.join(map(str, allowed))}")
    if width < 1:
        raise ValueError(f"{suite}: --width {width}: must be at least 1")
    if micro < max(stages):
        raise ValueError(f"{suite}: --micro {micro}: torch's 1F1B needs at least as many "
                         f"micro-batches as stages, here {max(stages)}")
    if batch < micro or batch % micro:
        raise ValueError(f"{suite}: --batch {batch}: must be a multiple of --micro {micro}, "
                         "so that every micro-batch has the same rows")


def spec(p: int, width: int, batch: int) -> Mlp:
    """The model cut into ``p`` equal stages."""
    return Mlp((width,) * (LAYERS + 1), tuple(range(LAYERS // p, LAYERS, LAYERS // p)), batch)
